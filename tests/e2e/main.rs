//! End-to-end tests: the real server on `127.0.0.1:0`, a real redb file in a
//! temp dir, and the generated gRPC clients. One test binary keeps link time
//! down; each module covers one surface.

// Test code: a failed unwrap is a failed test, and a workflow test reads
// best as one long story.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

mod bounds;
mod cli;
mod common;
mod connections;
mod crash;
mod faults;
mod inputs;
mod plan_mode;
mod plans;
mod process;
mod server;
mod sessions;
mod todos;
mod watch;
mod watch_checker;
mod web;
