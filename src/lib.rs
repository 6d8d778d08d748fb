//! Cairn: durable, observable plans and todo lists for LLM agents.
//!
//! Architecture, from the wire inwards:
//!
//! - [`api`]: tonic services for `cairn.v1` (sessions, plans and plan mode,
//!   todos, watch), health and reflection. Converts proto to domain types at
//!   the boundary and maps [`error::Error`] to `tonic::Status` once.
//! - [`store`]: redb tables, the revision-keyed event log, and the single
//!   writer thread that group-commits mutations and acknowledges them only
//!   once they are durable.
//! - [`watch`]: fan-out of committed revisions to watch streams, catch-up
//!   from the log for watchers that fall behind, and `Wait`.
//! - [`domain`]: the rules as pure functions over plain structs: the
//!   `update_plan` checklist, the plan-mode state machine, the todo merge.
//! - [`bench`]: `cairn bench`, the load generator behind BENCHMARKS.md.
//! - [`cli`]: the `cairn` client subcommands, the seed's box rendering and
//!   the live terminal board.
//! - [`web`]: the live web dashboard (`--web-listen`), fed by the watch
//!   stream over server-sent events.
//! - [`mcp`]: `cairn mcp`, the seed tools over MCP for one agent.
//! - [`config`]: the `cairn` command line, every flag with a `CAIRN_*` env var.
//! - [`pb`]: code generated from `proto/` by `build.rs` (protox, no protoc).

pub mod api;
pub mod bench;
pub mod cli;
pub mod config;
pub mod domain;
pub mod error;
pub mod mcp;
pub mod store;
pub mod watch;
pub mod web;

/// Generated `cairn.v1` messages, clients and servers.
#[allow(clippy::pedantic, clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("cairn.v1");

    /// Encoded descriptor set of `cairn.v1`, served by reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("cairn_descriptor");
}
