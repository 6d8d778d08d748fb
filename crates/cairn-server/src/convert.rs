//! Proto <-> domain conversions. Proto types stop here.
//!
//! Inbound conversions destructure every field of the proto message, so a
//! field added to the API does not compile until it is handled (or
//! explicitly ignored, like server-owned timestamps).

use std::collections::BTreeMap;

use prost_types::Timestamp;

use cairn_api as pb;
use cairn_core::Micros;
use cairn_core::access::{Principal, Role};
use cairn_core::command::{
    Decision, PlanCommand, PlanWrite, SessionCommand, SessionPatch, TodoCommand,
};
use cairn_core::deadline::{Deadline, DeadlineRequest, Policy};
use cairn_core::error::{Error, Result};
use cairn_core::inbox::Awaited;
use cairn_core::liveness::{Lease, Liveness};
use cairn_core::plan::{ItemInput, PlanItem, PlanSource, PlanUpdate, StepStatus};
use cairn_core::plan_mode::{
    ActivePlan, Complexity, HistoryEntry, ImplementationPlan, Mode, Modification,
    ModificationRequest, Outcome, PendingPlan, Step, StepCompletion,
};
use cairn_core::session::Session;
use cairn_core::todo::{Priority, TodoInput, TodoItem, TodoStatus};
use cairn_store::records::{EventKind, EventObject, PlanRecord, PrincipalRecord, TodoRecord};

/// Server micros to a proto timestamp; 0 means "never" and maps to unset.
pub fn timestamp(micros: Micros) -> Option<Timestamp> {
    (micros != 0).then(|| Timestamp {
        seconds: micros.div_euclid(1_000_000),
        nanos: i32::try_from(micros.rem_euclid(1_000_000) * 1000).unwrap_or(0),
    })
}

/// A proto timestamp back to server micros; unset maps to 0 ("never").
pub fn micros(t: Option<&Timestamp>) -> Micros {
    t.map_or(0, |t| {
        t.seconds
            .saturating_mul(1_000_000)
            .saturating_add(i64::from(t.nanos / 1000))
    })
}

// ---- sessions ----

/// A session as a client sends it; server-owned fields are ignored.
pub fn session_in(s: pb::Session) -> Session {
    {
        let pb::Session {
            session_id,
            agent_id,
            parent_session_id,
            title,
            labels,
            // Server-owned.
            create_time: _,
            update_time: _,
            revision: _,
            lease: _,
        } = s;
        Session {
            session_id,
            agent_id,
            parent_session_id: (!parent_session_id.is_empty()).then_some(parent_session_id),
            title,
            labels: labels.into_iter().collect::<BTreeMap<_, _>>(),
            ..Session::default()
        }
    }
}

/// A session for the API.
pub fn session_out(s: Session) -> pb::Session {
    {
        pb::Session {
            session_id: s.session_id,
            agent_id: s.agent_id,
            parent_session_id: s.parent_session_id.unwrap_or_default(),
            title: s.title,
            labels: s.labels.into_iter().collect(),
            create_time: timestamp(s.create_time),
            update_time: timestamp(s.update_time),
            revision: s.revision,
            lease: s.lease.as_ref().map(lease_out),
        }
    }
}

/// A lost session, as `Wait` names it.
pub fn lost(l: crate::watch::Lost) -> pb::LostSession {
    let (step_id, step) = l.step.map(|i| (i.id, i.step)).unwrap_or_default();
    pb::LostSession {
        last_seen_time: l
            .session
            .lease
            .as_ref()
            .and_then(|l| timestamp(l.last_seen)),
        session_id: l.session.session_id,
        agent_id: l.session.agent_id,
        title: l.session.title,
        step_id,
        step,
    }
}

/// A lease for the API.
pub fn lease_out(l: &Lease) -> pb::Lease {
    pb::Lease {
        state: liveness_out(l.state).into(),
        ttl: Some(millis(l.ttl_ms)),
        grace: Some(millis(l.grace_ms)),
        state_time: timestamp(l.since),
        last_seen_time: timestamp(l.last_seen),
    }
}

