//! The store's transactions over etcd: reads from one snapshot of the
//! replica's copy ([`crate::mirror`], one etcd revision), and a write that
//! buffers its changes and remembers what it read, so that its commit is
//! one etcd transaction comparing every key and range it read.
//!
//! Nothing here waits for etcd: a mutation runs on memory, and only its
//! commit goes to the cluster. A copy that lags the cluster costs a failed
//! compare and a second run, never a wrong answer.
//!
//! Records are decoded and stamped with their commit's revision by
//! [`crate::decode`].

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use cairn_core::error::{Error, Result};
use cairn_core::inbox::Awaiting;
use cairn_core::plan_mode::HistoryEntry;
use cairn_core::session::Session;
use cairn_store::codec;
use cairn_store::records::{PlanRecord, PrincipalRecord, Revision, SessionPage, TodoRecord};
use cairn_store::{PENDING_REVISION, ReadTxn, WriteTxn};
use serde::de::DeserializeOwned;

use crate::decode::{Stamp, record};
use crate::keys::{Keys, prefix_end, suffix};
use crate::mirror::Snap;
use crate::pb::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RequestOp, TxnRequest, compare, request_op,
};
use crate::pb::mvccpb::KeyValue;

/// Whether a write's commit compares a key it read: what a mutation's
/// outcome depends on is, bookkeeping (the log, the compact mark) is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compared {
    AtCommit,
    Not,
}

/// What a write read, to compare at commit.
#[derive(Debug, Default)]
struct ReadSet {
    /// Key → its `mod_revision` when read (0: absent).
    keys: HashMap<Vec<u8>, i64>,
    /// Ranges read: nothing in them may have changed since the snapshot.
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
}

/// What a write touches, for ordering it behind this replica's other
/// writes to the same keys (see [`crate::claims`]).
#[derive(Debug, Default, Clone)]
pub struct Footprint {
    pub reads: Vec<Vec<u8>>,
    pub ranges: Vec<(Vec<u8>, Vec<u8>)>,
    pub writes: Vec<Vec<u8>>,
}

impl Footprint {
    /// Whether a write of `other` changes something this one read or
    /// wrote.
    pub fn depends_on(&self, other: &Footprint) -> bool {
        other.writes.iter().any(|w| {
            self.reads.contains(w)
                || self.writes.contains(w)
                || self.ranges.iter().any(|(start, end)| w >= start && w < end)
        })
    }
}

/// Reads at one snapshot; inside a write, also its buffered changes.
pub struct Txn {
    keys: Keys,
    snap: Snap,
    /// Recorded only for writes.
    reads: RefCell<Option<ReadSet>>,
    /// A write's changes: key → new value, or `None` for a delete.
    changes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// A compaction this write asks for, run after its commit.
    compact_to: Option<u64>,
    /// The revision the write logged (a mutation, not maintenance): put
    /// under the log key at commit, merged with the others of its batch.
    logged: Option<Revision>,
}

/// A key-value as a mutation wrote it, before etcd stamps its revision.
fn pending(key: &[u8], value: &[u8]) -> Arc<KeyValue> {
    Arc::new(KeyValue {
        key: key.to_vec(),
        value: value.to_vec(),
        mod_revision: i64::try_from(PENDING_REVISION).unwrap_or(i64::MAX),
        ..KeyValue::default()
    })
}

impl Txn {
    /// A read transaction.
    pub fn reader(keys: Keys, snap: Snap) -> Self {
        Txn {
            keys,
            snap,
            reads: RefCell::new(None),
            changes: BTreeMap::new(),
            compact_to: None,
            logged: None,
        }
    }

    /// A write transaction: it records what it reads.
    pub fn writer(keys: Keys, snap: Snap) -> Self {
        let v = Txn::reader(keys, snap);
        *v.reads.borrow_mut() = Some(ReadSet::default());
        v
    }

    /// The same snapshot with no changes, to run a mutation again once its
    /// revision is known (nothing it writes is kept).
    pub fn replay(&mut self) -> &mut Self {
        self.changes.clear();
        *self.reads.borrow_mut() = None;
        self.compact_to = None;
        self.logged = None;
        self
    }

    pub fn has_changes(&self) -> bool {
        !self.changes.is_empty() || self.logged.is_some()
    }

    /// Whether the write logged a revision (a mutation, not maintenance).
    pub fn logged(&self) -> bool {
        self.logged.is_some()
    }

