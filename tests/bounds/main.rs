//! Memory bounds of the `cairn` binary, in a test binary of their own:
//! these tests start servers that take thousands of large plans while
//! dozens of readers stall, and measure peak RSS. Run beside the e2e suite
//! (etcd clusters and replicas starting at the same time on two cores),
//! the starved test client lost its connections mid-catch-up; cargo runs
//! test binaries one after another, so here they have the machine.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

mod bounds;

/// The binary under test: this build's, or `CAIRN_BIN`.
pub fn bin() -> String {
    std::env::var("CAIRN_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_cairn").to_owned())
}
