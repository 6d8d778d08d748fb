//! Plan mode over gRPC (docs/rules.md, Plan mode): the whole workflow and every
//! error text.

use cairn_api as pb;
use cairn_api::plan_service_client::PlanServiceClient;
use cairn_api::{PlanMode, StepStatus};
use tonic::Code;
use tonic::transport::Channel;

use cairn_testkit::{TestServer, assert_status, bad_field, five_steps, update};

fn step(id: u32, description: &str, deps: &[u32]) -> pb::ImplementationStep {
    pb::ImplementationStep {
        id,
        description: description.into(),
        files: vec![format!("src/step{id}.rs")],
        depends_on: deps.to_vec(),
        verification: format!("cargo test step{id}"),
    }
}

fn implementation_plan() -> pb::ImplementationPlan {
    pb::ImplementationPlan {
        summary: "Add JWT authentication".into(),
        approach: "Middleware that validates tokens".into(),
        alternatives_considered: vec!["Sessions in cookies".into()],
        steps: vec![
            step(1, "Add the token type", &[]),
            step(2, "Write the middleware", &[1]),
            step(3, "Protect the routes", &[1, 2]),
        ],
        risks: vec!["Clock skew".into()],
        files_to_create: vec!["src/auth.rs".into()],
        files_to_modify: vec!["src/main.rs".into()],
        tests_to_write: vec!["tests/auth.rs".into()],
        estimated_complexity: pb::Complexity::Medium.into(),
    }
}

async fn enter(
    plans: &mut PlanServiceClient<Channel>,
    s: &str,
) -> Result<pb::PlanStatus, tonic::Status> {
    plans
        .enter_plan_mode(pb::EnterPlanModeRequest {
            session_id: s.into(),
            goal: "Add authentication".into(),
            scope: "src/".into(),
            expected_revision: None,
        })
        .await
        .map(|r| r.into_inner().status.unwrap())
}

async fn exit(
    plans: &mut PlanServiceClient<Channel>,
    s: &str,
    plan: pb::ImplementationPlan,
) -> Result<pb::PlanStatus, tonic::Status> {
    plans
        .exit_plan_mode(pb::ExitPlanModeRequest {
            deadline: None,
            session_id: s.into(),
            plan: Some(plan),
            expected_revision: None,
        })
        .await
        .map(|r| r.into_inner().status.unwrap())
}