fn liveness_out(l: Liveness) -> pb::Liveness {
    match l {
        Liveness::Active => pb::Liveness::Active,
        Liveness::Idle => pb::Liveness::Idle,
        Liveness::Stalled => pb::Liveness::Stalled,
        Liveness::Lost => pb::Liveness::Lost,
        Liveness::Finished => pb::Liveness::Finished,
    }
}

fn millis(ms: u64) -> prost_types::Duration {
    prost_types::Duration::try_from(std::time::Duration::from_millis(ms)).unwrap_or_default()
}

/// A requested duration; negative is INVALID_ARGUMENT.
pub fn duration(field: &str, d: prost_types::Duration) -> Result<std::time::Duration> {
    std::time::Duration::try_from(d)
        .map_err(|_| Error::invalid(field, "must be a non-negative duration"))
}

/// A requested lease duration in milliseconds: negative, or with its
/// nanoseconds out of their range (malformed, not a longer duration), is
/// INVALID_ARGUMENT; the bounds are the core's.
pub fn duration_ms(field: &str, d: Option<prost_types::Duration>) -> Result<Option<u64>> {
    d.map(|d| {
        if !(0..1_000_000_000).contains(&d.nanos) {
            return Err(Error::invalid(field, "must be a non-negative duration"));
        }
        Ok(u64::try_from(duration(field, d)?.as_millis()).unwrap_or(u64::MAX))
    })
    .transpose()
}

// ---- checklist ----

fn step_status_in(v: i32) -> Option<StepStatus> {
    match pb::StepStatus::try_from(v).ok()? {
        pb::StepStatus::Unspecified => None,
        pb::StepStatus::Pending => Some(StepStatus::Pending),
        pb::StepStatus::InProgress => Some(StepStatus::InProgress),
        pb::StepStatus::Completed => Some(StepStatus::Completed),
        pb::StepStatus::Cancelled => Some(StepStatus::Cancelled),
    }
}

/// The API's status of a checklist step.
pub fn step_status_out(s: StepStatus) -> pb::StepStatus {
    match s {
        StepStatus::Pending => pb::StepStatus::Pending,
        StepStatus::InProgress => pb::StepStatus::InProgress,
        StepStatus::Completed => pb::StepStatus::Completed,
        StepStatus::Cancelled => pb::StepStatus::Cancelled,
    }
}

fn source_out(s: PlanSource) -> pb::PlanSource {
    match s {
        PlanSource::Tool => pb::PlanSource::Tool,
        PlanSource::Observed => pb::PlanSource::Observed,
    }
}

/// An `UpdatePlan` request's checklist; `source` as the request sets it
/// (unset and unknown values are a tool plan, under every rule).
pub fn plan_update(explanation: String, items: Vec<pb::PlanItem>, source: i32) -> PlanUpdate {
    let source = match pb::PlanSource::try_from(source) {
        Ok(pb::PlanSource::Observed) => PlanSource::Observed,
        Ok(pb::PlanSource::Tool | pb::PlanSource::Unspecified) | Err(_) => PlanSource::Tool,
    };
    PlanUpdate {
        explanation,
        items: items
            .into_iter()
            .map(
                |pb::PlanItem {
                     id,
                     step,
                     status,
                     blocked_by,
                 }| ItemInput {
                    id,
                    step,
                    status: step_status_in(status),
                    blocked_by,
                },
            )
            .collect(),
        source,
    }
}

/// A checklist item for the API.
pub fn plan_item(i: PlanItem) -> pb::PlanItem {
    {
        pb::PlanItem {
            id: i.id,
            step: i.step,
            status: step_status_out(i.status).into(),
            blocked_by: i.blocked_by,
        }
    }
}