    /// Whether this write must be committed alone: a compaction (its
    /// compact mark, and etcd's compaction after it).
    pub fn alone(&self) -> bool {
        self.compact_to.is_some()
    }

    /// About how many etcd operations and bytes its commit takes.
    pub fn weight(&self) -> (usize, usize) {
        let reads = self.reads.borrow();
        let compares = reads.as_ref().map_or(0, |r| r.keys.len() + r.ranges.len());
        let bytes = self
            .changes
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
            .sum::<usize>();
        (self.changes.len().max(compares) + 1, bytes)
    }

    pub fn compact_to(&self) -> Option<u64> {
        self.compact_to
    }

    /// The etcd revision of the snapshot.
    pub fn snapshot(&self) -> i64 {
        self.snap.revision
    }

    /// What this write read and changed, but the log and the compact mark
    /// every mutation or compaction writes without reading.
    pub fn footprint(&self) -> Footprint {
        let (log, compact) = (self.keys.log(), self.keys.compact());
        let reads = self.reads.borrow();
        Footprint {
            reads: reads
                .as_ref()
                .map(|r| r.keys.keys().cloned().collect())
                .unwrap_or_default(),
            ranges: reads.as_ref().map(|r| r.ranges.clone()).unwrap_or_default(),
            writes: self
                .changes
                .keys()
                .filter(|k| **k != log && **k != compact)
                .cloned()
                .collect(),
        }
    }

    /// One key at the snapshot, without the write's own changes.
    fn fetch(&self, key: &[u8], compared: Compared) -> Option<Arc<KeyValue>> {
        let kv = self.snap.kvs.get(key).cloned();
        if compared == Compared::AtCommit
            && let Some(reads) = self.reads.borrow_mut().as_mut()
        {
            reads
                .keys
                .insert(key.to_vec(), kv.as_ref().map_or(0, |kv| kv.mod_revision));
        }
        kv
    }

    /// One key as this transaction sees it: its own change first.
    fn get(&self, key: &[u8]) -> Option<Arc<KeyValue>> {
        if let Some(change) = self.changes.get(key) {
            // Still compared: what the write replaces must be what it read.
            self.fetch(key, Compared::AtCommit);
            return change.as_ref().map(|value| pending(key, value));
        }
        self.fetch(key, Compared::AtCommit)
    }

    /// The names under the prefix `start` (each key's last part), in key
    /// order: an index's members.
    fn names_under(&self, start: &[u8]) -> Vec<String> {
        self.scan(start, &prefix_end(start), None, 0)
            .iter()
            .filter_map(|kv| suffix(&kv.key, start).map(str::to_owned))
            .collect()
    }

