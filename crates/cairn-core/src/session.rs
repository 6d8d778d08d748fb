//! Sessions and their tree.
//!
//! The tree itself lives in the store (a parent -> children index); the rules
//! here are what a valid session looks like and how an id is generated.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, excerpt};
use crate::limits::Limits;
use crate::liveness::Lease;
use crate::time::Micros;

/// A stored session. Empty fields are left out of its encoding (they read
/// back as their defaults), which keeps a million of them small.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Session {
    pub session_id: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub agent_id: String,
    /// `None` for a root session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub title: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    pub create_time: Micros,
    pub update_time: Micros,
    /// Store revision of the last change to this record.
    pub revision: u64,
    /// The agent's lease and liveness, once it has taken one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
}

/// Checks the client-settable fields of a session.
pub fn validate(session: &Session, limits: &Limits) -> Result<()> {
    limits.check_resource_id("session.session_id", &session.session_id)?;
    if !session.agent_id.is_empty() {
        limits.check_resource_id("session.agent_id", &session.agent_id)?;
    }
    if let Some(parent) = &session.parent_session_id {
        limits.check_resource_id("session.parent_session_id", parent)?;
        if *parent == session.session_id {
            return Err(Error::invalid(
                "session.parent_session_id",
                "a session cannot be its own parent",
            ));
        }
    }
    limits.check_text(|| "session.title".into(), &session.title)?;
    validate_labels(&session.labels, limits)
}

/// Checks label count and sizes.
pub fn validate_labels(labels: &BTreeMap<String, String>, limits: &Limits) -> Result<()> {
    Limits::check_count(
        "session.labels",
        "number of labels",
        limits.max_labels,
        labels.len(),
    )?;
    for (k, v) in labels {
        if k.is_empty() {
            return Err(Error::invalid(
                "session.labels",
                "label keys must not be empty",
            ));
        }
        if k.len() > limits.max_id_len {
            return Err(Error::LimitExceeded {
                field: format!("session.labels[{:?}]", excerpt(k)),
                what: "label key length",
                limit: limits.max_id_len,
                actual: k.len(),
            });
        }
        limits.check_text(|| format!("session.labels[{:?}]", excerpt(k)), v)?;
    }
    Ok(())
}

/// A fresh session id, `ses_` and 16 random lowercase alphanumerics; the
/// caller supplies the randomness so this stays a pure function.
pub fn generate_id(mut random: impl FnMut() -> u64) -> String {
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut id = String::from("ses_");
    for _ in 0..16 {
        let i = usize::try_from(random() % ALPHABET.len() as u64).unwrap_or(0);
        id.push(char::from(ALPHABET[i]));
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str) -> Session {
        Session {
            session_id: id.into(),
            ..Session::default()
        }
    }

    #[test]
    fn validation() {
        let l = Limits::default();
        assert!(validate(&session("orch"), &l).is_ok());
        let mut own_parent = session("a");
        own_parent.parent_session_id = Some("a".into());
        assert!(validate(&own_parent, &l).is_err());
        let mut bad_agent = session("a");
        bad_agent.agent_id = "has space".into();
        assert!(validate(&bad_agent, &l).is_err());
        let mut labels = session("a");
        labels.labels.insert(String::new(), "v".into());
        assert!(validate(&labels, &l).is_err());
    }

    #[test]
    fn generated_ids_are_valid() {
        let mut n = 7u64;
        let id = generate_id(|| {
            n = n.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            n >> 33
        });
        assert_eq!(id.len(), 20);
        assert!(Limits::default().check_resource_id("id", &id).is_ok());
    }
}
