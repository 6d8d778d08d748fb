//! The one error type of Cairn.
//!
//! The rules, the store and the server all return [`Error`]. Each variant is
//! a decision a client can act on; the server maps every variant to a gRPC
//! code and a stable `google.rpc.ErrorInfo` reason in one exhaustive match
//! (`cairn_server::status`), so a new variant does not compile until it has
//! both. Messages that `docs/rules.md` quotes are reproduced here byte for
//! byte.

use std::fmt::Write as _;

/// Result with Cairn's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, by what the caller should do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A field failed validation. `field` is the request path of the bad
    /// value (`plan[2].step`) so clients can point at it.
    #[error("{field}: {description}")]
    InvalidField { field: String, description: String },

    /// A checklist had more than one in-progress item (the exact text of docs/rules.md).
    #[error("At most one step can be in_progress at a time")]
    MultipleStepsInProgress,

    /// A todo list had more than one in-progress item.
    #[error("At most one todo can be in_progress at a time")]
    MultipleTodosInProgress,

    /// A size or count limit was exceeded.
    #[error("{field}: {what} exceeds the limit of {limit} (got {actual})")]
    LimitExceeded {
        field: String,
        what: &'static str,
        limit: usize,
        actual: usize,
    },

    /// `EnterPlanMode` while already planning.
    #[error("Already in plan mode")]
    AlreadyInPlanMode,

    /// `EnterPlanMode` while a plan waits for approval.
    #[error("A plan is awaiting approval. Approve or reject it before entering plan mode again.")]
    PlanAwaitingApproval,

    /// `ExitPlanMode` outside PLANNING.
    #[error("Not in plan mode. Call plan_enter first.")]
    NotInPlanMode,

    /// Approve/reject without a pending plan.
    #[error("No plan is awaiting approval")]
    NoPendingPlan,

    /// A passed approval deadline was applied already, or the item's
    /// deadline changed since it was seen: only the server's own deadline
    /// commands meet this, and they drop it.
    #[error("the approval deadline moved or was applied already")]
    DeadlineMoved,

    /// A step or plan operation without an approved plan.
    #[error("No active plan. Submit a plan with plan_exit and get it approved first.")]
    NoActivePlan,

    /// A step id that the active plan does not have.
    #[error("Step {0} not found in plan")]
    StepNotFound(u32),

    /// `CompleteStep` on a completed step, or `ModifyPlan` of one.
    #[error("Step {0} already completed")]
    StepAlreadyCompleted(u32),

    /// `CompleteStep` before the step's dependencies.
    #[error("Step {step} depends on incomplete steps: {}", join_ids(.missing))]
    DependenciesIncomplete { step: u32, missing: Vec<u32> },

    /// `CompletePlan` with incomplete steps and no deviations to explain them.
    #[error(
        "Steps {} are not completed; explain them in deviations to complete the plan",
        join_ids(.steps)
    )]
    IncompleteStepsNeedDeviations { steps: Vec<u32> },

    /// A modification id that is not pending.
    #[error("Modification {0} not found")]
    ModificationNotFound(u32),

    /// An unknown session.
    #[error("Session {0} not found")]
    SessionNotFound(String),

    /// An A2A task that does not exist or that the caller may not see (a
    /// task is a session: `docs/a2a.md`).
    #[error("Task {0} not found")]
    TaskNotFound(String),

    /// An A2A operation this server does not offer.
    #[error("{0} is not supported by this server")]
    UnsupportedOperation(String),

    /// A2A push notifications, asked of a server whose webhooks are off.
    #[error("Push notifications are not supported by this server: {0}")]
    PushNotSupported(String),

    /// `CreatePrincipal` with a taken id.
    #[error("Principal {0} already exists")]
    PrincipalExists(String),

    /// `CreatePrincipal` with an agent id another tenant holds: an agent id
    /// belongs to one tenant (every principal holding it has the same
    /// `session_roots`), so that its todo list and sessions never cross.
    #[error(
        "Agent id {agent_id} is held by principal {principal_id}, which has other session_roots: an agent id belongs to one tenant"
    )]
    AgentIdTaken {
        agent_id: String,
        principal_id: String,
    },

    /// An unknown principal.
    #[error("Principal {0} not found")]
    PrincipalNotFound(String),

    /// A parent that does not exist.
    #[error("Parent session {0} not found")]
    ParentNotFound(String),

    /// `CreateWebhook` with a taken id.
    #[error("Webhook {0} already exists")]
    WebhookExists(String),

    /// A webhook id that names no subscription.
    #[error("Webhook {0} not found")]
    WebhookNotFound(String),

    /// `RetryDeadLetter` of a key that names no dead letter.
    #[error("Dead letter {0} not found")]
    DeadLetterNotFound(String),

    /// `CreateSession` with a taken id.
    #[error("Session {0} already exists")]
    SessionExists(String),

    /// A move that would put a session under itself.
    #[error("Session {session} cannot move under {parent}: that would make a cycle")]
    ParentCycle { session: String, parent: String },

    /// `DeleteSession` of a session with children, without `cascade`.
    #[error("Session {session} has {children} child session(s); set cascade to delete them too")]
    SessionHasChildren { session: String, children: usize },

    /// `expected_revision` did not match the resource's revision.
    #[error("expected revision {expected}, but the resource is at revision {actual}")]
    RevisionMismatch { expected: u64, actual: u64 },

    /// A watch asked for revisions the event log no longer holds.
    #[error(
        "revision {requested} has been compacted (the log starts after revision {compact_revision}, now at {current_revision}); read the current state and watch from there"
    )]
    RevisionCompacted {
        requested: u64,
        compact_revision: u64,
        current_revision: u64,
    },

    /// A request combines options that exclude each other.
    #[error("{0}")]
    Conflicting(String),

    /// A watch asked to start after the next revision.
    #[error(
        "start_revision {requested} is beyond the next revision {next}: watch from a revision a read returned, plus one"
    )]
    RevisionNotYet { requested: u64, next: u64 },

    /// The caller named no principal, or a token the server does not know.
    #[error("{0}")]
    Unauthenticated(String),

    /// A known principal asked for something outside its rights.
    #[error("{message}")]
    PermissionDenied { reason: Denial, message: String },

    /// The server is shutting down and takes no more writes.
    #[error("the server is shutting down")]
    ShuttingDown,

    /// The store cannot serve right now (it is reopening after a storage
    /// error); retrying later may succeed.
    #[error("the store is unavailable: {0}")]
    Unavailable(String),

    /// The disk holding the database is full; the mutation was not applied.
    #[error("the disk holding {file} is full: {detail}; the mutation was not applied")]
    DiskFull { file: String, detail: String },

    /// A backup's copy could not be written (its directory is full or
    /// unwritable); the store and every mutation are untouched.
    #[error(
        "the backup could not be written to {dir}: {detail}; nothing in the store was changed (free space there, or point TMPDIR elsewhere)"
    )]
    BackupFailed { dir: String, detail: String },

    /// The database file is corrupt: data may be lost. Restore a backup.
    #[error("the database file {file} is corrupt: {detail}")]
    DataLoss { file: String, detail: String },

    /// The database failed; the mutation was not applied.
    #[error("storage error: {0}")]
    Storage(String),

    /// A bug: something that should not happen did (a panic, caught).
    #[error("internal error: {0}")]
    Internal(String),
}

