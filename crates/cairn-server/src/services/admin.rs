//! `cairn.v1.AdminService`: operations on the store itself, for admins.

use std::pin::Pin;

use cairn_api as pb;
use cairn_api::admin_service_server::AdminService;
use cairn_core::access;
use tokio::io::AsyncReadExt;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use tracing::instrument;

use super::{State, caller};
use crate::status::status;

/// Bytes per backup chunk: well under gRPC's default message limit.
const CHUNK: usize = 1 << 20;

/// The admin service.
#[derive(Clone, Debug)]
pub struct AdminApi {
    state: State,
}

impl AdminApi {
    /// A service over shared state.
    pub fn new(state: State) -> Self {
        AdminApi { state }
    }
}

type BackupStream = Pin<Box<dyn Stream<Item = Result<pb::BackupResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AdminService for AdminApi {
    type BackupStream = BackupStream;

    #[instrument(skip_all, err)]
    async fn backup(
        &self,
        request: Request<pb::BackupRequest>,
    ) -> Result<Response<BackupStream>, Status> {
        let caller = caller(&request)?;
        access::check_admin(&caller).map_err(status)?;
        // The copy is written to a private temp file first (a consistent
        // snapshot takes a read transaction's time, not the stream's),
        // then streamed and removed.
        let dir = tempfile::tempdir()
            .map_err(|e| Status::internal(format!("backup: a temp dir: {e}")))?;
        let path = dir.path().join("cairn.redb");
        let revision = self
            .state
            .store
            .backup(path.clone())
            .await
            .map_err(status)?;
        let mut file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| Status::internal(format!("backup: {e}")))?;
        tracing::info!(revision, "backup taken");
        let stream = async_stream::try_stream! {
            // Owned by the stream: the temp dir goes when it ends.
            let _dir = dir;
            loop {
                let mut data = vec![0; CHUNK];
                let n = file
                    .read(&mut data)
                    .await
                    .map_err(|e| Status::internal(format!("backup: {e}")))?;
                if n == 0 {
                    break;
                }
                data.truncate(n);
                yield pb::BackupResponse { data, revision };
            }
        };
        Ok(Response::new(Box::pin(stream)))
    }
}
