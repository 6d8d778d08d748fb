//! System tools some tests need (etcd, root for a tmpfs): on a machine
//! without one, such a test skips with one loud line naming the tool and
//! how to get it, so `cargo test` passes with only Rust. Under CI
//! (`CI=true`) a missing tool fails the test instead: coverage never drops
//! silently there.

use std::process::{Command, Stdio};

/// Whether `program args…` runs and succeeds.
pub fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether a test needing `what` may go on: `present` says whether it is
/// here. Absent: under CI this panics; elsewhere it prints why the test is
/// skipped and returns false (the test then returns early).
#[must_use]
pub fn needs(present: bool, what: &str, how: &str) -> bool {
    let under_ci = std::env::var("CI").is_ok_and(|v| v == "true");
    match decide(present, under_ci) {
        Decision::Run => true,
        Decision::Fail => {
            panic!("{what} is missing, and under CI a missing tool fails the run: {how}")
        }
        Decision::Skip => {
            eprintln!("SKIPPED (needs {what}: {how})");
            false
        }
    }
}

/// What a test needing a tool does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The tool is here.
    Run,
    /// Missing, on a developer's machine: skip, loudly.
    Skip,
    /// Missing under CI: fail, so coverage never drops silently.
    Fail,
}

/// The rule of [`needs`], without the environment.
pub fn decide(present: bool, under_ci: bool) -> Decision {
    match (present, under_ci) {
        (true, _) => Decision::Run,
        (false, false) => Decision::Skip,
        (false, true) => Decision::Fail,
    }
}

/// Whether the etcd tests may run: the `etcd` binary is installed.
#[must_use]
pub fn etcd() -> bool {
    needs(
        runs("etcd", &["--version"]),
        "the etcd binary",
        "Debian: apt-get install etcd-server",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hardening round 2, item 18: `cargo test` on a machine without etcd
    /// failed 7 tests; a missing tool now skips there, and fails under CI.
    #[test]
    fn item_18_a_missing_tool_skips_except_under_ci() {
        assert_eq!(decide(true, true), Decision::Run);
        assert_eq!(decide(true, false), Decision::Run);
        assert_eq!(decide(false, false), Decision::Skip);
        assert_eq!(decide(false, true), Decision::Fail);
        assert!(!runs("cairn-no-such-tool-anywhere", &[]));
        assert!(runs("true", &[]));
    }
}
