//! The A2A shapes of Cairn's objects (`docs/a2a.md`): a session and its
//! plan as a task, the plan as its artifact, a state as A2A's, and the
//! agent card. Pure conversions: what is read or followed elsewhere is
//! given here to be shown.

use std::collections::BTreeMap;

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};

use super::{A2A_VERSION, PLAN_ARTIFACT};
use crate::convert;
use cairn_api::{a2a, shapes};
use cairn_core::error::{Error, Result};
use cairn_core::plan::StepStatus;
use cairn_core::session::Session;
use cairn_core::task::{TaskState, task_state};
use cairn_store::records::PlanRecord;

/// The agent card of a server whose gRPC listener is `grpc_url` (and whose
/// JSON-RPC binding, on the web listener, is at `jsonrpc_url`), as A2A's
/// JSON (the proto's JSON mapping), with push notifications when webhooks
/// are on (`push`): served at
/// `/.well-known/agent-card.json`. With authentication on, every call
/// needs a bearer token, as on every other Cairn API.
pub fn agent_card_json(
    grpc_url: &str,
    jsonrpc_url: Option<&str>,
    auth: bool,
    push: bool,
) -> Result<String> {
    let bearer = "bearer".to_owned();
    let interface = |url: &str, binding: &str| a2a::AgentInterface {
        url: url.to_owned(),
        protocol_binding: binding.into(),
        tenant: String::new(),
        protocol_version: A2A_VERSION.into(),
    };
    let card = a2a::AgentCard {
        name: "Cairn".into(),
        description: "Plans and todo lists of agent sessions, durable and watched: each session is a task, its tree the task's context, its plan the task's artifact.".into(),
        supported_interfaces: std::iter::once(interface(grpc_url, "GRPC"))
            .chain(jsonrpc_url.map(|u| interface(u, "JSONRPC")))
            .collect(),
        version: env!("CARGO_PKG_VERSION").into(),
        capabilities: Some(a2a::AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(push),
            extensions: vec![a2a::AgentExtension {
                uri: super::RESUME_EXTENSION.into(),
                description: format!(
                    "Resumable task streams: every SubscribeToTask event carries metadata.{}; send the last one received in the {} header to get everything after it, with no gap and no state told twice, across restarts and replicas.",
                    super::RESUME_KEY,
                    super::RESUME_HEADER
                ),
                required: false,
                params: None,
            }],
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
    let msg = crate::connect::dynamic(desc, &card).map_err(|e| internal(&e))?;
    serde_json::to_string_pretty(&msg).map_err(|e| internal(&e))
}

/// The A2A state of Cairn's task state.
pub(super) fn state_out(s: TaskState) -> a2a::TaskState {
    match s {
        TaskState::Submitted => a2a::TaskState::Submitted,
        TaskState::Working => a2a::TaskState::Working,
        TaskState::InputRequired => a2a::TaskState::InputRequired,
        TaskState::Completed => a2a::TaskState::Completed,
        TaskState::Failed => a2a::TaskState::Failed,
    }
}

pub(super) fn string(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.to_owned())),
    }
}

fn number(n: impl Into<f64>) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n.into())),
    }
}

pub(super) fn object(fields: impl IntoIterator<Item = (&'static str, Value)>) -> Struct {
    Struct {
        fields: fields
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect::<BTreeMap<_, _>>(),
    }
}

/// The plan as an artifact: its steps as data, and as text.
pub(super) fn plan_artifact(record: &PlanRecord) -> a2a::Artifact {
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
pub(super) fn task_of(
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
