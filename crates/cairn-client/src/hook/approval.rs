//! `cairn hook claude-code-plan`: Claude Code's plans approved in Cairn.
//!
//! ```text
//!  Claude Code ── PreToolUse ExitPlanMode ──▶ cairn hook claude-code-plan
//!      the plan (tool_input.plan, or the plan file the session wrote)
//!      ──▶ EnterPlanMode + ExitPlanMode on the agent's session (AWAITING_APPROVAL)
//!      ──▶ waits: approved ─▶ {"permissionDecision": "allow"}
//!                 rejected ─▶ {"permissionDecision": "deny", reason as feedback}
//!      Cairn unreachable, or no decision in --wait: prints nothing, and
//!      Claude Code asks as it always does (never a silent allow)
//! ```
//!
//! Why `PreToolUse`: in Claude Code 2.1.328 it runs for `ExitPlanMode`
//! before any permission check, interactive or headless (`claude -p` with
//! `--permission-prompt-tool`), and its decision is honoured both ways: a
//! deny's reason is the tool result the model reads, and an allow that
//! carries the tool's input back (`updatedInput`) approves the plan. An
//! allow without it is ignored for this tool, which asks for a person.
//! `PermissionRequest` was tried too: headless, its allow (with or without
//! the input) still went on to the permission-prompt tool, which then
//! decided, so Cairn's approval would not count. Since this version the
//! tool's input carries the plan (`plan`, `planFilePath`), read from the
//! plan file the agent wrote; with an older input the hook reads the last
//! plan file the transcript shows written.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cairn_api as pb;
use cairn_core::duration::parse_duration;
use serde_json::{Value, json};
use tonic::Code;

use crate::conn::{Api, ServerArgs};

/// Largest payload, transcript tail or plan file read.
const MAX_READ: u64 = 4 * 1024 * 1024;
/// How often the decision is looked for.
const POLL: Duration = Duration::from_millis(300);

/// `cairn hook claude-code-plan`.
#[derive(Debug, Clone, clap::Args)]
pub struct ApprovalArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// The session the agent's session hangs under.
    #[arg(long, env = "CAIRN_PARENT_SESSION_ID")]
    pub parent_session: Option<String>,
    /// How long to wait for a decision; then Claude Code asks as usual.
    /// Keep it under the hook's timeout in the settings (an hour).
    #[arg(long, env = "CAIRN_APPROVAL_WAIT", default_value = "55m", value_parser = parse_duration)]
    pub wait: Duration,
    /// An approval deadline for the plan (with --on-deadline).
    #[arg(long, env = "CAIRN_APPROVAL_DEADLINE", value_parser = parse_duration)]
    pub deadline: Option<Duration>,
    /// What the deadline does: wait, reject or escalate.
    #[arg(long, env = "CAIRN_APPROVAL_ON_DEADLINE", default_value = "reject")]
    pub on_deadline: String,
    /// ESCALATE: who is told (a principal id or `role:<role>`).
    #[arg(long, env = "CAIRN_APPROVAL_ESCALATE_TO")]
    pub escalate_to: Option<String>,
    /// How long reaching Cairn may take before Claude Code asks instead.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
}

/// What the hook answers Claude Code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Approved: why, and the tool input to run `ExitPlanMode` with.
    Allow(String, Value),
    /// Rejected: the reason, which the model reads.
    Deny(String),
}

impl Verdict {
    /// The decision JSON of a `PreToolUse` hook.
    pub fn json(&self) -> Value {
        match self {
            Verdict::Allow(reason, input) => json!({
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "allow",
                    "permissionDecisionReason": reason,
                    "updatedInput": input,
                }
            }),
            Verdict::Deny(reason) => json!({
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": reason,
                }
            }),
        }
    }
}

/// Runs the hook: prints a decision, or nothing (Claude Code then asks as
/// it would without Cairn). Never fails the agent.
pub async fn run(args: &ApprovalArgs) -> Result<(), String> {
    match decide(args).await {
        Ok(Some(verdict)) => {
            // The decision is Claude Code's to read on stdout.
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", verdict.json());
        }
        Ok(None) => {}
        Err(e) => eprintln!("cairn hook claude-code-plan: {e}; Claude Code asks as usual"),
    }
    Ok(())
}

