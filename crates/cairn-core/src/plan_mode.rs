//! Plan mode (docs/rules.md, Plan mode): explore read-only, propose, get approval, execute.
//!
//! ```text
//!            enter              exit(plan)              approve
//!   NORMAL ───────▶ PLANNING ─────────────▶ AWAITING ───────────▶ NORMAL + active plan
//!     ▲                                        │ reject                 │ complete_step…
//!     └────────────────────────────────────────┘                        ▼ complete_plan → history
//! ```
//!
//! Every operation validates first and mutates only when it succeeds, so an
//! error leaves the state exactly as it was. Operations that end a plan return
//! the [`HistoryEntry`] for the store to append. The checklist is a projection
//! of the active plan: approval, step completion and approved modifications
//! rewrite it with [`project_checklist`].

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::deadline::{Deadline, DeadlineRequest, Enforced};
use crate::error::{Error, Result};
use crate::inbox::{Awaited, Awaiting};
use crate::limits::Limits;
use crate::plan::{Checklist, PlanItem, PlanSource, StepStatus};
use crate::time::{Micros, civil_from_days};

/// The session's mode. Execution of an approved plan happens in `Normal`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    #[default]
    Normal,
    Planning,
    AwaitingApproval,
}

/// Size estimate of a plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Complexity {
    #[default]
    Unspecified,
    Small,
    Medium,
    Large,
}

/// One implementation step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Step {
    pub id: u32,
    pub description: String,
    pub files: Vec<String>,
    pub depends_on: Vec<u32>,
    pub verification: String,
}

/// The plan submitted by `plan_exit`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ImplementationPlan {
    pub summary: String,
    pub approach: String,
    pub alternatives_considered: Vec<String>,
    pub steps: Vec<Step>,
    pub risks: Vec<String>,
    pub files_to_create: Vec<String>,
    pub files_to_modify: Vec<String>,
    pub tests_to_write: Vec<String>,
    pub estimated_complexity: Complexity,
}

impl ImplementationPlan {
    fn step(&self, id: u32) -> Option<&Step> {
        self.steps.iter().find(|s| s.id == id)
    }
}

/// A plan awaiting approval.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PendingPlan {
    /// `plan_YYYY-MM-DD_xxxxxx`.
    pub plan_id: String,
    pub plan: ImplementationPlan,
    pub submit_time: Micros,
    /// The principal that submitted it (empty with authentication off),
    /// who may not approve it.
    pub submitted_by: String,
    /// What happens if nobody decides in time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Deadline>,
}

/// Record of one completed step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StepCompletion {
    pub step_id: u32,
    pub verification_result: String,
    pub complete_time: Micros,
}

/// A change to a step of the active plan, as an agent asks for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModificationRequest {
    pub step_id: u32,
    pub reason: String,
    pub new_description: String,
    /// Empty keeps the step's files.
    pub new_files: Vec<String>,
    pub new_verification: Option<String>,
    /// What happens if nobody decides in time.
    pub deadline: Option<DeadlineRequest>,
}

/// A proposed (or, in history, applied) change to an active plan's step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Modification {
    pub id: u32,
    pub step_id: u32,
    pub reason: String,
    pub new_description: String,
    /// Empty keeps the step's files.
    pub new_files: Vec<String>,
    pub new_verification: Option<String>,
    pub create_time: Micros,
    /// The principal that requested it (empty with authentication off),
    /// who may not approve it.
    pub submitted_by: String,
    /// What happens if nobody decides in time (dropped once applied).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Deadline>,
}

/// The approved plan being executed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ActivePlan {
    pub plan_id: String,
    /// The goal it was planned for, kept for history.
    pub goal: String,
    pub plan: ImplementationPlan,
    pub approver: String,
    pub approve_time: Micros,
    pub submit_time: Micros,
    /// In completion order.
    pub completions: Vec<StepCompletion>,
    pub applied_modifications: Vec<Modification>,
}

impl ActivePlan {
    /// Ids of completed steps.
    pub fn completed_ids(&self) -> BTreeSet<u32> {
        self.completions.iter().map(|c| c.step_id).collect()
    }

    /// The lowest-id incomplete step whose dependencies are all completed.
    pub fn current_step(&self) -> Option<u32> {
        let done = self.completed_ids();
        self.plan
            .steps
            .iter()
            .filter(|s| !done.contains(&s.id) && s.depends_on.iter().all(|d| done.contains(d)))
            .map(|s| s.id)
            .min()
    }

    /// Ids of steps not completed yet, ascending.
    pub fn incomplete_ids(&self) -> Vec<u32> {
        let done = self.completed_ids();
        let mut ids: Vec<u32> = self
            .plan
            .steps
            .iter()
            .map(|s| s.id)
            .filter(|id| !done.contains(id))
            .collect();
        ids.sort_unstable();
        ids
    }
}

/// How a past plan ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    #[default]
    Rejected,
    Completed,
    Superseded,
}

/// A closed plan, appended to the session's history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HistoryEntry {
    pub plan_id: String,
    pub goal: String,
    pub plan: ImplementationPlan,
    pub outcome: Outcome,
    pub reason: String,
    pub summary: String,
    pub deviations: Vec<String>,
    pub approver: String,
    pub completions: Vec<StepCompletion>,
    pub applied_modifications: Vec<Modification>,
    pub submit_time: Micros,
    pub end_time: Micros,
}

/// Plan-mode state of one session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PlanModeState {
    pub mode: Mode,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub goal: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub scope: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingPlan>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active: Option<ActivePlan>,
    /// Modifications of the active plan awaiting approval.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub modifications: Vec<Modification>,
    /// Next modification id; never reused within a session.
    #[serde(skip_serializing_if = "crate::is_zero")]
    pub next_modification_id: u32,
}

