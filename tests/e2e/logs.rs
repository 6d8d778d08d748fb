//! Client text in the log, on the real binary: escaped and cut short, so it
//! can neither forge log lines nor flood the log.

use cairn_api as pb;
use cairn_testkit::{Proc, five_steps, update};

use crate::bin;

#[tokio::test]
async fn client_text_cannot_forge_or_flood_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let p = Proc::start(&bin(), dir.path(), &[]);
    let mut plans = pb::plan_service_client::PlanServiceClient::new(p.channel().await);
    let forged = "x\n2026-01-01T00:00:00Z  INFO FORGED: admin approved everything\u{1b}[2J";
    let _ = plans
        .get_plan(pb::GetPlanRequest {
            session_id: forged.into(),
        })
        .await
        .unwrap_err();
    let before = p.log().len();
    let _ = plans
        .update_plan(update(&"y".repeat(3 << 20), five_steps()))
        .await
        .unwrap_err();
    // Let the log line reach the pipe.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let log = p.log();
    assert!(
        !log.lines().any(|l| l.starts_with("2026-01-01")),
        "a forged line:\n{log}"
    );
    assert!(!log.contains('\u{1b}'), "a raw escape byte reached the log");
    assert!(
        log.len() - before < 4096,
        "a 3 MB id added {} bytes of log",
        log.len() - before
    );
    p.stop().await;
}

/// Hardening round 2, item 15: client errors are not the server's errors.
/// A flood of refused and not-found calls adds no ERROR line, and refusals
/// are logged at a bounded rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_15_client_errors_cannot_flood_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let p = crate::with_admin(dir.path(), &[]);
    let channel = p.channel().await;
    let before = p.log().lines().count();
    for i in 0..300 {
        let mut req = tonic::Request::new(pb::GetPlanRequest {
            session_id: format!("s{i}"),
        });
        let bearer = if i % 2 == 0 {
            "Bearer not-a-token".to_owned()
        } else {
            format!("Bearer {}", crate::ADMIN_TOKEN)
        };
        req.metadata_mut()
            .insert("authorization", bearer.parse().unwrap());
        let err = pb::plan_service_client::PlanServiceClient::new(channel.clone())
            .get_plan(req)
            .await
            .unwrap_err();
        assert!(matches!(
            err.code(),
            tonic::Code::Unauthenticated | tonic::Code::NotFound
        ));
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let log = p.log();
    let added: Vec<&str> = log.lines().skip(before).collect();
    assert!(
        !added.iter().any(|l| l.contains("ERROR")),
        "client errors at ERROR:\n{}",
        added.join("\n")
    );
    // 150 refusals within a few seconds: at most 10 a second are logged.
    let refusals = added.iter().filter(|l| l.contains("call refused")).count();
    assert!(
        (1..=40).contains(&refusals),
        "{refusals} refusal lines for 150 refused calls"
    );
    p.stop().await;
}

/// Hardening round 2, item 15: a server that fails to start never logs
/// that it serves.
#[tokio::test]
async fn item_15_a_failed_start_never_claims_to_serve() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let bad_token = dir.path().join("short.token");
    std::fs::write(&bad_token, "short").unwrap();
    for args in [
        vec!["--web-listen", addr.as_str()],
        vec![
            "--auth",
            "token",
            "--admin-token-file",
            bad_token.to_str().unwrap(),
        ],
    ] {
        let Err((status, log)) = Proc::try_start(&bin(), &dir.path().join("data"), &args) else {
            panic!("{args:?} started");
        };
        assert!(!status.success());
        assert!(!log.contains("cairn serving"), "{args:?}:\n{log}");
    }
}