async fn decide(args: &ApprovalArgs) -> Result<Option<Verdict>, String> {
    let mut text = String::new();
    std::io::stdin()
        .take(MAX_READ)
        .read_to_string(&mut text)
        .map_err(|e| format!("reading the payload: {e}"))?;
    let payload: Value =
        serde_json::from_str(&text).map_err(|e| format!("a payload that is not JSON ({e})"))?;
    let field = |k: &str| payload.get(k).and_then(Value::as_str).unwrap_or_default();
    if field("hook_event_name") != "PreToolUse" || field("tool_name") != "ExitPlanMode" {
        return Ok(None);
    }
    let session = field("session_id");
    if session.is_empty() {
        return Err("the payload has no session_id".into());
    }
    let plan_text = plan_text(&payload)?;
    let session_id = super::map::claude_session_id(session);
    let api = args
        .server
        .connect_lazy(args.connect_timeout)
        .map_err(|e| e.to_string())?;
    let plan_id = submit(&api, args, &session_id, &plan_text).await?;
    let input = payload
        .get("tool_input")
        .cloned()
        .unwrap_or_else(|| json!({}));
    wait(
        &api,
        (&session_id, &plan_id),
        input,
        Instant::now() + args.wait,
    )
    .await
}

/// The plan Claude Code is asking to leave plan mode with.
fn plan_text(payload: &Value) -> Result<String, String> {
    if let Some(p) = payload
        .pointer("/tool_input/plan")
        .and_then(Value::as_str)
        .filter(|p| !p.trim().is_empty())
    {
        return Ok(p.to_owned());
    }
    let transcript = payload
        .get("transcript_path")
        .and_then(Value::as_str)
        .ok_or("no plan in the tool input and no transcript to find the plan file in")?;
    let file = plan_file(Path::new(transcript))?
        .ok_or("no plan in the tool input, and the transcript wrote no plan file")?;
    let mut text = String::new();
    std::fs::File::open(&file)
        .and_then(|f| f.take(MAX_READ).read_to_string(&mut text))
        .map_err(|e| format!("{}: {e}", file.display()))?;
    if text.trim().is_empty() {
        return Err(format!("the plan file {} is empty", file.display()));
    }
    Ok(text)
}

/// The last file under a `plans` directory that the transcript shows a
/// `Write` or `Edit` of.
fn plan_file(transcript: &Path) -> Result<Option<PathBuf>, String> {
    let text = std::fs::read_to_string(transcript)
        .map_err(|e| format!("{}: {e}", transcript.display()))?;
    let mut found = None;
    for line in text.lines() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let Some(blocks) = entry.pointer("/message/content").and_then(Value::as_array) else {
            continue;
        };
        for b in blocks {
            let name = b.get("name").and_then(Value::as_str).unwrap_or_default();
            let path = b.pointer("/input/file_path").and_then(Value::as_str);
            if b.get("type").and_then(Value::as_str) == Some("tool_use")
                && matches!(name, "Write" | "Edit" | "MultiEdit")
                && let Some(path) = path
                && Path::new(path)
                    .parent()
                    .and_then(Path::file_name)
                    .is_some_and(|d| d == "plans")
            {
                found = Some(PathBuf::from(path));
            }
        }
    }
    Ok(found)
}