async fn check(
    plans: &mut PlanServiceClient<Channel>,
    s: &str,
    tool: &str,
    action: &str,
) -> pb::CheckActionResponse {
    plans
        .check_action(pb::CheckActionRequest {
            session_id: s.into(),
            tool: tool.into(),
            action: action.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

async fn complete(
    plans: &mut PlanServiceClient<Channel>,
    s: &str,
    step_id: u32,
    result: &str,
) -> Result<pb::PlanStatus, tonic::Status> {
    plans
        .complete_step(pb::CompleteStepRequest {
            session_id: s.into(),
            step_id,
            verification_result: result.into(),
            expected_revision: None,
        })
        .await
        .map(|r| r.into_inner().status.unwrap())
}

async fn checklist(
    plans: &mut PlanServiceClient<Channel>,
    s: &str,
) -> Vec<(u32, String, StepStatus)> {
    plans
        .get_plan(pb::GetPlanRequest {
            session_id: s.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .plan
        .unwrap()
        .items
        .into_iter()
        .map(|i| (i.id, i.step.clone(), i.status()))
        .collect()
}

#[tokio::test]
async fn the_whole_workflow_with_every_error_text() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let s = "agent-1";

    // Not in plan mode yet.
    let err = exit(&mut plans, s, implementation_plan())
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::FailedPrecondition,
        "Not in plan mode. Call plan_enter first.",
        "NOT_IN_PLAN_MODE",
    );
    let err = complete(&mut plans, s, 1, "ok").await.unwrap_err();
    assert_eq!(
        err.code(),
        Code::FailedPrecondition,
        "no active plan on an unknown session"
    );
    let err = plans
        .get_plan_status(pb::GetPlanStatusRequest {
            session_id: s.into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::NotFound,
        "failed plan-mode calls create no session"
    );
    assert!(check(&mut plans, s, "write_file", "").await.allowed);

    // NORMAL -> PLANNING: writes blocked, reads allowed.
    let status = enter(&mut plans, s).await.unwrap();
    assert_eq!(status.mode(), PlanMode::Planning);
    assert_eq!(status.goal, "Add authentication");
    assert_eq!(status.scope, "src/");
    let denied = check(&mut plans, s, "write_file", "").await;
    assert!(!denied.allowed);
    assert_eq!(denied.mode(), PlanMode::Planning);
    assert!(
        denied.reason.contains("blocked in plan mode"),
        "{}",
        denied.reason
    );
    assert!(!check(&mut plans, s, "cron", "create").await.allowed);
    assert!(!check(&mut plans, s, "cron", "delete").await.allowed);
    assert!(!check(&mut plans, s, "cron_create", "").await.allowed);
    assert!(check(&mut plans, s, "cron", "list").await.allowed);
    let read = check(&mut plans, s, "read_file", "").await;
    assert!(read.allowed);
    assert!(!read.reason.is_empty());

    let err = enter(&mut plans, s).await.unwrap_err();
    assert_status(
        &err,
        Code::FailedPrecondition,
        "Already in plan mode",
        "ALREADY_IN_PLAN_MODE",
    );

    // An invalid plan is refused and leaves the session PLANNING.
    let mut cyclic = implementation_plan();
    cyclic.steps[0].depends_on = vec![3];
    let err = exit(&mut plans, s, cyclic).await.unwrap_err();
    assert_status(
        &err,
        Code::InvalidArgument,
        "plan.steps: dependency cycle among steps 1, 2, 3",
        "INVALID_FIELD",
    );
    let mut dangling = implementation_plan();
    dangling.steps[1].depends_on = vec![9];
    let err = exit(&mut plans, s, dangling).await.unwrap_err();
    assert_eq!(bad_field(&err), "plan.steps[1].depends_on");
    let mut dup = implementation_plan();
    dup.steps[2].id = 1;
    let err = exit(&mut plans, s, dup).await.unwrap_err();
    assert_eq!(err.message(), "plan.steps[2].id: duplicate step id 1");

    // PLANNING -> AWAITING_APPROVAL; still blocked, nothing executes.
    let status = exit(&mut plans, s, implementation_plan()).await.unwrap();
    assert_eq!(status.mode(), PlanMode::AwaitingApproval);
    let pending = status.pending.clone().unwrap();
    assert_eq!(pending.plan.unwrap(), implementation_plan());
    let id = pending.plan_id;
    assert!(
        id.starts_with("plan_") && id.len() == "plan_YYYY-MM-DD_xxxxxx".len(),
        "{id}"
    );
    assert!(status.active.is_none());
    assert!(!check(&mut plans, s, "write_file", "").await.allowed);
    let err = enter(&mut plans, s).await.unwrap_err();
    assert_status(
        &err,
        Code::FailedPrecondition,
        "A plan is awaiting approval. Approve or reject it before entering plan mode again.",
        "PLAN_AWAITING_APPROVAL",
    );
    let err = exit(&mut plans, s, implementation_plan())
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::FailedPrecondition,
        "Not in plan mode. Call plan_enter first.",
        "NOT_IN_PLAN_MODE",
    );
    let err = complete(&mut plans, s, 1, "ok").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "no active plan yet");

    // Approve: the steps become the checklist, the first ready one in progress.
    let status = plans
        .approve_plan(pb::ApprovePlanRequest {
            session_id: s.into(),
            approver: "alice".into(),
            expected_revision: None,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(status.mode(), PlanMode::Normal);
    let active = status.active.unwrap();
    assert_eq!(active.plan_id, id);
    assert_eq!(active.approver, "alice");
    assert_eq!(
        (
            active.completed_count,
            active.total_count,
            active.current_step_id
        ),
        (0, 3, 1)
    );
    assert!(check(&mut plans, s, "write_file", "").await.allowed);
    assert_eq!(
        checklist(&mut plans, s).await,
        vec![
            (1, "Add the token type".into(), StepStatus::InProgress),
            (2, "Write the middleware".into(), StepStatus::Pending),
            (3, "Protect the routes".into(), StepStatus::Pending),
        ]
    );

    // Steps: dependencies, unknown ids, repeats, empty verification.
    let err = complete(&mut plans, s, 3, "ok").await.unwrap_err();
    assert_status(
        &err,
        Code::FailedPrecondition,
        "Step 3 depends on incomplete steps: 1, 2",
        "DEPENDENCIES_INCOMPLETE",
    );
    let err = complete(&mut plans, s, 9, "ok").await.unwrap_err();
    assert_status(
        &err,
        Code::NotFound,
        "Step 9 not found in plan",
        "STEP_NOT_FOUND",
    );
    let err = complete(&mut plans, s, 1, "").await.unwrap_err();
    assert_status(
        &err,
        Code::InvalidArgument,
        "verification_result: must not be empty",
        "INVALID_FIELD",
    );
    let status = complete(&mut plans, s, 1, "3 passed").await.unwrap();
    let active = status.active.unwrap();
    assert_eq!((active.completed_count, active.current_step_id), (1, 2));
    assert_eq!(active.completions[0].verification_result, "3 passed");
    let err = complete(&mut plans, s, 1, "again").await.unwrap_err();
    assert_status(
        &err,
        Code::FailedPrecondition,
        "Step 1 already completed",
        "STEP_ALREADY_COMPLETED",
    );
    assert_eq!(
        checklist(&mut plans, s)
            .await
            .iter()
            .map(|i| i.2)
            .collect::<Vec<_>>(),
        vec![
            StepStatus::Completed,
            StepStatus::InProgress,
            StepStatus::Pending
        ]
    );

    // A modification changes nothing until approved.
    let resp = plans
        .modify_plan(pb::ModifyPlanRequest {
            deadline: None,
            session_id: s.into(),
            step_id: 2,
            reason: "The framework has tower middleware".into(),
            new_description: "Write a tower layer".into(),
            new_files: vec!["src/layer.rs".into()],
            new_verification: Some("cargo test layer".into()),
            expected_revision: None,
        })
        .await
        .unwrap()
        .into_inner();
    let modification = resp.modification.unwrap();
    assert_eq!(
        resp.status.unwrap().pending_modifications,
        vec![modification.clone()]
    );
    assert_eq!(checklist(&mut plans, s).await[1].1, "Write the middleware");
    let err = plans
        .approve_modification(pb::ApproveModificationRequest {
            session_id: s.into(),
            modification_id: 99,
            expected_revision: None,
        })
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::NotFound,
        "Modification 99 not found",
        "MODIFICATION_NOT_FOUND",
    );
    let status = plans
        .approve_modification(pb::ApproveModificationRequest {
            session_id: s.into(),
            modification_id: modification.modification_id,
            expected_revision: None,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert!(status.pending_modifications.is_empty());
    let step2 = status.active.unwrap().plan.unwrap().steps[1].clone();
    assert_eq!(step2.description, "Write a tower layer");
    assert_eq!(step2.files, vec!["src/layer.rs".to_string()]);
    assert_eq!(step2.verification, "cargo test layer");
    assert_eq!(checklist(&mut plans, s).await[1].1, "Write a tower layer");

    let m2 = plans
        .modify_plan(pb::ModifyPlanRequest {
            deadline: None,
            session_id: s.into(),
            step_id: 3,
            reason: "r".into(),
            new_description: "d".into(),
            new_files: vec![],
            new_verification: None,
            expected_revision: None,
        })
        .await
        .unwrap()
        .into_inner()
        .modification
        .unwrap();
    plans
        .reject_modification(pb::RejectModificationRequest {
            session_id: s.into(),
            modification_id: m2.modification_id,
            expected_revision: None,
        })
        .await
        .unwrap();
    assert_eq!(checklist(&mut plans, s).await[2].1, "Protect the routes");
    let err = plans
        .modify_plan(pb::ModifyPlanRequest {
            deadline: None,
            session_id: s.into(),
            step_id: 1,
            reason: "r".into(),
            new_description: "d".into(),
            new_files: vec![],
            new_verification: None,
            expected_revision: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.message(), "Step 1 already completed");

    // Completing with steps left needs deviations.
    let err = plans
        .complete_plan(pb::CompletePlanRequest {
            session_id: s.into(),
            summary: "Auth works".into(),
            deviations: vec![],
            expected_revision: None,
        })
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::FailedPrecondition,
        "Steps 2, 3 are not completed; explain them in deviations to complete the plan",
        "DEVIATIONS_REQUIRED",
    );
    complete(&mut plans, s, 2, "ok").await.unwrap();
    let status = complete(&mut plans, s, 3, "ok").await.unwrap();
    assert_eq!(status.active.as_ref().unwrap().current_step_id, 0);
    assert!(
        checklist(&mut plans, s)
            .await
            .iter()
            .all(|i| i.2 == StepStatus::Completed)
    );
    let resp = plans
        .complete_plan(pb::CompletePlanRequest {
            session_id: s.into(),
            summary: "Auth works".into(),
            deviations: vec![],
            expected_revision: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resp.status.unwrap().active.is_none());
    let entry = resp.entry.unwrap();
    assert_eq!(entry.outcome(), pb::PlanOutcome::Completed);
    assert_eq!(entry.completions.len(), 3);
    assert_eq!(entry.applied_modifications.len(), 1);

    let history = plans
        .list_plan_history(pb::ListPlanHistoryRequest {
            page_size: 0,
            page_token: String::new(),
            session_id: s.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert_eq!(history, vec![entry]);
}

#[tokio::test]
async fn rejecting_returns_to_normal_and_keeps_history() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    enter(&mut plans, "s").await.unwrap();
    exit(&mut plans, "s", implementation_plan()).await.unwrap();
    let status = plans
        .reject_plan(pb::RejectPlanRequest {
            session_id: "s".into(),
            reason: "Too broad".into(),
            expected_revision: None,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(status.mode(), PlanMode::Normal);
    assert!(status.pending.is_none());
    let err = plans
        .reject_plan(pb::RejectPlanRequest {
            session_id: "s".into(),
            reason: String::new(),
            expected_revision: None,
        })
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::FailedPrecondition,
        "No plan is awaiting approval",
        "NO_PENDING_PLAN",
    );
    let err = plans
        .approve_plan(pb::ApprovePlanRequest {
            session_id: "s".into(),
            approver: String::new(),
            expected_revision: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let history = plans
        .list_plan_history(pb::ListPlanHistoryRequest {
            page_size: 0,
            page_token: String::new(),
            session_id: "s".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].outcome(), pb::PlanOutcome::Rejected);
    assert_eq!(history[0].reason, "Too broad");
    // And planning can start again.
    enter(&mut plans, "s").await.unwrap();
}

#[tokio::test]
async fn a_later_update_plan_leaves_the_active_plan_alone() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    enter(&mut plans, "s").await.unwrap();
    exit(&mut plans, "s", implementation_plan()).await.unwrap();
    plans
        .approve_plan(pb::ApprovePlanRequest {
            session_id: "s".into(),
            approver: "bob".into(),
            expected_revision: None,
        })
        .await
        .unwrap();
    plans.update_plan(update("s", five_steps())).await.unwrap();
    let plan = plans
        .get_plan(pb::GetPlanRequest {
            session_id: "s".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .plan
        .unwrap();
    assert_eq!(plan.items.len(), 5);
    let active = plan.status.unwrap().active.unwrap();
    assert_eq!((active.completed_count, active.total_count), (0, 3));
    // Plan-mode progress then projects the active plan onto the checklist again.
    complete(&mut plans, "s", 1, "ok").await.unwrap();
    assert_eq!(checklist(&mut plans, "s").await.len(), 3);
}

#[tokio::test]
async fn the_blocked_list_is_configuration() {
    let server = TestServer::start_with(|p| p.blocked_tools = vec!["shell:rm".into()]).await;
    let mut plans = server.plans().await;
    enter(&mut plans, "s").await.unwrap();
    assert!(check(&mut plans, "s", "write_file", "").await.allowed);
    assert!(!check(&mut plans, "s", "shell", "rm").await.allowed);
    assert!(check(&mut plans, "s", "shell", "ls").await.allowed);
    let err = plans
        .check_action(pb::CheckActionRequest {
            session_id: "s".into(),
            tool: String::new(),
            action: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

async fn history_page(
    plans: &mut PlanServiceClient<Channel>,
    s: &str,
    page_size: i32,
    page_token: &str,
) -> Result<pb::ListPlanHistoryResponse, tonic::Status> {
    plans
        .list_plan_history(pb::ListPlanHistoryRequest {
            session_id: s.into(),
            page_size,
            page_token: page_token.into(),
        })
        .await
        .map(tonic::Response::into_inner)
}

async fn reject(plans: &mut PlanServiceClient<Channel>, s: &str) {
    plans
        .reject_plan(pb::RejectPlanRequest {
            session_id: s.into(),
            reason: "no".into(),
            expected_revision: None,
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn history_comes_in_pages_that_fit_a_message() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    for _ in 0..5 {
        enter(&mut plans, "s").await.unwrap();
        exit(&mut plans, "s", implementation_plan()).await.unwrap();
        reject(&mut plans, "s").await;
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = history_page(&mut plans, "s", 2, &token).await.unwrap();
        assert!(page.entries.len() <= 2);
        seen.extend(page.entries.into_iter().map(|e| e.plan_id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen.len(), 5);
    let unique: std::collections::BTreeSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), 5, "no entry twice");
    let err = history_page(&mut plans, "s", 2, "garbage")
        .await
        .unwrap_err();
    assert_eq!(bad_field(&err), "page_token");
    let err = history_page(&mut plans, "", 2, "").await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    // Plans of 900 KB: a page stops once it holds 2 MiB, so it stays
    // under a default client's 4 MiB limit however many are asked for.
    let big = |n: u32| pb::ImplementationPlan {
        summary: "big".into(),
        steps: (1..=110)
            .map(|id| step(id, &format!("{n} {}", "d".repeat(8000)), &[]))
            .collect(),
        ..Default::default()
    };
    for n in 0..4 {
        enter(&mut plans, "big").await.unwrap();
        exit(&mut plans, "big", big(n)).await.unwrap();
        reject(&mut plans, "big").await;
    }
    let page = history_page(&mut plans, "big", 100, "").await.unwrap();
    assert_eq!(page.entries.len(), 3, "2 MiB reached after the third");
    assert!(!page.next_page_token.is_empty());
    let rest = history_page(&mut plans, "big", 100, &page.next_page_token)
        .await
        .unwrap();
    assert_eq!(rest.entries.len(), 1);
    assert!(rest.next_page_token.is_empty());
}

#[tokio::test]
async fn a_plan_record_stays_within_its_size_limit() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    // 1.6 MB of plan: over the 1 MiB a stored plan may hold.
    enter(&mut plans, "s").await.unwrap();
    let huge = pb::ImplementationPlan {
        summary: "huge".into(),
        steps: (1..=200)
            .map(|id| step(id, &"d".repeat(8000), &[]))
            .collect(),
        ..Default::default()
    };
    let err = exit(&mut plans, "s", huge).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert_eq!(bad_field(&err), "plan");
    assert!(
        err.message()
            .starts_with("plan: stored plan size in bytes exceeds the limit of 1048576"),
        "{err:?}"
    );

    // Approved modifications are kept as a bounded tail.
    exit(&mut plans, "s", implementation_plan()).await.unwrap();
    plans
        .approve_plan(pb::ApprovePlanRequest {
            session_id: "s".into(),
            approver: "lead".into(),
            expected_revision: None,
        })
        .await
        .unwrap();
    for n in 0..40 {
        let m = plans
            .modify_plan(pb::ModifyPlanRequest {
                deadline: None,
                session_id: "s".into(),
                step_id: 3,
                reason: format!("change {n}"),
                new_description: format!("Protect the routes, take {n}"),
                new_files: vec![],
                new_verification: None,
                expected_revision: None,
            })
            .await
            .unwrap()
            .into_inner()
            .modification
            .unwrap();
        plans
            .approve_modification(pb::ApproveModificationRequest {
                session_id: "s".into(),
                modification_id: m.modification_id,
                expected_revision: None,
            })
            .await
            .unwrap();
    }
    plans
        .complete_plan(pb::CompletePlanRequest {
            session_id: "s".into(),
            summary: "done".into(),
            deviations: vec!["steps left".into()],
            expected_revision: None,
        })
        .await
        .unwrap();
    let page = history_page(&mut plans, "s", 0, "").await.unwrap();
    let applied = &page.entries.last().unwrap().applied_modifications;
    assert_eq!(applied.len(), 32);
    assert_eq!(applied.last().unwrap().reason, "change 39");
}