    /// At most `limit` (at least one) records under the prefix `start`,
    /// after the one at `after_key`.
    fn records_after<T: DeserializeOwned + Stamp>(
        &self,
        start: &[u8],
        after_key: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<T>> {
        self.scan(start, &prefix_end(start), after_key, limit.max(1))
            .iter()
            .map(|kv| record(kv))
            .collect()
    }

    /// Keys in `[start, end)` from `after` (exclusive), at most `limit` (0:
    /// all), with the write's own changes laid over them.
    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Vec<Arc<KeyValue>> {
        let from = match after {
            Some(a) => {
                let mut k = a.to_vec();
                k.push(0);
                k.max(start.to_vec())
            }
            None => start.to_vec(),
        };
        if from >= end.to_vec() {
            return Vec::new();
        }
        if let Some(reads) = self.reads.borrow_mut().as_mut() {
            reads.ranges.push((from.clone(), end.to_vec()));
        }
        let take = if limit == 0 { usize::MAX } else { limit };
        let overlaid = self
            .changes
            .range(from.clone()..end.to_vec())
            .next()
            .is_some();
        if !overlaid {
            return self
                .snap
                .kvs
                .range(from..end.to_vec())
                .take(take)
                .map(|(_, kv)| Arc::clone(kv))
                .collect();
        }
        // Only the first `limit` plus the changes can make the first
        // `limit` of the merge.
        let extra = self.changes.range(from.clone()..end.to_vec()).count();
        let mut merged: BTreeMap<Vec<u8>, Arc<KeyValue>> = self
            .snap
            .kvs
            .range(from.clone()..end.to_vec())
            .take(take.saturating_add(extra))
            .map(|(k, kv)| (k.clone(), Arc::clone(kv)))
            .collect();
        for (k, change) in self.changes.range(from..end.to_vec()) {
            match change {
                Some(value) => {
                    merged.insert(k.clone(), pending(k, value));
                }
                None => {
                    merged.remove(k);
                }
            }
        }
        merged.into_values().take(take).collect()
    }

    fn typed<T: DeserializeOwned + Stamp>(&self, key: &[u8]) -> Result<Option<T>> {
        self.get(key).map(|kv| record(&kv)).transpose()
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        // Compared even when not read: a write that compares what it
        // writes fences itself (of two copies of its transaction at most
        // one commits), so a copy whose answer was lost can be sent again.
        self.fetch(&key, Compared::AtCommit);
        self.changes.insert(key, Some(value));
    }

    fn delete(&mut self, key: Vec<u8>) {
        // Compared like a read: a delete of something another replica
        // just changed must not win blindly.
        self.fetch(&key, Compared::AtCommit);
        self.changes.insert(key, None);
    }

    /// The key every logged write puts its record under.
    pub fn log_key(&self) -> Vec<u8> {
        self.keys.log()
    }

    /// This write's compares, in the transaction.
    fn compares(&self, out: &mut Vec<Compare>) {
        let snapshot = self.snap.revision;
        if let Some(reads) = self.reads.borrow().as_ref() {
            for (key, m) in &reads.keys {
                out.push(Compare {
                    result: compare::CompareResult::Equal.into(),
                    target: compare::CompareTarget::Mod.into(),
                    key: key.clone(),
                    range_end: Vec::new(),
                    target_union: Some(compare::TargetUnion::ModRevision(*m)),
                });
            }
            for (start, end) in &reads.ranges {
                out.push(Compare {
                    result: compare::CompareResult::Less.into(),
                    target: compare::CompareTarget::Mod.into(),
                    key: start.clone(),
                    range_end: end.clone(),
                    target_union: Some(compare::TargetUnion::ModRevision(snapshot + 1)),
                });
            }
        }
    }
}

/// One etcd transaction for independent writes (disjoint footprints): every
/// compare of each, every change of each, and ONE log record holding the
/// events of every logged revision among them, in order. They commit at
/// one etcd revision, or none does. `max_ops` is the cluster's limit.
pub fn combined(txns: &[&Txn], max_ops: usize) -> Result<TxnRequest> {
    let mut compare = Vec::new();
    let mut success = Vec::new();
    let mut log: Option<Revision> = None;
    let mut log_key = None;
    for t in txns {
        t.compares(&mut compare);
        for (key, change) in &t.changes {
            success.push(RequestOp {
                request: Some(match change {
                    Some(value) => request_op::Request::RequestPut(PutRequest {
                        key: key.clone(),
                        value: value.clone(),
                        ..PutRequest::default()
                    }),
                    None => request_op::Request::RequestDeleteRange(DeleteRangeRequest {
                        key: key.clone(),
                        ..DeleteRangeRequest::default()
                    }),
                }),
            });
        }
        if let Some(r) = &t.logged {
            log_key.get_or_insert_with(|| t.keys.log());
            match &mut log {
                None => log = Some(r.clone()),
                Some(all) => {
                    all.time = all.time.max(r.time);
                    all.events.extend(r.events.iter().cloned());
                }
            }
        }
    }
    if let (Some(r), Some(key)) = (&log, log_key) {
        success.push(RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key,
                value: codec::encode_revision(r)?,
                ..PutRequest::default()
            })),
        });
    }
    let ops = success.len().max(compare.len());
    if ops > max_ops {
        return Err(Error::LimitExceeded {
            field: "mutation".into(),
            what: "etcd operations in one transaction (the cluster's --max-txn-ops; delete a large tree in parts)",
            limit: max_ops,
            actual: ops,
        });
    }
    Ok(TxnRequest {
        compare,
        success,
        failure: Vec::new(),
    })
}