impl PlanModeState {
    /// What of this session awaits approval, with when it started waiting.
    pub fn awaiting(&self, session_id: &str) -> Vec<Awaiting> {
        // Collected, not pre-sized: every plan write asks this twice, and
        // most plans await nothing, which then allocates nothing.
        let key = |since, item| Awaiting {
            since,
            session_id: session_id.to_owned(),
            item,
        };
        let plan = self
            .pending
            .iter()
            .map(|p| key(p.submit_time, Awaited::Plan));
        let modifications = self
            .modifications
            .iter()
            .map(|m| key(m.create_time, Awaited::Modification(m.id)));
        plan.chain(modifications).collect()
    }

    /// The approval deadline of a waiting item, if it has one.
    pub fn deadline_of(&self, item: Awaited) -> Option<&Deadline> {
        match item {
            Awaited::Plan => self.pending.as_ref()?.deadline.as_ref(),
            Awaited::Modification(id) => self
                .modifications
                .iter()
                .find(|m| m.id == id)?
                .deadline
                .as_ref(),
        }
    }
}

/// Approved modifications an active plan (and its history entry) keeps,
/// the newest ones.
pub const APPLIED_MODIFICATIONS_KEPT: usize = 32;

/// Everything a session's plan holds: the `update_plan` checklist and the
/// plan-mode state. They are stored together because plan-mode transitions
/// rewrite the checklist in the same revision.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SessionPlan {
    /// The checklist shown as the session's progress.
    pub checklist: Checklist,
    /// Plan mode: goal, pending and active implementation plans.
    pub mode: PlanModeState,
}

/// Makes a plan id `plan_YYYY-MM-DD_xxxxxx` from the submit time and six
/// random characters chosen by the caller (rules stay deterministic).
pub fn plan_id(now: Micros, suffix: &str) -> String {
    let days = now.div_euclid(86_400_000_000);
    let (y, m, d) = civil_from_days(days);
    format!("plan_{y:04}-{m:02}-{d:02}_{suffix}")
}

/// The deadline a request sets, checked.
fn arm(
    request: Option<&DeadlineRequest>,
    now: Micros,
    limits: &Limits,
) -> Result<Option<Deadline>> {
    request
        .map(|r| r.validate(limits).map(|()| r.arm(now)))
        .transpose()
}

/// Checks an implementation plan: summary, steps with unique positive ids,
/// dependencies that exist and form no cycle, and every limit.
pub fn validate_plan(plan: &ImplementationPlan, limits: &Limits) -> Result<()> {
    limits.check_required_text(|| "plan.summary".into(), &plan.summary)?;
    limits.check_text(|| "plan.approach".into(), &plan.approach)?;
    for (name, list) in [
        (
            "plan.alternatives_considered",
            &plan.alternatives_considered,
        ),
        ("plan.risks", &plan.risks),
        ("plan.files_to_create", &plan.files_to_create),
        ("plan.files_to_modify", &plan.files_to_modify),
        ("plan.tests_to_write", &plan.tests_to_write),
    ] {
        check_list(limits, name, list)?;
    }
    if plan.steps.is_empty() {
        return Err(Error::invalid(
            "plan.steps",
            "must contain at least one step",
        ));
    }
    Limits::check_count(
        "plan.steps",
        "number of steps",
        limits.max_plan_steps,
        plan.steps.len(),
    )?;
    let mut ids = BTreeSet::new();
    for (i, step) in plan.steps.iter().enumerate() {
        if step.id == 0 {
            return Err(Error::invalid(
                format!("plan.steps[{i}].id"),
                "must be a positive integer",
            ));
        }
        if !ids.insert(step.id) {
            return Err(Error::invalid(
                format!("plan.steps[{i}].id"),
                format!("duplicate step id {}", step.id),
            ));
        }
        limits.check_required_text(|| format!("plan.steps[{i}].description"), &step.description)?;
        limits.check_text(
            || format!("plan.steps[{i}].verification"),
            &step.verification,
        )?;
        check_list(limits, &format!("plan.steps[{i}].files"), &step.files)?;
        Limits::check_count(
            &format!("plan.steps[{i}].depends_on"),
            "number of dependencies",
            limits.max_plan_steps,
            step.depends_on.len(),
        )?;
    }
    for (i, step) in plan.steps.iter().enumerate() {
        for dep in &step.depends_on {
            if *dep == step.id {
                return Err(Error::invalid(
                    format!("plan.steps[{i}].depends_on"),
                    format!("step {dep} cannot depend on itself"),
                ));
            }
            if !ids.contains(dep) {
                return Err(Error::invalid(
                    format!("plan.steps[{i}].depends_on"),
                    format!("step {dep} does not exist"),
                ));
            }
        }
    }
    let cyclic = steps_in_cycles(&plan.steps);
    if !cyclic.is_empty() {
        let names: Vec<String> = cyclic.iter().map(u32::to_string).collect();
        return Err(Error::invalid(
            "plan.steps",
            format!("dependency cycle among steps {}", names.join(", ")),
        ));
    }
    Ok(())
}

fn check_list(limits: &Limits, field: &str, list: &[String]) -> Result<()> {
    Limits::check_count(
        field,
        "number of entries",
        limits.max_plan_steps,
        list.len(),
    )?;
    for (i, text) in list.iter().enumerate() {
        limits.check_text(|| format!("{field}[{i}]"), text)?;
    }
    Ok(())
}

