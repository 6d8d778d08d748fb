//! Pure rules: plain structs in, plain structs (or an [`Error`]) out.
//!
//! Nothing here knows about tonic, tokio or redb. The API layer converts
//! requests into these types, the store loads and saves them, and every rule
//! of SPEC §2 lives in exactly one function below:
//!
//! - [`session`]: session ids, labels and tree moves;
//! - [`plan`]: the `update_plan` checklist (one in progress, simple-task hint,
//!   stable item ids);
//! - [`plan_mode`]: the plan-mode state machine, step dependencies,
//!   modifications, and which tools are blocked while planning;
//! - [`todo`]: the per-agent todo merge.
//!
//! The types derive serde so the store can persist them; every struct uses
//! `#[serde(default)]` so records written by an older Cairn still load after a
//! field is added.

pub mod plan;
pub mod plan_mode;
pub mod session;
pub mod todo;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Server time in microseconds since the Unix epoch. The server owns every
/// timestamp so that clients with skewed clocks cannot reorder history.
pub type Micros = i64;

/// Size and count limits. Every input is checked against them before any
/// rule runs, so oversized input is refused with a clear error instead of
/// growing the database without bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Items of a checklist, steps of an implementation plan, and entries of
    /// each list inside a plan (files, risks, dependencies...).
    pub max_plan_steps: usize,
    /// Items of one agent's todo list, after merging.
    pub max_todos: usize,
    /// Bytes of any one text field.
    pub max_text_bytes: usize,
    /// Characters of any id (session, agent, todo).
    pub max_id_len: usize,
    /// Labels on one session.
    pub max_labels: usize,
    /// Sessions on the path from a root to any session: bounds the work
    /// (ancestry in every event, cycle checks) each tree operation does.
    pub max_tree_depth: usize,
    /// Bytes of one stored plan: the checklist with the plan-mode state
    /// (pending and active plans, modifications). Every change rewrites
    /// and logs the whole record, so this bounds each write's cost.
    pub max_plan_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_plan_steps: 200,
            max_todos: 500,
            max_text_bytes: 8 * 1024,
            max_id_len: 128,
            max_labels: 64,
            max_tree_depth: 64,
            max_plan_bytes: 1024 * 1024,
        }
    }
}

impl Limits {
    /// Refuses text longer than `max_text_bytes`.
    pub fn check_text(&self, field: impl FnOnce() -> String, text: &str) -> Result<()> {
        if text.len() > self.max_text_bytes {
            return Err(Error::LimitExceeded {
                field: field(),
                what: "text size in bytes",
                limit: self.max_text_bytes,
                actual: text.len(),
            });
        }
        Ok(())
    }

    /// Refuses text that is empty (after trimming) or too long.
    pub fn check_required_text(&self, field: impl Fn() -> String, text: &str) -> Result<()> {
        if text.trim().is_empty() {
            return Err(Error::invalid(field(), "must not be empty"));
        }
        self.check_text(field, text)
    }

    /// Refuses a list longer than `max`.
    pub fn check_count(field: &str, what: &'static str, max: usize, actual: usize) -> Result<()> {
        if actual > max {
            return Err(Error::LimitExceeded {
                field: field.to_owned(),
                what,
                limit: max,
                actual,
            });
        }
        Ok(())
    }

    /// Checks a resource id (session or agent): 1..=`max_id_len` characters
    /// of `[A-Za-z0-9._:-]`, so ids are safe in URLs, file names and logs.
    pub fn check_resource_id(&self, field: &str, id: &str) -> Result<()> {
        if id.is_empty() {
            return Err(Error::invalid(field, "must not be empty"));
        }
        if id.len() > self.max_id_len {
            return Err(Error::LimitExceeded {
                field: field.to_owned(),
                what: "id length",
                limit: self.max_id_len,
                actual: id.len(),
            });
        }
        if let Some(bad) = id
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
        {
            return Err(Error::invalid(
                field,
                format!("invalid character {bad:?}: ids use only [A-Za-z0-9._:-]"),
            ));
        }
        // URL paths normalise these two away (`/sessions/../approve`).
        if id == "." || id == ".." {
            return Err(Error::invalid(field, "`.` and `..` are not ids"));
        }
        Ok(())
    }
}

/// Everything a session's plan holds: the `update_plan` checklist and the
/// plan-mode state. They are stored together because plan-mode transitions
/// rewrite the checklist in the same revision.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SessionPlan {
    /// The checklist shown as the session's progress.
    pub checklist: plan::Checklist,
    /// Plan mode: goal, pending and active implementation plans.
    pub mode: plan_mode::PlanModeState,
}

/// ISO-8601 / RFC 3339 UTC text of a server time, to the millisecond, as
/// the seed's `created_at` / `updated_at` show it.
pub fn rfc3339(micros: Micros) -> String {
    let secs = micros.div_euclid(1_000_000);
    let millis = micros.rem_euclid(1_000_000) / 1000;
    let (y, m, d) = plan_mode::civil_from_days(secs.div_euclid(86_400));
    let day = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        day / 3600,
        day % 3600 / 60,
        day % 60
    )
}

/// Checks an optimistic-concurrency precondition against a resource's
/// revision (0 for a resource that does not exist yet).
pub fn check_expected_revision(expected: Option<u64>, actual: u64) -> Result<()> {
    match expected {
        Some(expected) if expected != actual => Err(Error::RevisionMismatch { expected, actual }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_ids() {
        let l = Limits::default();
        assert!(l.check_resource_id("id", "orch-1:sub_2.a").is_ok());
        assert!(matches!(
            l.check_resource_id("id", ""),
            Err(Error::InvalidField { .. })
        ));
        assert!(matches!(
            l.check_resource_id("id", "a b"),
            Err(Error::InvalidField { .. })
        ));
        assert!(matches!(
            l.check_resource_id("id", &"x".repeat(129)),
            Err(Error::LimitExceeded { .. })
        ));
        assert!(l.check_resource_id("id", &"x".repeat(128)).is_ok());
        assert!(l.check_resource_id("id", ".").is_err());
        assert!(l.check_resource_id("id", "..").is_err());
        assert!(l.check_resource_id("id", "...").is_ok());
    }

    #[test]
    fn timestamps_as_text() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_011_733_123_456), "2026-11-30T04:08:53.123Z");
    }

    #[test]
    fn expected_revision() {
        assert!(check_expected_revision(None, 5).is_ok());
        assert!(check_expected_revision(Some(5), 5).is_ok());
        assert_eq!(
            check_expected_revision(Some(4), 5),
            Err(Error::RevisionMismatch {
                expected: 4,
                actual: 5
            })
        );
    }
}
