//! `cairn-server`: Cairn as a network service. The `cairn.v1` gRPC
//! services, watch streams and `Wait`, the web dashboard, and the serving
//! of connections.
//!
//! - [`services`]: the tonic services; thin handlers over service
//!   functions that the dashboard calls too;
//! - [`convert`]: proto <-> core types (proto types stop here), and
//!   [`status`]: errors to gRPC statuses, once;
//! - [`watch`]: the watch stream (snapshot, replay, live, heartbeats) and
//!   `Wait`, over the store's hub and log;
//! - [`auth`]: bearer tokens to principals; [`tls`]: certificates;
//! - [`web`]: the dashboard (`--web-listen`); [`site`]: the names and
//!   origins browsers may reach either listener under (DNS rebinding, CORS);
//! - [`webhooks`]: signed deliveries of approvals, completions and lost
//!   agents from the log, at least once;
//! - [`conn`]: the accept loop and its bounds; [`serve`]: putting it all on
//!   a listener, health included.
//!
//! It owns its configuration types ([`ServerConfig`]); it must never import
//! a client crate or anything of the command line.

pub mod auth;
pub mod conn;
pub mod connect;
pub mod convert;
pub mod metrics;
pub mod serve;
pub mod services;
pub mod site;
pub mod status;
pub mod tls;
pub mod watch;
pub mod web;
pub mod webhooks;

pub use serve::{
    DEFAULT_MAX_REQUEST_BYTES, ServeError, ServerConfig, WebRoutes, serve, serve_store,
};
pub use services::{DEFAULT_BLOCKED_TOOLS, Policy, State};
