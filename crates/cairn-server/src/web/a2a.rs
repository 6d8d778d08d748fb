//! A2A's JSON-RPC binding on the web listener (`docs/a2a.md`):
//! `POST /a2a` with a JSON-RPC 2.0 request whose `method` is the A2A
//! operation and whose `params` is its request in the proto JSON mapping.
//!
//! ```text
//!  {"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"s1"}}
//!    ─▶ bearer token ─▶ Authenticated ─▶ proto request (descriptor set)
//!    ─▶ the gRPC service's own handler (spans, access, errors: one path)
//!    ◀─ {"jsonrpc":"2.0","id":1,"result":{…Task…}}
//!  SubscribeToTask, SendStreamingMessage ◀─ text/event-stream, one
//!    JSON-RPC response per event, its `id:` the event's resume token
//! ```
//!
//! A browser's sign-in cookie is no credential here: every call carries
//! `Authorization: Bearer`, as on the gRPC port, so another site's page
//! cannot call it with a person's session. A body that is not
//! `application/json` is refused, which keeps a form or a `text/plain`
//! post from another site (no CORS preflight) out too. The caller is
//! authenticated before its JSON is parsed, which costs many times the
//! body's size (at most axum's 2 MiB).

use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::State as AxumState;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use prost::Message;
use prost_reflect::{DynamicMessage, MethodDescriptor};
use serde_json::{Value, json};
use tokio_stream::{Stream, StreamExt};
use tonic::Code;
use tonic_types::StatusExt as _;

use super::Web;
use crate::auth::Authenticated;
use crate::services::a2a::{A2aApi, RESUME_HEADER, RESUME_KEY};
use cairn_api::a2a;
use cairn_api::a2a::a2a_service_server::A2aService;

/// The service the binding serves, by its full name.
const A2A_SERVICE: &str = "lf.a2a.v1.A2AService";

/// Where the binding is served on the web listener.
pub const JSONRPC_PATH: &str = "/a2a";

/// JSON-RPC 2.0's own error codes, and A2A's (its specification, §5.4).
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;
const TASK_NOT_FOUND: i64 = -32001;
const PUSH_NOT_SUPPORTED: i64 = -32003;
const UNSUPPORTED_OPERATION: i64 = -32004;
/// Cairn's own errors (access, the plan rules, storage): the server-error
/// code JSON-RPC leaves to implementations, with the `ErrorInfo` saying
/// which.
const CAIRN_ERROR: i64 = -32000;

fn rpc_error(id: &Value, code: i64, message: &str, data: Vec<Value>) -> Value {
    let mut error = json!({"code": code, "message": message});
    if !data.is_empty() {
        error["data"] = Value::Array(data);
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

/// A gRPC status as a JSON-RPC error: A2A's code where A2A names one,
/// its details (`ErrorInfo`, `BadRequest`) as proto JSON `Any`s.
fn status_error(id: &Value, status: &tonic::Status) -> Value {
    let info = status.get_details_error_info();
    let reason = info.as_ref().map_or("", |i| i.reason.as_str());
    let code = match (status.code(), reason) {
        (_, "TASK_NOT_FOUND") => TASK_NOT_FOUND,
        (_, "UNSUPPORTED_OPERATION") => UNSUPPORTED_OPERATION,
        (_, "PUSH_NOTIFICATION_NOT_SUPPORTED") => PUSH_NOT_SUPPORTED,
        (Code::InvalidArgument, _) => INVALID_PARAMS,
        (Code::Internal | Code::Unknown, _) => INTERNAL_ERROR,
        _ => CAIRN_ERROR,
    };
    let mut data = Vec::new();
    if let Some(i) = info {
        data.push(json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": i.reason,
            "domain": i.domain,
            "metadata": i.metadata,
        }));
    }
    if let Some(b) = status.get_details_bad_request() {
        let violations: Vec<Value> = b
            .field_violations
            .iter()
            .map(|v| json!({"field": v.field, "description": v.description}))
            .collect();
        data.push(json!({
            "@type": "type.googleapis.com/google.rpc.BadRequest",
            "fieldViolations": violations,
        }));
    }
    rpc_error(id, code, status.message(), data)
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response()
}

/// `params` as the request message of `m`, by the proto JSON mapping.
fn request<M: Message + Default>(
    id: &Value,
    m: &MethodDescriptor,
    params: Value,
) -> Result<M, Value> {
    let invalid =
        |why: String| rpc_error(id, INVALID_PARAMS, &format!("params: {why}"), Vec::new());
    let params = if params.is_null() { json!({}) } else { params };
    let dynamic =
        DynamicMessage::deserialize(m.input(), params).map_err(|e| invalid(e.to_string()))?;
    M::decode(dynamic.encode_to_vec().as_slice()).map_err(|e| invalid(e.to_string()))
}

