//! `cairn.v1.TodoService`: per-agent todo lists.

use prost::Message as _;
use tonic::{Request, Response, Status};
use tracing::instrument;

use super::{State, caller};
use crate::convert;
use crate::status::status;
use cairn_api as pb;
use cairn_api::todo_service_server::TodoService;
use cairn_core::access::{self, Caller};
use cairn_core::error::{Excerpt, Result};
use cairn_store::ops;

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
        caller: &Caller,
        req: pb::ReadTodosRequest,
    ) -> Result<pb::ReadTodosResponse> {
        let pb::ReadTodosRequest { agent_id } = req;
        self.state
            .policy
            .limits
            .check_resource_id("agent_id", &agent_id)?;
        access::check_todos(caller, &agent_id, access::TodoAction::Read)?;
        let (list, revision) = self
            .state
            .store
            .read(move |v| Ok((ops::get_todos(v, &agent_id)?, v.revision()?)))
            .await?;
        Ok(pb::ReadTodosResponse {
            list: Some(convert::todo_list(list)),
            revision,
        })
    }

    async fn write(
        &self,
        caller: &Caller,
        req: pb::WriteTodosRequest,
    ) -> Result<pb::WriteTodosResponse> {
        let bytes = req.encoded_len();
        let pb::WriteTodosRequest {
            agent_id,
            todos,
            expected_revision,
        } = req;
        self.state
            .policy
            .limits
            .check_resource_id("agent_id", &agent_id)?;
        access::check_todos(caller, &agent_id, access::TodoAction::Write)?;
        let items = convert::todo_inputs(todos)?;
        let policy = self.state.policy.clone();
        let (list, revision) = self
            .state
            .store
            .write(bytes, move |ctx| {
                ops::write_todos(
                    ctx,
                    &agent_id,
                    items.clone(),
                    expected_revision,
                    &policy.limits,
                )
            })
            .await?;
        Ok(pb::WriteTodosResponse {
            list: Some(convert::todo_list(list)),
            revision,
        })
    }
}

#[tonic::async_trait]
impl TodoService for TodoApi {
    #[instrument(skip_all, fields(agent_id = %Excerpt(&request.get_ref().agent_id)))]
    async fn read_todos(
        &self,
        request: Request<pb::ReadTodosRequest>,
    ) -> Result<Response<pb::ReadTodosResponse>, Status> {
        let caller = caller(&request)?;
        self.read(&caller, request.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }

    #[instrument(skip_all, fields(agent_id = %Excerpt(&request.get_ref().agent_id), todos = request.get_ref().todos.len()))]
    async fn write_todos(
        &self,
        request: Request<pb::WriteTodosRequest>,
    ) -> Result<Response<pb::WriteTodosResponse>, Status> {
        let caller = caller(&request)?;
        self.write(&caller, request.into_inner())
            .await
            .map(Response::new)
            .map_err(status)
    }
}
