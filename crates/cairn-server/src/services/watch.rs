//! `cairn.v1.WatchService`: the watch stream and `Wait`, over [`crate::watch`].

use std::pin::Pin;
use std::time::Duration;

use tokio_stream::{Stream, StreamExt};
use tonic::Status;
use tracing::instrument;

use super::{State, rpcs};
use crate::auth::Authenticated;
use crate::convert;
use crate::status::status;
use crate::watch::{self, Condition, Item, Start, WaitTarget};
use cairn_api as pb;
use cairn_api::watch_service_server::WatchService;
use cairn_core::error::{Error, Excerpt, Result};
use cairn_store::hub::Topic;

/// Longest `Wait` a client may ask for.
const MAX_WAIT: Duration = Duration::from_secs(24 * 60 * 60);
/// `Wait` timeout when the request sets none.
const DEFAULT_WAIT: Duration = Duration::from_secs(60);
/// Longest heartbeat interval a watch may ask for.
const MAX_PROGRESS_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);

/// The watch service.
#[derive(Clone, Debug)]
pub struct WatchApi {
    state: State,
}

impl WatchApi {
    /// A service over shared state.
    pub fn new(state: State) -> Self {
        WatchApi { state }
    }

    async fn follow(&self, who: &Authenticated, req: pb::WatchRequest) -> Result<WatchStream> {
        let who = who.clone();
        let pb::WatchRequest {
            target,
            start_revision,
            send_initial_state,
            progress_interval,
        } = req;
        let limits = &self.state.policy.limits;
        let target = match target {
            Some(pb::watch_request::Target::SessionId(id)) => {
                limits.check_resource_id("session_id", &id)?;
                Topic::Session(id)
            }
            Some(pb::watch_request::Target::SessionTree(id)) => {
                limits.check_resource_id("session_tree", &id)?;
                Topic::Tree(id)
            }
            Some(pb::watch_request::Target::AgentId(id)) => {
                limits.check_resource_id("agent_id", &id)?;
                Topic::Agent(id)
            }
            Some(pb::watch_request::Target::All(true)) => Topic::All,
            Some(pb::watch_request::Target::Inbox(true)) => Topic::Inbox,
            Some(
                pb::watch_request::Target::All(false) | pb::watch_request::Target::Inbox(false),
            )
            | None => {
                return Err(Error::invalid(
                    "target",
                    "set one of session_id, session_tree, agent_id, all or inbox",
                ));
            }
        };
        let start = match (start_revision, send_initial_state) {
            (Some(_), true) => {
                return Err(Error::Conflicting(
                    "start_revision and send_initial_state exclude each other: replay from a revision, or start from the current state".into(),
                ));
            }
            (Some(r), false) => Start::From(r),
            (None, true) => Start::Snapshot,
            (None, false) => Start::Now,
        };
        let interval = match progress_interval {
            Some(d) => {
                let d = convert::duration("progress_interval", d)?;
                if d > MAX_PROGRESS_INTERVAL {
                    return Err(Error::invalid("progress_interval", "must be at most 24h"));
                }
                d
            }
            None => self.state.progress_interval,
        };
        let inner = open(&self.state, &who, target, start, interval).await?;
        Ok(Box::pin(
            inner.map(|item| item.map(response).map_err(status)),
        ))
    }

    async fn wait_for(
        &self,
        who: &Authenticated,
        req: pb::WaitRequest,
    ) -> Result<pb::WaitResponse> {
        let pb::WaitRequest {
            target,
            condition,
            timeout,
            fail_fast,
        } = req;
        let limits = &self.state.policy.limits;
        let target = match target {
            Some(pb::wait_request::Target::SessionTree(id)) => {
                limits.check_resource_id("session_tree", &id)?;
                WaitTarget::Tree(id)
            }
            Some(pb::wait_request::Target::SessionIds(pb::SessionIds { session_ids }))
                if !session_ids.is_empty() =>
            {
                cairn_core::Limits::check_count(
                    "session_ids",
                    "number of sessions",
                    limits.max_plan_steps,
                    session_ids.len(),
                )?;
                for (i, id) in session_ids.iter().enumerate() {
                    limits.check_resource_id(&format!("session_ids[{i}]"), id)?;
                }
                WaitTarget::Sessions(session_ids)
            }
            Some(pb::wait_request::Target::SessionIds(_)) | None => {
                return Err(Error::invalid(
                    "target",
                    "set session_tree or a non-empty session_ids",
                ));
            }
        };
        let condition = match pb::WaitCondition::try_from(condition) {
            Ok(pb::WaitCondition::Unspecified | pb::WaitCondition::AllPlansCompleted) => {
                Condition::AllPlansCompleted
            }
            Ok(pb::WaitCondition::AnyChange) => Condition::AnyChange,
            Err(_) => return Err(Error::invalid("condition", "unknown condition")),
        };
        let timeout = match timeout {
            Some(d) => convert::duration("timeout", d)?.min(MAX_WAIT),
            None => DEFAULT_WAIT,
        };
        let hub_target = match &target {
            WaitTarget::Tree(root) => Topic::Tree(root.clone()),
            WaitTarget::Sessions(ids) => Topic::Sessions(ids.iter().cloned().collect()),
        };
        self.state
            .store
            .authorize_watch(&who.caller, &hub_target)
            .await?;
        // Revocation ends a Wait as it ends a Watch.
        let revoked = self.state.auth.revoked(who.token_sha256.as_deref());
        let outcome = tokio::select! {
            outcome = watch::wait(&self.state.store, target, condition, timeout, fail_fast.unwrap_or(true)) => outcome?,
            () = revoked => {
                return Err(Error::Unauthenticated(
                    "the token of this wait was revoked".into(),
                ));
            }
        };
        Ok(pb::WaitResponse {
            satisfied: outcome.satisfied,
            revision: outcome.revision,
            plans: outcome.plans.into_iter().map(convert::plan).collect(),
            lost: outcome.lost.into_iter().map(convert::lost).collect(),
        })
    }
}

