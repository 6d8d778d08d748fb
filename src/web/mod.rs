//! The web dashboard: one page that shows the session tree with each plan
//! and every agent's todo list, updated live from the watch stream over
//! server-sent events, with Approve / Reject for plans awaiting approval.
//!
//! Served by `cairn serve --web-listen ADDR` beside the gRPC port (which
//! also speaks gRPC-Web). No front-end build: the page is one HTML file with
//! plain JavaScript, compiled into the binary.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::extract::{Path, State as AxumState};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio_stream::{Stream, StreamExt};

use crate::api::State;
use crate::api::plan::PlanApi;
use crate::pb;
use crate::watch::{self, Item, Start, Target};

const PAGE: &str = include_str!("index.html");

/// Serves the dashboard until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    state: State,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/", get(page))
        .route("/events", get(events))
        .route("/api/sessions/{id}/approve", post(approve))
        .route("/api/sessions/{id}/reject", post(reject))
        .with_state(state);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn page() -> Html<&'static str> {
    Html(PAGE)
}

/// Everything, as it is now and as it changes: each message is one event
/// of the watch stream as JSON (`change`), then `synced`, then changes.
async fn events(
    AxumState(state): AxumState<State>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let stream = watch::watch(
        state.store.clone(),
        Target::All,
        Start::Snapshot,
        Duration::from_secs(15),
    )
    .map_while(|item| match item {
        Ok(Item::Event(d)) => Some(
            SseEvent::default()
                .event("change")
                .json_data(serde_json::json!({ "revision": d.revision, "event": d.event }))
                .ok(),
        ),
        Ok(Item::Synced(r)) => Some(Some(
            SseEvent::default().event("synced").data(r.to_string()),
        )),
        Ok(Item::Progress(r)) => Some(Some(
            SseEvent::default().event("progress").data(r.to_string()),
        )),
        // The browser's EventSource reconnects and starts over.
        Err(_) => None,
    })
    .filter_map(|e| e.map(Ok));
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// Body of approve / reject.
#[derive(Debug, Default, Deserialize)]
struct Decision {
    #[serde(default)]
    approver: String,
    #[serde(default)]
    reason: String,
}

fn failed(status: &tonic::Status) -> Response {
    let code = match status.code() {
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::FailedPrecondition | tonic::Code::Aborted => StatusCode::CONFLICT,
        tonic::Code::InvalidArgument | tonic::Code::ResourceExhausted => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (code, Json(serde_json::json!({ "error": status.message() }))).into_response()
}

async fn approve(
    AxumState(state): AxumState<State>,
    Path(id): Path<String>,
    body: Option<Json<Decision>>,
) -> Response {
    let Json(d) = body.unwrap_or_default();
    let approver = if d.approver.is_empty() {
        "dashboard".to_owned()
    } else {
        d.approver
    };
    let req = pb::ApprovePlanRequest {
        session_id: id,
        approver,
        expected_revision: None,
    };
    match PlanApi::new(state).approve_inner(req).await {
        Ok(r) => Json(serde_json::json!({ "revision": r.revision })).into_response(),
        Err(e) => failed(&tonic::Status::from(e)),
    }
}

async fn reject(
    AxumState(state): AxumState<State>,
    Path(id): Path<String>,
    body: Option<Json<Decision>>,
) -> Response {
    let Json(d) = body.unwrap_or_default();
    let req = pb::RejectPlanRequest {
        session_id: id,
        reason: d.reason,
        expected_revision: None,
    };
    match PlanApi::new(state).reject_inner(req).await {
        Ok(r) => Json(serde_json::json!({ "revision": r.revision })).into_response(),
        Err(e) => failed(&tonic::Status::from(e)),
    }
}
