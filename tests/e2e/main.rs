//! End-to-end tests: the real server on `127.0.0.1:0`, a real redb file in a
//! temp dir, and the generated gRPC clients. One test binary keeps link time
//! down; each module covers one surface.

mod common;
mod plan_mode;
mod plans;
mod server;
mod sessions;
mod todos;
