//! The `cairn` client subcommands, run as the real binary against a real
//! server, reading what a person or a script would read.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use cairn_testkit::TestServer;

use crate::bin;

/// Runs `cairn ARGS` with `stdin`, returns (success, stdout, stderr).
async fn cairn(server: &TestServer, args: &[&str], stdin: &str) -> (bool, String, String) {
    let (out, _) = crate::run_with_stdin(
        Command::new(bin())
            .args(args)
            .args(["--server", &format!("http://{}", server.addr)])
            .env_remove("NO_COLOR"),
        stdin,
    )
    .await;
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

const PLAN: &str = r#"{"explanation": "auth", "plan": [
  {"step": "Design the database schema", "status": "completed"},
  {"step": "Implement the sign-up API", "status": "in_progress"},
  {"step": "Implement the login API", "status": "pending"},
  {"step": "Add password hashing", "status": "pending"}
]}"#;

#[tokio::test]
async fn a_person_and_a_script_use_the_cli() {
    let server = TestServer::start().await;
    let (ok, out, _) = cairn(
        &server,
        &["session", "create", "orch", "--agent", "main"],
        "",
    )
    .await;
    assert!(ok);
    assert_eq!(out, "created orch\n");
    let (ok, _, _) = cairn(
        &server,
        &[
            "session",
            "create",
            "orch:coder",
            "--parent",
            "orch",
            "--agent",
            "coder",
        ],
        "",
    )
    .await;
    assert!(ok);
    let (ok, out, _) = cairn(&server, &["session", "list"], "").await;
    assert!(ok);
    assert_eq!(out, "orch  (main)\n  orch:coder  (coder)\n");

    let (ok, out, _) = cairn(&server, &["plan", "update", "orch:coder"], PLAN).await;
    assert!(ok, "{out}");
    assert_eq!(out, "Plan updated (revision 3)\n");
    // Not a terminal: the task box, without escape codes.
    let (ok, out, _) = cairn(&server, &["plan", "show", "orch:coder"], "").await;
    assert!(ok);
    assert_eq!(
        out,
        "╭─ 📋 Tasks ───────────────────╮\n\
         │ ✓ Design the database schema │\n\
         │ ▶ Implement the sign-up API  │\n\
         │ ○ Implement the login API    │\n\
         │ ○ Add password hashing       │\n\
         ╰──────────────────────────────╯\n"
    );
    let (ok, out, _) = cairn(
        &server,
        &["plan", "show", "orch:coder", "--output", "json"],
        "",
    )
    .await;
    assert!(ok);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["plan"][1]["status"], "in_progress");
    assert_eq!(json["mode"], "normal");

    // The rules come back as errors with their exact text.
    let two = PLAN.replace("\"pending\"}\n]", "\"in_progress\"}\n]");
    let (ok, _, err) = cairn(&server, &["plan", "update", "orch:coder"], &two).await;
    assert!(!ok);
    assert_eq!(
        err,
        "error: InvalidArgument: At most one step can be in_progress at a time\n"
    );
    let (ok, out, _) = cairn(
        &server,
        &["plan", "update", "orch:coder"],
        r#"{"plan": [{"step": "Fix typo", "status": "pending"}]}"#,
    )
    .await;
    assert!(ok);
    assert!(
        out.starts_with("<system_hint tool=\"update_plan\" reason=\"simple_task\">"),
        "{out}"
    );

    let (ok, out, _) = cairn(&server, &["todo", "show", "coder"], "").await;
    assert!(ok);
    assert_eq!(out, "📋 No tasks\n");
    let todos =
        r#"[{"id": "1", "content": "Write tests", "status": "in_progress", "priority": "high"}]"#;
    let (ok, _, _) = cairn(&server, &["todo", "write", "coder"], todos).await;
    assert!(ok);
    let (ok, out, _) = cairn(
        &server,
        &["todo", "write", "coder", "--output", "json"],
        r#"[{"id": "2", "content": "Ship", "status": "pending"}]"#,
    )
    .await;
    assert!(ok);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        json["todos"][0]["status"], "completed",
        "the omitted item is kept, completed"
    );
    assert_eq!(json["todos"][1]["id"], "2");
    assert!(
        json["todos"][0]["created_at"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );

    let (ok, out, _) = cairn(
        &server,
        &["wait", "--tree", "orch", "--timeout", "100ms"],
        "",
    )
    .await;
    assert!(!ok, "not every plan is completed");
    assert!(out.starts_with("timed out at revision"), "{out}");
}

