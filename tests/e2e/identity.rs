//! Identity on the real binary: tokens never stored or logged, no open
//! door beyond loopback, TLS and mutual TLS with certificates made at run
//! time.

use std::time::Duration;

use cairn_api as pb;
use cairn_testkit::{Bearer, Proc};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

use crate::bin;

const ADMIN_TOKEN: &str = "e2e-admin-token-abcdefghijklmnop";

fn admin_file(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("admin-token");
    std::fs::write(&path, format!("{ADMIN_TOKEN}\n")).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_never_reach_the_database_file_or_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let file = admin_file(dir.path());
    let data = dir.path().join("data");
    let p = Proc::start(
        &bin(),
        &data,
        &[
            "--auth",
            "token",
            "--admin-token-file",
            file.to_str().unwrap(),
        ],
    );
    let channel = p.channel().await;
    let mut auth = pb::auth_service_client::AuthServiceClient::with_interceptor(
        channel.clone(),
        Bearer::new(Some(ADMIN_TOKEN)),
    );
    let mut tokens = vec![ADMIN_TOKEN.to_owned()];
    let created = auth
        .create_principal(pb::CreatePrincipalRequest {
            principal: Some(pb::Principal {
                principal_id: "coder".into(),
                roles: vec![pb::Role::Agent.into()],
                agent_ids: vec!["coder".into()],
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner();
    tokens.push(created.token.clone());
    tokens.push(
        auth.rotate_token(pb::RotateTokenRequest {
            principal_id: "coder".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .token,
    );
    // The principal works with its token, and is refused with a wrong one.
    let mut todos = pb::todo_service_client::TodoServiceClient::with_interceptor(
        channel.clone(),
        Bearer::new(Some(&tokens[2])),
    );
    todos
        .read_todos(pb::ReadTodosRequest {
            agent_id: "coder".into(),
        })
        .await
        .unwrap();
    let mut stale = pb::todo_service_client::TodoServiceClient::with_interceptor(
        channel,
        Bearer::new(Some(&tokens[1])),
    );
    let err = stale
        .read_todos(pb::ReadTodosRequest {
            agent_id: "coder".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    let log = p.log();
    p.stop().await;
    let bytes = std::fs::read(data.join("cairn.redb")).unwrap();
    for token in &tokens {
        let needle = token.as_bytes();
        assert!(
            !bytes.windows(needle.len()).any(|w| w == needle),
            "a token is in the database file"
        );
        // Not its random part either.
        let tail = &needle[needle.len() - 24..];
        assert!(!bytes.windows(tail.len()).any(|w| w == tail));
        assert!(!log.contains(token.as_str()), "a token is in the log");
    }
}

#[tokio::test]
async fn an_open_server_refuses_to_listen_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(bin());
    cmd.args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path());
    let Err((status, log)) = Proc::spawn(&mut cmd) else {
        panic!("an open server listened on 0.0.0.0");
    };
    assert!(!status.success());
    assert!(log.contains("--auth token"), "{log}");
    assert!(log.contains("--allow-unauthenticated"), "{log}");
    // Accepting the risk explicitly works.
    let mut cmd = std::process::Command::new(bin());
    cmd.args([
        "serve",
        "--listen",
        "0.0.0.0:0",
        "--allow-unauthenticated",
        "--data-dir",
    ])
    .arg(dir.path());
    let p = Proc::spawn(&mut cmd).unwrap();
    assert!(
        p.logged("WITHOUT authentication", Duration::from_secs(5))
            .await,
        "{}",
        p.log()
    );
    p.stop().await;
}

/// A CA, a server certificate for 127.0.0.1 and localhost, and a client
/// certificate, as PEM files in `dir`.
pub struct Pki {
    pub ca: std::path::PathBuf,
    pub server_cert: std::path::PathBuf,
    pub server_key: std::path::PathBuf,
    pub client_cert: std::path::PathBuf,
    pub client_key: std::path::PathBuf,
}

pub fn pki(dir: &std::path::Path) -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Names of their own: OpenSSL (curl) takes a leaf whose issuer name
    // equals its subject for self-signed.
    ca.distinguished_name = rcgen::DistinguishedName::new();
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "cairn test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let mut server = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    server.distinguished_name = rcgen::DistinguishedName::new();
    server
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    server
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let server_cert = server.signed_by(&server_key, &issuer).unwrap();
    let client_key = KeyPair::generate().unwrap();
    let client = CertificateParams::new(vec!["an-agent".to_owned()]).unwrap();
    let client_cert = client.signed_by(&client_key, &issuer).unwrap();
    let write = |name: &str, pem: String| {
        let path = dir.join(name);
        std::fs::write(&path, pem).unwrap();
        path
    };
    Pki {
        ca: write("ca.pem", ca_cert.pem()),
        server_cert: write("server.pem", server_cert.pem()),
        server_key: write("server.key", server_key.serialize_pem()),
        client_cert: write("client.pem", client_cert.pem()),
        client_key: write("client.key", client_key.serialize_pem()),
    }
}

async fn health(channel: Channel) -> Result<(), tonic::Status> {
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map(drop)
}

async fn tls_channel(
    addr: &str,
    pki: &Pki,
    with_cert: bool,
) -> Result<Channel, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(&pki.ca).unwrap()))
        .domain_name("localhost");
    if with_cert {
        tls = tls.identity(Identity::from_pem(
            std::fs::read(&pki.client_cert).unwrap(),
            std::fs::read(&pki.client_key).unwrap(),
        ));
    }
    Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let s = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    // TLS: the CA's clients connect; a plaintext client does not.
    let p = Proc::start(
        &bin(),
        &dir.path().join("data1"),
        &[
            "--tls-cert",
            &s(&pki.server_cert),
            "--tls-key",
            &s(&pki.server_key),
        ],
    );
    health(tls_channel(&p.addr, &pki, false).await.unwrap())
        .await
        .unwrap();
    let plain = Channel::from_shared(format!("http://{}", p.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    assert!(
        health(plain).await.is_err(),
        "plaintext spoke to a TLS port"
    );
    // The CLI with --tls-ca.
    let out = std::process::Command::new(bin())
        .args([
            "session",
            "list",
            "--server",
            &format!("https://localhost:{}", p.addr.rsplit(':').next().unwrap()),
        ])
        .args(["--tls-ca", &s(&pki.ca)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    p.stop().await;

    // Mutual TLS: a client without a certificate is refused.
    let p = Proc::start(
        &bin(),
        &dir.path().join("data2"),
        &[
            "--tls-cert",
            &s(&pki.server_cert),
            "--tls-key",
            &s(&pki.server_key),
            "--tls-client-ca",
            &s(&pki.ca),
        ],
    );
    let refused = match tls_channel(&p.addr, &pki, false).await {
        Ok(ch) => health(ch).await.is_err(),
        Err(_) => true,
    };
    assert!(refused, "a client without a certificate got through");
    health(tls_channel(&p.addr, &pki, true).await.unwrap())
        .await
        .unwrap();
    p.stop().await;
}

/// Hardening round 2, item 16: under TLS the metrics listener speaks TLS
/// too, with the same client-certificate rule as the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_16_metrics_follow_the_servers_tls() {
    if !cairn_testkit::tools::needs(
        cairn_testkit::tools::runs("curl", &["--version"]),
        "curl",
        "Debian: apt-get install curl",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let s = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let p = Proc::start(
        &bin(),
        &dir.path().join("data"),
        &[
            "--tls-cert",
            &s(&pki.server_cert),
            "--tls-key",
            &s(&pki.server_key),
            "--tls-client-ca",
            &s(&pki.ca),
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let port = p.metrics.clone().unwrap();
    let port = port.rsplit(':').next().unwrap().to_owned();
    let curl = |args: &[&str]| {
        std::process::Command::new("curl")
            .args(["-sS", "--max-time", "10"])
            .args(args)
            .output()
            .unwrap()
    };
    let plain = curl(&[&format!("http://127.0.0.1:{port}/metrics")]);
    assert!(
        !String::from_utf8_lossy(&plain.stdout).contains("cairn_"),
        "plaintext metrics under TLS"
    );
    let url = format!("https://localhost:{port}/metrics");
    let no_cert = curl(&["--cacert", &s(&pki.ca), &url]);
    assert!(
        !no_cert.status.success(),
        "no client certificate, no metrics"
    );
    let ok = curl(&[
        "--cacert",
        &s(&pki.ca),
        "--cert",
        &s(&pki.client_cert),
        "--key",
        &s(&pki.client_key),
        &url,
    ]);
    assert!(
        String::from_utf8_lossy(&ok.stdout).contains("cairn_"),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    p.stop().await;
}
