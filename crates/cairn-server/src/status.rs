//! [`Error`] to `tonic::Status`, once and exhaustively: a function at the
//! API boundary, since the orphan rule keeps a `From` impl out of both
//! crates (and `cairn-core` must not know tonic).
//!
//! Every status carries a `google.rpc.ErrorInfo` (domain `cairn.dev`, a stable
//! UPPER_SNAKE reason, metadata a client can act on); bad input also carries
//! a `google.rpc.BadRequest` naming the field.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use cairn_core::error::Error;

/// `ErrorInfo.domain` of every Cairn error.
pub const ERROR_DOMAIN: &str = "cairn.dev";

/// `ErrorInfo.domain` of the errors the A2A specification names.
pub const A2A_ERROR_DOMAIN: &str = "a2a-protocol.org";

/// The gRPC status of an error: its code, its exact message, an
/// `ErrorInfo` with a stable reason, and for bad input a `BadRequest`.
#[allow(clippy::needless_pass_by_value)]
pub fn status(err: Error) -> Status {
    let Classified {
        code,
        reason,
        domain,
        message,
        meta,
        field,
    } = classify(&err);
    log(code, reason, &message);
    let mut details = ErrorDetails::with_error_info(reason, domain, meta);
    if let Some((f, d)) = field {
        details.add_bad_request_violation(f, d);
    }
    Status::with_error_details(code, message, details)
}

/// Logs a call's failure once, at the level its cause deserves: the
/// server's own failures at ERROR; refusals (an unknown token, a denied
/// right) at WARN, at most [`REFUSALS_PER_SECOND`] a second whatever the
/// flood, with a count of those left out; every other client error (a
/// rule, a conflict, a missing session) at DEBUG, as it is the client's
/// business and any client could fill the log with them.
fn log(code: Code, reason: &str, message: &str) {
    match code {
        Code::Internal | Code::DataLoss | Code::Unknown => {
            tracing::error!(code = ?code, reason, "{message}");
        }
        Code::Unavailable => tracing::warn!(code = ?code, reason, "{message}"),
        Code::PermissionDenied | Code::Unauthenticated => {
            if let Some(left_out) = REFUSALS.admit() {
                tracing::warn!(code = ?code, reason, left_out, "call refused: {message}");
            }
        }
        _ => tracing::debug!(code = ?code, reason, "{message}"),
    }
}

/// Refusals logged per second at most.
pub const REFUSALS_PER_SECOND: u64 = 10;

/// A per-second budget of log lines, shared by every call.
struct Budget {
    /// Packed: the second (high 40 bits) and the lines used in it.
    state: std::sync::atomic::AtomicU64,
    /// Lines left out since the last one logged.
    dropped: std::sync::atomic::AtomicU64,
}

static REFUSALS: Budget = Budget {
    state: std::sync::atomic::AtomicU64::new(0),
    dropped: std::sync::atomic::AtomicU64::new(0),
};

impl Budget {
    /// `Some(lines left out before this one)` when this line may go out.
    fn admit(&self) -> Option<u64> {
        use std::sync::atomic::Ordering::Relaxed;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            & 0xff_ffff_ffff;
        let admitted = self
            .state
            .fetch_update(Relaxed, Relaxed, |s| {
                let (second, used) = (s >> 24, s & 0xff_ffff);
                if second != now {
                    Some((now << 24) | 1)
                } else if used < REFUSALS_PER_SECOND {
                    Some(s + 1)
                } else {
                    None
                }
            })
            .is_ok();
        if admitted {
            Some(self.dropped.swap(0, Relaxed))
        } else {
            self.dropped.fetch_add(1, Relaxed);
            None
        }
    }
}

/// The gRPC code of an error, for surfaces that speak another protocol
/// (the dashboard's HTTP).
pub fn code(err: &Error) -> Code {
    classify(err).code
}

/// Everything a status says about an error.
struct Classified {
    code: Code,
    reason: &'static str,
    /// `ErrorInfo.domain`: Cairn's, or A2A's for the errors it names.
    domain: &'static str,
    message: String,
    meta: HashMap<String, String>,
    field: Option<(String, String)>,
}

