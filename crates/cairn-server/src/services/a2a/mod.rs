//! `lf.a2a.v1.A2AService`: Cairn's sessions as A2A tasks, for clients
//! written against the Agent2Agent protocol (`docs/a2a.md`).
//!
//! A session is a task and its tree is the task's context; the task's state
//! is the pure rule [`cairn_core::task::task_state`]; the plan is the task's
//! one artifact. Reads go through the store's access rules like every other
//! read, and what a caller may not see is a task that is not found, as A2A
//! asks. `SubscribeToTask` follows the session's watch ([`follow`]);
//! `SendMessage` answers what the task awaits ([`answer`]), applied as the
//! plan command it is; a push notification config is a webhook
//! subscription to the task ([`push`]). What this server does not offer
//! answers A2A's `UNSUPPORTED_OPERATION`.

mod answer;
mod follow;
mod push;
mod shape;

use std::pin::Pin;

use prost::Message as _;
use tokio_stream::StreamExt as _;
use tonic::metadata::MetadataMap;
use tracing::instrument;

use super::{State, rpcs};
use crate::auth::Authenticated;
use crate::status::status;
use crate::watch::Start;
use cairn_api::a2a;
use cairn_api::a2a::a2a_service_server::A2aService;
use cairn_core::command::{Command, PlanWrite};
use cairn_core::error::{Denial, Error, Excerpt, Result};
use cairn_core::task::Resume;
use cairn_store::hub::Topic;
use cairn_store::reads::SessionQuery;

pub use follow::{RESUME_EXTENSION, RESUME_HEADER, RESUME_KEY};
pub use shape::agent_card_json;
use shape::task_of;

/// Default and maximum `page_size` of `ListTasks` (A2A's own bounds).
const DEFAULT_PAGE: i32 = 50;
const MAX_PAGE: i32 = 100;

/// The A2A protocol version served (`a2a-sdk` 1.3.0 and `@a2a-js/sdk`
/// 1.3.0 speak it).
pub const A2A_VERSION: &str = "1.0";

/// The id of the one artifact of every task: its plan.
pub const PLAN_ARTIFACT: &str = "plan";

type Stream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<a2a::StreamResponse, tonic::Status>> + Send>>;

/// The A2A service.
#[derive(Clone, Debug)]
pub struct A2aApi {
    state: State,
}

/// A session the caller may not read is, to A2A, a task that is not found.
fn as_task(id: &str) -> impl Fn(Error) -> Error + '_ {
    move |e| match e {
        Error::SessionNotFound(_)
        | Error::PermissionDenied {
            reason: Denial::NotInScope,
            ..
        } => Error::TaskNotFound(id.to_owned()),
        e => e,
    }
}

impl A2aApi {
    /// A service over shared state.
    pub fn new(state: State) -> Self {
        A2aApi { state }
    }

    /// One session as a task, read through the access rules.
    async fn task(&self, who: &Authenticated, id: &str, artifacts: bool) -> Result<a2a::Task> {
        // Checked here, so a bad id is named by the field the caller sent.
        self.state.policy.limits.check_resource_id("id", id)?;
        let store = &self.state.store;
        let (session, _) = store
            .read_session(&who.caller, id.to_owned())
            .await
            .map_err(as_task(id))?;
        let (hot, _) = store
            .read_plan(&who.caller, id.to_owned())
            .await
            .map_err(as_task(id))?;
        Ok(task_of(
            &session,
            hot.ancestors.first(),
            &hot.record,
            artifacts,
        ))
    }

    async fn get_task(&self, who: &Authenticated, req: a2a::GetTaskRequest) -> Result<a2a::Task> {
        self.task(who, &req.id, true).await
    }

