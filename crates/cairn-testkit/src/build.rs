//! Request builders the tests share.

use cairn_api as pb;

pub fn item(step: &str, status: pb::StepStatus) -> pb::PlanItem {
    pb::PlanItem {
        id: 0,
        step: step.into(),
        status: status.into(),
        blocked_by: Vec::new(),
    }
}

/// A five-step plan (the example of docs/rules.md), one in progress.
pub fn five_steps() -> Vec<pb::PlanItem> {
    use pb::StepStatus::{Completed, InProgress, Pending};
    vec![
        item("Design the database schema", Completed),
        item("Implement the sign-up API", InProgress),
        item("Implement the login API", Pending),
        item("Add password hashing", Pending),
        item("Write unit tests", Pending),
    ]
}

pub fn update(session: &str, items: Vec<pb::PlanItem>) -> pb::UpdatePlanRequest {
    pb::UpdatePlanRequest {
        session_id: session.into(),
        explanation: "Implement user authentication".into(),
        plan: items,
        expected_revision: None,
        source: pb::PlanSource::Unspecified.into(),
    }
}

pub fn session(id: &str, parent: &str) -> pb::CreateSessionRequest {
    pb::CreateSessionRequest {
        session: Some(pb::Session {
            session_id: id.into(),
            parent_session_id: parent.into(),
            agent_id: format!("agent-{id}"),
            title: format!("session {id}"),
            ..pb::Session::default()
        }),
    }
}

pub fn todo(id: &str, status: pb::TodoStatus) -> pb::TodoItem {
    pb::TodoItem {
        id: id.into(),
        content: format!("do {id}"),
        status: status.into(),
        priority: pb::Priority::Medium.into(),
        ..pb::TodoItem::default()
    }
}

/// A two-step implementation plan for `ExitPlanMode`: step 2 depends on
/// step 1.
/// `EnterPlanMode` on `session`, with a goal.
pub fn enter(session: &str) -> pb::EnterPlanModeRequest {
    pb::EnterPlanModeRequest {
        session_id: session.into(),
        goal: "ship".into(),
        ..Default::default()
    }
}

/// `ExitPlanMode` on `session`: [`two_steps`] submitted for approval.
pub fn submit(session: &str) -> pb::ExitPlanModeRequest {
    pb::ExitPlanModeRequest {
        session_id: session.into(),
        plan: Some(two_steps("a plan")),
        ..Default::default()
    }
}

pub fn two_steps(summary: &str) -> pb::ImplementationPlan {
    pb::ImplementationPlan {
        summary: summary.into(),
        steps: vec![
            pb::ImplementationStep {
                id: 1,
                description: "one".into(),
                ..Default::default()
            },
            pb::ImplementationStep {
                id: 2,
                description: "two".into(),
                depends_on: vec![1],
                ..Default::default()
            },
        ],
        ..Default::default()
    }
}

/// `Wait` until every plan of the tree under `root` is complete, fail fast
/// on a lost sub-agent, for at most `seconds`.
pub fn wait_tree(root: &str, seconds: i64) -> pb::WaitRequest {
    pb::WaitRequest {
        target: Some(pb::wait_request::Target::SessionTree(root.into())),
        condition: pb::WaitCondition::AllPlansCompleted.into(),
        timeout: Some(prost_types::Duration { seconds, nanos: 0 }),
        fail_fast: None,
    }
}
