//! The `cairn` client subcommands: sessions, plans, todos, `watch` (with a
//! live board for session trees) and `wait`, over gRPC. `--output json`
//! everywhere for scripts; the seed's box rendering for people.

// Text assembly reads best as pushes of formatted lines, and each
// subcommand as one match over its variants.
#![allow(clippy::format_push_string, clippy::too_many_lines)]

pub mod render;

use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal, Read, Write};
use std::time::Duration;

use clap::{Subcommand, ValueEnum};
use serde_json::{Value, json};
use tonic::transport::{Channel, Endpoint};

use crate::api::convert::micros;
use crate::mcp::{step_status_name as status_name, timestamp_json as ts};
use crate::pb;
use crate::store::now_micros;
use render::{BoardRow, Mark};

/// Output format of client commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// For people: boxes, trees and tables.
    Text,
    /// One JSON document, for scripts.
    Json,
}

/// Flags every client command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// The Cairn server.
    #[arg(
        long,
        env = "CAIRN_SERVER",
        default_value = "http://127.0.0.1:50051",
        global = true
    )]
    pub server: String,
    /// Output format.
    #[arg(long, env = "CAIRN_OUTPUT", value_enum, default_value_t = Output::Text, global = true)]
    pub output: Output,
}

/// `cairn session …`
#[derive(Debug, Clone, Subcommand)]
pub enum SessionCmd {
    /// Create a session (the server picks an id when none is given).
    Create {
        /// Session id.
        id: Option<String>,
        /// Parent session (an orchestrator's).
        #[arg(long)]
        parent: Option<String>,
        /// Agent working in it.
        #[arg(long)]
        agent: Option<String>,
        /// Title.
        #[arg(long)]
        title: Option<String>,
    },
    /// List sessions as a tree.
    List,
    /// Show one session with its plan.
    Show {
        /// Session id.
        id: String,
    },
    /// Delete a session (`--cascade` for its subtree).
    Delete {
        /// Session id.
        id: String,
        /// Delete its descendants too.
        #[arg(long)]
        cascade: bool,
    },
}

/// `cairn plan …`
#[derive(Debug, Clone, Subcommand)]
pub enum PlanCmd {
    /// Show a session's checklist.
    Show {
        /// Session id.
        session: String,
    },
    /// Replace the checklist from JSON `{"explanation": …, "plan": [{"step", "status"}]}`.
    Update {
        /// Session id.
        session: String,
        /// File with the JSON, or `-` for standard input.
        #[arg(long, default_value = "-")]
        file: String,
    },
    /// Show plan mode: mode, goal, pending plan, progress.
    Status {
        /// Session id.
        session: String,
    },
    /// Approve the plan awaiting approval.
    Approve {
        /// Session id.
        session: String,
        /// Who approves.
        #[arg(long, env = "USER", default_value = "cli")]
        approver: String,
    },
    /// Reject the plan awaiting approval.
    Reject {
        /// Session id.
        session: String,
        /// Why.
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// List past plans.
    History {
        /// Session id.
        session: String,
    },
}

/// `cairn todo …`
#[derive(Debug, Clone, Subcommand)]
pub enum TodoCmd {
    /// Show an agent's todo list.
    Show {
        /// Agent id.
        agent: String,
    },
    /// Replace an agent's list from JSON `[{"id", "content", "status", "priority"}]`.
    Write {
        /// Agent id.
        agent: String,
        /// File with the JSON, or `-` for standard input.
        #[arg(long, default_value = "-")]
        file: String,
    },
}

/// `cairn watch` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct WatchArgs {
    /// A session tree, shown as a live board.
    #[arg(long, group = "target")]
    pub tree: Option<String>,
    /// One session's events.
    #[arg(long, group = "target")]
    pub session: Option<String>,
    /// One agent's todo events.
    #[arg(long, group = "target")]
    pub agent: Option<String>,
    /// Every event.
    #[arg(long, group = "target")]
    pub all: bool,
    /// Replay from this revision (events only, not the board).
    #[arg(long)]
    pub from_revision: Option<u64>,
}

/// `cairn wait` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct WaitArgs {
    /// Wait for every plan in this session tree to be completed.
    #[arg(long)]
    pub tree: String,
    /// Give up after this long (e.g. `10m`).
    #[arg(long, default_value = "5m", value_parser = crate::config::parse_duration)]
    pub timeout: Duration,
}

type CliResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

async fn connect(server: &str) -> Result<Channel, Box<dyn std::error::Error + Send + Sync>> {
    Ok(Endpoint::from_shared(server.to_owned())?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?)
}

/// Colour only for a person at a terminal.
fn color() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

#[allow(clippy::print_stdout)] // printing is what the CLI is for
fn emit(text: &str) {
    print!("{text}");
    let _ = std::io::stdout().flush();
}

/// Plain text output (no styling of ours): every control character the
/// server's text may hold is made visible, line by line.
fn emit_plain(text: &str) {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        out.push_str(&render::printable(body));
        out.push_str(newline);
    }
    emit(&out);
}

fn emit_json(value: &Value) {
    emit(&format!("{value:#}\n"));
}

fn read_input(file: &str) -> Result<String, std::io::Error> {
    if file == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        Ok(s)
    } else {
        std::fs::read_to_string(file)
    }
}

fn mode_name(m: pb::PlanMode) -> &'static str {
    match m {
        pb::PlanMode::Planning => "planning",
        pb::PlanMode::AwaitingApproval => "awaiting approval",
        pb::PlanMode::Normal | pb::PlanMode::Unspecified => "normal",
    }
}

fn session_json(s: &pb::Session) -> Value {
    json!({
        "session_id": s.session_id,
        "agent_id": s.agent_id,
        "parent_session_id": s.parent_session_id,
        "title": s.title,
        "labels": s.labels,
        "create_time": ts(s.create_time.as_ref()),
        "update_time": ts(s.update_time.as_ref()),
        "revision": s.revision,
    })
}

fn plan_json(p: &pb::Plan) -> Value {
    json!({
        "session_id": p.session_id,
        "explanation": p.explanation,
        "plan": p.items.iter().map(|i| json!({"id": i.id, "step": i.step, "status": status_name(i.status())})).collect::<Vec<_>>(),
        "mode": p.status.as_ref().map_or("normal", |s| mode_name(s.mode())),
        "revision": p.revision,
        "update_time": ts(p.update_time.as_ref()),
    })
}

fn plan_box(p: &pb::Plan) -> String {
    let items: Vec<(Mark, String)> = p
        .items
        .iter()
        .map(|i| {
            let mark = match i.status() {
                pb::StepStatus::Completed => Mark::Done,
                pb::StepStatus::InProgress => Mark::Active,
                pb::StepStatus::Pending | pb::StepStatus::Unspecified => Mark::Pending,
            };
            (mark, i.step.clone())
        })
        .collect();
    render::task_box(&items, color())
}

fn todo_box(list: &pb::TodoList) -> String {
    let items: Vec<(Mark, String)> = list
        .todos
        .iter()
        .map(|t| {
            let mark = match t.status() {
                pb::TodoStatus::Completed => Mark::Done,
                pb::TodoStatus::InProgress => Mark::Active,
                pb::TodoStatus::Pending | pb::TodoStatus::Unspecified => Mark::Pending,
            };
            let priority = match t.priority() {
                pb::Priority::High => " (high)",
                pb::Priority::Low => " (low)",
                pb::Priority::Medium | pb::Priority::Unspecified => "",
            };
            (mark, format!("{}{priority}", t.content))
        })
        .collect();
    render::task_box(&items, color())
}

