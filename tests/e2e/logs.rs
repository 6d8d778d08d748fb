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
