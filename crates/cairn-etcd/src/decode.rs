//! Cairn's records from etcd's key-values: decoded, named by their key when
//! they do not decode, and stamped with the revision etcd committed them at.
//!
//! Records written by a mutation carry [`PENDING_REVISION`] (the revision
//! is etcd's, known only at commit). Reading a record turns that marker
//! into the key's `mod_revision`, which is exactly the commit's revision:
//! a record is stored only by the transaction that stamps it. The transactions
//! and the log follower both read through here.

use cairn_core::error::{Error, Result};
use cairn_core::plan_mode::HistoryEntry;
use cairn_core::session::Session;
use cairn_store::PENDING_REVISION;
use cairn_store::codec;
use cairn_store::records::{Event, EventObject, PlanRecord, PrincipalRecord, Revision, TodoRecord};
use serde::de::DeserializeOwned;

use crate::pb::mvccpb::KeyValue;

/// Turns the pending marker into the revision a record was committed at.
pub trait Stamp {
    fn stamp(&mut self, revision: u64);
}

fn fix(field: &mut u64, revision: u64) {
    if *field == PENDING_REVISION {
        *field = revision;
    }
}

impl Stamp for Session {
    fn stamp(&mut self, revision: u64) {
        fix(&mut self.revision, revision);
    }
}
impl Stamp for PlanRecord {
    fn stamp(&mut self, revision: u64) {
        fix(&mut self.revision, revision);
    }
}
impl Stamp for TodoRecord {
    fn stamp(&mut self, revision: u64) {
        fix(&mut self.revision, revision);
    }
}
impl Stamp for PrincipalRecord {
    fn stamp(&mut self, revision: u64) {
        fix(&mut self.revision, revision);
    }
}
impl Stamp for HistoryEntry {
    fn stamp(&mut self, _revision: u64) {}
}
impl Stamp for Revision {
    fn stamp(&mut self, revision: u64) {
        fix(&mut self.revision, revision);
        for e in &mut self.events {
            stamp_event(e, revision);
        }
    }
}

fn stamp_event(e: &mut Event, revision: u64) {
    match &mut e.object {
        EventObject::Session(s) => s.stamp(revision),
        EventObject::Plan(p) => p.stamp(revision),
        EventObject::Todos(t) => t.stamp(revision),
        EventObject::Principal(_) | EventObject::Inbox(_) => {}
    }
}

fn rev(kv: &KeyValue) -> u64 {
    u64::try_from(kv.mod_revision).unwrap_or(0)
}

/// A record from a key's value, stamped with the key's revision.
pub fn record<T: DeserializeOwned + Stamp>(kv: &KeyValue) -> Result<T> {
    let mut t: T = codec::decode(&kv.value).map_err(|e| at_key(e, &kv.key))?;
    t.stamp(rev(kv));
    Ok(t)
}

/// A record that does not decode, named by its key: an operator finds and
/// repairs (or deletes) that one key.
fn at_key(e: Error, key: &[u8]) -> Error {
    match e {
        Error::DataLoss { detail, .. } => Error::DataLoss {
            file: format!("etcd key {}", String::from_utf8_lossy(key).escape_debug()),
            detail,
        },
        e => e,
    }
}

/// A logged revision from a version of the log key, and its decoded size.
pub fn logged(kv: &KeyValue) -> Result<(Revision, usize)> {
    let (mut r, size) = codec::decode_revision_sized(&kv.value).map_err(|e| at_key(e, &kv.key))?;
    r.stamp(rev(kv));
    Ok((r, size))
}
