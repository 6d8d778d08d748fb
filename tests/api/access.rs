//! Every RPC for every role, in scope and out of scope, with
//! `--auth token`: the expected outcome of each comes from the table below,
//! one row per RPC.
//!
//! The principals: the bootstrap `admin`; `orch` (orchestrator of the tree
//! `in`); `coder` (agent of the agent id `coder`); `lead` (approver of
//! `in`); `watcher` (viewer of `in`). Each cell gets fresh sessions `in:rN`
//! (agent `coder`) and `out:rN` (agent `other`), brought by a separate
//! `setup` principal into the state the RPC needs (a plan awaiting
//! approval, an active plan, a pending modification), so an allowed call
//! succeeds and a refused one changes nothing.

use std::sync::atomic::{AtomicUsize, Ordering};

use cairn_api as pb;
use cairn_api::admin_service_client::AdminServiceClient;
use cairn_api::auth_service_client::AuthServiceClient;
use cairn_api::plan_service_client::PlanServiceClient;
use cairn_api::session_service_client::SessionServiceClient;
use cairn_api::todo_service_client::TodoServiceClient;
use cairn_api::watch_service_client::WatchServiceClient;
use cairn_server::auth::AuthMode;
use cairn_testkit::{Authed, Bearer, TestServer, five_steps, todo, two_steps, update};
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt;

/// Who calls, in the order of the table's columns.
const ROLES: [&str; 5] = ["admin", "orch", "coder", "lead", "watcher"];

/// `Y`: allowed (OK); `N`: PERMISSION_DENIED. Columns follow `ROLES`:
/// admin, orchestrator, agent, approver, viewer.
const MATRIX: &[(&str, &str, &str)] = &[
    // rpc                     in scope  out of scope
    ("CreateSession", "YYYNN", "YNNNN"),
    ("GetSession", "YYYYY", "YNNNN"),
    ("ListSessions", "YYYYY", "YNNNN"),
    ("ListAllSessions", "YNNNN", "YNNNN"),
    ("UpdateSession", "YYNNN", "YNNNN"),
    ("DeleteSession", "YYNNN", "YNNNN"),
    ("UpdatePlan", "YYYNN", "YNNNN"),
    // A lease is a write: the same rights as UpdatePlan.
    ("KeepAlive", "YYYNN", "YNNNN"),
    ("ReleaseLease", "YYYNN", "YNNNN"),
    ("GetPlan", "YYYYY", "YNNNN"),
    // A2A: a task is a session, read with a session's rights.
    ("GetTask", "YYYYY", "YNNNN"),
    ("ListTasks", "YNNNN", "YNNNN"),
    // By context: a reader of the tree lists it.
    ("ListTasksInContext", "YYYYY", "YNNNN"),
    ("SubscribeToTask", "YYYYY", "YNNNN"),
    // An answer through A2A is an approval: an approver's right.
    ("SendMessage", "YNNYN", "YNNNN"),
    // A task's push configs: managing its session's right.
    ("CreateTaskPushNotificationConfig", "YYNNN", "YNNNN"),
    ("ListTaskPushNotificationConfigs", "YYNNN", "YNNNN"),
    ("EnterPlanMode", "YYYNN", "YNNNN"),
    ("ExitPlanMode", "YYYNN", "YNNNN"),
    ("GetPlanStatus", "YYYYY", "YNNNN"),
    ("ApprovePlan", "YNNYN", "YNNNN"),
    ("RejectPlan", "YNNYN", "YNNNN"),
    ("CompleteStep", "YYYNN", "YNNNN"),
    ("CompletePlan", "YYYNN", "YNNNN"),
    ("ModifyPlan", "YYYNN", "YNNNN"),
    ("ApproveModification", "YNNYN", "YNNNN"),
    ("RejectModification", "YNNYN", "YNNNN"),
    ("ListPlanHistory", "YYYYY", "YNNNN"),
    ("CheckAction", "YYYYY", "YNNNN"),
    // Y: the plan awaiting approval is in the caller's inbox; N: it is not
    // (the call itself succeeds for everyone, with what the caller may
    // approve).
    ("ListInbox", "YNNYN", "YNNNN"),
    // Y: the watched inbox's initial state holds the plan; N: it does not.
    ("WatchInbox", "YNNYN", "YNNNN"),
    ("ReadTodos", "YNYNN", "YNNNN"),
    ("WriteTodos", "YNYNN", "YNNNN"),
    ("WatchSession", "YYYYY", "YNNNN"),
    ("WatchTree", "YYNYY", "YNNNN"),
    ("WatchAgent", "YNYNN", "YNNNN"),
    ("WatchAll", "YNNNN", "YNNNN"),
    ("WaitTree", "YYNYY", "YNNNN"),
    ("WaitSessions", "YYYYY", "YNNNN"),
    ("CreatePrincipal", "YNNNN", "YNNNN"),
    ("ListPrincipals", "YNNNN", "YNNNN"),
    ("DeletePrincipal", "YNNNN", "YNNNN"),
    ("RotateToken", "YNNNN", "YNNNN"),
    ("WhoAmI", "YYYYY", "YYYYY"),
    // Webhooks are an admin's: subscriptions and their dead letters.
    ("CreateWebhook", "YNNNN", "YNNNN"),
    ("ListWebhooks", "YNNNN", "YNNNN"),
    ("DeleteWebhook", "YNNNN", "YNNNN"),
    ("ListDeadLetters", "YNNNN", "YNNNN"),
    ("RetryDeadLetter", "YNNNN", "YNNNN"),
];

const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// The clients of one caller.
struct As {
    sessions: SessionServiceClient<Authed>,
    plans: PlanServiceClient<Authed>,
    todos: TodoServiceClient<Authed>,
    watch: WatchServiceClient<Authed>,
    auth: AuthServiceClient<Authed>,
    admin: AdminServiceClient<Authed>,
    tasks: pb::a2a::a2a_service_client::A2aServiceClient<Authed>,
}

