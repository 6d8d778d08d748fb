//! `cairn inbox`: what awaits your approval across every tree, oldest
//! first. Printed once (a table, or JSON for scripts), or on a terminal a
//! live list fed by the inbox watch, decided on by number:
//!
//! ```text
//!  a N          approve item N
//!  r N REASON   reject item N, telling its agent why
//!  q            quit
//! ```
//!
//! A lost connection (a server restart) is followed by a fresh initial
//! state, so the list never keeps an item decided meanwhile.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::Duration;

use crate::conn::Api;
use cairn_api as pb;
use serde_json::json;
use tokio::io::AsyncBufReadExt;

use super::args::{ClientArgs, InboxArgs, Output};
use super::io::{CliResult, emit, emit_json};
use super::render;
use crate::view;

type Plans = pb::plan_service_client::PlanServiceClient<Api>;

/// `cairn inbox`.
pub async fn inbox(client: &ClientArgs, args: InboxArgs) -> CliResult {
    let live = !args.once
        && client.output == Output::Text
        && std::io::stdin().is_terminal()
        && std::io::stdout().is_terminal();
    let channel = client.server.connect().await?;
    if live {
        return follow(channel).await;
    }
    let mut plans = Plans::new(channel);
    let mut items = Vec::new();
    let mut page_token = String::new();
    let revision = loop {
        let page = plans
            .list_inbox(pb::ListInboxRequest {
                page_size: 500,
                page_token,
            })
            .await?
            .into_inner();
        items.extend(page.items);
        if page.next_page_token.is_empty() {
            break page.revision;
        }
        page_token = page.next_page_token;
    };
    let now = view::now_micros();
    match client.output {
        Output::Json => emit_json(&json!({
            "items": items.iter().map(|i| view::inbox_item_json(i, now)).collect::<Vec<_>>(),
            "revision": revision,
        })),
        Output::Text => emit(&render::inbox(&items, now)),
    }
    Ok(())
}

/// Where an item sorts: oldest first, as the server orders them.
type Key = (i64, String, u32);

fn key(i: &pb::InboxItem) -> Key {
    let id = i.modification.as_ref().map_or(0, |m| m.modification_id);
    (
        view::micros(i.waiting_since.as_ref()),
        i.session_id.clone(),
        id,
    )
}

/// What a typed line asks.
#[derive(Debug, PartialEq, Eq)]
enum Typed {
    Approve(usize),
    Reject(usize, String),
    Quit,
}

fn parse(line: &str) -> Result<Typed, String> {
    let line = line.trim();
    let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
    let (n, reason) = rest.trim().split_once(' ').unwrap_or((rest.trim(), ""));
    let number = || {
        n.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
            format!(
                "{:?} is not an item number",
                n.chars().take(20).collect::<String>()
            )
        })
    };
    match verb {
        "a" | "approve" => Ok(Typed::Approve(number()?)),
        "r" | "reject" => Ok(Typed::Reject(number()?, reason.trim().to_owned())),
        "q" | "quit" => Ok(Typed::Quit),
        _ => Err("type a N to approve, r N REASON to reject, q to quit".into()),
    }
}

/// The live list until `q` or the end of input.
async fn follow(channel: Api) -> CliResult {
    let mut plans = Plans::new(channel.clone());
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut note = String::new();
    'connect: loop {
        let mut watch = pb::watch_service_client::WatchServiceClient::new(channel.clone());
        let opened = watch
            .watch(pb::WatchRequest {
                target: Some(pb::watch_request::Target::Inbox(true)),
                send_initial_state: true,
                ..Default::default()
            })
            .await;
        let mut stream = match opened {
            Ok(s) => s.into_inner(),
            Err(e) => {
                draw(&BTreeMap::new(), &format!("reconnecting: {}", e.message()));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut items: BTreeMap<Key, pb::InboxItem> = BTreeMap::new();
        let mut synced = false;
        loop {
            tokio::select! {
                message = stream.message() => {
                    let Ok(Some(pb::WatchResponse { kind })) = message else {
                        note = "reconnecting…".into();
                        draw(&items, &note);
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue 'connect;
                    };
                    match kind {
                        Some(pb::watch_response::Kind::Event(e)) => {
                            let added = e.r#type() == pb::EventType::InboxItemAdded;
                            if let Some(pb::event::Object::InboxItem(i)) = e.object {
                                if added {
                                    items.insert(key(&i), i);
                                } else {
                                    items.remove(&key(&i));
                                }
                            }
                            if synced && e.index_in_revision + 1 >= e.events_in_revision {
                                draw(&items, &note);
                            }
                        }
                        Some(pb::watch_response::Kind::Synced(_)) => {
                            synced = true;
                            draw(&items, &note);
                        }
                        _ => {}
                    }
                }
                line = lines.next_line() => {
                    let Ok(Some(line)) = line else {
                        return Ok(());
                    };
                    note = match parse(&line) {
                        Ok(Typed::Quit) => return Ok(()),
                        Ok(typed) => decide(&mut plans, &items, typed).await,
                        Err(e) => e,
                    };
                    draw(&items, &note);
                }
            }
        }
    }
}

/// Carries out a decision on the numbered item; what to tell the person.
async fn decide(plans: &mut Plans, items: &BTreeMap<Key, pb::InboxItem>, typed: Typed) -> String {
    let (n, reason) = match &typed {
        Typed::Approve(n) => (*n, None),
        Typed::Reject(n, reason) => (*n, Some(reason.clone())),
        Typed::Quit => return String::new(),
    };
    let Some(item) = items.values().nth(n - 1) else {
        return format!("there is no item {n}");
    };
    let session_id = item.session_id.clone();
    let verdict = match reason {
        None => view::Verdict::Approve {
            approver: std::env::var("USER").unwrap_or_else(|_| "cli".into()),
        },
        Some(reason) => view::Verdict::Reject { reason },
    };
    let modification_id = item.modification.as_ref().map(|m| m.modification_id);
    let done = view::decide(plans, session_id.clone(), modification_id, verdict).await;
    let verb = if matches!(typed, Typed::Approve(_)) {
        "approved"
    } else {
        "rejected"
    };
    match done {
        Ok(_) => format!("{verb} {n} ({})", render::printable(&session_id)),
        Err(e) => format!("{n}: {}", render::printable(e.message())),
    }
}

fn draw(items: &BTreeMap<Key, pb::InboxItem>, note: &str) {
    let list: Vec<pb::InboxItem> = items.values().cloned().collect();
    let mut text = render::inbox_table(&list, view::now_micros());
    text.push_str("\na N: approve · r N REASON: reject · q: quit\n");
    if !note.is_empty() {
        text.push_str(note);
        text.push('\n');
    }
    text.push_str("> ");
    // Home and clear, then the frame: a redraw, not a scroll.
    emit(&format!("\x1b[H\x1b[2J{text}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_lines() {
        assert_eq!(parse("a 2"), Ok(Typed::Approve(2)));
        assert_eq!(
            parse(" r 1 not now, too wide "),
            Ok(Typed::Reject(1, "not now, too wide".into()))
        );
        assert_eq!(parse("r 3"), Ok(Typed::Reject(3, String::new())));
        assert_eq!(parse("q"), Ok(Typed::Quit));
        assert!(parse("a 0").is_err());
        assert!(parse("a two").is_err());
        assert!(parse("approve").is_err());
        assert!(parse("x 1").is_err());
    }
}