/// `cairn session …`
pub async fn session(client: &ClientArgs, cmd: SessionCmd) -> CliResult {
    let channel = connect(&client.server).await?;
    let mut sessions = pb::session_service_client::SessionServiceClient::new(channel.clone());
    match cmd {
        SessionCmd::Create {
            id,
            parent,
            agent,
            title,
        } => {
            let s = sessions
                .create_session(pb::CreateSessionRequest {
                    session: Some(pb::Session {
                        session_id: id.unwrap_or_default(),
                        parent_session_id: parent.unwrap_or_default(),
                        agent_id: agent.unwrap_or_default(),
                        title: title.unwrap_or_default(),
                        ..pb::Session::default()
                    }),
                })
                .await?
                .into_inner()
                .session
                .unwrap_or_default();
            match client.output {
                Output::Json => emit_json(&session_json(&s)),
                Output::Text => emit_plain(&format!("created {}\n", s.session_id)),
            }
        }
        SessionCmd::List => {
            let mut all = Vec::new();
            let mut token = String::new();
            loop {
                let page = sessions
                    .list_sessions(pb::ListSessionsRequest {
                        page_size: 1000,
                        page_token: token.clone(),
                        ..Default::default()
                    })
                    .await?
                    .into_inner();
                all.extend(page.sessions);
                if page.next_page_token.is_empty() {
                    break;
                }
                token = page.next_page_token;
            }
            match client.output {
                Output::Json => emit_json(&Value::Array(all.iter().map(session_json).collect())),
                Output::Text => emit_plain(&session_tree(&all)),
            }
        }
        SessionCmd::Show { id } => {
            let s = sessions
                .get_session(pb::GetSessionRequest {
                    session_id: id.clone(),
                })
                .await?
                .into_inner()
                .session
                .unwrap_or_default();
            let plan = pb::plan_service_client::PlanServiceClient::new(channel)
                .get_plan(pb::GetPlanRequest { session_id: id })
                .await?
                .into_inner()
                .plan
                .unwrap_or_default();
            match client.output {
                Output::Json => {
                    emit_json(&json!({ "session": session_json(&s), "plan": plan_json(&plan) }));
                }
                Output::Text => {
                    let parent = if s.parent_session_id.is_empty() {
                        "(root)".to_owned()
                    } else {
                        s.parent_session_id.clone()
                    };
                    emit_plain(&format!(
                        "{}  agent {}  parent {}  revision {}\n",
                        s.session_id, s.agent_id, parent, s.revision,
                    ));
                    emit(&plan_box(&plan));
                }
            }
        }
        SessionCmd::Delete { id, cascade } => {
            let r = sessions
                .delete_session(pb::DeleteSessionRequest {
                    session_id: id,
                    cascade,
                    expected_revision: None,
                })
                .await?
                .into_inner();
            match client.output {
                Output::Json => {
                    emit_json(&json!({ "deleted": r.deleted_session_ids, "revision": r.revision }));
                }
                Output::Text => {
                    emit_plain(&format!("deleted {}\n", r.deleted_session_ids.join(", ")));
                }
            }
        }
    }
    Ok(())
}

/// Sessions as an indented tree, roots first.
fn session_tree(all: &[pb::Session]) -> String {
    let ids: std::collections::HashSet<&str> = all.iter().map(|s| s.session_id.as_str()).collect();
    let mut children: BTreeMap<&str, Vec<&pb::Session>> = BTreeMap::new();
    let mut roots = Vec::new();
    for s in all {
        if s.parent_session_id.is_empty() || !ids.contains(s.parent_session_id.as_str()) {
            roots.push(s);
        } else {
            children
                .entry(s.parent_session_id.as_str())
                .or_default()
                .push(s);
        }
    }
    let mut out = String::new();
    let mut stack: Vec<(&pb::Session, usize)> = roots.into_iter().rev().map(|s| (s, 0)).collect();
    while let Some((s, depth)) = stack.pop() {
        let agent = if s.agent_id.is_empty() {
            String::new()
        } else {
            format!("  ({})", s.agent_id)
        };
        out.push_str(&format!("{}{}{agent}\n", "  ".repeat(depth), s.session_id));
        if let Some(kids) = children.get(s.session_id.as_str()) {
            stack.extend(kids.iter().rev().map(|k| (*k, depth + 1)));
        }
    }
    if out.is_empty() {
        out.push_str("(no sessions)\n");
    }
    out
}

