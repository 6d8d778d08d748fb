//! `cairn.v1.SessionService`: the session tree.

use prost::Message as _;
use tracing::instrument;

use super::{State, rpcs};
use crate::auth::Authenticated;
use crate::convert;
use cairn_api as pb;
use cairn_api::session_service_server::SessionService;
use cairn_core::command::{Command, SessionCommand};
use cairn_core::error::{Excerpt, Result};
use cairn_core::session::Session;
use cairn_store::liveness::KeepAlive;
use cairn_store::reads::SessionQuery;

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

    /// Applies a session command: the session it left, and the revision.
    async fn apply(
        &self,
        who: &Authenticated,
        command: SessionCommand,
        bytes: usize,
    ) -> Result<(cairn_store::Applied, u64)> {
        self.state
            .store
            .apply(&who.caller, Command::Session(command), bytes)
            .await
    }

    async fn reply(
        &self,
        who: &Authenticated,
        command: SessionCommand,
        bytes: usize,
    ) -> Result<(pb::Session, u64)> {
        let (applied, revision) = self.apply(who, command, bytes).await?;
        let s: Session = applied.into_session()?;
        Ok((convert::session_out(s), revision))
    }

    async fn create(
        &self,
        who: &Authenticated,
        req: pb::CreateSessionRequest,
    ) -> Result<pb::CreateSessionResponse> {
        let bytes = req.encoded_len();
        let (session, revision) = self.reply(who, convert::create_session(req), bytes).await?;
        Ok(pb::CreateSessionResponse {
            session: Some(session),
            revision,
        })
    }

    async fn get(
        &self,
        who: &Authenticated,
        req: pb::GetSessionRequest,
    ) -> Result<pb::GetSessionResponse> {
        let (s, revision) = self
            .state
            .store
            .read_session(&who.caller, req.session_id)
            .await?;
        Ok(pb::GetSessionResponse {
            session: Some(convert::session_out(s)),
            revision,
        })
    }

    async fn list(
        &self,
        who: &Authenticated,
        req: pb::ListSessionsRequest,
    ) -> Result<pb::ListSessionsResponse> {
        let pb::ListSessionsRequest {
            page_size,
            page_token,
            parent_session_id,
            agent_id,
        } = req;
        let limit = convert::page_size(page_size, DEFAULT_PAGE, MAX_PAGE)?;
        // The token is the last id of the previous page; ids are already
        // URL-safe, so it needs no further encoding.
        let given = |s: String| (!s.is_empty()).then_some(s);
        let query = SessionQuery {
            after: given(page_token),
            limit,
            parent: given(parent_session_id),
            agent: given(agent_id),
            tree: None,
        };
        let (page, revision) = self.state.store.list_sessions(&who.caller, query).await?;
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
        who: &Authenticated,
        req: pb::UpdateSessionRequest,
    ) -> Result<pb::UpdateSessionResponse> {
        let bytes = req.encoded_len();
        let (session, revision) = self.reply(who, convert::update_session(req), bytes).await?;
        Ok(pb::UpdateSessionResponse {
            session: Some(session),
            revision,
        })
    }

    async fn delete(
        &self,
        who: &Authenticated,
        req: pb::DeleteSessionRequest,
    ) -> Result<pb::DeleteSessionResponse> {
        let bytes = req.encoded_len();
        let (applied, revision) = self.apply(who, convert::delete_session(req), bytes).await?;
        Ok(pb::DeleteSessionResponse {
            deleted_session_ids: applied.into_deleted()?,
            revision,
        })
    }

    async fn keep_alive(
        &self,
        who: &Authenticated,
        req: pb::KeepAliveRequest,
    ) -> Result<pb::KeepAliveResponse> {
        let pb::KeepAliveRequest {
            session_id,
            ttl,
            grace,
            finished,
        } = req;
        let ask = KeepAlive {
            session_id,
            ttl_ms: convert::duration_ms("ttl", ttl)?,
            grace_ms: convert::duration_ms("grace", grace)?,
            finished,
        };
        let (lease, revision) = self.state.store.keep_alive(&who.caller, ask).await?;
        Ok(pb::KeepAliveResponse {
            lease: Some(convert::lease_out(&lease)),
            revision,
        })
    }
}

rpcs! {
    impl SessionService for SessionApi {
        #[instrument(skip_all, fields(session_id = %Excerpt(r.get_ref().session.as_ref().map_or("", |s| s.session_id.as_str()))))]
        fn create_session(r: pb::CreateSessionRequest) -> pb::CreateSessionResponse => create;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn get_session(r: pb::GetSessionRequest) -> pb::GetSessionResponse => get;
        #[instrument(skip_all, fields(page_token = %Excerpt(&r.get_ref().page_token)))]
        fn list_sessions(r: pb::ListSessionsRequest) -> pb::ListSessionsResponse => list;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn update_session(r: pb::UpdateSessionRequest) -> pb::UpdateSessionResponse => update;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id), cascade = r.get_ref().cascade))]
        fn delete_session(r: pb::DeleteSessionRequest) -> pb::DeleteSessionResponse => delete;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn keep_alive(r: pb::KeepAliveRequest) -> pb::KeepAliveResponse => keep_alive;
    }
}
