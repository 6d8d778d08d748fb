//! Webhook delivery (docs/webhooks.md), following the Standard Webhooks
//! specification: `webhook-id`, `webhook-timestamp` and `webhook-signature`
//! (`v1,` and the base64 HMAC-SHA256 of `id.timestamp.body` under the
//! `whsec_` secret).
//!
//! ```text
//!  supervisor (every second): the subscriptions in the store; one task each
//!      task: cursor ─▶ the log after it ─▶ notifications it wants, in order
//!            ─▶ POST, retried with backoff and jitter ─▶ delivered, or a
//!               dead letter after --webhook-max-attempts
//!            ─▶ Store::advance_webhook (the cursor moves only after)
//! ```
//!
//! Deliveries are at least once: the cursor is durable and moves after a
//! delivery, so a server killed in between delivers again. Writers never
//! wait for any of this: it reads the log like a watcher. On etcd one
//! replica delivers (the live one whose name sorts first), and another
//! takes over from the same cursor when it dies.
//!
//! Secrets are stored sealed (ChaCha20-Poly1305) under a key kept in a file
//! of its own (`--webhook-key-file`), never in the store in the clear.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::sync::Semaphore;

use cairn_core::access::Caller;
use cairn_core::error::{Error, Result};
use cairn_core::task::Following;
use cairn_core::webhook::Webhook;
use cairn_store::Store;
use cairn_store::webhooks::{DeadLetter, Notification, RETRY, notifications, task_notification};

/// What an A2A push config asked to be sent with each notification: its
/// token and its credentials, opened from their seals.
fn push_headers(sealer: &Sealer, w: &Webhook) -> Result<Vec<(String, String)>> {
    let Some(push) = &w.task else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    if !push.sealed_token.is_empty() {
        out.push((
            "x-a2a-notification-token".to_owned(),
            sealer.open(&push.sealed_token)?,
        ));
    }
    if !push.auth_scheme.is_empty() {
        let credentials = sealer.open(&push.sealed_credentials)?;
        out.push((
            "authorization".to_owned(),
            format!("{} {credentials}", push.auth_scheme),
        ));
    }
    Ok(out)
}

/// The prefix of a signing secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// How deliveries are made.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// Plain `http://` URLs are accepted (tests, a receiver on loopback).
    pub allow_http: bool,
    /// Attempts before a delivery is dead-lettered.
    pub max_attempts: u32,
    /// The first retry's delay; each later one doubles, up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// How long one attempt may take.
    pub timeout: Duration,
    /// Deliveries in flight to one host at once.
    pub per_host: usize,
    /// The file holding the key secrets are sealed with; created (0600)
    /// when missing. None: webhooks are off.
    pub key_file: Option<PathBuf>,
    /// This server's replica name (etcd), to decide who delivers.
    pub replica: String,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        WebhookConfig {
            allow_http: false,
            max_attempts: 8,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
            timeout: Duration::from_secs(10),
            per_host: 4,
            key_file: None,
            replica: String::new(),
        }
    }
}

/// Seals and opens signing secrets.
pub struct Sealer {
    cipher: ChaCha20Poly1305,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer")
    }
}

fn random<const N: usize>(what: &str) -> Result<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::Internal(format!("no system randomness for {what}: {e}")))?;
    Ok(bytes)
}

impl Sealer {
    /// The key in `path`, made there (readable by the owner only) when the
    /// file does not exist.
    pub fn load(path: &Path) -> std::io::Result<Sealer> {
        let key = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = random::<32>("a webhook key").map_err(std::io::Error::other)?;
                write_private(path, &key)?;
                key.to_vec()
            }
            Err(e) => return Err(e),
        };
        let key: [u8; 32] = key.as_slice().try_into().map_err(|_| {
            std::io::Error::other(format!(
                "{} must hold exactly 32 bytes (a webhook sealing key)",
                path.display()
            ))
        })?;
        Ok(Sealer {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
        })
    }

    /// `secret` sealed: a random nonce, then the ciphertext.
    pub fn seal(&self, secret: &str) -> Result<Vec<u8>> {
        let nonce = random::<12>("a nonce")?;
        let mut out = nonce.to_vec();
        let sealed = self
            .cipher
            .encrypt(Nonce::from_slice(&nonce), secret.as_bytes())
            .map_err(|_| Error::Internal("sealing a webhook secret failed".into()))?;
        out.extend(sealed);
        Ok(out)
    }

    /// The secret `sealed` holds.
    pub fn open(&self, sealed: &[u8]) -> Result<String> {
        let bad = || {
            Error::Internal(
                "a webhook secret does not open with this server's --webhook-key-file".into(),
            )
        };
        if sealed.len() < 12 {
            return Err(bad());
        }
        let (nonce, body) = sealed.split_at(12);
        let plain = self
            .cipher
            .decrypt(Nonce::from_slice(nonce), body)
            .map_err(|_| bad())?;
        String::from_utf8(plain).map_err(|_| bad())
    }
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}

