//! The store's metrics, through the `metrics` facade: recorded only when
//! the server installs a recorder (`--metrics-listen`), a no-op otherwise.
//! Labels are bounded: kinds and names, never ids.

use std::time::Duration;

/// A durable commit: how many mutations it carried and how long it took,
/// fsync included.
pub fn commit(mutations: usize, took: Duration) {
    #[allow(clippy::cast_precision_loss)] // a batch is at most a few thousand
    metrics::histogram!("cairn_commit_batch_size").record(mutations as f64);
    metrics::histogram!("cairn_commit_duration_seconds").record(took.as_secs_f64());
}

/// The last committed revision.
#[allow(clippy::cast_precision_loss)] // exact up to 2^53 revisions
pub fn revision(revision: u64) {
    metrics::gauge!("cairn_revision").set(revision as f64);
}

/// The last revision compacted out of the log.
#[allow(clippy::cast_precision_loss)]
pub fn compact_revision(revision: u64) {
    metrics::gauge!("cairn_compact_revision").set(revision as f64);
}

/// A watch stream opened on a target of this kind.
pub fn watch_opened(kind: &'static str) {
    metrics::gauge!("cairn_watch_streams", "target" => kind).increment(1.0);
}

/// A watch stream of this kind ended.
pub fn watch_closed(kind: &'static str) {
    metrics::gauge!("cairn_watch_streams", "target" => kind).decrement(1.0);
}

/// A slow watcher fell back to reading the log.
pub fn resync() {
    metrics::counter!("cairn_watch_resyncs_total").increment(1);
}

/// The leases this server follows, and how many deadline-index entries
/// its expiry ticks have looked at since it started (what proves expiry
/// costs the expiring, not every lease).
#[allow(clippy::cast_precision_loss)]
pub fn leases(followed: usize, examined: u64) {
    metrics::gauge!("cairn_leases").set(followed as f64);
    metrics::counter!("cairn_lease_deadlines_examined_total").absolute(examined);
}

/// A committed liveness transition, seen by this server (every replica
/// sees every one).
pub fn lease_transition(to: &'static str) {
    metrics::counter!("cairn_lease_transitions_total", "to" => to).increment(1);
}

/// Describes every metric the store records, for `# HELP` lines.
pub fn describe() {
    metrics::describe_histogram!(
        "cairn_commit_batch_size",
        "Mutations per durable commit (group commit)"
    );
    metrics::describe_histogram!(
        "cairn_commit_duration_seconds",
        metrics::Unit::Seconds,
        "Time of one durable commit, fsync included"
    );
    metrics::describe_gauge!("cairn_revision", "Last committed store revision");
    metrics::describe_gauge!(
        "cairn_compact_revision",
        "Last revision compacted out of the event log"
    );
    metrics::describe_gauge!("cairn_watch_streams", "Open watch streams, by target kind");
    metrics::describe_counter!(
        "cairn_watch_resyncs_total",
        "Slow watchers that fell behind and caught up from the log"
    );
    metrics::describe_gauge!("cairn_store_bytes", "Bytes of the database file");
    metrics::describe_gauge!("cairn_leases", "Leased sessions this server follows");
    metrics::describe_counter!(
        "cairn_lease_transitions_total",
        "Committed liveness transitions, by the state entered"
    );
    metrics::describe_counter!(
        "cairn_lease_deadlines_examined_total",
        "Lease deadlines the expiry ticks looked at (the due ones, and what a sign of life lifted)"
    );
}