/// A watch of `target` from `start` as `who` may have it: authorized,
/// its start checked against the log, scoped to what the caller may read,
/// and ended by an error once the caller's token is revoked. The one way
/// a service opens a watch (the watch service, A2A's `SubscribeToTask`).
pub(crate) async fn open(
    state: &State,
    who: &Authenticated,
    target: Topic,
    start: Start,
    interval: Duration,
) -> Result<impl Stream<Item = Result<Item>> + Send + 'static> {
    state.store.authorize_watch(&who.caller, &target).await?;
    watch::check_start(&state.store, start).await?;
    let scope = watch::Scope::on(&who.caller, &target);
    let inner = watch::scoped(
        watch::watch(state.store.clone(), target, start, interval),
        scope,
    );
    let auth = std::sync::Arc::clone(&state.auth);
    let token = who.token_sha256.clone();
    // A stream ends once its principal is deleted or its token rotated.
    Ok(async_stream::stream! {
        tokio::pin!(inner);
        let revoked = auth.revoked(token.as_deref());
        tokio::pin!(revoked);
        loop {
            tokio::select! {
                item = inner.next() => match item {
                    Some(Ok(item)) => yield Ok(item),
                    Some(Err(e)) => {
                        yield Err(e);
                        break;
                    }
                    None => break,
                },
                () = &mut revoked => {
                    yield Err(Error::Unauthenticated(
                        "the token of this watch was revoked".into(),
                    ));
                    break;
                }
            }
        }
    })
}

fn response(item: Item) -> pb::WatchResponse {
    pb::WatchResponse {
        kind: Some(match item {
            Item::Event(d) => pb::watch_response::Kind::Event(convert::event(d)),
            Item::Synced(revision) => pb::watch_response::Kind::Synced(pb::Synced { revision }),
            Item::Progress(revision) => {
                pb::watch_response::Kind::Progress(pb::Progress { revision })
            }
        }),
    }
}

/// A watch target for the log, its id cut short and escaped.
fn watch_target(t: Option<&pb::watch_request::Target>) -> String {
    match t {
        Some(pb::watch_request::Target::SessionId(id)) => format!("session:{}", Excerpt(id)),
        Some(pb::watch_request::Target::SessionTree(id)) => format!("tree:{}", Excerpt(id)),
        Some(pb::watch_request::Target::AgentId(id)) => format!("agent:{}", Excerpt(id)),
        Some(pb::watch_request::Target::All(all)) => format!("all:{all}"),
        Some(pb::watch_request::Target::Inbox(inbox)) => format!("inbox:{inbox}"),
        None => "none".into(),
    }
}

/// A wait target for the log.
fn wait_target(t: Option<&pb::wait_request::Target>) -> String {
    match t {
        Some(pb::wait_request::Target::SessionTree(id)) => format!("tree:{}", Excerpt(id)),
        Some(pb::wait_request::Target::SessionIds(ids)) => {
            format!("{} sessions", ids.session_ids.len())
        }
        None => "none".into(),
    }
}

/// The stream type of `Watch`.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchResponse, Status>> + Send>>;

rpcs! {
    impl WatchService for WatchApi {
        type WatchStream = WatchStream;
        #[instrument(skip_all, fields(target = %watch_target(r.get_ref().target.as_ref()), start = ?r.get_ref().start_revision))]
        fn watch(r: pb::WatchRequest) -> WatchStream => follow;
        #[instrument(skip_all, fields(target = %wait_target(r.get_ref().target.as_ref())))]
        fn wait(r: pb::WaitRequest) -> pb::WaitResponse => wait_for;
    }
}
