//! The one-shot client commands: sessions, plans, todos, `wait`.

// Text assembly reads best as pushes of formatted lines, and each
// subcommand as one match over its variants.
#![allow(clippy::format_push_string, clippy::too_many_lines)]

use std::collections::BTreeMap;

use cairn_api as pb;
use serde_json::{Value, json};

use super::args::{ClientArgs, Output, PlanCmd, SessionCmd, TodoCmd, WaitArgs};
use super::io::{CliResult, color, emit, emit_json, emit_plain, read_input};
use super::render::{self, Mark};
use crate::view::{self, plan_json, session_json};

fn plan_box(p: &pb::Plan) -> String {
    let items: Vec<(Mark, String)> = p
        .items
        .iter()
        .map(|i| {
            let mark = match i.status() {
                pb::StepStatus::Completed => Mark::Done,
                pb::StepStatus::Cancelled => Mark::Cancelled,
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
    let channel = client.server.connect().await?;
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
    let now = view::now_micros();
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
        let life = s.lease.as_ref().map_or_else(String::new, |l| {
            let (state, secs) = view::liveness_of(l, now);
            format!("  [{}, seen {} ago]", state.to_uppercase(), view::ago(secs))
        });
        out.push_str(&format!(
            "{}{}{agent}{life}\n",
            "  ".repeat(depth),
            s.session_id
        ));
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
    let mut plans = pb::plan_service_client::PlanServiceClient::new(client.server.connect().await?);
    let status_out = |s: Option<pb::PlanStatus>| {
        let s = s.unwrap_or_default();
        // The same shape as the `plan_status` tool's.
        let value = view::plan_status_json(&s);
        match client.output {
            Output::Json => emit_json(&value),
            Output::Text => {
                let mut text = format!("mode: {}\n", view::mode_label(s.mode()));
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
            let input: view::UpdatePlanArgs = serde_json::from_str(&read_input(&file)?)?;
            let r = plans
                .update_plan(input.request(session)?)
                .await?
                .into_inner();
            match (client.output, r.stored) {
                (Output::Json, _) => emit_json(&json!({
                    "message": r.message,
                    "stored": r.stored,
                    "hint": r.hint,
                    "revision": r.revision,
                    "plan": r.plan.iter().map(|i| json!({"id": i.id, "step": i.step, "status": view::step_status_name(i.status())})).collect::<Vec<_>>(),
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
                                "end_time": view::timestamp_json(e.end_time.as_ref()),
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
    let mut todos = pb::todo_service_client::TodoServiceClient::new(client.server.connect().await?);
    let list = match cmd {
        TodoCmd::Show { agent } => todos
            .read_todos(pb::ReadTodosRequest { agent_id: agent })
            .await?
            .into_inner()
            .list
            .unwrap_or_default(),
        TodoCmd::Write { agent, file } => {
            let items: Vec<view::TodoArg> = serde_json::from_str(&read_input(&file)?)?;
            todos
                .write_todos(pb::WriteTodosRequest {
                    agent_id: agent,
                    todos: view::todo_items(items)?,
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
            let mut value = view::todo_json(&list);
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
        pb::watch_service_client::WatchServiceClient::new(client.server.connect().await?);
    let r = watch
        .wait(pb::WaitRequest {
            target: Some(pb::wait_request::Target::SessionTree(args.tree)),
            condition: pb::WaitCondition::AllPlansCompleted.into(),
            timeout: prost_types::Duration::try_from(args.timeout).ok(),
            fail_fast: Some(!args.keep_waiting),
        })
        .await?
        .into_inner();
    let now = view::now_micros();
    let lost: Vec<String> = r.lost.iter().map(|l| view::lost_sentence(l, now)).collect();
    match client.output {
        Output::Json => emit_json(&json!({
            "satisfied": r.satisfied,
            "revision": r.revision,
            "plans": r.plans.iter().map(plan_json).collect::<Vec<_>>(),
            "lost": r.lost.iter().zip(&lost).map(|(l, text)| json!({
                "session_id": l.session_id,
                "agent_id": l.agent_id,
                "step_id": l.step_id,
                "step": l.step,
                "last_seen_time": view::timestamp_json(l.last_seen_time.as_ref()),
                "message": text,
            })).collect::<Vec<_>>(),
        })),
        Output::Text => {
            let mut text = format!(
                "{} at revision {}\n",
                if r.satisfied {
                    "all plans completed"
                } else if !r.lost.is_empty() {
                    "a sub-agent was lost"
                } else {
                    "timed out"
                },
                r.revision
            );
            for l in &lost {
                text.push_str(&format!("{l}\n"));
            }
            for p in &r.plans {
                let at = view::progress(&p.items);
                text.push_str(&format!(
                    "{}  {} {}/{}\n",
                    p.session_id,
                    render::bar(at.done, at.total, 10),
                    at.done,
                    at.total
                ));
            }
            emit_plain(&text);
        }
    }
    if r.satisfied {
        Ok(())
    } else if !lost.is_empty() {
        Err(lost.join("\n").into())
    } else {
        Err("timed out before every plan was completed".into())
    }
}

/// What the board knows of one session.
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
