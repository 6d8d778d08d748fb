//! Crash safety: the real `cairn serve` binary under concurrent writes,
//! killed with SIGKILL at random moments and restarted on the same data dir.
//!
//! After every restart: each acknowledged mutation is there with its
//! content, revisions have no holes and never went backwards, every plan
//! equals its last logged event (nothing half-applied), and the log replays
//! to the stored state. `CAIRN_CRASH_ROUNDS` (default 3) runs longer.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cairn_api as pb;
use cairn_api::watch_service_client::WatchServiceClient;
use tonic::transport::Channel;

use cairn_testkit::Proc;
use cairn_testkit::{five_steps, todo, update};

use crate::bin;
use cairn_testkit::stream::history;

const CLIENTS: usize = 4;

/// What a client was told: the revision and first step of each
/// acknowledged plan update, and the revision of each todo write.
#[derive(Default, Debug, Clone)]
struct Acks {
    plans: Vec<(String, u64, String)>,
    todos: Vec<(String, u64, String)>,
}

async fn client(channel: Channel, c: usize, round: usize, stop: Arc<AtomicBool>) -> Acks {
    let mut plans = pb::plan_service_client::PlanServiceClient::new(channel.clone());
    let mut todos = pb::todo_service_client::TodoServiceClient::new(channel);
    let session = format!("crash-{c}");
    let agent = format!("agent-{c}");
    let mut acks = Acks::default();
    for k in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let text = format!("c{c}-r{round}-k{k}");
        if k % 3 == 2 {
            let req = pb::WriteTodosRequest {
                agent_id: agent.clone(),
                todos: vec![todo(&text, pb::TodoStatus::InProgress)],
                expected_revision: None,
            };
            match todos.write_todos(req).await {
                Ok(r) => acks
                    .todos
                    .push((agent.clone(), r.into_inner().revision, text)),
                Err(_) => break,
            }
        } else {
            let mut items = five_steps();
            items[0].step.clone_from(&text);
            match plans.update_plan(update(&session, items)).await {
                Ok(r) => acks
                    .plans
                    .push((session.clone(), r.into_inner().revision, text)),
                Err(_) => break,
            }
        }
    }
    acks
}

async fn verify(channel: Channel, acks: &Acks, max_acked: u64) {
    let mut plans = pb::plan_service_client::PlanServiceClient::new(channel.clone());
    let mut todos = pb::todo_service_client::TodoServiceClient::new(channel.clone());
    let mut watch = WatchServiceClient::new(channel);
    let current = todos
        .read_todos(pb::ReadTodosRequest {
            agent_id: "agent-0".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .revision;
    assert!(
        current >= max_acked,
        "revision went backwards: {current} < acknowledged {max_acked}"
    );
    let log = history(&mut watch, current).await;
    let revisions: Vec<u64> = log
        .iter()
        .filter(|e| e.index_in_revision == 0)
        .map(|e| e.revision)
        .collect();
    assert_eq!(
        revisions,
        (1..=current).collect::<Vec<_>>(),
        "the log has a hole"
    );

    // Every acknowledged mutation is in the log at its revision, as written.
    let by_revision: HashMap<u64, Vec<&pb::Event>> = log.iter().fold(HashMap::new(), |mut m, e| {
        m.entry(e.revision).or_default().push(e);
        m
    });
    for (session, rev, text) in &acks.plans {
        let found = by_revision[rev].iter().any(|e| {
            matches!(&e.object, Some(pb::event::Object::Plan(p)) if p.session_id == *session && p.items[0].step == *text)
        });
        assert!(
            found,
            "acknowledged plan {text} at revision {rev} is missing"
        );
    }
    for (agent, rev, text) in &acks.todos {
        let found = by_revision[rev].iter().any(|e| {
            matches!(&e.object, Some(pb::event::Object::Todos(t)) if t.agent_id == *agent && t.todos.iter().any(|i| i.id == *text))
        });
        assert!(
            found,
            "acknowledged todo {text} at revision {rev} is missing"
        );
    }

    // The stored state is exactly what the log replays to.
    let mut last_plan: HashMap<String, pb::Plan> = HashMap::new();
    let mut last_todos: HashMap<String, pb::TodoList> = HashMap::new();
    for e in &log {
        match &e.object {
            Some(pb::event::Object::Plan(p)) => {
                last_plan.insert(p.session_id.clone(), p.clone());
            }
            Some(pb::event::Object::Todos(t)) => {
                last_todos.insert(t.agent_id.clone(), t.clone());
            }
            _ => {}
        }
    }
    for (session, logged) in &last_plan {
        let stored = plans
            .get_plan(pb::GetPlanRequest {
                session_id: session.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .plan
            .unwrap();
        assert_eq!(
            &stored, logged,
            "plan of {session} disagrees with its last event"
        );
    }
    for (agent, logged) in &last_todos {
        let stored = todos
            .read_todos(pb::ReadTodosRequest {
                agent_id: agent.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .list
            .unwrap();
        assert_eq!(
            &stored, logged,
            "todos of {agent} disagree with their last event"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    let rounds: usize = std::env::var("CAIRN_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let dir = tempfile::tempdir().unwrap();
    let mut all = Acks::default();
    let mut max_acked = 0;
    for round in 0..rounds {
        let server = Proc::start(&bin(), dir.path(), &[]);
        let channel = server.channel().await;
        // Whatever was acknowledged before the last kill is all still there.
        verify(channel.clone(), &all, max_acked).await;

        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..CLIENTS)
            .map(|c| tokio::spawn(client(channel.clone(), c, round, Arc::clone(&stop))))
            .collect();
        tokio::time::sleep(Duration::from_millis(100 + fastrand::u64(..400))).await;
        server.kill();
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            let acks = t.await.unwrap();
            max_acked = acks
                .plans
                .iter()
                .chain(&acks.todos)
                .map(|a| a.1)
                .max()
                .unwrap_or(0)
                .max(max_acked);
            all.plans.extend(acks.plans);
            all.todos.extend(acks.todos);
        }
    }
    let server = Proc::start(&bin(), dir.path(), &[]);
    verify(server.channel().await, &all, max_acked).await;
    eprintln!(
        "crash test: {rounds} kills, {} plan and {} todo writes acknowledged, last revision {max_acked}",
        all.plans.len(),
        all.todos.len()
    );
    assert!(
        !all.plans.is_empty(),
        "the load generated acknowledged writes"
    );
    server.kill();
}