/// A Markdown plan as an implementation plan: its first heading (or line)
/// the summary, its list items the steps (one step when it has none).
pub fn implementation_plan(text: &str) -> pb::ImplementationPlan {
    let mut summary = String::new();
    let mut steps = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() {
            continue;
        }
        if summary.is_empty() {
            line.trim_start_matches('#').trim().clone_into(&mut summary);
            continue;
        }
        let item = line
            .strip_prefix("- ")
            .or_else(|| line.strip_prefix("* "))
            .or_else(|| {
                let digits =
                    line.len() - line.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                (digits > 0)
                    .then(|| {
                        line[digits..]
                            .strip_prefix(". ")
                            .or_else(|| line[digits..].strip_prefix(") "))
                    })
                    .flatten()
            });
        if let Some(item) = item.map(str::trim).filter(|i| !i.is_empty()) {
            steps.push(pb::ImplementationStep {
                id: u32::try_from(steps.len() + 1).unwrap_or(u32::MAX),
                description: item.chars().take(500).collect(),
                ..Default::default()
            });
        }
    }
    if summary.is_empty() {
        summary = "Claude Code's plan".into();
    }
    if steps.is_empty() {
        steps.push(pb::ImplementationStep {
            id: 1,
            description: "Carry out the plan".into(),
            ..Default::default()
        });
    }
    pb::ImplementationPlan {
        summary: summary.chars().take(500).collect(),
        approach: text.chars().take(4000).collect(),
        steps: steps.into_iter().take(100).collect(),
        ..Default::default()
    }
}

fn policy(name: &str) -> Result<pb::DeadlinePolicy, String> {
    match name {
        "wait" => Ok(pb::DeadlinePolicy::Wait),
        "reject" => Ok(pb::DeadlinePolicy::Reject),
        "escalate" => Ok(pb::DeadlinePolicy::Escalate),
        other => Err(format!(
            "--on-deadline {other:?} is not wait, reject or escalate"
        )),
    }
}

/// Puts the plan into the session, awaiting approval: its plan id.
async fn submit(
    api: &Api,
    args: &ApprovalArgs,
    session_id: &str,
    text: &str,
) -> Result<String, String> {
    let mut sessions = pb::session_service_client::SessionServiceClient::new(api.clone());
    let created = sessions
        .create_session(pb::CreateSessionRequest {
            session: Some(pb::Session {
                session_id: session_id.to_owned(),
                agent_id: "claude-code".into(),
                parent_session_id: args.parent_session.clone().unwrap_or_default(),
                ..Default::default()
            }),
        })
        .await;
    match created {
        Ok(_) => {}
        Err(s) if s.code() == Code::AlreadyExists => {}
        Err(s) => return Err(format!("Cairn: {}", s.message())),
    }
    let mut plans = pb::plan_service_client::PlanServiceClient::new(api.clone());
    let plan = implementation_plan(text);
    let status = plans
        .get_plan_status(pb::GetPlanStatusRequest {
            session_id: session_id.to_owned(),
        })
        .await
        .map_err(|s| format!("Cairn: {}", s.message()))?
        .into_inner()
        .status
        .unwrap_or_default();
    if status.mode() == pb::PlanMode::AwaitingApproval {
        // Asked again (the same plan after a retry, or a new one): the
        // pending plan is the one decided on.
        return Ok(status.pending.unwrap_or_default().plan_id);
    }
    if status.mode() == pb::PlanMode::Normal {
        plans
            .enter_plan_mode(pb::EnterPlanModeRequest {
                session_id: session_id.to_owned(),
                goal: plan.summary.clone(),
                ..Default::default()
            })
            .await
            .map_err(|s| format!("Cairn: {}", s.message()))?;
    }
    let deadline = match args.deadline {
        Some(d) => Some(pb::ApprovalDeadline {
            timeout: prost_types::Duration::try_from(d).ok(),
            policy: policy(&args.on_deadline)?.into(),
            escalate_to: args.escalate_to.clone().unwrap_or_default(),
            escalation_timeout: args
                .escalate_to
                .as_ref()
                .and_then(|_| prost_types::Duration::try_from(d).ok()),
            ..Default::default()
        }),
        None => None,
    };
    let pending = plans
        .exit_plan_mode(pb::ExitPlanModeRequest {
            session_id: session_id.to_owned(),
            plan: Some(plan),
            deadline,
            ..Default::default()
        })
        .await
        .map_err(|s| format!("Cairn: {}", s.message()))?
        .into_inner()
        .status
        .and_then(|s| s.pending)
        .unwrap_or_default();
    eprintln!(
        "cairn hook claude-code-plan: plan {} awaits approval in Cairn (session {session_id})",
        pending.plan_id
    );
    Ok(pending.plan_id)
}