/// Kahn's algorithm: whatever cannot be ordered sits on (or behind) a cycle.
fn steps_in_cycles(steps: &[Step]) -> Vec<u32> {
    let mut indegree: BTreeMap<u32, usize> = steps
        .iter()
        .map(|s| (s.id, s.depends_on.iter().collect::<BTreeSet<_>>().len()))
        .collect();
    let mut ready: Vec<u32> = indegree
        .iter()
        .filter(|&(_, &n)| n == 0)
        .map(|(&id, _)| id)
        .collect();
    while let Some(done) = ready.pop() {
        indegree.remove(&done);
        for s in steps {
            if indegree.contains_key(&s.id)
                && s.depends_on.iter().collect::<BTreeSet<_>>().contains(&done)
                && let Some(n) = indegree.get_mut(&s.id)
            {
                *n -= 1;
                if *n == 0 {
                    ready.push(s.id);
                }
            }
        }
    }
    indegree.into_keys().collect()
}

/// What the checklist shows for an active plan: every step by id, completed
/// ones completed, the current step in progress, the rest pending.
pub fn project_checklist(active: &ActivePlan, prev: &Checklist) -> Checklist {
    let done = active.completed_ids();
    let current = active.current_step();
    let items: Vec<PlanItem> = active
        .plan
        .steps
        .iter()
        .map(|s| PlanItem {
            id: s.id,
            step: s.description.clone(),
            status: if done.contains(&s.id) {
                StepStatus::Completed
            } else if Some(s.id) == current {
                StepStatus::InProgress
            } else {
                StepStatus::Pending
            },
            blocked_by: Vec::new(),
        })
        .collect();
    let max_id = items.iter().map(|i| i.id).max().unwrap_or(0);
    Checklist {
        explanation: active.plan.summary.clone(),
        items,
        next_id: prev.next_id.max(max_id.saturating_add(1)),
        source: PlanSource::Tool,
    }
}

impl SessionPlan {
    /// `plan_enter`: NORMAL -> PLANNING.
    pub fn enter(&mut self, goal: String, scope: String, limits: &Limits) -> Result<()> {
        match self.mode.mode {
            Mode::Planning => return Err(Error::AlreadyInPlanMode),
            Mode::AwaitingApproval => return Err(Error::PlanAwaitingApproval),
            Mode::Normal => {}
        }
        limits.check_required_text(|| "goal".into(), &goal)?;
        limits.check_text(|| "scope".into(), &scope)?;
        self.mode.mode = Mode::Planning;
        self.mode.goal = goal;
        self.mode.scope = scope;
        Ok(())
    }

    /// `plan_exit`: PLANNING -> AWAITING_APPROVAL with a validated plan,
    /// and its approval deadline when one is asked for.
    pub fn exit(
        &mut self,
        plan: ImplementationPlan,
        (plan_id, submitted_by): (String, String),
        deadline: Option<&DeadlineRequest>,
        now: Micros,
        limits: &Limits,
    ) -> Result<&PendingPlan> {
        if self.mode.mode != Mode::Planning {
            return Err(Error::NotInPlanMode);
        }
        validate_plan(&plan, limits)?;
        let deadline = arm(deadline, now, limits)?;
        self.mode.mode = Mode::AwaitingApproval;
        Ok(self.mode.pending.insert(PendingPlan {
            plan_id,
            plan,
            submit_time: now,
            submitted_by,
            deadline,
        }))
    }

    /// `plan_approve`: the pending plan becomes active and the checklist.
    /// A still-active older plan is closed as superseded.
    pub fn approve(
        &mut self,
        approver: String,
        now: Micros,
        limits: &Limits,
    ) -> Result<Option<HistoryEntry>> {
        if self.mode.mode != Mode::AwaitingApproval {
            return Err(Error::NoPendingPlan);
        }
        limits.check_text(|| "approver".into(), &approver)?;
        if let Some(pending) = &self.mode.pending {
            refuse_self(&pending.submitted_by, &approver, "plan")?;
        }
        let Some(pending) = self.mode.pending.take() else {
            return Err(Error::NoPendingPlan);
        };
        let superseded = self.mode.active.take().map(|old| HistoryEntry {
            outcome: Outcome::Superseded,
            end_time: now,
            ..history_of(old)
        });
        let active = ActivePlan {
            plan_id: pending.plan_id,
            goal: self.mode.goal.clone(),
            plan: pending.plan,
            approver,
            approve_time: now,
            submit_time: pending.submit_time,
            completions: Vec::new(),
            applied_modifications: Vec::new(),
        };
        self.checklist = project_checklist(&active, &self.checklist);
        self.mode.active = Some(active);
        self.mode.modifications.clear();
        self.mode.mode = Mode::Normal;
        Ok(superseded)
    }

    /// `plan_reject`: back to NORMAL; the pending plan goes to history.
    pub fn reject(
        &mut self,
        reason: String,
        by: &str,
        now: Micros,
        limits: &Limits,
    ) -> Result<HistoryEntry> {
        if self.mode.mode != Mode::AwaitingApproval {
            return Err(Error::NoPendingPlan);
        }
        limits.check_text(|| "reason".into(), &reason)?;
        if let Some(pending) = &self.mode.pending {
            refuse_self(&pending.submitted_by, by, "plan")?;
        }
        self.close_pending(reason, now)
    }

    /// The pending plan, rejected for `reason`: back to NORMAL, and the
    /// history entry that records it.
    fn close_pending(&mut self, reason: String, now: Micros) -> Result<HistoryEntry> {
        let Some(pending) = self.mode.pending.take() else {
            return Err(Error::NoPendingPlan);
        };
        self.mode.mode = Mode::Normal;
        let goal = if self.mode.active.is_some() {
            self.mode.goal.clone()
        } else {
            std::mem::take(&mut self.mode.goal)
        };
        Ok(HistoryEntry {
            plan_id: pending.plan_id,
            goal,
            plan: pending.plan,
            outcome: Outcome::Rejected,
            reason,
            submit_time: pending.submit_time,
            end_time: now,
            ..HistoryEntry::default()
        })
    }