/// An unstored (hinted) checklist echoed back: ids 0.
pub fn unstored_items(update: &PlanUpdate) -> Vec<pb::PlanItem> {
    update
        .items
        .iter()
        .map(|i| pb::PlanItem {
            id: 0,
            step: i.step.clone(),
            status: i
                .status
                .map_or(pb::StepStatus::Unspecified, step_status_out)
                .into(),
            blocked_by: i.blocked_by.clone(),
        })
        .collect()
}

/// A stored plan with its plan-mode status.
pub fn plan(r: PlanRecord) -> pb::Plan {
    let status = plan_status(&r);
    pb::Plan {
        session_id: r.session_id,
        explanation: r.plan.checklist.explanation,
        items: r.plan.checklist.items.into_iter().map(plan_item).collect(),
        status: Some(status),
        revision: r.revision,
        update_time: timestamp(r.update_time),
        source: source_out(r.plan.checklist.source).into(),
    }
}

// ---- plan mode ----

/// The API's mode enum for a domain mode.
pub fn mode(m: Mode) -> pb::PlanMode {
    match m {
        Mode::Normal => pb::PlanMode::Normal,
        Mode::Planning => pb::PlanMode::Planning,
        Mode::AwaitingApproval => pb::PlanMode::AwaitingApproval,
    }
}

/// Plan-mode status of a stored plan.
pub fn plan_status(r: &PlanRecord) -> pb::PlanStatus {
    let m = &r.plan.mode;
    pb::PlanStatus {
        session_id: r.session_id.clone(),
        mode: mode(m.mode).into(),
        goal: m.goal.clone(),
        scope: m.scope.clone(),
        pending: m.pending.clone().map(pending_plan),
        active: m.active.as_ref().map(active_plan),
        pending_modifications: m.modifications.iter().cloned().map(modification).collect(),
        revision: r.revision,
        lease: None,
    }
}

/// An implementation plan as a client sends it; an unknown complexity is
/// refused.
pub fn implementation_plan_in(p: pb::ImplementationPlan) -> Result<ImplementationPlan> {
    {
        let pb::ImplementationPlan {
            summary,
            approach,
            alternatives_considered,
            steps,
            risks,
            files_to_create,
            files_to_modify,
            tests_to_write,
            estimated_complexity,
        } = p;
        Ok(ImplementationPlan {
            summary,
            approach,
            alternatives_considered,
            steps: steps
                .into_iter()
                .map(
                    |pb::ImplementationStep {
                         id,
                         description,
                         files,
                         depends_on,
                         verification,
                     }| Step {
                        id,
                        description,
                        files,
                        depends_on,
                        verification,
                    },
                )
                .collect(),
            risks,
            files_to_create,
            files_to_modify,
            tests_to_write,
            estimated_complexity: match pb::Complexity::try_from(estimated_complexity) {
                Ok(pb::Complexity::Small) => Complexity::Small,
                Ok(pb::Complexity::Medium) => Complexity::Medium,
                Ok(pb::Complexity::Large) => Complexity::Large,
                Ok(pb::Complexity::Unspecified) => Complexity::Unspecified,
                Err(_) => {
                    return Err(unknown_enum(
                        "plan.estimated_complexity",
                        estimated_complexity,
                        "COMPLEXITY_SMALL, COMPLEXITY_MEDIUM or COMPLEXITY_LARGE",
                    ));
                }
            },
        })
    }
}

/// An enum value this API does not define: refused, never coerced.
fn unknown_enum(field: &str, value: i32, known: &str) -> Error {
    Error::invalid(field, format!("unknown value {value}: use {known}"))
}

