//! `cairn-etcd`: the store on an etcd v3 cluster, so that several
//! stateless Cairn replicas share one state and survive losing a machine.
//!
//! ```text
//!  Store::write ─▶ blocking thread: pin a snapshot (etcd revision S), run
//!                  the mutation on it, buffering changes and noting what it
//!                  read ─▶ ONE etcd Txn: compare every key read (mod_revision
//!                  as read) and every range read (nothing newer than S);
//!                  put/delete the changes; put the log key
//!                  ├─ compare failed: another writer won; run it again
//!                  └─ committed at etcd revision R: run the mutation once
//!                     more on the same snapshot, knowing R, to answer
//!  one etcd watch on the log key ─▶ Hub::dispatch (watchers, Wait)
//!  Store::read ──▶ blocking thread: linearizable reads pinned to one revision
//! ```
//!
//! - [`keys`]: where each record lives under the deployment's prefix;
//! - [`txn`]: the read and write transactions the mutations run on;
//! - [`follow`]: the log watch feeding the hub, and catch-up reads;
//! - [`presence`]: which replicas are alive, for adopting a dead one's
//!   session leases;
//! - [`client`]: the etcd calls, their deadlines and error mapping;
//! - [`engine`]: the [`cairn_store::Backend`] over all of it.
//!
//! Cairn's revision **is** etcd's: strictly increasing, and dense only if
//! nothing else writes to that etcd (other prefixes, compaction records).

pub mod barrier;
pub mod claims;
pub mod client;
pub mod decode;
pub mod engine;
pub mod follow;
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