/// A new signing secret: `whsec_` and 24 random bytes in base64.
pub fn mint_secret() -> Result<String> {
    Ok(format!(
        "{SECRET_PREFIX}{}",
        B64.encode(random::<24>("a secret")?)
    ))
}

/// The `webhook-signature` of a delivery: `v1,` and the base64
/// HMAC-SHA256 of `id.timestamp.body` under the secret's bytes.
pub fn signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Result<String> {
    let key = B64
        .decode(secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret))
        .map_err(|_| Error::Internal("a webhook secret is not base64".into()))?;
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key)
        .map_err(|_| Error::Internal("a webhook secret is empty".into()))?;
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    Ok(format!("v1,{}", B64.encode(mac.finalize().into_bytes())))
}

/// The delay before attempt `attempt + 1`: doubling from `base`, capped,
/// half of it random (so receivers coming back are not hit in step).
fn backoff(config: &WebhookConfig, attempt: u32) -> Duration {
    let doubled = config
        .backoff
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
    let full = doubled.min(config.max_backoff);
    let half = full / 2;
    half + half.mul_f64(fastrand::f64())
}

/// How a delivery ended.
enum Outcome {
    Delivered,
    Dead { attempts: u32, last_error: String },
}

/// The deliverer: one task per subscription.
pub struct Webhooks {
    store: Store,
    config: WebhookConfig,
    sealer: Option<Arc<Sealer>>,
    client: reqwest::Client,
    hosts: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// How often the subscriptions (and who delivers) are looked at again.
const SUPERVISE: Duration = Duration::from_secs(1);
/// How often an idle subscription looks for new revisions.
const POLL: Duration = Duration::from_millis(50);
/// How often queued dead letters are looked for.
const RETRY_CHECK: Duration = Duration::from_secs(1);
/// A cursor that moved past revisions with nothing to deliver is written
/// at most this often.
const IDLE_CURSOR: Duration = Duration::from_secs(2);

impl Webhooks {
    /// The deliverer over `store`; its key is loaded (or made) here.
    pub fn new(store: Store, config: WebhookConfig) -> std::io::Result<Self> {
        let sealer = match &config.key_file {
            Some(path) => Some(Arc::new(Sealer::load(path)?)),
            None => None,
        };
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::custom(|attempt| {
                // Never to another host: a receiver cannot send the signed
                // body elsewhere.
                let same = attempt.previous().first().and_then(|u| u.host_str())
                    == attempt.url().host_str();
                if same && attempt.previous().len() < 3 {
                    attempt.follow()
                } else {
                    attempt.stop()
                }
            }))
            .timeout(config.timeout)
            .build()
            .map_err(std::io::Error::other)?;
        Ok(Webhooks {
            store,
            config,
            sealer,
            client,
            hosts: Mutex::new(HashMap::new()),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &WebhookConfig {
        &self.config
    }

    /// Whether webhooks (and A2A push notifications) are on.
    pub fn enabled(&self) -> bool {
        self.sealer.is_some()
    }

    /// Seals a new secret, or says why webhooks are off.
    pub fn seal(&self, secret: &str) -> Result<Vec<u8>> {
        match &self.sealer {
            Some(s) => s.seal(secret),
            None => Err(Error::Unavailable(
                "webhooks are off: start the server with --webhook-key-file (or a data dir)".into(),
            )),
        }
    }

    /// Whether this server is the one that delivers.
    async fn delivers(&self) -> bool {
        match self.store.live_replicas().await {
            Ok(None) => true,
            Ok(Some(live)) => live
                .first()
                .is_some_and(|first| *first == self.config.replica),
            Err(_) => false,
        }
    }

    /// Runs the deliveries until the store closes.
    pub async fn run(self: Arc<Self>) {
        let mut tasks: HashMap<String, (Webhook, tokio::task::JoinHandle<()>)> = HashMap::new();
        while !self.store.hub().is_closed() {
            let wanted = if self.sealer.is_some() && self.delivers().await {
                self.store
                    .webhooks(&Caller::Open)
                    .await
                    .unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "webhook subscriptions not read");
                        tasks.values().map(|(w, _)| w.clone()).collect()
                    })
            } else {
                Vec::new()
            };
            tasks.retain(|id, (w, task)| {
                let keep =
                    !task.is_finished() && wanted.iter().any(|x| x == w && x.webhook_id == *id);
                if !keep {
                    task.abort();
                }
                keep
            });
            for w in wanted {
                if !tasks.contains_key(&w.webhook_id) {
                    let task = tokio::spawn(Arc::clone(&self).follow(w.clone()));
                    tasks.insert(w.webhook_id.clone(), (w, task));
                }
            }
            tokio::time::sleep(SUPERVISE).await;
        }
        for (_, (_, task)) in tasks {
            task.abort();
        }
    }