/// An implementation plan for the API.
pub fn implementation_plan_out(p: ImplementationPlan) -> pb::ImplementationPlan {
    {
        pb::ImplementationPlan {
            summary: p.summary,
            approach: p.approach,
            alternatives_considered: p.alternatives_considered,
            steps: p
                .steps
                .into_iter()
                .map(|s| pb::ImplementationStep {
                    id: s.id,
                    description: s.description,
                    files: s.files,
                    depends_on: s.depends_on,
                    verification: s.verification,
                })
                .collect(),
            risks: p.risks,
            files_to_create: p.files_to_create,
            files_to_modify: p.files_to_modify,
            tests_to_write: p.tests_to_write,
            estimated_complexity: match p.estimated_complexity {
                Complexity::Unspecified => pb::Complexity::Unspecified,
                Complexity::Small => pb::Complexity::Small,
                Complexity::Medium => pb::Complexity::Medium,
                Complexity::Large => pb::Complexity::Large,
            }
            .into(),
        }
    }
}

fn pending_plan(p: PendingPlan) -> pb::PendingPlan {
    pb::PendingPlan {
        plan_id: p.plan_id,
        plan: Some(implementation_plan_out(p.plan)),
        submit_time: timestamp(p.submit_time),
        deadline: p.deadline.map(deadline_out),
    }
}

fn policy_out(p: Policy) -> i32 {
    match p {
        Policy::Wait => pb::DeadlinePolicy::Wait,
        Policy::Reject => pb::DeadlinePolicy::Reject,
        Policy::Escalate => pb::DeadlinePolicy::Escalate,
    }
    .into()
}

fn policy_in(field: &str, p: i32) -> Result<Policy> {
    match pb::DeadlinePolicy::try_from(p) {
        Ok(pb::DeadlinePolicy::Unspecified | pb::DeadlinePolicy::Wait) => Ok(Policy::Wait),
        Ok(pb::DeadlinePolicy::Reject) => Ok(Policy::Reject),
        Ok(pb::DeadlinePolicy::Escalate) => Ok(Policy::Escalate),
        Err(_) => Err(Error::invalid(field, format!("unknown policy {p}"))),
    }
}

/// A deadline as it stands, for the API.
pub fn deadline_out(d: Deadline) -> pb::Deadline {
    pb::Deadline {
        deadline_time: timestamp(d.at),
        policy: policy_out(d.policy),
        reject_reason: d.reject_reason,
        escalate_to: d.escalate_to,
        escalation_timeout: (d.escalation_timeout_ms > 0).then(|| millis(d.escalation_timeout_ms)),
        after_escalation: policy_out(d.after_escalation),
        escalated_to: d.escalated_to,
        escalate_time: timestamp(d.escalate_time),
    }
}

/// A requested deadline (checked by the rule, which knows the limits).
fn deadline_in(d: Option<pb::ApprovalDeadline>) -> Result<Option<DeadlineRequest>> {
    d.map(|d| {
        Ok(DeadlineRequest {
            timeout_ms: duration_ms("deadline.timeout", d.timeout)?.unwrap_or(0),
            policy: policy_in("deadline.policy", d.policy)?,
            reject_reason: d.reject_reason,
            escalate_to: d.escalate_to,
            escalation_timeout_ms: duration_ms(
                "deadline.escalation_timeout",
                d.escalation_timeout,
            )?
            .unwrap_or(0),
            after_escalation: policy_in("deadline.after_escalation", d.after_escalation)?,
        })
    })
    .transpose()
}

