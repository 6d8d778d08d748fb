//! `cairn-store`: durable state. The storage seam, the mutations, the
//! revision log, compaction and the watch hub. The engines live in their
//! own crates behind the seam: `cairn-redb` (embedded) and `cairn-etcd`.
//!
//! ```text
//!  server ──write(op)──▶ Store ──▶ Backend (redb: bounded queue ▶ one writer thread)
//!                                    │ runs ops in ONE transaction, commits durably
//!                                    ├──▶ answers each op
//!                                    └──▶ Hub::dispatch(committed revisions) ──▶ watchers
//!  server ──read(f)───▶ Store ──▶ Backend (redb: reader threads, one snapshot per batch)
//! ```
//!
//! - [`seam`]: what mutations need from a database ([`ReadTxn`],
//!   [`WriteTxn`]) and what the store needs from an engine ([`Backend`]);
//! - [`ops`]: [`ops::apply`], the one write path: a `cairn-core` command
//!   applied inside a transaction, access checked once;
//! - [`reads`]: the reads callers make, each through the access rules and
//!   the hot plans; [`inbox`]: what awaits a caller's approval, from the
//!   index of waiting items;
//! - [`records`]: what is stored and what the log carries;
//! - [`hub`]: fan-out of committed revisions to watchers;
//! - [`cache`]: the hot plans, answered from memory;
//! - [`lessor`]: the leases a server follows: signs of life in memory, a
//!   deadline index of what is due; [`liveness`]: keep-alives, and the
//!   driver that writes each transition as a command;
//! - [`deadlines`]: the approval deadlines that act, queued;
//!   [`approvals`]: the driver that applies each as it passes;
//! - [`compactor`]: trimming the log; [`health`]: whether the store serves;
//! - [`webhooks`]: webhook subscriptions and what a revision tells them;
//!   [`outbox`]: the log read from a durable cursor per subscription,
//!   dead letters;
//! - [`telemetry`]: the store's metrics (commits, revisions, watch streams).
//!
//! Every mutation gets its own revision (+1, store-wide) and one log entry
//! holding all of its events, written in the same transaction as the data,
//! so the log and the state can never disagree. A mutation is answered
//! only after the commit holding it is on disk.
//!
//! This crate must never import the server, the clients or the generated
//! API: it speaks `cairn-core` types only.

pub mod approvals;
pub mod cache;
pub mod clock;
pub mod codec;
pub mod compactor;
pub mod deadlines;
pub mod health;
pub mod hub;
pub mod inbox;
pub mod lessor;
pub mod liveness;
pub mod ops;
pub mod outbox;
pub mod reads;
pub mod records;
pub mod seam;
pub mod store;
pub mod telemetry;
pub mod webhooks;

pub use clock::now_micros;
pub use health::Readiness;
pub use ops::Applied;
pub use seam::{Backend, Ctx, PENDING_REVISION, ReadTxn, WriteTxn};
pub use store::Store;
