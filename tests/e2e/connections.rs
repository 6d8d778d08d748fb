//! Connections on the real binary: a cap, timeouts for idle and half-sent
//! connections, back-off when out of file descriptors, and a bounded drain.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

use cairn_testkit::Proc;

use crate::bin;

/// Whether the server closed `conn` (EOF or reset) within `within`.
async fn closed_by_server(conn: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    match tokio::time::timeout(within, conn.read(&mut buf)).await {
        Ok(Ok(0) | Err(_)) => true,
        Ok(Ok(_)) | Err(_) => false,
    }
}

/// CPU time the process has used, in clock ticks (1/100 s), from /proc.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_sent_request_cannot_hold_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Proc::start(
        &bin(),
        dir.path(),
        &["--drain-timeout", "2s", "--header-read-timeout", "60s"],
    );
    let mut conn = TcpStream::connect(&p.addr).await.unwrap();
    conn.write_all(b"POST /cairn.v1.PlanService/GetPlan HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    p.terminate();
    // New connections are refused at once, not left hanging.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        TcpStream::connect(&p.addr).await.is_err(),
        "still accepting"
    );
    let status = p
        .wait_timeout(Duration::from_secs(15))
        .await
        .expect("the drain deadline ends the server");
    assert!(status.success());
    assert!(t.elapsed() < Duration::from_secs(10));
    assert!(p.log().contains("drain deadline passed"), "{}", p.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_capped_and_idle_ones_closed() {
    let dir = tempfile::tempdir().unwrap();
    let p = Proc::start(
        &bin(),
        dir.path(),
        &["--max-connections", "20", "--header-read-timeout", "1s"],
    );
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(TcpStream::connect(&p.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Over the cap: closed at once.
    let mut extra = TcpStream::connect(&p.addr).await.unwrap();
    assert!(closed_by_server(&mut extra, Duration::from_millis(500)).await);
    assert!(
        p.logged("connection limit reached", Duration::from_secs(5))
            .await,
        "{}",
        p.log()
    );
    // Connections that never send a request are closed after the
    // header-read timeout, which frees the slots.
    for conn in &mut held {
        assert!(closed_by_server(conn, Duration::from_secs(5)).await);
    }
    let mut health = HealthClient::new(p.channel().await);
    health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap();
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_file_descriptors_backs_off_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let bin = bin();
    let data = dir.path().display().to_string();
    let p = Proc::spawn(std::process::Command::new("sh").args([
        "-c",
        &format!("ulimit -n 64 && exec {bin} serve --listen 127.0.0.1:0 --data-dir {data}"),
    ]))
    .unwrap();
    let mut held = Vec::new();
    for _ in 0..100 {
        if let Ok(c) = TcpStream::connect(&p.addr).await {
            held.push(c);
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = cpu_ticks(p.pid());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_ticks(p.pid()) - before;
    assert!(
        p.log().contains("cannot accept connections; backing off"),
        "{}",
        p.log()
    );
    // Not a spin: a spinning accept loop burns the whole 2 s.
    assert!(
        used < 50,
        "{used} CPU ticks in 2 s while out of descriptors"
    );
    drop(held);
    // Descriptors free again: the server serves.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ok = match tonic::transport::Channel::from_shared(format!("http://{}", p.addr))
            .unwrap()
            .connect()
            .await
        {
            Ok(ch) => HealthClient::new(ch)
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .is_ok(),
            Err(_) => false,
        };
        if ok {
            break;
        }
        assert!(Instant::now() < deadline, "never served again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    p.stop().await;
}

async fn health_ok(addr: &str) -> bool {
    let Ok(channel) = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
    else {
        return false;
    };
    tokio::time::timeout(
        Duration::from_secs(3),
        HealthClient::new(channel).check(HealthCheckRequest::default()),
    )
    .await
    .is_ok_and(|r| r.is_ok())
}

/// Hardening round 2, item 5: bodies trickled a byte at a time used to hold
/// every connection for ever (40 sockets took `--max-connections 40`, with
/// no token). A body now has its deadline, and its connection goes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_5_trickled_bodies_cannot_hold_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let p = Proc::start(
        &bin(),
        dir.path(),
        &["--max-connections", "40", "--body-read-timeout", "2s"],
    );
    let addr = p.addr.clone();
    let mut socks = Vec::new();
    for _ in 0..40 {
        let mut conn = TcpStream::connect(&addr).await.unwrap();
        conn.write_all(
            format!("POST /cairn.v1.PlanService/GetPlan HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{")
                .as_bytes(),
        )
        .await
        .unwrap();
        socks.push(conn);
    }
    // The slots are taken: a real call gets nowhere now.
    assert!(!health_ok(&addr).await, "the limit did not bind");
    // Keep trickling, a byte a second, as the attack did.
    let trickle = tokio::spawn(async move {
        for _ in 0..8 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            for s in &mut socks {
                let _ = s.write_all(b" ").await;
            }
        }
        socks
    });
    // Past the body deadline the trickling connections are closed.
    let served = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            if health_ok(&addr).await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(served.is_ok(), "real calls never got through");
    let mut socks = trickle.await.unwrap();
    for s in &mut socks {
        // Whatever it answered, the server closed it.
        let mut rest = Vec::new();
        let ended = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
        assert!(ended.is_ok(), "a trickling connection is still open");
    }
}

/// Hardening round 2, item 5: one peer holds at most its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_5_one_peer_holds_at_most_its_share() {
    let dir = tempfile::tempdir().unwrap();
    let p = Proc::start(&bin(), dir.path(), &["--max-connections-per-peer", "5"]);
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(TcpStream::connect(&p.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut sixth = TcpStream::connect(&p.addr).await.unwrap();
    assert!(closed_by_server(&mut sixth, Duration::from_secs(5)).await);
    drop(held);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(health_ok(&p.addr).await);
}