    async fn list_tasks(
        &self,
        who: &Authenticated,
        req: a2a::ListTasksRequest,
    ) -> Result<a2a::ListTasksResponse> {
        let page_size = req.page_size.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&page_size) {
            return Err(Error::invalid(
                "page_size",
                format!("must be between 1 and {MAX_PAGE}"),
            ));
        }
        if req.status_timestamp_after.is_some() {
            return Err(Error::UnsupportedOperation(
                "ListTasks by status_timestamp_after".into(),
            ));
        }
        let wanted = a2a::TaskState::try_from(req.status)
            .map_err(|_| Error::invalid("status", format!("{} is not a task state", req.status)))?;
        let q = SessionQuery {
            after: (!req.page_token.is_empty()).then_some(req.page_token),
            limit: usize::try_from(page_size).unwrap_or(1),
            parent: None,
            agent: None,
            tree: (!req.context_id.is_empty()).then_some(req.context_id),
        };
        let (page, _) = self.state.store.list_sessions(&who.caller, q).await?;
        let artifacts = req.include_artifacts.unwrap_or(false);
        let mut tasks = Vec::with_capacity(page.sessions.len());
        for s in &page.sessions {
            let hot = match self
                .state
                .store
                .read_plan(&who.caller, s.session_id.clone())
                .await
            {
                Ok((hot, _)) => hot,
                // Deleted since the page was read: no longer a task.
                Err(Error::SessionNotFound(_)) => continue,
                Err(e) => return Err(e),
            };
            let task = task_of(s, hot.ancestors.first(), &hot.record, artifacts);
            let state = task.status.as_ref().map_or(0, |st| st.state);
            if wanted == a2a::TaskState::Unspecified || state == wanted as i32 {
                tasks.push(task);
            }
        }
        Ok(a2a::ListTasksResponse {
            total_size: i32::try_from(tasks.len()).unwrap_or(i32::MAX),
            tasks,
            next_page_token: page.next_after.unwrap_or_default(),
            page_size,
        })
    }

    /// Answers what the task awaits: an approval or a rejection by the
    /// caller's principal, under the rules of `ApprovePlan` and
    /// `RejectPlan`. The task as it then is.
    async fn send_message(
        &self,
        who: &Authenticated,
        req: a2a::SendMessageRequest,
    ) -> Result<a2a::SendMessageResponse> {
        let bytes = req.encoded_len();
        let message = req
            .message
            .ok_or_else(|| Error::invalid("message", "is required"))?;
        if message.task_id.is_empty() {
            return Err(Error::UnsupportedOperation(
                "SendMessage without a task_id: tasks are Cairn sessions, created over cairn.v1"
                    .into(),
            ));
        }
        let id = message.task_id.clone();
        self.state
            .policy
            .limits
            .check_resource_id("message.task_id", &id)?;
        let answer = answer::answer(&message)?;
        let (hot, _) = self
            .state
            .store
            .read_plan(&who.caller, id.clone())
            .await
            .map_err(as_task(&id))?;
        // The answer was chosen for the plan as read: applied to that plan
        // only, so a change in between is ABORTED, not answered blindly.
        let write = PlanWrite {
            session_id: id.clone(),
            expected_revision: (hot.record.revision > 0).then_some(hot.record.revision),
            command: answer::command(answer, &hot.record.plan.mode)?,
        };
        self.state
            .store
            .apply(&who.caller, Command::Plan(write), bytes)
            .await
            .map_err(as_task(&id))?;
        Ok(a2a::SendMessageResponse {
            payload: Some(a2a::send_message_response::Payload::Task(
                self.task(who, &id, true).await?,
            )),
        })
    }

    /// `SendMessage`, then the task's stream from that answer on: the task,
    /// then its changes, until it ends or awaits the next answer.
    async fn send_streaming_message(
        &self,
        who: &Authenticated,
        req: a2a::SendMessageRequest,
    ) -> Result<Stream> {
        let answered = self.send_message(who, req).await?;
        let Some(a2a::send_message_response::Payload::Task(task)) = answered.payload else {
            return Err(Error::Internal(
                "SendMessage answered without its task".into(),
            ));
        };
        self.stream(
            who,
            task.id,
            task.context_id,
            None,
            follow::Until::Interrupted,
        )
        .await
    }

    /// The task's stream: the task, then its changes, until it ends. With
    /// the resumption extension's header, everything after that point
    /// instead, from the log.
    async fn subscribe_to_task(
        &self,
        who: &Authenticated,
        metadata: MetadataMap,
        req: a2a::SubscribeToTaskRequest,
    ) -> Result<Stream> {
        let resume = match metadata.get(RESUME_HEADER) {
            Some(v) => Some(Resume::parse(
                RESUME_HEADER,
                v.to_str().unwrap_or_default(),
            )?),
            None => None,
        };
        let task = self.task(who, &req.id, false).await?;
        let state = task.status.as_ref().map_or(0, |s| s.state);
        let terminal = [a2a::TaskState::Completed, a2a::TaskState::Failed]
            .iter()
            .any(|t| *t as i32 == state);
        if terminal && resume.is_none() {
            return Err(Error::UnsupportedOperation(format!(
                "SubscribeToTask on task {} in a terminal state: it will not change",
                req.id
            )));
        }
        self.stream(
            who,
            req.id,
            task.context_id,
            resume,
            follow::Until::Terminal,
        )
        .await
    }

    /// The stream of task `id` (in `context`) from its session's watch:
    /// from a snapshot, or after `resume`, `until` the state that ends it.
    async fn stream(
        &self,
        who: &Authenticated,
        id: String,
        context: String,
        resume: Option<Resume>,
        until: follow::Until,
    ) -> Result<Stream> {
        let start = resume.map_or(Start::Snapshot, |r| {
            Start::From(r.revision.saturating_add(1))
        });
        let events = super::watch::open(
            &self.state,
            who,
            Topic::Session(id.clone()),
            start,
            self.state.progress_interval,
        )
        .await
        .map_err(as_task(&id))?;
        let stream = follow::follow(events, id, context, resume, until);
        Ok(Box::pin(stream.map(|r| r.map_err(status))))
    }
}