fn completion(c: StepCompletion) -> pb::StepCompletion {
    pb::StepCompletion {
        step_id: c.step_id,
        verification_result: c.verification_result,
        complete_time: timestamp(c.complete_time),
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn active_plan(a: &ActivePlan) -> pb::ActivePlan {
    let done = a.completed_ids();
    pb::ActivePlan {
        plan_id: a.plan_id.clone(),
        plan: Some(implementation_plan_out(a.plan.clone())),
        approver: a.approver.clone(),
        approve_time: timestamp(a.approve_time),
        completed_step_ids: done.iter().copied().collect(),
        completions: a.completions.iter().cloned().map(completion).collect(),
        current_step_id: a.current_step().unwrap_or(0),
        completed_count: count(done.len()),
        total_count: count(a.plan.steps.len()),
    }
}

/// A modification for the API.
pub fn modification(m: Modification) -> pb::PlanModification {
    pb::PlanModification {
        modification_id: m.id,
        step_id: m.step_id,
        reason: m.reason,
        new_description: m.new_description,
        new_files: m.new_files,
        new_verification: m.new_verification,
        create_time: timestamp(m.create_time),
        deadline: m.deadline.map(deadline_out),
    }
}

/// A webhook subscription for the API (never its secret).
pub fn webhook_out(w: cairn_core::webhook::Webhook, delivered_revision: u64) -> pb::Webhook {
    pb::Webhook {
        webhook_id: w.webhook_id,
        url: w.url,
        event_types: w.event_types.iter().map(|t| t.name().to_owned()).collect(),
        session_root: w.session_root,
        created_by: w.created_by,
        create_time: timestamp(w.create_time),
        revision: w.revision,
        delivered_revision,
    }
}

/// A dead letter for the API.
pub fn dead_letter_out(
    webhook_id: &str,
    key: String,
    d: cairn_store::webhooks::DeadLetter,
    retrying: bool,
) -> pb::DeadLetter {
    pb::DeadLetter {
        event_type: d.notification.kind.name().to_owned(),
        event_revision: d.notification.revision,
        message_id: d.notification.message_id(webhook_id),
        attempts: d.attempts,
        last_error: d.last_error,
        dead_time: timestamp(d.dead_time),
        body: d.notification.body.to_string(),
        retrying,
        key,
    }
}

/// A request's `page_size`: 0 is `default`, more than `max` is `max`, and a
/// negative one is refused.
pub fn page_size(page_size: i32, default: usize, max: usize) -> Result<usize> {
    match usize::try_from(page_size) {
        Ok(0) => Ok(default),
        Ok(n) => Ok(n.min(max)),
        Err(_) => Err(Error::invalid("page_size", "must not be negative")),
    }
}

/// An inbox item for the API.
pub fn inbox_item(i: cairn_store::records::InboxItem) -> pb::InboxItem {
    let kind = match i.key.item {
        Awaited::Plan => pb::InboxItemKind::Plan,
        Awaited::Modification(_) => pb::InboxItemKind::Modification,
    };
    pb::InboxItem {
        session_id: i.session.session_id,
        agent_id: i.session.agent_id,
        parent_session_id: i.session.parent_session_id.unwrap_or_default(),
        kind: kind.into(),
        plan_id: i.plan_id,
        goal: i.goal,
        summary: i.summary,
        modification: i.modification.map(modification),
        submitted_by: i.submitted_by,
        waiting_since: timestamp(i.key.since),
        deadline: i.deadline.map(deadline_out),
    }
}

/// A history entry for the API.
pub fn history_entry(e: HistoryEntry) -> pb::PlanHistoryEntry {
    pb::PlanHistoryEntry {
        plan_id: e.plan_id,
        goal: e.goal,
        plan: Some(implementation_plan_out(e.plan)),
        outcome: match e.outcome {
            Outcome::Rejected => pb::PlanOutcome::Rejected,
            Outcome::Completed => pb::PlanOutcome::Completed,
            Outcome::Superseded => pb::PlanOutcome::Superseded,
        }
        .into(),
        reason: e.reason,
        summary: e.summary,
        deviations: e.deviations,
        approver: e.approver,
        completions: e.completions.into_iter().map(completion).collect(),
        applied_modifications: e
            .applied_modifications
            .into_iter()
            .map(modification)
            .collect(),
        submit_time: timestamp(e.submit_time),
        end_time: timestamp(e.end_time),
    }
}

// ---- todos ----

/// `WriteTodos` items. Unknown statuses become `None` (the rules reject
/// them with their own text); an unset priority means the default, and an
/// unknown one is refused here.
pub fn todo_inputs(items: Vec<pb::TodoItem>) -> Result<Vec<TodoInput>> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, t)| todo_input(i, t))
        .collect()
}

