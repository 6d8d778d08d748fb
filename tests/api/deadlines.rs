//! Approval deadlines: REJECT and ESCALATE applied by the server as they
//! pass, each one revision with its events; applied at start when they
//! passed while no server ran; applied once when two stores see them pass.
//! Deadlines here are one to three seconds; nothing asserts how soon a
//! deadline is applied, only that it is, and not before it passed.

use std::time::Duration;

use cairn_api as pb;
use cairn_api::plan_service_client::PlanServiceClient;
use cairn_api::watch_response::Kind;
use cairn_api::watch_service_client::WatchServiceClient;
use cairn_testkit::stream::{next, watch};
use cairn_testkit::{TestServer, two_steps};
use tonic::transport::Channel;

fn secs(s: i64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: s,
        nanos: 0,
    }
}

fn micros(t: Option<&prost_types::Timestamp>) -> i64 {
    let t = t.expect("a timestamp");
    t.seconds * 1_000_000 + i64::from(t.nanos) / 1000
}

fn reject(timeout: i64, reason: &str) -> pb::ApprovalDeadline {
    pb::ApprovalDeadline {
        timeout: Some(secs(timeout)),
        policy: pb::DeadlinePolicy::Reject.into(),
        reject_reason: reason.into(),
        ..Default::default()
    }
}

fn escalate(timeout: i64, to: &str, then: pb::DeadlinePolicy) -> pb::ApprovalDeadline {
    pb::ApprovalDeadline {
        timeout: Some(secs(timeout)),
        policy: pb::DeadlinePolicy::Escalate.into(),
        escalate_to: to.into(),
        escalation_timeout: Some(secs(1)),
        after_escalation: then.into(),
        ..Default::default()
    }
}

/// Enters plan mode on `session` and submits a plan with `deadline`: the
/// pending plan.
async fn submit(
    plans: &mut PlanServiceClient<Channel>,
    session: &str,
    deadline: Option<pb::ApprovalDeadline>,
) -> pb::PendingPlan {
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
            plan: Some(two_steps("a plan with a deadline")),
            deadline,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap()
        .pending
        .unwrap()
}

