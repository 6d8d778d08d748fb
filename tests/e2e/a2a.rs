//! Cairn as an A2A server (`docs/a2a.md`), over the real binary: the agent
//! card on the web listener, `lf.a2a.v1.A2AService` on the gRPC port
//! (listed by reflection), sessions read as tasks through the access
//! rules, and the errors A2A names.

use cairn_api as pb;
use cairn_api::a2a;
use cairn_testkit::{Bearer, enter, item, session, submit, update};
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
    assert_eq!(iface["url"], p.addr.as_str());
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
    plans.enter_plan_mode(enter("root")).await.unwrap();
    plans.exit_plan_mode(submit("root")).await.unwrap();
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

    // By context: the tasks of one tree; a session that is no root is no
    // task's context.
    let by_context = |context: &str| a2a::ListTasksRequest {
        context_id: context.into(),
        ..Default::default()
    };
    let tree = tasks
        .list_tasks(by_context("root"))
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<&str> = tree.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["root", "sub"]);
    assert!(tree.tasks.iter().all(|t| t.context_id == "root"));
    let none = tasks
        .list_tasks(by_context("sub"))
        .await
        .unwrap()
        .into_inner();
    assert!(none.tasks.is_empty());
    let e = tasks.list_tasks(by_context("a/b")).await.unwrap_err();
    assert_eq!(
        e.get_details_bad_request().unwrap().field_violations[0].field,
        "context_id"
    );

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

/// The next event of a task stream (at most 10 s), or `None` once it ended.
pub(crate) async fn next_event(
    stream: &mut tonic::Streaming<a2a::StreamResponse>,
) -> Option<a2a::StreamResponse> {
    tokio::time::timeout(std::time::Duration::from_secs(10), stream.message())
        .await
        .expect("no event within 10 s")
        .unwrap()
}

/// What an event tells: a state, a plan's text, or the task itself; and
/// its resume token.
pub(crate) fn told(e: &a2a::StreamResponse) -> (String, String) {
    use a2a::stream_response::Payload;
    let token =
        |m: &Option<prost_types::Struct>| match &m.as_ref().unwrap().fields["cairn_resume"].kind {
            Some(prost_types::value::Kind::StringValue(s)) => s.clone(),
            other => panic!("no cairn_resume in {other:?}"),
        };
    let state = |s: &Option<a2a::TaskStatus>| {
        a2a::TaskState::try_from(s.as_ref().unwrap().state)
            .unwrap()
            .as_str_name()
            .to_owned()
    };
    match e.payload.as_ref().unwrap() {
        Payload::Task(t) => (format!("task {}", state(&t.status)), token(&t.metadata)),
        Payload::StatusUpdate(s) => (state(&s.status), token(&s.metadata)),
        Payload::ArtifactUpdate(a) => {
            let text = a
                .artifact
                .as_ref()
                .unwrap()
                .parts
                .iter()
                .find_map(|p| match &p.content {
                    Some(a2a::part::Content::Text(t)) => Some(t.clone()),
                    _ => None,
                });
            (
                format!("plan {}", text.unwrap().trim_end()),
                token(&a.metadata),
            )
        }
        Payload::Message(m) => panic!("a message on a task stream: {m:?}"),
    }
}

