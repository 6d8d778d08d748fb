//! `cairn admin …`: operations on the store itself.

use std::io::Write as _;

use cairn_api as pb;
use serde_json::json;

use super::args::{AdminCmd, ClientArgs, Output};
use super::io::{CliResult, emit_json, emit_plain};

/// `cairn admin …`
pub async fn admin(client: &ClientArgs, cmd: AdminCmd) -> CliResult {
    let mut api = pb::admin_service_client::AdminServiceClient::new(client.server.connect().await?);
    match cmd {
        AdminCmd::Backup { out } => {
            if out.exists() {
                return Err(format!("{} exists: a backup never overwrites", out.display()).into());
            }
            // Written beside the target and renamed once whole and synced,
            // so a file at `out` is always a complete backup.
            let partial = out.with_extension("partial");
            // The owner's only: it holds every plan and token hash.
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut file = options
                .open(&partial)
                .map_err(|e| format!("{}: {e}", partial.display()))?;
            let mut stream = api.backup(pb::BackupRequest {}).await?.into_inner();
            let mut bytes = 0u64;
            let mut revision = 0;
            let written: CliResult = async {
                while let Some(chunk) = stream.message().await? {
                    file.write_all(&chunk.data)?;
                    bytes += chunk.data.len() as u64;
                    revision = chunk.revision;
                }
                file.sync_all()?;
                Ok(())
            }
            .await;
            if let Err(e) = written {
                let _ = std::fs::remove_file(&partial);
                return Err(e);
            }
            std::fs::rename(&partial, &out)?;
            match client.output {
                Output::Json => emit_json(&json!({
                    "file": out.display().to_string(),
                    "bytes": bytes,
                    "revision": revision,
                })),
                Output::Text => emit_plain(&format!(
                    "backup of revision {revision}: {bytes} bytes in {}\n",
                    out.display()
                )),
            }
        }
    }
    Ok(())
}
