//! `cairn-core`: the rules of Cairn and its one error type, as pure
//! functions over plain structs.
//!
//! This crate owns what `docs/rules.md` specifies, each rule in exactly one
//! function:
//!
//! - [`session`]: session ids, labels and tree moves;
//! - [`plan`]: the `update_plan` checklist (one step in progress, the
//!   simple-task hint, stable item ids);
//! - [`plan_mode`]: the plan-mode state machine, step dependencies,
//!   modifications, and which tools are blocked while planning;
//! - [`todo`]: the per-agent todo merge;
//! - [`liveness`]: leases and the states a session's agent moves through;
//! - [`webhook`]: webhook subscriptions and the event types they name;
//! - [`access`]: who may do what: principals, roles, scopes;
//! - [`deadline`]: approval deadlines and their WAIT, REJECT and ESCALATE
//!   policies;
//! - [`task`]: a session as an A2A task (which task state it is in);
//! - [`command`]: every write as a value, the one shape all writes take;
//! - [`error`]: every way a request can fail, with the exact texts.
//!
//! It must never import tonic, tokio, redb or prost (its manifest has none
//! of them, so a rule that reaches for one does not compile): the store
//! loads and saves these types, the server converts requests into them.
//!
//! The types derive serde so the store can persist them; every struct uses
//! `#[serde(default)]` so records written by an older Cairn still load after
//! a field is added.

pub mod access;
pub mod command;
pub mod deadline;
pub mod duration;
pub mod error;
pub mod inbox;
pub mod limits;
pub mod liveness;
pub mod plan;
pub mod plan_mode;
pub mod revision;
pub mod session;
pub mod task;
pub mod time;
pub mod todo;
pub mod webhook;

pub use limits::Limits;
pub use plan_mode::SessionPlan;
pub use revision::check_expected_revision;
pub use time::{Micros, rfc3339};

/// Whether a value is its type's default: encodings leave such fields out
/// (`skip_serializing_if`), and reading fills them back in.
pub fn is_zero<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}
