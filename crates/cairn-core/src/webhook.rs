//! Webhook subscriptions (docs/webhooks.md): what an admin asks to be told,
//! and where.
//!
//! A subscription names an HTTPS URL, the event types it wants, and
//! optionally one session tree. Its signing secret is chosen by the server
//! and stored sealed; the rules here never see it in the clear.

use serde::{Deserialize, Serialize};

use crate::Micros;
use crate::error::{Error, Result};
use crate::limits::Limits;

/// What a webhook can be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EventType {
    /// A plan or modification started waiting for approval.
    #[serde(rename = "approval.requested")]
    ApprovalRequested,
    /// It was approved or rejected (by a person or a deadline).
    #[serde(rename = "approval.decided")]
    ApprovalDecided,
    /// Its deadline passed and it was escalated.
    #[serde(rename = "approval.escalated")]
    ApprovalEscalated,
    /// An approved plan was completed.
    #[serde(rename = "plan.completed")]
    PlanCompleted,
    /// A session's agent was declared lost.
    #[serde(rename = "session.lost")]
    SessionLost,
    /// An A2A task changed state: what a task's push notification config
    /// is told (never subscribed to by name, so not in [`EventType::ALL`]).
    #[serde(rename = "task.status")]
    TaskStatus,
}

impl EventType {
    /// Every type, in the order the API lists them.
    pub const ALL: [EventType; 5] = [
        EventType::ApprovalRequested,
        EventType::ApprovalDecided,
        EventType::ApprovalEscalated,
        EventType::PlanCompleted,
        EventType::SessionLost,
    ];

    /// The type's name on the wire (`type` of a delivery).
    pub fn name(self) -> &'static str {
        match self {
            EventType::ApprovalRequested => "approval.requested",
            EventType::ApprovalDecided => "approval.decided",
            EventType::ApprovalEscalated => "approval.escalated",
            EventType::PlanCompleted => "plan.completed",
            EventType::SessionLost => "session.lost",
            EventType::TaskStatus => "task.status",
        }
    }

    /// The type a name names.
    pub fn parse(name: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// A subscription as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Webhook {
    pub webhook_id: String,
    pub url: String,
    /// Sorted, without duplicates; never empty.
    pub event_types: Vec<EventType>,
    /// Only events of this session's tree; empty for every tree.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub session_root: String,
    /// The signing secret, sealed with the server's webhook key.
    pub sealed_secret: Vec<u8>,
    pub created_by: String,
    pub create_time: Micros,
    /// The revision that created it: deliveries start after it.
    pub revision: u64,
    /// Set for an A2A task's push notification config (`docs/a2a.md`):
    /// told that task's state changes, in A2A's shape, instead of events
    /// by type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<Box<TaskPush>>,
}

/// An A2A push notification config: which task, and what the receiver
/// asked to be sent with each notification. Its token and credentials are
/// sealed like the signing secret.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskPush {
    pub task_id: String,
    /// The config's id within the task.
    pub config_id: String,
    /// Sent as `X-A2A-Notification-Token`, sealed; empty for none.
    pub sealed_token: Vec<u8>,
    /// Sent as `Authorization: SCHEME CREDENTIALS`; empty for none.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub auth_scheme: String,
    pub sealed_credentials: Vec<u8>,
    /// The task's state when the config was made: the first one it is
    /// told is the next that differs (filled in by the write).
    pub state: Option<crate::task::TaskState>,
}

impl TaskPush {
    /// The subscription id of a task's config: its task's group and its
    /// id, which cannot hold `/`, so no two configs share one.
    pub fn webhook_id(task_id: &str, config_id: &str) -> String {
        format!("{}/{config_id}", Self::group(task_id))
    }

    /// What the ids of a task's configs start with (before a `/`).
    pub fn group(task_id: &str) -> String {
        format!("{}{task_id}", Self::PREFIX)
    }

    /// Every config's id starts with this; no other subscription's can,
    /// since ids hold no `/`.
    pub const PREFIX: &'static str = "a2a/";

    /// The task of a config's subscription id, if it is one.
    pub fn task_of(webhook_id: &str) -> Option<&str> {
        let rest = webhook_id.strip_prefix(Self::PREFIX)?;
        rest.split_once('/').map(|(task, _)| task)
    }
}

/// Longest URL a subscription takes.
pub const MAX_URL_BYTES: usize = 2_048;

/// What a caller asks for when it creates a subscription (the secret is
/// the server's to choose).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookRequest {
    pub webhook_id: String,
    pub url: String,
    pub event_types: Vec<String>,
    pub session_root: String,
}

