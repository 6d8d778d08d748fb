//! `lf.a2a.v1.A2AService`: Cairn's sessions as A2A tasks, for clients
//! written against the Agent2Agent protocol (`docs/a2a.md`).
//!
//! A session is a task and its tree is the task's context; the task's state
//! is the pure rule [`cairn_core::task::task_state`]; the plan is the task's
//! one artifact. Reads go through the store's access rules like every other
//! read, and what a caller may not see is a task that is not found, as A2A
//! asks. What this server does not offer yet answers A2A's
//! `UNSUPPORTED_OPERATION`.

use std::collections::BTreeMap;
use std::pin::Pin;

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};
use tracing::instrument;

use super::{State, rpcs};
use crate::auth::Authenticated;
use crate::convert;
use cairn_api::a2a::a2a_service_server::A2aService;
use cairn_api::{a2a, shapes};
use cairn_core::error::{Denial, Error, Excerpt, Result};
use cairn_core::plan::StepStatus;
use cairn_core::session::Session;
use cairn_core::task::{TaskState, task_state};
use cairn_store::reads::SessionQuery;
use cairn_store::records::PlanRecord;

/// Default and maximum `page_size` of `ListTasks` (A2A's own bounds).
const DEFAULT_PAGE: i32 = 50;
const MAX_PAGE: i32 = 100;

/// The A2A protocol version served (`a2a-sdk` 1.3.0 and `@a2a-js/sdk`
/// 1.3.0 speak it).
pub const A2A_VERSION: &str = "1.0";

/// The id of the one artifact of every task: its plan.
pub const PLAN_ARTIFACT: &str = "plan";

type Stream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<a2a::StreamResponse, tonic::Status>> + Send>>;

/// The A2A service.
#[derive(Clone, Debug)]
pub struct A2aApi {
    state: State,
}

/// A session the caller may not read is, to A2A, a task that is not found.
fn as_task(id: &str) -> impl Fn(Error) -> Error + '_ {
    move |e| match e {
        Error::SessionNotFound(_)
        | Error::PermissionDenied {
            reason: Denial::NotInScope,
            ..
        } => Error::TaskNotFound(id.to_owned()),
        e => e,
    }
}

impl A2aApi {
    /// A service over shared state.
    pub fn new(state: State) -> Self {
        A2aApi { state }
    }

    /// One session as a task, read through the access rules.
    async fn task(&self, who: &Authenticated, id: &str, artifacts: bool) -> Result<a2a::Task> {
        // Checked here, so a bad id is named by the field the caller sent.
        self.state.policy.limits.check_resource_id("id", id)?;
        let store = &self.state.store;
        let (session, _) = store
            .read_session(&who.caller, id.to_owned())
            .await
            .map_err(as_task(id))?;
        let (hot, _) = store
            .read_plan(&who.caller, id.to_owned())
            .await
            .map_err(as_task(id))?;
        Ok(task_of(
            &session,
            hot.ancestors.first(),
            &hot.record,
            artifacts,
        ))
    }

    async fn get_task(&self, who: &Authenticated, req: a2a::GetTaskRequest) -> Result<a2a::Task> {
        self.task(who, &req.id, true).await
    }

    async fn list_tasks(
        &self,
        who: &Authenticated,
        req: a2a::ListTasksRequest,
    ) -> Result<a2a::ListTasksResponse> {
        let page_size = req.page_size.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&page_size) {
            return Err(Error::invalid(
                "page_size",
                format!("must be between 1 and {MAX_PAGE}"),
            ));
        }
        if !req.context_id.is_empty() {
            return Err(Error::UnsupportedOperation(
                "ListTasks by context_id".into(),
            ));
        }
        if req.status_timestamp_after.is_some() {
            return Err(Error::UnsupportedOperation(
                "ListTasks by status_timestamp_after".into(),
            ));
        }
        let wanted = a2a::TaskState::try_from(req.status)
            .map_err(|_| Error::invalid("status", format!("{} is not a task state", req.status)))?;
        let q = SessionQuery {
            after: (!req.page_token.is_empty()).then_some(req.page_token),
            limit: usize::try_from(page_size).unwrap_or(1),
            parent: None,
            agent: None,
        };
        let (page, _) = self.state.store.list_sessions(&who.caller, q).await?;
        let artifacts = req.include_artifacts.unwrap_or(false);
        let mut tasks = Vec::with_capacity(page.sessions.len());
        for s in &page.sessions {
            let hot = match self
                .state
                .store
                .read_plan(&who.caller, s.session_id.clone())
                .await
            {
                Ok((hot, _)) => hot,
                // Deleted since the page was read: no longer a task.
                Err(Error::SessionNotFound(_)) => continue,
                Err(e) => return Err(e),
            };
            let task = task_of(s, hot.ancestors.first(), &hot.record, artifacts);
            let state = task.status.as_ref().map_or(0, |st| st.state);
            if wanted == a2a::TaskState::Unspecified || state == wanted as i32 {
                tasks.push(task);
            }
        }
        Ok(a2a::ListTasksResponse {
            total_size: i32::try_from(tasks.len()).unwrap_or(i32::MAX),
            tasks,
            next_page_token: page.next_after.unwrap_or_default(),
            page_size,
        })
    }
}

