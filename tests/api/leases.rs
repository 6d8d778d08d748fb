//! Leases and liveness: keep-alives, the states a silent agent goes
//! through, `Wait` ending on a lost sub-agent, and restarts that are not
//! deaths. Timings are short TTLs; nothing asserts how fast anything is.

use std::time::{Duration, Instant};

use cairn_api as pb;
use cairn_api::watch_request::Target;
use cairn_api::watch_response::Kind;
use cairn_api::watch_service_client::WatchServiceClient;
use cairn_store::lessor::LeaseConfig;
use tonic::Code;

use cairn_testkit::stream::{next, watch};
use cairn_testkit::{TestServer, assert_status, five_steps, session, update};

fn leases(ttl_ms: u64, grace_ms: u64, idle_after_ms: u64) -> LeaseConfig {
    LeaseConfig {
        ttl_ms,
        grace_ms,
        idle_after_ms,
        holder: String::new(),
    }
}

fn keep_alive(id: &str) -> pb::KeepAliveRequest {
    pb::KeepAliveRequest {
        session_id: id.into(),
        ..Default::default()
    }
}

/// The liveness a session event carries, if it is a session update.
fn liveness_of(e: &pb::Event) -> Option<pb::Liveness> {
    let Some(pb::event::Object::Session(s)) = e.object.as_ref() else {
        return None;
    };
    (e.r#type() == pb::EventType::SessionUpdated).then(|| {
        s.lease
            .as_ref()
            .map_or(pb::Liveness::Unspecified, pb::Lease::state)
    })
}

/// The liveness transitions a watch shows until `until` is seen, with the
/// revisions they came at.
async fn transitions_until(
    stream: &mut tonic::Streaming<pb::WatchResponse>,
    until: pb::Liveness,
) -> Vec<(u64, pb::Liveness)> {
    let mut out = Vec::new();
    // Progress messages keep coming: the patience bounds the whole wait.
    let deadline = Instant::now() + cairn_testkit::stream::PATIENCE;
    loop {
        assert!(
            Instant::now() < deadline,
            "no {until:?} within the patience: {out:?}"
        );
        if let Kind::Event(e) = next(stream).await
            && let Some(l) = liveness_of(&e)
        {
            out.push((e.revision, l));
            if l == until {
                return out;
            }
        }
    }
}

