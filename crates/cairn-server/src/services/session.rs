//! `cairn.v1.SessionService`: the session tree.

use prost::Message as _;
use tonic::{Request, Response, Status};
use tracing::instrument;

use super::{State, caller};
use crate::convert;
use crate::status::status;
use cairn_api as pb;
use cairn_api::session_service_server::SessionService;
use cairn_core::access::{self, Action, Caller};
use cairn_core::error::{Error, Excerpt, Result};
use cairn_core::session::{self, Session};
use cairn_store::ops::{self, SessionPatch};

/// Default and maximum `page_size` of `ListSessions`.
const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

/// The session service.
#[derive(Clone, Debug)]
pub struct SessionApi {
    state: State,
}

impl SessionApi {
    /// A service over shared state.
    pub fn new(state: State) -> Self {
        SessionApi { state }
    }

    async fn create(
        &self,
        caller: &Caller,
        req: pb::CreateSessionRequest,
    ) -> Result<pb::CreateSessionResponse> {
        let bytes = req.encoded_len();
        let pb::CreateSessionRequest { session } = req;
        let mut s: Session = session.map(convert::session_in).unwrap_or_default();
        if s.session_id.is_empty() {
            s.session_id = session::generate_id(|| fastrand::u64(..));
        }
        let policy = self.state.policy.clone();
        let caller = caller.clone();
        let (s, revision) = self
            .state
            .store
            .write(bytes, move |ctx| {
                ops::create_session(ctx, s.clone(), &policy.limits, &caller)
            })
            .await?;
        Ok(pb::CreateSessionResponse {
            session: Some(convert::session_out(s)),
            revision,
        })
    }

    async fn get(
        &self,
        caller: &Caller,
        req: pb::GetSessionRequest,
    ) -> Result<pb::GetSessionResponse> {
        let pb::GetSessionRequest { session_id } = req;
        self.state
            .policy
            .limits
            .check_resource_id("session_id", &session_id)?;
        let caller = caller.clone();
        let (s, revision) = self
            .state
            .store
            .read(move |v| {
                let s = ops::authorize(v, &caller, Action::Read, &session_id)?;
                Ok((s, v.revision()?))
            })
            .await?;
        Ok(pb::GetSessionResponse {
            session: Some(convert::session_out(s)),
            revision,
        })
    }

    async fn list(
        &self,
        caller: &Caller,
        req: pb::ListSessionsRequest,
    ) -> Result<pb::ListSessionsResponse> {
        let pb::ListSessionsRequest {
            page_size,
            page_token,
            parent_session_id,
            agent_id,
        } = req;
        let limit = match usize::try_from(page_size) {
            Ok(0) => DEFAULT_PAGE,
            Ok(n) => n.min(MAX_PAGE),
            Err(_) => return Err(Error::invalid("page_size", "must not be negative")),
        };
        // The token is the last id of the previous page; ids are already
        // URL-safe, so it needs no further encoding.
        let after = (!page_token.is_empty()).then_some(page_token);
        if let Some(a) = &after {
            self.state
                .policy
                .limits
                .check_resource_id("page_token", a)?;
        }
        let parent = (!parent_session_id.is_empty()).then_some(parent_session_id);
        let agent = (!agent_id.is_empty()).then_some(agent_id);
        let limits = &self.state.policy.limits;
        if let Some(p) = &parent {
            limits.check_resource_id("parent_session_id", p)?;
        }
        if let Some(a) = &agent {
            limits.check_resource_id("agent_id", a)?;
        }
        // A listing lies wholly in the caller's scope: everything, the
        // children of a session it may read, or the sessions of an agent it
        // acts as.
        match (&parent, &agent) {
            (None, None) => access::check_everything(caller)?,
            (None, Some(a)) => access::check_todos(caller, a, access::TodoAction::Read)?,
            (Some(_), _) => {}
        }
        let caller = caller.clone();
        let (page, revision) = self
            .state
            .store
            .read(move |v| {
                if let Some(p) = &parent {
                    ops::authorize(v, &caller, Action::Read, p)?;
                }
                let page = ops::list_sessions(
                    v,
                    after.as_deref(),
                    limit,
                    parent.as_deref(),
                    agent.as_deref(),
                    &caller,
                )?;
                Ok((page, v.revision()?))
            })
            .await?;
        Ok(pb::ListSessionsResponse {
            sessions: page
                .sessions
                .into_iter()
                .map(convert::session_out)
                .collect(),
            next_page_token: page.next_after.unwrap_or_default(),
            revision,
        })
    }

