//! The engine `cairn serve` keeps its state in: the binary chooses it and
//! hands the opened [`Store`] to the server, which names no engine.

use cairn_core::error::{Error, Result};
use cairn_etcd::EtcdOptions;
use cairn_redb::RedbOptions;
use cairn_store::Store;

/// Where the state lives.
#[derive(Debug, Clone)]
pub enum Engine {
    /// One redb file under a data directory (the default).
    Redb(RedbOptions),
    /// An etcd cluster, shared by any number of replicas.
    Etcd(EtcdOptions),
}

impl Engine {
    /// Opens the store; redb's blocking open runs off the async workers.
    pub async fn open(self) -> Result<Store> {
        match self {
            Engine::Redb(opts) => tokio::task::spawn_blocking(move || cairn_redb::open(&opts))
                .await
                .map_err(|e| Error::Internal(format!("open task: {e}")))?,
            Engine::Etcd(opts) => cairn_etcd::open(&opts).await,
        }
    }
}
