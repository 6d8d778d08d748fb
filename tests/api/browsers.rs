//! What a web page can make the gRPC port do: only what the server's own
//! names and allowed origins may (hardening round 2, item 1).

use std::net::SocketAddr;

use cairn_api as pb;
use cairn_testkit::{TestServer, five_steps, update};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.1 request as a browser (or `curl`) sends it; the raw answer.
async fn http1(addr: SocketAddr, head: &str, body: &[u8]) -> String {
    let request = format!(
        "{head}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    conn.write_all(body).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        conn.read_to_end(&mut response),
    )
    .await
    .unwrap()
    .unwrap();
    String::from_utf8_lossy(&response).into_owned()
}

async fn session_exists(server: &TestServer, id: &str) -> bool {
    server
        .sessions()
        .await
        .get_session(pb::GetSessionRequest {
            session_id: id.into(),
        })
        .await
        .is_ok()
}

#[tokio::test]
async fn item_1_dns_rebinding_connect_and_grpc_web_answer_only_for_our_names() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    plans
        .update_plan(update("victim", five_steps()))
        .await
        .unwrap();
    let addr = server.addr;
    let rebound = "rebind.attacker.example";

    // Connect JSON: a read and a cascading delete under a rebound name.
    let read = http1(
        addr,
        &format!("POST /cairn.v1.PlanService/GetPlan HTTP/1.1\r\nHost: {rebound}\r\ncontent-type: application/json"),
        br#"{"sessionId":"victim"}"#,
    )
    .await;
    assert!(read.starts_with("HTTP/1.1 421"), "{read}");
    assert!(!read.contains("Design"), "no plan text leaks: {read}");
    let delete = http1(
        addr,
        &format!("POST /cairn.v1.SessionService/DeleteSession HTTP/1.1\r\nHost: {rebound}:{}\r\ncontent-type: application/json", addr.port()),
        br#"{"sessionId":"victim","cascade":true}"#,
    )
    .await;
    assert!(delete.starts_with("HTTP/1.1 421"), "{delete}");
    assert!(session_exists(&server, "victim").await);

    // gRPC-Web, and plain gRPC framing over HTTP/1.1 (which a page can send).
    let mut frame = vec![0u8];
    let msg = prost::Message::encode_to_vec(&pb::DeleteSessionRequest {
        session_id: "victim".into(),
        cascade: true,
        ..Default::default()
    });
    frame.extend_from_slice(&u32::try_from(msg.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(&msg);
    for ct in ["application/grpc-web+proto", "application/grpc"] {
        let answer = http1(
            addr,
            &format!("POST /cairn.v1.SessionService/DeleteSession HTTP/1.1\r\nHost: {rebound}\r\ncontent-type: {ct}\r\nx-grpc-web: 1"),
            &frame,
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 421"), "{ct}: {answer}");
    }
    assert!(session_exists(&server, "victim").await);

    // Under our own names the same protocols work.
    for host in [addr.to_string(), format!("localhost:{}", addr.port())] {
        let ok = http1(
            addr,
            &format!("POST /cairn.v1.PlanService/GetPlan HTTP/1.1\r\nHost: {host}\r\ncontent-type: application/json"),
            br#"{"sessionId":"victim"}"#,
        )
        .await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{host}: {ok}");
        assert!(ok.contains("Design"), "{ok}");
    }
}

#[tokio::test]
async fn item_1_cors_names_exactly_the_allowed_origins() {
    let server = TestServer::start_config(|c| {
        c.web_origins = vec!["https://cairn.example.com".into()];
    })
    .await;
    let addr = server.addr;
    let preflight = |origin: &str| {
        format!(
            "OPTIONS /cairn.v1.PlanService/GetPlan HTTP/1.1\r\nHost: {addr}\r\norigin: {origin}\r\naccess-control-request-method: POST\r\naccess-control-request-headers: content-type"
        )
    };
    let evil = http1(addr, &preflight("https://evil.example"), b"").await;
    assert!(evil.starts_with("HTTP/1.1 403"), "{evil}");
    assert!(!evil.to_lowercase().contains("access-control-allow-origin"));
    for origin in [
        "https://cairn.example.com".to_owned(),
        format!("http://{addr}"),
    ] {
        let ok = http1(addr, &preflight(&origin), b"").await;
        assert!(ok.starts_with("HTTP/1.1 204"), "{ok}");
        assert!(
            ok.to_lowercase()
                .contains(&format!("access-control-allow-origin: {origin}")),
            "{ok}"
        );
    }
    // The call itself from a foreign page is refused before it runs.
    let call = http1(
        addr,
        &format!("POST /cairn.v1.SessionService/CreateSession HTTP/1.1\r\nHost: {addr}\r\norigin: https://evil.example\r\ncontent-type: application/json"),
        br#"{"session":{"sessionId":"planted"}}"#,
    )
    .await;
    assert!(call.starts_with("HTTP/1.1 403"), "{call}");
    assert!(!session_exists(&server, "planted").await);
    let allowed = http1(
        addr,
        &format!("POST /cairn.v1.SessionService/CreateSession HTTP/1.1\r\nHost: {addr}\r\norigin: https://cairn.example.com\r\ncontent-type: application/json"),
        br#"{"session":{"sessionId":"made"}}"#,
    )
    .await;
    assert!(allowed.starts_with("HTTP/1.1 200"), "{allowed}");
    assert!(
        allowed
            .to_lowercase()
            .contains("access-control-allow-origin: https://cairn.example.com"),
        "{allowed}"
    );
}

/// Item 4: an unauthenticated Connect call is answered from its headers.
/// The request announces 4 MiB and sends none of it: an answer proves the
/// server never waited for (nor decoded) the body.
#[tokio::test]
async fn item_4_connect_authenticates_before_reading_the_body() {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), "test-admin-token-0123456789").unwrap();
    let path = file.path().to_owned();
    let server = TestServer::start_config(move |c| {
        c.auth = cairn_server::auth::AuthMode::Token;
        c.admin_token_file = Some(path);
    })
    .await;
    let addr = server.addr;
    for (ct, path) in [
        ("application/json", "/cairn.v1.PlanService/GetPlan"),
        ("application/connect+json", "/cairn.v1.WatchService/Watch"),
    ] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\ncontent-type: {ct}\r\ncontent-length: 4194304\r\n\r\n"
        );
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(head.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), conn.read(&mut buf))
            .await
            .expect("answered without the body")
            .unwrap();
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(text.contains("unauthenticated"), "{ct}: {text}");
        if ct == "application/json" {
            assert!(text.starts_with("HTTP/1.1 401"), "{text}");
        }
    }
}

