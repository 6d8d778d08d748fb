//! `cairn.v1.AdminService`: operations on the store itself, for admins.

use std::pin::Pin;

use cairn_api as pb;
use cairn_api::admin_service_server::AdminService;
use cairn_core::error::{Error, Result};
use tokio::io::AsyncReadExt;
use tokio_stream::Stream;
use tonic::Status;
use tracing::instrument;

use cairn_core::command::WebhookCommand;
use cairn_core::error::Excerpt;
use cairn_core::webhook::{Webhook, WebhookRequest};
use cairn_store::webhooks::{DEAD, RETRY};

use super::{State, rpcs};
use crate::auth::Authenticated;
use crate::convert;
use crate::status::status;
use crate::webhooks::mint_secret;

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

impl AdminApi {
    async fn create_webhook(
        &self,
        who: &Authenticated,
        req: pb::CreateWebhookRequest,
    ) -> Result<pb::CreateWebhookResponse> {
        let w = req.webhook.unwrap_or_default();
        let request = WebhookRequest {
            webhook_id: w.webhook_id,
            url: w.url,
            event_types: w.event_types,
            session_root: w.session_root,
        };
        let hooks = &self.state.webhooks;
        let event_types = request.validate(hooks.config().allow_http, self.state.store.limits())?;
        let secret = mint_secret()?;
        let webhook = Webhook {
            webhook_id: request.webhook_id,
            url: request.url,
            event_types,
            session_root: request.session_root,
            sealed_secret: hooks.seal(&secret)?,
            created_by: String::new(),
            create_time: 0,
            revision: 0,
            task: None,
        };
        let id = webhook.webhook_id.clone();
        let (_, revision) = self
            .state
            .store
            .apply(&who.caller, WebhookCommand::Create(webhook).into(), 0)
            .await?;
        let stored = self
            .state
            .store
            .webhooks(&who.caller)
            .await?
            .into_iter()
            .find(|w| w.webhook_id == id)
            .ok_or(Error::WebhookNotFound(id))?;
        Ok(pb::CreateWebhookResponse {
            webhook: Some(convert::webhook_out(stored, 0)),
            secret,
            revision,
        })
    }

    async fn list_webhooks(
        &self,
        who: &Authenticated,
        _req: pb::ListWebhooksRequest,
    ) -> Result<pb::ListWebhooksResponse> {
        let store = &self.state.store;
        let mut webhooks = Vec::new();
        for w in store.webhooks(&who.caller).await? {
            let delivered = store.webhook_cursor(&w).await?;
            webhooks.push(convert::webhook_out(w, delivered));
        }
        Ok(pb::ListWebhooksResponse { webhooks })
    }

    async fn delete_webhook(
        &self,
        who: &Authenticated,
        req: pb::DeleteWebhookRequest,
    ) -> Result<pb::DeleteWebhookResponse> {
        let pb::DeleteWebhookRequest { webhook_id } = req;
        self.state
            .store
            .limits()
            .check_resource_id("webhook_id", &webhook_id)?;
        let (_, revision) = self
            .state
            .store
            .apply(&who.caller, WebhookCommand::Delete { webhook_id }.into(), 0)
            .await?;
        Ok(pb::DeleteWebhookResponse { revision })
    }

    async fn list_dead_letters(
        &self,
        who: &Authenticated,
        req: pb::ListDeadLettersRequest,
    ) -> Result<pb::ListDeadLettersResponse> {
        let pb::ListDeadLettersRequest {
            webhook_id,
            page_size,
            page_token,
        } = req;
        let store = &self.state.store;
        store
            .limits()
            .check_resource_id("webhook_id", &webhook_id)?;
        let limit = convert::page_size(page_size, 50, 500)?;
        if !page_token.is_empty() && !page_token.starts_with(&format!("{webhook_id}/")) {
            return Err(Error::invalid("page_token", "not a token this server gave"));
        }
        let after = (!page_token.is_empty()).then_some(page_token);
        let mut page = store
            .dead_letters(&who.caller, DEAD, &webhook_id, after, limit + 1)
            .await?;
        let mut next_page_token = String::new();
        if page.len() > limit {
            page.truncate(limit);
            next_page_token = page.last().map(|(k, _)| k.clone()).unwrap_or_default();
        }
        let mut dead_letters: Vec<pb::DeadLetter> = page
            .into_iter()
            .map(|(k, d)| convert::dead_letter_out(&webhook_id, k, d, false))
            .collect();
        if next_page_token.is_empty() {
            let queued = store
                .dead_letters(&who.caller, RETRY, &webhook_id, None, limit)
                .await?;
            dead_letters.extend(
                queued
                    .into_iter()
                    .map(|(k, d)| convert::dead_letter_out(&webhook_id, k, d, true)),
            );
        }
        Ok(pb::ListDeadLettersResponse {
            dead_letters,
            next_page_token,
        })
    }

    async fn retry_dead_letter(
        &self,
        who: &Authenticated,
        req: pb::RetryDeadLetterRequest,
    ) -> Result<pb::RetryDeadLetterResponse> {
        let pb::RetryDeadLetterRequest { webhook_id, key } = req;
        self.state
            .store
            .limits()
            .check_resource_id("webhook_id", &webhook_id)?;
        self.state
            .store
            .limits()
            .check_text(|| "key".into(), &key)?;
        let (_, revision) = self
            .state
            .store
            .apply(
                &who.caller,
                WebhookCommand::Retry { webhook_id, key }.into(),
                0,
            )
            .await?;
        Ok(pb::RetryDeadLetterResponse { revision })
    }
}

rpcs! {
    impl AdminService for AdminApi {
        type BackupStream = BackupStream;
        #[instrument(skip_all)]
        fn backup(r: pb::BackupRequest) -> BackupStream => backup;
        #[instrument(skip_all, fields(webhook_id = %Excerpt(r.get_ref().webhook.as_ref().map_or("", |w| w.webhook_id.as_str()))))]
        fn create_webhook(r: pb::CreateWebhookRequest) -> pb::CreateWebhookResponse => create_webhook;
        #[instrument(skip_all)]
        fn list_webhooks(r: pb::ListWebhooksRequest) -> pb::ListWebhooksResponse => list_webhooks;
        #[instrument(skip_all, fields(webhook_id = %Excerpt(&r.get_ref().webhook_id)))]
        fn delete_webhook(r: pb::DeleteWebhookRequest) -> pb::DeleteWebhookResponse => delete_webhook;
        #[instrument(skip_all, fields(webhook_id = %Excerpt(&r.get_ref().webhook_id)))]
        fn list_dead_letters(r: pb::ListDeadLettersRequest) -> pb::ListDeadLettersResponse => list_dead_letters;
        #[instrument(skip_all, fields(webhook_id = %Excerpt(&r.get_ref().webhook_id)))]
        fn retry_dead_letter(r: pb::RetryDeadLetterRequest) -> pb::RetryDeadLetterResponse => retry_dead_letter;
    }
}