#[tokio::test]
async fn the_board_follows_a_tree_live() {
    let server = TestServer::start().await;
    cairn(
        &server,
        &["session", "create", "orch", "--agent", "main"],
        "",
    )
    .await;
    cairn(
        &server,
        &[
            "session",
            "create",
            "orch:coder",
            "--parent",
            "orch",
            "--agent",
            "coder",
        ],
        "",
    )
    .await;
    let mut board = Command::new(bin())
        .args([
            "watch",
            "--tree",
            "orch",
            "--server",
            &format!("http://{}", server.addr),
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(board.stdout.take().unwrap()).lines();
    // The first frame: both sessions, nothing planned yet.
    let mut frame = Vec::new();
    let read_frame =
        async |lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
               frame: &mut Vec<String>| {
            frame.clear();
            while let Some(line) = lines.next_line().await.unwrap() {
                if line.is_empty() {
                    return;
                }
                frame.push(line);
            }
        };
    tokio::time::timeout(Duration::from_secs(20), read_frame(&mut lines, &mut frame))
        .await
        .unwrap();
    assert!(
        frame[0].starts_with("cairn · tree orch · revision 2"),
        "{frame:?}"
    );
    assert!(frame[2].starts_with("orch "), "{frame:?}");
    assert!(frame[3].starts_with("  orch:coder"), "{frame:?}");

    let (ok, _, _) = cairn(&server, &["plan", "update", "orch:coder"], PLAN).await;
    assert!(ok);
    tokio::time::timeout(Duration::from_secs(20), read_frame(&mut lines, &mut frame))
        .await
        .unwrap();
    let coder = &frame[3];
    assert!(coder.contains("1/4"), "{frame:?}");
    assert!(coder.contains("Implement the sign-up API"), "{frame:?}");
    assert!(coder.contains("coder"), "{frame:?}");
    board.kill().await.unwrap();
}

#[tokio::test]
async fn control_characters_in_server_text_never_reach_the_terminal() {
    let server = TestServer::start().await;
    let hostile = r#"{"explanation": "x\u001b]0;pwned\u0007", "plan": [
      {"step": "clear \u001b[2J\u001b[H the screen", "status": "in_progress"},
      {"step": "b", "status": "pending"}, {"step": "c", "status": "pending"},
      {"step": "d\u009b31m", "status": "pending"}]}"#;
    let (ok, _, err) = cairn(&server, &["plan", "update", "s"], hostile).await;
    assert!(ok, "{err}");
    let todos = r#"[{"id": "1", "content": "ring \u0007 bell \u001b[5m", "status": "pending"}]"#;
    let (ok, _, err) = cairn(&server, &["todo", "write", "a"], todos).await;
    assert!(ok, "{err}");
    for args in [
        &["plan", "show", "s"][..],
        &["session", "show", "s"],
        &["todo", "show", "a"],
        &["watch", "--all", "--from-revision", "1"],
    ] {
        let out = if args[0] == "watch" {
            // A follower never exits by itself: read what it printed.
            let mut child = Command::new(bin())
                .args(args)
                .args(["--server", &format!("http://{}", server.addr)])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let mut text = String::new();
            for _ in 0..2 {
                let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
                    .await
                    .unwrap()
                    .unwrap()
                    .unwrap();
                text.push_str(&line);
            }
            child.kill().await.unwrap();
            text
        } else {
            let (ok, out, err) = cairn(&server, args, "").await;
            assert!(ok, "{err}");
            out
        };
        assert!(
            !out.contains(['\u{1b}', '\u{7}', '\u{9b}']),
            "{args:?} printed a control character: {out:?}"
        );
        assert!(out.contains('␛') || args[0] == "watch", "{args:?}: {out:?}");
    }
}

/// `cairn inbox` lists what awaits approval, for a person and for a
/// script, and an approval takes the item out.
#[tokio::test]
async fn the_inbox_lists_what_awaits_approval() {
    use cairn_api as pb;
    let server = TestServer::start().await;
    let (ok, out, _) = cairn(&server, &["inbox"], "").await;
    assert!(ok);
    assert_eq!(out, "Nothing awaits your approval.\n");
    let mut plans = server.plans().await;
    plans
        .update_plan(cairn_testkit::update(
            "orch:coder",
            cairn_testkit::five_steps(),
        ))
        .await
        .unwrap();
    plans
        .enter_plan_mode(pb::EnterPlanModeRequest {
            session_id: "orch:coder".into(),
            goal: "Add authentication".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let plan = pb::ImplementationPlan {
        summary: "JWT login".into(),
        steps: vec![pb::ImplementationStep {
            id: 1,
            description: "Handler".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    plans
        .exit_plan_mode(pb::ExitPlanModeRequest {
            session_id: "orch:coder".into(),
            plan: Some(plan),
            ..Default::default()
        })
        .await
        .unwrap();
    let (ok, out, _) = cairn(&server, &["inbox"], "").await;
    assert!(ok);
    assert!(out.contains(" 1 "), "{out}");
    assert!(out.contains("orch:coder"), "{out}");
    assert!(out.contains(": JWT login"), "{out}");
    assert!(out.contains("goal: Add authentication"), "{out}");
    let (ok, out, _) = cairn(&server, &["inbox", "--output", "json"], "").await;
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["items"][0]["session_id"], "orch:coder");
    assert_eq!(v["items"][0]["kind"], "plan");
    assert_eq!(v["items"][0]["summary"], "JWT login");
    assert!(v["items"][0]["waiting_since"].is_string());
    let (ok, _, err) = cairn(&server, &["plan", "approve", "orch:coder"], "").await;
    assert!(ok, "{err}");
    let (ok, out, _) = cairn(&server, &["inbox", "--output", "json"], "").await;
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["items"], serde_json::json!([]));
}
