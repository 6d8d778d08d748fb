//! Watch and Wait over gRPC (docs/rules.md): an orchestrator following its
//! sub-agents' session tree.

use std::time::Duration;

use cairn_api as pb;
use cairn_api::EventType;
use cairn_api::watch_request::Target;
use cairn_api::watch_response::Kind;
use cairn_api::watch_service_client::WatchServiceClient;
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt;

use cairn_testkit::stream::{PATIENCE, Seen, events, history, next, seen, watch};
use cairn_testkit::{TestServer, five_steps, rev, session, todo, update};

async fn plan_done(
    plans: &mut pb::plan_service_client::PlanServiceClient<Channel>,
    s: &str,
) -> u64 {
    use pb::StepStatus::Completed;
    let items: Vec<pb::PlanItem> = five_steps()
        .into_iter()
        .map(|mut i| {
            i.status = Completed.into();
            i
        })
        .collect();
    plans
        .update_plan(update(s, items))
        .await
        .unwrap()
        .into_inner()
        .revision
}

#[tokio::test]
async fn an_orchestrator_follows_its_tree_exactly() {
    use EventType::{PlanUpdated, SessionCreated, SessionDeleted, SessionUpdated};
    let server = TestServer::start().await;
    let mut sessions = server.sessions().await;
    let mut plans = server.plans().await;
    let mut client = WatchServiceClient::new(server.channel().await);

    sessions.create_session(session("orch", "")).await.unwrap();
    sessions
        .create_session(session("sub-a", "orch"))
        .await
        .unwrap();
    sessions
        .create_session(session("elsewhere", ""))
        .await
        .unwrap();
    plans
        .update_plan(update("sub-a", five_steps()))
        .await
        .unwrap(); // 4

    let mut stream = watch(&mut client, Target::SessionTree("orch".into()), None, true).await;
    // The initial state: parents first, each session then its plan.
    let mut initial = Vec::new();
    let synced = loop {
        match next(&mut stream).await {
            Kind::Event(e) => initial.push(seen(&e)),
            Kind::Synced(s) => break s.revision,
            Kind::Progress(p) => panic!("progress before synced: {p:?}"),
        }
    };
    assert_eq!(synced, rev(4));
    let s = |r: u64, t: EventType, id: &str| (rev(r), t, id.to_string(), format!("agent-{id}"));
    assert_eq!(
        initial,
        vec![
            s(1, SessionCreated, "orch"),
            s(2, SessionCreated, "sub-a"),
            s(4, PlanUpdated, "sub-a"),
        ]
    );

    // Changes after the snapshot: new children and grandchildren count,
    // other trees do not, moves in and out are seen, cascade deletes are
    // one revision.
    sessions
        .create_session(session("sub-b", "orch"))
        .await
        .unwrap(); // 5
    sessions
        .create_session(session("grand", "sub-b"))
        .await
        .unwrap(); // 6
    plans
        .update_plan(update("elsewhere", five_steps()))
        .await
        .unwrap(); // 7: not in tree
    plans
        .update_plan(update("grand", five_steps()))
        .await
        .unwrap(); // 8
    sessions
        .update_session(pb::UpdateSessionRequest {
            session_id: "elsewhere".into(),
            parent_session_id: Some("sub-a".into()),
            ..Default::default()
        })
        .await
        .unwrap(); // 9: moved in
    plans
        .update_plan(update("elsewhere", five_steps()))
        .await
        .unwrap(); // 10: now in tree
    sessions
        .update_session(pb::UpdateSessionRequest {
            session_id: "grand".into(),
            parent_session_id: Some(String::new()),
            ..Default::default()
        })
        .await
        .unwrap(); // 11: moved out (seen), then its plan is not
    plans
        .update_plan(update("grand", five_steps()))
        .await
        .unwrap(); // 12: not in tree
    sessions
        .delete_session(pb::DeleteSessionRequest {
            session_id: "sub-a".into(),
            cascade: true,
            expected_revision: None,
        })
        .await
        .unwrap(); // 13: sub-a and elsewhere

    let got: Vec<Seen> = events(&mut stream, 8).await.iter().map(seen).collect();
    assert_eq!(
        got,
        vec![
            s(5, SessionCreated, "sub-b"),
            s(6, SessionCreated, "grand"),
            s(8, PlanUpdated, "grand"),
            s(9, SessionUpdated, "elsewhere"),
            s(10, PlanUpdated, "elsewhere"),
            s(11, SessionUpdated, "grand"),
            s(13, SessionDeleted, "sub-a"),
            s(13, SessionDeleted, "elsewhere"),
        ]
    );
}

