//! Bounded memory for every client, measured on the real binary: watchers
//! that do not read, deep and wide trees, large plan records.

use std::time::Duration;

use cairn_api as pb;
use cairn_api::watch_service_client::WatchServiceClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use cairn_testkit::Proc;
use cairn_testkit::{item, update};

use crate::bin;

/// Writes `n` plans of five `step_bytes`-byte steps, 8 at a time.
async fn write_plans(p: &Proc, n: usize, step_bytes: usize) {
    let channel = p.channel().await;
    let mut tasks = Vec::new();
    for w in 0..8 {
        let mut plans = pb::plan_service_client::PlanServiceClient::new(channel.clone());
        tasks.push(tokio::spawn(async move {
            for i in (w..n).step_by(8) {
                let steps = (0..5)
                    .map(|k| {
                        item(
                            &format!("{i} {k} {}", "z".repeat(step_bytes)),
                            pb::StepStatus::Pending,
                        )
                    })
                    .collect();
                plans
                    .update_plan(update(&format!("s{}", i % 50), steps))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// Peak RSS in MB of a server that took 1,500 plans of 40 KB while
/// `watchers` gRPC watchers and `sse` dashboard readers read nothing, and
/// then caught up with all of it from the log.
async fn peak_with_stalled_readers(watchers: usize, sse: usize) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let p = Proc::start(&bin(), dir.path(), &["--web-listen", "127.0.0.1:0"]);
    let (go, gate) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for _ in 0..watchers {
        // One connection each, like separate clients.
        let mut w = WatchServiceClient::new(p.channel().await);
        let mut s = w
            .watch(pb::WatchRequest {
                target: Some(pb::watch_request::Target::All(true)),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let mut gate = gate.clone();
        tasks.push(tokio::spawn(async move {
            let _ = gate.wait_for(|go| *go).await;
            let mut last = 0;
            while last < 1500 {
                match s.message().await {
                    Ok(Some(pb::WatchResponse {
                        kind: Some(pb::watch_response::Kind::Event(e)),
                    })) => last = e.revision,
                    Ok(Some(_)) => {}
                    other => panic!("the watch ended at {last}: {other:?}"),
                }
            }
        }));
    }
    let web = p.web.clone().unwrap();
    for _ in 0..sse {
        let mut conn = tokio::net::TcpStream::connect(&web).await.unwrap();
        conn.write_all(format!("GET /events HTTP/1.1\r\nHost: {web}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut gate = gate.clone();
        tasks.push(tokio::spawn(async move {
            let _ = gate.wait_for(|go| *go).await;
            // Every revision carries a 40 KB plan: read about all of them.
            let mut buf = vec![0u8; 1 << 16];
            let mut total = 0usize;
            while total < 1500 * 40_000 {
                match conn.read(&mut buf).await {
                    Ok(n) if n > 0 => total += n,
                    _ => panic!("the event stream ended after {total} bytes"),
                }
            }
        }));
    }
    let base = p.status_kb("VmRSS") / 1024;
    write_plans(&p, 1500, 8000).await;
    go.send_replace(true);
    for t in tasks {
        t.await.unwrap();
    }
    let peak = p.status_kb("VmHWM") / 1024;
    p.stop().await;
    (base, peak)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_watchers_cost_one_chunk_not_their_backlog() {
    let (base0, alone) = peak_with_stalled_readers(0, 0).await;
    let (base, stalled) = peak_with_stalled_readers(40, 20).await;
    eprintln!(
        "peak RSS, 1,500 plans of 40 KB: {alone} MB alone (from {base0} MB), {stalled} MB with 40 stalled watchers and 20 stalled /events readers that then caught up (from {base} MB)"
    );
    // Each stalled reader may hold its buffer of shared revisions and one
    // catch-up chunk (1 MiB of records): 60 readers, a few MB each. Before
    // catch-up was chunked, the same load took 2.7 GB.
    assert!(
        stalled <= alone + 200,
        "60 stalled readers added {} MB",
        stalled.saturating_sub(alone)
    );
}

/// Creates `n` sessions under `parent`, 16 at a time.
async fn children(p: &Proc, parent: &str, n: usize) {
    let channel = p.channel().await;
    let mut tasks = Vec::new();
    for w in 0..16 {
        let mut sessions = pb::session_service_client::SessionServiceClient::new(channel.clone());
        let parent = parent.to_owned();
        tasks.push(tokio::spawn(async move {
            for i in (w..n).step_by(16) {
                sessions
                    .create_session(cairn_testkit::session(&format!("{parent}:{i}"), &parent))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wide_cascade_delete_runs_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let p = Proc::start(&bin(), dir.path(), &[]);
    let mut sessions = pb::session_service_client::SessionServiceClient::new(p.channel().await);
    sessions
        .create_session(cairn_testkit::session("root", ""))
        .await
        .unwrap();
    let t = std::time::Instant::now();
    children(&p, "root", 20_000).await;
    let built = t.elapsed();
    let before = p.status_kb("VmRSS") / 1024;
    let t = std::time::Instant::now();
    let deleted = sessions
        .delete_session(pb::DeleteSessionRequest {
            session_id: "root".into(),
            cascade: true,
            expected_revision: None,
        })
        .await
        .unwrap()
        .into_inner();
    let took = t.elapsed();
    assert_eq!(deleted.deleted_session_ids.len(), 20_001);
    let peak = p.status_kb("VmHWM") / 1024;
    let file = std::fs::metadata(dir.path().join("cairn.redb"))
        .unwrap()
        .len()
        >> 20;
    eprintln!(
        "20,000-wide tree: built in {built:?}; cascade delete in {took:?}, RSS {before} MB before, peak {peak} MB; file {file} MB"
    );
    assert!(
        peak <= before + 150,
        "the cascade delete took {} MB",
        peak - before
    );
    p.stop().await;
}

/// Peak RSS in MB of a restarted, idle server on a store of large plans,
/// for `secs` seconds with these flags.
async fn idle_peak(data: &std::path::Path, flags: &[&str], secs: u64) -> u64 {
    let p = Proc::start(&bin(), data, flags);
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let peak = p.status_kb("VmHWM") / 1024;
    p.stop().await;
    peak
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compactor_reads_times_not_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let p = Proc::start(&bin(), dir.path(), &[]);
    write_plans(&p, 1500, 8000).await;
    p.stop().await;
    // Nothing is due (a day's retention), so a pass should cost nothing,
    // however often it runs and however large the revisions are.
    let quiet = idle_peak(
        dir.path(),
        &["--check-integrity=false", "--compaction-interval", "1h"],
        3,
    )
    .await;
    let busy = idle_peak(
        dir.path(),
        &["--check-integrity=false", "--compaction-interval", "50ms"],
        3,
    )
    .await;
    eprintln!(
        "idle on 1,500 revisions of 40 KB: peak {quiet} MB without compaction passes, {busy} MB with one every 50 ms"
    );
    assert!(
        busy <= quiet + 20,
        "compaction passes took {} MB",
        busy - quiet
    );
}

/// RSS in MB of `p` now.
fn rss(p: &Proc) -> u64 {
    p.status_kb("VmRSS") / 1024
}

/// Hardening round 2, item 2: snapshot watchers that never read hold one
/// chunk each, not the whole snapshot, and give it back when they go.
/// (Before: 100 stalled `Watch(all, sendInitialState)` took 28 → 1,333 MB,
/// and 200 stalled `/events` 202 → 2,372 MB, kept after they closed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_2_stalled_snapshot_readers_hold_one_chunk_each() {
    let dir = tempfile::tempdir().unwrap();
    let p = Proc::start(&bin(), dir.path(), &["--web-listen", "127.0.0.1:0"]);
    // 2,000 sessions, each with a plan of five 2 KB steps: a 20 MB snapshot.
    let channel = p.channel().await;
    let mut tasks = Vec::new();
    for w in 0..8 {
        let mut plans = pb::plan_service_client::PlanServiceClient::new(channel.clone());
        tasks.push(tokio::spawn(async move {
            for i in (w..2000).step_by(8) {
                let steps = (0..5)
                    .map(|k| {
                        item(
                            &format!("{i} {k} {}", "y".repeat(2000)),
                            pb::StepStatus::Pending,
                        )
                    })
                    .collect();
                plans
                    .update_plan(update(&format!("s{i}"), steps))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let base = rss(&p);
    let mut streams = Vec::new();
    for _ in 0..40 {
        let mut w = WatchServiceClient::new(p.channel().await);
        let s = w
            .watch(pb::WatchRequest {
                target: Some(pb::watch_request::Target::All(true)),
                send_initial_state: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        streams.push((w, s));
    }
    let web = p.web.clone().unwrap();
    let mut conns = Vec::new();
    for _ in 0..40 {
        let mut conn = tokio::net::TcpStream::connect(&web).await.unwrap();
        conn.write_all(format!("GET /events HTTP/1.1\r\nHost: {web}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        conns.push(conn);
    }
    // Let every stream get as far as its client's windows allow.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let stalled = rss(&p);
    drop(streams);
    drop(conns);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss(&p);
    eprintln!(
        "RSS with a 20 MB snapshot: {base} MB, {stalled} MB with 40 stalled snapshot watchers and 40 stalled /events readers, {after} MB after they closed"
    );
    // 80 streams, each one chunk (1 MiB) plus its connection's windows.
    assert!(
        stalled <= base + 300,
        "80 stalled snapshot readers added {} MB",
        stalled.saturating_sub(base)
    );
    assert!(after <= base + 300, "memory kept after the streams closed");
    p.stop().await;
}