/// The log record `req` puts under `log_key`, when `req` may be sent again
/// safely: it compares a key it writes at its version as read, so once
/// one copy commits every other fails, and the record (its commit time and
/// events) tells whether a copy whose answer was lost did commit.
pub fn resendable<'a>(req: &'a TxnRequest, log_key: &[u8]) -> Option<&'a [u8]> {
    let compared = |key: &[u8]| {
        req.compare.iter().any(|c| {
            c.key == key && c.range_end.is_empty() && c.target == compare::CompareTarget::Mod as i32
        })
    };
    let mut record = None;
    let mut fenced = false;
    for op in &req.success {
        match &op.request {
            Some(request_op::Request::RequestPut(p)) if p.key == log_key => {
                record = Some(&p.value[..]);
            }
            // One compared key is enough: looked for until found, so a
            // batch's request is scanned once, not once per change.
            Some(
                request_op::Request::RequestPut(PutRequest { key, .. })
                | request_op::Request::RequestDeleteRange(DeleteRangeRequest { key, .. }),
            ) if !fenced => {
                fenced = compared(key);
            }
            _ => {}
        }
    }
    record.filter(|_| fenced)
}

impl ReadTxn for Txn {
    /// The last logged revision at the snapshot: Cairn's revision. etcd's
    /// own may be ahead of it (compaction records, other writers), but no
    /// Cairn event lies between the two.
    fn revision(&self) -> Result<u64> {
        Ok(self
            .fetch(&self.keys.log(), Compared::Not)
            .map_or(0, |kv| u64::try_from(kv.mod_revision).unwrap_or(0)))
    }

    fn compact_revision(&self) -> Result<u64> {
        let Some(kv) = self.fetch(&self.keys.compact(), Compared::Not) else {
            return Ok(0);
        };
        std::str::from_utf8(&kv.value)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error::DataLoss {
                file: String::new(),
                detail: "the compact revision key does not hold a number".into(),
            })
    }

    fn session(&self, id: &str) -> Result<Option<Session>> {
        self.typed(&self.keys.session(id))
    }

    fn children(&self, id: &str) -> Result<Vec<String>> {
        Ok(self.names_under(&self.keys.children(id)))
    }

    fn sessions_after(&self, after: Option<&str>, limit: usize) -> Result<SessionPage> {
        let start = self.keys.sessions();
        let after_key = after.map(|a| self.keys.session(a));
        let limit = limit.max(1);
        // One more than asked tells whether more follow.
        let kvs = self.scan(&start, &prefix_end(&start), after_key.as_deref(), limit + 1);
        let more = kvs.len() > limit;
        let sessions = kvs
            .iter()
            .take(limit)
            .map(|kv| record::<Session>(kv))
            .collect::<Result<Vec<_>>>()?;
        let next_after = if more {
            sessions.last().map(|s| s.session_id.clone())
        } else {
            None
        };
        Ok(SessionPage {
            sessions,
            next_after,
        })
    }

    fn plan(&self, session_id: &str) -> Result<Option<PlanRecord>> {
        self.typed(&self.keys.plan(session_id))
    }

    fn history(
        &self,
        session_id: &str,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<(Vec<HistoryEntry>, Option<u64>)> {
        let start = self.keys.history(session_id);
        let first = self.keys.history_entry(session_id, from);
        let kvs = self.scan(&first, &prefix_end(&start), None, 0);
        let mut out = Vec::new();
        let mut bytes = 0;
        for kv in &kvs {
            let seq = suffix(&kv.key, &start)
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(0);
            if out.len() >= limit.max(1) || (bytes >= max_bytes && !out.is_empty()) {
                return Ok((out, Some(seq)));
            }
            let (entry, size) = codec::decode_sized::<HistoryEntry>(&kv.value)?;
            bytes += size;
            out.push(entry);
        }
        Ok((out, None))
    }

    fn todos(&self, agent_id: &str) -> Result<Option<TodoRecord>> {
        self.typed(&self.keys.todos(agent_id))
    }

    fn todos_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<TodoRecord>> {
        let after_key = after.map(|a| self.keys.todos(a));
        self.records_after(&self.keys.all_todos(), after_key.as_deref(), limit)
    }

    /// Never called on etcd: the log's history is etcd's, read with a
    /// watch ([`cairn_store::Backend::log`]), not from the copy.
    fn revisions_from(&self, from: u64, _limit: usize, _max_bytes: usize) -> Result<Vec<Revision>> {
        Err(Error::Internal(format!(
            "the etcd engine reads the log from {from} through Backend::log, not a snapshot"
        )))
    }

    /// Never called on etcd, like [`Txn::revisions_from`]: the times
    /// come with the log's history ([`cairn_store::Backend::revision_times`]).
    fn revision_times(&self, from: u64, _limit: usize) -> Result<Vec<(u64, cairn_core::Micros)>> {
        Err(Error::Internal(format!(
            "the etcd engine reads commit times from {from} through Backend::revision_times"
        )))
    }

    fn agent_sessions(&self, agent_id: &str) -> Result<Vec<String>> {
        Ok(self.names_under(&self.keys.agent_sessions(agent_id)))
    }

    fn leased(&self) -> Result<Vec<String>> {
        Ok(self.names_under(&self.keys.all_leased()))
    }

    fn awaiting_after(&self, after: Option<&Awaiting>, limit: usize) -> Result<Vec<Awaiting>> {
        let start = self.keys.all_awaiting();
        let after_key = after.map(|a| self.keys.awaiting(a));
        let kvs = self.scan(
            &start,
            &prefix_end(&start),
            after_key.as_deref(),
            limit.max(1),
        );
        Ok(kvs
            .iter()
            .filter_map(|kv| crate::keys::parse_awaiting(&kv.key, &start))
            .collect())
    }

    fn aux(&self, space: &str, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self
            .get(&self.keys.aux(space, key))
            .map(|kv| kv.value.clone()))
    }

    fn aux_after(
        &self,
        space: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        let start = self.keys.aux_space(space);
        let after_key = after.map(|a| self.keys.aux(space, a));
        let kvs = self.scan(
            &start,
            &prefix_end(&start),
            after_key.as_deref(),
            limit.max(1),
        );
        Ok(kvs
            .into_iter()
            .filter_map(|kv| suffix(&kv.key, &start).map(|k| (k.to_owned(), kv.value.clone())))
            .collect())
    }

    fn principal(&self, id: &str) -> Result<Option<PrincipalRecord>> {
        self.typed(&self.keys.principal(id))
    }

    fn principal_by_token(&self, token_sha256: &str) -> Result<Option<PrincipalRecord>> {
        let Some(kv) = self.get(&self.keys.token(token_sha256)) else {
            return Ok(None);
        };
        let id = String::from_utf8_lossy(&kv.value).into_owned();
        self.principal(&id)
    }

    fn principals_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<PrincipalRecord>> {
        let after_key = after.map(|a| self.keys.principal(a));
        self.records_after(&self.keys.principals(), after_key.as_deref(), limit)
    }

    fn dense(&self) -> bool {
        false
    }
}

