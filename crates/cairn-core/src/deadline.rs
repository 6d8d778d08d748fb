//! Approval deadlines (docs/rules.md, Approval deadlines): what happens to
//! a plan or modification nobody decides on.
//!
//! ```text
//!  ExitPlanMode / ModifyPlan ── DeadlineRequest::arm ──▶ Deadline{at, policy}
//!      at passes:  WAIT      nothing (the deadline is only shown)
//!                  REJECT    rejected, with the stated reason
//!                  ESCALATE  escalated_to := escalate_to (told again),
//!                            at := now + escalation, policy := after_escalation
//! ```
//!
//! A deadline is applied by a command naming the item and the deadline it
//! passed (`PlanCommand::Deadline`): of several servers that see the same
//! deadline pass, the first applies it and the others find it moved.

use serde::{Deserialize, Serialize};

use crate::Micros;
use crate::error::{Error, Result};
use crate::limits::Limits;

/// What happens when an approval deadline passes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Nothing: the item waits on, its deadline shown.
    #[default]
    Wait,
    /// The item is rejected with the stated reason.
    Reject,
    /// The named principal or role is told, and a new deadline starts.
    Escalate,
}

impl Policy {
    /// The policy's name in messages (as the API spells it).
    pub fn name(self) -> &'static str {
        match self {
            Policy::Wait => "WAIT",
            Policy::Reject => "REJECT",
            Policy::Escalate => "ESCALATE",
        }
    }
}

/// Shortest deadline: anything shorter would pass before a person could see it.
pub const MIN_TIMEOUT_MS: u64 = 1_000;
/// Longest deadline: 30 days.
pub const MAX_TIMEOUT_MS: u64 = 30 * 86_400_000;

/// The reason recorded when a deadline rejects and none was stated.
pub const DEFAULT_REJECT_REASON: &str = "no decision before the approval deadline";

/// A deadline as a caller asks for it with `ExitPlanMode` or `ModifyPlan`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadlineRequest {
    /// From submission to the deadline.
    pub timeout_ms: u64,
    pub policy: Policy,
    /// `REJECT` (or `REJECT` after escalating): the reason recorded.
    pub reject_reason: String,
    /// `ESCALATE`: a principal id, or `role:<role>`.
    pub escalate_to: String,
    /// `ESCALATE`: from the escalation to the new deadline.
    pub escalation_timeout_ms: u64,
    /// `ESCALATE`: what the new deadline does, `WAIT` or `REJECT`.
    pub after_escalation: Policy,
}

/// A deadline as it stands on a waiting item.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Deadline {
    /// When it passes.
    pub at: Micros,
    /// What happens then.
    pub policy: Policy,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reject_reason: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub escalate_to: String,
    #[serde(skip_serializing_if = "crate::is_zero")]
    pub escalation_timeout_ms: u64,
    #[serde(skip_serializing_if = "crate::is_zero")]
    pub after_escalation: Policy,
    /// Who it was escalated to, once it was.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub escalated_to: String,
    /// When it was escalated, once it was.
    #[serde(skip_serializing_if = "crate::is_zero")]
    pub escalate_time: Micros,
}

/// What a passed deadline did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforced {
    Rejected,
    Escalated,
}

fn check_timeout(field: &str, ms: u64) -> Result<()> {
    if (MIN_TIMEOUT_MS..=MAX_TIMEOUT_MS).contains(&ms) {
        return Ok(());
    }
    Err(Error::invalid(
        field,
        format!("must be between 1s and 30d, got {ms} ms"),
    ))
}

fn refuse(field: &str, policy: Policy) -> Error {
    Error::invalid(
        format!("deadline.{field}"),
        format!("is not used with policy {}", policy.name()),
    )
}

/// A target of escalation: a principal id, or `role:` and a role name.
fn check_target(target: &str, limits: &Limits) -> Result<()> {
    const FIELD: &str = "deadline.escalate_to";
    if target.is_empty() {
        return Err(Error::invalid(FIELD, "is required with policy ESCALATE"));
    }
    match target.strip_prefix("role:") {
        Some(role) if crate::access::Role::parse(role).is_none() => Err(Error::invalid(
            FIELD,
            format!(
                "role {:?} is not one of admin, orchestrator, agent, approver, viewer",
                crate::error::excerpt(role)
            ),
        )),
        Some(_) => Ok(()),
        None => limits.check_resource_id(FIELD, target),
    }
}

impl DeadlineRequest {
    /// Checks the request: a timeout in range, and exactly the fields its
    /// policy uses.
    pub fn validate(&self, limits: &Limits) -> Result<()> {
        check_timeout("deadline.timeout", self.timeout_ms)?;
        let p = self.policy;
        if p != Policy::Escalate {
            if !self.escalate_to.is_empty() {
                return Err(refuse("escalate_to", p));
            }
            if self.escalation_timeout_ms != 0 {
                return Err(refuse("escalation_timeout", p));
            }
            if self.after_escalation != Policy::Wait {
                return Err(refuse("after_escalation", p));
            }
        }
        match p {
            Policy::Wait if !self.reject_reason.is_empty() => Err(refuse("reject_reason", p)),
            Policy::Wait => Ok(()),
            Policy::Reject => {
                limits.check_text(|| "deadline.reject_reason".into(), &self.reject_reason)
            }
            Policy::Escalate => {
                check_target(&self.escalate_to, limits)?;
                check_timeout("deadline.escalation_timeout", self.escalation_timeout_ms)?;
                match self.after_escalation {
                    Policy::Escalate => Err(Error::invalid(
                        "deadline.after_escalation",
                        "must be WAIT or REJECT",
                    )),
                    Policy::Wait if !self.reject_reason.is_empty() => {
                        Err(refuse("reject_reason", Policy::Wait))
                    }
                    _ => limits.check_text(|| "deadline.reject_reason".into(), &self.reject_reason),
                }
            }
        }
    }

