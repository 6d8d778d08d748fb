//! From one hook payload of an agent CLI to what it changes in Cairn: pure,
//! so that every captured payload is a unit test.
//!
//! Sessions are named by a fixed rule (docs in the README, "Observe your
//! agents"): the CLI's session is `<cli>:<session_id>` (`claude:…`,
//! `codex:…`, `gemini:…`), under `--parent-session` when given; a
//! sub-agent is `<cli>:<session_id>:<agent_id>` under it, with its agent
//! type as the session's agent.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The agent CLIs `cairn hook` understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum AgentCli {
    /// Claude Code: hooks in `settings.json`, the task tools.
    ClaudeCode,
    /// Codex: `hooks.json`, `update_plan`.
    Codex,
    /// Gemini CLI: hooks in `settings.json`, `write_todos`.
    Gemini,
}

impl AgentCli {
    /// The prefix of its sessions' ids.
    pub fn prefix(self) -> &'static str {
        match self {
            AgentCli::ClaudeCode => "claude",
            AgentCli::Codex => "codex",
            AgentCli::Gemini => "gemini",
        }
    }

    /// The agent id of its top-level sessions.
    pub fn agent(self) -> &'static str {
        match self {
            AgentCli::ClaudeCode => "claude-code",
            AgentCli::Codex => "codex",
            AgentCli::Gemini => "gemini-cli",
        }
    }
}

/// The session an observation is about, and where it hangs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Place {
    pub session_id: String,
    /// Its parent: the CLI's own session for a sub-agent, else
    /// `--parent-session` (if any).
    pub parent_session_id: Option<String>,
    /// The session's agent: the CLI, or the sub-agent's type.
    pub agent_id: String,
    /// For a sub-agent: the CLI's session, which must exist first.
    pub root: Option<Box<Place>>,
}

/// One step as the agent's tool keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The agent's id for it (Claude Code's task ids), or 0 (none).
    pub id: u32,
    pub text: String,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<u32>,
}

/// A step's status, as the agents name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pending,
    InProgress,
    Completed,
    Cancelled,
}

impl Status {
    /// A status from the agent's name for it; `None` for a name Cairn does
    /// not know.
    fn parse(name: &str) -> Option<Status> {
        match name {
            "pending" => Some(Status::Pending),
            "in_progress" => Some(Status::InProgress),
            "completed" => Some(Status::Completed),
            "cancelled" | "canceled" => Some(Status::Cancelled),
            _ => None,
        }
    }
}

/// A life event a hook reports (spooled as its label text, `stopped` or
/// `ended`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Life {
    /// The agent stopped answering (a turn ended, or a sub-agent finished).
    Stopped,
    /// The CLI's session ended.
    Ended,
}

impl Life {
    /// The `hook.state` label's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Life::Stopped => "stopped",
            Life::Ended => "ended",
        }
    }
}

/// What one payload changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    /// The session (or sub-agent) started: it exists, with these labels.
    Started { labels: BTreeMap<String, String> },
    /// A life event to record in the session's `hook.state` label, with
    /// more labels (a transcript path).
    State {
        state: Life,
        labels: BTreeMap<String, String>,
    },
    /// The whole list replaced (Codex's `update_plan`, Gemini's
    /// `write_todos`).
    Replace {
        explanation: String,
        steps: Vec<Step>,
    },
    /// Claude Code's `TaskCreate`: a step added (kept if it exists).
    Create { id: u32, text: String },
    /// Claude Code's `TaskUpdate` (and `TaskCompleted`).
    Update {
        id: u32,
        text: Option<String>,
        status: Option<Status>,
        add_blocked_by: Vec<u32>,
        deleted: bool,
    },
}

/// A change to one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    pub place: Place,
    pub change: Change,
}

