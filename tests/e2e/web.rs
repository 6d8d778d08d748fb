//! The dashboard's defences, over the real binary: forged cross-site and
//! DNS-rebinding requests get 403 and change nothing; the page carries its
//! CSRF token, a CSP and no framing.

use cairn_api as pb;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use cairn_testkit::Proc;

use crate::bin;

/// One HTTP/1.1 request with `connection: close`; the status, the headers
/// (lowercased names) and the body.
pub async fn http(addr: &str, head: &str, body: &str) -> (u16, Vec<(String, String)>, String) {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{head}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

async fn awaiting_approval(p: &Proc, session: &str) {
    let mut plans = pb::plan_service_client::PlanServiceClient::new(p.channel().await);
    plans
        .enter_plan_mode(pb::EnterPlanModeRequest {
            session_id: session.into(),
            goal: "ship".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    plans
        .exit_plan_mode(pb::ExitPlanModeRequest {
            session_id: session.into(),
            plan: Some(pb::ImplementationPlan {
                summary: "a plan".into(),
                steps: vec![pb::ImplementationStep {
                    id: 1,
                    description: "one".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
}

async fn mode(p: &Proc, session: &str) -> pb::PlanMode {
    pb::plan_service_client::PlanServiceClient::new(p.channel().await)
        .get_plan_status(pb::GetPlanStatusRequest {
            session_id: session.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap()
        .mode()
}

#[tokio::test]
async fn forged_requests_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = Proc::start(&bin(), dir.path(), &["--web-listen", "127.0.0.1:0"]);
    let web = p.web.clone().unwrap();
    awaiting_approval(&p, "orch").await;

    // The page: its token, a CSP that forbids framing and inline script.
    let (status, headers, page) = http(&web, &format!("GET / HTTP/1.1\r\nHost: {web}"), "").await;
    assert_eq!(status, 200);
    let csp = header(&headers, "content-security-policy").unwrap();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(header(&headers, "x-frame-options"), Some("DENY"));
    let token = page
        .split("name=\"csrf-token\" content=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    assert_eq!(token.len(), 64, "32 random bytes as hex");
    assert!(!page.contains("<script>"), "no inline script");

    let approve = "POST /api/sessions/orch/approve HTTP/1.1";
    let forged = [
        // What `fetch(url, {method: 'POST', mode: 'no-cors'})` sends.
        (
            format!("{approve}\r\nHost: {web}\r\nOrigin: https://evil.example"),
            "",
        ),
        // No token, same origin as far as headers go.
        (
            format!("{approve}\r\nHost: {web}\r\ncontent-type: application/json"),
            "{}",
        ),
        // A wrong token.
        (
            format!(
                "{approve}\r\nHost: {web}\r\ncontent-type: application/json\r\nx-csrf-token: {}",
                "0".repeat(64)
            ),
            "{}",
        ),
        // The right token from the wrong origin.
        (
            format!(
                "{approve}\r\nHost: {web}\r\nOrigin: http://evil.example\r\nx-csrf-token: {token}"
            ),
            "{}",
        ),
        // A cross-site request as the browser labels it.
        (
            format!(
                "{approve}\r\nHost: {web}\r\nSec-Fetch-Site: cross-site\r\nx-csrf-token: {token}"
            ),
            "{}",
        ),
        // DNS rebinding: another name that resolves to this address.
        (
            format!(
                "{approve}\r\nHost: rebind.evil.example:{}\r\nx-csrf-token: {token}",
                web.rsplit(':').next().unwrap()
            ),
            "{}",
        ),
    ];
    for (head, body) in &forged {
        let (status, headers, _) = http(&web, head, body).await;
        assert_eq!(status, 403, "{head}");
        assert!(header(&headers, "content-security-policy").is_some());
        assert_eq!(
            mode(&p, "orch").await,
            pb::PlanMode::AwaitingApproval,
            "{head}"
        );
    }
    // Reading through a rebound name is refused as well.
    for path in ["/", "/events", "/app.js"] {
        let (status, _, body) = http(
            &web,
            &format!("GET {path} HTTP/1.1\r\nHost: rebind.evil.example"),
            "",
        )
        .await;
        assert_eq!(status, 403, "{path}");
        assert!(!body.contains("csrf-token"));
    }

    // The page's own request, with its token, works.
    let (status, _, body) = http(
        &web,
        &format!("{approve}\r\nHost: {web}\r\nOrigin: http://{web}\r\ncontent-type: application/json\r\nx-csrf-token: {token}"),
        "{}",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(mode(&p, "orch").await, pb::PlanMode::Normal);
    p.stop().await;
}

#[tokio::test]
async fn ids_that_paths_normalise_away_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = Proc::start(&bin(), dir.path(), &[]);
    let mut sessions = pb::session_service_client::SessionServiceClient::new(p.channel().await);
    for id in [".", ".."] {
        let e = sessions
            .create_session(pb::CreateSessionRequest {
                session: Some(pb::Session {
                    session_id: id.into(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{id}: {e:?}");
    }
    p.stop().await;
}

/// Signs in with `token`; the status and the session cookie, if any.
async fn sign_in(web: &str, token: &str) -> (u16, Option<String>) {
    let (status, headers, _) = http(
        web,
        &format!("POST /login HTTP/1.1\r\nHost: {web}\r\nOrigin: http://{web}\r\ncontent-type: application/x-www-form-urlencoded"),
        &format!("token={token}"),
    )
    .await;
    let cookie = header(&headers, "set-cookie")
        .and_then(|c| c.split(';').next())
        .map(str::to_owned);
    (status, cookie)
}

/// Whether `cookie` still opens the dashboard.
async fn signed_in(web: &str, cookie: &str) -> bool {
    let (status, _, _) = http(
        web,
        &format!("GET / HTTP/1.1\r\nHost: {web}\r\nCookie: {cookie}"),
        "",
    )
    .await;
    status == 200
}

/// Hardening round 2, item 11: another principal cannot sign an approver
/// out by signing in over and over. Sign-ins are capped per token (its own
/// oldest goes) and `/login` is rate-limited per address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_11_nobody_signs_an_approver_out() {
    use cairn_api::auth_service_client::AuthServiceClient;
    let dir = tempfile::tempdir().unwrap();
    let p = crate::with_admin(dir.path(), &["--web-listen", "127.0.0.1:0"]);
    let web = p.web.clone().unwrap();
    let mut tokens = Vec::new();
    for (id, role) in [("lead", pb::Role::Approver), ("noisy", pb::Role::Viewer)] {
        let mut req = tonic::Request::new(pb::CreatePrincipalRequest {
            principal: Some(pb::Principal {
                principal_id: id.into(),
                roles: vec![role.into()],
                ..Default::default()
            }),
        });
        req.metadata_mut().insert(
            "authorization",
            format!("Bearer {}", crate::ADMIN_TOKEN).parse().unwrap(),
        );
        let r = AuthServiceClient::new(p.channel().await)
            .create_principal(req)
            .await
            .unwrap()
            .into_inner();
        tokens.push(r.token);
    }
    let (_, lead) = sign_in(&web, &tokens[0]).await;
    let lead = lead.unwrap();
    // A burst of sign-ins from one address (the approver's used one of its
    // ten): some go through, then 429.
    let mut noisy = Vec::new();
    let mut limited = 0;
    for _ in 0..15 {
        match sign_in(&web, &tokens[1]).await {
            (303, Some(c)) => noisy.push(c),
            (429, _) => limited += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(
        limited >= 1 && noisy.len() <= 12,
        "{} through, {limited} limited",
        noisy.len()
    );
    // Slowly, past the per-token cap of 16: its own oldest sign-in ends.
    while noisy.len() < 17 {
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        if let (303, Some(c)) = sign_in(&web, &tokens[1]).await {
            noisy.push(c);
        }
    }
    assert!(
        !signed_in(&web, &noisy[0]).await,
        "the token's oldest sign-in ended"
    );
    assert!(signed_in(&web, &noisy[16]).await);
    assert!(signed_in(&web, &lead).await, "the approver stays signed in");
    p.stop().await;
}
