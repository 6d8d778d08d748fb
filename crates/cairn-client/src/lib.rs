//! `cairn-client`: Cairn's clients for people and agents, over the
//! generated `cairn.v1` client.
//!
//! - [`cli`]: the `cairn` subcommands (sessions, plans, todos, watch and
//!   its live board, wait);
//! - [`mcp`]: `cairn mcp`, the planning tools over MCP for one agent;
//! - [`hook`]: `cairn hook`, Claude Code, Codex and Gemini CLI mirrored
//!   through their own hooks;
//! - [`conn`]: reaching the server: TLS, the bearer token, deadlines;
//! - [`view`]: what both share: names of statuses and enums and their
//!   parsing, the JSON shapes agents write and read, timestamps, progress,
//!   and the one call that decides on an approval.
//!
//! It speaks only the API: it must never import the store or the server.

pub mod cli;
pub mod conn;
pub mod hook;
pub mod mcp;
pub mod view;
