//! `cairn-etcd`: the store on an etcd v3 cluster, so that several
//! stateless Cairn replicas share one state and survive losing a machine.
//!
//! ```text
//!  one etcd watch on the whole prefix ─▶ mirror: apply each message to the
//!                  copy (a persistent map: snapshots are O(1) clones), then
//!                  log-key versions ─▶ Hub::dispatch (watchers, Wait)
//!  Store::read ──▶ barrier: one linearizable read of the log key's revision,
//!                  shared by the reads waiting ─▶ wait until the copy has
//!                  it ─▶ run the read on a snapshot of the copy
//!  Store::write ─▶ run the mutation on a snapshot of the copy (revision S),
//!                  buffering changes, noting what it read ─▶ claims: if an
//!                  earlier write of this replica changes what it read and
//!                  is not in S, wait for it and run again ─▶ ONE etcd Txn:
//!                  compare every key read (mod_revision as read) and every
//!                  range read (nothing newer than S); put/delete the
//!                  changes; put the log key
//!                  ├─ compare failed (another replica won): run it again
//!                  │  once the copy has what beat it
//!                  └─ committed at etcd revision R: run the mutation once
//!                     more on the same snapshot, knowing R, to answer
//!                  A refusal (nothing to write) is fenced like a read first.
//! ```
//!
//! - [`keys`]: where each record lives under the deployment's prefix;
//! - [`mirror`]: the watch-fed copy, loaded page by page at start;
//! - [`txn`]: the read and write transactions over a snapshot of it;
//! - [`barrier`]: the shared linearizable read that fences reads;
//! - [`claims`]: this replica's writes in order, per key;
//! - [`batcher`]: independent writes ready together, one etcd transaction;
//! - [`follow`]: the watch feeding the copy and the hub;
//! - [`history`]: reads of the log key's past versions (catch-up, and
//!   whether a commit whose answer was lost landed);
//! - [`presence`]: which replicas are alive, for adopting a dead one's
//!   session leases;
//! - [`client`]: the etcd calls, their deadlines and error mapping;
//! - [`engine`]: the [`cairn_store::Backend`] over all of it.
//!
//! Each replica holds its deployment's keys in memory (the log key's
//! history stays in etcd): the price of reads that never wait for etcd
//! but once per batch.
//!
//! Cairn's revision **is** etcd's: strictly increasing, and dense only if
//! nothing else writes to that etcd (other prefixes, compaction records).

pub mod barrier;
pub mod batcher;
pub mod claims;
pub mod client;
pub mod decode;
pub mod engine;
pub mod follow;
pub mod history;
pub mod keys;
pub mod migrate;
pub mod mirror;
pub mod presence;
pub mod shared;
pub mod txn;

/// The etcd v3 API, generated from `proto/vendor/etcd` (client only).
#[allow(
    clippy::all,
    clippy::pedantic,
    missing_docs,
    rustdoc::all,
    unreachable_pub
)]
pub mod pb {
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }
    pub mod authpb {
        tonic::include_proto!("authpb");
    }
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
}

pub use client::Connection;
pub use engine::open;
pub use shared::EtcdOptions;