    /// `plan_step_complete`: records the step once its dependencies are
    /// completed, then moves the checklist's in-progress item along.
    pub fn complete_step(
        &mut self,
        step_id: u32,
        verification_result: String,
        now: Micros,
        limits: &Limits,
    ) -> Result<()> {
        let active = self.mode.active.as_mut().ok_or(Error::NoActivePlan)?;
        let step = active
            .plan
            .step(step_id)
            .ok_or(Error::StepNotFound(step_id))?;
        let done = active.completed_ids();
        if done.contains(&step_id) {
            return Err(Error::StepAlreadyCompleted(step_id));
        }
        let mut missing: Vec<u32> = step
            .depends_on
            .iter()
            .copied()
            .filter(|d| !done.contains(d))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if !missing.is_empty() {
            return Err(Error::DependenciesIncomplete {
                step: step_id,
                missing,
            });
        }
        limits.check_required_text(|| "verification_result".into(), &verification_result)?;
        active.completions.push(StepCompletion {
            step_id,
            verification_result,
            complete_time: now,
        });
        self.checklist = project_checklist(active, &self.checklist);
        Ok(())
    }

    /// `plan_complete`: closes the active plan. Incomplete steps need
    /// deviations that explain them.
    pub fn complete_plan(
        &mut self,
        summary: String,
        deviations: Vec<String>,
        now: Micros,
        limits: &Limits,
    ) -> Result<HistoryEntry> {
        let active = self.mode.active.as_ref().ok_or(Error::NoActivePlan)?;
        limits.check_required_text(|| "summary".into(), &summary)?;
        check_list(limits, "deviations", &deviations)?;
        let incomplete = active.incomplete_ids();
        if !incomplete.is_empty() && deviations.iter().all(|d| d.trim().is_empty()) {
            return Err(Error::IncompleteStepsNeedDeviations { steps: incomplete });
        }
        let Some(active) = self.mode.active.take() else {
            return Err(Error::NoActivePlan);
        };
        self.mode.modifications.clear();
        if self.mode.mode == Mode::Normal {
            self.mode.goal.clear();
            self.mode.scope.clear();
        }
        Ok(HistoryEntry {
            outcome: Outcome::Completed,
            summary,
            deviations,
            end_time: now,
            ..history_of(active)
        })
    }

    /// `plan_modify`: records a change to an incomplete step, requested by
    /// `submitted_by`; nothing changes until it is approved.
    pub fn modify(
        &mut self,
        request: ModificationRequest,
        submitted_by: String,
        now: Micros,
        limits: &Limits,
    ) -> Result<&Modification> {
        let ModificationRequest {
            step_id,
            reason,
            new_description,
            new_files,
            new_verification,
            deadline,
        } = request;
        let active = self.mode.active.as_ref().ok_or(Error::NoActivePlan)?;
        if active.plan.step(step_id).is_none() {
            return Err(Error::StepNotFound(step_id));
        }
        if active.completed_ids().contains(&step_id) {
            return Err(Error::StepAlreadyCompleted(step_id));
        }
        limits.check_required_text(|| "reason".into(), &reason)?;
        limits.check_required_text(|| "new_description".into(), &new_description)?;
        check_list(limits, "new_files", &new_files)?;
        if let Some(v) = &new_verification {
            limits.check_text(|| "new_verification".into(), v)?;
        }
        Limits::check_count(
            "pending_modifications",
            "number of pending modifications",
            limits.max_plan_steps,
            self.mode.modifications.len() + 1,
        )?;
        let deadline = arm(deadline.as_ref(), now, limits)?;
        self.mode.next_modification_id = self.mode.next_modification_id.max(1);
        let id = self.mode.next_modification_id;
        self.mode.next_modification_id = self.mode.next_modification_id.saturating_add(1);
        self.mode.modifications.push(Modification {
            id,
            step_id,
            reason,
            new_description,
            new_files,
            new_verification,
            create_time: now,
            submitted_by,
            deadline,
        });
        Ok(self
            .mode
            .modifications
            .last()
            .unwrap_or_else(|| unreachable!("just pushed")))
    }

    /// Applies a pending modification to its step and the checklist.
    pub fn approve_modification(&mut self, modification_id: u32, by: &str) -> Result<()> {
        let pos = self.pending_modification(modification_id)?;
        refuse_self(
            &self.mode.modifications[pos].submitted_by,
            by,
            "modification",
        )?;
        let active = self.mode.active.as_mut().ok_or(Error::NoActivePlan)?;
        let m = &self.mode.modifications[pos];
        if active.completed_ids().contains(&m.step_id) {
            return Err(Error::StepAlreadyCompleted(m.step_id));
        }
        let step = active
            .plan
            .steps
            .iter_mut()
            .find(|s| s.id == m.step_id)
            .ok_or(Error::StepNotFound(m.step_id))?;
        let mut m = self.mode.modifications.remove(pos);
        m.deadline = None;
        step.description.clone_from(&m.new_description);
        if !m.new_files.is_empty() {
            step.files.clone_from(&m.new_files);
        }
        if let Some(v) = &m.new_verification {
            step.verification.clone_from(v);
        }
        active.applied_modifications.push(m);
        // Each approved modification is replayed into every later write of
        // the record: keep a bounded tail, not all of them.
        let excess = active
            .applied_modifications
            .len()
            .saturating_sub(APPLIED_MODIFICATIONS_KEPT);
        active.applied_modifications.drain(..excess);
        self.checklist = project_checklist(active, &self.checklist);
        Ok(())
    }