    /// Delivers one subscription's notifications in revision order.
    async fn follow(self: Arc<Self>, w: Webhook) {
        if let Err(e) = self.follow_inner(&w).await {
            tracing::warn!(webhook_id = w.webhook_id, error = %e, "webhook deliveries paused; retried shortly");
        }
    }

    async fn follow_inner(&self, w: &Webhook) -> Result<()> {
        let Some(sealer) = &self.sealer else {
            return Ok(());
        };
        let secret = sealer.open(&w.sealed_secret)?;
        let extra = push_headers(sealer, w)?;
        let (mut cursor, told) = self.store.task_push_cursor(w).await?;
        // A task's config follows the task's state from the one last told.
        let mut following = match (&w.task, told) {
            (Some(_), Some(told)) => Some(Following::resumed(told)),
            _ => None,
        };
        let told = |f: &Option<Following>| f.as_ref().map(Following::told);
        let mut saved = cursor;
        let mut last_save = tokio::time::Instant::now();
        let mut retries_seen: Option<tokio::time::Instant> = None;
        loop {
            // Queued retries are an admin's rare act: looked for once a
            // second, not at every poll for new revisions.
            if retries_seen.is_none_or(|t| t.elapsed() >= RETRY_CHECK) {
                self.retry_queued(w, &secret, &extra).await?;
                retries_seen = Some(tokio::time::Instant::now());
            }
            if self.store.revision() <= cursor {
                if saved < cursor && last_save.elapsed() >= IDLE_CURSOR {
                    self.store
                        .advance_webhook(&w.webhook_id, cursor, told(&following), None)
                        .await?;
                    (saved, last_save) = (cursor, tokio::time::Instant::now());
                }
                tokio::time::sleep(POLL).await;
                continue;
            }
            let from = cursor + 1;
            let revisions = self.store.log_from(from, 64, 4 << 20).await?;
            if revisions.is_empty() {
                tokio::time::sleep(POLL).await;
                continue;
            }
            for rev in revisions {
                let before = told(&following);
                let wanted: Vec<Notification> = match (&w.task, following.as_mut()) {
                    (Some(push), Some(f)) => task_notification(&rev, &push.task_id, f)
                        .into_iter()
                        .collect(),
                    _ => notifications(&rev)
                        .into_iter()
                        .filter(|n| w.wants(n.kind, &n.session_id, &n.ancestors))
                        .collect(),
                };
                let handled = !wanted.is_empty();
                for n in wanted {
                    let dead = match self.deliver(w, &secret, &extra, &n).await {
                        Outcome::Delivered => None,
                        Outcome::Dead {
                            attempts,
                            last_error,
                        } => Some(DeadLetter {
                            notification: n,
                            attempts,
                            last_error,
                            dead_time: cairn_store::now_micros(),
                        }),
                    };
                    if dead.is_some() {
                        // The dead letter is kept at once; the cursor stays
                        // before this revision until all of it is handled.
                        self.store
                            .advance_webhook(&w.webhook_id, rev.revision - 1, before, dead)
                            .await?;
                    }
                }
                cursor = rev.revision;
                if handled {
                    self.store
                        .advance_webhook(&w.webhook_id, cursor, told(&following), None)
                        .await?;
                    (saved, last_save) = (cursor, tokio::time::Instant::now());
                }
            }
        }
    }

    /// Delivers the dead letters an admin queued again.
    async fn retry_queued(
        &self,
        w: &Webhook,
        secret: &str,
        extra: &[(String, String)],
    ) -> Result<()> {
        let queued = self
            .store
            .dead_letters(&Caller::Open, RETRY, &w.webhook_id, None, 16)
            .await?;
        for (key, letter) in queued {
            let dead = match self.deliver(w, secret, extra, &letter.notification).await {
                Outcome::Delivered => None,
                Outcome::Dead {
                    attempts,
                    last_error,
                } => Some(DeadLetter {
                    attempts: letter.attempts + attempts,
                    last_error,
                    dead_time: cairn_store::now_micros(),
                    ..letter
                }),
            };
            self.store.retried(key, dead).await?;
        }
        Ok(())
    }

