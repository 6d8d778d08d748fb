//! The watch-guarantee checker.
//!
//! Random concurrent writers (sessions, moves, deletes, plans, plan mode,
//! todos) and several watchers with random targets that disconnect and
//! resume at random, one of them deliberately slow, against a server whose
//! per-watcher live buffer is tiny so that overflow and log catch-up happen all
//! the time. Afterwards the committed history is replayed from the log and
//! run through an independent model of the session tree; every watcher's
//! stream must equal the model's answer for its target: ordered, unique,
//! gap-free, revisions whole.
//!
//! `CAIRN_CHECKER_OPS` (ops per writer, default 40) and
//! `CAIRN_CHECKER_SEED` make longer or reproducible runs.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_api as pb;
use cairn_api::EventType;
use cairn_api::watch_request::Target;
use cairn_api::watch_response::Kind;
use cairn_api::watch_service_client::WatchServiceClient;
use tonic::Code;
use tonic::transport::Channel;

use cairn_testkit::stream::{history, next};
use cairn_testkit::{TestServer, five_steps, rev, session, todo, update};

/// Comparable form of a delivered event.
type Key = (u64, EventType, String, String, u32, u32);

fn key(e: &pb::Event) -> Key {
    (
        e.revision,
        e.r#type(),
        e.session_id.clone(),
        e.agent_id.clone(),
        e.index_in_revision,
        e.events_in_revision,
    )
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_match_a_replay_of_history() {
    let ops = env_or("CAIRN_CHECKER_OPS", 40);
    let seed = env_or("CAIRN_CHECKER_SEED", fastrand::u64(..));
    eprintln!("watch checker: CAIRN_CHECKER_SEED={seed} CAIRN_CHECKER_OPS={ops}");
    let server = TestServer::start_engine(|_| {}, |e| e.watch_buffer = 2).await;
    let channel = server.channel().await;
    let mut sessions = pb::session_service_client::SessionServiceClient::new(channel.clone());
    for root in ["r0", "r1"] {
        sessions.create_session(session(root, "")).await.unwrap();
    }
    let known = Arc::new(Mutex::new(vec!["r0".to_string(), "r1".to_string()]));

    // Watchers first, so some start live; others replay from revision 1.
    let (final_tx, final_rx) = tokio::sync::watch::channel(None::<u64>);
    let targets = vec![
        (Target::SessionTree("r0".into()), 1, false),
        (Target::SessionTree("r1".into()), 3, true),
        (Target::SessionId("r0".into()), 1, false),
        (Target::AgentId("agent-1".into()), 1, false),
        (Target::All(true), 1, false),
        (Target::SessionTree("w0-0".into()), 1, false),
    ];
    let mut watchers = Vec::new();
    for (i, (target, start, slow)) in targets.into_iter().enumerate() {
        let client = WatchServiceClient::new(channel.clone());
        let final_rx = final_rx.clone();
        let rng = fastrand::Rng::with_seed(seed ^ (1000 + i as u64));
        watchers.push(tokio::spawn(watcher(
            client,
            target.clone(),
            start,
            slow,
            rng,
            final_rx,
        )));
    }

    let mut writers = Vec::new();
    for w in 0..4u64 {
        let channel = channel.clone();
        let known = Arc::clone(&known);
        let rng = fastrand::Rng::with_seed(seed ^ w);
        writers.push(tokio::spawn(writer(channel, known, w, ops, rng)));
    }
    for w in writers {
        w.await.unwrap();
    }
    let last = pb::plan_service_client::PlanServiceClient::new(channel.clone())
        .update_plan(update("r0", five_steps()))
        .await
        .unwrap()
        .into_inner()
        .revision;
    final_tx.send(Some(last)).unwrap();

    let mut streams = Vec::new();
    for w in watchers {
        streams.push(w.await.unwrap());
    }
    let mut client = WatchServiceClient::new(channel.clone());
    let log = history(&mut client, last).await;
    // The replay itself: every revision 1..=last, whole, in order.
    let revs: Vec<u64> = log
        .iter()
        .filter(|e| e.index_in_revision == 0)
        .map(|e| e.revision)
        .collect();
    assert_eq!(
        revs,
        (rev(1)..=last).collect::<Vec<_>>(),
        "the log has every revision once"
    );

    for (target, start, got) in streams {
        let expected = expected(&log, &target, start, last);
        assert_eq!(
            got.len(),
            expected.len(),
            "{target:?} from {start}: {} events, expected {} (seed {seed})",
            got.len(),
            expected.len()
        );
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(
                g, e,
                "{target:?} from {start}: event {i} differs (seed {seed})"
            );
        }
    }
}