/// Why a known principal was refused, as a stable reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// The resource lies outside the principal's sessions or agents.
    NotInScope,
    /// None of the principal's roles grants the action.
    RoleRequired,
    /// The principal submitted what it would approve.
    SelfApproval,
}

impl Denial {
    /// The `ErrorInfo` reason.
    pub fn reason(self) -> &'static str {
        match self {
            Denial::NotInScope => "NOT_IN_SCOPE",
            Denial::RoleRequired => "ROLE_REQUIRED",
            Denial::SelfApproval => "SELF_APPROVAL",
        }
    }
}

impl Error {
    /// Whether the failure is the store's (storage, the engine, a bug), not
    /// the request's: a write batch it happens in is in an unknown state and
    /// fails whole. Exhaustive on purpose: a new error decides.
    pub fn is_infrastructure(&self) -> bool {
        match self {
            Error::Storage(_)
            | Error::DataLoss { .. }
            | Error::DiskFull { .. }
            | Error::Unavailable(_)
            | Error::Internal(_) => true,
            Error::InvalidField { .. }
            | Error::MultipleStepsInProgress
            | Error::MultipleTodosInProgress
            | Error::LimitExceeded { .. }
            | Error::AlreadyInPlanMode
            | Error::PlanAwaitingApproval
            | Error::NotInPlanMode
            | Error::NoPendingPlan
            | Error::DeadlineMoved
            | Error::NoActivePlan
            | Error::StepNotFound(_)
            | Error::StepAlreadyCompleted(_)
            | Error::DependenciesIncomplete { .. }
            | Error::IncompleteStepsNeedDeviations { .. }
            | Error::ModificationNotFound(_)
            | Error::SessionNotFound(_)
            | Error::TaskNotFound(_)
            | Error::UnsupportedOperation(_)
            | Error::PushNotSupported(_)
            | Error::PrincipalExists(_)
            | Error::AgentIdTaken { .. }
            | Error::PrincipalNotFound(_)
            | Error::ParentNotFound(_)
            | Error::SessionExists(_)
            | Error::WebhookExists(_)
            | Error::WebhookNotFound(_)
            | Error::DeadLetterNotFound(_)
            | Error::ParentCycle { .. }
            | Error::SessionHasChildren { .. }
            | Error::RevisionMismatch { .. }
            | Error::RevisionCompacted { .. }
            | Error::Conflicting(_)
            | Error::RevisionNotYet { .. }
            | Error::Unauthenticated(_)
            | Error::PermissionDenied { .. }
            | Error::ShuttingDown
            | Error::BackupFailed { .. } => false,
        }
    }

