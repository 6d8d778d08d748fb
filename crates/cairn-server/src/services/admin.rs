//! `cairn.v1.AdminService`: operations on the store itself, for admins.

use std::pin::Pin;

use cairn_api as pb;
use cairn_api::admin_service_server::AdminService;
use cairn_core::error::{Error, Result};
use tokio::io::AsyncReadExt;
use tokio_stream::Stream;
use tonic::Status;
use tracing::instrument;

use super::{State, rpcs};
use crate::auth::Authenticated;
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

/// The stream type of `Backup`.
pub type BackupStream = Pin<Box<dyn Stream<Item = Result<pb::BackupResponse, Status>> + Send>>;

impl AdminApi {
    async fn backup(&self, who: &Authenticated, _req: pb::BackupRequest) -> Result<BackupStream> {
        // The copy is written to a private temp file first (a consistent
        // snapshot takes a read transaction's time, not the stream's),
        // then streamed and removed.
        let tmp = std::env::temp_dir();
        let failed = |detail: String| Error::BackupFailed {
            dir: tmp.display().to_string(),
            detail,
        };
        let dir = tempfile::tempdir().map_err(|e| failed(e.to_string()))?;
        let path = dir.path().join("cairn.redb");
        let revision = self.state.store.backup(&who.caller, path.clone()).await?;
        let mut file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| failed(e.to_string()))?;
        // Unlinked at once: the open file is all that holds the copy, so
        // its space goes back the moment the stream ends, crash or not,
        // and nothing of it is left for another process to read.
        drop(dir);
        tracing::info!(revision, "backup taken");
        let stream = async_stream::try_stream! {
            loop {
                let mut data = vec![0; CHUNK];
                let n = file
                    .read(&mut data)
                    .await
                    .map_err(|e| status(Error::Internal(format!("backup: reading the copy: {e}"))))?;
                if n == 0 {
                    break;
                }
                data.truncate(n);
                yield pb::BackupResponse { data, revision };
            }
        };
        Ok(Box::pin(stream))
    }
}

rpcs! {
    impl AdminService for AdminApi {
        type BackupStream = BackupStream;
        #[instrument(skip_all)]
        fn backup(r: pb::BackupRequest) -> BackupStream => backup;
    }
}
