//! `SubscribeToTask`: a session's watch as A2A's stream of a task, and
//! Cairn's resumption extension over it (`docs/a2a.md`).
//!
//! The stream opens with the task as it is (A2A's rule), then turns each
//! revision that touches the session into at most two events: the plan
//! artifact when the plan's steps changed, then a status update when the
//! task's state changed ([`Following`]). It ends after a terminal state.
//!
//! Every event carries a resume token in its metadata: the revision whose
//! events the subscriber then holds in full, and the state it was last
//! told. A subscriber that lost its stream (a dropped connection, a
//! restarted server, another replica) sends the last token it got and is
//! given everything after it from the log: no gap, no state told twice.
//! An artifact followed by a status update in the same revision carries
//! the token of the revision before, so a subscriber cut off between the
//! two is given the revision again (the artifact replaces itself; the
//! status is told once).

use tokio_stream::{Stream, StreamExt};

use super::shape::{object, plan_artifact, state_out, string};
use crate::convert;
use crate::watch::Item;
use cairn_api::a2a;
use cairn_core::error::{Error, Result};
use cairn_core::liveness::Liveness;
use cairn_core::plan::Checklist;
use cairn_core::session::Session;
use cairn_core::task::{Following, Resume, TaskState, plan_state};
use cairn_store::records::{EventKind, EventObject, PlanRecord};

/// The URI of the resumption extension, declared in the agent card.
pub const RESUME_EXTENSION: &str = "urn:cairn:a2a:resume:v1";
/// The header (gRPC metadata, HTTP header) with which a subscriber resumes:
/// the last resume token it received.
pub const RESUME_HEADER: &str = "cairn-resume";
/// The metadata key of each streamed event's resume token.
pub const RESUME_KEY: &str = "cairn_resume";

/// Where a task's stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// At a terminal state (`SubscribeToTask`).
    Terminal,
    /// At a terminal state or one that awaits input
    /// (`SendStreamingMessage`: its stream ends where the next answer is
    /// needed, as A2A's interrupted states end it).
    Interrupted,
}

impl Until {
    fn reached(self, state: TaskState) -> bool {
        state.is_terminal() || (self == Until::Interrupted && state == TaskState::InputRequired)
    }
}

/// What one revision did to the session.
#[derive(Default)]
struct Changes {
    plan: Option<PlanRecord>,
    session: Option<Session>,
    deleted: bool,
}

impl Changes {
    fn absorb(&mut self, kind: EventKind, object: EventObject) {
        match object {
            _ if kind == EventKind::SessionDeleted => self.deleted = true,
            EventObject::Plan(p) => self.plan = Some(*p),
            EventObject::Session(s) => self.session = Some(s),
            _ => {}
        }
    }
}

fn lost(session: &Session) -> bool {
    session
        .lease
        .as_ref()
        .is_some_and(|l| l.state == Liveness::Lost)
}

/// The task `id` (in the context `context`) followed from `events`, a
/// watch of its session: from a snapshot, or, resuming, from the log after
/// `resume`; `until` a state that ends it.
pub fn follow(
    events: impl Stream<Item = Result<Item>> + Send + 'static,
    id: String,
    context: String,
    resume: Option<Resume>,
    until: Until,
) -> impl Stream<Item = Result<a2a::StreamResponse>> + Send + 'static {
    async_stream::stream! {
        tokio::pin!(events);
        let out = Out { id: id.clone(), context: context.clone() };
        let mut record = PlanRecord::default();
        let mut session: Option<Session> = None;
        let (mut following, mut at) = if let Some(at) = resume {
            // The task as the subscriber left it: nothing newer is known
            // until the log is replayed.
            yield Ok(out.task_at(at));
            (Following::resumed(at.state), at)
        } else {
            let mut first = Changes::default();
            let synced = loop {
                match events.next().await {
                    Some(Ok(Item::Event(d))) => first.absorb(d.event.kind, d.event.object),
                    Some(Ok(Item::Synced(rev))) => break rev,
                    Some(Ok(Item::Progress(_))) => {}
                    Some(Err(e)) => {
                        yield Err(e);
                        return;
                    }
                    None => return,
                }
            };
            let Some(s) = first.session.filter(|_| !first.deleted) else {
                yield Err(Error::TaskNotFound(id));
                return;
            };
            record = first.plan.unwrap_or_default();
            let following = Following::new(plan_state(&record.plan), lost(&s));
            let at = Resume { revision: synced, state: following.told() };
            yield Ok(out.task(&s, &record, at));
            session = Some(s);
            (following, at)
        };
        // What the subscriber holds of the plan: none yet when resuming.
        let mut shown: Option<Checklist> = resume.is_none().then(|| record.plan.checklist.clone());
        let mut changes = Changes::default();
        while !until.reached(following.told()) {
            let d = match events.next().await {
                Some(Ok(Item::Event(d))) => d,
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    yield Err(e);
                    return;
                }
                None => return,
            };
            changes.absorb(d.event.kind, d.event.object);
            if d.index + 1 < d.count {
                continue;
            }
            let done = std::mem::take(&mut changes);
            if done.deleted {
                yield Err(Error::TaskNotFound(id));
                return;
            }
            if let Some(s) = done.session {
                session = Some(s);
            }
            let told = following.revision(
                done.plan.as_ref().map(|p| plan_state(&p.plan)),
                session.as_ref().map(lost),
            );
            let now = Resume { revision: d.revision, state: following.told() };
            if let Some(p) = done.plan {
                record = p;
                if shown.as_ref() != Some(&record.plan.checklist) {
                    shown = Some(record.plan.checklist.clone());
                    yield Ok(out.artifact(&record, if told.is_some() { at } else { now }));
                }
            }
            if let Some(state) = told {
                yield Ok(out.status(state, changed(session.as_ref(), &record), now));
            }
            at = now;
        }
    }
}