    /// Shorthand for [`Error::InvalidField`].
    pub fn invalid(field: impl Into<String>, description: impl Into<String>) -> Self {
        Error::InvalidField {
            field: field.into(),
            description: description.into(),
        }
    }
}

/// At most this many characters of client input are echoed in an error or
/// a log line, so a hostile request cannot inflate either.
pub const EXCERPT_CHARS: usize = 48;

/// A short, printable excerpt of client input for messages and logs:
/// control characters escaped, at most [`EXCERPT_CHARS`] characters, and
/// the full length said when it was cut.
pub fn excerpt(text: &str) -> String {
    Excerpt(text).to_string()
}

/// [`excerpt`] as a `Display`, for log fields: a client's text can neither
/// forge log lines (newlines, escape sequences) nor inflate them.
#[derive(Debug, Clone, Copy)]
pub struct Excerpt<'a>(pub &'a str);

impl std::fmt::Display for Excerpt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (n, c) in self.0.chars().enumerate() {
            if n == EXCERPT_CHARS {
                return write!(f, "…({} bytes)", self.0.len());
            }
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

fn join_ids(ids: &[u32]) -> String {
    let mut out = String::new();
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{id}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_spec_texts() {
        assert_eq!(
            Error::MultipleStepsInProgress.to_string(),
            "At most one step can be in_progress at a time"
        );
        assert_eq!(
            Error::MultipleTodosInProgress.to_string(),
            "At most one todo can be in_progress at a time"
        );
        assert_eq!(Error::AlreadyInPlanMode.to_string(), "Already in plan mode");
        assert_eq!(
            Error::PlanAwaitingApproval.to_string(),
            "A plan is awaiting approval. Approve or reject it before entering plan mode again."
        );
        assert_eq!(
            Error::NotInPlanMode.to_string(),
            "Not in plan mode. Call plan_enter first."
        );
        assert_eq!(
            Error::StepNotFound(7).to_string(),
            "Step 7 not found in plan"
        );
        assert_eq!(
            Error::StepAlreadyCompleted(2).to_string(),
            "Step 2 already completed"
        );
        assert_eq!(excerpt("a\nb\u{1b}[31m"), "a\\nb\\u{1b}[31m");
        assert_eq!(
            excerpt(&"x".repeat(100)),
            format!("{}…(100 bytes)", "x".repeat(48))
        );
        assert_eq!(
            Error::DependenciesIncomplete {
                step: 3,
                missing: vec![1, 2]
            }
            .to_string(),
            "Step 3 depends on incomplete steps: 1, 2"
        );
    }
}