impl As {
    fn new(channel: &Channel, token: Option<&str>) -> As {
        let b = || Bearer::new(token);
        As {
            sessions: SessionServiceClient::with_interceptor(channel.clone(), b()),
            plans: PlanServiceClient::with_interceptor(channel.clone(), b()),
            todos: TodoServiceClient::with_interceptor(channel.clone(), b()),
            watch: WatchServiceClient::with_interceptor(channel.clone(), b()),
            auth: AuthServiceClient::with_interceptor(channel.clone(), b()),
            admin: AdminServiceClient::with_interceptor(channel.clone(), b()),
            tasks: pb::a2a::a2a_service_client::A2aServiceClient::with_interceptor(
                channel.clone(),
                b(),
            ),
        }
    }
}

/// A subscription request (its URL never resolves: deliveries only fail).
fn hook(id: &str) -> pb::CreateWebhookRequest {
    pb::CreateWebhookRequest {
        webhook: Some(pb::Webhook {
            webhook_id: id.into(),
            url: "https://hooks.invalid/cairn".into(),
            event_types: vec!["approval.requested".into()],
            ..Default::default()
        }),
    }
}

/// A server with `--auth token`, its bootstrap admin, and the principals.
struct World {
    /// Kept alive for the test: dropping it stops the server.
    _server: TestServer,
    channel: Channel,
    tokens: std::collections::HashMap<&'static str, String>,
    _admin_file: tempfile::NamedTempFile,
}

fn role(r: pb::Role) -> i32 {
    r.into()
}

impl World {
    async fn new() -> World {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), format!("  {ADMIN_TOKEN}\n")).unwrap();
        let path = file.path().to_owned();
        let server = TestServer::start_config(move |c| {
            c.auth = AuthMode::Token;
            c.admin_token_file = Some(path);
        })
        .await;
        let channel = server.channel().await;
        let mut admin = As::new(&channel, Some(ADMIN_TOKEN));
        let mut tokens = std::collections::HashMap::new();
        tokens.insert("admin", ADMIN_TOKEN.to_owned());
        for (id, roles, agents, roots) in [
            (
                "setup",
                vec![pb::Role::Orchestrator, pb::Role::Agent],
                vec!["coder", "other"],
                vec![],
            ),
            ("orch", vec![pb::Role::Orchestrator], vec![], vec!["in"]),
            ("coder", vec![pb::Role::Agent], vec!["coder"], vec![]),
            ("lead", vec![pb::Role::Approver], vec![], vec!["in"]),
            ("watcher", vec![pb::Role::Viewer], vec![], vec!["in"]),
        ] {
            let r = admin
                .auth
                .create_principal(pb::CreatePrincipalRequest {
                    principal: Some(pb::Principal {
                        principal_id: id.into(),
                        roles: roles.into_iter().map(role).collect(),
                        agent_ids: agents.into_iter().map(String::from).collect(),
                        session_roots: roots.into_iter().map(String::from).collect(),
                        ..Default::default()
                    }),
                })
                .await
                .unwrap()
                .into_inner();
            assert!(r.token.starts_with("cairn_"));
            tokens.insert(id, r.token);
        }
        let mut setup = As::new(&channel, Some(&tokens["setup"]));
        for root in ["in", "out"] {
            setup
                .sessions
                .create_session(pb::CreateSessionRequest {
                    session: Some(pb::Session {
                        session_id: root.into(),
                        agent_id: "main".into(),
                        ..Default::default()
                    }),
                })
                .await
                .unwrap();
        }
        World {
            _server: server,
            channel,
            tokens,
            _admin_file: file,
        }
    }

    fn as_(&self, who: &str) -> As {
        As::new(&self.channel, Some(&self.tokens[who]))
    }
}