#[tokio::test]
async fn events_carry_ancestry_and_revision_boundaries() {
    let server = TestServer::start().await;
    let mut sessions = server.sessions().await;
    let mut client = WatchServiceClient::new(server.channel().await);
    sessions.create_session(session("r", "")).await.unwrap();
    sessions.create_session(session("c", "r")).await.unwrap();
    sessions.create_session(session("g", "c")).await.unwrap();
    sessions
        .delete_session(pb::DeleteSessionRequest {
            session_id: "r".into(),
            cascade: true,
            expected_revision: None,
        })
        .await
        .unwrap();
    let all = history(&mut client, rev(4)).await;
    assert_eq!(all[2].ancestor_session_ids, vec!["r", "c"]);
    assert_eq!(all[2].parent_session_id, "c");
    let deletes: Vec<(u32, u32, Vec<String>)> = all[3..]
        .iter()
        .map(|e| {
            (
                e.index_in_revision,
                e.events_in_revision,
                e.ancestor_session_ids.clone(),
            )
        })
        .collect();
    assert_eq!(
        deletes,
        vec![
            (0, 3, vec![]),
            (1, 3, vec!["r".to_string()]),
            (2, 3, vec!["r".to_string(), "c".to_string()]),
        ]
    );
    let Some(pb::event::Object::Session(gone)) = &all[5].object else {
        panic!("deleted session object");
    };
    assert_eq!(gone.session_id, "g");
}

#[tokio::test]
async fn resume_after_disconnect_and_after_restart() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let mut client = WatchServiceClient::new(server.channel().await);
    for i in 0..6 {
        plans
            .update_plan(update(&format!("s{i}"), five_steps()))
            .await
            .unwrap();
    }
    // Read part of the history, disconnect, resume after the last revision.
    let mut stream = watch(&mut client, Target::All(true), Some(1), false).await;
    let first: Vec<Seen> = events(&mut stream, 4).await.iter().map(seen).collect();
    drop(stream);
    // s0..s1 are revisions 1-2, each with two events (created + plan).
    assert_eq!(
        first.iter().map(|e| e.0).collect::<Vec<_>>(),
        [1, 1, 2, 2].map(rev)
    );
    let mut stream = watch(&mut client, Target::All(true), Some(rev(3)), false).await;
    let rest: Vec<Seen> = events(&mut stream, 8).await.iter().map(seen).collect();
    assert_eq!(
        rest.iter().map(|e| e.0).collect::<Vec<_>>(),
        [3, 3, 4, 4, 5, 5, 6, 6].map(rev)
    );
    drop(stream);

    // Restart, write more, resume from where we stopped: nothing missing,
    // nothing repeated, across the seam between the log and live events.
    drop(plans);
    drop(client);
    let server = server.restart().await;
    let mut plans = server.plans().await;
    let mut client = WatchServiceClient::new(server.channel().await);
    plans.update_plan(update("s0", five_steps())).await.unwrap(); // 7
    let mut stream = watch(&mut client, Target::All(true), Some(rev(7)), false).await;
    let after: Vec<Seen> = events(&mut stream, 1).await.iter().map(seen).collect();
    assert_eq!(
        after,
        vec![(rev(7), EventType::PlanUpdated, "s0".into(), String::new())]
    );
    plans.update_plan(update("s1", five_steps())).await.unwrap(); // 8, live
    let live: Vec<Seen> = events(&mut stream, 1).await.iter().map(seen).collect();
    assert_eq!(live[0].0, rev(8));
}

/// Writes a five-step plan to sessions `{prefix}0` … `{prefix}{n-1}`, in
/// turn; the revisions acknowledged.
async fn write_plans(
    plans: &mut cairn_api::plan_service_client::PlanServiceClient<Channel>,
    prefix: &str,
    n: usize,
) -> Vec<u64> {
    let mut revisions = Vec::with_capacity(n);
    for i in 0..n {
        let r = plans
            .update_plan(update(&format!("{prefix}{i}"), five_steps()))
            .await
            .unwrap()
            .into_inner()
            .revision;
        revisions.push(r);
    }
    revisions
}