fn todo_input(i: usize, t: pb::TodoItem) -> Result<TodoInput> {
    let pb::TodoItem {
        id,
        content,
        status,
        priority,
        // Server-owned.
        create_time: _,
        update_time: _,
    } = t;
    Ok(TodoInput {
        id,
        content,
        status: match pb::TodoStatus::try_from(status) {
            Ok(pb::TodoStatus::Pending) => Some(TodoStatus::Pending),
            Ok(pb::TodoStatus::InProgress) => Some(TodoStatus::InProgress),
            Ok(pb::TodoStatus::Completed) => Some(TodoStatus::Completed),
            Ok(pb::TodoStatus::Unspecified) | Err(_) => None,
        },
        priority: match pb::Priority::try_from(priority) {
            Ok(pb::Priority::High) => Some(Priority::High),
            Ok(pb::Priority::Medium) => Some(Priority::Medium),
            Ok(pb::Priority::Low) => Some(Priority::Low),
            Ok(pb::Priority::Unspecified) => None,
            Err(_) => {
                return Err(unknown_enum(
                    &format!("todos[{i}].priority"),
                    priority,
                    "PRIORITY_HIGH, PRIORITY_MEDIUM or PRIORITY_LOW",
                ));
            }
        },
    })
}

fn todo_item(t: TodoItem) -> pb::TodoItem {
    pb::TodoItem {
        id: t.id,
        content: t.content,
        status: match t.status {
            TodoStatus::Pending => pb::TodoStatus::Pending,
            TodoStatus::InProgress => pb::TodoStatus::InProgress,
            TodoStatus::Completed => pb::TodoStatus::Completed,
        }
        .into(),
        priority: match t.priority {
            Priority::High => pb::Priority::High,
            Priority::Medium => pb::Priority::Medium,
            Priority::Low => pb::Priority::Low,
        }
        .into(),
        create_time: timestamp(t.create_time),
        update_time: timestamp(t.update_time),
    }
}

/// A stored todo list for the API.
pub fn todo_list(r: TodoRecord) -> pb::TodoList {
    pb::TodoList {
        agent_id: r.agent_id,
        todos: r.items.into_iter().map(todo_item).collect(),
        revision: r.revision,
        update_time: timestamp(r.update_time),
    }
}

// ---- principals ----

/// A principal as an admin sends it: at least one known role.
pub fn principal_in(p: pb::Principal) -> Result<Principal> {
    let pb::Principal {
        principal_id,
        roles,
        agent_ids,
        session_roots,
        // Output only.
        create_time: _,
        revision: _,
    } = p;
    if roles.is_empty() {
        return Err(Error::invalid("principal.roles", "name at least one role"));
    }
    let roles = roles
        .into_iter()
        .enumerate()
        .map(|(i, r)| match pb::Role::try_from(r) {
            Ok(pb::Role::Admin) => Ok(Role::Admin),
            Ok(pb::Role::Orchestrator) => Ok(Role::Orchestrator),
            Ok(pb::Role::Agent) => Ok(Role::Agent),
            Ok(pb::Role::Approver) => Ok(Role::Approver),
            Ok(pb::Role::Viewer) => Ok(Role::Viewer),
            Ok(pb::Role::Unspecified) | Err(_) => Err(unknown_enum(
                &format!("principal.roles[{i}]"),
                r,
                "ROLE_ADMIN, ROLE_ORCHESTRATOR, ROLE_AGENT, ROLE_APPROVER or ROLE_VIEWER",
            )),
        })
        .collect::<Result<_>>()?;
    Ok(Principal {
        principal_id,
        roles,
        agent_ids: agent_ids.into_iter().collect(),
        session_roots: session_roots.into_iter().collect(),
    })
}