/// What state an RPC needs its session in.
/// An A2A call's outcome as the matrix counts it: A2A refuses a task the
/// caller may not read as one not found (docs/a2a.md), which is the
/// matrix's refusal, and only that is.
fn task_code(r: Result<(), tonic::Status>) -> Code {
    match r {
        Ok(()) => Code::Ok,
        Err(e)
            if e.code() == Code::NotFound
                && e.get_details_error_info()
                    .is_some_and(|i| i.reason == "TASK_NOT_FOUND") =>
        {
            Code::PermissionDenied
        }
        Err(e) => e.code(),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Needs {
    Nothing,
    Planning,
    AwaitingApproval,
    Active,
    PendingModification,
}

fn needs(rpc: &str) -> Needs {
    match rpc {
        "ExitPlanMode" => Needs::Planning,
        "ApprovePlan" | "RejectPlan" | "ListInbox" | "WatchInbox" | "SendMessage" => {
            Needs::AwaitingApproval
        }
        "CompleteStep" | "CompletePlan" | "ModifyPlan" => Needs::Active,
        "ApproveModification" | "RejectModification" => Needs::PendingModification,
        _ => Needs::Nothing,
    }
}

/// Creates `session` under `parent` for `agent`, with a plan in the state
/// `rpc` needs; returns a modification id where one is pending.
async fn prepare(
    setup: &mut As,
    admin: &mut As,
    parent: &str,
    session: &str,
    agent: &str,
    rpc: &str,
) -> u32 {
    setup
        .sessions
        .create_session(pb::CreateSessionRequest {
            session: Some(pb::Session {
                session_id: session.into(),
                agent_id: agent.into(),
                parent_session_id: parent.into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    setup
        .plans
        .update_plan(update(session, five_steps()))
        .await
        .unwrap();
    let need = needs(rpc);
    if need == Needs::Nothing {
        return 0;
    }
    setup
        .plans
        .enter_plan_mode(pb::EnterPlanModeRequest {
            session_id: session.into(),
            goal: "g".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    if need == Needs::Planning {
        return 0;
    }
    setup
        .plans
        .exit_plan_mode(pb::ExitPlanModeRequest {
            deadline: None,
            session_id: session.into(),
            plan: Some(two_steps("a plan")),
            expected_revision: None,
        })
        .await
        .unwrap();
    if need == Needs::AwaitingApproval {
        return 0;
    }
    // Approved by the admin: `setup` submitted it.
    admin
        .plans
        .approve_plan(pb::ApprovePlanRequest {
            session_id: session.into(),
            approver: String::new(),
            expected_revision: None,
        })
        .await
        .unwrap();
    if need == Needs::Active {
        return 0;
    }
    setup
        .plans
        .modify_plan(pb::ModifyPlanRequest {
            deadline: None,
            session_id: session.into(),
            step_id: 2,
            reason: "r".into(),
            new_description: "two, changed".into(),
            new_files: vec![],
            new_verification: None,
            expected_revision: None,
        })
        .await
        .unwrap()
        .into_inner()
        .modification
        .unwrap()
        .modification_id
}

/// Runs one RPC as `who` on `session` (whose agent is `agent`, whose root
/// is `root`); the outcome's code.
#[allow(clippy::too_many_lines)]
async fn call(
    who: &mut As,
    admin: &mut As,
    rpc: &str,
    root: &str,
    session: &str,
    agent: &str,
    modification: u32,
) -> Code {
    let s = session.to_owned();
    let code = |r: Result<(), tonic::Status>| r.map_or_else(|e| e.code(), |()| Code::Ok);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    match rpc {
        "CreateSession" => code(
            who.sessions
                .create_session(pb::CreateSessionRequest {
                    session: Some(pb::Session {
                        session_id: format!("{s}:new{n}"),
                        agent_id: "coder".into(),
                        parent_session_id: s,
                        ..Default::default()
                    }),
                })
                .await
                .map(drop),
        ),
        "KeepAlive" | "ReleaseLease" => code(
            who.sessions
                .keep_alive(pb::KeepAliveRequest {
                    session_id: s,
                    finished: rpc == "ReleaseLease",
                    ..Default::default()
                })
                .await
                .map(drop),
        ),
        "GetSession" => code(
            who.sessions
                .get_session(pb::GetSessionRequest { session_id: s })
                .await
                .map(drop),
        ),
        "ListSessions" => code(
            who.sessions
                .list_sessions(pb::ListSessionsRequest {
                    parent_session_id: s,
                    ..Default::default()
                })
                .await
                .map(drop),
        ),
        "GetTask" => task_code(
            who.tasks
                .get_task(pb::a2a::GetTaskRequest {
                    id: s,
                    ..Default::default()
                })
                .await
                .map(drop),
        ),
        "SendMessage" => task_code(
            who.tasks
                .send_message(pb::a2a::SendMessageRequest {
                    message: Some(pb::a2a::Message {
                        message_id: format!("m{n}"),
                        task_id: s,
                        parts: vec![pb::a2a::Part {
                            content: Some(pb::a2a::part::Content::Text("approve".into())),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .await
                .map(drop),
        ),
        "CreateTaskPushNotificationConfig" => task_code(
            who.tasks
                .create_task_push_notification_config(pb::a2a::TaskPushNotificationConfig {
                    task_id: s,
                    // Never reached: delivery is not what this checks.
                    url: "https://receiver.invalid/push".into(),
                    ..Default::default()
                })
                .await
                .map(drop),
        ),
        "ListTaskPushNotificationConfigs" => task_code(
            who.tasks
                .list_task_push_notification_configs(
                    pb::a2a::ListTaskPushNotificationConfigsRequest {
                        task_id: s,
                        ..Default::default()
                    },
                )
                .await
                .map(drop),
        ),
        "ListTasksInContext" => task_code(
            who.tasks
                .list_tasks(pb::a2a::ListTasksRequest {
                    context_id: s,
                    ..Default::default()
                })
                .await
                .map(drop),
        ),
        "SubscribeToTask" => {
            let opened = who
                .tasks
                .subscribe_to_task(pb::a2a::SubscribeToTaskRequest {
                    id: s,
                    ..Default::default()
                })
                .await;
            // Allowed means the task itself came first on the stream.
            task_code(match opened {
                Ok(r) => r.into_inner().message().await.map(|m| {
                    assert!(m.is_some_and(|m| matches!(
                        m.payload,
                        Some(pb::a2a::stream_response::Payload::Task(_))
                    )));
                }),
                Err(e) => Err(e),
            })
        }
        "ListTasks" => code(
            who.tasks
                .list_tasks(pb::a2a::ListTasksRequest::default())
                .await
                .map(drop),
        ),
        "ListAllSessions" => code(
            who.sessions
                .list_sessions(pb::ListSessionsRequest::default())
                .await
                .map(drop),
        ),
        "UpdateSession" => code(
            who.sessions
                .update_session(pb::UpdateSessionRequest {
                    session_id: s,
                    title: Some("renamed".into()),
                    ..Default::default()
                })
                .await
                .map(drop),
        ),
        "DeleteSession" => code(
            who.sessions
                .delete_session(pb::DeleteSessionRequest {
                    session_id: s,
                    cascade: true,
                    expected_revision: None,
                })
                .await
                .map(drop),
        ),
        "UpdatePlan" => code(
            who.plans
                .update_plan(update(&s, five_steps()))
                .await
                .map(drop),
        ),
        "GetPlan" => code(
            who.plans
                .get_plan(pb::GetPlanRequest { session_id: s })
                .await
                .map(drop),
        ),
        "EnterPlanMode" => code(
            who.plans
                .enter_plan_mode(pb::EnterPlanModeRequest {
                    session_id: s,
                    goal: "g".into(),
                    ..Default::default()
                })
                .await
                .map(drop),
        ),
        "ExitPlanMode" => code(
            who.plans
                .exit_plan_mode(pb::ExitPlanModeRequest {
                    deadline: None,
                    session_id: s,
                    plan: Some(two_steps("a plan")),
                    expected_revision: None,
                })
                .await
                .map(drop),
        ),
        "GetPlanStatus" => code(
            who.plans
                .get_plan_status(pb::GetPlanStatusRequest { session_id: s })
                .await
                .map(drop),
        ),
        "ApprovePlan" => code(
            who.plans
                .approve_plan(pb::ApprovePlanRequest {
                    session_id: s,
                    approver: "someone".into(),
                    expected_revision: None,
                })
                .await
                .map(drop),
        ),
        "RejectPlan" => code(
            who.plans
                .reject_plan(pb::RejectPlanRequest {
                    session_id: s,
                    reason: "no".into(),
                    expected_revision: None,
                })
                .await
                .map(drop),
        ),
        "CompleteStep" => code(
            who.plans
                .complete_step(pb::CompleteStepRequest {
                    session_id: s,
                    step_id: 1,
                    verification_result: "ok".into(),
                    expected_revision: None,
                })
                .await
                .map(drop),
        ),
        "CompletePlan" => code(
            who.plans
                .complete_plan(pb::CompletePlanRequest {
                    session_id: s,
                    summary: "done".into(),
                    deviations: vec!["left".into()],
                    expected_revision: None,
                })
                .await
                .map(drop),
        ),
        "ModifyPlan" => code(
            who.plans
                .modify_plan(pb::ModifyPlanRequest {
                    deadline: None,
                    session_id: s,
                    step_id: 2,
                    reason: "r".into(),
                    new_description: "d".into(),
                    new_files: vec![],
                    new_verification: None,
                    expected_revision: None,
                })
                .await
                .map(drop),
        ),
        "ApproveModification" => code(
            who.plans
                .approve_modification(pb::ApproveModificationRequest {
                    session_id: s,
                    modification_id: modification,
                    expected_revision: None,
                })
                .await
                .map(drop),
        ),
        "RejectModification" => code(
            who.plans
                .reject_modification(pb::RejectModificationRequest {
                    session_id: s,
                    modification_id: modification,
                    expected_revision: None,
                })
                .await
                .map(drop),
        ),
        "ListPlanHistory" => code(
            who.plans
                .list_plan_history(pb::ListPlanHistoryRequest {
                    session_id: s,
                    ..Default::default()
                })
                .await
                .map(drop),
        ),
        "CheckAction" => code(
            who.plans
                .check_action(pb::CheckActionRequest {
                    session_id: s,
                    tool: "write_file".into(),
                    action: String::new(),
                })
                .await
                .map(drop),
        ),
        "ReadTodos" => code(
            who.todos
                .read_todos(pb::ReadTodosRequest {
                    agent_id: agent.into(),
                })
                .await
                .map(drop),
        ),
        "WriteTodos" => code(
            who.todos
                .write_todos(pb::WriteTodosRequest {
                    agent_id: agent.into(),
                    todos: vec![todo("t", pb::TodoStatus::Pending)],
                    expected_revision: None,
                })
                .await
                .map(drop),
        ),
        "WatchSession" | "WatchTree" | "WatchAgent" | "WatchAll" => {
            use pb::watch_request::Target;
            let target = match rpc {
                "WatchSession" => Target::SessionId(s),
                "WatchTree" => Target::SessionTree(root.into()),
                "WatchAgent" => Target::AgentId(agent.into()),
                _ => Target::All(true),
            };
            code(
                who.watch
                    .watch(pb::WatchRequest {
                        target: Some(target),
                        ..Default::default()
                    })
                    .await
                    .map(drop),
            )
        }
        "WaitTree" | "WaitSessions" => {
            use pb::wait_request::Target;
            let target = if rpc == "WaitTree" {
                Target::SessionTree(root.into())
            } else {
                Target::SessionIds(pb::SessionIds {
                    session_ids: vec![s],
                })
            };
            code(
                who.watch
                    .wait(pb::WaitRequest {
                        fail_fast: None,
                        target: Some(target),
                        condition: pb::WaitCondition::AnyChange.into(),
                        timeout: Some(prost_types::Duration {
                            seconds: 0,
                            nanos: 10_000_000,
                        }),
                    })
                    .await
                    .map(drop),
            )
        }
        "CreatePrincipal" => code(
            who.auth
                .create_principal(pb::CreatePrincipalRequest {
                    principal: Some(pb::Principal {
                        principal_id: format!("p{n}"),
                        roles: vec![role(pb::Role::Viewer)],
                        ..Default::default()
                    }),
                })
                .await
                .map(drop),
        ),
        "ListPrincipals" => code(
            who.auth
                .list_principals(pb::ListPrincipalsRequest::default())
                .await
                .map(drop),
        ),
        "DeletePrincipal" | "RotateToken" => {
            // A victim of its own, created by the admin.
            let victim = format!("victim{n}");
            admin
                .auth
                .create_principal(pb::CreatePrincipalRequest {
                    principal: Some(pb::Principal {
                        principal_id: victim.clone(),
                        roles: vec![role(pb::Role::Viewer)],
                        ..Default::default()
                    }),
                })
                .await
                .unwrap();
            if rpc == "DeletePrincipal" {
                code(
                    who.auth
                        .delete_principal(pb::DeletePrincipalRequest {
                            principal_id: victim,
                            expected_revision: None,
                        })
                        .await
                        .map(drop),
                )
            } else {
                code(
                    who.auth
                        .rotate_token(pb::RotateTokenRequest {
                            principal_id: victim,
                        })
                        .await
                        .map(drop),
                )
            }
        }
        "WhoAmI" => code(who.auth.who_am_i(pb::WhoAmIRequest {}).await.map(drop)),
        "CreateWebhook" => code(
            who.admin
                .create_webhook(hook(&format!("h{n}")))
                .await
                .map(drop),
        ),
        "ListWebhooks" => code(
            who.admin
                .list_webhooks(pb::ListWebhooksRequest {})
                .await
                .map(drop),
        ),
        "DeleteWebhook" | "ListDeadLetters" | "RetryDeadLetter" => {
            // A subscription of its own, created by the admin.
            let id = format!("hv{n}");
            admin.admin.create_webhook(hook(&id)).await.unwrap();
            let result = match rpc {
                "DeleteWebhook" => who
                    .admin
                    .delete_webhook(pb::DeleteWebhookRequest { webhook_id: id })
                    .await
                    .map(drop),
                "ListDeadLetters" => who
                    .admin
                    .list_dead_letters(pb::ListDeadLettersRequest {
                        webhook_id: id,
                        ..Default::default()
                    })
                    .await
                    .map(drop),
                _ => who
                    .admin
                    .retry_dead_letter(pb::RetryDeadLetterRequest {
                        key: format!("{id}/00000000000000000001/0000"),
                        webhook_id: id,
                    })
                    .await
                    .map(drop),
            };
            match code(result) {
                // Allowed: the right was granted, and there is no such
                // dead letter to retry.
                Code::NotFound if rpc == "RetryDeadLetter" => Code::Ok,
                c => c,
            }
        }
        "WatchInbox" => {
            let stream = who
                .watch
                .watch(pb::WatchRequest {
                    target: Some(pb::watch_request::Target::Inbox(true)),
                    send_initial_state: true,
                    ..Default::default()
                })
                .await;
            let mut stream = match stream {
                Ok(r) => r.into_inner(),
                Err(e) => return e.code(),
            };
            loop {
                match stream.message().await {
                    Ok(Some(pb::WatchResponse {
                        kind: Some(pb::watch_response::Kind::Event(e)),
                    })) if e.session_id == s => return Code::Ok,
                    // The initial state ended (or the stream did) without it.
                    Ok(
                        Some(pb::WatchResponse {
                            kind: Some(pb::watch_response::Kind::Synced(_)),
                        })
                        | None,
                    ) => return Code::PermissionDenied,
                    Ok(Some(_)) => {}
                    Err(e) => return e.code(),
                }
            }
        }
        "ListInbox" => {
            let mut token = String::new();
            loop {
                let page = match who
                    .plans
                    .list_inbox(pb::ListInboxRequest {
                        page_size: 500,
                        page_token: token,
                    })
                    .await
                {
                    Ok(r) => r.into_inner(),
                    Err(e) => return e.code(),
                };
                if page.items.iter().any(|i| i.session_id == s) {
                    return Code::Ok;
                }
                if page.next_page_token.is_empty() {
                    return Code::PermissionDenied;
                }
                token = page.next_page_token;
            }
        }
        other => panic!("no such rpc in the matrix: {other}"),
    }
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_for_every_role_in_and_out_of_scope() {
    let world = World::new().await;
    let mut setup = world.as_("setup");
    let mut admin = world.as_("admin");
    let mut failures = Vec::new();
    let mut cells = 0;
    for (rpc, inside, outside) in MATRIX {
        for (scope, expected, root, agent) in [
            ("in", inside, "in", "coder"),
            ("out", outside, "out", "other"),
        ] {
            for (who, want) in ROLES.iter().zip(expected.chars()) {
                let n = COUNTER.fetch_add(1, Ordering::Relaxed);
                let session = format!("{root}:r{n}");
                let modification =
                    prepare(&mut setup, &mut admin, root, &session, agent, rpc).await;
                let mut caller = world.as_(who);
                let got = call(
                    &mut caller,
                    &mut admin,
                    rpc,
                    &session,
                    &session,
                    agent,
                    modification,
                )
                .await;
                let want = if want == 'Y' {
                    Code::Ok
                } else {
                    Code::PermissionDenied
                };
                cells += 1;
                if got != want {
                    failures.push(format!(
                        "{rpc} as {who} {scope} scope: got {got:?}, want {want:?}"
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cells} cells wrong:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_or_a_bad_one_is_unauthenticated_and_probes_stay_open() {
    let world = World::new().await;
    let mut admin = world.as_("admin");
    for token in [None, Some("cairn_0000"), Some("not even a token")] {
        let mut who = As::new(&world.channel, token);
        for (rpc, _, _) in MATRIX {
            let got = call(&mut who, &mut admin, rpc, "in", "in", "coder", 0).await;
            assert_eq!(got, Code::Unauthenticated, "{rpc} with {token:?}");
        }
    }
    // Health and reflection need no token.
    let mut health = tonic_health::pb::health_client::HealthClient::new(world.channel.clone());
    health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_never_approves_its_own_plan_and_the_approver_recorded_is_the_caller() {
    let world = World::new().await;
    let mut admin = world.as_("admin");
    // One principal that may both plan and approve in `in`.
    let both = admin
        .auth
        .create_principal(pb::CreatePrincipalRequest {
            principal: Some(pb::Principal {
                principal_id: "both".into(),
                roles: vec![role(pb::Role::Orchestrator), role(pb::Role::Approver)],
                session_roots: vec!["in".into()],
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .token;
    let mut both = As::new(&world.channel, Some(&both));
    both.plans
        .enter_plan_mode(pb::EnterPlanModeRequest {
            session_id: "in".into(),
            goal: "g".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    both.plans
        .exit_plan_mode(pb::ExitPlanModeRequest {
            deadline: None,
            session_id: "in".into(),
            plan: Some(two_steps("a plan")),
            expected_revision: None,
        })
        .await
        .unwrap();
    for err in [
        both.plans
            .approve_plan(pb::ApprovePlanRequest {
                session_id: "in".into(),
                approver: "lead".into(),
                expected_revision: None,
            })
            .await
            .unwrap_err(),
        both.plans
            .reject_plan(pb::RejectPlanRequest {
                session_id: "in".into(),
                reason: "no".into(),
                expected_revision: None,
            })
            .await
            .unwrap_err(),
    ] {
        assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
        assert_eq!(
            err.get_details_error_info().unwrap().reason,
            "SELF_APPROVAL"
        );
    }
    // Another approver approves; the record names it, whatever the
    // request claimed.
    let status = world
        .as_("lead")
        .plans
        .approve_plan(pb::ApprovePlanRequest {
            session_id: "in".into(),
            approver: "the-ceo".into(),
            expected_revision: None,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(status.active.unwrap().approver, "lead");
    // The refusals carry a reason a client can act on.
    let err = world
        .as_("watcher")
        .plans
        .update_plan(update("in", five_steps()))
        .await
        .unwrap_err();
    assert_eq!(
        err.get_details_error_info().unwrap().reason,
        "ROLE_REQUIRED"
    );
    let err = world
        .as_("orch")
        .plans
        .update_plan(update("out", five_steps()))
        .await
        .unwrap_err();
    assert_eq!(err.get_details_error_info().unwrap().reason, "NOT_IN_SCOPE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_token_ends_its_watches_and_refuses_its_next_call() {
    let world = World::new().await;
    let mut admin = world.as_("admin");
    for revoke in ["delete", "rotate"] {
        let id = format!("eye-{revoke}");
        let token = admin
            .auth
            .create_principal(pb::CreatePrincipalRequest {
                principal: Some(pb::Principal {
                    principal_id: id.clone(),
                    roles: vec![role(pb::Role::Viewer)],
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .into_inner()
            .token;
        let mut eye = As::new(&world.channel, Some(&token));
        let mut stream = eye
            .watch
            .watch(pb::WatchRequest {
                target: Some(pb::watch_request::Target::All(true)),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        if revoke == "delete" {
            admin
                .auth
                .delete_principal(pb::DeletePrincipalRequest {
                    principal_id: id.clone(),
                    expected_revision: None,
                })
                .await
                .unwrap();
        } else {
            admin
                .auth
                .rotate_token(pb::RotateTokenRequest {
                    principal_id: id.clone(),
                })
                .await
                .unwrap();
        }
        let started = std::time::Instant::now();
        let end = loop {
            match tokio::time::timeout(cairn_testkit::stream::PATIENCE, stream.message())
                .await
                .expect("the stream ends within the patience bound")
            {
                Ok(Some(_)) => {}
                Ok(None) => panic!("{revoke}: the stream ended without a status"),
                Err(status) => break status,
            }
        };
        assert_eq!(end.code(), Code::Unauthenticated, "{revoke}: {end:?}");
        eprintln!(
            "{revoke}: the watch ended {:?} after the revocation",
            started.elapsed()
        );
        let err = eye.auth.who_am_i(pb::WhoAmIRequest {}).await.unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{revoke}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_watch_covers_its_todos_and_its_sessions() {
    let world = World::new().await;
    let mut setup = world.as_("setup");
    let mut coder = world.as_("coder");
    let mut stream = coder
        .watch
        .watch(pb::WatchRequest {
            target: Some(pb::watch_request::Target::AgentId("coder".into())),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    setup
        .sessions
        .create_session(pb::CreateSessionRequest {
            session: Some(pb::Session {
                session_id: "in:mine".into(),
                agent_id: "coder".into(),
                parent_session_id: "in".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    coder
        .plans
        .update_plan(update("in:mine", five_steps()))
        .await
        .unwrap();
    coder
        .todos
        .write_todos(pb::WriteTodosRequest {
            agent_id: "coder".into(),
            todos: vec![todo("t", pb::TodoStatus::Pending)],
            expected_revision: None,
        })
        .await
        .unwrap();
    // Handed to another agent: the coder's watch sees it go, as a delete.
    setup
        .sessions
        .update_session(pb::UpdateSessionRequest {
            session_id: "in:mine".into(),
            agent_id: Some("other".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let kinds: Vec<(pb::EventType, String)> = cairn_testkit::stream::events(&mut stream, 4)
        .await
        .iter()
        .map(|e| (e.r#type(), e.agent_id.clone()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (pb::EventType::SessionCreated, "coder".into()),
            (pb::EventType::PlanUpdated, "coder".into()),
            (pb::EventType::TodosUpdated, "coder".into()),
            // It left the coder's scope: for the coder it is gone.
            (pb::EventType::SessionDeleted, "coder".into()),
        ]
    );
}

/// `GetPlan` answers from the hot plans: what rights are checked against
/// there must follow moves (of the session, and of an ancestor) and agent
/// changes at once, and a deleted session must not be served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_from_memory_follow_moves_agent_changes_and_deletions() {
    let w = World::new().await;
    let mut setup = w.as_("setup");
    let code = |r: Result<tonic::Response<pb::GetPlanResponse>, tonic::Status>| match r {
        Ok(_) => Code::Ok,
        Err(e) => e.code(),
    };
    let get = |id: &str| pb::GetPlanRequest {
        session_id: id.into(),
    };
    // `in:x` (agent coder) with `in:x:y` below it, both planned, so both hot.
    for (id, parent) in [("in:x", "in"), ("in:x:y", "in:x")] {
        setup
            .sessions
            .create_session(pb::CreateSessionRequest {
                session: Some(pb::Session {
                    session_id: id.into(),
                    parent_session_id: parent.into(),
                    agent_id: "coder".into(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap();
        setup
            .plans
            .update_plan(update(id, five_steps()))
            .await
            .unwrap();
    }
    let mut watcher = w.as_("watcher");
    let mut coder = w.as_("coder");
    for id in ["in:x", "in:x:y"] {
        assert_eq!(code(watcher.plans.get_plan(get(id)).await), Code::Ok);
        assert_eq!(code(coder.plans.get_plan(get(id)).await), Code::Ok);
    }

    // The session moves out of the viewer's tree: refused at once.
    let mv = |id: &str, parent: &str| pb::UpdateSessionRequest {
        session_id: id.into(),
        parent_session_id: Some(parent.into()),
        ..Default::default()
    };
    setup
        .sessions
        .update_session(mv("in:x:y", "out"))
        .await
        .unwrap();
    assert_eq!(
        code(watcher.plans.get_plan(get("in:x:y")).await),
        Code::PermissionDenied
    );
    // Its parent moves out too; then the parent comes back: the child,
    // moved back under it, is readable again through the ancestor's move.
    setup
        .sessions
        .update_session(mv("in:x:y", "in:x"))
        .await
        .unwrap();
    assert_eq!(code(watcher.plans.get_plan(get("in:x:y")).await), Code::Ok);
    setup
        .sessions
        .update_session(mv("in:x", "out"))
        .await
        .unwrap();
    assert_eq!(
        code(watcher.plans.get_plan(get("in:x:y")).await),
        Code::PermissionDenied
    );
    setup
        .sessions
        .update_session(mv("in:x", "in"))
        .await
        .unwrap();
    assert_eq!(code(watcher.plans.get_plan(get("in:x:y")).await), Code::Ok);

    // Handed to another agent: its old agent is refused at once.
    setup
        .sessions
        .update_session(pb::UpdateSessionRequest {
            session_id: "in:x".into(),
            agent_id: Some("other".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        code(coder.plans.get_plan(get("in:x")).await),
        Code::PermissionDenied
    );

    // Deleted: not found, not served from memory.
    setup
        .sessions
        .delete_session(pb::DeleteSessionRequest {
            session_id: "in:x".into(),
            cascade: true,
            ..Default::default()
        })
        .await
        .unwrap();
    for id in ["in:x", "in:x:y"] {
        assert_eq!(code(watcher.plans.get_plan(get(id)).await), Code::NotFound);
    }
}

/// A principal made by the admin; its token.
async fn principal(
    admin: &mut As,
    id: &str,
    roles: &[pb::Role],
    agents: &[&str],
    roots: &[&str],
) -> Result<String, tonic::Status> {
    admin
        .auth
        .create_principal(pb::CreatePrincipalRequest {
            principal: Some(pb::Principal {
                principal_id: id.into(),
                roles: roles.iter().map(|r| role(*r)).collect(),
                agent_ids: agents.iter().map(|a| (*a).to_owned()).collect(),
                session_roots: roots.iter().map(|r| (*r).to_owned()).collect(),
                ..Default::default()
            }),
        })
        .await
        .map(|r| r.into_inner().token)
}

async fn create(who: &mut As, id: &str, parent: &str, agent: &str) -> Result<(), tonic::Status> {
    who.sessions
        .create_session(pb::CreateSessionRequest {
            session: Some(pb::Session {
                session_id: id.into(),
                agent_id: agent.into(),
                parent_session_id: parent.into(),
                ..Default::default()
            }),
        })
        .await
        .map(drop)
}

/// Two tenants: `ta` (orchestrator `a-orch`, agent `a-dev` acting as `dev`,
/// viewer `a-view`) and `tb` (orchestrator `b-orch`), each with a session
/// of agent `dev`: `ta:dev` and `tb:dev`.
async fn tenants() -> (World, std::collections::HashMap<&'static str, As>) {
    let world = World::new().await;
    let mut admin = world.as_("admin");
    let mut who = std::collections::HashMap::new();
    for (id, roles, agents, roots) in [
        ("a-orch", vec![pb::Role::Orchestrator], vec![], vec!["ta"]),
        ("a-dev", vec![pb::Role::Agent], vec!["dev"], vec!["ta"]),
        ("a-view", vec![pb::Role::Viewer], vec![], vec!["ta"]),
        ("b-orch", vec![pb::Role::Orchestrator], vec![], vec!["tb"]),
    ] {
        let token = principal(&mut admin, id, &roles, &agents, &roots)
            .await
            .unwrap();
        who.insert(id, As::new(&world.channel, Some(&token)));
    }
    for root in ["ta", "tb"] {
        create(&mut admin, root, "", "main").await.unwrap();
    }
    create(who.get_mut("a-orch").unwrap(), "ta:dev", "ta", "dev")
        .await
        .unwrap();
    create(who.get_mut("b-orch").unwrap(), "tb:dev", "tb", "dev")
        .await
        .unwrap();
    for (orch, s) in [("a-orch", "ta:dev"), ("b-orch", "tb:dev")] {
        who.get_mut(orch)
            .unwrap()
            .plans
            .update_plan(update(s, five_steps()))
            .await
            .unwrap();
    }
    (world, who)
}

/// The next event of `stream` (skipping heartbeats), or `None` at `synced`.
async fn next_event(stream: &mut tonic::Streaming<pb::WatchResponse>) -> Option<pb::Event> {
    loop {
        let msg = tokio::time::timeout(std::time::Duration::from_secs(10), stream.message())
            .await
            .expect("a message")
            .unwrap()
            .unwrap();
        match msg.kind.unwrap() {
            pb::watch_response::Kind::Event(e) => return Some(e),
            pb::watch_response::Kind::Synced(_) => return None,
            pb::watch_response::Kind::Progress(_) => {}
        }
    }
}

/// Hardening round 2, item 6: an agent id names one tenant's agent. A
/// principal scoped to its trees never lists, watches or reads another
/// tenant's session of the same agent id, nor holds that agent id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_6_agent_ids_do_not_cross_tenants() {
    let (world, mut who) = tenants().await;
    let dev = who.get_mut("a-dev").unwrap();
    let listed: Vec<String> = dev
        .sessions
        .list_sessions(pb::ListSessionsRequest {
            agent_id: "dev".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .sessions
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    assert_eq!(listed, ["ta:dev"]);
    let mut stream = dev
        .watch
        .watch(pb::WatchRequest {
            target: Some(pb::watch_request::Target::AgentId("dev".into())),
            send_initial_state: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut snapshot = Vec::new();
    while let Some(e) = next_event(&mut stream).await {
        snapshot.push(e.session_id);
    }
    assert_eq!(
        snapshot,
        ["ta:dev", "ta:dev"],
        "session and plan, own tenant only"
    );
    // A live change in the other tenant's tree is not seen; the next one
    // in its own is.
    let mut b = world.as_("admin");
    b.plans
        .update_plan(update("tb:dev", five_steps()))
        .await
        .unwrap();
    who.get_mut("a-orch")
        .unwrap()
        .plans
        .update_plan(update("ta:dev", five_steps()))
        .await
        .unwrap();
    let e = next_event(&mut stream).await.unwrap();
    assert_eq!(e.session_id, "ta:dev");
    assert_eq!((e.index_in_revision, e.events_in_revision), (0, 1));
    // The other tenant cannot take the agent id, so never its todo list.
    let mut admin = world.as_("admin");
    let err = principal(&mut admin, "b-dev", &[pb::Role::Agent], &["dev"], &["tb"])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    assert_eq!(
        err.get_error_details().error_info().unwrap().reason,
        "AGENT_ID_TAKEN"
    );
    // The same tenant may: a second agent principal of `ta`.
    principal(&mut admin, "a-dev2", &[pb::Role::Agent], &["dev"], &["ta"])
        .await
        .unwrap();
}

/// Hardening round 2, item 7: a principal whose root does not exist yet
/// cannot plant it under another tenant's session, and the refusal is the
/// same whether that session exists or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_7_no_planting_under_a_foreign_parent() {
    let (world, _who) = tenants().await;
    let mut admin = world.as_("admin");
    let token = principal(
        &mut admin,
        "planter",
        &[pb::Role::Orchestrator],
        &[],
        &["mine"],
    )
    .await
    .unwrap();
    let mut planter = As::new(&world.channel, Some(&token));
    let existing = create(&mut planter, "mine", "ta", "x").await.unwrap_err();
    let missing = create(&mut planter, "mine", "no-such-session", "x")
        .await
        .unwrap_err();
    assert_eq!(existing.code(), Code::PermissionDenied);
    assert_eq!(missing.code(), Code::PermissionDenied);
    let reason = |e: &tonic::Status| e.get_error_details().error_info().unwrap().reason.clone();
    assert_eq!(reason(&existing), reason(&missing));
    assert_eq!(
        existing.message().replace("ta", "X"),
        missing.message().replace("no-such-session", "X"),
        "the answer does not tell whether the parent exists"
    );
    // Its own root, as a root, is fine.
    create(&mut planter, "mine", "", "x").await.unwrap();
    // The agent of a tree cannot plant either.
    let dev_token = principal(
        &mut admin,
        "c-dev",
        &[pb::Role::Agent],
        &["cdev"],
        &["croot"],
    )
    .await
    .unwrap();
    let mut dev = As::new(&world.channel, Some(&dev_token));
    let err = create(&mut dev, "croot", "ta", "cdev").await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
}

/// Hardening round 2, item 10: access is decided at every event. A session
/// moved out of a viewer's tree, or handed from an agent to another, is a
/// deletion for the watcher that lost it, and nothing of it follows; a
/// Wait ends when its principal is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_10_leaving_a_watchers_scope_is_a_delete() {
    let (world, mut who) = tenants().await;
    let mut admin = world.as_("admin");
    let start = |w: &mut As, target| {
        let mut watch = w.watch.clone();
        async move {
            watch
                .watch(pb::WatchRequest {
                    target: Some(target),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
        }
    };
    let mut viewer = start(
        who.get_mut("a-view").unwrap(),
        pb::watch_request::Target::SessionTree("ta".into()),
    )
    .await;
    let mut agent = start(
        who.get_mut("a-dev").unwrap(),
        pb::watch_request::Target::AgentId("dev".into()),
    )
    .await;
    // Handed to another agent: the agent's watch sees it go.
    admin
        .sessions
        .update_session(pb::UpdateSessionRequest {
            session_id: "ta:dev".into(),
            agent_id: Some("other".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let gone = next_event(&mut agent).await.unwrap();
    assert_eq!(
        (gone.session_id.as_str(), gone.r#type()),
        ("ta:dev", pb::EventType::SessionDeleted)
    );
    // The viewer still reads it (same tree).
    let moved = next_event(&mut viewer).await.unwrap();
    assert_eq!(moved.r#type(), pb::EventType::SessionUpdated);
    // Moved into the other tenant's tree: the viewer sees it go.
    admin
        .sessions
        .update_session(pb::UpdateSessionRequest {
            session_id: "ta:dev".into(),
            parent_session_id: Some("tb".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let gone = next_event(&mut viewer).await.unwrap();
    assert_eq!(
        (gone.session_id.as_str(), gone.r#type()),
        ("ta:dev", pb::EventType::SessionDeleted)
    );
    // Its plan changes there reach neither; a change in `ta` does.
    admin
        .plans
        .update_plan(update("ta:dev", five_steps()))
        .await
        .unwrap();
    admin
        .plans
        .update_plan(update("ta", five_steps()))
        .await
        .unwrap();
    let next = next_event(&mut viewer).await.unwrap();
    assert_eq!(next.session_id, "ta");

    // A Wait ends when its principal goes.
    let mut waiter = who.remove("a-view").unwrap();
    let wait = tokio::spawn(async move {
        waiter
            .watch
            .wait(pb::WaitRequest {
                fail_fast: None,
                target: Some(pb::wait_request::Target::SessionTree("ta".into())),
                timeout: Some(prost_types::Duration {
                    seconds: 600,
                    nanos: 0,
                }),
                ..Default::default()
            })
            .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    admin
        .auth
        .delete_principal(pb::DeletePrincipalRequest {
            principal_id: "a-view".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), wait)
        .await
        .expect("the wait ends with its principal")
        .unwrap();
    assert_eq!(ended.unwrap_err().code(), Code::Unauthenticated);
}

/// Hardening round 2, item 12: a principal's scope is bounded (100,000
/// agent ids made every one of its calls 20 times slower).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_12_a_principals_scope_is_bounded() {
    let world = World::new().await;
    let mut admin = world.as_("admin");
    let many: Vec<String> = (0..257).map(|i| format!("a{i}")).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    for (agents, roots) in [(&refs[..], &[][..]), (&["x"][..], &refs[..])] {
        let err = principal(&mut admin, "wide", &[pb::Role::Agent], agents, roots)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    }
    principal(&mut admin, "wide", &[pb::Role::Agent], &refs[..256], &[])
        .await
        .unwrap();
}