/// Waits (within the patience bound) until a watch from revision 1 is
/// refused with `REVISION_COMPACTED` at a compact revision `done` accepts:
/// compaction runs in the background, a chunk at a time. The refusal.
async fn compacted_until(
    client: &mut WatchServiceClient<Channel>,
    done: impl Fn(u64) -> bool,
) -> tonic::Status {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let result = client
                .watch(pb::WatchRequest {
                    target: Some(Target::All(true)),
                    start_revision: Some(1),
                    ..Default::default()
                })
                .await;
            match result {
                Err(status)
                    if status.get_details_error_info().is_some_and(|i| {
                        i.metadata["compact_revision"]
                            .parse::<u64>()
                            .is_ok_and(&done)
                    }) =>
                {
                    break status;
                }
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    })
    .await
    .expect("compaction within the patience bound")
}

/// `--retention-age`: revisions older than the age are dropped whatever
/// their count, younger ones kept (on etcd too, from etcd's own history of
/// the log).
#[tokio::test]
async fn revisions_older_than_the_retention_age_are_compacted() {
    let server = TestServer::start_config(|c| {
        c.retention.age = Duration::from_secs(5);
        c.retention.interval = Duration::from_millis(20);
    })
    .await;
    let mut plans = server.plans().await;
    let mut client = WatchServiceClient::new(server.channel().await);
    let old = *write_plans(&mut plans, "old", 5).await.last().unwrap();
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    let young = write_plans(&mut plans, "young", 2).await;
    // The old five go (in the background); the young two stay.
    let status = compacted_until(&mut client, |compact| compact >= old).await;
    let info = status.get_details_error_info().unwrap();
    let compact: u64 = info.metadata["compact_revision"].parse().unwrap();
    assert!(
        compact < young[0],
        "a young revision was compacted: {info:?}"
    );
    let mut stream = watch(&mut client, Target::All(true), Some(compact + 1), false).await;
    // Each write created its session and its plan: two events each.
    let got = events(&mut stream, 4).await;
    let mut revisions: Vec<u64> = got.iter().map(|e| e.revision).collect();
    revisions.dedup();
    assert_eq!(revisions, young);
}