impl WriteTxn for Txn {
    fn put_session(&mut self, s: &Session) -> Result<()> {
        let key = self.keys.session(&s.session_id);
        self.put(key, codec::encode(s)?);
        Ok(())
    }
    fn delete_session(&mut self, id: &str) -> Result<()> {
        let key = self.keys.session(id);
        self.delete(key);
        Ok(())
    }
    fn put_child(&mut self, parent: &str, child: &str) -> Result<()> {
        let key = self.keys.child(parent, child);
        self.put(key, Vec::new());
        Ok(())
    }
    fn delete_child(&mut self, parent: &str, child: &str) -> Result<()> {
        let key = self.keys.child(parent, child);
        self.delete(key);
        Ok(())
    }
    fn put_plan(&mut self, session_id: &str, record: &[u8]) -> Result<()> {
        let key = self.keys.plan(session_id);
        self.put(key, record.to_vec());
        Ok(())
    }
    fn delete_plan(&mut self, session_id: &str) -> Result<()> {
        let key = self.keys.plan(session_id);
        self.delete(key);
        Ok(())
    }
    fn put_history(&mut self, session_id: &str, seq: u64, e: &HistoryEntry) -> Result<()> {
        let key = self.keys.history_entry(session_id, seq);
        self.put(key, codec::encode(e)?);
        Ok(())
    }
    fn delete_history(&mut self, session_id: &str) -> Result<()> {
        // Key by key, so every change in a transaction names one key (etcd
        // refuses a put inside a range it also deletes).
        let start = self.keys.history(session_id);
        for kv in self.scan(&start, &prefix_end(&start), None, 0) {
            self.changes.insert(kv.key.clone(), None);
        }
        Ok(())
    }
    fn put_todos(&mut self, t: &TodoRecord) -> Result<()> {
        let key = self.keys.todos(&t.agent_id);
        self.put(key, codec::encode(t)?);
        Ok(())
    }
    fn put_agent_session(&mut self, agent_id: &str, session_id: &str) -> Result<()> {
        let key = self.keys.agent_session(agent_id, session_id);
        self.put(key, Vec::new());
        Ok(())
    }
    fn delete_agent_session(&mut self, agent_id: &str, session_id: &str) -> Result<()> {
        let key = self.keys.agent_session(agent_id, session_id);
        self.delete(key);
        Ok(())
    }
    fn put_aux(&mut self, space: &str, key: &str, value: &[u8]) -> Result<()> {
        let key = self.keys.aux(space, key);
        self.put(key, value.to_vec());
        Ok(())
    }
    fn delete_aux(&mut self, space: &str, key: &str) -> Result<()> {
        let key = self.keys.aux(space, key);
        self.delete(key);
        Ok(())
    }
    fn put_leased(&mut self, session_id: &str) -> Result<()> {
        let key = self.keys.leased(session_id);
        self.put(key, Vec::new());
        Ok(())
    }
    fn delete_leased(&mut self, session_id: &str) -> Result<()> {
        let key = self.keys.leased(session_id);
        self.delete(key);
        Ok(())
    }
    fn put_awaiting(&mut self, key: &Awaiting) -> Result<()> {
        let key = self.keys.awaiting(key);
        self.put(key, Vec::new());
        Ok(())
    }
    fn delete_awaiting(&mut self, key: &Awaiting) -> Result<()> {
        let key = self.keys.awaiting(key);
        self.delete(key);
        Ok(())
    }
    fn put_principal(&mut self, p: &PrincipalRecord) -> Result<()> {
        let id = p.principal.principal_id.clone();
        // A rotation replaces the old hash in the same transaction.
        if let Some(old) = self.principal(&id)?
            && old.token_sha256 != p.token_sha256
        {
            let key = self.keys.token(&old.token_sha256);
            self.delete(key);
        }
        let token = self.keys.token(&p.token_sha256);
        self.put(token, id.clone().into_bytes());
        let key = self.keys.principal(&id);
        self.put(key, codec::encode(p)?);
        Ok(())
    }
    fn delete_principal(&mut self, p: &PrincipalRecord) -> Result<()> {
        let key = self.keys.principal(&p.principal.principal_id);
        self.delete(key);
        let token = self.keys.token(&p.token_sha256);
        self.delete(token);
        Ok(())
    }
    fn append_revision(&mut self, r: &Revision) -> Result<()> {
        // Encoded at commit, with the rest of its batch's.
        self.logged = Some(r.clone());
        Ok(())
    }
    fn compact_log(&mut self, upto: u64) -> Result<()> {
        let key = self.keys.compact();
        self.put(key, upto.to_string().into_bytes());
        self.compact_to = Some(upto);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_store::records::TodoRecord;

    fn todos(agent: &str) -> TodoRecord {
        TodoRecord {
            agent_id: agent.into(),
            ..TodoRecord::default()
        }
    }

    #[test]
    fn a_logged_write_compares_what_it_writes_and_may_be_sent_again() {
        let keys = Keys::new("/t/");
        // Written without being read first: still compared.
        let mut txn = Txn::writer(keys.clone(), Snap::default());
        txn.put_todos(&todos("a")).unwrap();
        let logged = Revision {
            revision: 0,
            time: 1,
            events: Vec::new(),
        };
        txn.append_revision(&logged).unwrap();
        let req = combined(&[&txn], 128).unwrap();
        assert!(req.compare.iter().any(|c| c.key == keys.todos("a")));
        let record = resendable(&req, &keys.log()).expect("resendable");
        assert_eq!(record, codec::encode_revision(&logged).unwrap());
    }

    #[test]
    fn maintenance_without_a_record_is_never_sent_twice() {
        let keys = Keys::new("/t/");
        let mut txn = Txn::writer(keys.clone(), Snap::default());
        txn.put_todos(&todos("a")).unwrap();
        let req = combined(&[&txn], 128).unwrap();
        assert!(resendable(&req, &keys.log()).is_none());
        // Nor a request that compares none of its keys.
        let mut bare = req.clone();
        bare.compare.clear();
        bare.success.push(RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: keys.log(),
                value: b"r".to_vec(),
                ..PutRequest::default()
            })),
        });
        assert!(resendable(&bare, &keys.log()).is_none());
    }
}
