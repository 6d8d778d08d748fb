//! `cairn hook`, run as the agent CLIs run it: one process per event, the
//! payload on stdin, captured payloads of the real CLIs
//! (`tests/fixtures/agent-samples`), against a real server; then what a
//! client of the API sees: sessions, observed plans, and a watch.

use std::time::Duration;

use cairn_api as pb;
use cairn_testkit::{Proc, TestServer};
use tokio::process::Command;
use tokio_stream::StreamExt;

use crate::bin;

fn samples(name: &str) -> Vec<serde_json::Value> {
    let path = format!(
        "{}/tests/fixtures/agent-samples/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Runs `cairn hook ARGS` with `payload` on stdin as a CLI would; asserts
/// what every hook must do (exit 0, nothing on stdout); returns stderr and
/// how long it took.
async fn hook(args: &[&str], payload: &str) -> (String, Duration) {
    let (out, took) =
        crate::run_with_stdin(Command::new(bin()).arg("hook").args(args), payload).await;
    assert!(out.status.success(), "a hook exits 0: {out:?}");
    assert!(out.stdout.is_empty(), "a hook prints nothing on stdout");
    (String::from_utf8(out.stderr).unwrap(), took)
}

fn steps(p: &pb::Plan) -> Vec<(u32, String, pb::StepStatus)> {
    p.items
        .iter()
        .map(|i| (i.id, i.step.clone(), i.status()))
        .collect()
}

async fn plan(server: &TestServer, id: &str) -> pb::Plan {
    server
        .plans()
        .await
        .get_plan(pb::GetPlanRequest {
            session_id: id.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .plan
        .unwrap()
}

#[tokio::test]
async fn captured_runs_of_the_three_clis_are_mirrored_and_watched_in_order() {
    let server = TestServer::start().await;
    let spool = tempfile::tempdir().unwrap();
    server
        .sessions()
        .await
        .create_session(cairn_testkit::build::session("orch", ""))
        .await
        .unwrap();
    let mut watch = pb::watch_service_client::WatchServiceClient::new(server.channel().await)
        .watch(pb::WatchRequest {
            target: Some(pb::watch_request::Target::SessionTree("orch".into())),
            start_revision: Some(1),
            ..pb::WatchRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    let addr = format!("http://{}", server.addr);
    let common = [
        "--server",
        &addr,
        "--parent-session",
        "orch",
        "--spool-dir",
        spool.path().to_str().unwrap(),
    ];
    for (cli, file) in [
        ("claude-code", "claude_plan3_hooks.json"),
        ("claude-code", "claude_sub1_hooks.json"),
        ("codex", "codex_up2_hooks.json"),
        ("codex", "codex_sub1_hooks.json"),
        ("gemini", "gemini_todoy_hooks.json"),
    ] {
        for payload in samples(file) {
            let mut args = vec![cli];
            args.extend_from_slice(&common);
            let (stderr, _) = hook(&args, &payload.to_string()).await;
            assert!(stderr.is_empty(), "{cli} {file}: {stderr}");
        }
    }

    // Malformed and truncated payloads: skipped with a line on stderr, the
    // agent not failed (exit 0, nothing on stdout: `hook` checks both).
    let whole = samples("claude_plan3_hooks.json")[0].to_string();
    for (bad, why) in [
        (&whole[..whole.len() / 2], "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (r#"{"hook_event_name": "Stop"}"#, "no session_id"),
    ] {
        let mut args = vec!["claude-code"];
        args.extend_from_slice(&common);
        let (stderr, _) = hook(&args, bad).await;
        assert!(
            stderr.contains("skipped") && stderr.contains(why),
            "{stderr}"
        );
    }

    // Claude Code: the task walked to completed, ids as the agent's.
    let claude = plan(&server, "claude:51cf74cf-8fc9-40c1-a664-1d2504485bcc").await;
    assert_eq!(
        steps(&claude),
        [(1, "Write the parser".into(), pb::StepStatus::Completed)]
    );
    assert_eq!(claude.source(), pb::PlanSource::Observed);
    // Its sub-agent: a child session of its own, under the CLI's session.
    let child_id = "claude:8a183fd6-490e-493c-a963-40e420104592:a317bcfffd44cd697";
    let child = server
        .sessions()
        .await
        .get_session(pb::GetSessionRequest {
            session_id: child_id.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(
        child.parent_session_id,
        "claude:8a183fd6-490e-493c-a963-40e420104592"
    );
    assert_eq!(child.agent_id, "general-purpose");
    assert_eq!(child.labels["hook.state"], "stopped");
    assert_eq!(
        steps(&plan(&server, child_id).await),
        [(1, "Write the parser".into(), pb::StepStatus::Pending)]
    );
    // Codex: in progress kept; the sub-agent's plan in its child session.
    let codex = plan(&server, "codex:01a22e9e-f9c4-7271-b15c-3425b62ea3ab").await;
    let statuses: Vec<_> = codex.items.iter().map(pb::PlanItem::status).collect();
    assert_eq!(
        statuses,
        [pb::StepStatus::Completed, pb::StepStatus::InProgress]
    );
    let sub = plan(
        &server,
        "codex:01a22e9f-4c28-7132-b829-eb236c269348:01a22e9f-5154-7dd0-9057-d50aaa348ad4",
    )
    .await;
    assert_eq!(sub.items.len(), 2);
    // Gemini.
    let gemini = plan(&server, "gemini:755a0092-33cd-4583-8d39-19a01cb7242e").await;
    assert_eq!(gemini.items[1].status(), pb::StepStatus::InProgress);

    // The watch on the tree: every change, in order, and the pre- and
    // post-events of one tool call as one revision.
    let last = codex.revision.max(gemini.revision).max(claude.revision);
    let mut claude_steps = Vec::new();
    let mut revisions = Vec::new();
    while revisions.last().is_none_or(|r| *r < last) {
        let msg = tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .expect("the watch keeps up")
            .unwrap()
            .unwrap();
        if let Some(pb::watch_response::Kind::Event(e)) = msg.kind {
            revisions.push(e.revision);
            if let Some(pb::event::Object::Plan(p)) = &e.object
                && p.session_id == "claude:51cf74cf-8fc9-40c1-a664-1d2504485bcc"
            {
                claude_steps.push(steps(p)[0].2);
            }
        }
    }
    assert!(
        revisions.windows(2).all(|w| w[0] <= w[1]),
        "in order: {revisions:?}"
    );
    assert_eq!(
        claude_steps,
        [
            pb::StepStatus::Pending,
            pb::StepStatus::InProgress,
            pb::StepStatus::Completed
        ],
        "each change once"
    );
}

#[tokio::test]
async fn with_cairn_down_hooks_return_and_the_spool_converges_after_a_restart() {
    let spool = tempfile::tempdir().unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("http://127.0.0.1:{port}");
    let args = [
        "codex",
        "--server",
        &addr,
        "--spool-dir",
        spool.path().to_str().unwrap(),
    ];
    let mut slowest = Duration::ZERO;
    for payload in samples("codex_up2_hooks.json") {
        let (stderr, took) = hook(&args, &payload.to_string()).await;
        slowest = slowest.max(took);
        assert!(stderr.contains("spooled"), "{stderr}");
    }
    // Said, not asserted (timings vary with the machine): the bound is the
    // hook's --timeout, 1 s by default.
    eprintln!("slowest hook with Cairn down: {slowest:?}");

    let dir = tempfile::tempdir().unwrap();
    let server = Proc::spawn(
        std::process::Command::new(bin())
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--data-dir",
            ])
            .arg(dir.path()),
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["hook", "flush", "--server", &addr, "--spool-dir"])
        .arg(spool.path())
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut plans = pb::plan_service_client::PlanServiceClient::connect(addr.clone())
        .await
        .unwrap();
    let p = plans
        .get_plan(pb::GetPlanRequest {
            session_id: "codex:01a22e9e-f9c4-7271-b15c-3425b62ea3ab".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .plan
        .unwrap();
    // The same final state as with the server up all along.
    let statuses: Vec<_> = p.items.iter().map(pb::PlanItem::status).collect();
    assert_eq!(
        statuses,
        [pb::StepStatus::Completed, pb::StepStatus::InProgress]
    );
    assert_eq!(p.explanation, "Mock plan step 1");
    let session = pb::session_service_client::SessionServiceClient::connect(addr)
        .await
        .unwrap()
        .get_session(pb::GetSessionRequest {
            session_id: "codex:01a22e9e-f9c4-7271-b15c-3425b62ea3ab".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(session.labels["hook.state"], "stopped");
    assert_eq!(session.labels["hook.model"], "gpt-5-mock");
    drop(server);
}

#[tokio::test]
async fn with_auth_an_orchestrator_of_the_parent_mirrors_and_nothing_else() {
    use cairn_testkit::Bearer;
    let dir = tempfile::tempdir().unwrap();
    let p = crate::with_admin(dir.path(), &[]);
    let channel = p.channel().await;
    let admin = Bearer::new(Some(crate::ADMIN_TOKEN));
    pb::session_service_client::SessionServiceClient::with_interceptor(
        channel.clone(),
        admin.clone(),
    )
    .create_session(cairn_testkit::build::session("orch", ""))
    .await
    .unwrap();
    let token = pb::auth_service_client::AuthServiceClient::with_interceptor(
        channel.clone(),
        admin.clone(),
    )
    .create_principal(pb::CreatePrincipalRequest {
        principal: Some(pb::Principal {
            principal_id: "hooks".into(),
            roles: vec![pb::Role::Orchestrator.into()],
            session_roots: vec!["orch".into()],
            ..pb::Principal::default()
        }),
    })
    .await
    .unwrap()
    .into_inner()
    .token;
    let spool = tempfile::tempdir().unwrap();
    let addr = format!("http://{}", p.addr);
    let run = |parent: &'static str| {
        let (addr, token, spool) = (addr.clone(), token.clone(), spool.path().to_owned());
        async move {
            let mut said = String::new();
            for mut payload in samples("claude_sub1_hooks.json") {
                if parent != "orch" {
                    // Another run of the agent, whose sessions are new.
                    payload["session_id"] = "another-run".into();
                }
                let args = [
                    "claude-code",
                    "--server",
                    &addr,
                    "--token",
                    &token,
                    "--parent-session",
                    parent,
                    "--spool-dir",
                    spool.to_str().unwrap(),
                ];
                let (stderr, _) = hook(&args, &payload.to_string()).await;
                said.push_str(&stderr);
            }
            said
        }
    };
    let said = run("orch").await;
    assert!(said.is_empty(), "{said}");
    let mut plans =
        pb::plan_service_client::PlanServiceClient::with_interceptor(channel.clone(), admin);
    let child = plans
        .get_plan(pb::GetPlanRequest {
            session_id: "claude:8a183fd6-490e-493c-a963-40e420104592:a317bcfffd44cd697".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .plan
        .unwrap();
    assert_eq!(steps(&child)[0].1, "Write the parser");
    // Outside its root: refused, said on stderr, dropped (not spooled for
    // ever behind the next events), and the agent is not held up.
    let said = run("elsewhere").await;
    assert!(said.contains("refused"), "{said}");
    let status = plans
        .get_plan(pb::GetPlanRequest {
            session_id: "claude:another-run".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn parallel_hooks_of_one_session_lose_nothing() {
    // Eight tasks created at once, each reported by its own hook process,
    // as parallel tool calls are: every one lands, with no flush.
    let server = TestServer::start().await;
    let spool = tempfile::tempdir().unwrap();
    let addr = format!("http://{}", server.addr);
    let mut runs = Vec::new();
    for id in 1..=8 {
        let payload = serde_json::json!({
            "session_id": "parallel", "hook_event_name": "TaskCreated",
            "task_id": id.to_string(), "task_subject": format!("task {id}"),
        })
        .to_string();
        let args = [
            "claude-code".to_owned(),
            "--server".to_owned(),
            addr.clone(),
            "--spool-dir".to_owned(),
            spool.path().to_str().unwrap().to_owned(),
        ];
        runs.push(tokio::spawn(async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            hook(&args, &payload).await
        }));
    }
    for r in runs {
        r.await.unwrap();
    }
    let p = plan(&server, "claude:parallel").await;
    let mut ids: Vec<u32> = p.items.iter().map(|i| i.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=8).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_hung_cairn_costs_one_timeout_then_hooks_spool_without_waiting() {
    // A listener that accepts and never answers: a hung host.
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("http://{}", hung.local_addr().unwrap());
    let spool = tempfile::tempdir().unwrap();
    let args = [
        "codex",
        "--server",
        &addr,
        "--spool-dir",
        spool.path().to_str().unwrap(),
    ];
    let payloads = samples("codex_up2_hooks.json");
    let (first, took) = hook(&args, &payloads[0].to_string()).await;
    assert!(first.contains("not reachable"), "{first}");
    eprintln!("the first hook against a hung Cairn: {took:?}");
    // The next ones do not try again for a few seconds: spooled at once.
    for p in &payloads[1..] {
        let (stderr, _) = hook(&args, &p.to_string()).await;
        assert!(stderr.contains("unreachable moments ago"), "{stderr}");
    }
    drop(hung);
}