/// An approved plan on `session`, then a modification of its step 2 with
/// `deadline`: the modification.
async fn modify(
    plans: &mut PlanServiceClient<Channel>,
    session: &str,
    deadline: Option<pb::ApprovalDeadline>,
) -> pb::PlanModification {
    submit(plans, session, None).await;
    plans
        .approve_plan(pb::ApprovePlanRequest {
            session_id: session.into(),
            approver: "lead".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    plans
        .modify_plan(pb::ModifyPlanRequest {
            session_id: session.into(),
            step_id: 2,
            reason: "the API changed".into(),
            new_description: "two, again".into(),
            deadline,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .modification
        .unwrap()
}

/// The inbox events of `stream`, until `n` arrived: (added, item).
async fn inbox(
    stream: &mut tonic::Streaming<pb::WatchResponse>,
    n: usize,
) -> Vec<(bool, pb::InboxItem, u64)> {
    let mut out = Vec::new();
    // Progress messages keep coming: the patience bounds the whole wait.
    let patience = std::time::Instant::now() + cairn_testkit::stream::PATIENCE;
    while out.len() < n {
        assert!(
            std::time::Instant::now() < patience,
            "{n} inbox events not seen within the patience: {out:?}"
        );
        if let Kind::Event(e) = next(stream).await
            && let Some(pb::event::Object::InboxItem(i)) = e.object.clone()
        {
            let added = e.r#type() == pb::EventType::InboxItemAdded;
            out.push((added, i, e.revision));
        }
    }
    out
}

async fn history(
    plans: &mut PlanServiceClient<Channel>,
    session: &str,
) -> Vec<pb::PlanHistoryEntry> {
    plans
        .list_plan_history(pb::ListPlanHistoryRequest {
            session_id: session.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .entries
}

async fn status(plans: &mut PlanServiceClient<Channel>, session: &str) -> pb::PlanStatus {
    plans
        .get_plan_status(pb::GetPlanStatusRequest {
            session_id: session.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap()
}

#[tokio::test]
async fn a_reject_deadline_rejects_the_plan_with_its_reason_in_one_revision() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let mut w = WatchServiceClient::new(server.channel().await);
    let mut stream = watch(&mut w, pb::watch_request::Target::Inbox(true), None, false).await;
    let pending = submit(&mut plans, "orch:coder", Some(reject(1, "too slow"))).await;
    let d = pending.deadline.as_ref().expect("the deadline is shown");
    assert_eq!(d.policy(), pb::DeadlinePolicy::Reject);
    let at = micros(d.deadline_time.as_ref());
    assert_eq!(at, micros(pending.submit_time.as_ref()) + 1_000_000);

    let seen = inbox(&mut stream, 2).await;
    assert!(seen[0].0, "added first: {seen:?}");
    assert_eq!(
        seen[0]
            .1
            .deadline
            .as_ref()
            .map(|d| d.reject_reason.as_str()),
        Some("too slow")
    );
    assert!(!seen[1].0, "then removed: {seen:?}");
    let entries = history(&mut plans, "orch:coder").await;
    assert_eq!(entries.len(), 1, "{entries:?}");
    let e = &entries[0];
    assert_eq!(e.outcome(), pb::PlanOutcome::Rejected);
    assert_eq!(e.reason, "too slow");
    assert!(
        micros(e.end_time.as_ref()) >= at,
        "never before the deadline"
    );
    assert_eq!(
        status(&mut plans, "orch:coder").await.mode(),
        pb::PlanMode::Normal
    );

    // The rejection is one revision: the plan's change and the item's
    // removal, nothing after it.
    let head = plans
        .get_plan(pb::GetPlanRequest {
            session_id: "orch:coder".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .revision;
    assert_eq!(head, seen[1].2);
}

#[tokio::test]
async fn an_escalation_tells_again_then_its_second_deadline_rejects() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let mut w = WatchServiceClient::new(server.channel().await);
    let m = modify(
        &mut plans,
        "orch:coder",
        Some(escalate(1, "role:admin", pb::DeadlinePolicy::Reject)),
    )
    .await;
    let first = micros(m.deadline.as_ref().unwrap().deadline_time.as_ref());
    let mut stream = watch(&mut w, pb::watch_request::Target::Inbox(true), None, true).await;
    let seen = inbox(&mut stream, 3).await;
    // The initial state, then the escalation as the item again, then gone.
    assert!(seen[0].0 && seen[1].0 && !seen[2].0, "{seen:?}");
    assert_eq!(seen[0].1.deadline.as_ref().unwrap().escalated_to, "");
    let escalated = seen[1].1.deadline.clone().unwrap();
    assert_eq!(escalated.escalated_to, "role:admin");
    assert_eq!(escalated.policy(), pb::DeadlinePolicy::Reject);
    let at = micros(escalated.escalate_time.as_ref());
    assert!(at >= first, "escalated no earlier than the first deadline");
    assert_eq!(micros(escalated.deadline_time.as_ref()), at + 1_000_000);
    assert_eq!(
        seen[1].1.modification.as_ref().unwrap().modification_id,
        m.modification_id
    );
    let s = status(&mut plans, "orch:coder").await;
    assert!(s.pending_modifications.is_empty(), "{s:?}");
    let active = s.active.unwrap();
    assert_eq!(
        active.plan.unwrap().steps[1].description,
        "two",
        "nothing applied"
    );
}

#[tokio::test]
async fn a_deadline_that_passes_while_no_server_runs_is_applied_at_start() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    submit(&mut plans, "orch:plan", Some(reject(3, ""))).await;
    modify(
        &mut plans,
        "orch:mod",
        Some(escalate(3, "lead", pb::DeadlinePolicy::Wait)),
    )
    .await;
    let mut server = server;
    server.stop().await;
    let stopped = cairn_store::now_micros();
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let server = server.restart().await;
    let restarted = cairn_store::now_micros();
    let mut plans = server.plans().await;
    let mut w = WatchServiceClient::new(server.channel().await);
    let mut stream = watch(&mut w, pb::watch_request::Target::Inbox(true), None, true).await;
    // The inbox as the watch shows it: its initial state (taken before or
    // after the deadlines were applied at start) and what follows, until
    // the plan is out of it and the modification escalated.
    let mut waiting = std::collections::BTreeMap::new();
    let mut synced = false;
    let patience = std::time::Instant::now() + cairn_testkit::stream::PATIENCE;
    let escalated = loop {
        let escalated = waiting
            .get("orch:mod")
            .and_then(|i: &pb::InboxItem| i.deadline.clone())
            .filter(|d| !d.escalated_to.is_empty());
        if synced && !waiting.contains_key("orch:plan") && escalated.is_some() {
            break escalated;
        }
        assert!(
            std::time::Instant::now() < patience,
            "plan still waiting or modification not escalated: {waiting:?}"
        );
        match next(&mut stream).await {
            Kind::Synced(_) => synced = true,
            Kind::Event(e) => {
                if let Some(pb::event::Object::InboxItem(i)) = e.object.clone() {
                    if e.r#type() == pb::EventType::InboxItemAdded {
                        waiting.insert(i.session_id.clone(), i);
                    } else {
                        waiting.remove(&i.session_id);
                    }
                }
            }
            Kind::Progress(_) => {}
        }
    };
    let entries = history(&mut plans, "orch:plan").await;
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(
        entries[0].reason,
        "no decision before the approval deadline"
    );
    let ended = micros(entries[0].end_time.as_ref());
    assert!(
        ended >= restarted,
        "applied by the new server, at start ({ended} < {restarted}, stopped {stopped})"
    );
    let d = escalated.unwrap();
    assert_eq!(d.escalated_to, "lead");
    assert!(micros(d.escalate_time.as_ref()) >= restarted);
    // WAIT after escalating: the modification waits on.
    let s = status(&mut plans, "orch:mod").await;
    assert_eq!(s.pending_modifications.len(), 1);
}

#[tokio::test]
async fn a_passed_deadline_is_applied_once_when_two_stores_see_it_pass() {
    use cairn_core::access::Caller;
    use cairn_core::command::{Command, PlanCommand, PlanWrite};
    use cairn_core::error::Error;
    use cairn_core::inbox::Awaited;

    let mut server = TestServer::start().await;
    let mut plans = server.plans().await;
    let pending = submit(
        &mut plans,
        "x",
        // REJECT after escalating: a second server that took the escalated
        // item for due would reject it at once.
        Some(escalate(1, "role:admin", pb::DeadlinePolicy::Reject)),
    )
    .await;
    let at = micros(pending.deadline.unwrap().deadline_time.as_ref());
    server.stop().await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // Two stores on the one store: on etcd two clients, as two replicas
    // are; on redb one store that two tasks share.
    let one = server.open_store().await;
    let two = if cairn_testkit::on_etcd() {
        server.open_store().await
    } else {
        one.clone()
    };
    let pass = || {
        Command::Plan(PlanWrite {
            session_id: "x".into(),
            expected_revision: None,
            command: PlanCommand::Deadline {
                item: Awaited::Plan,
                at,
            },
        })
    };
    let before = one.read(|v| v.revision()).await.unwrap();
    let (a, b) = tokio::join!(
        one.apply(&Caller::Open, pass(), 64),
        two.apply(&Caller::Open, pass(), 64)
    );
    let ok = [&a, &b].iter().filter(|r| r.is_ok()).count();
    assert_eq!(ok, 1, "one applies it: {a:?} {b:?}");
    let lost = if a.is_ok() { b } else { a };
    assert!(matches!(lost, Err(Error::DeadlineMoved)), "{lost:?}");
    assert_eq!(one.read(|v| v.revision()).await.unwrap(), before + 1);
    // Once more, later: still applied already.
    assert!(matches!(
        one.apply(&Caller::Open, pass(), 64).await,
        Err(Error::DeadlineMoved)
    ));
}

#[tokio::test]
async fn deadline_requests_are_checked() {
    let server = TestServer::start().await;
    let mut plans = server.plans().await;
    let bad = [
        (
            pb::ApprovalDeadline::default(),
            "deadline.timeout: must be between 1s and 30d, got 0 ms",
        ),
        (
            pb::ApprovalDeadline {
                timeout: Some(secs(-1)),
                ..Default::default()
            },
            "deadline.timeout: must be a non-negative duration",
        ),
        (
            pb::ApprovalDeadline {
                timeout: Some(secs(60)),
                policy: 9,
                ..Default::default()
            },
            "deadline.policy: unknown policy 9",
        ),
        (
            pb::ApprovalDeadline {
                timeout: Some(secs(60)),
                escalate_to: "lead".into(),
                ..Default::default()
            },
            "deadline.escalate_to: is not used with policy WAIT",
        ),
        (
            escalate(60, "", pb::DeadlinePolicy::Wait),
            "deadline.escalate_to: is required with policy ESCALATE",
        ),
        (
            escalate(60, "role:root", pb::DeadlinePolicy::Wait),
            "not one of admin, orchestrator, agent, approver, viewer",
        ),
        (
            escalate(60, "lead", pb::DeadlinePolicy::Escalate),
            "deadline.after_escalation: must be WAIT or REJECT",
        ),
        (reject(31 * 86_400, ""), "between 1s and 30d"),
    ];
    plans
        .enter_plan_mode(pb::EnterPlanModeRequest {
            session_id: "s".into(),
            goal: "g".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    for (deadline, message) in bad {
        let err = plans
            .exit_plan_mode(pb::ExitPlanModeRequest {
                session_id: "s".into(),
                plan: Some(two_steps("p")),
                deadline: Some(deadline),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{message}");
        assert!(
            err.message().contains(message),
            "{} vs {message}",
            err.message()
        );
    }
    // Nothing was submitted by any of them.
    assert_eq!(status(&mut plans, "s").await.mode(), pb::PlanMode::Planning);
}