    /// Drops a pending modification.
    pub fn reject_modification(&mut self, modification_id: u32, by: &str) -> Result<()> {
        let pos = self.pending_modification(modification_id)?;
        refuse_self(
            &self.mode.modifications[pos].submitted_by,
            by,
            "modification",
        )?;
        self.mode.modifications.remove(pos);
        Ok(())
    }

    /// Applies the deadline `at` of `item`, passed by `now`: a rejection
    /// (with the history entry of a rejected plan) or an escalation.
    /// Fails with [`Error::DeadlineMoved`] unless `item` still waits with
    /// that deadline, so a deadline is applied once.
    pub fn pass_deadline(
        &mut self,
        item: Awaited,
        at: Micros,
        now: Micros,
    ) -> Result<(Enforced, Option<HistoryEntry>)> {
        let slot = match item {
            Awaited::Plan => self.mode.pending.as_mut().map(|p| &mut p.deadline),
            Awaited::Modification(id) => self
                .mode
                .modifications
                .iter_mut()
                .find(|m| m.id == id)
                .map(|m| &mut m.deadline),
        };
        let Some(Some(deadline)) = slot else {
            return Err(Error::DeadlineMoved);
        };
        let mut passed = deadline.clone();
        let enforced = passed.pass(at, now)?;
        if enforced == Enforced::Escalated {
            *deadline = passed;
            return Ok((enforced, None));
        }
        match item {
            Awaited::Plan => Ok((enforced, Some(self.close_pending(passed.reason(), now)?))),
            Awaited::Modification(id) => {
                self.mode.modifications.retain(|m| m.id != id);
                Ok((enforced, None))
            }
        }
    }

    fn pending_modification(&self, modification_id: u32) -> Result<usize> {
        if self.mode.active.is_none() {
            return Err(Error::NoActivePlan);
        }
        self.mode
            .modifications
            .iter()
            .position(|m| m.id == modification_id)
            .ok_or(Error::ModificationNotFound(modification_id))
    }

    /// Whether the session's plan is done: its checklist is complete, or it
    /// had an approved plan that was completed and nothing new started.
    pub fn is_complete(&self) -> bool {
        match &self.mode.active {
            Some(active) => active.incomplete_ids().is_empty(),
            None => self.mode.mode == Mode::Normal && self.checklist.is_complete(),
        }
    }
}

/// A principal may not decide on what it submitted itself (with
/// authentication off, submissions name nobody and anyone decides).
fn refuse_self(submitted_by: &str, by: &str, what: &str) -> Result<()> {
    if !submitted_by.is_empty() && submitted_by == by {
        return Err(Error::PermissionDenied {
            reason: crate::error::Denial::SelfApproval,
            message: format!(
                "principal {} submitted this {what} and may not decide on it: another approver must",
                crate::error::excerpt(by)
            ),
        });
    }
    Ok(())
}

fn history_of(active: ActivePlan) -> HistoryEntry {
    HistoryEntry {
        plan_id: active.plan_id,
        goal: active.goal,
        plan: active.plan,
        approver: active.approver,
        completions: active.completions,
        applied_modifications: active.applied_modifications,
        submit_time: active.submit_time,
        ..HistoryEntry::default()
    }
}

/// The answer to "may this agent run this tool now?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionDecision {
    pub allowed: bool,
    pub reason: String,
    pub mode: Mode,
}

/// Whether `tool` (with optional `action`) matches an entry of the blocked
/// list: `tool` blocks every action of a tool, `tool:action` one action.
pub fn is_blocked(blocked: &[String], tool: &str, action: &str) -> bool {
    blocked.iter().any(|entry| match entry.split_once(':') {
        Some((t, a)) => t == tool && a == action,
        None => entry == tool,
    })
}

