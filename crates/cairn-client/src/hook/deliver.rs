//! Applying an observation to the server: the session made sure of, then
//! its labels or its observed plan changed by read, compare and write with
//! `expected_revision` (retried when a parallel hook wrote first), and
//! nothing written when nothing changed, so that the pre- and post-events
//! of one tool call make one revision.

use std::collections::BTreeMap;
use std::time::Instant;

use cairn_api as pb;
use tonic::Code;

use super::map::{Change, Life, Observation, Place, Status, Step, steps_after};
use crate::conn::{Api, CallTimeout};

/// Most attempts at one write that keeps losing to parallel writers.
const ATTEMPTS: usize = 16;

/// Why an observation was not applied.
#[derive(Debug)]
pub enum Failed {
    /// The server is not there, slow, or failing: keep it for later.
    Retry(String),
    /// The server refuses it for good (a right, a limit): say so and drop
    /// it, so that one bad entry does not hold back the rest.
    Refused(String),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Retry(m) | Failed::Refused(m) => f.write_str(m),
        }
    }
}

fn failed(s: &tonic::Status) -> Failed {
    match s.code() {
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::Cancelled
        | Code::Unknown
        | Code::Internal
        | Code::ResourceExhausted
        | Code::Aborted => Failed::Retry(format!("{:?}: {}", s.code(), s.message())),
        _ => Failed::Refused(format!("{:?}: {}", s.code(), s.message())),
    }
}

/// A request bounded by what is left of the hook's time.
fn bounded<T>(msg: T, until: Instant) -> Result<tonic::Request<T>, Failed> {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(Failed::Retry("out of time".into()));
    }
    let mut req = tonic::Request::new(msg);
    req.extensions_mut().insert(CallTimeout(left));
    Ok(req)
}

/// Applies one observation before `until`, then renews the session's
/// lease: a hook that reports activity is a sign of life. The CLI's
/// session ending, or a sub-agent stopping, releases it as FINISHED.
pub async fn apply(api: &Api, o: &Observation, until: Instant) -> Result<(), Failed> {
    changed(api, o, until).await?;
    let finished = match &o.change {
        Change::State { state, .. } => match state {
            Life::Ended => true,
            // A sub-agent's stop is its end; the CLI's own is a turn's.
            Life::Stopped => o.place.root.is_some(),
        },
        _ => false,
    };
    let mut sessions = pb::session_service_client::SessionServiceClient::new(api.clone());
    let req = pb::KeepAliveRequest {
        session_id: o.place.session_id.clone(),
        ttl: None,
        grace: None,
        finished,
    };
    // The mirror matters more than the lease: a renewal that fails (an
    // older server without leases, say) does not fail the delivery.
    let _ = sessions.keep_alive(bounded(req, until)?).await;
    Ok(())
}

async fn changed(api: &Api, o: &Observation, until: Instant) -> Result<(), Failed> {
    match &o.change {
        Change::Started { labels } => label(api, &o.place, labels, until).await,
        Change::State { state, labels } => {
            let mut labels = labels.clone();
            labels.insert("hook.state".into(), state.as_str().into());
            label(api, &o.place, &labels, until).await
        }
        Change::Replace { .. } | Change::Create { .. } | Change::Update { .. } => {
            plan(api, o, until).await
        }
    }
}

/// Creates the session (its CLI session first, for a sub-agent) if it does
/// not exist; one that does is fine.
async fn ensure(api: &Api, place: &Place, until: Instant) -> Result<(), Failed> {
    if let Some(root) = &place.root {
        Box::pin(ensure(api, root, until)).await?;
    }
    let mut sessions = pb::session_service_client::SessionServiceClient::new(api.clone());
    let req = pb::CreateSessionRequest {
        session: Some(pb::Session {
            session_id: place.session_id.clone(),
            agent_id: place.agent_id.clone(),
            parent_session_id: place.parent_session_id.clone().unwrap_or_default(),
            ..pb::Session::default()
        }),
    };
    match sessions.create_session(bounded(req, until)?).await {
        Ok(_) => Ok(()),
        Err(s) if s.code() == Code::AlreadyExists => Ok(()),
        Err(s) => Err(failed(&s)),
    }
}

/// Merges `labels` into the session's.
async fn label(
    api: &Api,
    place: &Place,
    labels: &BTreeMap<String, String>,
    until: Instant,
) -> Result<(), Failed> {
    let mut sessions = pb::session_service_client::SessionServiceClient::new(api.clone());
    for _ in 0..ATTEMPTS {
        let get = pb::GetSessionRequest {
            session_id: place.session_id.clone(),
        };
        let s = match sessions.get_session(bounded(get, until)?).await {
            Ok(r) => r.into_inner().session.unwrap_or_default(),
            Err(s) if s.code() == Code::NotFound => {
                ensure(api, place, until).await?;
                continue;
            }
            Err(s) => return Err(failed(&s)),
        };
        let current: BTreeMap<String, String> = s.labels.into_iter().collect();
        let mut merged = current.clone();
        merged.extend(labels.clone());
        if merged == current {
            return Ok(());
        }
        let update = pb::UpdateSessionRequest {
            session_id: place.session_id.clone(),
            labels: merged.into_iter().collect(),
            replace_labels: true,
            expected_revision: Some(s.revision),
            ..pb::UpdateSessionRequest::default()
        };
        match sessions.update_session(bounded(update, until)?).await {
            Ok(_) => return Ok(()),
            Err(s) if s.code() == Code::Aborted => {}
            Err(s) => return Err(failed(&s)),
        }
    }
    Err(Failed::Retry("parallel writers kept winning".into()))
}