async fn writer(
    channel: Channel,
    known: Arc<Mutex<Vec<String>>>,
    w: u64,
    ops: u64,
    mut rng: fastrand::Rng,
) {
    let mut sessions = pb::session_service_client::SessionServiceClient::new(channel.clone());
    let mut plans = pb::plan_service_client::PlanServiceClient::new(channel.clone());
    let mut todos = pb::todo_service_client::TodoServiceClient::new(channel);
    let pick = |rng: &mut fastrand::Rng| -> String {
        let k = known.lock().unwrap();
        k[rng.usize(..k.len())].clone()
    };
    for i in 0..ops {
        let result = match rng.u32(..100) {
            0..=24 => {
                let id = format!("w{w}-{i}");
                let parent = if rng.bool() {
                    pick(&mut rng)
                } else {
                    String::new()
                };
                let r = sessions
                    .create_session(session(&id, &parent))
                    .await
                    .map(|_| ());
                if r.is_ok() {
                    known.lock().unwrap().push(id);
                }
                r
            }
            25..=54 => {
                let mut items = five_steps();
                items[rng.usize(..5)].step = format!("step {i}");
                plans
                    .update_plan(update(&pick(&mut rng), items))
                    .await
                    .map(|_| ())
            }
            55..=64 => plans
                .enter_plan_mode(pb::EnterPlanModeRequest {
                    session_id: pick(&mut rng),
                    goal: "g".into(),
                    scope: String::new(),
                    expected_revision: None,
                })
                .await
                .map(|_| ()),
            65..=84 => {
                let agent = format!("agent-{}", rng.u32(..3));
                let items = (0..rng.usize(..4))
                    .map(|k| todo(&format!("t{k}"), pb::TodoStatus::Pending))
                    .collect();
                todos
                    .write_todos(pb::WriteTodosRequest {
                        agent_id: agent,
                        todos: items,
                        expected_revision: None,
                    })
                    .await
                    .map(|_| ())
            }
            85..=94 => {
                let s = pick(&mut rng);
                let parent = if rng.u32(..4) == 0 {
                    String::new()
                } else {
                    pick(&mut rng)
                };
                sessions
                    .update_session(pb::UpdateSessionRequest {
                        session_id: s,
                        parent_session_id: Some(parent),
                        ..Default::default()
                    })
                    .await
                    .map(|_| ())
            }
            _ => {
                let s = pick(&mut rng);
                if s == "r0" || s == "r1" {
                    continue;
                }
                sessions
                    .delete_session(pb::DeleteSessionRequest {
                        session_id: s,
                        cascade: true,
                        expected_revision: None,
                    })
                    .await
                    .map(|_| ())
            }
        };
        // Rule errors are expected in a random workload; server faults are not.
        if let Err(e) = result {
            assert!(
                matches!(
                    e.code(),
                    Code::NotFound
                        | Code::FailedPrecondition
                        | Code::InvalidArgument
                        | Code::AlreadyExists
                ),
                "unexpected {e:?}"
            );
        }
    }
}