impl WebhookRequest {
    /// Checks the request: an id, an `https://` URL with a host (or
    /// `http://` where the server allows it), known event types, a valid
    /// root. Returns the event types, sorted.
    pub fn validate(&self, allow_http: bool, limits: &Limits) -> Result<Vec<EventType>> {
        limits.check_resource_id("webhook_id", &self.webhook_id)?;
        check_url(&self.url, allow_http)?;
        if !self.session_root.is_empty() {
            limits.check_resource_id("session_root", &self.session_root)?;
        }
        if self.event_types.is_empty() {
            return Err(Error::invalid(
                "event_types",
                "name at least one of approval.requested, approval.decided, approval.escalated, plan.completed, session.lost",
            ));
        }
        let mut types = Vec::with_capacity(self.event_types.len());
        for (i, name) in self.event_types.iter().enumerate() {
            let t = EventType::parse(name).ok_or_else(|| {
                Error::invalid(
                    format!("event_types[{i}]"),
                    format!(
                        "{:?} is not one of approval.requested, approval.decided, approval.escalated, plan.completed, session.lost",
                        crate::error::excerpt(name)
                    ),
                )
            })?;
            types.push(t);
        }
        types.sort_unstable();
        types.dedup();
        Ok(types)
    }
}

/// Checks a receiver's URL: `https://` with a host (or `http://` where the
/// server allows it), no user info, no spaces.
pub fn check_url(url: &str, allow_http: bool) -> Result<()> {
    const FIELD: &str = "url";
    if url.len() > MAX_URL_BYTES {
        return Err(Error::invalid(FIELD, "is longer than 2048 bytes"));
    }
    let rest = if let Some(rest) = url.strip_prefix("https://") {
        rest
    } else if let Some(rest) = url.strip_prefix("http://") {
        if !allow_http {
            return Err(Error::invalid(
                FIELD,
                "must be https:// (the server refuses plain http unless started with --webhook-allow-http)",
            ));
        }
        rest
    } else {
        return Err(Error::invalid(FIELD, "must be an https:// URL"));
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || host.contains('@') {
        return Err(Error::invalid(FIELD, "must name a host (and no user info)"));
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(Error::invalid(
            FIELD,
            "must not contain spaces or control characters",
        ));
    }
    Ok(())
}

impl Webhook {
    /// Whether a notification of `kind` about a session with `ancestors`
    /// (root first) is for this subscription.
    pub fn wants(&self, kind: EventType, session_id: &str, ancestors: &[String]) -> bool {
        self.event_types.contains(&kind)
            && (self.session_root.is_empty()
                || self.session_root == session_id
                || ancestors.contains(&self.session_root))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(url: &str, types: &[&str]) -> WebhookRequest {
        WebhookRequest {
            webhook_id: "ops".into(),
            url: url.into(),
            event_types: types.iter().map(|t| (*t).to_owned()).collect(),
            session_root: String::new(),
        }
    }

    #[test]
    fn urls_are_https_unless_allowed_and_types_are_known() {
        let l = Limits::default();
        let ok = req(
            "https://hooks.example/cairn",
            &["session.lost", "approval.requested", "session.lost"],
        );
        assert_eq!(
            ok.validate(false, &l).unwrap(),
            vec![EventType::ApprovalRequested, EventType::SessionLost]
        );
        let plain = req("http://127.0.0.1:9/x", &["plan.completed"]);
        assert!(
            plain
                .validate(false, &l)
                .unwrap_err()
                .to_string()
                .contains("--webhook-allow-http")
        );
        assert!(plain.validate(true, &l).is_ok());
        for bad in [
            "ftp://x",
            "https://",
            "https://user@host/",
            "https://a b",
            "javascript:alert(1)",
        ] {
            assert!(
                req(bad, &["plan.completed"]).validate(true, &l).is_err(),
                "{bad}"
            );
        }
        let unknown = req("https://h/", &["plan.done"])
            .validate(false, &l)
            .unwrap_err();
        assert!(unknown.to_string().contains("event_types[0]"), "{unknown}");
        assert!(req("https://h/", &[]).validate(false, &l).is_err());
    }

    #[test]
    fn a_tree_filter_takes_the_root_and_everything_below() {
        let w = Webhook {
            event_types: vec![EventType::SessionLost],
            session_root: "orch".into(),
            ..Webhook::default()
        };
        assert!(w.wants(EventType::SessionLost, "orch", &[]));
        assert!(w.wants(EventType::SessionLost, "coder", &["orch".into()]));
        assert!(!w.wants(EventType::SessionLost, "other", &[]));
        assert!(!w.wants(EventType::PlanCompleted, "orch", &[]));
        for t in EventType::ALL {
            assert_eq!(EventType::parse(t.name()), Some(t));
        }
    }
}