/// When the task last changed, as far as its records say.
fn changed(session: Option<&Session>, record: &PlanRecord) -> i64 {
    session
        .map_or(0, |s| {
            s.lease.as_ref().map_or(0, |l| l.since).max(s.create_time)
        })
        .max(record.update_time)
}

/// Builds the events of one task's stream.
struct Out {
    id: String,
    context: String,
}

impl Out {
    fn metadata(at: Resume) -> prost_types::Struct {
        object([(RESUME_KEY, string(&at.token()))])
    }

    fn task(&self, session: &Session, record: &PlanRecord, at: Resume) -> a2a::StreamResponse {
        let mut task = super::shape::task_of(session, Some(&self.context), record, true);
        if let Some(m) = task.metadata.as_mut() {
            m.fields.insert(RESUME_KEY.into(), string(&at.token()));
        }
        a2a::StreamResponse {
            payload: Some(a2a::stream_response::Payload::Task(task)),
        }
    }

    fn task_at(&self, at: Resume) -> a2a::StreamResponse {
        a2a::StreamResponse {
            payload: Some(a2a::stream_response::Payload::Task(a2a::Task {
                id: self.id.clone(),
                context_id: self.context.clone(),
                status: Some(a2a::TaskStatus {
                    state: state_out(at.state) as i32,
                    ..a2a::TaskStatus::default()
                }),
                metadata: Some(Self::metadata(at)),
                ..a2a::Task::default()
            })),
        }
    }

    fn artifact(&self, record: &PlanRecord, at: Resume) -> a2a::StreamResponse {
        a2a::StreamResponse {
            payload: Some(a2a::stream_response::Payload::ArtifactUpdate(
                a2a::TaskArtifactUpdateEvent {
                    task_id: self.id.clone(),
                    context_id: self.context.clone(),
                    artifact: Some(plan_artifact(record)),
                    // The whole plan each time: it replaces what was shown.
                    append: false,
                    last_chunk: true,
                    metadata: Some(Self::metadata(at)),
                },
            )),
        }
    }

    fn status(&self, state: TaskState, changed: i64, at: Resume) -> a2a::StreamResponse {
        a2a::StreamResponse {
            payload: Some(a2a::stream_response::Payload::StatusUpdate(
                a2a::TaskStatusUpdateEvent {
                    task_id: self.id.clone(),
                    context_id: self.context.clone(),
                    status: Some(a2a::TaskStatus {
                        state: state_out(state) as i32,
                        message: None,
                        timestamp: convert::timestamp(changed),
                    }),
                    metadata: Some(Self::metadata(at)),
                },
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_reads_back_and_a_bad_one_is_named() {
        for state in TaskState::ALL {
            let at = Resume {
                revision: 18_446_744_073_709_551_615,
                state,
            };
            assert_eq!(Resume::parse(RESUME_HEADER, &at.token()).unwrap(), at);
        }
        for bad in ["", "12", "x.working", "12.lost", "-1.working", "12.Working"] {
            let e = Resume::parse(RESUME_HEADER, bad).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidField { field, .. } if field == RESUME_HEADER),
                "{bad}: {e:?}"
            );
        }
    }
}
