//! Cairn as an A2A server (`docs/a2a.md`), over the real binary: the agent
//! card on the web listener, `lf.a2a.v1.A2AService` on the gRPC port
//! (listed by reflection), sessions read as tasks through the access
//! rules, and the errors A2A names.

use cairn_api as pb;
use cairn_api::a2a;
use cairn_testkit::{Bearer, item, session, two_steps, update};
use pb::StepStatus::{Completed, InProgress, Pending};
use tonic_types::StatusExt as _;

use crate::web::http;
use crate::{ADMIN_TOKEN, with_admin};

/// The state and the plan artifact's text of a task.
fn state_and_text(t: &a2a::Task) -> (a2a::TaskState, String) {
    let state = a2a::TaskState::try_from(t.status.as_ref().unwrap().state).unwrap();
    let text = t
        .artifacts
        .iter()
        .flat_map(|a| &a.parts)
        .find_map(|p| match &p.content {
            Some(a2a::part::Content::Text(t)) => Some(t.clone()),
            _ => None,
        })
        .unwrap_or_default();
    (state, text)
}

#[tokio::test]
async fn sessions_are_tasks_with_the_card_the_states_and_the_errors_a2a_names() {
    let dir = tempfile::tempdir().unwrap();
    let p = with_admin(dir.path(), &["--web-listen", "127.0.0.1:0"]);
    let web = p.web.clone().unwrap();

    // The card: public, naming the gRPC interface and the bearer scheme.
    let (status, headers, body) = http(
        &web,
        &format!("GET /.well-known/agent-card.json HTTP/1.1\r\nHost: {web}"),
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        headers
            .iter()
            .any(|(k, v)| k == "content-type" && v == "application/json")
    );
    let card: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(card["name"], "Cairn");
    let iface = &card["supportedInterfaces"][0];
    assert_eq!(iface["url"], format!("http://{}", p.addr));
    assert_eq!(iface["protocolBinding"], "GRPC");
    assert_eq!(iface["protocolVersion"], "1.0");
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    assert!(card["securityRequirements"][0]["schemes"]["bearer"].is_object());

    let channel = p.channel().await;
    let admin = Bearer::new(Some(ADMIN_TOKEN));
    let mut sessions = pb::session_service_client::SessionServiceClient::with_interceptor(
        channel.clone(),
        admin.clone(),
    );
    let mut plans = pb::plan_service_client::PlanServiceClient::with_interceptor(
        channel.clone(),
        admin.clone(),
    );
    let mut tasks =
        a2a::a2a_service_client::A2aServiceClient::with_interceptor(channel.clone(), admin);
    sessions.create_session(session("root", "")).await.unwrap();
    sessions
        .create_session(session("sub", "root"))
        .await
        .unwrap();
    let get = |id: &str| a2a::GetTaskRequest {
        id: id.into(),
        ..Default::default()
    };

    // No plan yet: submitted, in the context of its tree's root.
    let t = tasks.get_task(get("sub")).await.unwrap().into_inner();
    assert_eq!(t.id, "sub");
    assert_eq!(t.context_id, "root");
    assert_eq!(
        state_and_text(&t),
        (a2a::TaskState::Submitted, String::new())
    );

    // A step in progress: working, the plan as data and as text.
    plans
        .update_plan(update(
            "sub",
            vec![
                item("Read the code", Completed),
                item("Fix the bug", InProgress),
                item("Test it", Pending),
                item("Ship it", Pending),
            ],
        ))
        .await
        .unwrap();
    let t = tasks.get_task(get("sub")).await.unwrap().into_inner();
    assert_eq!(
        state_and_text(&t),
        (
            a2a::TaskState::Working,
            "[x] Read the code\n[>] Fix the bug\n[ ] Test it\n[ ] Ship it\n".into()
        )
    );
    let data = t.artifacts[0].parts.iter().find_map(|p| match &p.content {
        Some(a2a::part::Content::Data(v)) => Some(v.clone()),
        _ => None,
    });
    let Some(prost_types::Value {
        kind: Some(prost_types::value::Kind::StructValue(data)),
    }) = data
    else {
        panic!("no data part in {:?}", t.artifacts);
    };
    let Some(prost_types::value::Kind::ListValue(steps)) = &data.fields["steps"].kind else {
        panic!("no steps in {data:?}");
    };
    assert_eq!(steps.values.len(), 4);

    // A plan awaiting approval: input-required.
    plans
        .enter_plan_mode(pb::EnterPlanModeRequest {
            session_id: "root".into(),
            goal: "ship".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    plans
        .exit_plan_mode(pb::ExitPlanModeRequest {
            session_id: "root".into(),
            plan: Some(two_steps("a plan")),
            ..Default::default()
        })
        .await
        .unwrap();
    let t = tasks.get_task(get("root")).await.unwrap().into_inner();
    assert_eq!(state_and_text(&t).0, a2a::TaskState::InputRequired);
    assert_eq!(t.context_id, "root");

    // Every step done: completed.
    plans
        .update_plan(update(
            "sub",
            vec![
                item("Read the code", Completed),
                item("Fix the bug", Completed),
                item("Test it", Completed),
                item("Ship it", Completed),
            ],
        ))
        .await
        .unwrap();
    let done = plans
        .get_plan(pb::GetPlanRequest {
            session_id: "sub".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let t = tasks.get_task(get("sub")).await.unwrap().into_inner();
    assert_eq!(state_and_text(&t).0, a2a::TaskState::Completed);
    // The plan's revision, exact, as a string.
    assert_eq!(
        t.metadata.unwrap().fields["cairn_revision"].kind,
        Some(prost_types::value::Kind::StringValue(
            done.plan.unwrap().revision.to_string()
        ))
    );

    // ListTasks: every task, or those in one state; artifacts on request.
    let list = |status: a2a::TaskState, artifacts: bool| a2a::ListTasksRequest {
        status: status.into(),
        include_artifacts: Some(artifacts),
        ..Default::default()
    };
    let all = tasks
        .list_tasks(list(a2a::TaskState::Unspecified, false))
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<&str> = all.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["root", "sub"]);
    assert!(all.tasks.iter().all(|t| t.artifacts.is_empty()));
    assert_eq!(all.page_size, 50);
    let done = tasks
        .list_tasks(list(a2a::TaskState::Completed, true))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(done.tasks.len(), 1);
    assert_eq!(done.tasks[0].id, "sub");
    assert_eq!(done.tasks[0].artifacts.len(), 1);
    let paged = tasks
        .list_tasks(a2a::ListTasksRequest {
            page_size: Some(1),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (paged.tasks.len(), paged.next_page_token.as_str()),
        (1, "root")
    );
    let e = tasks
        .list_tasks(a2a::ListTasksRequest {
            page_size: Some(101),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);

    // Bad input names the field the caller sent.
    let e = tasks
        .list_tasks(a2a::ListTasksRequest {
            status: 99,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        e.get_details_bad_request().unwrap().field_violations[0].field,
        "status"
    );
    let e = tasks.get_task(get("")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        e.get_details_bad_request().unwrap().field_violations[0].field,
        "id"
    );

    // The errors A2A names, in its domain.
    let e = tasks.get_task(get("nope")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    let info = e.get_details_error_info().unwrap();
    assert_eq!(
        (info.reason.as_str(), info.domain.as_str()),
        ("TASK_NOT_FOUND", "a2a-protocol.org")
    );
    let e = tasks
        .cancel_task(a2a::CancelTaskRequest {
            id: "sub".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert_eq!(
        e.get_details_error_info().unwrap().reason,
        "UNSUPPORTED_OPERATION"
    );

    // Another agent's task is, to an agent, a task that is not found; no
    // token is no answer at all.
    let mut auth = pb::auth_service_client::AuthServiceClient::with_interceptor(
        channel.clone(),
        Bearer::new(Some(ADMIN_TOKEN)),
    );
    let token = auth
        .create_principal(pb::CreatePrincipalRequest {
            principal: Some(pb::Principal {
                principal_id: "coder".into(),
                roles: vec![pb::Role::Agent.into()],
                agent_ids: vec!["agent-sub".into()],
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .token;
    let mut coder = a2a::a2a_service_client::A2aServiceClient::with_interceptor(
        channel.clone(),
        Bearer::new(Some(&token)),
    );
    assert_eq!(
        coder.get_task(get("sub")).await.unwrap().into_inner().id,
        "sub"
    );
    let e = coder.get_task(get("root")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert_eq!(e.get_details_error_info().unwrap().reason, "TASK_NOT_FOUND");
    let mut anonymous = a2a::a2a_service_client::A2aServiceClient::new(channel);
    let e = anonymous.get_task(get("sub")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    p.stop().await;
}