    fn host_limit(&self, url: &str) -> Arc<Semaphore> {
        let host = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| {
                u.host_str()
                    .map(|h| format!("{h}:{}", u.port_or_known_default().unwrap_or(0)))
            })
            .unwrap_or_default();
        let mut hosts = self.hosts.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(
            hosts
                .entry(host)
                .or_insert_with(|| Arc::new(Semaphore::new(self.config.per_host.max(1)))),
        )
    }

    /// Tries one notification up to the bounded attempts.
    async fn deliver(
        &self,
        w: &Webhook,
        secret: &str,
        extra: &[(String, String)],
        n: &Notification,
    ) -> Outcome {
        let id = n.message_id(&w.webhook_id);
        let body = match serde_json::to_vec(&n.body) {
            Ok(b) => b,
            Err(e) => {
                return Outcome::Dead {
                    attempts: 0,
                    last_error: format!("the body did not encode: {e}"),
                };
            }
        };
        let limit = self.host_limit(&w.url);
        let mut last_error = String::new();
        let attempts = self.config.max_attempts.max(1);
        for attempt in 1..=attempts {
            let result = {
                let _permit = limit.acquire().await;
                self.attempt(w, secret, extra, &id, &body).await
            };
            match result {
                Ok(()) => {
                    metrics::counter!("cairn_webhook_deliveries_total", "outcome" => "delivered")
                        .increment(1);
                    return Outcome::Delivered;
                }
                Err(e) => last_error = e,
            }
            metrics::counter!("cairn_webhook_deliveries_total", "outcome" => "failed").increment(1);
            tracing::debug!(
                webhook_id = w.webhook_id,
                message_id = id,
                attempt,
                error = last_error,
                "webhook delivery failed"
            );
            if attempt < attempts {
                tokio::time::sleep(backoff(&self.config, attempt)).await;
            }
        }
        metrics::counter!("cairn_webhook_deliveries_total", "outcome" => "dead").increment(1);
        tracing::warn!(
            webhook_id = w.webhook_id,
            message_id = id,
            attempts,
            error = last_error,
            "webhook delivery dead-lettered"
        );
        Outcome::Dead {
            attempts,
            last_error,
        }
    }

    async fn attempt(
        &self,
        w: &Webhook,
        secret: &str,
        extra: &[(String, String)],
        id: &str,
        body: &[u8],
    ) -> std::result::Result<(), String> {
        let now = cairn_store::now_micros() / 1_000_000;
        let signature = signature(secret, id, now, body).map_err(|e| e.to_string())?;
        let content_type = if w.task.is_some() {
            // A2A's push payload (a StreamResponse).
            "application/a2a+json"
        } else {
            "application/json"
        };
        let mut request = self
            .client
            .post(&w.url)
            .header("webhook-id", id)
            .header("webhook-timestamp", now.to_string())
            .header("webhook-signature", signature)
            .header("content-type", content_type);
        for (name, value) in extra {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = request
            .body(body.to_vec())
            .send()
            .await
            // The URL may carry a receiver's token: never in a message.
            .map_err(|e| e.without_url().to_string())?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("HTTP {}", status.as_u16()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_secret_opens_only_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("webhook.key");
        let a = Sealer::load(&path).unwrap();
        let again = Sealer::load(&path).unwrap();
        let secret = mint_secret().unwrap();
        assert!(secret.starts_with("whsec_"));
        let sealed = a.seal(&secret).unwrap();
        assert!(
            !sealed
                .windows(8)
                .any(|w| secret.as_bytes().windows(8).any(|s| s == w))
        );
        assert_eq!(again.open(&sealed).unwrap(), secret);
        let other = Sealer::load(&dir.path().join("other.key")).unwrap();
        assert!(other.open(&sealed).is_err());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn signatures_follow_the_specification_s_example() {
        // The example of the Standard Webhooks specification.
        let sig = signature(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        )
        .unwrap();
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn backoff_doubles_to_its_cap_with_jitter() {
        let c = WebhookConfig {
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            ..WebhookConfig::default()
        };
        for _ in 0..100 {
            let first = backoff(&c, 1);
            assert!(first >= Duration::from_millis(500) && first <= Duration::from_secs(1));
            let late = backoff(&c, 30);
            assert!(late >= Duration::from_secs(5) && late <= Duration::from_secs(10));
        }
    }
}