/// The task a message is sent to, for the span.
fn message_task(r: &a2a::SendMessageRequest) -> &str {
    r.message.as_ref().map_or("", |m| m.task_id.as_str())
}

/// The A2A operations not offered.
macro_rules! unsupported {
    ($($name:ident($req:ty) -> $resp:ty = $what:literal;)*) => {
        impl A2aApi {
            $(
                async fn $name(&self, _: &Authenticated, _: $req) -> Result<$resp> {
                    Err(Error::UnsupportedOperation($what.into()))
                }
            )*
        }
    };
}

unsupported! {
    cancel_task(a2a::CancelTaskRequest) -> a2a::Task = "CancelTask";
    extended_card(a2a::GetExtendedAgentCardRequest) -> a2a::AgentCard = "GetExtendedAgentCard";
}

rpcs! {
    impl A2aService for A2aApi {
        type SendStreamingMessageStream = Stream;
        type SubscribeToTaskStream = Stream;
        #[instrument(skip_all, fields(task_id = %Excerpt(message_task(r.get_ref()))))]
        fn send_message(r: a2a::SendMessageRequest) -> a2a::SendMessageResponse => send_message;
        #[instrument(skip_all, fields(task_id = %Excerpt(message_task(r.get_ref()))))]
        fn send_streaming_message(r: a2a::SendMessageRequest) -> Stream => send_streaming_message;
        #[instrument(skip_all, fields(task_id = %Excerpt(&r.get_ref().id)))]
        fn get_task(r: a2a::GetTaskRequest) -> a2a::Task => get_task;
        #[instrument(skip_all)]
        fn list_tasks(r: a2a::ListTasksRequest) -> a2a::ListTasksResponse => list_tasks;
        #[instrument(skip_all, fields(task_id = %Excerpt(&r.get_ref().id)))]
        fn cancel_task(r: a2a::CancelTaskRequest) -> a2a::Task => cancel_task;
        #[instrument(skip_all, fields(task_id = %Excerpt(&r.get_ref().id)))]
        fn subscribe_to_task(r: a2a::SubscribeToTaskRequest) -> Stream => subscribe_to_task with metadata;
        #[instrument(skip_all, fields(task_id = %Excerpt(&r.get_ref().task_id)))]
        fn create_task_push_notification_config(r: a2a::TaskPushNotificationConfig) -> a2a::TaskPushNotificationConfig => create_push;
        #[instrument(skip_all, fields(task_id = %Excerpt(&r.get_ref().task_id)))]
        fn get_task_push_notification_config(r: a2a::GetTaskPushNotificationConfigRequest) -> a2a::TaskPushNotificationConfig => get_push;
        #[instrument(skip_all, fields(task_id = %Excerpt(&r.get_ref().task_id)))]
        fn list_task_push_notification_configs(r: a2a::ListTaskPushNotificationConfigsRequest) -> a2a::ListTaskPushNotificationConfigsResponse => list_push;
        #[instrument(skip_all)]
        fn get_extended_agent_card(r: a2a::GetExtendedAgentCardRequest) -> a2a::AgentCard => extended_card;
        #[instrument(skip_all, fields(task_id = %Excerpt(&r.get_ref().task_id)))]
        fn delete_task_push_notification_config(r: a2a::DeleteTaskPushNotificationConfigRequest) -> () => delete_push;
    }
}
