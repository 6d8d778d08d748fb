//! The server's clock.

use cairn_core::Micros;
use std::time::{SystemTime, UNIX_EPOCH};

/// Server time now; every stored timestamp comes from here.
pub fn now_micros() -> Micros {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}
