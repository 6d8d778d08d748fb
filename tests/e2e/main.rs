//! End-to-end tests of the `cairn` binary: what only the real process
//! shows (crashes, file damage, a full disk, memory, connections, the log,
//! the CLI as a person runs it). In-process API tests are `tests/api`.

// Test code: a failed unwrap is a failed test, and a workflow test reads
// best as one long story.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

mod a2a;
mod backup;
mod cli;
mod connections;
mod crash;
pub(crate) mod faults;
mod hooks;
mod identity;
mod logs;
mod metrics;
mod replicas;
mod web;

/// The bootstrap admin's token of [`with_admin`] servers.
pub const ADMIN_TOKEN: &str = "a-bootstrap-admin-token-0123456789";

/// A server with `--auth token` and [`ADMIN_TOKEN`] as its admin, data in
/// `dir`, with `extra` flags.
pub fn with_admin(dir: &std::path::Path, extra: &[&str]) -> cairn_testkit::Proc {
    let token = dir.join("admin.token");
    std::fs::write(&token, ADMIN_TOKEN).unwrap();
    let mut args = vec![
        "--auth",
        "token",
        "--admin-token-file",
        token.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    cairn_testkit::Proc::start(&bin(), &dir.join("data"), &args)
}

/// The binary under test: this build's, or `CAIRN_BIN` (to measure another
/// build, e.g. a release one, with the same tests).
pub fn bin() -> String {
    std::env::var("CAIRN_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_cairn").to_owned())
}

/// Runs a prepared `cairn` command with `stdin` piped in, as a shell or an
/// agent CLI runs it: its output, and how long it took (at most 30 s).
pub async fn run_with_stdin(
    cmd: &mut tokio::process::Command,
    stdin: &str,
) -> (std::process::Output, std::time::Duration) {
    use std::process::Stdio;
    use tokio::io::AsyncWriteExt as _;
    let started = std::time::Instant::now();
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    let out = tokio::time::timeout(std::time::Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("cairn finishes")
        .unwrap();
    (out, started.elapsed())
}
