//! `cairn.v1.TodoService`: per-agent todo lists.

use prost::Message as _;
use tracing::instrument;

use super::{State, rpcs};
use crate::auth::Authenticated;
use crate::convert;
use cairn_api as pb;
use cairn_api::todo_service_server::TodoService;
use cairn_core::command::Command;
use cairn_core::error::{Excerpt, Result};

/// The todo service.
#[derive(Clone, Debug)]
pub struct TodoApi {
    state: State,
}

impl TodoApi {
    /// A service over shared state.
    pub fn new(state: State) -> Self {
        TodoApi { state }
    }

    async fn read(
        &self,
        who: &Authenticated,
        req: pb::ReadTodosRequest,
    ) -> Result<pb::ReadTodosResponse> {
        let (list, revision) = self
            .state
            .store
            .read_todos(&who.caller, req.agent_id)
            .await?;
        Ok(pb::ReadTodosResponse {
            list: Some(convert::todo_list(list)),
            revision,
        })
    }

    async fn write(
        &self,
        who: &Authenticated,
        req: pb::WriteTodosRequest,
    ) -> Result<pb::WriteTodosResponse> {
        let bytes = req.encoded_len();
        let command = Command::Todos(convert::write_todos(req)?);
        let (applied, revision) = self.state.store.apply(&who.caller, command, bytes).await?;
        Ok(pb::WriteTodosResponse {
            list: Some(convert::todo_list(applied.into_todos()?)),
            revision,
        })
    }
}

rpcs! {
    impl TodoService for TodoApi {
        #[instrument(skip_all, fields(agent_id = %Excerpt(&r.get_ref().agent_id)))]
        fn read_todos(r: pb::ReadTodosRequest) -> pb::ReadTodosResponse => read;
        #[instrument(skip_all, fields(agent_id = %Excerpt(&r.get_ref().agent_id), todos = r.get_ref().todos.len()))]
        fn write_todos(r: pb::WriteTodosRequest) -> pb::WriteTodosResponse => write;
    }
}