/// Reads one payload. `Ok(None)`: a payload about nothing Cairn mirrors (a
/// tool other than the plan tools, a notification); `Err`: one that cannot
/// be read, with why.
pub fn observe(
    cli: AgentCli,
    payload: &Value,
    parent: Option<&str>,
) -> Result<Option<Observation>, String> {
    let obj = payload
        .as_object()
        .ok_or("the payload is not a JSON object")?;
    let text = |key: &str| obj.get(key).and_then(Value::as_str).unwrap_or_default();
    let session = text("session_id");
    if session.is_empty() {
        return Err("the payload has no session_id".into());
    }
    let event = text("hook_event_name");
    if event.is_empty() {
        return Err("the payload has no hook_event_name".into());
    }
    let root = Place {
        session_id: session_id(&format!("{}:{session}", cli.prefix())),
        parent_session_id: parent.filter(|p| !p.is_empty()).map(str::to_owned),
        agent_id: cli.agent().to_owned(),
        root: None,
    };
    let agent = text("agent_id");
    let place = if agent.is_empty() {
        root
    } else {
        let kind = text("agent_type");
        Place {
            session_id: session_id(&format!("{}:{session}:{agent}", cli.prefix())),
            parent_session_id: Some(root.session_id.clone()),
            agent_id: session_id(if kind.is_empty() { "subagent" } else { kind }),
            root: Some(Box::new(root)),
        }
    };
    let mut labels = BTreeMap::new();
    let mut label = |key: &str, from: &str| {
        let v = text(from);
        if !v.is_empty() {
            labels.insert(key.to_owned(), v.to_owned());
        }
    };
    label("hook.cwd", "cwd");
    label("hook.model", "model");
    let change = match (cli, event) {
        (_, "SessionStart" | "SubagentStart") => {
            label("hook.transcript", "transcript_path");
            label("hook.source", "source");
            labels.insert("hook.cli".into(), cli.prefix().into());
            labels.insert("hook.state".into(), "started".into());
            Change::Started { labels }
        }
        (_, "SessionEnd") => Change::State {
            state: Life::Ended,
            labels,
        },
        (_, "Stop") => Change::State {
            state: Life::Stopped,
            labels,
        },
        (_, "SubagentStop") => {
            label("hook.transcript", "agent_transcript_path");
            Change::State {
                state: Life::Stopped,
                labels,
            }
        }
        (AgentCli::ClaudeCode, "TaskCreated") => Change::Create {
            id: task_id(obj.get("task_id"))?,
            text: text("task_subject").to_owned(),
        },
        (AgentCli::ClaudeCode, "TaskCompleted") => Change::Update {
            id: task_id(obj.get("task_id"))?,
            text: None,
            status: Some(Status::Completed),
            add_blocked_by: Vec::new(),
            deleted: false,
        },
        (AgentCli::ClaudeCode, "PostToolUse") => match claude_tool(obj)? {
            Some(change) => change,
            None => return Ok(None),
        },
        (AgentCli::Codex, "PreToolUse" | "PostToolUse") if text("tool_name") == "update_plan" => {
            let input = obj
                .get("tool_input")
                .ok_or("update_plan without tool_input")?;
            replace(input, "plan", "step")?
        }
        (AgentCli::Gemini, "BeforeTool" | "AfterTool") if text("tool_name") == "write_todos" => {
            let input = obj
                .get("tool_input")
                .ok_or("write_todos without tool_input")?;
            replace(input, "todos", "description")?
        }
        _ => return Ok(None),
    };
    Ok(Some(Observation { place, change }))
}

/// An id Cairn accepts, from the CLI's: characters outside
/// `[A-Za-z0-9._:-]` become `-`.
/// The session of a Claude Code session id (what its hooks mirror into).
pub fn claude_session_id(session: &str) -> String {
    session_id(&format!("{}:{session}", AgentCli::ClaudeCode.prefix()))
}

