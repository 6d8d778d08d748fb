//! Storage faults on the real binary: a corrupt page, an empty file, a
//! full disk. Each is reported for what it is, health says so, and no
//! worker is lost to it.

use std::io::{Seek, SeekFrom, Write};
use std::time::{Duration, Instant};

use cairn_api as pb;
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt;

use cairn_testkit::Proc;
use cairn_testkit::{item, update};

use crate::bin;

/// Writes `n` sessions with plans of about `step_bytes` per step; also
/// returns the start of the third step of `s0100`, text found nowhere else
/// (random, so stored as it is even where records are compressed).
async fn fill(p: &Proc, n: usize, step_bytes: usize) -> (Vec<String>, String) {
    let mut plans = pb::plan_service_client::PlanServiceClient::new(p.channel().await);
    let mut ids = Vec::new();
    let mut marker = String::new();
    for i in 0..n {
        let id = format!("s{i:04}");
        let steps = (0..5)
            .map(|k| {
                let text = noise(step_bytes);
                if i == 100 && k == 2 {
                    text[..16].clone_into(&mut marker);
                }
                item(&format!("{id} {k} {text}"), pb::StepStatus::Pending)
            })
            .collect();
        plans.update_plan(update(&id, steps)).await.unwrap();
        ids.push(id);
    }
    (ids, marker)
}

/// Text that does not compress, so that records take the room their
/// length says (the store compresses what it can).
fn noise(n: usize) -> String {
    (0..n).map(|_| fastrand::alphanumeric()).collect()
}

async fn health(p: &Proc) -> ServingStatus {
    HealthClient::new(p.channel().await)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .status()
}

/// Overwrites with garbage the 4 KiB page that holds `marker`: live data
/// in the middle of the file (a page picked blindly may be free space,
/// which no read ever looks at).
fn damage(file: &std::path::Path, marker: &str) {
    let bytes = std::fs::read(file).unwrap();
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker.as_bytes())
        .expect("the marker is in the file");
    let mut f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    f.seek(SeekFrom::Start((at / 4096 * 4096) as u64)).unwrap();
    let garbage: Vec<u8> = (0..4096).map(|_| fastrand::u8(..)).collect();
    f.write_all(&garbage).unwrap();
    f.sync_all().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_page_is_data_loss_and_never_takes_a_reader() {
    let dir = tempfile::tempdir().unwrap();
    let p = Proc::start(&bin(), dir.path(), &[]);
    let (ids, marker) = fill(&p, 200, 2000).await;
    p.stop().await;
    let file = dir.path().join("cairn.redb");
    damage(&file, &marker);

    // Start-up checks every page: the damage is found and named.
    let (status, log) = Proc::try_start(&bin(), dir.path(), &[])
        .err()
        .expect("start-up on a corrupt file fails");
    assert!(!status.success());
    assert!(
        log.contains("is corrupt") && log.contains(&file.display().to_string()),
        "the log names the corrupt file:\n{log}"
    );

    // Without the check, the damage shows on the first read of it: each
    // such read is DATA_LOSS naming the file, every other read still works,
    // and health turns NOT_SERVING.
    let p = Proc::start(&bin(), dir.path(), &["--check-integrity=false"]);
    let mut plans = pb::plan_service_client::PlanServiceClient::new(p.channel().await);
    let mut first_pass = Vec::new();
    for _ in 0..2 {
        let mut pass = Vec::new();
        for id in &ids {
            let r = plans
                .get_plan(pb::GetPlanRequest {
                    session_id: id.clone(),
                })
                .await;
            match r {
                Ok(_) => pass.push(true),
                Err(e) => {
                    assert_eq!(e.code(), Code::DataLoss, "{e:?}");
                    assert!(e.message().contains(&file.display().to_string()), "{e:?}");
                    let info = e.get_details_error_info().unwrap();
                    assert_eq!(info.reason, "DATA_CORRUPTED");
                    pass.push(false);
                }
            }
        }
        if first_pass.is_empty() {
            first_pass = pass;
        } else {
            // No reader was lost: what worked before still works.
            assert_eq!(pass, first_pass);
        }
    }
    assert!(
        first_pass.iter().any(|ok| !ok),
        "the damaged page was read by some GetPlan"
    );
    assert!(first_pass.iter().any(|ok| *ok));
    assert_eq!(health(&p).await, ServingStatus::NotServing);
    assert!(!p.log().contains("shutting down"), "{}", p.log());
}

#[tokio::test]
async fn an_empty_database_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cairn.redb"), b"").unwrap();
    let (status, log) = Proc::try_start(&bin(), dir.path(), &[])
        .err()
        .expect("an empty file is refused");
    assert!(!status.success());
    assert!(log.contains("is empty (0 bytes)"), "{log}");
    assert_eq!(
        std::fs::metadata(dir.path().join("cairn.redb"))
            .unwrap()
            .len(),
        0,
        "the file was left as it was"
    );
}

/// A tmpfs of `mb` MiB mounted on a temp dir; unmounted on drop.
pub(crate) struct Tmpfs(pub(crate) tempfile::TempDir);

impl Tmpfs {
    /// `None` (the test skips) where mounting is not allowed: it needs
    /// root, which CI has.
    pub(crate) fn mount(mb: u32) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        cairn_testkit::tools::needs(ok, "root, to mount a tmpfs", "run the tests as root")
            .then_some(Tmpfs(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0.path())
            .status();
    }
}

async fn wait_health(p: &Proc, want: ServingStatus) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while health(p).await != want {
        assert!(Instant::now() < deadline, "health never became {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_resource_exhausted_and_heals_when_space_returns() {
    let Some(fs) = Tmpfs::mount(24) else {
        return;
    };
    let data = fs.0.path().join("data");
    // Space the test frees later.
    let filler = fs.0.path().join("filler");
    std::fs::write(&filler, vec![0u8; 8 << 20]).unwrap();
    let p = Proc::start(&bin(), &data, &[]);
    let mut plans = pb::plan_service_client::PlanServiceClient::new(p.channel().await);
    let mut acked = Vec::new();
    let mut full = None;
    for i in 0..10_000 {
        let id = format!("s{i}");
        let steps = (0..5)
            .map(|k| item(&format!("{k} {}", noise(8000)), pb::StepStatus::Pending))
            .collect();
        match plans.update_plan(update(&id, steps)).await {
            Ok(_) => acked.push(id),
            Err(e) => {
                full = Some(e);
                break;
            }
        }
    }
    let e = full.expect("the disk filled up");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert_eq!(e.get_details_error_info().unwrap().reason, "DISK_FULL");
    assert!(e.message().contains("is full"), "{e:?}");
    wait_health(&p, ServingStatus::NotServing).await;

    // Still full: writes keep failing the same way, quickly.
    let again = plans
        .update_plan(update("later", vec![item("a", pb::StepStatus::Pending); 4]))
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::ResourceExhausted, "{again:?}");

    // Space comes back: the store reopens by itself, health recovers,
    // writes work, and nothing acknowledged was lost.
    std::fs::remove_file(&filler).unwrap();
    wait_health(&p, ServingStatus::Serving).await;
    plans
        .update_plan(update("after", vec![item("a", pb::StepStatus::Pending); 4]))
        .await
        .unwrap();
    for id in &acked {
        plans
            .get_plan(pb::GetPlanRequest {
                session_id: id.clone(),
            })
            .await
            .unwrap_or_else(|e| panic!("acknowledged {id} lost: {e:?}"));
    }
    eprintln!("disk full after {} acknowledged plans; healed", acked.len());
    p.stop().await;
}