/// The agent card of a server whose gRPC listener is `grpc_url`, as A2A's
/// JSON (the proto's JSON mapping): served at
/// `/.well-known/agent-card.json`. With authentication on, every call
/// needs a bearer token, as on every other Cairn API.
pub fn agent_card_json(grpc_url: &str, auth: bool) -> Result<String> {
    let bearer = "bearer".to_owned();
    let card = a2a::AgentCard {
        name: "Cairn".into(),
        description: "Plans and todo lists of agent sessions, durable and watched: each session is a task, its tree the task's context, its plan the task's artifact.".into(),
        supported_interfaces: vec![a2a::AgentInterface {
            url: grpc_url.to_owned(),
            protocol_binding: "GRPC".into(),
            tenant: String::new(),
            protocol_version: A2A_VERSION.into(),
        }],
        version: env!("CARGO_PKG_VERSION").into(),
        capabilities: Some(a2a::AgentCapabilities {
            streaming: Some(false),
            push_notifications: Some(false),
            extensions: Vec::new(),
            extended_agent_card: Some(false),
        }),
        security_schemes: if auth {
            [(
                bearer.clone(),
                a2a::SecurityScheme {
                    scheme: Some(a2a::security_scheme::Scheme::HttpAuthSecurityScheme(
                        a2a::HttpAuthSecurityScheme {
                            description: "A Cairn principal's token (cairn admin create-principal)".into(),
                            scheme: "Bearer".into(),
                            bearer_format: String::new(),
                        },
                    )),
                },
            )]
            .into()
        } else {
            std::collections::HashMap::new()
        },
        security_requirements: if auth {
            vec![a2a::SecurityRequirement {
                schemes: [(bearer, a2a::StringList::default())].into(),
            }]
        } else {
            Vec::new()
        },
        default_input_modes: vec!["text/plain".into(), "application/json".into()],
        default_output_modes: vec!["text/plain".into(), "application/json".into()],
        skills: vec![a2a::AgentSkill {
            id: "plans".into(),
            name: "Plans of agent sessions".into(),
            description: "Follow sub-agents' sessions as tasks: their state from the plan and the agent's liveness, the plan as an artifact.".into(),
            tags: vec!["plans".into(), "approvals".into(), "sub-agents".into()],
            ..a2a::AgentSkill::default()
        }],
        ..a2a::AgentCard::default()
    };
    let internal = |e: &dyn std::fmt::Display| Error::Internal(format!("agent card: {e}"));
    let desc = crate::connect::pool()
        .and_then(|p| p.get_message_by_name("lf.a2a.v1.AgentCard"))
        .ok_or_else(|| internal(&"lf.a2a.v1.AgentCard is not in the descriptors"))?;
    let msg = prost_reflect::DynamicMessage::decode(
        desc,
        prost::Message::encode_to_vec(&card).as_slice(),
    )
    .map_err(|e| internal(&e))?;
    serde_json::to_string_pretty(&msg).map_err(|e| internal(&e))
}

/// The A2A state of Cairn's task state.
fn state_out(s: TaskState) -> a2a::TaskState {
    match s {
        TaskState::Submitted => a2a::TaskState::Submitted,
        TaskState::Working => a2a::TaskState::Working,
        TaskState::InputRequired => a2a::TaskState::InputRequired,
        TaskState::Completed => a2a::TaskState::Completed,
        TaskState::Failed => a2a::TaskState::Failed,
    }
}

fn string(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.to_owned())),
    }
}

fn number(n: impl Into<f64>) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n.into())),
    }
}

