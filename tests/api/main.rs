//! The server in-process over real gRPC: `127.0.0.1:0`, a real redb file in
//! a temp dir, the generated clients. One test binary keeps link time down;
//! each module covers one service or guarantee.

// Test code: a failed unwrap is a failed test, and a workflow test reads
// best as one long story.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

mod access;
mod browsers;
mod deadlines;
mod inbox;
mod inputs;
mod leases;
mod plan_mode;
mod plans;
mod server;
mod sessions;
mod todos;
mod watch;
mod watch_checker;
