//! `cairn admin …`: operations on the store itself.

use std::io::Write as _;

use cairn_api as pb;
use serde_json::json;

use super::args::{AdminCmd, ClientArgs, Output, WebhookCmd};
use super::io::{CliResult, emit_json, emit_plain};
use super::render;

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
        AdminCmd::Webhook(cmd) => webhook(&mut api, client.output, cmd).await?,
    }
    Ok(())
}

type Admin = pb::admin_service_client::AdminServiceClient<crate::conn::Api>;

/// `cairn admin webhook …`
async fn webhook(api: &mut Admin, output: Output, cmd: WebhookCmd) -> CliResult {
    match cmd {
        WebhookCmd::Create {
            id,
            url,
            events,
            tree,
        } => {
            let r = api
                .create_webhook(pb::CreateWebhookRequest {
                    webhook: Some(pb::Webhook {
                        webhook_id: id,
                        url,
                        event_types: events,
                        session_root: tree.unwrap_or_default(),
                        ..Default::default()
                    }),
                })
                .await?
                .into_inner();
            let w = r.webhook.unwrap_or_default();
            match output {
                Output::Json => emit_json(&json!({
                    "webhook": webhook_json(&w),
                    "secret": r.secret,
                    "revision": r.revision,
                })),
                Output::Text => emit_plain(&format!(
                    "webhook {} created; its signing secret (shown once):\n{}\n",
                    render::printable(&w.webhook_id),
                    r.secret
                )),
            }
        }
        WebhookCmd::List => {
            let list = api
                .list_webhooks(pb::ListWebhooksRequest {})
                .await?
                .into_inner()
                .webhooks;
            match output {
                Output::Json => emit_json(&json!({
                    "webhooks": list.iter().map(webhook_json).collect::<Vec<_>>(),
                })),
                Output::Text => emit_plain(&webhooks_text(&list)),
            }
        }
        WebhookCmd::Delete { id } => {
            let r = api
                .delete_webhook(pb::DeleteWebhookRequest { webhook_id: id })
                .await?
                .into_inner();
            emit_revision(output, "webhook deleted", r.revision);
        }
        WebhookCmd::Dead { id } => {
            let letters = api
                .list_dead_letters(pb::ListDeadLettersRequest {
                    webhook_id: id,
                    page_size: 500,
                    ..Default::default()
                })
                .await?
                .into_inner()
                .dead_letters;
            match output {
                Output::Json => emit_json(&json!({
                    "dead_letters": letters.iter().map(dead_letter_json).collect::<Vec<_>>(),
                })),
                Output::Text => emit_plain(&dead_letters_text(&letters)),
            }
        }
        WebhookCmd::Retry { id, key } => {
            let r = api
                .retry_dead_letter(pb::RetryDeadLetterRequest {
                    webhook_id: id,
                    key,
                })
                .await?
                .into_inner();
            emit_revision(output, "dead letter queued again", r.revision);
        }
    }
    Ok(())
}

fn emit_revision(output: Output, what: &str, revision: u64) {
    match output {
        Output::Json => emit_json(&json!({ "revision": revision })),
        Output::Text => emit_plain(&format!("{what} at revision {revision}\n")),
    }
}

fn webhooks_text(list: &[pb::Webhook]) -> String {
    if list.is_empty() {
        return "No webhooks.\n".into();
    }
    let mut out = String::new();
    for w in list {
        let tree = if w.session_root.is_empty() {
            String::new()
        } else {
            format!(" tree {}", w.session_root)
        };
        out.push_str(&render::printable(&format!(
            "{}  {}  [{}]{tree}  delivered to revision {}",
            w.webhook_id,
            w.url,
            w.event_types.join(", "),
            w.delivered_revision
        )));
        out.push('\n');
    }
    out
}

fn dead_letters_text(letters: &[pb::DeadLetter]) -> String {
    if letters.is_empty() {
        return "No dead letters.\n".into();
    }
    let mut out = String::new();
    for d in letters {
        out.push_str(&render::printable(&format!(
            "{}  {} of revision {}  {} attempts: {}{}",
            d.key,
            d.event_type,
            d.event_revision,
            d.attempts,
            d.last_error,
            if d.retrying { "  (retrying)" } else { "" }
        )));
        out.push('\n');
    }
    out
}

fn dead_letter_json(d: &pb::DeadLetter) -> serde_json::Value {
    json!({
        "key": d.key,
        "event_type": d.event_type,
        "event_revision": d.event_revision,
        "message_id": d.message_id,
        "attempts": d.attempts,
        "last_error": d.last_error,
        "retrying": d.retrying,
        "body": serde_json::from_str::<serde_json::Value>(&d.body).unwrap_or_default(),
    })
}

fn webhook_json(w: &pb::Webhook) -> serde_json::Value {
    json!({
        "webhook_id": w.webhook_id,
        "url": w.url,
        "event_types": w.event_types,
        "session_root": w.session_root,
        "created_by": w.created_by,
        "revision": w.revision,
        "delivered_revision": w.delivered_revision,
    })
}