/// Decides whether a tool may run in the session's current mode.
pub fn check_action(
    state: &PlanModeState,
    blocked: &[String],
    tool: &str,
    action: &str,
) -> ActionDecision {
    let named = if action.is_empty() {
        format!("`{tool}`")
    } else {
        format!("`{tool}` action `{action}`")
    };
    let (allowed, reason) = match state.mode {
        Mode::Normal => (
            true,
            match &state.active {
                Some(a) => format!("{named} is allowed: executing approved plan {}", a.plan_id),
                None => format!("{named} is allowed: the session is not in plan mode"),
            },
        ),
        Mode::Planning if is_blocked(blocked, tool, action) => (
            false,
            format!(
                "{named} is blocked in plan mode: only read-only tools may run until the plan is approved. Finish exploring, submit the plan with plan_exit and wait for approval."
            ),
        ),
        Mode::AwaitingApproval if is_blocked(blocked, tool, action) => (
            false,
            format!(
                "{named} is blocked: a plan is awaiting approval. Wait until it is approved (plan_approve) or rejected."
            ),
        ),
        Mode::Planning | Mode::AwaitingApproval => (
            true,
            format!("{named} is allowed in plan mode: it is not a write tool"),
        ),
    };
    ActionDecision {
        allowed,
        reason,
        mode: state.mode,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn step(id: u32, deps: &[u32]) -> Step {
        Step {
            id,
            description: format!("step {id}"),
            depends_on: deps.to_vec(),
            verification: format!("check {id}"),
            ..Step::default()
        }
    }

    fn plan(steps: Vec<Step>) -> ImplementationPlan {
        ImplementationPlan {
            summary: "Add auth".into(),
            approach: "JWT".into(),
            steps,
            estimated_complexity: Complexity::Medium,
            ..ImplementationPlan::default()
        }
    }

    fn approved(steps: Vec<Step>) -> SessionPlan {
        let l = Limits::default();
        let mut s = SessionPlan::default();
        s.enter("goal".into(), String::new(), &l).unwrap();
        s.exit(plan(steps), ("plan_x".into(), String::new()), None, 1, &l)
            .unwrap();
        s.approve("alice".into(), 2, &l).unwrap();
        s
    }

    fn statuses(s: &SessionPlan) -> Vec<(u32, StepStatus)> {
        s.checklist.items.iter().map(|i| (i.id, i.status)).collect()
    }

    use StepStatus::{Completed, InProgress, Pending};

    #[test]
    fn plan_ids_have_the_date() {
        // 2026-11-30T04:00:00Z
        assert_eq!(
            plan_id(1_796_011_200_000_000, "ab12cd"),
            "plan_2026-11-30_ab12cd"
        );
        assert_eq!(plan_id(0, "000000"), "plan_1970-01-01_000000");
    }

    #[test]
    fn state_machine_texts() {
        let l = Limits::default();
        let mut s = SessionPlan::default();
        assert_eq!(
            s.exit(
                plan(vec![step(1, &[])]),
                ("p".into(), String::new()),
                None,
                0,
                &l
            )
            .unwrap_err(),
            Error::NotInPlanMode
        );
        s.enter("g".into(), "src/".into(), &l).unwrap();
        assert_eq!(
            s.enter("g".into(), String::new(), &l),
            Err(Error::AlreadyInPlanMode)
        );
        s.exit(
            plan(vec![step(1, &[])]),
            ("p".into(), String::new()),
            None,
            0,
            &l,
        )
        .unwrap();
        assert_eq!(s.mode.mode, Mode::AwaitingApproval);
        assert_eq!(
            s.enter("g".into(), String::new(), &l)
                .unwrap_err()
                .to_string(),
            "A plan is awaiting approval. Approve or reject it before entering plan mode again."
        );
        let entry = s.reject("too broad".into(), "", 5, &l).unwrap();
        assert_eq!(entry.outcome, Outcome::Rejected);
        assert_eq!(entry.reason, "too broad");
        assert_eq!(s.mode.mode, Mode::Normal);
        assert_eq!(
            s.reject(String::new(), "", 6, &l),
            Err(Error::NoPendingPlan)
        );
        assert!(matches!(
            s.approve(String::new(), 6, &l),
            Err(Error::NoPendingPlan)
        ));
    }

    #[test]
    fn errors_leave_state_untouched() {
        let l = Limits::default();
        let mut s = SessionPlan::default();
        s.enter("g".into(), String::new(), &l).unwrap();
        let before = s.clone();
        assert!(
            s.exit(plan(vec![]), ("p".into(), String::new()), None, 0, &l)
                .is_err()
        );
        assert_eq!(s, before);
        let mut a = approved(vec![step(1, &[]), step(2, &[1])]);
        let before = a.clone();
        assert!(a.complete_step(2, "ok".into(), 3, &l).is_err());
        assert!(a.complete_step(1, " ".into(), 3, &l).is_err());
        assert_eq!(a, before);
    }

    #[test]
    fn plan_validation() {
        let l = Limits::default();
        let err = |p: ImplementationPlan| validate_plan(&p, &l).unwrap_err().to_string();
        assert_eq!(
            err(plan(vec![step(0, &[])])),
            "plan.steps[0].id: must be a positive integer"
        );
        assert_eq!(
            err(plan(vec![step(1, &[]), step(1, &[])])),
            "plan.steps[1].id: duplicate step id 1"
        );
        assert_eq!(
            err(plan(vec![step(1, &[7])])),
            "plan.steps[0].depends_on: step 7 does not exist"
        );
        assert_eq!(
            err(plan(vec![step(1, &[1])])),
            "plan.steps[0].depends_on: step 1 cannot depend on itself"
        );
        assert_eq!(
            err(plan(vec![
                step(1, &[]),
                step(2, &[3]),
                step(3, &[2]),
                step(4, &[3])
            ])),
            "plan.steps: dependency cycle among steps 2, 3, 4"
        );
        let mut no_summary = plan(vec![step(1, &[])]);
        no_summary.summary.clear();
        assert_eq!(err(no_summary), "plan.summary: must not be empty");
        assert!(validate_plan(&plan(vec![step(2, &[]), step(1, &[2, 2])]), &l).is_ok());
    }

    #[test]
    fn approval_projects_the_checklist() {
        let s = approved(vec![step(1, &[]), step(2, &[1]), step(3, &[])]);
        assert_eq!(s.mode.mode, Mode::Normal);
        assert_eq!(s.mode.pending, None);
        assert_eq!(
            statuses(&s),
            vec![(1, InProgress), (2, Pending), (3, Pending)]
        );
        assert_eq!(s.checklist.explanation, "Add auth");
        assert_eq!(s.mode.active.as_ref().unwrap().approver, "alice");
    }

    #[test]
    fn steps_follow_dependencies() {
        let l = Limits::default();
        let mut s = approved(vec![step(1, &[]), step(2, &[1, 3]), step(3, &[])]);
        assert_eq!(
            s.complete_step(2, "ok".into(), 3, &l)
                .unwrap_err()
                .to_string(),
            "Step 2 depends on incomplete steps: 1, 3"
        );
        assert_eq!(
            s.complete_step(9, "ok".into(), 3, &l),
            Err(Error::StepNotFound(9))
        );
        s.complete_step(1, "ok".into(), 3, &l).unwrap();
        // Step 2 still waits for 3, so 3 is current.
        assert_eq!(
            statuses(&s),
            vec![(1, Completed), (2, Pending), (3, InProgress)]
        );
        assert_eq!(
            s.complete_step(1, "again".into(), 4, &l),
            Err(Error::StepAlreadyCompleted(1))
        );
        s.complete_step(3, "ok".into(), 4, &l).unwrap();
        assert_eq!(
            statuses(&s),
            vec![(1, Completed), (2, InProgress), (3, Completed)]
        );
        s.complete_step(2, "ok".into(), 5, &l).unwrap();
        assert!(s.checklist.is_complete());
        assert!(s.is_complete());
    }

    #[test]
    fn completing_a_plan() {
        let l = Limits::default();
        let mut s = approved(vec![step(1, &[]), step(2, &[]), step(3, &[])]);
        s.complete_step(1, "ok".into(), 3, &l).unwrap();
        assert_eq!(
            s.complete_plan("done".into(), vec![], 4, &l)
                .unwrap_err()
                .to_string(),
            "Steps 2, 3 are not completed; explain them in deviations to complete the plan"
        );
        let entry = s
            .complete_plan("done".into(), vec!["2 and 3 were not needed".into()], 4, &l)
            .unwrap();
        assert_eq!(entry.outcome, Outcome::Completed);
        assert_eq!(entry.completions.len(), 1);
        assert_eq!(s.mode.active, None);
        assert_eq!(
            s.complete_plan("x".into(), vec![], 5, &l),
            Err(Error::NoActivePlan)
        );
        assert_eq!(
            s.complete_step(1, "x".into(), 5, &l),
            Err(Error::NoActivePlan)
        );
    }

    #[test]
    fn modifications_need_approval() {
        let l = Limits::default();
        let mut s = approved(vec![step(1, &[]), step(2, &[1])]);
        let id = s
            .modify(
                ModificationRequest {
                    step_id: 2,
                    reason: "API changed".into(),
                    new_description: "use v2 API".into(),
                    new_files: vec!["b.rs".into()],
                    new_verification: None,
                    deadline: None,
                },
                String::new(),
                3,
                &l,
            )
            .unwrap()
            .id;
        assert_eq!(
            s.mode.active.as_ref().unwrap().plan.steps[1].description,
            "step 2"
        );
        assert_eq!(
            s.approve_modification(id + 7, ""),
            Err(Error::ModificationNotFound(id + 7))
        );
        s.approve_modification(id, "").unwrap();
        let active = s.mode.active.as_ref().unwrap();
        assert_eq!(active.plan.steps[1].description, "use v2 API");
        assert_eq!(active.plan.steps[1].files, vec!["b.rs".to_string()]);
        assert_eq!(active.plan.steps[1].verification, "check 2");
        assert_eq!(s.checklist.items[1].step, "use v2 API");
        assert!(s.mode.modifications.is_empty());

        let id2 = s
            .modify(
                ModificationRequest {
                    step_id: 1,
                    reason: "r".into(),
                    new_description: "d".into(),
                    new_files: vec![],
                    new_verification: Some("v".into()),
                    deadline: None,
                },
                String::new(),
                4,
                &l,
            )
            .unwrap()
            .id;
        assert!(id2 > id);
        s.reject_modification(id2, "").unwrap();
        assert_eq!(
            s.mode.active.as_ref().unwrap().plan.steps[0].description,
            "step 1"
        );
        s.complete_step(1, "ok".into(), 5, &l).unwrap();
        assert_eq!(
            s.modify(
                ModificationRequest {
                    step_id: 1,
                    reason: "r".into(),
                    new_description: "d".into(),
                    new_files: vec![],
                    new_verification: None,
                    deadline: None,
                },
                String::new(),
                6,
                &l,
            )
            .unwrap_err(),
            Error::StepAlreadyCompleted(1)
        );
        assert_eq!(
            s.modify(
                ModificationRequest {
                    step_id: 5,
                    reason: "r".into(),
                    new_description: "d".into(),
                    new_files: vec![],
                    new_verification: None,
                    deadline: None,
                },
                String::new(),
                6,
                &l,
            )
            .unwrap_err(),
            Error::StepNotFound(5)
        );
    }

    #[test]
    fn nobody_decides_on_their_own_submission() {
        let l = Limits::default();
        let mut s = SessionPlan::default();
        s.enter("g".into(), String::new(), &l).unwrap();
        s.exit(
            plan(vec![step(1, &[])]),
            ("p".into(), "coder".into()),
            None,
            1,
            &l,
        )
        .unwrap();
        let own = s.approve("coder".into(), 2, &l).unwrap_err();
        assert!(matches!(
            own,
            Error::PermissionDenied {
                reason: crate::error::Denial::SelfApproval,
                ..
            }
        ));
        assert!(s.reject("no".into(), "coder", 2, &l).is_err());
        assert_eq!(s.mode.mode, Mode::AwaitingApproval, "nothing changed");
        s.approve("lead".into(), 3, &l).unwrap();
        let id = s
            .modify(
                ModificationRequest {
                    step_id: 1,
                    reason: "r".into(),
                    new_description: "d".into(),
                    new_files: vec![],
                    new_verification: None,
                    deadline: None,
                },
                "coder".into(),
                4,
                &l,
            )
            .unwrap()
            .id;
        assert!(s.approve_modification(id, "coder").is_err());
        assert!(s.reject_modification(id, "coder").is_err());
        s.approve_modification(id, "lead").unwrap();
    }

    #[test]
    fn a_new_approval_supersedes_the_active_plan() {
        let l = Limits::default();
        let mut s = approved(vec![step(1, &[])]);
        s.enter("next".into(), String::new(), &l).unwrap();
        s.exit(
            plan(vec![step(1, &[]), step(2, &[])]),
            ("plan_y".into(), String::new()),
            None,
            3,
            &l,
        )
        .unwrap();
        let old = s.approve("bob".into(), 4, &l).unwrap().unwrap();
        assert_eq!(old.outcome, Outcome::Superseded);
        assert_eq!(old.plan_id, "plan_x");
        assert_eq!(s.mode.active.as_ref().unwrap().plan_id, "plan_y");
    }

    #[test]
    fn writes_are_blocked_while_planning() {
        let l = Limits::default();
        let blocked: Vec<String> = ["write_file", "cron:create", "cron:delete"]
            .map(String::from)
            .to_vec();
        let mut s = SessionPlan::default();
        assert!(check_action(&s.mode, &blocked, "write_file", "").allowed);
        s.enter("g".into(), String::new(), &l).unwrap();
        let d = check_action(&s.mode, &blocked, "write_file", "");
        assert!(!d.allowed);
        assert!(d.reason.contains("blocked in plan mode"), "{}", d.reason);
        assert!(!check_action(&s.mode, &blocked, "cron", "create").allowed);
        assert!(!check_action(&s.mode, &blocked, "cron", "delete").allowed);
        assert!(check_action(&s.mode, &blocked, "cron", "list").allowed);
        assert!(check_action(&s.mode, &blocked, "read_file", "").allowed);
        s.exit(
            plan(vec![step(1, &[])]),
            ("p".into(), String::new()),
            None,
            0,
            &l,
        )
        .unwrap();
        assert!(!check_action(&s.mode, &blocked, "write_file", "").allowed);
        s.approve(String::new(), 1, &l).unwrap();
        assert!(check_action(&s.mode, &blocked, "write_file", "").allowed);
    }

    proptest! {
        /// Completing steps in any order the rules allow keeps one step in
        /// progress at most and ends with every step completed.
        #[test]
        fn any_allowed_completion_order_finishes(
            deps in prop::collection::vec(prop::collection::vec(0usize..8, 0..3), 1..8),
            picks in prop::collection::vec(0usize..8, 0..64),
        ) {
            let l = Limits::default();
            // Only depend on earlier steps, so the graph is acyclic.
            let steps: Vec<Step> = deps.iter().enumerate().map(|(i, d)| {
                let id = u32::try_from(i).unwrap() + 1;
                let ds: Vec<u32> = d.iter().filter(|&&x| x < i).map(|&x| u32::try_from(x).unwrap() + 1).collect();
                step(id, &ds)
            }).collect();
            let n = steps.len();
            let mut s = approved(steps);
            for p in picks.iter().copied().chain(0..64usize) {
                let id = u32::try_from(p % n).unwrap() + 1;
                let _ = s.complete_step(id, "ok".into(), 9, &l);
                prop_assert!(s.checklist.items.iter().filter(|i| i.status == InProgress).count() <= 1);
                let current = s.mode.active.as_ref().unwrap().current_step();
                let in_progress = s.checklist.items.iter().find(|i| i.status == InProgress).map(|i| i.id);
                prop_assert_eq!(current, in_progress);
            }
            prop_assert!(s.is_complete());
        }
    }

    #[test]
    fn a_passed_deadline_rejects_or_escalates_once() {
        use crate::deadline::{DeadlineRequest, Enforced, Policy};
        let l = Limits::default();
        let reject = DeadlineRequest {
            timeout_ms: 1_000,
            policy: Policy::Reject,
            reject_reason: "too slow".into(),
            ..DeadlineRequest::default()
        };
        let mut s = SessionPlan::default();
        s.enter("g".into(), String::new(), &l).unwrap();
        s.exit(
            plan(vec![step(1, &[])]),
            ("p".into(), "coder".into()),
            Some(&reject),
            0,
            &l,
        )
        .unwrap();
        let at = s
            .mode
            .pending
            .as_ref()
            .unwrap()
            .deadline
            .as_ref()
            .unwrap()
            .at;
        assert_eq!(at, 1_000_000);
        let before = s.clone();
        assert_eq!(
            s.pass_deadline(Awaited::Plan, at, at - 1),
            Err(Error::DeadlineMoved)
        );
        assert_eq!(
            s.pass_deadline(Awaited::Plan, at + 5, at + 5),
            Err(Error::DeadlineMoved)
        );
        assert_eq!(s, before, "a deadline not passed changes nothing");
        let (done, entry) = s.pass_deadline(Awaited::Plan, at, at).unwrap();
        assert_eq!(done, Enforced::Rejected);
        let entry = entry.unwrap();
        assert_eq!(
            (entry.outcome, entry.reason.as_str()),
            (Outcome::Rejected, "too slow")
        );
        assert_eq!(s.mode.mode, Mode::Normal);
        assert_eq!(
            s.pass_deadline(Awaited::Plan, at, at),
            Err(Error::DeadlineMoved)
        );

        // A modification escalated, then rejected at the second deadline.
        let mut s = approved(vec![step(1, &[])]);
        let escalate = DeadlineRequest {
            timeout_ms: 1_000,
            policy: Policy::Escalate,
            escalate_to: "lead".into(),
            escalation_timeout_ms: 2_000,
            after_escalation: Policy::Reject,
            ..DeadlineRequest::default()
        };
        let request = ModificationRequest {
            step_id: 1,
            reason: "r".into(),
            new_description: "d".into(),
            new_files: vec![],
            new_verification: None,
            deadline: Some(escalate),
        };
        let id = s.modify(request, "coder".into(), 0, &l).unwrap().id;
        let item = Awaited::Modification(id);
        let (done, _) = s.pass_deadline(item, 1_000_000, 1_500_000).unwrap();
        assert_eq!(done, Enforced::Escalated);
        let d = s.mode.modifications[0].deadline.clone().unwrap();
        assert_eq!(
            (d.escalated_to.as_str(), d.at, d.policy),
            ("lead", 3_500_000, Policy::Reject)
        );
        assert_eq!(
            s.pass_deadline(item, 1_000_000, 1_500_000),
            Err(Error::DeadlineMoved)
        );
        let (done, entry) = s.pass_deadline(item, 3_500_000, 3_500_000).unwrap();
        assert_eq!((done, entry), (Enforced::Rejected, None));
        assert!(s.mode.modifications.is_empty());
    }
}