/// Waits for the decision on `plan_id`.
async fn wait(
    api: &Api,
    (session_id, plan_id): (&str, &str),
    input: Value,
    until: Instant,
) -> Result<Option<Verdict>, String> {
    let mut plans = pb::plan_service_client::PlanServiceClient::new(api.clone());
    loop {
        let status = plans
            .get_plan_status(pb::GetPlanStatusRequest {
                session_id: session_id.to_owned(),
            })
            .await
            .map_err(|s| format!("Cairn: {}", s.message()))?
            .into_inner()
            .status
            .unwrap_or_default();
        let still_waiting = status
            .pending
            .as_ref()
            .is_some_and(|p| p.plan_id == plan_id);
        if !still_waiting {
            if let Some(active) = status.active.filter(|a| a.plan_id == plan_id) {
                let by = if active.approver.is_empty() {
                    "a reviewer"
                } else {
                    &active.approver
                };
                return Ok(Some(Verdict::Allow(
                    format!("Plan approved in Cairn by {by}"),
                    input,
                )));
            }
            return Ok(Some(Verdict::Deny(
                rejection(&mut plans, session_id, plan_id).await?,
            )));
        }
        if Instant::now() >= until {
            return Err("no decision in Cairn within --wait".into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// What the reviewer said, from the plan's history entry.
async fn rejection(
    plans: &mut pb::plan_service_client::PlanServiceClient<Api>,
    session_id: &str,
    plan_id: &str,
) -> Result<String, String> {
    let mut token = String::new();
    let mut found = None;
    loop {
        let page = plans
            .list_plan_history(pb::ListPlanHistoryRequest {
                session_id: session_id.to_owned(),
                page_size: 100,
                page_token: token,
            })
            .await
            .map_err(|s| format!("Cairn: {}", s.message()))?
            .into_inner();
        if let Some(e) = page
            .entries
            .into_iter()
            .rev()
            .find(|e| e.plan_id == plan_id)
        {
            found = Some(e);
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    Ok(match found {
        Some(e) if !e.reason.is_empty() => format!("The plan was rejected in Cairn: {}", e.reason),
        _ => "The plan was rejected in Cairn.".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_markdown_plan_becomes_steps() {
        let p = implementation_plan(
            "# Add login\n\nContext.\n\n1. Write the parser\n2) Add tests\n- Docs\n",
        );
        assert_eq!(p.summary, "Add login");
        let steps: Vec<_> = p
            .steps
            .iter()
            .map(|s| (s.id, s.description.as_str()))
            .collect();
        assert_eq!(
            steps,
            vec![(1, "Write the parser"), (2, "Add tests"), (3, "Docs")]
        );
        let bare = implementation_plan("just do it");
        assert_eq!(bare.summary, "just do it");
        assert_eq!(bare.steps.len(), 1);
    }

    #[test]
    fn decisions_are_claude_code_s_pre_tool_use_json() {
        let deny = Verdict::Deny("too risky".into()).json();
        assert_eq!(deny["hookSpecificOutput"]["permissionDecision"], "deny");
        assert_eq!(
            deny["hookSpecificOutput"]["permissionDecisionReason"],
            "too risky"
        );
        assert_eq!(deny["hookSpecificOutput"]["hookEventName"], "PreToolUse");
    }

    #[test]
    fn the_plan_file_is_the_last_one_the_transcript_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t.jsonl");
        let write = |path: &str| {
            json!({"message": {"content": [{"type": "tool_use", "name": "Write", "input": {"file_path": path}}]}})
                .to_string()
        };
        std::fs::write(
            &t,
            [
                write("/c/plans/old.md"),
                write("/w/src/main.rs"),
                write("/c/plans/new.md"),
                "not json".into(),
            ]
            .join("\n"),
        )
        .unwrap();
        assert_eq!(
            plan_file(&t).unwrap(),
            Some(PathBuf::from("/c/plans/new.md"))
        );
    }
}
