//! Optimistic concurrency: a write may name the revision it expects.

use crate::error::{Error, Result};

/// Checks an optimistic-concurrency precondition against a resource's
/// revision (0 for a resource that does not exist yet).
pub fn check_expected_revision(expected: Option<u64>, actual: u64) -> Result<()> {
    match expected {
        Some(expected) if expected != actual => Err(Error::RevisionMismatch { expected, actual }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_revision() {
        assert!(check_expected_revision(None, 5).is_ok());
        assert!(check_expected_revision(Some(5), 5).is_ok());
        assert_eq!(
            check_expected_revision(Some(4), 5),
            Err(Error::RevisionMismatch {
                expected: 4,
                actual: 5
            })
        );
    }
}
