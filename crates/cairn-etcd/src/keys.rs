//! Where each record lives in etcd, under the deployment's prefix.
//!
//! ```text
//!  {prefix}s/{session}             session record
//!  {prefix}c/{parent}/{child}      child index (empty value)
//!  {prefix}p/{session}             plan record
//!  {prefix}h/{session}/{seq:020}   plan-mode history entry
//!  {prefix}t/{agent}               todo list
//!  {prefix}a/{agent}/{session}     agent's sessions (empty value)
//!  {prefix}u/{principal}           principal record
//!  {prefix}k/{token sha256}        token hash → principal id
//!  {prefix}log                     the revision log: ONE key, rewritten by
//!                                  every mutation; etcd's history of it is
//!                                  the log, each version at its revision
//!  {prefix}compact                 the last revision compacted away
//!  {prefix}l/{session}             leased session (empty value)
//!  {prefix}w/{since:020}/{session}/{item}
//!                                  an item awaiting approval (the inbox,
//!                                  oldest first; empty value)
//!  {prefix}awaiting_indexed        set once older waiting plans are indexed
//!  {prefix}x/{space}/{key}        an auxiliary record (webhook
//!                                  subscriptions, cursors, dead letters)
//!  {prefix}r/{replica}             a live replica (on an etcd lease: gone
//!                                  when the replica stops renewing it)
//! ```
//!
//! Ids are limited to `[A-Za-z0-9._:-]` by the core's limits, so `/` never
//! appears inside one and a prefix range never catches a longer id.

use cairn_core::inbox::{Awaited, Awaiting};

/// The key builder for one deployment's prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: Vec<u8>,
}

impl Keys {
    pub fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.as_bytes().to_vec(),
        }
    }

    /// The deployment's prefix: every key of it starts with this.
    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    fn key(&self, parts: &[&[u8]]) -> Vec<u8> {
        let mut k = self.prefix.clone();
        for p in parts {
            k.extend_from_slice(p);
        }
        k
    }

    pub fn session(&self, id: &str) -> Vec<u8> {
        self.key(&[b"s/", id.as_bytes()])
    }
    pub fn sessions(&self) -> Vec<u8> {
        self.key(&[b"s/"])
    }
    pub fn child(&self, parent: &str, child: &str) -> Vec<u8> {
        self.key(&[b"c/", parent.as_bytes(), b"/", child.as_bytes()])
    }
    pub fn children(&self, parent: &str) -> Vec<u8> {
        self.key(&[b"c/", parent.as_bytes(), b"/"])
    }
    pub fn plan(&self, id: &str) -> Vec<u8> {
        self.key(&[b"p/", id.as_bytes()])
    }
    pub fn history_entry(&self, id: &str, seq: u64) -> Vec<u8> {
        self.key(&[b"h/", id.as_bytes(), b"/", format!("{seq:020}").as_bytes()])
    }
    pub fn history(&self, id: &str) -> Vec<u8> {
        self.key(&[b"h/", id.as_bytes(), b"/"])
    }
    pub fn todos(&self, agent: &str) -> Vec<u8> {
        self.key(&[b"t/", agent.as_bytes()])
    }
    pub fn all_todos(&self) -> Vec<u8> {
        self.key(&[b"t/"])
    }
    pub fn agent_session(&self, agent: &str, session: &str) -> Vec<u8> {
        self.key(&[b"a/", agent.as_bytes(), b"/", session.as_bytes()])
    }
    pub fn agent_sessions(&self, agent: &str) -> Vec<u8> {
        self.key(&[b"a/", agent.as_bytes(), b"/"])
    }
    pub fn principal(&self, id: &str) -> Vec<u8> {
        self.key(&[b"u/", id.as_bytes()])
    }
    pub fn principals(&self) -> Vec<u8> {
        self.key(&[b"u/"])
    }
    pub fn token(&self, sha256: &str) -> Vec<u8> {
        self.key(&[b"k/", sha256.as_bytes()])
    }
    pub fn log(&self) -> Vec<u8> {
        self.key(&[b"log"])
    }
    pub fn compact(&self) -> Vec<u8> {
        self.key(&[b"compact"])
    }
    pub fn leased(&self, session: &str) -> Vec<u8> {
        self.key(&[b"l/", session.as_bytes()])
    }
    pub fn all_leased(&self) -> Vec<u8> {
        self.key(&[b"l/"])
    }
    pub fn awaiting(&self, k: &Awaiting) -> Vec<u8> {
        let since = format!("{:020}", k.since.max(0));
        let item = k.item.key();
        self.key(&[
            b"w/",
            since.as_bytes(),
            b"/",
            k.session_id.as_bytes(),
            b"/",
            item.as_bytes(),
        ])
    }
    pub fn plans(&self) -> Vec<u8> {
        self.key(&[b"p/"])
    }
    pub fn awaiting_indexed(&self) -> Vec<u8> {
        self.key(&[b"awaiting_indexed"])
    }
    pub fn all_awaiting(&self) -> Vec<u8> {
        self.key(&[b"w/"])
    }
    pub fn aux(&self, space: &str, key: &str) -> Vec<u8> {
        self.key(&[b"x/", space.as_bytes(), b"/", key.as_bytes()])
    }
    pub fn aux_space(&self, space: &str) -> Vec<u8> {
        self.key(&[b"x/", space.as_bytes(), b"/"])
    }
    pub fn replica(&self, name: &str) -> Vec<u8> {
        self.key(&[b"r/", name.as_bytes()])
    }
    pub fn replicas(&self) -> Vec<u8> {
        self.key(&[b"r/"])
    }
}

/// The end of the range of every key starting with `prefix` (etcd's
/// `range_end` convention: the prefix with its last byte incremented).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff (or empty): to the end of the keyspace.
    vec![0]
}

/// The inbox key an `awaiting` key under `prefix` names.
pub fn parse_awaiting(key: &[u8], prefix: &[u8]) -> Option<Awaiting> {
    let mut parts = suffix(key, prefix)?.splitn(3, '/');
    Some(Awaiting {
        since: parts.next()?.parse().ok()?,
        session_id: parts.next()?.to_owned(),
        item: Awaited::parse(parts.next()?)?,
    })
}

/// The text after `prefix` in `key` (an id), if `key` starts with it.
pub fn suffix<'k>(key: &'k [u8], prefix: &[u8]) -> Option<&'k str> {
    key.strip_prefix(prefix)
        .and_then(|rest| std::str::from_utf8(rest).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_hold_exactly_their_prefix() {
        let k = Keys::new("/cairn/");
        assert_eq!(k.children("a"), b"/cairn/c/a/");
        assert_eq!(prefix_end(&k.children("a")), b"/cairn/c/a0");
        // "ab" is not a child range of "a": ids never contain '/'.
        assert!(k.child("ab", "x") >= prefix_end(&k.children("a")));
        assert_eq!(suffix(&k.child("a", "b:c"), &k.children("a")), Some("b:c"));
        assert_eq!(prefix_end(&[0xff, 0xff]), vec![0]);
        assert!(k.history_entry("s", 2) < k.history_entry("s", 10));
    }
}