#[tokio::test]
async fn compacted_revisions_end_with_revision_compacted() {
    let server = TestServer::start_config(|c| {
        c.retention.revisions = 5;
        c.retention.interval = Duration::from_millis(20);
    })
    .await;
    let mut plans = server.plans().await;
    let mut client = WatchServiceClient::new(server.channel().await);
    let last = *write_plans(&mut plans, "s", 20).await.last().unwrap();
    // Compaction may stop at an earlier chunk first; wait for the final one.
    let status = compacted_until(&mut client, |compact| compact == last - 5).await;
    assert_eq!(status.code(), Code::FailedPrecondition);
    let info = status.get_details_error_info().unwrap();
    assert_eq!(info.reason, "REVISION_COMPACTED");
    assert_eq!(info.metadata["current_revision"], last.to_string());
    let compact: u64 = info.metadata["compact_revision"].parse().unwrap();
    assert_eq!(compact, last - 5);
    // Right after the compact revision, the log is whole. On etcd the
    // compactions' own writes took revision numbers too, so fewer than
    // five revisions were logged there: read up to the last one.
    let mut stream = watch(&mut client, Target::All(true), Some(compact + 1), false).await;
    let mut got = Vec::new();
    while got.last().is_none_or(|e: &pb::Event| {
        e.revision < last || e.index_in_revision + 1 < e.events_in_revision
    }) {
        got.extend(events(&mut stream, 1).await);
    }
    if cairn_testkit::on_etcd() {
        assert!(got[0].revision > compact, "{got:?}");
    } else {
        assert_eq!(got.len(), 10);
        assert_eq!(got[0].revision, compact + 1);
    }
    assert_eq!(got.last().unwrap().revision, last);
    // Every write after the compact revision, each whole, once.
    let sessions: Vec<&str> = got
        .iter()
        .filter(|e| e.r#type() == EventType::PlanUpdated)
        .map(|e| e.session_id.as_str())
        .collect();
    let first = 20 - sessions.len();
    let expected: Vec<String> = (first..20).map(|i| format!("s{i}")).collect();
    assert_eq!(sessions, expected);
}

#[tokio::test]
async fn idle_streams_get_progress_heartbeats() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let mut client = WatchServiceClient::new(server.channel().await);
    plans.update_plan(update("a", five_steps())).await.unwrap();
    plans.update_plan(update("b", five_steps())).await.unwrap();
    let mut stream = client
        .watch(pb::WatchRequest {
            target: Some(Target::SessionId("a".into())),
            start_revision: None,
            send_initial_state: true,
            progress_interval: Some(prost_types::Duration {
                seconds: 0,
                nanos: 50_000_000,
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(next(&mut stream).await, Kind::Event(_)));
    assert!(matches!(next(&mut stream).await, Kind::Event(_)));
    assert_eq!(
        next(&mut stream).await,
        Kind::Synced(pb::Synced { revision: rev(2) })
    );
    assert_eq!(
        next(&mut stream).await,
        Kind::Progress(pb::Progress { revision: rev(2) })
    );
    // A change to another session moves the heartbeat's revision on.
    plans.update_plan(update("b", five_steps())).await.unwrap();
    loop {
        match next(&mut stream).await {
            Kind::Progress(p) if p.revision == rev(3) => break,
            Kind::Progress(p) => assert_eq!(p.revision, rev(2)),
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn bad_watch_requests_are_refused() {
    let server = TestServer::start().await;
    let mut client = WatchServiceClient::new(server.channel().await);
    let err = client.watch(pb::WatchRequest::default()).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = client
        .watch(pb::WatchRequest {
            target: Some(Target::All(true)),
            start_revision: Some(1),
            send_initial_state: true,
            progress_interval: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(
        err.get_details_error_info().unwrap().reason,
        "CONFLICTING_OPTIONS"
    );
}

#[tokio::test]
async fn a_slow_watcher_catches_up_from_the_log() {
    // A tiny per-watcher buffer makes the watcher overflow almost at once.
    let server = TestServer::start_engine(|_| {}, |e| e.watch_buffer = 2).await;
    let mut plans = server.plans().await;
    let mut client = WatchServiceClient::new(server.channel().await);
    let mut stream = watch(&mut client, Target::All(true), None, false).await;
    // Nobody reads while 300 revisions commit concurrently.
    let mut tasks = Vec::new();
    for i in 0..300 {
        let mut p = plans.clone();
        tasks.push(tokio::spawn(async move {
            p.update_plan(update(&format!("s{}", i % 10), five_steps()))
                .await
                .unwrap()
        }));
    }
    let mut acked = Vec::new();
    for t in tasks {
        acked.push(t.await.unwrap().into_inner().revision);
    }
    // Every revision acknowledged, once each, in order (on etcd,
    // independent writes committed together share one).
    acked.sort_unstable();
    acked.dedup();
    if !cairn_testkit::on_etcd() {
        assert_eq!(acked, (rev(1)..=rev(300)).collect::<Vec<u64>>());
    }
    let last = *acked.last().unwrap();
    let revisions = cairn_testkit::stream::revisions_through(&mut stream, last).await;
    assert_eq!(revisions, acked);
    // The writer was never blocked by it: every write was acknowledged
    // before the watcher read anything.
    plans.update_plan(update("s0", five_steps())).await.unwrap();
}

#[tokio::test]
async fn agent_watch_follows_todos() {
    let server = TestServer::start().await;
    let mut todos = server.todos().await;
    let mut client = WatchServiceClient::new(server.channel().await);
    let mut stream = watch(&mut client, Target::AgentId("a1".into()), None, true).await;
    assert_eq!(
        next(&mut stream).await,
        Kind::Synced(pb::Synced { revision: 0 })
    );
    let write = |agent: &str, items: Vec<pb::TodoItem>| pb::WriteTodosRequest {
        agent_id: agent.into(),
        todos: items,
        expected_revision: None,
    };
    todos
        .write_todos(write("a2", vec![todo("x", pb::TodoStatus::Pending)]))
        .await
        .unwrap();
    todos
        .write_todos(write("a1", vec![todo("y", pb::TodoStatus::Pending)]))
        .await
        .unwrap();
    todos.write_todos(write("a1", vec![])).await.unwrap();
    let got: Vec<Seen> = events(&mut stream, 2).await.iter().map(seen).collect();
    assert_eq!(
        got,
        vec![
            (rev(2), EventType::TodosUpdated, String::new(), "a1".into()),
            (rev(3), EventType::TodosCleared, String::new(), "a1".into()),
        ]
    );
}

#[tokio::test]
async fn wait_returns_when_the_last_sub_agent_completes() {
    let server = TestServer::start().await;
    let mut sessions = server.sessions().await;
    let mut plans = server.plans().await;
    let mut client = WatchServiceClient::new(server.channel().await);
    sessions.create_session(session("orch", "")).await.unwrap();
    sessions.create_session(session("a", "orch")).await.unwrap();
    sessions.create_session(session("b", "orch")).await.unwrap();
    plans.update_plan(update("a", five_steps())).await.unwrap();
    plans.update_plan(update("b", five_steps())).await.unwrap();

    // Times out: nobody is done. That is an answer, not an error.
    let resp = client
        .wait(pb::WaitRequest {
            fail_fast: None,
            target: Some(pb::wait_request::Target::SessionTree("orch".into())),
            condition: pb::WaitCondition::AllPlansCompleted.into(),
            timeout: Some(prost_types::Duration {
                seconds: 0,
                nanos: 100_000_000,
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!resp.satisfied);
    assert_eq!(resp.plans.len(), 3);

    let mut waiter = client.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .wait(pb::WaitRequest {
                fail_fast: None,
                target: Some(pb::wait_request::Target::SessionTree("orch".into())),
                condition: pb::WaitCondition::AllPlansCompleted.into(),
                timeout: Some(prost_types::Duration {
                    seconds: 30,
                    nanos: 0,
                }),
            })
            .await
            .unwrap()
            .into_inner()
    });
    plan_done(&mut plans, "a").await;
    let last = plan_done(&mut plans, "b").await;
    let resp = waiting.await.unwrap();
    assert!(resp.satisfied);
    assert_eq!(resp.revision, last);
    assert!(
        resp.plans
            .iter()
            .filter(|p| p.session_id != "orch")
            .all(|p| p
                .items
                .iter()
                .all(|i| i.status() == pb::StepStatus::Completed))
    );

    // Explicit ids, and the any-change condition.
    let mut waiter = client.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .wait(pb::WaitRequest {
                fail_fast: None,
                target: Some(pb::wait_request::Target::SessionIds(pb::SessionIds {
                    session_ids: vec!["a".into()],
                })),
                condition: pb::WaitCondition::AnyChange.into(),
                timeout: Some(prost_types::Duration {
                    seconds: 30,
                    nanos: 0,
                }),
            })
            .await
            .unwrap()
            .into_inner()
    });
    // A change outside the target does not count; one inside does. The
    // waiter may subscribe after a write, so keep changing `a` until it
    // answers (bounded).
    plans.update_plan(update("b", five_steps())).await.unwrap();
    let mut changed = 0;
    for _ in 0..200 {
        changed = plans
            .update_plan(update("a", five_steps()))
            .await
            .unwrap()
            .into_inner()
            .revision;
        if waiting.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let resp = waiting.await.unwrap();
    assert!(resp.satisfied);
    assert!(resp.revision <= changed);
    assert_eq!(resp.plans.len(), 1);
    assert_eq!(resp.plans[0].session_id, "a");

    let err = client
        .wait(pb::WaitRequest {
            fail_fast: None,
            target: Some(pb::wait_request::Target::SessionIds(pb::SessionIds {
                session_ids: vec!["ghost".into()],
            })),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}

#[tokio::test]
async fn shutdown_ends_open_watch_streams() {
    let mut server = TestServer::start().await;
    let mut client = WatchServiceClient::new(server.channel().await);
    let mut stream = watch(&mut client, Target::All(true), None, true).await;
    assert_eq!(
        next(&mut stream).await,
        Kind::Synced(pb::Synced { revision: 0 })
    );
    // Graceful shutdown must not wait forever for a stream that never ends.
    tokio::time::timeout(PATIENCE, server.stop())
        .await
        .expect("the server stops");
    let end = tokio::time::timeout(PATIENCE, stream.message())
        .await
        .expect("the stream ends");
    match end {
        Err(status) => assert_eq!(status.code(), Code::Unavailable),
        Ok(None) => {}
        Ok(Some(msg)) => panic!("unexpected {msg:?}"),
    }
}

#[tokio::test]
async fn hostile_intervals_and_future_revisions_are_answered() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let mut client = WatchServiceClient::new(server.channel().await);
    plans.update_plan(update("a", five_steps())).await.unwrap();
    let interval = |seconds| Some(prost_types::Duration { seconds, nanos: 0 });
    // An interval that overflows a clock is refused, not a panic.
    for seconds in [i64::MAX, 86_401, -1] {
        let err = client
            .watch(pb::WatchRequest {
                target: Some(Target::All(true)),
                progress_interval: interval(seconds),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{seconds}: {err:?}");
        assert_eq!(cairn_testkit::bad_field(&err), "progress_interval");
    }

    // Past the next revision: OUT_OF_RANGE, saying what the next one is.
    let err = client
        .watch(pb::WatchRequest {
            target: Some(Target::All(true)),
            start_revision: Some(rev(3)),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    let info = err.get_details_error_info().unwrap();
    assert_eq!(info.reason, "REVISION_NOT_YET");
    assert_eq!(info.metadata["next_revision"], rev(2).to_string());

    // From the next revision: heartbeats claim only what exists.
    let mut stream = client
        .watch(pb::WatchRequest {
            target: Some(Target::All(true)),
            start_revision: Some(rev(2)),
            progress_interval: Some(prost_types::Duration {
                seconds: 0,
                nanos: 20_000_000,
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    for _ in 0..3 {
        assert_eq!(
            next(&mut stream).await,
            Kind::Progress(pb::Progress { revision: rev(1) })
        );
    }
    plans.update_plan(update("a", five_steps())).await.unwrap();
    loop {
        match next(&mut stream).await {
            Kind::Event(e) => {
                assert_eq!(e.revision, rev(2));
                break;
            }
            Kind::Progress(p) => assert_eq!(p.revision, rev(1)),
            Kind::Synced(s) => panic!("unexpected {s:?}"),
        }
    }
}

/// Hardening round 2, item 2: a snapshot larger than one chunk, read while
/// writers go on, still gives exactly the state at its `synced` revision
/// to a client that applies everything before `synced` in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_snapshot_under_writes_is_the_state_at_synced() {
    use std::collections::BTreeMap;
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    // Several chunks' worth: 400 sessions, each a session and a plan.
    for i in 0..400 {
        plans
            .update_plan(update(&format!("s{i:03}"), five_steps()))
            .await
            .unwrap();
    }
    // Every acknowledged write: (revision, session, first step).
    let writer = {
        let mut plans = server.plans().await;
        tokio::spawn(async move {
            let mut acks = Vec::new();
            for k in 0..300 {
                let session = format!("s{:03}", (k * 37) % 400);
                let mut steps = five_steps();
                steps[0].step = format!("write {k}");
                let r = plans.update_plan(update(&session, steps)).await.unwrap();
                acks.push((r.into_inner().revision, session, format!("write {k}")));
            }
            acks
        })
    };
    let mut watch = WatchServiceClient::new(server.channel().await);
    let mut stream = watch
        .watch(pb::WatchRequest {
            target: Some(Target::All(true)),
            send_initial_state: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    // The client's view: session → first step of its plan.
    let mut state: BTreeMap<String, String> = BTreeMap::new();
    let synced = loop {
        match stream.message().await.unwrap().unwrap().kind.unwrap() {
            Kind::Event(e) => {
                if let Some(pb::event::Object::Plan(p)) = e.object {
                    state.insert(p.session_id, p.items[0].step.clone());
                }
            }
            Kind::Synced(s) => break s.revision,
            Kind::Progress(_) => {}
        }
    };
    let acks = writer.await.unwrap();
    let mut expected: BTreeMap<String, String> = (0..400)
        .map(|i| (format!("s{i:03}"), five_steps()[0].step.clone()))
        .collect();
    for (revision, session, step) in &acks {
        if *revision <= synced {
            expected.insert(session.clone(), step.clone());
        }
    }
    assert_eq!(state, expected, "the state at synced {synced}");
}
