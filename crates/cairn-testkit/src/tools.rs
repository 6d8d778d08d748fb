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
    if present {
        return true;
    }
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "{what} is missing, and under CI a missing tool fails the run: {how}"
    );
    eprintln!("SKIPPED (needs {what}: {how})");
    false
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
