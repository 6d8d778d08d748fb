//! Assertions on statuses.

use tonic::{Code, Status};
use tonic_types::StatusExt;

/// Asserts code, exact message and `ErrorInfo` reason of an error.
#[track_caller]
pub fn assert_status(status: &Status, code: Code, message: &str, reason: &str) {
    assert_eq!(status.code(), code, "code of {status:?}");
    assert_eq!(status.message(), message, "message of {status:?}");
    let info = status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("no ErrorInfo in {status:?}"));
    assert_eq!(info.reason, reason, "reason of {status:?}");
    assert_eq!(info.domain, "cairn.dev");
}

/// The `BadRequest` field of an INVALID_ARGUMENT (or limit) error.
#[track_caller]
pub fn bad_field(status: &Status) -> String {
    status
        .get_details_bad_request()
        .and_then(|b| b.field_violations.first().map(|v| v.field.clone()))
        .unwrap_or_else(|| panic!("no BadRequest in {status:?}"))
}

/// The start of a long text, for assertion messages.
pub fn short(text: &str) -> String {
    text.chars().take(40).collect()
}
