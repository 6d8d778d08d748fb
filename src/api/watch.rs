//! `cairn.v1.WatchService`: declared in API v1; the streaming implementation
//! (etcd-grade watch over session trees, and `Wait`) is the next milestone.
//! Until then both RPCs answer UNIMPLEMENTED so clients can feature-detect.

use std::pin::Pin;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use tracing::instrument;

use super::State;
use crate::pb;
use crate::pb::watch_service_server::WatchService;

/// The watch service.
#[derive(Clone, Debug)]
pub struct WatchApi {
    #[allow(dead_code)]
    state: State,
}

impl WatchApi {
    /// A service over shared state.
    pub fn new(state: State) -> Self {
        WatchApi { state }
    }
}

/// The stream type of `Watch`.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl WatchService for WatchApi {
    type WatchStream = WatchStream;

    #[instrument(skip_all, err)]
    async fn watch(
        &self,
        _request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("Watch is not implemented yet"))
    }

    #[instrument(skip_all, err)]
    async fn wait(
        &self,
        _request: Request<pb::WaitRequest>,
    ) -> Result<Response<pb::WaitResponse>, Status> {
        Err(Status::unimplemented("Wait is not implemented yet"))
    }
}
