//! A2A push notification configs as webhook subscriptions
//! (`docs/a2a.md`): a config is a subscription to one task's state
//! changes, delivered by the webhook outbox (durable, at least once,
//! signed, retried, dead-lettered) in A2A's `StreamResponse` shape, with
//! the receiver's token and credentials sealed at rest like the signing
//! secret. Whoever manages the task's session manages its configs.

use super::{A2aApi, as_task};
use crate::auth::Authenticated;
use crate::webhooks::mint_secret;
use cairn_api::a2a;
use cairn_core::command::WebhookCommand;
use cairn_core::error::{Error, Result};
use cairn_core::webhook::{TaskPush, Webhook, check_url};

/// The config as a caller may read it back: never its token or
/// credentials, which are kept sealed.
fn config_out(w: &Webhook, push: &TaskPush) -> a2a::TaskPushNotificationConfig {
    a2a::TaskPushNotificationConfig {
        tenant: String::new(),
        id: push.config_id.clone(),
        task_id: push.task_id.clone(),
        url: w.url.clone(),
        token: String::new(),
        authentication: (!push.auth_scheme.is_empty()).then(|| a2a::AuthenticationInfo {
            scheme: push.auth_scheme.clone(),
            credentials: String::new(),
        }),
    }
}

/// Eight lowercase letters and digits: the id of a config the caller left
/// unnamed.
fn random_id() -> String {
    (0..8)
        .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
        .collect()
}

impl A2aApi {
    fn push_on(&self) -> Result<()> {
        if self.state.webhooks.enabled() {
            Ok(())
        } else {
            Err(Error::PushNotSupported(
                "webhooks are off (start the server with --webhook-key-file, or a data dir)".into(),
            ))
        }
    }

    /// `CreateTaskPushNotificationConfig`.
    pub(super) async fn create_push(
        &self,
        who: &Authenticated,
        cfg: a2a::TaskPushNotificationConfig,
    ) -> Result<a2a::TaskPushNotificationConfig> {
        self.push_on()?;
        let limits = &self.state.policy.limits;
        limits.check_resource_id("task_id", &cfg.task_id)?;
        let config_id = if cfg.id.is_empty() {
            random_id()
        } else {
            limits.check_resource_id("id", &cfg.id)?;
            cfg.id.clone()
        };
        let hooks = &self.state.webhooks;
        check_url(&cfg.url, hooks.config().allow_http)?;
        limits.check_text(|| "token".into(), &cfg.token)?;
        let (auth_scheme, sealed_credentials) = match &cfg.authentication {
            Some(a) => {
                if a.scheme.is_empty()
                    || !a
                        .scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-')
                {
                    return Err(Error::invalid(
                        "authentication.scheme",
                        "must be an HTTP authentication scheme such as Bearer",
                    ));
                }
                limits.check_text(|| "authentication.credentials".into(), &a.credentials)?;
                if a.credentials.chars().any(char::is_control) {
                    return Err(Error::invalid(
                        "authentication.credentials",
                        "must not contain control characters",
                    ));
                }
                (a.scheme.clone(), hooks.seal(&a.credentials)?)
            }
            None => (String::new(), Vec::new()),
        };
        if cfg.token.chars().any(char::is_control) {
            return Err(Error::invalid(
                "token",
                "must not contain control characters",
            ));
        }
        let push = TaskPush {
            task_id: cfg.task_id.clone(),
            config_id: config_id.clone(),
            sealed_token: if cfg.token.is_empty() {
                Vec::new()
            } else {
                hooks.seal(&cfg.token)?
            },
            auth_scheme,
            sealed_credentials,
            state: None,
        };
        let webhook = Webhook {
            webhook_id: TaskPush::webhook_id(&cfg.task_id, &config_id),
            url: cfg.url.clone(),
            event_types: Vec::new(),
            session_root: String::new(),
            // Deliveries are signed as every webhook's are.
            sealed_secret: hooks.seal(&mint_secret()?)?,
            created_by: String::new(),
            create_time: 0,
            revision: 0,
            task: Some(Box::new(push)),
        };
        self.state
            .store
            .apply(&who.caller, WebhookCommand::Create(webhook).into(), 0)
            .await
            .map_err(as_task(&cfg.task_id))?;
        Ok(a2a::TaskPushNotificationConfig {
            id: config_id,
            ..cfg
        })
    }

    /// A task's configs, read through the access rules.
    async fn pushes(&self, who: &Authenticated, task_id: &str) -> Result<Vec<Webhook>> {
        self.push_on()?;
        self.state
            .policy
            .limits
            .check_resource_id("task_id", task_id)?;
        self.state
            .store
            .task_pushes(&who.caller, task_id)
            .await
            .map_err(as_task(task_id))
    }

    /// `GetTaskPushNotificationConfig`.
    pub(super) async fn get_push(
        &self,
        who: &Authenticated,
        req: a2a::GetTaskPushNotificationConfigRequest,
    ) -> Result<a2a::TaskPushNotificationConfig> {
        self.pushes(who, &req.task_id)
            .await?
            .iter()
            .find_map(|w| {
                w.task
                    .as_ref()
                    .filter(|p| p.config_id == req.id)
                    .map(|p| config_out(w, p))
            })
            .ok_or_else(|| Error::WebhookNotFound(TaskPush::webhook_id(&req.task_id, &req.id)))
    }

    /// `ListTaskPushNotificationConfigs`: every config of the task (a task
    /// has at most a handful), in id order.
    pub(super) async fn list_push(
        &self,
        who: &Authenticated,
        req: a2a::ListTaskPushNotificationConfigsRequest,
    ) -> Result<a2a::ListTaskPushNotificationConfigsResponse> {
        if req.page_size < 0 {
            return Err(Error::invalid("page_size", "must not be negative"));
        }
        let configs = self
            .pushes(who, &req.task_id)
            .await?
            .iter()
            .filter_map(|w| w.task.as_ref().map(|p| config_out(w, p)))
            .filter(|c| req.page_token.is_empty() || c.id > req.page_token)
            .collect();
        Ok(a2a::ListTaskPushNotificationConfigsResponse {
            configs,
            next_page_token: String::new(),
        })
    }

    /// `DeleteTaskPushNotificationConfig`: the config, with what it has not
    /// delivered and its dead letters.
    pub(super) async fn delete_push(
        &self,
        who: &Authenticated,
        req: a2a::DeleteTaskPushNotificationConfigRequest,
    ) -> Result<()> {
        self.push_on()?;
        let limits = &self.state.policy.limits;
        limits.check_resource_id("task_id", &req.task_id)?;
        limits.check_resource_id("id", &req.id)?;
        let webhook_id = TaskPush::webhook_id(&req.task_id, &req.id);
        self.state
            .store
            .apply(&who.caller, WebhookCommand::Delete { webhook_id }.into(), 0)
            .await
            .map_err(as_task(&req.task_id))?;
        Ok(())
    }
}
