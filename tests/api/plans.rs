//! `update_plan` semantics over gRPC (docs/rules.md, The checklist).

use cairn_api as pb;
use cairn_api::StepStatus::{Completed, InProgress, Pending};
use tonic::Code;

use cairn_testkit::{TestServer, assert_status, bad_field, five_steps, item, rev, update};

#[tokio::test]
async fn a_stored_plan_answers_like_the_seed() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let resp = plans
        .update_plan(update("s1", five_steps()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.message, "Plan updated");
    assert_eq!(resp.explanation, "Implement user authentication");
    assert!(resp.stored);
    assert_eq!(resp.hint, "");
    assert_eq!(resp.revision, rev(1));
    let ids: Vec<u32> = resp.plan.iter().map(|i| i.id).collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 5]);
    assert_eq!(
        resp.plan
            .iter()
            .map(|i| i.step.as_str())
            .collect::<Vec<_>>(),
        five_steps()
            .iter()
            .map(|i| i.step.as_str())
            .collect::<Vec<_>>()
    );

    let got = plans
        .get_plan(pb::GetPlanRequest {
            session_id: "s1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let plan = got.plan.unwrap();
    assert_eq!(plan.items, resp.plan);
    assert_eq!(plan.revision, rev(1));
    assert_eq!(got.revision, rev(1));
    assert_eq!(plan.status.unwrap().mode(), pb::PlanMode::Normal);
    assert!(plan.update_time.is_some());
}

#[tokio::test]
async fn at_most_one_step_in_progress() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let mut items = five_steps();
    items[2].status = InProgress.into();
    let err = plans.update_plan(update("s1", items)).await.unwrap_err();
    assert_status(
        &err,
        Code::InvalidArgument,
        "At most one step can be in_progress at a time",
        "MULTIPLE_IN_PROGRESS",
    );
    // Nothing was stored, not even the session.
    let err = plans
        .get_plan(pb::GetPlanRequest {
            session_id: "s1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}

#[tokio::test]
async fn simple_tasks_get_the_exact_hint_and_are_not_stored() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let resp = plans
        .update_plan(update(
            "s1",
            vec![item("Fix the typo", Pending), item("Run tests", Pending)],
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(!resp.stored);
    assert_eq!(
        resp.hint,
        "<system_hint tool=\"update_plan\" reason=\"simple_task\">Task \"Fix the typo\" is simple (2 steps) - execute directly without update_plan.</system_hint>"
    );
    assert_eq!(resp.revision, 0);
    let one = plans
        .update_plan(update("s1", vec![item("Rename x", InProgress)]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        one.hint,
        "<system_hint tool=\"update_plan\" reason=\"simple_task\">Task \"Rename x\" is simple (1 step) - execute directly without update_plan.</system_hint>"
    );
    let three = plans
        .update_plan(update(
            "s1",
            vec![item("a", Pending), item("b", Pending), item("c", Pending)],
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(!three.stored);
    assert!(three.hint.contains("(3 steps)"));
    let err = plans
        .get_plan(pb::GetPlanRequest {
            session_id: "s1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "a hinted plan creates nothing");
    // The hint comes after validation: two in progress is still an error.
    let err = plans
        .update_plan(update(
            "s1",
            vec![item("a", InProgress), item("b", InProgress)],
        ))
        .await
        .unwrap_err();
    assert_eq!(
        err.message(),
        "At most one step can be in_progress at a time"
    );
}

#[tokio::test]
async fn the_hint_threshold_is_configuration() {
    let server = TestServer::start_with(|p| p.simple_task_threshold = 0).await;
    let mut plans = server.plans().await;
    let resp = plans
        .update_plan(update("s1", vec![item("only", Pending)]))
        .await
        .unwrap()
        .into_inner();
    assert!(resp.stored);
    assert_eq!(resp.message, "Plan updated");

    let server = TestServer::start_with(|p| p.simple_task_threshold = 6).await;
    let mut plans = server.plans().await;
    let resp = plans
        .update_plan(update("s1", five_steps()))
        .await
        .unwrap()
        .into_inner();
    assert!(!resp.stored);
    assert!(resp.hint.contains("(5 steps)"));
}

#[tokio::test]
async fn empty_plans_and_steps_are_invalid() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let err = plans.update_plan(update("s1", vec![])).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(bad_field(&err), "plan");
    let mut items = five_steps();
    items[3].step = String::new();
    let err = plans.update_plan(update("s1", items)).await.unwrap_err();
    assert_status(
        &err,
        Code::InvalidArgument,
        "plan[3].step: must not be empty",
        "INVALID_FIELD",
    );
    assert_eq!(bad_field(&err), "plan[3].step");
    let mut items = five_steps();
    items[0].status = 0;
    let err = plans.update_plan(update("s1", items)).await.unwrap_err();
    assert_eq!(bad_field(&err), "plan[0].status");
    let err = plans
        .update_plan(update("bad id!", five_steps()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(bad_field(&err), "session_id");
}

#[tokio::test]
async fn statuses_skip_and_go_back_and_ids_stay_stable() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    plans.update_plan(update("s1", five_steps())).await.unwrap();
    // Skip pending -> completed, go back completed -> in_progress, reorder,
    // drop one step and add one.
    let next = vec![
        item("Design the database schema", InProgress),
        item("Implement the login API", Completed),
        item("Implement the sign-up API", Completed),
        item("Add password hashing", Completed),
        item("Add rate limiting", Pending),
    ];
    let resp = plans
        .update_plan(update("s1", next))
        .await
        .unwrap()
        .into_inner();
    let got: Vec<(u32, &str, pb::StepStatus)> = resp
        .plan
        .iter()
        .map(|i| (i.id, i.step.as_str(), i.status()))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, "Design the database schema", InProgress),
            (3, "Implement the login API", Completed),
            (2, "Implement the sign-up API", Completed),
            (4, "Add password hashing", Completed),
            (6, "Add rate limiting", Pending),
        ]
    );
    assert_eq!(resp.revision, rev(2));
}

#[tokio::test]
async fn unknown_sessions_are_created_as_roots_and_empty_plans_read_as_normal() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let mut sessions = server.sessions().await;
    plans
        .update_plan(update("auto", five_steps()))
        .await
        .unwrap();
    let s = sessions
        .get_session(pb::GetSessionRequest {
            session_id: "auto".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(s.parent_session_id, "");
    assert_eq!(s.revision, rev(1));

    sessions
        .create_session(cairn_testkit::session("empty", ""))
        .await
        .unwrap();
    let plan = plans
        .get_plan(pb::GetPlanRequest {
            session_id: "empty".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .plan
        .unwrap();
    assert!(plan.items.is_empty());
    assert_eq!(plan.revision, 0);
    assert_eq!(plan.status.unwrap().mode(), pb::PlanMode::Normal);
    let err = plans
        .get_plan(pb::GetPlanRequest {
            session_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::NotFound,
        "Session nope not found",
        "SESSION_NOT_FOUND",
    );
}

#[tokio::test]
async fn limits_are_enforced_with_clear_errors() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let many: Vec<pb::PlanItem> = (0..201)
        .map(|i| item(&format!("step {i}"), Pending))
        .collect();
    let err = plans.update_plan(update("s1", many)).await.unwrap_err();
    assert_status(
        &err,
        Code::ResourceExhausted,
        "plan: number of steps exceeds the limit of 200 (got 201)",
        "LIMIT_EXCEEDED",
    );
    let mut items = five_steps();
    items[1].step = "x".repeat(8 * 1024 + 1);
    let err = plans.update_plan(update("s1", items)).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(bad_field(&err), "plan[1].step");
    let err = plans
        .update_plan(update(&"s".repeat(129), five_steps()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    let ok: Vec<pb::PlanItem> = (0..200)
        .map(|i| item(&format!("step {i}"), Pending))
        .collect();
    assert!(plans.update_plan(update("s1", ok)).await.is_ok());
}

#[tokio::test]
async fn expected_revision_guards_against_lost_updates() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let mut first = update("s1", five_steps());
    first.expected_revision = Some(0);
    let r1 = plans
        .update_plan(first)
        .await
        .unwrap()
        .into_inner()
        .revision;
    let mut stale = update("s1", five_steps());
    stale.expected_revision = Some(0);
    let err = plans.update_plan(stale).await.unwrap_err();
    assert_status(
        &err,
        Code::Aborted,
        &format!("expected revision 0, but the resource is at revision {r1}"),
        "REVISION_MISMATCH",
    );
    let mut fresh = update("s1", five_steps());
    fresh.expected_revision = Some(r1);
    assert_eq!(
        plans
            .update_plan(fresh)
            .await
            .unwrap()
            .into_inner()
            .revision,
        r1 + 1
    );
}

#[tokio::test]
async fn an_observed_plan_is_stored_as_the_agent_kept_it() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let observed = |items: Vec<pb::PlanItem>| pb::UpdatePlanRequest {
        source: pb::PlanSource::Observed.into(),
        ..update("claude:s", items)
    };
    let mut two = vec![
        item("Write the parser", InProgress),
        item("Add tests", InProgress),
    ];
    two[0].id = 7;
    two[1].blocked_by = vec![7];
    // Two steps in progress: refused from a tool, stored when observed.
    let e = plans
        .update_plan(update("claude:s", two.clone()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(e.message(), "At most one step can be in_progress at a time");
    let resp = plans.update_plan(observed(two)).await.unwrap().into_inner();
    assert!(resp.stored);
    assert_eq!(resp.plan[0].id, 7, "the agent's id");
    assert_eq!(resp.plan[1].blocked_by, [7]);
    // One step: stored, no simple-task hint. A cancelled step: kept.
    let one = plans
        .update_plan(observed(vec![item("Only step", pb::StepStatus::Cancelled)]))
        .await
        .unwrap()
        .into_inner();
    assert!(one.stored && one.hint.is_empty());
    let got = plans
        .get_plan(pb::GetPlanRequest {
            session_id: "claude:s".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .plan
        .unwrap();
    assert_eq!(got.source(), pb::PlanSource::Observed);
    assert_eq!(got.items[0].status(), pb::StepStatus::Cancelled);
    // A tool cannot cancel a step.
    let e = plans
        .update_plan(update("s2", vec![item("a", pb::StepStatus::Cancelled); 4]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("observed"), "{}", e.message());
}
