//! `cairn admin backup`: a consistent copy taken online while writers run,
//! restored into a fresh data directory, equals the original at the
//! revision the backup names — state and log alike.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cairn_api as pb;
use cairn_api::plan_service_client::PlanServiceClient;
use cairn_api::watch_service_client::WatchServiceClient;
use cairn_testkit::stream::history;
use cairn_testkit::{Proc, five_steps, update};

use crate::bin;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_online_backup_restores_to_exactly_its_revision() {
    let dir = tempfile::tempdir().unwrap();
    let original = Proc::start(&bin(), &dir.path().join("a"), &[]);
    let channel = original.channel().await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let mut plans = PlanServiceClient::new(channel.clone());
        let stop = Arc::clone(&stop);
        writers.push(tokio::spawn(async move {
            let mut k = 0;
            while !stop.load(Ordering::Relaxed) || k < 20 {
                let mut items = five_steps();
                items[0].step = format!("w{w}-k{k}");
                plans
                    .update_plan(update(&format!("s{w}"), items))
                    .await
                    .unwrap();
                k += 1;
            }
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // Taken while the writers keep writing.
    let file = dir.path().join("backup.redb");
    let out = tokio::process::Command::new(bin())
        .args(["admin", "backup", "--output", "json", "--server"])
        .arg(format!("http://{}", original.addr))
        .arg("--out")
        .arg(&file)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let revision = reply["revision"].as_u64().unwrap();
    assert!(revision > 0);
    assert_eq!(
        reply["bytes"].as_u64().unwrap(),
        std::fs::metadata(&file).unwrap().len()
    );
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    // A second backup to the same file is refused, never overwrites.
    let again = std::process::Command::new(bin())
        .args(["admin", "backup", "--server"])
        .arg(format!("http://{}", original.addr))
        .arg("--out")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!again.status.success());

    // Restore: the file as cairn.redb of an empty data directory.
    let restored_dir = dir.path().join("restored");
    std::fs::create_dir_all(&restored_dir).unwrap();
    std::fs::copy(&file, restored_dir.join("cairn.redb")).unwrap();
    let restored = Proc::start(&bin(), &restored_dir, &[]);
    let rchannel = restored.channel().await;

    // The log up to the backup's revision is the original's, event for event.
    let want = history(&mut WatchServiceClient::new(channel.clone()), revision).await;
    let got = history(&mut WatchServiceClient::new(rchannel.clone()), revision).await;
    let key = |e: &pb::Event| {
        (
            e.revision,
            e.index_in_revision,
            e.r#type,
            e.session_id.clone(),
        )
    };
    assert_eq!(
        got.iter().map(key).collect::<Vec<_>>(),
        want.iter()
            .map(key)
            .filter(|k| k.0 <= revision)
            .collect::<Vec<_>>()
    );
    // The state is the log replayed to that revision, and nothing after.
    let mut last: HashMap<String, pb::Plan> = HashMap::new();
    for e in want.iter().filter(|e| e.revision <= revision) {
        if let Some(pb::event::Object::Plan(p)) = &e.object {
            last.insert(p.session_id.clone(), p.clone());
        }
    }
    let mut rplans = PlanServiceClient::new(rchannel);
    for (session, logged) in &last {
        let stored = rplans
            .get_plan(pb::GetPlanRequest {
                session_id: session.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            stored.revision, revision,
            "the restored store is at the backup's revision"
        );
        let plan = stored.plan.unwrap();
        assert_eq!(plan.items, logged.items);
        assert_eq!(plan.revision, logged.revision);
    }
    assert_eq!(last.len(), 4);
    restored.stop().await;
    original.stop().await;
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Hardening round 2, item 12: the store, its directory and backups are
/// the owner's only; a token file others can read is warned about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_12_data_and_backups_are_the_owners_only() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("admin.token");
    std::fs::write(&token, crate::ADMIN_TOKEN).unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let data = dir.path().join("data");
    let p = Proc::start(
        &bin(),
        &data,
        &[
            "--auth",
            "token",
            "--admin-token-file",
            token.to_str().unwrap(),
        ],
    );
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("cairn.redb")), 0o600);
    assert!(
        p.logged(
            "--admin-token-file is readable by other users",
            std::time::Duration::from_secs(5)
        )
        .await,
        "{}",
        p.log()
    );
    let file = dir.path().join("backup.redb");
    let out = tokio::process::Command::new(bin())
        .args(["admin", "backup", "--token", crate::ADMIN_TOKEN, "--server"])
        .arg(format!("http://{}", p.addr))
        .arg("--out")
        .arg(&file)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(&file), 0o600);
    p.stop().await;
}

/// Hardening round 2, item 13: a backup whose temp directory is full says
/// so, names that directory, and leaves the store (and its health) alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_13_a_full_temp_dir_fails_the_backup_not_the_store() {
    let Some(tmp) = crate::faults::Tmpfs::mount(1) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let p = Proc::spawn(
        std::process::Command::new(bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data"))
            .env("TMPDIR", tmp.0.path()),
    )
    .unwrap();
    let mut plans = PlanServiceClient::new(p.channel().await);
    // A store larger than the temp dir (random text: records compress).
    for i in 0..60 {
        let mut items = five_steps();
        for item in &mut items {
            item.step = (0..7000).map(|_| fastrand::alphanumeric()).collect();
        }
        plans
            .update_plan(update(&format!("s{i}"), items))
            .await
            .unwrap();
    }
    let out = tokio::process::Command::new(bin())
        .args(["admin", "backup", "--server"])
        .arg(format!("http://{}", p.addr))
        .arg("--out")
        .arg(dir.path().join("backup.redb"))
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("the backup could not be written"), "{err}");
    assert!(err.contains(&tmp.0.path().display().to_string()), "{err}");
    assert!(!err.contains("mutation was not applied"), "{err}");
    // Writes go on.
    plans
        .update_plan(update("after", five_steps()))
        .await
        .unwrap();
    p.stop().await;
}