    /// The deadline it sets for an item submitted at `now`.
    pub fn arm(&self, now: Micros) -> Deadline {
        Deadline {
            at: after(now, self.timeout_ms),
            policy: self.policy,
            reject_reason: self.reject_reason.clone(),
            escalate_to: self.escalate_to.clone(),
            escalation_timeout_ms: self.escalation_timeout_ms,
            after_escalation: self.after_escalation,
            escalated_to: String::new(),
            escalate_time: 0,
        }
    }
}

fn after(now: Micros, ms: u64) -> Micros {
    now.saturating_add(i64::try_from(ms.saturating_mul(1000)).unwrap_or(i64::MAX))
}

impl Deadline {
    /// Whether passing it does anything (a `WAIT` deadline is only shown).
    pub fn acts(&self) -> bool {
        self.policy != Policy::Wait
    }

    /// The reason a rejection by this deadline records.
    pub fn reason(&self) -> String {
        if self.reject_reason.is_empty() {
            DEFAULT_REJECT_REASON.to_owned()
        } else {
            self.reject_reason.clone()
        }
    }

    /// Checks that this is the deadline `at` that passed by `now`, and
    /// says what it does; an escalation is applied to `self` here.
    pub fn pass(&mut self, at: Micros, now: Micros) -> Result<Enforced> {
        if self.at != at || now < at || !self.acts() {
            return Err(Error::DeadlineMoved);
        }
        match self.policy {
            Policy::Reject => Ok(Enforced::Rejected),
            Policy::Escalate => {
                self.escalated_to = std::mem::take(&mut self.escalate_to);
                self.escalate_time = now;
                self.at = after(now, self.escalation_timeout_ms);
                self.escalation_timeout_ms = 0;
                self.policy = std::mem::take(&mut self.after_escalation);
                Ok(Enforced::Escalated)
            }
            Policy::Wait => Err(Error::DeadlineMoved),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escalate() -> DeadlineRequest {
        DeadlineRequest {
            timeout_ms: 60_000,
            policy: Policy::Escalate,
            escalate_to: "role:admin".into(),
            escalation_timeout_ms: 120_000,
            after_escalation: Policy::Reject,
            reject_reason: "nobody answered".into(),
        }
    }

    #[test]
    fn requests_use_exactly_their_policy_s_fields() {
        let l = Limits::default();
        assert!(escalate().validate(&l).is_ok());
        let bad = |r: DeadlineRequest| r.validate(&l).unwrap_err().to_string();
        assert!(bad(DeadlineRequest::default()).contains("deadline.timeout"));
        let wait = DeadlineRequest {
            timeout_ms: 1_000,
            ..DeadlineRequest::default()
        };
        assert!(wait.validate(&l).is_ok());
        assert!(
            bad(DeadlineRequest {
                escalate_to: "lead".into(),
                ..wait.clone()
            })
            .contains("deadline.escalate_to: is not used with policy WAIT")
        );
        assert!(
            bad(DeadlineRequest {
                timeout_ms: MAX_TIMEOUT_MS + 1,
                ..wait.clone()
            })
            .contains("between 1s and 30d")
        );
        assert!(
            bad(DeadlineRequest {
                escalate_to: String::new(),
                ..escalate()
            })
            .contains("is required with policy ESCALATE")
        );
        assert!(
            bad(DeadlineRequest {
                escalate_to: "role:king".into(),
                ..escalate()
            })
            .contains("\"king\" is not one of")
        );
        assert!(
            bad(DeadlineRequest {
                after_escalation: Policy::Escalate,
                ..escalate()
            })
            .contains("must be WAIT or REJECT")
        );
        assert!(
            bad(DeadlineRequest {
                escalation_timeout_ms: 0,
                ..escalate()
            })
            .contains("deadline.escalation_timeout")
        );
    }

    #[test]
    fn an_escalation_starts_the_second_deadline_and_passes_once() {
        let mut d = escalate().arm(1_000_000);
        assert_eq!(d.at, 61_000_000);
        assert_eq!(d.pass(d.at, d.at - 1), Err(Error::DeadlineMoved));
        assert_eq!(d.pass(d.at + 1, d.at + 1), Err(Error::DeadlineMoved));
        assert_eq!(d.pass(61_000_000, 62_000_000), Ok(Enforced::Escalated));
        assert_eq!(d.escalated_to, "role:admin");
        assert_eq!(d.at, 182_000_000);
        assert_eq!(d.policy, Policy::Reject);
        // The same passing, seen by a second server: already applied.
        assert_eq!(d.pass(61_000_000, 62_000_000), Err(Error::DeadlineMoved));
        assert_eq!(d.pass(d.at, d.at), Ok(Enforced::Rejected));
        assert_eq!(d.reason(), "nobody answered");
    }

    #[test]
    fn a_wait_deadline_never_acts() {
        let mut d = DeadlineRequest {
            timeout_ms: 1_000,
            ..DeadlineRequest::default()
        }
        .arm(0);
        assert!(!d.acts());
        assert_eq!(d.pass(d.at, d.at), Err(Error::DeadlineMoved));
        assert_eq!(d.reason(), DEFAULT_REJECT_REASON);
    }
}