fn status_in(s: pb::StepStatus) -> Status {
    match s {
        pb::StepStatus::InProgress => Status::InProgress,
        pb::StepStatus::Completed => Status::Completed,
        pb::StepStatus::Cancelled => Status::Cancelled,
        pb::StepStatus::Pending | pb::StepStatus::Unspecified => Status::Pending,
    }
}

fn status_out(s: Status) -> pb::StepStatus {
    match s {
        Status::Pending => pb::StepStatus::Pending,
        Status::InProgress => pb::StepStatus::InProgress,
        Status::Completed => pb::StepStatus::Completed,
        Status::Cancelled => pb::StepStatus::Cancelled,
    }
}

/// Whether the stored plan already is `want` (ids compared only where the
/// agent gave them).
fn same(current: &[pb::PlanItem], want: &[Step]) -> bool {
    current.len() == want.len()
        && current.iter().zip(want).all(|(c, w)| {
            (w.id == 0 || c.id == w.id)
                && c.step == w.text
                && status_in(c.status()) == w.status
                && c.blocked_by == w.blocked_by
        })
}

/// Whether the session's plan has a step with this id.
async fn holds_task(api: &Api, place: &Place, id: u32, until: Instant) -> Result<bool, Failed> {
    let mut plans = pb::plan_service_client::PlanServiceClient::new(api.clone());
    let get = pb::GetPlanRequest {
        session_id: place.session_id.clone(),
    };
    match plans.get_plan(bounded(get, until)?).await {
        Ok(r) => Ok(r
            .into_inner()
            .plan
            .is_some_and(|p| p.items.iter().any(|i| i.id == id))),
        Err(s) if s.code() == Code::NotFound => Ok(false),
        Err(s) => Err(failed(&s)),
    }
}

/// Changes the session's observed plan.
async fn plan(api: &Api, o: &Observation, until: Instant) -> Result<(), Failed> {
    let mut plans = pb::plan_service_client::PlanServiceClient::new(api.clone());
    let explanation = match &o.change {
        Change::Replace { explanation, .. } => explanation.clone(),
        _ => String::new(),
    };
    for _ in 0..ATTEMPTS {
        let get = pb::GetPlanRequest {
            session_id: o.place.session_id.clone(),
        };
        let p = match plans.get_plan(bounded(get, until)?).await {
            Ok(r) => r.into_inner().plan.unwrap_or_default(),
            Err(s) if s.code() == Code::NotFound => {
                ensure(api, &o.place, until).await?;
                continue;
            }
            Err(s) => return Err(failed(&s)),
        };
        let current: Vec<Step> = p
            .items
            .iter()
            .map(|i| Step {
                id: i.id,
                text: i.step.clone(),
                status: status_in(i.status()),
                blocked_by: i.blocked_by.clone(),
            })
            .collect();
        // Claude Code's task list is the session's, shared with its
        // sub-agents: an update of a task the sub-agent did not create goes
        // where the task is, the CLI's own session.
        if let (Change::Update { id, .. }, Some(root)) = (&o.change, &o.place.root)
            && !current.iter().any(|s| s.id == *id)
            && holds_task(api, root, *id, until).await?
        {
            let moved = Observation {
                place: (**root).clone(),
                change: o.change.clone(),
            };
            return Box::pin(plan(api, &moved, until)).await;
        }
        let Some(want) = steps_after(&current, &o.change) else {
            return Ok(());
        };
        if same(&p.items, &want) && (explanation.is_empty() || explanation == p.explanation) {
            return Ok(());
        }
        let update = pb::UpdatePlanRequest {
            session_id: o.place.session_id.clone(),
            explanation: if explanation.is_empty() {
                p.explanation.clone()
            } else {
                explanation.clone()
            },
            plan: want
                .iter()
                .map(|s| pb::PlanItem {
                    id: s.id,
                    step: s.text.clone(),
                    status: status_out(s.status).into(),
                    blocked_by: s.blocked_by.clone(),
                })
                .collect(),
            expected_revision: Some(p.revision),
            source: pb::PlanSource::Observed.into(),
        };
        match plans.update_plan(bounded(update, until)?).await {
            Ok(_) => return Ok(()),
            Err(s) if s.code() == Code::Aborted => {}
            Err(s) => return Err(failed(&s)),
        }
    }
    Err(Failed::Retry("parallel writers kept winning".into()))
}
