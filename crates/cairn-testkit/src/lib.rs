//! `cairn-testkit`: what Cairn's end-to-end tests share. Test code only
//! (`publish = false`, a dev-dependency): an in-process server
//! ([`server::TestServer`]), the real binary as a child process
//! ([`process::Proc`]), request builders, status assertions and watch
//! stream readers.

// Test helpers: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

pub mod build;
pub mod check;
pub mod etcd;
pub mod modules;
pub mod process;
pub mod server;
pub mod stream;
pub mod tools;

pub use build::*;
pub use check::*;
pub use etcd::EtcdCluster;
pub use process::Proc;
pub use server::{Authed, Bearer, TestServer, on_etcd, rev};
