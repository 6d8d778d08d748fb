//! The `cairn.v1` services.
//!
//! One handler style for every service, written by [`rpcs!`]: each trait
//! method opens a `tracing` span, takes the authenticated caller, calls a
//! function that converts the request ([`crate::convert`]), makes one call
//! to the store (a command to apply, or a read through the access rules)
//! and builds the response; the error is mapped once, through
//! [`crate::status::status`]. No handler checks access or touches the plan
//! cache: the store does both.

pub mod a2a;
pub mod admin;
pub mod auth;
pub mod plan;
pub mod session;
pub mod todo;
pub mod watch;

use std::sync::Arc;

use cairn_core::Limits;
use cairn_core::error::Error;
use cairn_store::Store;

use crate::auth::{Auth, Authenticated};
use crate::status::status;

/// Rules the operator configures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Size and count limits.
    pub limits: Limits,
    /// Plans with fewer items are answered with the simple-task hint and not
    /// stored; 0 stores every plan.
    pub simple_task_threshold: usize,
    /// Tools (`tool`) and tool actions (`tool:action`) blocked in plan mode.
    pub blocked_tools: Vec<String>,
}

/// The tools blocked while planning (docs/rules.md, plan mode), in both
/// spellings agents use.
pub const DEFAULT_BLOCKED_TOOLS: &[&str] = &[
    "write_file",
    "cron:create",
    "cron:delete",
    "cron_create",
    "cron_delete",
];

impl Default for Policy {
    fn default() -> Self {
        Policy {
            limits: Limits::default(),
            simple_task_threshold: 4,
            blocked_tools: DEFAULT_BLOCKED_TOOLS
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        }
    }
}

/// What every service shares.
#[derive(Debug, Clone)]
pub struct State {
    /// The store.
    pub store: Store,
    /// The operator's rules.
    pub policy: Arc<Policy>,
    /// Heartbeat interval of watch streams that ask for none.
    pub progress_interval: std::time::Duration,
    /// Who callers are.
    pub auth: Arc<Auth>,
    /// Webhook deliveries: the sealing key and what URLs are allowed.
    pub webhooks: Arc<crate::webhooks::Webhooks>,
}

/// Implements a service trait in the one handler style: each RPC opens its
/// span (the attributes given), takes who is calling, awaits its function
/// `self.$inner(&who, request)` and maps the error once. Streaming RPCs
/// name their stream types first; one that reads request headers says
/// `with metadata`, and its function takes them before the request.
macro_rules! rpcs {
    (
        impl $service:ident for $api:ty {
            $(type $stream:ident = $stream_ty:ty;)*
            $(
                $(#[$attr:meta])*
                fn $name:ident($request:ident: $req:ty) -> $resp:ty => $inner:ident $(with $metadata:ident)?;
            )*
        }
    ) => {
        #[tonic::async_trait]
        impl $service for $api {
            $(type $stream = $stream_ty;)*
            $(
                $(#[$attr])*
                async fn $name(
                    &self,
                    $request: tonic::Request<$req>,
                ) -> Result<tonic::Response<$resp>, tonic::Status> {
                    let who = $crate::services::authenticated(&$request)?;
                    self.$inner(&who, $({ let $metadata = $request.metadata().clone(); $metadata },)? $request.into_inner())
                        .await
                        .map(tonic::Response::new)
                        .map_err($crate::status::status)
                }
            )*
        }
    };
}
pub(crate) use rpcs;

/// Who made a request, as the authentication edge left it.
pub fn authenticated<T>(request: &tonic::Request<T>) -> Result<Authenticated, tonic::Status> {
    request
        .extensions()
        .get::<Authenticated>()
        .cloned()
        .ok_or_else(|| {
            status(Error::Unauthenticated(
                "the request carries no authenticated caller".into(),
            ))
        })
}