/// A principal for the API: never its token or the token's hash.
pub fn principal_out(r: &PrincipalRecord) -> pb::Principal {
    let p = &r.principal;
    pb::Principal {
        principal_id: p.principal_id.clone(),
        roles: p
            .roles
            .iter()
            .map(|r| {
                match r {
                    Role::Admin => pb::Role::Admin,
                    Role::Orchestrator => pb::Role::Orchestrator,
                    Role::Agent => pb::Role::Agent,
                    Role::Approver => pb::Role::Approver,
                    Role::Viewer => pb::Role::Viewer,
                }
                .into()
            })
            .collect(),
        agent_ids: p.agent_ids.iter().cloned().collect(),
        session_roots: p.session_roots.iter().cloned().collect(),
        create_time: timestamp(r.create_time),
        revision: r.revision,
    }
}

// ---- events ----

/// A delivered event for the API.
pub fn event(d: crate::watch::Delivered) -> pb::Event {
    let crate::watch::Delivered {
        revision,
        event: e,
        index,
        count,
    } = d;
    pb::Event {
        revision,
        index_in_revision: index,
        events_in_revision: count,
        r#type: match e.kind {
            EventKind::SessionCreated => pb::EventType::SessionCreated,
            EventKind::SessionUpdated => pb::EventType::SessionUpdated,
            EventKind::SessionDeleted => pb::EventType::SessionDeleted,
            EventKind::PlanUpdated => pb::EventType::PlanUpdated,
            EventKind::TodosUpdated => pb::EventType::TodosUpdated,
            EventKind::TodosCleared => pb::EventType::TodosCleared,
            // Never matched by a watch target: servers follow it, clients
            // never see it.
            EventKind::PrincipalChanged => pb::EventType::Unspecified,
            EventKind::InboxAdded => pb::EventType::InboxItemAdded,
            EventKind::InboxRemoved => pb::EventType::InboxItemRemoved,
        }
        .into(),
        object: match e.object {
            EventObject::Session(s) => Some(pb::event::Object::Session(session_out(s))),
            EventObject::Plan(p) => Some(pb::event::Object::Plan(plan(*p))),
            EventObject::Todos(t) => Some(pb::event::Object::Todos(todo_list(t))),
            EventObject::Principal(_) => None,
            EventObject::Inbox(i) => Some(pb::event::Object::InboxItem(inbox_item(*i))),
        },
        session_id: e.session_id,
        parent_session_id: e.parent_session_id,
        agent_id: e.agent_id,
        ancestor_session_ids: e.ancestors,
        previous_parent_session_id: e.previous_parent_session_id,
        previous_agent_id: e.previous_agent_id,
    }
}

/// A request that is one write to a session's plan: converted into the
/// command the store applies.
pub trait PlanRequest: prost::Message + Sized {
    /// The write this request asks for. Anything random (a plan id's
    /// suffix) is chosen here, once, so that a retried write is the same.
    fn into_write(self) -> Result<PlanWrite>;
}

macro_rules! plan_requests {
    ($($req:ident { $($field:ident),* } => $command:expr;)*) => {$(
        impl PlanRequest for pb::$req {
            fn into_write(self) -> Result<PlanWrite> {
                let pb::$req { session_id, expected_revision, $($field),* } = self;
                Ok(PlanWrite { session_id, expected_revision, command: $command })
            }
        }
    )*};
}