fn approve_text(task: &str, text: &str) -> a2a::SendMessageRequest {
    a2a::SendMessageRequest {
        message: Some(a2a::Message {
            message_id: format!("m-{text}"),
            task_id: task.into(),
            role: a2a::Role::User.into(),
            parts: vec![a2a::Part {
                content: Some(a2a::part::Content::Text(text.into())),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_subscriber_follows_a_task_answers_it_and_resumes_after_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let p = with_admin(dir.path(), &[]);
    let channel = p.channel().await;
    let admin = Bearer::new(Some(ADMIN_TOKEN));
    let auth = pb::auth_service_client::AuthServiceClient::with_interceptor(
        channel.clone(),
        admin.clone(),
    );
    let principal = |id: &str, roles: Vec<pb::Role>| {
        let req = pb::CreatePrincipalRequest {
            principal: Some(pb::Principal {
                principal_id: id.into(),
                roles: roles.into_iter().map(Into::into).collect(),
                agent_ids: vec!["agent-job".into()],
                ..Default::default()
            }),
        };
        let mut auth = auth.clone();
        async move { auth.create_principal(req).await.unwrap().into_inner().token }
    };
    // The agent may also approve, but never what it submitted itself.
    let coder = principal("coder", vec![pb::Role::Agent, pb::Role::Approver]).await;
    let boss = principal("boss", vec![pb::Role::Approver]).await;
    drop(auth);
    pb::session_service_client::SessionServiceClient::with_interceptor(
        channel.clone(),
        admin.clone(),
    )
    .create_session(session("job", ""))
    .await
    .unwrap();
    let plans_of = |channel: tonic::transport::Channel, token: &str| {
        pb::plan_service_client::PlanServiceClient::with_interceptor(
            channel,
            Bearer::new(Some(token)),
        )
    };
    let tasks_of = |channel: tonic::transport::Channel, token: &str| {
        a2a::a2a_service_client::A2aServiceClient::with_interceptor(
            channel,
            Bearer::new(Some(token)),
        )
    };
    let mut plans = plans_of(channel.clone(), &coder);
    let mut watcher = tasks_of(channel.clone(), ADMIN_TOKEN);
    let subscribe = |id: &str| a2a::SubscribeToTaskRequest {
        id: id.into(),
        ..Default::default()
    };
    let mut stream = watcher
        .subscribe_to_task(subscribe("job"))
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut tokens = Vec::new();
    let mut take = |e: a2a::StreamResponse, seen: &mut Vec<String>, token: &mut String| {
        let (what, t) = told(&e);
        seen.push(what);
        tokens.push(t.clone());
        *token = t;
    };
    take(
        next_event(&mut stream).await.unwrap(),
        &mut seen,
        &mut token,
    );

    // The agent works: its plan, then its state.
    plans
        .update_plan(update(
            "job",
            vec![
                item("Fix it", InProgress),
                item("Test it", Pending),
                item("Ship it", Pending),
                item("Tell them", Pending),
            ],
        ))
        .await
        .unwrap();
    for _ in 0..2 {
        take(
            next_event(&mut stream).await.unwrap(),
            &mut seen,
            &mut token,
        );
    }
    // It asks to go on with a plan: input-required.
    plans.enter_plan_mode(enter("job")).await.unwrap();
    plans.exit_plan_mode(submit("job")).await.unwrap();
    loop {
        take(
            next_event(&mut stream).await.unwrap(),
            &mut seen,
            &mut token,
        );
        if seen.last().unwrap() == "TASK_STATE_INPUT_REQUIRED" {
            break;
        }
    }

    // Answered through A2A: not by whoever submitted it, and only with an
    // answer; then by another approver.
    let e = tasks_of(channel.clone(), &coder)
        .send_message(approve_text("job", "approve"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    let mut boss_tasks = tasks_of(channel.clone(), &boss);
    let e = boss_tasks
        .send_message(approve_text("job", "looks fine to me"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    let answered = boss_tasks
        .send_message(approve_text("job", "Approve"))
        .await
        .unwrap()
        .into_inner();
    let Some(a2a::send_message_response::Payload::Task(t)) = answered.payload else {
        panic!("no task in {answered:?}");
    };
    assert_eq!(t.status.unwrap().state, a2a::TaskState::Working as i32);
    let approved = plans
        .get_plan_status(pb::GetPlanStatusRequest {
            session_id: "job".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(approved.status.unwrap().active.unwrap().approver, "boss");
    loop {
        take(
            next_event(&mut stream).await.unwrap(),
            &mut seen,
            &mut token,
        );
        if seen.last().unwrap() == "TASK_STATE_WORKING" {
            break;
        }
    }
    // Nothing awaits now: the rule's own refusal.
    let e = boss_tasks
        .send_message(approve_text("job", "approve"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");

    // A step the subscriber never reads, then the server is killed.
    let step = |step_id| pb::CompleteStepRequest {
        session_id: "job".into(),
        step_id,
        verification_result: "checked".into(),
        ..Default::default()
    };
    plans.complete_step(step(1)).await.unwrap();
    drop(plans);
    p.kill();
    // Whatever was in flight is dropped unread; the stream then breaks.
    while let Ok(Some(_)) = stream.message().await {}

    // Restarted, the agent finishes before the subscriber is back.
    let p = with_admin(dir.path(), &[]);
    let channel = p.channel().await;
    plans_of(channel.clone(), &coder)
        .complete_step(step(2))
        .await
        .unwrap();
    let mut watcher = tasks_of(channel.clone(), ADMIN_TOKEN);
    // Without the extension a finished task is not subscribed to.
    let e = watcher
        .subscribe_to_task(subscribe("job"))
        .await
        .unwrap_err();
    assert_eq!(
        e.get_details_error_info().unwrap().reason,
        "UNSUPPORTED_OPERATION"
    );
    let mut req = tonic::Request::new(subscribe("job"));
    req.metadata_mut()
        .insert("cairn-resume", token.parse().unwrap());
    let mut stream = watcher.subscribe_to_task(req).await.unwrap().into_inner();
    while let Some(e) = next_event(&mut stream).await {
        take(e, &mut seen, &mut token);
    }
    assert_eq!(
        seen,
        [
            "task TASK_STATE_SUBMITTED",
            "plan [>] Fix it\n[ ] Test it\n[ ] Ship it\n[ ] Tell them",
            "TASK_STATE_WORKING",
            "TASK_STATE_INPUT_REQUIRED",
            // Approved: the plan's steps are the checklist now.
            "plan [>] one\n[ ] two",
            "TASK_STATE_WORKING",
            // Resumed after the kill: where it stood, then what it missed.
            "task TASK_STATE_WORKING",
            "plan [x] one\n[>] two",
            "plan [x] one\n[x] two",
            "TASK_STATE_COMPLETED",
        ]
    );

    // Cut off between the last plan and the state of the same revision:
    // given the revision again, the state still told once.
    let between = &tokens[tokens.len() - 2];
    let mut req = tonic::Request::new(subscribe("job"));
    req.metadata_mut()
        .insert("cairn-resume", between.parse().unwrap());
    let mut again = Vec::new();
    let mut stream = watcher.subscribe_to_task(req).await.unwrap().into_inner();
    while let Some(e) = next_event(&mut stream).await {
        again.push(told(&e).0);
    }
    assert_eq!(
        again,
        [
            "task TASK_STATE_WORKING",
            "plan [x] one\n[x] two",
            "TASK_STATE_COMPLETED"
        ]
    );

    // A token that is not one is named, as the header it came in.
    let mut req = tonic::Request::new(subscribe("job"));
    req.metadata_mut()
        .insert("cairn-resume", "12.lost".parse().unwrap());
    let e = watcher.subscribe_to_task(req).await.unwrap_err();
    assert_eq!(
        e.get_details_bad_request().unwrap().field_violations[0].field,
        "cairn-resume"
    );
    p.stop().await;
}

/// One JSON-RPC call to `/a2a`: the HTTP status and the body.
async fn rpc(web: &str, token: Option<&str>, content_type: &str, body: &str) -> (u16, String) {
    let auth = token.map_or(String::new(), |t| format!("\r\nauthorization: Bearer {t}"));
    let (status, _, body) = http(
        web,
        &format!("POST /a2a HTTP/1.1\r\nHost: {web}\r\ncontent-type: {content_type}{auth}"),
        body,
    )
    .await;
    (status, body)
}

fn error_code(body: &str) -> i64 {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("no error in {body}"))
}

#[tokio::test]
async fn the_json_rpc_binding_answers_with_the_codes_json_rpc_and_a2a_name_and_resumes_an_sse_stream()
 {
    let dir = tempfile::tempdir().unwrap();
    let p = with_admin(dir.path(), &["--web-listen", "127.0.0.1:0"]);
    let web = p.web.clone().unwrap();
    let admin = Some(ADMIN_TOKEN);
    let json = "application/json";
    let call = |method: &str, params: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":"c-1","method":"{method}","params":{params}}}"#)
    };

    // Not JSON, not signed, not JSON-RPC: each refused as its protocol says.
    let get_nope = call("GetTask", r#"{"id":"nope"}"#);
    assert_eq!(rpc(&web, admin, "text/plain", &get_nope).await.0, 415);
    let (status, body) = rpc(&web, None, json, &get_nope).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("UNAUTHENTICATED"), "{body}");
    for (body, code) in [
        ("{not json", -32700),
        ("[1, 2]", -32600),
        (r#"{"id":1,"method":"GetTask"}"#, -32600),
        (
            r#"{"jsonrpc":"2.0","id":{"x":1},"method":"GetTask"}"#,
            -32600,
        ),
        (&*call("Nope", "{}"), -32601),
        (&*call("ListTasks", r#"{"pageSize":"many"}"#), -32602),
        (&*call("ListTasks", r#"{"pageSize":101}"#), -32602),
        (&*call("CancelTask", r#"{"id":"x"}"#), -32004),
        (&*get_nope, -32001),
    ] {
        let (status, answer) = rpc(&web, admin, json, body).await;
        assert_eq!(
            (status, error_code(&answer)),
            (200, code),
            "{body}: {answer}"
        );
    }
    let (_, answer) = rpc(&web, admin, json, &get_nope).await;
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["id"], "c-1");
    assert_eq!(answer["error"]["data"][0]["domain"], "a2a-protocol.org");
    assert_eq!(answer["error"]["data"][0]["reason"], "TASK_NOT_FOUND");

    // A task worked on over gRPC, read over JSON-RPC.
    let channel = p.channel().await;
    let bearer = Bearer::new(admin);
    pb::session_service_client::SessionServiceClient::with_interceptor(
        channel.clone(),
        bearer.clone(),
    )
    .create_session(session("job", ""))
    .await
    .unwrap();
    let mut plans = pb::plan_service_client::PlanServiceClient::with_interceptor(channel, bearer);
    let four = |s: pb::StepStatus| {
        vec![
            item("a", s),
            item("b", Pending),
            item("c", Pending),
            item("d", Pending),
        ]
    };
    let first = plans
        .update_plan(update("job", four(InProgress)))
        .await
        .unwrap()
        .into_inner()
        .revision;
    let (status, answer) = rpc(&web, admin, json, &call("GetTask", r#"{"id":"job"}"#)).await;
    assert_eq!(status, 200);
    let task: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(
        task["result"]["status"]["state"], "TASK_STATE_WORKING",
        "{answer}"
    );
    assert_eq!(task["result"]["contextId"], "job");
    plans
        .update_plan(update(
            "job",
            vec![
                item("a", Completed),
                item("b", Completed),
                item("c", Completed),
                item("d", Completed),
            ],
        ))
        .await
        .unwrap();

    // An SSE client back with Last-Event-ID, the `id:` of the last event it
    // got: the task where it stood, what it missed, the end.
    let (status, headers, body) = http(
        &web,
        &format!("POST /a2a HTTP/1.1\r\nHost: {web}\r\ncontent-type: {json}\r\nauthorization: Bearer {ADMIN_TOKEN}\r\nlast-event-id: {first}.working"),
        &call("SubscribeToTask", r#"{"id":"job"}"#),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        headers
            .iter()
            .any(|(k, v)| k == "content-type" && v.starts_with("text/event-stream"))
    );
    let data: Vec<serde_json::Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let kinds: Vec<String> = data
        .iter()
        .map(|d| {
            let r = d["result"].as_object().unwrap_or_else(|| panic!("{d}"));
            r.keys().next().unwrap().clone()
        })
        .collect();
    assert_eq!(kinds, ["task", "artifactUpdate", "statusUpdate"], "{body}");
    assert_eq!(
        data[2]["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert!(data.iter().all(|d| d["id"] == "c-1"));
    let ids: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .collect();
    assert_eq!(ids.len(), 3, "{body}");
    assert_eq!(ids[0], format!("{first}.working"));
    assert!(ids[2].ends_with(".completed"), "{body}");
    p.stop().await;
}

#[tokio::test]
async fn push_configs_are_bounded_per_task_and_a_taken_id_is_named_as_taken() {
    let dir = tempfile::tempdir().unwrap();
    let p = with_admin(dir.path(), &[]);
    let channel = p.channel().await;
    let admin = Bearer::new(Some(ADMIN_TOKEN));
    pb::session_service_client::SessionServiceClient::with_interceptor(
        channel.clone(),
        admin.clone(),
    )
    .create_session(session("job", ""))
    .await
    .unwrap();
    let mut tasks = a2a::a2a_service_client::A2aServiceClient::with_interceptor(channel, admin);
    let config = |id: &str| a2a::TaskPushNotificationConfig {
        task_id: "job".into(),
        id: id.into(),
        url: "https://receiver.invalid/push".into(),
        ..Default::default()
    };
    for i in 0..16 {
        tasks
            .create_task_push_notification_config(config(&format!("c{i}")))
            .await
            .unwrap();
    }
    // A taken id is taken, full or not; a new one past the bound is refused.
    let e = tasks
        .create_task_push_notification_config(config("c1"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists, "{e:?}");
    let e = tasks
        .create_task_push_notification_config(config("c16"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    p.stop().await;
}