fn object(fields: impl IntoIterator<Item = (&'static str, Value)>) -> Struct {
    Struct {
        fields: fields
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect::<BTreeMap<_, _>>(),
    }
}

/// The plan as an artifact: its steps as data, and as text.
fn plan_artifact(record: &PlanRecord) -> a2a::Artifact {
    let checklist = &record.plan.checklist;
    let steps = checklist
        .items
        .iter()
        .map(|i| Value {
            kind: Some(Kind::StructValue(object([
                ("id", number(i.id)),
                ("step", string(&i.step)),
                (
                    "status",
                    string(shapes::step_status_name(convert::step_status_out(i.status))),
                ),
            ]))),
        })
        .collect();
    let data = object([
        (
            "steps",
            Value {
                kind: Some(Kind::ListValue(ListValue { values: steps })),
            },
        ),
        ("explanation", string(&checklist.explanation)),
    ]);
    let mut text = String::new();
    for i in &checklist.items {
        let mark = match i.status {
            StepStatus::Pending => "[ ]",
            StepStatus::InProgress => "[>]",
            StepStatus::Completed => "[x]",
            StepStatus::Cancelled => "[-]",
        };
        text.push_str(mark);
        text.push(' ');
        text.push_str(&i.step);
        text.push('\n');
    }
    let part = |content| a2a::Part {
        content: Some(content),
        ..a2a::Part::default()
    };
    a2a::Artifact {
        artifact_id: PLAN_ARTIFACT.into(),
        name: "plan".into(),
        parts: vec![
            part(a2a::part::Content::Data(Value {
                kind: Some(Kind::StructValue(data)),
            })),
            part(a2a::part::Content::Text(text)),
        ],
        ..a2a::Artifact::default()
    }
}

/// A session (in the tree under `root`) and its plan as a task.
fn task_of(
    session: &Session,
    root: Option<&String>,
    record: &PlanRecord,
    artifacts: bool,
) -> a2a::Task {
    let liveness = session.lease.as_ref().map(|l| l.state);
    let state = task_state(&record.plan, liveness);
    let changed = record
        .update_time
        .max(session.lease.as_ref().map_or(0, |l| l.since))
        .max(session.create_time);
    a2a::Task {
        id: session.session_id.clone(),
        context_id: root.unwrap_or(&session.session_id).clone(),
        status: Some(a2a::TaskStatus {
            state: state_out(state) as i32,
            message: None,
            timestamp: convert::timestamp(changed),
        }),
        artifacts: if artifacts && !record.plan.checklist.items.is_empty() {
            vec![plan_artifact(record)]
        } else {
            Vec::new()
        },
        history: Vec::new(),
        metadata: Some(object([(
            "cairn_revision",
            // A string: a JSON number would lose revisions past 2^53.
            string(&record.revision.to_string()),
        )])),
    }
}

/// The A2A operations not offered yet.
macro_rules! unsupported {
    ($($name:ident($req:ty) -> $resp:ty = $what:literal;)*) => {
        impl A2aApi {
            $(
                async fn $name(&self, _: &Authenticated, _: $req) -> Result<$resp> {
                    Err(Error::UnsupportedOperation($what.into()))
                }
            )*
        }
    };
}

unsupported! {
    send_message(a2a::SendMessageRequest) -> a2a::SendMessageResponse = "SendMessage";
    send_streaming_message(a2a::SendMessageRequest) -> Stream = "SendStreamingMessage";
    cancel_task(a2a::CancelTaskRequest) -> a2a::Task = "CancelTask";
    subscribe_to_task(a2a::SubscribeToTaskRequest) -> Stream = "SubscribeToTask";
    create_push(a2a::TaskPushNotificationConfig) -> a2a::TaskPushNotificationConfig = "push notifications";
    get_push(a2a::GetTaskPushNotificationConfigRequest) -> a2a::TaskPushNotificationConfig = "push notifications";
    list_push(a2a::ListTaskPushNotificationConfigsRequest) -> a2a::ListTaskPushNotificationConfigsResponse = "push notifications";
    delete_push(a2a::DeleteTaskPushNotificationConfigRequest) -> () = "push notifications";
    extended_card(a2a::GetExtendedAgentCardRequest) -> a2a::AgentCard = "GetExtendedAgentCard";
}

rpcs! {
    impl A2aService for A2aApi {
        type SendStreamingMessageStream = Stream;
        type SubscribeToTaskStream = Stream;
        #[instrument(skip_all)]
        fn send_message(r: a2a::SendMessageRequest) -> a2a::SendMessageResponse => send_message;
        #[instrument(skip_all)]
        fn send_streaming_message(r: a2a::SendMessageRequest) -> Stream => send_streaming_message;
        #[instrument(skip_all, fields(task_id = %Excerpt(&r.get_ref().id)))]
        fn get_task(r: a2a::GetTaskRequest) -> a2a::Task => get_task;
        #[instrument(skip_all)]
        fn list_tasks(r: a2a::ListTasksRequest) -> a2a::ListTasksResponse => list_tasks;
        #[instrument(skip_all, fields(task_id = %Excerpt(&r.get_ref().id)))]
        fn cancel_task(r: a2a::CancelTaskRequest) -> a2a::Task => cancel_task;
        #[instrument(skip_all, fields(task_id = %Excerpt(&r.get_ref().id)))]
        fn subscribe_to_task(r: a2a::SubscribeToTaskRequest) -> Stream => subscribe_to_task;
        #[instrument(skip_all)]
        fn create_task_push_notification_config(r: a2a::TaskPushNotificationConfig) -> a2a::TaskPushNotificationConfig => create_push;
        #[instrument(skip_all)]
        fn get_task_push_notification_config(r: a2a::GetTaskPushNotificationConfigRequest) -> a2a::TaskPushNotificationConfig => get_push;
        #[instrument(skip_all)]
        fn list_task_push_notification_configs(r: a2a::ListTaskPushNotificationConfigsRequest) -> a2a::ListTaskPushNotificationConfigsResponse => list_push;
        #[instrument(skip_all)]
        fn get_extended_agent_card(r: a2a::GetExtendedAgentCardRequest) -> a2a::AgentCard => extended_card;
        #[instrument(skip_all)]
        fn delete_task_push_notification_config(r: a2a::DeleteTaskPushNotificationConfigRequest) -> () => delete_push;
    }
}
