//! Every input edge answered: ids validated on every RPC, nothing echoed
//! at length, unknown enum values refused, oversized requests refused with
//! gRPC's code.

use cairn_api as pb;
use tonic::Code;
use tonic_types::StatusExt;

use cairn_testkit::{TestServer, bad_field, five_steps, todo, update};

/// Ids no RPC may accept: empty, NUL, non-ASCII, path-like, far too long.
fn hostile_ids() -> Vec<String> {
    vec![
        String::new(),
        "a\0b".into(),
        "sessão".into(),
        "..".into(),
        "x".repeat(5000),
    ]
}

#[tokio::test]
async fn every_read_validates_its_ids_and_echoes_little() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let mut sessions = server.sessions().await;
    for id in hostile_ids() {
        let errors = [
            plans
                .get_plan(pb::GetPlanRequest {
                    session_id: id.clone(),
                })
                .await
                .unwrap_err(),
            plans
                .get_plan_status(pb::GetPlanStatusRequest {
                    session_id: id.clone(),
                })
                .await
                .unwrap_err(),
            plans
                .list_plan_history(pb::ListPlanHistoryRequest {
                    session_id: id.clone(),
                    ..Default::default()
                })
                .await
                .unwrap_err(),
        ];
        let mut errors = errors.to_vec();
        // An empty filter means no filter.
        if !id.is_empty() {
            for filter in [
                pb::ListSessionsRequest {
                    parent_session_id: id.clone(),
                    ..Default::default()
                },
                pb::ListSessionsRequest {
                    agent_id: id.clone(),
                    ..Default::default()
                },
            ] {
                errors.push(sessions.list_sessions(filter).await.unwrap_err());
            }
        }
        for e in errors {
            assert!(
                matches!(e.code(), Code::InvalidArgument | Code::ResourceExhausted),
                "{:?}: {e:?}",
                cairn_testkit::short(&id)
            );
            // The id itself is never echoed back at length.
            assert!(e.message().len() < 200, "{e:?}");
            let info = e.get_details_error_info().unwrap();
            assert!(info.metadata.values().all(|v| v.len() < 200));
        }
    }
}

#[tokio::test]
async fn unknown_enum_values_are_refused_not_coerced() {
    let server = TestServer::start().await;
    let mut todos = server.todos().await;
    let mut item = todo("a", pb::TodoStatus::Pending);
    item.priority = 99;
    let err = todos
        .write_todos(pb::WriteTodosRequest {
            agent_id: "coder".into(),
            todos: vec![todo("ok", pb::TodoStatus::Pending), item],
            expected_revision: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(bad_field(&err), "todos[1].priority");

    let mut plans = server.plans().await;
    plans
        .enter_plan_mode(pb::EnterPlanModeRequest {
            session_id: "s".into(),
            goal: "g".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let err = plans
        .exit_plan_mode(pb::ExitPlanModeRequest {
            deadline: None,
            session_id: "s".into(),
            plan: Some(pb::ImplementationPlan {
                summary: "p".into(),
                steps: vec![pb::ImplementationStep {
                    id: 1,
                    description: "d".into(),
                    ..Default::default()
                }],
                estimated_complexity: 99,
                ..Default::default()
            }),
            expected_revision: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(bad_field(&err), "plan.estimated_complexity");
}

#[tokio::test]
async fn an_oversized_request_is_resource_exhausted() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let mut items = five_steps();
    items[0].step = "x".repeat(5 << 20);
    let err = plans.update_plan(update("s", items)).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    let info = err.get_details_error_info().unwrap();
    assert_eq!(info.reason, "LIMIT_EXCEEDED");
    assert_eq!(info.metadata["limit"], "4194304");
    // The server carries on.
    plans.update_plan(update("s", five_steps())).await.unwrap();
}