/// Item 14: Connect's edges answer in Connect's own terms: garbage
/// protobuf is the client's error, compression is refused rather than
/// misread, and GET gets a body that says what to do.
#[tokio::test]
async fn item_14_connect_edges() {
    let server = TestServer::start().await;
    let addr = server.addr;
    let garbage = http1(
        addr,
        &format!("POST /cairn.v1.PlanService/GetPlan HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/proto"),
        &[0xff, 0xff, 0xff, 0xff, 0x0f, 0x01],
    )
    .await;
    assert!(garbage.starts_with("HTTP/1.1 400"), "{garbage}");
    assert!(garbage.contains("invalid_argument"), "{garbage}");

    let gzip = http1(
        addr,
        &format!("POST /cairn.v1.PlanService/GetPlan HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/json\r\ncontent-encoding: gzip"),
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00",
    )
    .await;
    assert!(gzip.starts_with("HTTP/1.1 501"), "{gzip}");
    assert!(gzip.contains("unimplemented"), "{gzip}");
    // A compressed envelope on a stream.
    let mut envelope = vec![1u8, 0, 0, 0, 2];
    envelope.extend_from_slice(b"{}");
    let stream = http1(
        addr,
        &format!("POST /cairn.v1.WatchService/Watch HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/connect+json"),
        &envelope,
    )
    .await;
    assert!(stream.contains("unimplemented"), "{stream}");

    let get = http1(
        addr,
        &format!("GET /cairn.v1.PlanService/GetPlan?connect=v1&encoding=json&message=%7B%7D HTTP/1.1\r\nHost: {addr}"),
        b"",
    )
    .await;
    assert!(get.contains("\"code\":\"unimplemented\""), "{get}");
    assert!(get.contains("POST the request"), "{get}");
}