plan_requests! {
    EnterPlanModeRequest { goal, scope } => PlanCommand::Enter { goal, scope };
    ExitPlanModeRequest { plan, deadline } => PlanCommand::Exit {
        plan: plan.map(implementation_plan_in).transpose()?.unwrap_or_default(),
        id_suffix: random_suffix(),
        deadline: deadline_in(deadline)?,
    };
    ApprovePlanRequest { approver } => PlanCommand::Approve { approver };
    RejectPlanRequest { reason } => PlanCommand::Reject { reason };
    CompleteStepRequest { step_id, verification_result } => PlanCommand::CompleteStep {
        step_id,
        verification_result,
    };
    CompletePlanRequest { summary, deviations } => PlanCommand::CompletePlan { summary, deviations };
    ModifyPlanRequest { step_id, reason, new_description, new_files, new_verification, deadline } =>
        PlanCommand::Modify(ModificationRequest {
            step_id,
            reason,
            new_description,
            new_files,
            new_verification,
            deadline: deadline_in(deadline)?,
        });
    ApproveModificationRequest { modification_id } => PlanCommand::DecideModification {
        modification_id,
        decision: Decision::Approve,
    };
    RejectModificationRequest { modification_id } => PlanCommand::DecideModification {
        modification_id,
        decision: Decision::Reject,
    };
}

/// Six lowercase letters and digits: the end of a new plan's id.
fn random_suffix() -> String {
    (0..6)
        .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
        .collect()
}

/// `CreateSession` as a command; an id the request leaves empty is chosen
/// here, so that a retried write creates the same session.
pub fn create_session(req: pb::CreateSessionRequest) -> SessionCommand {
    let mut s: Session = req.session.map(session_in).unwrap_or_default();
    if s.session_id.is_empty() {
        s.session_id = cairn_core::session::generate_id(|| fastrand::u64(..));
    }
    SessionCommand::Create(s)
}

/// `UpdateSession` as a command.
pub fn update_session(req: pb::UpdateSessionRequest) -> SessionCommand {
    let pb::UpdateSessionRequest {
        session_id,
        title,
        agent_id,
        parent_session_id,
        labels,
        replace_labels,
        expected_revision,
    } = req;
    SessionCommand::Update {
        session_id,
        patch: SessionPatch {
            title,
            agent_id,
            parent_session_id: parent_session_id.map(|p| (!p.is_empty()).then_some(p)),
            labels: replace_labels.then(|| labels.into_iter().collect()),
            expected_revision,
        },
    }
}

/// `DeleteSession` as a command.
pub fn delete_session(req: pb::DeleteSessionRequest) -> SessionCommand {
    let pb::DeleteSessionRequest {
        session_id,
        cascade,
        expected_revision,
    } = req;
    SessionCommand::Delete {
        session_id,
        cascade,
        expected_revision,
    }
}

/// `WriteTodos` as a command.
pub fn write_todos(req: pb::WriteTodosRequest) -> Result<TodoCommand> {
    let pb::WriteTodosRequest {
        agent_id,
        todos,
        expected_revision,
    } = req;
    Ok(TodoCommand::Write {
        agent_id,
        items: todo_inputs(todos)?,
        expected_revision,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(timestamp(0), None);
        assert_eq!(
            timestamp(1_500_001),
            Some(Timestamp {
                seconds: 1,
                nanos: 500_001_000
            })
        );
    }

    #[test]
    fn unknown_enum_values_are_not_silently_defaulted() {
        let item = |priority| pb::TodoItem {
            id: "a".into(),
            content: "c".into(),
            status: 42,
            priority,
            create_time: None,
            update_time: None,
        };
        let t = todo_input(0, item(0)).unwrap();
        assert_eq!(t.status, None);
        assert_eq!(t.priority, None);
        assert_eq!(
            todo_inputs(vec![item(1), item(99)]).unwrap_err(),
            Error::invalid(
                "todos[1].priority",
                "unknown value 99: use PRIORITY_HIGH, PRIORITY_MEDIUM or PRIORITY_LOW"
            )
        );
        let plan = pb::ImplementationPlan {
            estimated_complexity: 99,
            ..Default::default()
        };
        assert!(implementation_plan_in(plan).is_err());
        let u = plan_update(
            String::new(),
            vec![pb::PlanItem {
                id: 0,
                step: "s".into(),
                status: 0,
                blocked_by: Vec::new(),
            }],
            0,
        );
        assert_eq!(u.items[0].status, None);
    }
}