    async fn update(
        &self,
        caller: &Caller,
        req: pb::UpdateSessionRequest,
    ) -> Result<pb::UpdateSessionResponse> {
        let bytes = req.encoded_len();
        let pb::UpdateSessionRequest {
            session_id,
            title,
            agent_id,
            parent_session_id,
            labels,
            replace_labels,
            expected_revision,
        } = req;
        self.state
            .policy
            .limits
            .check_resource_id("session_id", &session_id)?;
        let patch = SessionPatch {
            title,
            agent_id,
            parent_session_id: parent_session_id.map(|p| (!p.is_empty()).then_some(p)),
            labels: replace_labels.then(|| labels.into_iter().collect()),
            expected_revision,
        };
        let policy = self.state.policy.clone();
        let caller = caller.clone();
        let (s, revision) = self
            .state
            .store
            .write(bytes, move |ctx| {
                ops::update_session(ctx, &session_id, patch.clone(), &policy.limits, &caller)
            })
            .await?;
        Ok(pb::UpdateSessionResponse {
            session: Some(convert::session_out(s)),
            revision,
        })
    }

    async fn delete(
        &self,
        caller: &Caller,
        req: pb::DeleteSessionRequest,
    ) -> Result<pb::DeleteSessionResponse> {
        let bytes = req.encoded_len();
        let pb::DeleteSessionRequest {
            session_id,
            cascade,
            expected_revision,
        } = req;
        self.state
            .policy
            .limits
            .check_resource_id("session_id", &session_id)?;
        let caller = caller.clone();
        let (deleted_session_ids, revision) = self
            .state
            .store
            .write(bytes, move |ctx| {
                ops::delete_session(ctx, &session_id, cascade, expected_revision, &caller)
            })
            .await?;
        Ok(pb::DeleteSessionResponse {
            deleted_session_ids,
            revision,
        })
    }
}

#[tonic::async_trait]
impl SessionService for SessionApi {
    #[instrument(skip_all, fields(session_id = %Excerpt(request.get_ref().session.as_ref().map_or("", |s| s.session_id.as_str()))))]
    async fn create_session(
        &self,
        request: Request<pb::CreateSessionRequest>,
    ) -> Result<Response<pb::CreateSessionResponse>, Status> {
        let caller = caller(&request)?;
        self.create(&caller, request.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    #[instrument(skip_all, fields(session_id = %Excerpt(&request.get_ref().session_id)))]
    async fn get_session(
        &self,
        request: Request<pb::GetSessionRequest>,
    ) -> Result<Response<pb::GetSessionResponse>, Status> {
        let caller = caller(&request)?;
        self.get(&caller, request.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    #[instrument(skip_all, fields(page_token = %Excerpt(&request.get_ref().page_token)))]
    async fn list_sessions(
        &self,
        request: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let caller = caller(&request)?;
        self.list(&caller, request.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    #[instrument(skip_all, fields(session_id = %Excerpt(&request.get_ref().session_id)))]
    async fn update_session(
        &self,
        request: Request<pb::UpdateSessionRequest>,
    ) -> Result<Response<pb::UpdateSessionResponse>, Status> {
        let caller = caller(&request)?;
        self.update(&caller, request.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    #[instrument(skip_all, fields(session_id = %Excerpt(&request.get_ref().session_id), cascade = request.get_ref().cascade))]
    async fn delete_session(
        &self,
        request: Request<pb::DeleteSessionRequest>,
    ) -> Result<Response<pb::DeleteSessionResponse>, Status> {
        let caller = caller(&request)?;
        self.delete(&caller, request.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }
}