/// Collects whole revisions, disconnecting at random and resuming after the
/// last complete revision, until it has everything up to the final revision.
async fn watcher(
    mut client: WatchServiceClient<Channel>,
    target: Target,
    start: u64,
    slow: bool,
    mut rng: fastrand::Rng,
    final_rx: tokio::sync::watch::Receiver<Option<u64>>,
) -> (Target, u64, Vec<Key>) {
    let mut collected: Vec<Key> = Vec::new();
    let mut resume = start;
    let done = |resume: u64| final_rx.borrow().is_some_and(|f| resume > f);
    'connect: while !done(resume) {
        let mut stream = client
            .watch(pb::WatchRequest {
                target: Some(target.clone()),
                start_revision: Some(resume),
                send_initial_state: false,
                progress_interval: Some(prost_types::Duration {
                    seconds: 0,
                    nanos: 20_000_000,
                }),
            })
            .await
            .unwrap()
            .into_inner();
        let mut budget = rng.usize(1..30);
        let mut partial: Vec<Key> = Vec::new();
        loop {
            match next(&mut stream).await {
                Kind::Event(e) => {
                    assert!(
                        e.revision >= resume,
                        "{target:?}: revision {} before {resume}",
                        e.revision
                    );
                    let complete = e.index_in_revision + 1 == e.events_in_revision;
                    partial.push(key(&e));
                    if complete {
                        collected.append(&mut partial);
                        resume = e.revision + 1;
                    }
                    budget = budget.saturating_sub(1);
                }
                Kind::Progress(p) => {
                    assert!(
                        partial.is_empty(),
                        "{target:?}: heartbeat inside a revision"
                    );
                    resume = resume.max(p.revision + 1);
                }
                Kind::Synced(_) => panic!("no snapshot was asked for"),
            }
            if done(resume) {
                break 'connect;
            }
            if slow {
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            if budget == 0 {
                // Disconnect, possibly mid-revision; the partial revision
                // will be delivered again, whole.
                continue 'connect;
            }
        }
    }
    (target, start, collected)
}

/// What a replay of history says `target` should have seen in
/// `start..=last`, with tree membership from an independent model.
fn expected(log: &[pb::Event], target: &Target, start: u64, last: u64) -> Vec<Key> {
    let mut parent: HashMap<String, String> = HashMap::new();
    let chain = |parent: &HashMap<String, String>, s: &str| -> HashSet<String> {
        let mut out = HashSet::new();
        let mut cursor = parent.get(s).cloned().unwrap_or_default();
        while !cursor.is_empty() && out.insert(cursor.clone()) {
            cursor = parent.get(&cursor).cloned().unwrap_or_default();
        }
        out
    };
    let mut out: Vec<Key> = Vec::new();
    let mut i = 0;
    while i < log.len() {
        let revision = log[i].revision;
        let mut matched = Vec::new();
        let mut deleted = Vec::new();
        while i < log.len() && log[i].revision == revision {
            let e = &log[i];
            let s = e.session_id.as_str();
            let in_tree = |root: &str, parent: &HashMap<String, String>| {
                s == root || chain(parent, s).contains(root)
            };
            let hit = match target {
                Target::All(_) => true,
                // This log is an `all` watch's, which has no inbox events;
                // the inbox is checked in inbox.rs.
                Target::Inbox(_) => false,
                Target::SessionId(id) => s == id,
                Target::AgentId(a) => {
                    matches!(
                        e.r#type(),
                        EventType::TodosUpdated | EventType::TodosCleared
                    ) && e.agent_id == *a
                }
                Target::SessionTree(root) => match e.r#type() {
                    EventType::SessionCreated => {
                        parent.insert(s.into(), e.parent_session_id.clone());
                        in_tree(root, &parent)
                    }
                    EventType::SessionUpdated => {
                        let before = in_tree(root, &parent);
                        parent.insert(s.into(), e.parent_session_id.clone());
                        before || in_tree(root, &parent)
                    }
                    EventType::SessionDeleted => {
                        deleted.push(s.to_string());
                        in_tree(root, &parent)
                    }
                    EventType::PlanUpdated => in_tree(root, &parent),
                    _ => false,
                },
            };
            if hit {
                matched.push(e);
            }
            i += 1;
        }
        for d in deleted {
            parent.remove(&d);
        }
        if revision >= start && revision <= last {
            let count = u32::try_from(matched.len()).unwrap();
            for (k, e) in matched.into_iter().enumerate() {
                let mut key = key(e);
                key.4 = u32::try_from(k).unwrap();
                key.5 = count;
                out.push(key);
            }
        }
    }
    out
}