/// A session's lease as `GetSession` reads it.
async fn stored_lease(server: &TestServer, id: &str) -> Option<pb::Lease> {
    server
        .sessions()
        .await
        .get_session(pb::GetSessionRequest {
            session_id: id.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap()
        .lease
}

async fn tree(server: &TestServer) {
    let mut sessions = server.sessions().await;
    sessions.create_session(session("orch", "")).await.unwrap();
    sessions
        .create_session(session("orch:coder", "orch"))
        .await
        .unwrap();
    server
        .plans()
        .await
        .update_plan(update("orch:coder", five_steps()))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_silent_agent_stalls_then_is_lost_and_wait_names_it() {
    let server = TestServer::start_config(|c| c.leases = leases(1_000, 1_000, 600_000)).await;
    tree(&server).await;
    let mut sessions = server.sessions().await;
    let lease = sessions
        .keep_alive(keep_alive("orch:coder"))
        .await
        .unwrap()
        .into_inner();
    let taken = lease.lease.unwrap();
    assert_eq!(taken.state(), pb::Liveness::Active);
    assert_eq!(taken.ttl.unwrap().seconds, 1);
    let mut w = WatchServiceClient::new(server.channel().await);
    let mut stream = watch(
        &mut w,
        Target::SessionTree("orch".into()),
        Some(lease.revision + 1),
        false,
    )
    .await;
    // The orchestrator waits on its tree; the agent says nothing more.
    let started = Instant::now();
    let waited = w
        .wait(cairn_testkit::wait_tree("orch", 60))
        .await
        .unwrap()
        .into_inner();
    eprintln!(
        "Wait ended after {:?} (TTL 1 s + grace 1 s)",
        started.elapsed()
    );
    assert!(!waited.satisfied);
    assert_eq!(waited.lost.len(), 1, "{waited:?}");
    let lost = &waited.lost[0];
    assert_eq!(lost.session_id, "orch:coder");
    assert_eq!(lost.agent_id, "agent-orch:coder");
    assert_eq!(
        (lost.step_id, lost.step.as_str()),
        (2, "Implement the sign-up API")
    );
    assert!(lost.last_seen_time.is_some());
    // Every watcher saw STALLED, then LOST, each its own revision, in order.
    let seen = transitions_until(&mut stream, pb::Liveness::Lost).await;
    assert_eq!(
        seen.iter().map(|(_, l)| *l).collect::<Vec<_>>(),
        [pb::Liveness::Stalled, pb::Liveness::Lost]
    );
    assert!(seen[0].0 < seen[1].0);
    // The answer a person or an agent reads.
    let text = cairn_api::shapes::lost_sentence(lost, cairn_store::now_micros());
    assert!(
        text.starts_with("Sub-agent agent-orch:coder (orch:coder) was lost at step 2 'Implement the sign-up API' "),
        "{text}"
    );
    // A keep-waiting caller still learns who is lost, at its timeout.
    let kept = w
        .wait(pb::WaitRequest {
            target: Some(pb::wait_request::Target::SessionIds(pb::SessionIds {
                session_ids: vec!["orch:coder".into()],
            })),
            condition: pb::WaitCondition::AllPlansCompleted.into(),
            timeout: Some(prost_types::Duration {
                seconds: 1,
                nanos: 0,
            }),
            fail_fast: Some(false),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!kept.satisfied);
    assert_eq!(kept.lost.len(), 1);
    // The agent comes back: ACTIVE again, with a revision of its own.
    let back = sessions
        .keep_alive(keep_alive("orch:coder"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(back.lease.unwrap().state(), pb::Liveness::Active);
    assert_eq!(
        transitions_until(&mut stream, pb::Liveness::Active).await,
        [(back.revision, pb::Liveness::Active)]
    );
    // And says it is done.
    let done = sessions
        .keep_alive(pb::KeepAliveRequest {
            finished: true,
            ..keep_alive("orch:coder")
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(done.lease.unwrap().state(), pb::Liveness::Finished);
    let got = stored_lease(&server, "orch:coder").await.unwrap();
    assert_eq!(got.state(), pb::Liveness::Finished);
}

#[tokio::test]
async fn renewals_and_writes_keep_an_agent_active_without_writing() {
    let server = TestServer::start_config(|c| c.leases = leases(1_000, 1_000, 600_000)).await;
    tree(&server).await;
    let mut sessions = server.sessions().await;
    let taken = sessions
        .keep_alive(keep_alive("orch:coder"))
        .await
        .unwrap()
        .into_inner()
        .revision;
    // Keep-alives for three TTLs, then plan writes alone for three more.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let r = sessions
            .keep_alive(keep_alive("orch:coder"))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.lease.unwrap().state(), pb::Liveness::Active);
    }
    let mut plans = server.plans().await;
    for i in 0..10 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut items = five_steps();
        items[1].step = format!("Implement the sign-up API, take {i}");
        plans
            .update_plan(update("orch:coder", items))
            .await
            .unwrap();
    }
    // No renewal wrote anything: the log holds the plan writes only.
    let mut w = WatchServiceClient::new(server.channel().await);
    let lease = stored_lease(&server, "orch:coder").await.unwrap();
    let mut stream = watch(
        &mut w,
        Target::SessionTree("orch".into()),
        Some(taken + 1),
        false,
    )
    .await;
    let mut kinds = Vec::new();
    while kinds.len() < 10 {
        if let Kind::Event(e) = next(&mut stream).await {
            kinds.push(e.r#type());
        }
    }
    assert!(
        kinds.iter().all(|k| *k == pb::EventType::PlanUpdated),
        "{kinds:?}"
    );
    assert_eq!(lease.state(), pb::Liveness::Active);
    let micros = |t: &Option<prost_types::Timestamp>| cairn_api::shapes::micros(t.as_ref());
    assert!(
        micros(&lease.last_seen_time) > micros(&lease.state_time),
        "{lease:?}"
    );
}

#[tokio::test]
async fn an_agent_that_only_renews_goes_idle_and_a_write_makes_it_active() {
    let server = TestServer::start_config(|c| c.leases = leases(5_000, 1_000, 1_500)).await;
    tree(&server).await;
    let mut sessions = server.sessions().await;
    let taken = sessions
        .keep_alive(keep_alive("orch:coder"))
        .await
        .unwrap()
        .into_inner()
        .revision;
    let mut w = WatchServiceClient::new(server.channel().await);
    let mut stream = watch(
        &mut w,
        Target::SessionTree("orch".into()),
        Some(taken + 1),
        false,
    )
    .await;
    let renewer = {
        let mut sessions = sessions.clone();
        tokio::spawn(async move {
            loop {
                let _ = sessions.keep_alive(keep_alive("orch:coder")).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    assert_eq!(
        transitions_until(&mut stream, pb::Liveness::Idle)
            .await
            .len(),
        1
    );
    server
        .plans()
        .await
        .update_plan(update("orch:coder", five_steps()))
        .await
        .unwrap();
    assert_eq!(
        transitions_until(&mut stream, pb::Liveness::Active)
            .await
            .iter()
            .map(|(_, l)| *l)
            .collect::<Vec<_>>(),
        [pb::Liveness::Active]
    );
    renewer.abort();
}

#[tokio::test]
async fn a_restart_is_not_a_death() {
    let ttl = 3_000;
    let server = TestServer::start_config(|c| c.leases = leases(ttl, 1_000, 600_000)).await;
    tree(&server).await;
    let mut sessions = server.sessions().await;
    sessions
        .create_session(session("orch:gone", "orch"))
        .await
        .unwrap();
    sessions.keep_alive(keep_alive("orch:coder")).await.unwrap();
    let before = sessions
        .keep_alive(keep_alive("orch:gone"))
        .await
        .unwrap()
        .into_inner()
        .revision;
    // Down for less than a TTL since the last renewal.
    let server = server.restart().await;
    let restarted = cairn_store::now_micros();
    let mut sessions = server.sessions().await;
    let mut w = WatchServiceClient::new(server.channel().await);
    let mut stream = watch(
        &mut w,
        Target::SessionTree("orch".into()),
        Some(before + 1),
        false,
    )
    .await;
    // The coder renews after the restart; the other never again.
    for _ in 0..4 {
        sessions.keep_alive(keep_alive("orch:coder")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // What happens next is the silent one's stall, a full TTL past the
    // restart, and nothing about the renewing one.
    let mut stalled = None;
    let deadline = Instant::now() + cairn_testkit::stream::PATIENCE;
    while stalled.is_none() {
        assert!(
            Instant::now() < deadline,
            "the silent session never stalled"
        );
        if let Kind::Event(e) = next(&mut stream).await {
            assert_eq!(e.session_id, "orch:gone", "{e:?}");
            let Some(pb::event::Object::Session(s)) = e.object else {
                panic!("a session event");
            };
            let lease = s.lease.unwrap();
            assert_eq!(lease.state(), pb::Liveness::Stalled);
            stalled = Some(cairn_api::shapes::micros(lease.state_time.as_ref()));
        }
    }
    let stalled = stalled.unwrap();
    assert!(
        stalled >= restarted + i64::try_from(ttl).unwrap() * 1000 - 100_000,
        "stalled at {stalled}, restarted at {restarted}"
    );
    let coder = stored_lease(&server, "orch:coder").await.unwrap();
    assert_eq!(coder.state(), pb::Liveness::Active);
}

#[tokio::test]
async fn bad_keep_alives_are_refused_and_change_nothing() {
    let server = TestServer::start().await;
    tree(&server).await;
    let mut sessions = server.sessions().await;
    let d = |seconds, nanos| Some(prost_types::Duration { seconds, nanos });
    for (ttl, grace, field) in [
        (d(0, 500_000_000), None, "ttl"),
        (d(7200, 0), None, "ttl"),
        (d(-1, 0), None, "ttl"),
        (None, d(7200, 0), "grace"),
        (None, d(0, -5), "grace"),
        // Nanoseconds past a second are malformed, not a longer duration.
        (d(1, 1_500_000_000), None, "ttl"),
    ] {
        let err = sessions
            .keep_alive(pb::KeepAliveRequest {
                session_id: "orch:coder".into(),
                ttl,
                grace,
                finished: false,
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{field}: {err:?}");
        assert!(err.message().contains(field), "{err:?}");
    }
    let err = sessions.keep_alive(keep_alive("ghost")).await.unwrap_err();
    assert_status(
        &err,
        Code::NotFound,
        "Session ghost not found",
        "SESSION_NOT_FOUND",
    );
    let err = sessions.keep_alive(keep_alive("")).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(stored_lease(&server, "orch:coder").await, None);
}

/// Two servers decide a transition of one lease at the same revision, and
/// decide differently (their views differ): one of them writes. On etcd
/// these are two stores on one cluster, as two replicas are; on redb two
/// tasks on one store. Each round adds exactly one revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transitions_decided_at_one_revision_by_two_servers_are_written_once() {
    use cairn_core::access::Caller;
    use cairn_core::command::{Command, LeaseOp, SessionCommand};
    use cairn_core::liveness::Liveness;
    use cairn_store::liveness::KeepAlive;

    let dir = tempfile::tempdir().unwrap();
    let cluster = if cairn_testkit::on_etcd() {
        Some(cairn_testkit::EtcdCluster::start(3).await)
    } else {
        None
    };
    let (one, two) = if let Some(c) = &cluster {
        let opts = cairn_etcd::EtcdOptions::new(c.endpoints());
        (
            cairn_etcd::open(&opts).await.unwrap(),
            cairn_etcd::open(&opts).await.unwrap(),
        )
    } else {
        let opts = cairn_redb::RedbOptions::new(dir.path().join("data"));
        let s = tokio::task::spawn_blocking(move || cairn_redb::open(&opts))
            .await
            .unwrap()
            .unwrap();
        (s.clone(), s)
    };
    let create = Command::Session(SessionCommand::Create(cairn_core::session::Session {
        session_id: "x".into(),
        agent_id: "a".into(),
        ..Default::default()
    }));
    one.apply(&Caller::Open, create, 64).await.unwrap();
    let (_, mut revision) = one
        .keep_alive(
            &Caller::Open,
            KeepAlive {
                session_id: "x".into(),
                ..KeepAlive::default()
            },
        )
        .await
        .unwrap();
    let mark = |to: Liveness, expected_revision: u64| {
        Command::Session(SessionCommand::Lease {
            session_id: "x".into(),
            op: LeaseOp::Mark {
                to,
                expected_revision,
                last_seen: 0,
            },
        })
    };
    let head = |s: cairn_store::Store| async move { s.read(|v| v.revision()).await.unwrap() };
    for round in 0..20 {
        let before = head(one.clone()).await;
        let (a, b) = if round % 2 == 0 {
            (Liveness::Stalled, Liveness::Idle)
        } else {
            (Liveness::Active, Liveness::Lost)
        };
        let (x, y) = tokio::join!(
            one.apply(&Caller::Open, mark(a, revision), 64),
            two.apply(&Caller::Open, mark(b, revision), 64)
        );
        let (x, y) = (
            x.unwrap().0.into_session().unwrap(),
            y.unwrap().0.into_session().unwrap(),
        );
        let after = head(two.clone()).await;
        assert_eq!(after, before + 1, "round {round}: one write, not two");
        // Both answer the one lease now stored, whoever wrote it.
        let now = head_lease(&one, "x").await;
        assert!([a, b].contains(&now), "round {round}: {now:?}");
        assert!(x.revision == after || y.revision == after, "round {round}");
        revision = after;
    }
    one.close().await;
    two.close().await;
}

async fn head_lease(
    store: &cairn_store::Store,
    id: &'static str,
) -> cairn_core::liveness::Liveness {
    store
        .read(move |v| v.session(id))
        .await
        .unwrap()
        .and_then(|s| s.lease)
        .map(|l| l.state)
        .unwrap()
}