/// `cairn plan …`
pub async fn plan(client: &ClientArgs, cmd: PlanCmd) -> CliResult {
    let mut plans = pb::plan_service_client::PlanServiceClient::new(connect(&client.server).await?);
    let status_out = |s: Option<pb::PlanStatus>| {
        let s = s.unwrap_or_default();
        let value = json!({
            "mode": mode_name(s.mode()),
            "goal": s.goal,
            "pending_plan_id": s.pending.as_ref().map(|p| p.plan_id.clone()),
            "active_plan_id": s.active.as_ref().map(|a| a.plan_id.clone()),
            "progress": s.active.as_ref().map(|a| json!({"completed": a.completed_count, "total": a.total_count, "current_step_id": a.current_step_id})),
            "pending_modifications": s.pending_modifications.len(),
        });
        match client.output {
            Output::Json => emit_json(&value),
            Output::Text => {
                let mut text = format!("mode: {}\n", mode_name(s.mode()));
                if !s.goal.is_empty() {
                    text.push_str(&format!("goal: {}\n", s.goal));
                }
                if let Some(p) = &s.pending {
                    text.push_str(&format!(
                        "awaiting approval: {} — {}\n",
                        p.plan_id,
                        p.plan.as_ref().map_or("", |x| x.summary.as_str())
                    ));
                }
                if let Some(a) = &s.active {
                    text.push_str(&format!(
                        "active: {}  {} {}/{}\n",
                        a.plan_id,
                        render::bar(a.completed_count as usize, a.total_count as usize, 10),
                        a.completed_count,
                        a.total_count
                    ));
                }
                emit_plain(&text);
            }
        }
    };
    match cmd {
        PlanCmd::Show { session } => {
            let p = plans
                .get_plan(pb::GetPlanRequest {
                    session_id: session,
                })
                .await?
                .into_inner()
                .plan
                .unwrap_or_default();
            match client.output {
                Output::Json => emit_json(&plan_json(&p)),
                Output::Text => emit(&plan_box(&p)),
            }
        }
        PlanCmd::Update { session, file } => {
            #[derive(serde::Deserialize)]
            struct Step {
                step: String,
                status: String,
            }
            #[derive(serde::Deserialize)]
            struct Input {
                #[serde(default)]
                explanation: String,
                plan: Vec<Step>,
            }
            let input: Input = serde_json::from_str(&read_input(&file)?)?;
            let r = plans
                .update_plan(pb::UpdatePlanRequest {
                    session_id: session,
                    explanation: input.explanation,
                    plan: input
                        .plan
                        .into_iter()
                        .map(|s| pb::PlanItem {
                            id: 0,
                            step: s.step,
                            status: match s.status.as_str() {
                                "pending" => pb::StepStatus::Pending.into(),
                                "in_progress" => pb::StepStatus::InProgress.into(),
                                "completed" => pb::StepStatus::Completed.into(),
                                _ => pb::StepStatus::Unspecified.into(),
                            },
                        })
                        .collect(),
                    expected_revision: None,
                })
                .await?
                .into_inner();
            match (client.output, r.stored) {
                (Output::Json, _) => emit_json(&json!({
                    "message": r.message,
                    "stored": r.stored,
                    "hint": r.hint,
                    "revision": r.revision,
                    "plan": r.plan.iter().map(|i| json!({"id": i.id, "step": i.step, "status": status_name(i.status())})).collect::<Vec<_>>(),
                })),
                (Output::Text, false) => emit_plain(&format!("{}\n", r.hint)),
                (Output::Text, true) => {
                    emit_plain(&format!("{} (revision {})\n", r.message, r.revision));
                }
            }
        }
        PlanCmd::Status { session } => {
            let r = plans
                .get_plan_status(pb::GetPlanStatusRequest {
                    session_id: session,
                })
                .await?
                .into_inner();
            status_out(r.status);
        }
        PlanCmd::Approve { session, approver } => {
            let r = plans
                .approve_plan(pb::ApprovePlanRequest {
                    session_id: session,
                    approver,
                    expected_revision: None,
                })
                .await?
                .into_inner();
            status_out(r.status);
        }
        PlanCmd::Reject { session, reason } => {
            let r = plans
                .reject_plan(pb::RejectPlanRequest {
                    session_id: session,
                    reason,
                    expected_revision: None,
                })
                .await?
                .into_inner();
            status_out(r.status);
        }
        PlanCmd::History { session } => {
            let mut entries = Vec::new();
            let mut page_token = String::new();
            loop {
                let page = plans
                    .list_plan_history(pb::ListPlanHistoryRequest {
                        session_id: session.clone(),
                        page_size: 100,
                        page_token,
                    })
                    .await?
                    .into_inner();
                entries.extend(page.entries);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            let outcome = |e: &pb::PlanHistoryEntry| match e.outcome() {
                pb::PlanOutcome::Completed => "completed",
                pb::PlanOutcome::Rejected => "rejected",
                pb::PlanOutcome::Superseded => "superseded",
                pb::PlanOutcome::Unspecified => "",
            };
            match client.output {
                Output::Json => emit_json(&Value::Array(
                    entries
                        .iter()
                        .map(|e| {
                            json!({
                                "plan_id": e.plan_id,
                                "goal": e.goal,
                                "outcome": outcome(e),
                                "summary": e.summary,
                                "reason": e.reason,
                                "end_time": ts(e.end_time.as_ref()),
                            })
                        })
                        .collect(),
                )),
                Output::Text => {
                    let mut text = String::new();
                    for e in &entries {
                        text.push_str(&format!("{}  {:<10}  {}\n", e.plan_id, outcome(e), e.goal));
                    }
                    if text.is_empty() {
                        text.push_str("(no past plans)\n");
                    }
                    emit_plain(&text);
                }
            }
        }
    }
    Ok(())
}

/// `cairn todo …`
pub async fn todo(client: &ClientArgs, cmd: TodoCmd) -> CliResult {
    let mut todos = pb::todo_service_client::TodoServiceClient::new(connect(&client.server).await?);
    let list = match cmd {
        TodoCmd::Show { agent } => todos
            .read_todos(pb::ReadTodosRequest { agent_id: agent })
            .await?
            .into_inner()
            .list
            .unwrap_or_default(),
        TodoCmd::Write { agent, file } => {
            #[derive(serde::Deserialize)]
            struct Item {
                id: String,
                content: String,
                status: String,
                #[serde(default)]
                priority: Option<String>,
            }
            let items: Vec<Item> = serde_json::from_str(&read_input(&file)?)?;
            todos
                .write_todos(pb::WriteTodosRequest {
                    agent_id: agent,
                    todos: items
                        .into_iter()
                        .map(|i| pb::TodoItem {
                            id: i.id,
                            content: i.content,
                            status: match i.status.as_str() {
                                "pending" => pb::TodoStatus::Pending.into(),
                                "in_progress" => pb::TodoStatus::InProgress.into(),
                                "completed" => pb::TodoStatus::Completed.into(),
                                _ => pb::TodoStatus::Unspecified.into(),
                            },
                            priority: match i.priority.as_deref() {
                                Some("high") => pb::Priority::High.into(),
                                Some("low") => pb::Priority::Low.into(),
                                Some("medium") | None => pb::Priority::Medium.into(),
                                Some(_) => 99,
                            },
                            ..pb::TodoItem::default()
                        })
                        .collect(),
                    expected_revision: None,
                })
                .await?
                .into_inner()
                .list
                .unwrap_or_default()
        }
    };
    match client.output {
        Output::Json => {
            let mut value = crate::mcp::todo_json(&list);
            value["agent_id"] = json!(list.agent_id);
            value["revision"] = json!(list.revision);
            emit_json(&value);
        }
        Output::Text => emit(&todo_box(&list)),
    }
    Ok(())
}

/// `cairn wait`
pub async fn wait(client: &ClientArgs, args: WaitArgs) -> CliResult {
    let mut watch =
        pb::watch_service_client::WatchServiceClient::new(connect(&client.server).await?);
    let r = watch
        .wait(pb::WaitRequest {
            target: Some(pb::wait_request::Target::SessionTree(args.tree)),
            condition: pb::WaitCondition::AllPlansCompleted.into(),
            timeout: prost_types::Duration::try_from(args.timeout).ok(),
        })
        .await?
        .into_inner();
    match client.output {
        Output::Json => emit_json(&json!({
            "satisfied": r.satisfied,
            "revision": r.revision,
            "plans": r.plans.iter().map(plan_json).collect::<Vec<_>>(),
        })),
        Output::Text => {
            let mut text = format!(
                "{} at revision {}\n",
                if r.satisfied {
                    "all plans completed"
                } else {
                    "timed out"
                },
                r.revision
            );
            for p in &r.plans {
                let done = p
                    .items
                    .iter()
                    .filter(|i| i.status() == pb::StepStatus::Completed)
                    .count();
                text.push_str(&format!(
                    "{}  {} {}/{}\n",
                    p.session_id,
                    render::bar(done, p.items.len(), 10),
                    done,
                    p.items.len()
                ));
            }
            emit_plain(&text);
        }
    }
    if r.satisfied {
        Ok(())
    } else {
        Err("timed out before every plan was completed".into())
    }
}

/// What the board knows of one session.
#[derive(Debug, Clone, Default)]
struct Tracked {
    session: pb::Session,
    plan: Option<pb::Plan>,
    changed_micros: i64,
}

/// Board rows in tree order from what the board tracks.
fn board_rows(root: &str, tracked: &HashMap<String, Tracked>) -> Vec<BoardRow> {
    let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, t) in tracked {
        children
            .entry(t.session.parent_session_id.as_str())
            .or_default()
            .push(id.as_str());
    }
    let now = now_micros();
    let mut rows = Vec::new();
    let mut stack = vec![(root, 0usize)];
    while let Some((id, depth)) = stack.pop() {
        if let Some(t) = tracked.get(id) {
            let items = t
                .plan
                .as_ref()
                .map(|p| p.items.as_slice())
                .unwrap_or_default();
            rows.push(BoardRow {
                depth,
                session_id: id.to_owned(),
                agent_id: t.session.agent_id.clone(),
                done: items
                    .iter()
                    .filter(|i| i.status() == pb::StepStatus::Completed)
                    .count(),
                total: items.len(),
                current: items
                    .iter()
                    .find(|i| i.status() == pb::StepStatus::InProgress)
                    .map(|i| i.step.clone()),
                mode: t
                    .plan
                    .as_ref()
                    .and_then(|p| p.status.as_ref())
                    .map_or("normal", |s| mode_name(s.mode()))
                    .to_owned(),
                idle_secs: u64::try_from((now - t.changed_micros).max(0) / 1_000_000).unwrap_or(0),
            });
        }
        if let Some(kids) = children.get(id) {
            let mut kids = kids.clone();
            kids.sort_unstable();
            stack.extend(kids.into_iter().rev().map(|k| (k, depth + 1)));
        }
    }
    rows
}

