//! `cairn watch`: events as lines, or for `--tree` a live board that
//! redraws on each change and survives server restarts by resuming from
//! the last complete revision.

// Text assembly reads best as pushes of formatted lines.
#![allow(clippy::format_push_string, clippy::too_many_lines)]

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use cairn_api as pb;

use super::args::{ClientArgs, Output, WatchArgs};
use super::io::{CliResult, color, emit, emit_plain};
use super::render::{self, BoardRow};
use crate::view;

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
    let now = view::now_micros();
    let mut rows = Vec::new();
    let mut stack = vec![(root, 0usize)];
    while let Some((id, depth)) = stack.pop() {
        if let Some(t) = tracked.get(id) {
            let items = t
                .plan
                .as_ref()
                .map(|p| p.items.as_slice())
                .unwrap_or_default();
            let at = view::progress(items);
            rows.push(BoardRow {
                depth,
                session_id: id.to_owned(),
                agent_id: t.session.agent_id.clone(),
                done: at.done,
                total: at.total,
                current: at.current.map(str::to_owned),
                mode: t
                    .plan
                    .as_ref()
                    .and_then(|p| p.status.as_ref())
                    .map_or_else(|| "normal".to_owned(), |s| view::mode_label(s.mode())),
                idle_secs: view::secs_between(t.changed_micros, now),
                liveness: t.session.lease.as_ref().map(|l| {
                    let (state, secs) = view::liveness_of(l, now);
                    (state.to_owned(), secs)
                }),
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
            let stream = match client.server.connect().await {
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
                t.changed_micros = t.changed_micros.max(view::micros(s.update_time.as_ref()));
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
            t.changed_micros = t.changed_micros.max(view::micros(p.update_time.as_ref()));
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
    match output {
        Output::Json => emit(&format!("{}\n", view::event_json(e))),
        Output::Text => {
            let kind = view::event_type_name(e.r#type()).replace('_', " ");
            let who = if e.session_id.is_empty() {
                &e.agent_id
            } else {
                &e.session_id
            };
            let detail = match &e.object {
                Some(pb::event::Object::Plan(p)) => {
                    let at = view::progress(&p.items);
                    format!("  {}/{}", at.done, at.total)
                }
                Some(pb::event::Object::Todos(t)) => format!("  {} todos", t.todos.len()),
                _ => String::new(),
            };
            emit_plain(&format!("{:>6}  {kind:<16} {who}{detail}\n", e.revision));
        }
    }
}
