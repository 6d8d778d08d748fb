//! The webhook outbox through the store: subscriptions, each one's
//! durable cursor in the log, and its dead letters (the records are
//! [`crate::webhooks`]).

use cairn_core::access::{self, Caller};
use cairn_core::error::{Error, Result};
use cairn_core::task::TaskState;
use cairn_core::webhook::{TaskPush, Webhook};

use crate::codec;
use crate::store::Store;
use crate::webhooks::{
    CURSORS, DEAD, DeadLetter, RETRY, WEBHOOKS, cursor, cursor_bytes, cursor_state, letters,
};

impl Store {
    /// Every subscription, by id.
    pub async fn webhooks(&self, caller: &Caller) -> Result<Vec<Webhook>> {
        access::check_admin(caller)?;
        self.read(|v| {
            let mut out = Vec::new();
            let mut after: Option<String> = None;
            loop {
                let page = v.aux_after(WEBHOOKS, after.as_deref(), 256)?;
                let done = page.len() < 256;
                for (key, value) in page {
                    out.push(codec::decode::<Webhook>(&value)?);
                    after = Some(key);
                }
                if done {
                    return Ok(out);
                }
            }
        })
        .await
    }

    /// A task's push notification configs, for whoever manages its
    /// session.
    pub async fn task_pushes(&self, caller: &Caller, task_id: &str) -> Result<Vec<Webhook>> {
        let (caller, task) = (caller.clone(), task_id.to_owned());
        self.read(move |v| {
            crate::ops::authorize(v, &caller, access::Action::Manage, &task)?;
            letters(v, WEBHOOKS, &TaskPush::group(&task), None, usize::MAX)?
                .into_iter()
                .map(|(_, b)| codec::decode::<Webhook>(&b))
                .collect()
        })
        .await
    }

    /// The last revision `w` handled.
    pub async fn webhook_cursor(&self, w: &Webhook) -> Result<u64> {
        Ok(self.task_push_cursor(w).await?.0)
    }

    /// The last revision `w` handled, and for a task's push config the
    /// state it last told (at first, the state it was made in).
    pub async fn task_push_cursor(&self, w: &Webhook) -> Result<(u64, Option<TaskState>)> {
        let (id, start) = (w.webhook_id.clone(), w.revision);
        let first = w.task.as_ref().and_then(|t| t.state);
        self.read(move |v| {
            Ok(v.aux(CURSORS, &id)?
                .map_or((start, first), |b| (cursor(&b), cursor_state(&b).or(first))))
        })
        .await
    }

    /// Records that `webhook_id` handled everything up to `revision` (a
    /// task push: and last told `told`), and optionally a dead letter, in
    /// one durable write (no revision). A subscription deleted meanwhile is
    /// left deleted.
    pub async fn advance_webhook(
        &self,
        webhook_id: &str,
        revision: u64,
        told: Option<TaskState>,
        dead: Option<DeadLetter>,
    ) -> Result<()> {
        let id = webhook_id.to_owned();
        let dead = dead
            .map(|d| Ok::<_, Error>((d.notification.key(&id), codec::encode(&d)?)))
            .transpose()?;
        self.write(64, move |ctx| {
            if ctx.txn.aux(WEBHOOKS, &id)?.is_none() {
                return Ok(());
            }
            ctx.put_aux(CURSORS, &id, &cursor_bytes(revision, told))?;
            if let Some((key, letter)) = &dead {
                ctx.put_aux(DEAD, key, letter)?;
            }
            Ok(())
        })
        .await
    }

    /// Dead letters of a subscription (from `space`: [`DEAD`], or
    /// [`RETRY`] for those queued again), after the key `after`.
    pub async fn dead_letters(
        &self,
        caller: &Caller,
        space: &'static str,
        webhook_id: &str,
        after: Option<String>,
        limit: usize,
    ) -> Result<Vec<(String, DeadLetter)>> {
        access::check_admin(caller)?;
        let id = webhook_id.to_owned();
        self.read(move |v| {
            if v.aux(WEBHOOKS, &id)?.is_none() {
                return Err(Error::WebhookNotFound(id));
            }
            letters(v, space, &id, after.as_deref(), limit)?
                .into_iter()
                .map(|(k, b)| Ok((k, codec::decode(&b)?)))
                .collect()
        })
        .await
    }

    /// Drops a queued retry once it was handled again.
    pub async fn retried(&self, key: String, dead: Option<DeadLetter>) -> Result<()> {
        let dead = dead.map(|d| codec::encode(&d)).transpose()?;
        self.write(64, move |ctx| {
            ctx.delete_aux(RETRY, &key)?;
            if let Some(letter) = &dead {
                ctx.put_aux(DEAD, &key, letter)?;
            }
            Ok(())
        })
        .await
    }

    /// The oldest revision some subscription has not handled yet: the
    /// compactor keeps it and everything after.
    pub async fn oldest_undelivered(&self) -> Result<Option<u64>> {
        self.read(|v| {
            let mut oldest: Option<u64> = None;
            let mut after: Option<String> = None;
            loop {
                let page = v.aux_after(WEBHOOKS, after.as_deref(), 256)?;
                let done = page.len() < 256;
                for (key, value) in page {
                    let w: Webhook = codec::decode(&value)?;
                    let at = v.aux(CURSORS, &key)?.map_or(w.revision, |b| cursor(&b));
                    oldest = Some(oldest.map_or(at + 1, |o| o.min(at + 1)));
                    after = Some(key);
                }
                if done {
                    return Ok(oldest);
                }
            }
        })
        .await
    }
}