/// A response message of `m` in the proto JSON mapping.
fn result<M: Message>(m: &MethodDescriptor, message: &M) -> Result<Value, String> {
    let dynamic = crate::connect::dynamic(m.output(), message)?;
    serde_json::to_value(&dynamic).map_err(|e| e.to_string())
}

/// The gRPC request a JSON-RPC call becomes: the message, the HTTP headers
/// as metadata (A2A's service parameters, the resume token), the caller.
fn grpc<M>(message: M, headers: &HeaderMap, who: &Authenticated) -> tonic::Request<M> {
    let mut headers = headers.clone();
    // An SSE client resumes with `Last-Event-ID`: the token of the event
    // it last got, as every event's `id:` is.
    if !headers.contains_key(RESUME_HEADER)
        && let Some(last) = headers.get("last-event-id").cloned()
    {
        headers.insert(RESUME_HEADER, last);
    }
    let mut req = tonic::Request::from_parts(
        tonic::metadata::MetadataMap::from_headers(headers),
        tonic::Extensions::default(),
        message,
    );
    req.extensions_mut().insert(who.clone());
    req
}

type Events =
    std::pin::Pin<Box<dyn Stream<Item = Result<a2a::StreamResponse, tonic::Status>> + Send>>;

/// The resume token an event carries, if any.
fn resume_token(event: &a2a::StreamResponse) -> Option<String> {
    use a2a::stream_response::Payload;
    let metadata = match event.payload.as_ref()? {
        Payload::Task(t) => t.metadata.as_ref(),
        Payload::StatusUpdate(s) => s.metadata.as_ref(),
        Payload::ArtifactUpdate(a) => a.metadata.as_ref(),
        Payload::Message(m) => m.metadata.as_ref(),
    }?;
    match metadata.fields.get(RESUME_KEY)?.kind.as_ref()? {
        prost_types::value::Kind::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

/// A stream of task events as server-sent events, one JSON-RPC response
/// each; an error ends it as a JSON-RPC error.
fn sse(id: Value, m: MethodDescriptor, events: Events) -> Response {
    let out = async_stream::stream! {
        tokio::pin!(events);
        while let Some(item) = events.next().await {
            match item {
                Ok(event) => {
                    let body = match result(&m, &event) {
                        Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
                        Err(e) => {
                            yield Ok::<_, Infallible>(SseEvent::default().data(rpc_error(&id, INTERNAL_ERROR, &e, Vec::new()).to_string()));
                            break;
                        }
                    };
                    let mut sse = SseEvent::default().data(body.to_string());
                    if let Some(token) = resume_token(&event) {
                        sse = sse.id(token);
                    }
                    yield Ok(sse);
                }
                Err(status) => {
                    yield Ok(SseEvent::default().data(status_error(&id, &status).to_string()));
                    break;
                }
            }
        }
    };
    Sse::new(out)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Calls one unary operation: the request from `params`, the handler, the
/// result as JSON.
macro_rules! unary {
    ($api:expr, $id:expr, $m:expr, $params:expr, $headers:expr, $who:expr, $method:ident) => {{
        match request(&$id, $m, $params.clone()) {
            Err(e) => e,
            Ok(req) => match <A2aApi as A2aService>::$method(&$api, grpc(req, $headers, $who)).await {
                Ok(r) => match result($m, r.get_ref()) {
                    Ok(r) => json!({"jsonrpc": "2.0", "id": $id, "result": r}),
                    Err(e) => rpc_error(&$id, INTERNAL_ERROR, &e, Vec::new()),
                },
                Err(status) => status_error(&$id, &status),
            },
        }
    }};
}

/// Whether a request says its body is JSON.
fn json_body(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

/// A JSON-RPC call as sent: its id, method and params, or the error that
/// answers a call that is not one.
fn parse(body: &[u8]) -> Result<(Value, String, Value), Value> {
    let null = Value::Null;
    let call: Value = serde_json::from_slice(body).map_err(|e| {
        rpc_error(
            &null,
            PARSE_ERROR,
            &format!("Invalid JSON payload: {e}"),
            Vec::new(),
        )
    })?;
    let Value::Object(mut call) = call else {
        return Err(rpc_error(
            &null,
            INVALID_REQUEST,
            "a request is one JSON-RPC 2.0 object (batches are not served)",
            Vec::new(),
        ));
    };
    let id = call.remove("id").unwrap_or(Value::Null);
    let method = call.remove("method");
    match (call.get("jsonrpc"), method, &id) {
        (
            Some(Value::String(v)),
            Some(Value::String(method)),
            Value::String(_) | Value::Number(_),
        ) if v == "2.0" => Ok((id, method, call.remove("params").unwrap_or(Value::Null))),
        _ => Err(rpc_error(
            &id,
            INVALID_REQUEST,
            "a request needs \"jsonrpc\": \"2.0\", a string \"method\" and a string or number \"id\"",
            Vec::new(),
        )),
    }
}

/// Calls the unary operations by name.
macro_rules! unary_calls {
    ($api:ident, $id:ident, $m:ident, $params:ident, $h:ident, $who:ident, $method:ident;
     $($name:literal => $fn:ident;)*) => {
        match $method {
            $($name => unary!($api, $id, &$m, $params, $h, $who, $fn),)*
            other => rpc_error(
                &$id,
                METHOD_NOT_FOUND,
                &format!("Method not found: {}", cairn_core::error::Excerpt(other)),
                Vec::new(),
            ),
        }
    };
}

/// A streaming operation's events, or its refusal.
async fn stream_call(
    api: &A2aApi,
    id: &Value,
    m: &MethodDescriptor,
    params: Value,
    h: &HeaderMap,
    who: &Authenticated,
) -> Result<Events, Value> {
    let started = if m.name() == "SubscribeToTask" {
        let req = request::<a2a::SubscribeToTaskRequest>(id, m, params)?;
        A2aService::subscribe_to_task(api, grpc(req, h, who)).await
    } else {
        let req = request::<a2a::SendMessageRequest>(id, m, params)?;
        A2aService::send_streaming_message(api, grpc(req, h, who)).await
    };
    started
        .map(tonic::Response::into_inner)
        .map_err(|status| status_error(id, &status))
}

/// `POST /a2a`: one JSON-RPC call.
pub(super) async fn jsonrpc(
    AxumState(web): AxumState<Web>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !json_body(&headers) {
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "A2A JSON-RPC takes Content-Type: application/json",
        )
            .into_response();
    }
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let who = match web.state.auth.authenticate(authorization).await {
        Ok(who) => who,
        Err(e) => {
            let status = crate::status::status(e);
            let mut r = json_response(
                StatusCode::UNAUTHORIZED,
                &status_error(&Value::Null, &status),
            );
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
    };
    let (id, method, params) = match parse(&body) {
        Ok(call) => call,
        Err(e) => return json_response(StatusCode::OK, &e),
    };
    // The method, and so its request and response types, from the service
    // itself.
    let Some(m) = crate::connect::method_of(A2A_SERVICE, &method) else {
        let e = rpc_error(
            &id,
            METHOD_NOT_FOUND,
            &format!("Method not found: {}", cairn_core::error::Excerpt(&method)),
            Vec::new(),
        );
        return json_response(StatusCode::OK, &e);
    };
    let api = A2aApi::new(web.state.clone());
    let (h, who, method) = (&headers, &who, method.as_str());
    if m.is_server_streaming() {
        return match stream_call(&api, &id, &m, params, h, who).await {
            Ok(events) => sse(id, m, events),
            Err(e) => json_response(StatusCode::OK, &e),
        };
    }
    let reply = unary_calls! { api, id, m, params, h, who, method;
        "SendMessage" => send_message;
        "GetTask" => get_task;
        "ListTasks" => list_tasks;
        "CancelTask" => cancel_task;
        "CreateTaskPushNotificationConfig" => create_task_push_notification_config;
        "GetTaskPushNotificationConfig" => get_task_push_notification_config;
        "ListTaskPushNotificationConfigs" => list_task_push_notification_configs;
        "DeleteTaskPushNotificationConfig" => delete_task_push_notification_config;
        "GetExtendedAgentCard" => get_extended_agent_card;
    };
    json_response(StatusCode::OK, &reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a2a_errors_get_a2a_codes_and_others_keep_their_details() {
        let id = json!(7);
        let not_found = crate::status::status(cairn_core::error::Error::TaskNotFound("t".into()));
        let e = status_error(&id, &not_found);
        assert_eq!(e["error"]["code"], TASK_NOT_FOUND);
        assert_eq!(e["error"]["data"][0]["domain"], "a2a-protocol.org");
        assert_eq!(e["id"], 7);
        let bad =
            crate::status::status(cairn_core::error::Error::invalid("id", "must not be empty"));
        let e = status_error(&id, &bad);
        assert_eq!(e["error"]["code"], INVALID_PARAMS);
        assert_eq!(e["error"]["data"][1]["fieldViolations"][0]["field"], "id");
        let unsupported =
            crate::status::status(cairn_core::error::Error::UnsupportedOperation("x".into()));
        assert_eq!(
            status_error(&id, &unsupported)["error"]["code"],
            UNSUPPORTED_OPERATION
        );
    }

    #[test]
    fn params_map_by_the_proto_json_names() {
        let id = json!(1);
        let m = crate::connect::method_of(A2A_SERVICE, "ListTasks").unwrap();
        let r: a2a::ListTasksRequest = request(
            &id,
            &m,
            json!({"pageSize": 5, "status": "TASK_STATE_WORKING"}),
        )
        .unwrap();
        assert_eq!(
            (r.page_size, r.status),
            (Some(5), a2a::TaskState::Working as i32)
        );
        let e = request::<a2a::ListTasksRequest>(&id, &m, json!({"pageSize": "many"})).unwrap_err();
        assert_eq!(e["error"]["code"], INVALID_PARAMS);
    }
}
