//! `GET /metrics` on `--metrics-listen`, scraped while the server works:
//! the counters move, the label sets stay bounded.

// Counters are whole numbers, exact in an f64: compared exactly.
#![allow(clippy::float_cmp)]

use std::io::{Read, Write};
use std::time::Duration;

use cairn_api as pb;
use cairn_api::plan_service_client::PlanServiceClient;
use cairn_api::watch_service_client::WatchServiceClient;
use cairn_testkit::{Proc, five_steps, update};

use crate::bin;

fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out
}

/// The value of the series whose line starts with `series` (name and labels).
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn metrics_move_under_load_with_bounded_labels() {
    let dir = tempfile::tempdir().unwrap();
    let server = Proc::start(&bin(), dir.path(), &["--metrics-listen", "127.0.0.1:0"]);
    let metrics = server.metrics.clone().expect("metrics address logged");
    let channel = server.channel().await;
    let mut plans = PlanServiceClient::new(channel.clone());
    let mut watch = WatchServiceClient::new(channel);
    let mut stream = watch
        .watch(pb::WatchRequest {
            target: Some(pb::watch_request::Target::SessionTree(
                "secret-session-0".into(),
            )),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    plans
        .update_plan(update("secret-session-0", five_steps()))
        .await
        .unwrap();
    let before = scrape(&metrics);

    let mut tasks = Vec::new();
    for c in 0..8 {
        let mut plans = plans.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..50 {
                plans
                    .update_plan(update(&format!("secret-session-{c}-{i}"), five_steps()))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut bad = five_steps();
    bad[0].status = pb::StepStatus::InProgress.into();
    bad[1].status = pb::StepStatus::InProgress.into();
    assert!(
        plans
            .update_plan(update("secret-session-0", bad))
            .await
            .is_err()
    );
    let _ = stream.message().await;
    cairn_api::session_service_client::SessionServiceClient::new(server.channel().await)
        .keep_alive(pb::KeepAliveRequest {
            session_id: "secret-session-1-1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let after = scrape(&metrics);

    let ok =
        r#"cairn_rpc_requests_total{service="cairn.v1.PlanService",method="UpdatePlan",code="OK"}"#;
    assert_eq!(value(&after, ok) - value(&before, ok), 400.0, "{after}");
    let invalid = r#"cairn_rpc_requests_total{service="cairn.v1.PlanService",method="UpdatePlan",code="INVALID_ARGUMENT"}"#;
    assert_eq!(value(&after, invalid), 1.0, "{after}");
    assert!(
        value(
            &after,
            r#"cairn_rpc_duration_seconds_count{service="cairn.v1.PlanService",method="UpdatePlan"}"#
        ) >= 401.0
    );
    assert!(
        value(&after, "cairn_commit_batch_size_count")
            > value(&before, "cairn_commit_batch_size_count")
    );
    assert!(value(&after, "cairn_commit_duration_seconds_sum") > 0.0);
    assert!(value(&after, "cairn_revision") >= 401.0);
    assert_eq!(value(&after, r#"cairn_watch_streams{target="tree"}"#), 1.0);
    assert!(value(&after, "cairn_store_bytes") > 0.0);
    // One lease taken, none due: no deadline looked at yet.
    assert_eq!(value(&after, "cairn_leases"), 1.0);
    assert!(
        after.contains("cairn_lease_deadlines_examined_total 0"),
        "{after}"
    );
    assert!(after.contains("# HELP cairn_commit_duration_seconds"));
    // No id ever becomes a label.
    assert!(!after.contains("secret-session"), "{after}");
    drop(stream);
    server.stop().await;
}

/// The metrics listener is bounded like the others: a client that connects
/// and sends nothing is closed after the header-read timeout, instead of
/// holding a connection (and a task) for ever.
#[tokio::test]
async fn a_silent_metrics_client_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let server = Proc::start(
        &bin(),
        dir.path(),
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--header-read-timeout",
            "1s",
        ],
    );
    let metrics = server.metrics.clone().expect("metrics address logged");
    let closed = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(&metrics).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let mut buf = Vec::new();
        // EOF (or a reset) once the server gives up on the silent client;
        // a read timeout means it never did.
        match s.read_to_end(&mut buf) {
            Ok(_) => true,
            Err(e) => {
                e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::TimedOut
            }
        }
    })
    .await
    .unwrap();
    assert!(closed, "the silent connection was still open after 15 s");
    server.stop().await;
}