fn session_id(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Claude Code's task ids are decimal strings ("1", "2", …).
fn task_id(v: Option<&Value>) -> Result<u32, String> {
    let id = match v {
        Some(Value::String(s)) => s.parse::<u32>().ok(),
        Some(Value::Number(n)) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        _ => None,
    };
    id.filter(|id| *id != 0).ok_or_else(|| {
        format!(
            "not a task id: {}",
            v.map_or("none".into(), ToString::to_string)
        )
    })
}

/// What a completed `TaskCreate` or `TaskUpdate` did. Only the post-event
/// counts for these: the pre-event has no task id yet (create) or may
/// still be refused (update), and a refused call (`success: false`)
/// changed nothing.
fn claude_tool(obj: &serde_json::Map<String, Value>) -> Result<Option<Change>, String> {
    let tool = obj
        .get("tool_name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let input = obj.get("tool_input").unwrap_or(&Value::Null);
    let response = obj.get("tool_response").unwrap_or(&Value::Null);
    if response.get("success").and_then(Value::as_bool) == Some(false) {
        return Ok(None);
    }
    match tool {
        "TaskCreate" => {
            let task = response
                .get("task")
                .ok_or("TaskCreate answered without a task")?;
            let text = task
                .get("subject")
                .or_else(|| input.get("subject"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            Ok(Some(Change::Create {
                id: task_id(task.get("id"))?,
                text: text.to_owned(),
            }))
        }
        "TaskUpdate" => {
            let status_name = input.get("status").and_then(Value::as_str);
            let deleted = status_name == Some("deleted");
            let status = match status_name {
                None | Some("deleted") => None,
                Some(name) => Some(
                    Status::parse(name).ok_or_else(|| format!("unknown task status {name:?}"))?,
                ),
            };
            let add_blocked_by = match input.get("addBlockedBy") {
                Some(Value::Array(ids)) => ids
                    .iter()
                    .map(|v| task_id(Some(v)))
                    .collect::<Result<_, _>>()?,
                _ => Vec::new(),
            };
            Ok(Some(Change::Update {
                id: task_id(input.get("taskId"))?,
                text: input
                    .get("subject")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                status,
                add_blocked_by,
                deleted,
            }))
        }
        _ => Ok(None),
    }
}

/// A whole list, from `input[list]` of objects with `text_key` and
/// `status`.
fn replace(input: &Value, list: &str, text_key: &str) -> Result<Change, String> {
    let items = input
        .get(list)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("no `{list}` list in the tool input"))?;
    let steps = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let text = item
                .get(text_key)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{list}[{i}] has no `{text_key}`"))?;
            let name = item
                .get("status")
                .and_then(Value::as_str)
                .unwrap_or("pending");
            let status = Status::parse(name)
                .ok_or_else(|| format!("{list}[{i}] has an unknown status {name:?}"))?;
            Ok(Step {
                id: 0,
                text: text.to_owned(),
                status,
                blocked_by: Vec::new(),
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(Change::Replace {
        explanation: input
            .get("explanation")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        steps,
    })
}

/// The steps after `change`, from the session's current ones. `None` for
/// a change that is not about the list.
pub fn steps_after(current: &[Step], change: &Change) -> Option<Vec<Step>> {
    match change {
        Change::Started { .. } | Change::State { .. } => None,
        Change::Replace { steps, .. } => Some(steps.clone()),
        Change::Create { id, text } => {
            let mut steps = current.to_vec();
            match steps.iter_mut().find(|s| s.id == *id) {
                // The same task seen twice (TaskCreated, then PostToolUse).
                Some(s) if !text.is_empty() => s.text.clone_from(text),
                Some(_) => {}
                None => steps.push(Step {
                    id: *id,
                    text: if text.is_empty() {
                        format!("Task {id}")
                    } else {
                        text.clone()
                    },
                    status: Status::Pending,
                    blocked_by: Vec::new(),
                }),
            }
            Some(steps)
        }
        Change::Update {
            id,
            text,
            status,
            add_blocked_by,
            deleted,
        } => {
            let mut steps = current.to_vec();
            if *deleted {
                steps.retain(|s| s.id != *id);
                return Some(steps);
            }
            let found = steps.iter().position(|s| s.id == *id);
            let pos = found.unwrap_or_else(|| {
                // Its creation was not seen (the hook was installed
                // mid-run): the step appears now.
                steps.push(Step {
                    id: *id,
                    text: format!("Task {id}"),
                    status: Status::Pending,
                    blocked_by: Vec::new(),
                });
                steps.len() - 1
            });
            let step = &mut steps[pos];
            if let Some(t) = text {
                step.text.clone_from(t);
            }
            if let Some(s) = status {
                step.status = *s;
            }
            for b in add_blocked_by {
                if !step.blocked_by.contains(b) {
                    step.blocked_by.push(*b);
                }
            }
            Some(steps)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A life event spooled before it was typed (its label text) reads
    /// back as the same event, and is written the same way.
    #[test]
    fn life_events_spool_as_their_label_text() {
        let spooled = r#"{"State":{"state":"ended","labels":{}}}"#;
        let change: Change = serde_json::from_str(spooled).unwrap();
        assert_eq!(
            change,
            Change::State {
                state: Life::Ended,
                labels: BTreeMap::new()
            }
        );
        assert_eq!(serde_json::to_string(&change).unwrap(), spooled);
        assert!(
            serde_json::from_str::<Change>(r#"{"State":{"state":"exploded","labels":{}}}"#)
                .is_err()
        );
    }

    fn samples(name: &str) -> Vec<Value> {
        let path = format!(
            "{}/../../tests/fixtures/agent-samples/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// Runs every payload of a captured run through the mapping, in order.
    fn replay(cli: AgentCli, name: &str) -> BTreeMap<String, Vec<Step>> {
        let mut plans: BTreeMap<String, Vec<Step>> = BTreeMap::new();
        for p in samples(name) {
            if let Some(o) = observe(cli, &p, Some("orch")).unwrap() {
                let current = plans.get(&o.place.session_id).cloned().unwrap_or_default();
                if let Some(steps) = steps_after(&current, &o.change) {
                    plans.insert(o.place.session_id.clone(), steps);
                }
            }
        }
        plans
    }

    fn shown(steps: &[Step]) -> Vec<(u32, &str, Status)> {
        steps
            .iter()
            .map(|s| (s.id, s.text.as_str(), s.status))
            .collect()
    }

    #[test]
    fn a_claude_code_task_run_becomes_its_sessions_plan() {
        let plans = replay(AgentCli::ClaudeCode, "claude_plan3_hooks.json");
        let plan = &plans["claude:51cf74cf-8fc9-40c1-a664-1d2504485bcc"];
        assert_eq!(shown(plan), [(1, "Write the parser", Status::Completed)]);
    }

    #[test]
    fn a_claude_code_sub_agent_gets_a_child_session() {
        let p = samples("claude_sub1_hooks.json");
        let start = observe(AgentCli::ClaudeCode, &p[1], None).unwrap().unwrap();
        assert_eq!(
            start.place.session_id,
            "claude:8a183fd6-490e-493c-a963-40e420104592:a317bcfffd44cd697"
        );
        assert_eq!(
            start.place.parent_session_id.as_deref(),
            Some("claude:8a183fd6-490e-493c-a963-40e420104592")
        );
        assert_eq!(start.place.agent_id, "general-purpose");
        let plans = replay(AgentCli::ClaudeCode, "claude_sub1_hooks.json");
        let child = &plans["claude:8a183fd6-490e-493c-a963-40e420104592:a317bcfffd44cd697"];
        assert_eq!(shown(child), [(1, "Write the parser", Status::Pending)]);
        assert!(!plans.contains_key("claude:8a183fd6-490e-493c-a963-40e420104592"));
    }

    #[test]
    fn codex_update_plan_replaces_the_list_with_in_progress() {
        let plans = replay(AgentCli::Codex, "codex_up2_hooks.json");
        let plan = &plans["codex:01a22e9e-f9c4-7271-b15c-3425b62ea3ab"];
        assert_eq!(
            shown(plan),
            [
                (0, "Write the parser", Status::Completed),
                (0, "Add tests", Status::InProgress)
            ]
        );
        let sub = replay(AgentCli::Codex, "codex_sub1_hooks.json");
        assert!(sub.contains_key(
            "codex:01a22e9f-4c28-7132-b829-eb236c269348:01a22e9f-5154-7dd0-9057-d50aaa348ad4"
        ));
    }

    #[test]
    fn gemini_write_todos_keeps_cancelled() {
        let mut p = samples("gemini_todoy_hooks.json");
        p[3]["tool_input"]["todos"][1]["status"] = "cancelled".into();
        let o = observe(AgentCli::Gemini, &p[3], None).unwrap().unwrap();
        let steps = steps_after(&[], &o.change).unwrap();
        assert_eq!(steps[1].status, Status::Cancelled);
        assert_eq!(
            o.place.session_id,
            "gemini:755a0092-33cd-4583-8d39-19a01cb7242e"
        );
        assert_eq!(o.place.parent_session_id, None);
    }

    #[test]
    fn malformed_and_truncated_payloads_are_refused_with_a_reason() {
        let text = std::fs::read_to_string(format!(
            "{}/../../tests/fixtures/agent-samples/codex_up2_hooks.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        // Truncated: not JSON at all (the caller reports it).
        assert!(serde_json::from_str::<Value>(&text[..text.len() / 2]).is_err());
        for bad in [
            serde_json::json!([1, 2]),
            serde_json::json!({"hook_event_name": "Stop"}),
            serde_json::json!({"session_id": "s"}),
            serde_json::json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "update_plan"}),
            serde_json::json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "update_plan",
                "tool_input": {"plan": [{"step": "a", "status": "weird"}]}}),
        ] {
            let e = observe(AgentCli::Codex, &bad, None).unwrap_err();
            assert!(!e.is_empty());
        }
        // A tool Cairn does not mirror is nothing to do.
        let other = serde_json::json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "shell"});
        assert_eq!(observe(AgentCli::Codex, &other, None).unwrap(), None);
    }

    #[test]
    fn a_deleted_task_goes_and_dependencies_are_kept() {
        let create = |id| Change::Create {
            id,
            text: format!("t{id}"),
        };
        let mut steps = steps_after(&[], &create(1)).unwrap();
        steps = steps_after(&steps, &create(2)).unwrap();
        steps = steps_after(
            &steps,
            &Change::Update {
                id: 2,
                text: None,
                status: Some(Status::InProgress),
                add_blocked_by: vec![1],
                deleted: false,
            },
        )
        .unwrap();
        assert_eq!(steps[1].blocked_by, [1]);
        steps = steps_after(
            &steps,
            &Change::Update {
                id: 1,
                text: None,
                status: None,
                add_blocked_by: Vec::new(),
                deleted: true,
            },
        )
        .unwrap();
        assert_eq!(shown(&steps), [(2, "t2", Status::InProgress)]);
        // The dependency on the deleted task stays, as the agent left it.
        assert_eq!(steps[0].blocked_by, [1]);
    }
}