// One exhaustive match is the point: every error's code in one place.
#[allow(clippy::too_many_lines)]
fn classify(err: &Error) -> Classified {
    let message = err.to_string();
    let mut meta: HashMap<String, String> = HashMap::new();
    let mut field: Option<(String, String)> = None;
    let mut domain = ERROR_DOMAIN;
    let (code, reason) = match err {
        Error::InvalidField {
            field: f,
            description,
        } => {
            field = Some((f.clone(), description.clone()));
            (Code::InvalidArgument, "INVALID_FIELD")
        }
        Error::MultipleStepsInProgress => {
            field = Some(("plan".into(), message.clone()));
            (Code::InvalidArgument, "MULTIPLE_IN_PROGRESS")
        }
        Error::MultipleTodosInProgress => {
            field = Some(("todos".into(), message.clone()));
            (Code::InvalidArgument, "MULTIPLE_IN_PROGRESS")
        }
        Error::LimitExceeded {
            field: f,
            limit,
            actual,
            ..
        } => {
            meta.insert("limit".into(), limit.to_string());
            meta.insert("actual".into(), actual.to_string());
            field = Some((f.clone(), message.clone()));
            (Code::ResourceExhausted, "LIMIT_EXCEEDED")
        }
        Error::AlreadyInPlanMode => (Code::FailedPrecondition, "ALREADY_IN_PLAN_MODE"),
        Error::PlanAwaitingApproval => (Code::FailedPrecondition, "PLAN_AWAITING_APPROVAL"),
        Error::NotInPlanMode => (Code::FailedPrecondition, "NOT_IN_PLAN_MODE"),
        Error::NoPendingPlan => (Code::FailedPrecondition, "NO_PENDING_PLAN"),
        Error::WebhookExists(_) => (Code::AlreadyExists, "WEBHOOK_EXISTS"),
        Error::WebhookNotFound(_) => (Code::NotFound, "WEBHOOK_NOT_FOUND"),
        Error::DeadLetterNotFound(_) => (Code::NotFound, "DEAD_LETTER_NOT_FOUND"),
        Error::DeadlineMoved => (Code::FailedPrecondition, "DEADLINE_MOVED"),
        Error::NoActivePlan => (Code::FailedPrecondition, "NO_ACTIVE_PLAN"),
        Error::StepNotFound(step) => {
            meta.insert("step_id".into(), step.to_string());
            (Code::NotFound, "STEP_NOT_FOUND")
        }
        Error::StepAlreadyCompleted(step) => {
            meta.insert("step_id".into(), step.to_string());
            (Code::FailedPrecondition, "STEP_ALREADY_COMPLETED")
        }
        Error::DependenciesIncomplete { step, missing } => {
            meta.insert("step_id".into(), step.to_string());
            meta.insert("missing".into(), join(missing));
            (Code::FailedPrecondition, "DEPENDENCIES_INCOMPLETE")
        }
        Error::IncompleteStepsNeedDeviations { steps } => {
            meta.insert("incomplete_steps".into(), join(steps));
            (Code::FailedPrecondition, "DEVIATIONS_REQUIRED")
        }
        Error::ModificationNotFound(id) => {
            meta.insert("modification_id".into(), id.to_string());
            (Code::NotFound, "MODIFICATION_NOT_FOUND")
        }
        Error::SessionNotFound(id) => {
            meta.insert("session_id".into(), id.clone());
            (Code::NotFound, "SESSION_NOT_FOUND")
        }
        Error::ParentNotFound(id) => {
            meta.insert("parent_session_id".into(), id.clone());
            (Code::NotFound, "PARENT_NOT_FOUND")
        }
        Error::SessionExists(id) => {
            meta.insert("session_id".into(), id.clone());
            (Code::AlreadyExists, "SESSION_EXISTS")
        }
        Error::ParentCycle { session, parent } => {
            meta.insert("session_id".into(), session.clone());
            meta.insert("parent_session_id".into(), parent.clone());
            field = Some(("parent_session_id".into(), message.clone()));
            (Code::InvalidArgument, "PARENT_CYCLE")
        }
        Error::SessionHasChildren { session, children } => {
            meta.insert("session_id".into(), session.clone());
            meta.insert("children".into(), children.to_string());
            (Code::FailedPrecondition, "SESSION_HAS_CHILDREN")
        }
        Error::RevisionMismatch { expected, actual } => {
            meta.insert("expected_revision".into(), expected.to_string());
            meta.insert("actual_revision".into(), actual.to_string());
            (Code::Aborted, "REVISION_MISMATCH")
        }
        Error::RevisionCompacted {
            requested,
            compact_revision,
            current_revision,
        } => {
            meta.insert("requested_revision".into(), requested.to_string());
            meta.insert("compact_revision".into(), compact_revision.to_string());
            meta.insert("current_revision".into(), current_revision.to_string());
            (Code::FailedPrecondition, "REVISION_COMPACTED")
        }
        Error::RevisionNotYet { requested, next } => {
            meta.insert("requested_revision".into(), requested.to_string());
            meta.insert("next_revision".into(), next.to_string());
            field = Some(("start_revision".into(), message.clone()));
            (Code::OutOfRange, "REVISION_NOT_YET")
        }
        Error::PrincipalExists(id) => {
            meta.insert("principal_id".into(), id.clone());
            (Code::AlreadyExists, "PRINCIPAL_EXISTS")
        }
        Error::AgentIdTaken {
            agent_id,
            principal_id,
        } => {
            meta.insert("agent_id".into(), agent_id.clone());
            meta.insert("principal_id".into(), principal_id.clone());
            field = Some(("principal.agent_ids".into(), message.clone()));
            (Code::AlreadyExists, "AGENT_ID_TAKEN")
        }
        Error::TaskNotFound(id) => {
            meta.insert("task_id".into(), id.clone());
            domain = A2A_ERROR_DOMAIN;
            (Code::NotFound, "TASK_NOT_FOUND")
        }
        Error::UnsupportedOperation(_) => {
            domain = A2A_ERROR_DOMAIN;
            (Code::FailedPrecondition, "UNSUPPORTED_OPERATION")
        }
        Error::PushNotSupported(_) => {
            domain = A2A_ERROR_DOMAIN;
            (Code::FailedPrecondition, "PUSH_NOTIFICATION_NOT_SUPPORTED")
        }
        Error::PrincipalNotFound(id) => {
            meta.insert("principal_id".into(), id.clone());
            (Code::NotFound, "PRINCIPAL_NOT_FOUND")
        }
        Error::Unauthenticated(_) => (Code::Unauthenticated, "UNAUTHENTICATED"),
        Error::PermissionDenied { reason, .. } => (Code::PermissionDenied, reason.reason()),
        Error::Conflicting(_) => (Code::InvalidArgument, "CONFLICTING_OPTIONS"),
        Error::ShuttingDown => (Code::Unavailable, "SHUTTING_DOWN"),
        Error::Unavailable(_) => (Code::Unavailable, "STORE_UNAVAILABLE"),
        Error::DiskFull { .. } => (Code::ResourceExhausted, "DISK_FULL"),
        Error::BackupFailed { dir, .. } => {
            meta.insert("dir".into(), dir.clone());
            (Code::ResourceExhausted, "BACKUP_FAILED")
        }
        Error::DataLoss { file, .. } => {
            meta.insert("file".into(), file.clone());
            (Code::DataLoss, "DATA_CORRUPTED")
        }
        Error::Storage(_) => (Code::Internal, "STORAGE"),
        Error::Internal(_) => (Code::Internal, "INTERNAL"),
    };
    Classified {
        code,
        reason,
        domain,
        message,
        meta,
        field,
    }
}

fn join(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_carry_code_reason_and_field() {
        let s = status(Error::MultipleStepsInProgress);
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(s.message(), "At most one step can be in_progress at a time");
        let info = s.get_details_error_info().unwrap();
        assert_eq!(info.reason, "MULTIPLE_IN_PROGRESS");
        assert_eq!(info.domain, "cairn.dev");

        let s = status(Error::invalid("plan[1].step", "must not be empty"));
        let bad = s.get_details_bad_request().unwrap();
        assert_eq!(bad.field_violations[0].field, "plan[1].step");

        let s = status(Error::RevisionMismatch {
            expected: 3,
            actual: 4,
        });
        assert_eq!(s.code(), Code::Aborted);
        let info = s.get_details_error_info().unwrap();
        assert_eq!(info.reason, "REVISION_MISMATCH");
        assert_eq!(info.metadata["actual_revision"], "4");
    }
}
