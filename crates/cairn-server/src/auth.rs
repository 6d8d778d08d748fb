//! Who is calling: bearer tokens to principals.
//!
//! With `--auth off` every caller is [`Caller::Open`] (the default, on
//! loopback only). With `--auth token` every call but health and
//! reflection carries `authorization: Bearer <token>`; the token's SHA-256
//! names a stored principal, or the bootstrap admin from
//! `--admin-token-file`. Tokens are minted here (32 random bytes with a
//! recognisable prefix), returned once, and never stored or logged: only
//! their hash is kept.
//!
//! Every server follows principal changes through the store's log (so
//! replicas agree): a change empties the cache and bumps an epoch, on which
//! open watch streams re-check their token and end with `UNAUTHENTICATED`
//! once it is revoked.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use cairn_core::access::{Caller, Principal, Role};
use cairn_core::error::{Error, Result};
use cairn_store::Store;
use cairn_store::hub::Topic;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

/// Prefix of every token Cairn mints, so that a leaked one is recognisable
/// (secret scanners, logs).
pub const TOKEN_PREFIX: &str = "cairn_";

pub use cairn_core::access::BOOTSTRAP_ADMIN;

/// Most principals remembered by token; beyond it the cache starts over.
const CACHE_LIMIT: usize = 10_000;

/// How callers prove who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthMode {
    /// No authentication: every caller may do everything (loopback only,
    /// unless explicitly accepted).
    #[default]
    Off,
    /// Bearer tokens.
    Token,
}

/// A caller as a request carries it.
#[derive(Debug, Clone)]
pub struct Authenticated {
    /// Who it is.
    pub caller: Caller,
    /// The hash of the token it presented, to notice its revocation.
    pub token_sha256: Option<String>,
}

/// Authentication of one server.
#[derive(Debug)]
pub struct Auth {
    mode: AuthMode,
    /// SHA-256 of the bootstrap admin's token.
    admin: Option<[u8; 32]>,
    store: Store,
    cache: Mutex<HashMap<String, Principal>>,
    /// Bumped on every principal change.
    epoch: watch::Sender<u64>,
}

/// A new token: the prefix and 32 random bytes from the operating system.
pub fn mint_token() -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::Internal(format!("no system randomness for a token: {e}")))?;
    Ok(format!("{TOKEN_PREFIX}{}", hex(&bytes)))
}

/// The hex SHA-256 of a token: all that is ever stored of it.
pub fn token_sha256(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Compares in time independent of where the inputs differ.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Auth {
    /// Authentication for `store`; with an admin token, its holder is the
    /// bootstrap admin. Follows principal changes until the store closes.
    pub fn new(mode: AuthMode, admin_token: Option<&str>, store: Store) -> Arc<Self> {
        let auth = Arc::new(Auth {
            mode,
            admin: admin_token.map(|t| Sha256::digest(t.as_bytes()).into()),
            store,
            cache: Mutex::new(HashMap::new()),
            epoch: watch::Sender::new(0),
        });
        if mode == AuthMode::Token {
            let follower = Arc::clone(&auth);
            tokio::spawn(async move { follower.follow().await });
        }
        auth
    }

    /// Whether authentication is on.
    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    /// Forgets cached tokens on every principal change, and tells open
    /// streams to check theirs.
    async fn follow(self: Arc<Self>) {
        let (mut sub, _) = self.store.hub().subscribe(&Topic::Principals);
        while sub.next().await.is_some() {
            // A full buffer only means "several changes": the same reaction.
            let _ = sub.resync();
            self.cache
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
            self.epoch.send_modify(|e| *e += 1);
        }
    }

    /// Finds who sends `req` from its `authorization` header and puts the
    /// identity on the request, for every layer after it. The one way the
    /// front layers (Connect, before it reads a body; the gRPC edge) do it.
    pub async fn identify<B>(&self, req: &mut http::Request<B>) -> Result<()> {
        let header = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let who = self.authenticate(header).await?;
        req.extensions_mut().insert(who);
        Ok(())
    }

    /// Who presents `authorization` (the header's value, if any).
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Authenticated> {
        if self.mode == AuthMode::Off {
            return Ok(Authenticated {
                caller: Caller::Open,
                token_sha256: None,
            });
        }
        let token = authorization
            .and_then(|h| {
                h.strip_prefix("Bearer ")
                    .or_else(|| h.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                Error::Unauthenticated(
                    "authentication is required: send `authorization: Bearer <token>`".into(),
                )
            })?;
        let principal = self.principal_of(token).await?;
        Ok(Authenticated {
            caller: Caller::Principal(principal),
            token_sha256: Some(token_sha256(token)),
        })
    }

    async fn principal_of(&self, token: &str) -> Result<Principal> {
        self.principal_by_hash(&token_sha256(token)).await
    }

    /// The principal whose token has this hex SHA-256, now.
    pub async fn principal_by_hash(&self, hash: &str) -> Result<Principal> {
        if self
            .admin
            .is_some_and(|a| same_bytes(hex(&a).as_bytes(), hash.as_bytes()))
        {
            return Ok(Principal {
                principal_id: BOOTSTRAP_ADMIN.into(),
                roles: [Role::Admin].into_iter().collect(),
                ..Principal::default()
            });
        }
        let hash = hash.to_owned();
        if let Some(p) = self
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&hash)
        {
            return Ok(p.clone());
        }
        let key = hash.clone();
        let found = self
            .store
            .read(move |v| v.principal_by_token(&key))
            .await?
            .ok_or_else(|| Error::Unauthenticated("unknown or revoked token".into()))?;
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(hash, found.principal.clone());
        Ok(found.principal)
    }

    /// Completes once the token with this hash no longer names a principal
    /// (deleted, or its token rotated). Never, for the open door and the
    /// bootstrap admin.
    pub async fn revoked(&self, token_sha256: Option<&str>) {
        let Some(hash) = token_sha256.map(str::to_owned) else {
            return std::future::pending().await;
        };
        if self
            .admin
            .is_some_and(|a| same_bytes(hex(&a).as_bytes(), hash.as_bytes()))
        {
            return std::future::pending().await;
        }
        let mut epoch = self.epoch.subscribe();
        loop {
            if epoch.changed().await.is_err() {
                return std::future::pending().await;
            }
            let key = hash.clone();
            // A store that cannot answer does not revoke anyone.
            if let Ok(None) = self.store.read(move |v| v.principal_by_token(&key)).await {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_prefixed_random_and_hashed() {
        let a = mint_token().unwrap();
        let b = mint_token().unwrap();
        assert!(a.starts_with(TOKEN_PREFIX));
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 64);
        assert_ne!(a, b);
        assert_eq!(token_sha256(&a).len(), 64);
        assert_ne!(token_sha256(&a), token_sha256(&b));
        assert!(!token_sha256(&a).contains(&a[TOKEN_PREFIX.len()..]));
    }
}
