//! `cairn.v1.SessionService`: the session tree.

use prost::Message as _;
use tonic::{Request, Response, Status};
use tracing::instrument;

use super::State;
use crate::convert;
use crate::status::status;
use cairn_api as pb;
use cairn_api::session_service_server::SessionService;
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

    async fn create(&self, req: pb::CreateSessionRequest) -> Result<pb::CreateSessionResponse> {
        let bytes = req.encoded_len();
        let pb::CreateSessionRequest { session } = req;
        let mut s: Session = session.map(convert::session_in).unwrap_or_default();
        if s.session_id.is_empty() {
            s.session_id = session::generate_id(|| fastrand::u64(..));
        }
        let policy = self.state.policy.clone();
        let (s, revision) = self
            .state
            .store
            .write(bytes, move |ctx| {
                ops::create_session(ctx, s.clone(), &policy.limits)
            })
            .await?;
        Ok(pb::CreateSessionResponse {
            session: Some(convert::session_out(s)),
            revision,
        })
    }

    async fn get(&self, req: pb::GetSessionRequest) -> Result<pb::GetSessionResponse> {
        let pb::GetSessionRequest { session_id } = req;
        self.state
            .policy
            .limits
            .check_resource_id("session_id", &session_id)?;
        let (s, revision) = self
            .state
            .store
            .read(move |v| Ok((ops::require_session(v, &session_id)?, v.revision()?)))
            .await?;
        Ok(pb::GetSessionResponse {
            session: Some(convert::session_out(s)),
            revision,
        })
    }

    async fn list(&self, req: pb::ListSessionsRequest) -> Result<pb::ListSessionsResponse> {
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
        let (page, revision) = self
            .state
            .store
            .read(move |v| {
                let page = ops::list_sessions(
                    v,
                    after.as_deref(),
                    limit,
                    parent.as_deref(),
                    agent.as_deref(),
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

    async fn update(&self, req: pb::UpdateSessionRequest) -> Result<pb::UpdateSessionResponse> {
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
        let (s, revision) = self
            .state
            .store
            .write(bytes, move |ctx| {
                ops::update_session(ctx, &session_id, patch.clone(), &policy.limits)
            })
            .await?;
        Ok(pb::UpdateSessionResponse {
            session: Some(convert::session_out(s)),
            revision,
        })
    }

    async fn delete(&self, req: pb::DeleteSessionRequest) -> Result<pb::DeleteSessionResponse> {
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
        let (deleted_session_ids, revision) = self
            .state
            .store
            .write(bytes, move |ctx| {
                ops::delete_session(ctx, &session_id, cascade, expected_revision)
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
    #[instrument(skip_all, fields(session_id = %Excerpt(request.get_ref().session.as_ref().map_or("", |s| s.session_id.as_str()))), err)]
    async fn create_session(
        &self,
        request: Request<pb::CreateSessionRequest>,
    ) -> Result<Response<pb::CreateSessionResponse>, Status> {
        self.create(request.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    #[instrument(skip_all, fields(session_id = %Excerpt(&request.get_ref().session_id)), err)]
    async fn get_session(
        &self,
        request: Request<pb::GetSessionRequest>,
    ) -> Result<Response<pb::GetSessionResponse>, Status> {
        self.get(request.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    #[instrument(skip_all, fields(page_token = %Excerpt(&request.get_ref().page_token)), err)]
    async fn list_sessions(
        &self,
        request: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        self.list(request.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    #[instrument(skip_all, fields(session_id = %Excerpt(&request.get_ref().session_id)), err)]
    async fn update_session(
        &self,
        request: Request<pb::UpdateSessionRequest>,
    ) -> Result<Response<pb::UpdateSessionResponse>, Status> {
        self.update(request.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    #[instrument(skip_all, fields(session_id = %Excerpt(&request.get_ref().session_id), cascade = request.get_ref().cascade), err)]
    async fn delete_session(
        &self,
        request: Request<pb::DeleteSessionRequest>,
    ) -> Result<Response<pb::DeleteSessionResponse>, Status> {
        self.delete(request.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }
}