/// `cairn watch`: events as lines, or for `--tree` a live board that
/// redraws on each change and survives server restarts by resuming from the
/// last complete revision.
pub async fn watch(client: &ClientArgs, args: WatchArgs) -> CliResult {
    let target = match (&args.tree, &args.session, &args.agent, args.all) {
        (Some(t), _, _, _) => pb::watch_request::Target::SessionTree(t.clone()),
        (_, Some(s), _, _) => pb::watch_request::Target::SessionId(s.clone()),
        (_, _, Some(a), _) => pb::watch_request::Target::AgentId(a.clone()),
        (_, _, _, true) => pb::watch_request::Target::All(true),
        _ => return Err("choose --tree, --session, --agent or --all".into()),
    };
    let board_root = args.tree.clone().filter(|_| args.from_revision.is_none());
    let interactive = color();
    let mut tracked: HashMap<String, Tracked> = HashMap::new();
    let mut resume: Option<u64> = args.from_revision;
    let mut last_complete = 0u64;
    let mut pending_redraw = false;
    let run = async {
        loop {
            let request = pb::WatchRequest {
                target: Some(target.clone()),
                start_revision: resume,
                send_initial_state: resume.is_none() && board_root.is_some(),
                progress_interval: None,
            };
            // Objects of the initial state carry their own revisions, not
            // the stream's position: draw once `synced` says it is whole.
            let mut in_snapshot = request.send_initial_state;
            let stream = match connect(&client.server).await {
                Ok(ch) => {
                    pb::watch_service_client::WatchServiceClient::new(ch)
                        .watch(request)
                        .await
                }
                Err(e) => Err(tonic::Status::unavailable(e.to_string())),
            };
            let mut stream = match stream {
                Ok(s) => s.into_inner(),
                Err(e) if e.code() == tonic::Code::FailedPrecondition => {
                    // Compacted: start over from the current state.
                    tracked.clear();
                    resume = None;
                    continue;
                }
                Err(e) if e.code() == tonic::Code::Unavailable => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                Err(e) => return Err::<(), Box<dyn std::error::Error + Send + Sync>>(Box::new(e)),
            };
            loop {
                // Disconnected (e.g. the server restarted): resume.
                let Ok(Some(msg)) = stream.message().await else {
                    break;
                };
                match msg.kind {
                    Some(pb::watch_response::Kind::Event(e)) => {
                        let complete = e.index_in_revision + 1 == e.events_in_revision;
                        if !in_snapshot && complete {
                            last_complete = last_complete.max(e.revision);
                        }
                        if let Some(root) = &board_root {
                            apply(root, &mut tracked, &e);
                            pending_redraw = true;
                            if complete && !in_snapshot {
                                draw(root, &tracked, last_complete, interactive);
                                pending_redraw = false;
                            }
                        } else {
                            print_event(client.output, &e);
                        }
                    }
                    Some(pb::watch_response::Kind::Synced(s)) => {
                        in_snapshot = false;
                        last_complete = last_complete.max(s.revision);
                        if let Some(root) = &board_root {
                            draw(root, &tracked, last_complete, interactive);
                            pending_redraw = false;
                        }
                    }
                    Some(pb::watch_response::Kind::Progress(p)) => {
                        last_complete = last_complete.max(p.revision);
                        if let Some(root) = &board_root
                            && (pending_redraw || interactive)
                        {
                            draw(root, &tracked, last_complete, interactive);
                            pending_redraw = false;
                        }
                    }
                    None => {}
                }
            }
            resume = Some(last_complete + 1);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    tokio::select! {
        r = run => r,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

fn apply(root: &str, tracked: &mut HashMap<String, Tracked>, e: &pb::Event) {
    let in_tree = e.session_id == root || e.ancestor_session_ids.iter().any(|a| a == root);
    match (e.r#type(), &e.object) {
        (pb::EventType::SessionDeleted, _) => {
            tracked.remove(&e.session_id);
        }
        (_, Some(pb::event::Object::Session(s))) => {
            if in_tree {
                let t = tracked.entry(s.session_id.clone()).or_default();
                t.session = s.clone();
                t.changed_micros = t.changed_micros.max(micros(s.update_time.as_ref()));
            } else {
                tracked.remove(&s.session_id);
            }
        }
        (_, Some(pb::event::Object::Plan(p))) => {
            let t = tracked.entry(p.session_id.clone()).or_default();
            if t.session.session_id.is_empty() {
                t.session.session_id.clone_from(&p.session_id);
                t.session.parent_session_id.clone_from(&e.parent_session_id);
                t.session.agent_id.clone_from(&e.agent_id);
            }
            t.changed_micros = t.changed_micros.max(micros(p.update_time.as_ref()));
            t.plan = Some(p.clone());
        }
        _ => {}
    }
}

fn draw(root: &str, tracked: &HashMap<String, Tracked>, revision: u64, interactive: bool) {
    let text = render::board(
        &format!("tree {root}"),
        &board_rows(root, tracked),
        revision,
        interactive,
    );
    if interactive {
        // Home and clear, then the frame: a redraw, not a scroll.
        emit(&format!("\x1b[H\x1b[2J{text}"));
    } else {
        emit(&format!("{text}\n"));
    }
}

fn print_event(output: Output, e: &pb::Event) {
    let kind = match e.r#type() {
        pb::EventType::SessionCreated => "session created",
        pb::EventType::SessionUpdated => "session updated",
        pb::EventType::SessionDeleted => "session deleted",
        pb::EventType::PlanUpdated => "plan updated",
        pb::EventType::TodosUpdated => "todos updated",
        pb::EventType::TodosCleared => "todos cleared",
        pb::EventType::Unspecified => "event",
    };
    match output {
        Output::Json => emit(&format!(
            "{}\n",
            json!({
                "revision": e.revision,
                "type": kind,
                "session_id": e.session_id,
                "agent_id": e.agent_id,
                "parent_session_id": e.parent_session_id,
                "plan": match &e.object { Some(pb::event::Object::Plan(p)) => plan_json(p), _ => Value::Null },
            })
        )),
        Output::Text => {
            let who = if e.session_id.is_empty() {
                &e.agent_id
            } else {
                &e.session_id
            };
            let detail = match &e.object {
                Some(pb::event::Object::Plan(p)) => {
                    let done = p
                        .items
                        .iter()
                        .filter(|i| i.status() == pb::StepStatus::Completed)
                        .count();
                    format!("  {done}/{}", p.items.len())
                }
                Some(pb::event::Object::Todos(t)) => format!("  {} todos", t.todos.len()),
                _ => String::new(),
            };
            emit_plain(&format!("{:>6}  {kind:<16} {who}{detail}\n", e.revision));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(id: &str, parent: &str, agent: &str) -> pb::Session {
        pb::Session {
            session_id: id.into(),
            parent_session_id: parent.into(),
            agent_id: agent.into(),
            ..pb::Session::default()
        }
    }

    #[test]
    fn sessions_print_as_a_tree() {
        let all = vec![
            s("b", "", ""),
            s("a", "", "main"),
            s("a:2", "a", "coder"),
            s("a:1", "a", "researcher"),
            s("a:1:x", "a:1", ""),
        ];
        insta::assert_snapshot!(session_tree(&all));
    }
}
