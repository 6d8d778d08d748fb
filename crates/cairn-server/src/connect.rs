//! The Connect protocol on the gRPC port, next to gRPC and gRPC-Web, so
//! that `curl` and any Connect client (TypeScript, Python, a browser) can
//! call Cairn with JSON or binary protobuf over plain HTTP.
//!
//! ```text
//!  POST /cairn.v1.PlanService/GetPlan           content-type: application/json
//!    ─▶ JSON ─(descriptor set, canonical proto3 JSON)─▶ protobuf
//!    ─▶ the same gRPC services (auth, deadlines, limits: one code path)
//!    ◀─ protobuf ─▶ JSON; an error ─▶ {"code","message","details"} + HTTP status
//!  POST /cairn.v1.WatchService/Watch            content-type: application/connect+json
//!    ─▶ enveloped request ─▶ gRPC server stream ─▶ enveloped messages,
//!       then an end-of-stream envelope carrying the error, if any
//! ```
//!
//! The JSON mapping comes from the API's own descriptor set through
//! `prost-reflect` (lowerCamel names, enum names, RFC 3339 timestamps), not
//! from hand-written serializers. Anything that is not Connect passes
//! through untouched.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};

use base64::Engine as _;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::Frame;

use crate::conn::ReqBody as Incoming;
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MethodDescriptor, SerializeOptions};
use tonic::Code;
use tonic::body::Body;
use tonic_types::StatusExt;

use crate::auth::Auth;

/// The API's descriptors, for the JSON mapping.
static POOL: LazyLock<Option<DescriptorPool>> =
    LazyLock::new(|| DescriptorPool::decode(cairn_api::FILE_DESCRIPTOR_SET).ok());

/// The API's descriptors (`cairn.v1` and `lf.a2a.v1`), for JSON of its
/// messages elsewhere (the A2A agent card).
pub(crate) fn pool() -> Option<&'static DescriptorPool> {
    POOL.as_ref()
}

/// Which encoding a Connect request uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    Json,
    Proto,
}

/// What kind of Connect call a request is, if it is one.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Unary(Codec),
    Stream(Codec),
}

fn kind(req: &Request<Incoming>) -> Option<Kind> {
    if req.method() != http::Method::POST || !req.uri().path().starts_with("/cairn.v1.") {
        return None;
    }
    let ct = req.headers().get(header::CONTENT_TYPE)?.to_str().ok()?;
    let ct = ct.split(';').next().unwrap_or_default().trim();
    match ct {
        "application/json" => Some(Kind::Unary(Codec::Json)),
        "application/proto" => Some(Kind::Unary(Codec::Proto)),
        "application/connect+json" => Some(Kind::Stream(Codec::Json)),
        "application/connect+proto" => Some(Kind::Stream(Codec::Proto)),
        _ => None,
    }
}

/// The Connect front of the gRPC stack `S`.
#[derive(Clone)]
pub struct Connect<S> {
    inner: S,
    max_request_bytes: usize,
    /// Callers are authenticated before their body is read: decoding JSON
    /// costs tens of times its size, which nobody may spend unidentified.
    auth: Arc<Auth>,
}

impl<S> Connect<S> {
    pub fn new(inner: S, max_request_bytes: usize, auth: Arc<Auth>) -> Self {
        Connect {
            inner,
            max_request_bytes,
            auth,
        }
    }
}

/// JSON bodies at least this large are decoded on a blocking thread, a
/// few at a time, so that a flood of large ones holds bounded memory and
/// never stalls the runtime's workers (small ones decode in microseconds).
const LARGE_JSON: usize = 64 * 1024;

/// How many large JSON bodies are decoded at once, server-wide.
static LARGE_JSON_DECODES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

impl<S> tower::Service<Request<Incoming>> for Connect<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        if req.method() == http::Method::GET && req.uri().path().starts_with("/cairn.v1.") {
            // Connect's GET is for methods marked free of side effects;
            // none of Cairn's is, so say so in Connect's own form.
            let e = ConnectError::new(
                Code::Unimplemented,
                "Connect GET is not supported: POST the request (application/json or application/proto)",
            );
            return Box::pin(async move { Ok(e.response()) });
        }
        let Some(kind) = kind(&req) else {
            let fut = inner.call(req.map(Body::new));
            return Box::pin(fut);
        };
        if let Some(e) = compressed(&req, kind) {
            let r = match kind {
                Kind::Unary(_) => e.response(),
                Kind::Stream(codec) => end_of_stream(codec, Some(e)),
            };
            return Box::pin(async move { Ok(r) });
        }
        let max = self.max_request_bytes;
        let auth = Arc::clone(&self.auth);
        Box::pin(async move {
            let mut req = req;
            if let Err(refused) = authenticate(&auth, &mut req, kind).await {
                return Ok(refused);
            }
            Ok(match handle(inner, req, kind, max).await {
                Ok(r) | Err(r) => r,
            })
        })
    }
}

/// Compression is not offered: a compressed request is refused as the
/// Connect protocol says (`unimplemented`, naming what is accepted)
/// rather than misread.
fn compressed(req: &Request<Incoming>, kind: Kind) -> Option<ConnectError> {
    let header = match kind {
        Kind::Unary(_) => header::CONTENT_ENCODING.as_str(),
        Kind::Stream(_) => "connect-content-encoding",
    };
    let encoding = req.headers().get(header)?.to_str().unwrap_or("?").trim();
    (!encoding.eq_ignore_ascii_case("identity")).then(|| {
        ConnectError::new(
            Code::Unimplemented,
            format!(
                "{header} {encoding:?} is not supported: send the request uncompressed (identity)"
            ),
        )
    })
}

/// Finds the caller from its headers alone, before the body is read; the
/// identity rides along to the gRPC services, which do not look again.
async fn authenticate(
    auth: &Auth,
    req: &mut Request<Incoming>,
    kind: Kind,
) -> Result<(), Response<Body>> {
    match auth.identify(req).await {
        Ok(()) => Ok(()),
        Err(e) => {
            let error = ConnectError::from_status(&crate::status::status(e));
            Err(match kind {
                Kind::Unary(_) => error.response(),
                Kind::Stream(codec) => end_of_stream(codec, Some(error)),
            })
        }
    }
}

/// A Connect error as the protocol writes it.
#[derive(Debug)]
struct ConnectError {
    code: Code,
    message: String,
    details: Vec<serde_json::Value>,
}

fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "canceled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

/// The HTTP status the Connect protocol gives each code.
fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl ConnectError {
    fn new(code: Code, message: impl Into<String>) -> Self {
        ConnectError {
            code,
            message: message.into(),
            details: Vec::new(),
        }
    }

    /// From a gRPC status: the same code, message and error details (each
    /// as its type and bytes, with a readable `debug` copy).
    fn from_status(status: &tonic::Status) -> Self {
        let mut details = Vec::new();
        if !status.details().is_empty()
            && let Ok(rpc) = RpcStatus::decode(status.details())
        {
            let parsed = status.get_error_details();
            for any in rpc.details {
                let name = any
                    .type_url
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                let debug = match name.as_str() {
                    "google.rpc.ErrorInfo" => parsed.error_info().map(|i| {
                        serde_json::json!({
                            "reason": i.reason,
                            "domain": i.domain,
                            "metadata": i.metadata,
                        })
                    }),
                    "google.rpc.BadRequest" => parsed.bad_request().map(|b| {
                        serde_json::json!({
                            "fieldViolations": b.field_violations.iter().map(|v| serde_json::json!({
                                "field": v.field,
                                "description": v.description,
                            })).collect::<Vec<_>>(),
                        })
                    }),
                    _ => None,
                };
                let mut d = serde_json::json!({
                    "type": name,
                    "value": base64::engine::general_purpose::STANDARD_NO_PAD.encode(&any.value),
                });
                if let Some(debug) = debug {
                    d["debug"] = debug;
                }
                details.push(d);
            }
        }
        ConnectError {
            code: status.code(),
            message: status.message().to_owned(),
            details,
        }
    }

    fn json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "code": code_name(self.code),
            "message": self.message,
        });
        if !self.details.is_empty() {
            v["details"] = serde_json::Value::Array(self.details.clone());
        }
        v
    }

    /// A unary call's error response.
    fn response(&self) -> Response<Body> {
        let mut r = Response::new(Body::new(Full::new(Bytes::from(self.json().to_string()))));
        *r.status_mut() = http_status(self.code);
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    }
}

/// `google.rpc.Status`, to read the details gRPC carries in
/// `grpc-status-details-bin`.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<prost_types::Any>,
}

fn method(path: &str) -> Result<MethodDescriptor, ConnectError> {
    let not_found = || ConnectError::new(Code::Unimplemented, format!("no such method: {path}"));
    let (service, name) = path
        .trim_start_matches('/')
        .split_once('/')
        .ok_or_else(not_found)?;
    method_of(service, name).ok_or_else(not_found)
}

/// The method `name` of the API's `service` (full name), if there is one.
pub(crate) fn method_of(service: &str, name: &str) -> Option<MethodDescriptor> {
    POOL.as_ref()
        .and_then(|p| p.get_service_by_name(service))
        .and_then(|s| s.methods().find(|m| m.name() == name))
}

/// A message of the API as its descriptor sees it, for the proto JSON
/// mapping (`serde` of the result): the A2A card and JSON-RPC answers.
pub(crate) fn dynamic<M: prost::Message>(
    desc: prost_reflect::MessageDescriptor,
    message: &M,
) -> Result<DynamicMessage, String> {
    DynamicMessage::decode(desc, message.encode_to_vec().as_slice()).map_err(|e| e.to_string())
}

/// Request bytes in the codec's form → protobuf; a large JSON body waits
/// for one of the few decoding slots and decodes off the runtime.
async fn decode(m: &MethodDescriptor, codec: Codec, body: Bytes) -> Result<Vec<u8>, ConnectError> {
    if codec == Codec::Proto || body.len() < LARGE_JSON {
        return to_proto(m, codec, &body);
    }
    let _slot = LARGE_JSON_DECODES
        .acquire()
        .await
        .map_err(|_| ConnectError::new(Code::Unavailable, "the server is shutting down"))?;
    let m = m.clone();
    tokio::task::spawn_blocking(move || to_proto(&m, codec, &body))
        .await
        .map_err(|e| ConnectError::new(Code::Internal, format!("request decoding: {e}")))?
}

/// Request bytes in the codec's form → protobuf.
fn to_proto(m: &MethodDescriptor, codec: Codec, body: &[u8]) -> Result<Vec<u8>, ConnectError> {
    match codec {
        Codec::Proto => {
            // Checked here, so that garbage is the client's error
            // (invalid_argument), not a decoding failure deep inside.
            DynamicMessage::decode(m.input(), body).map_err(|e| {
                ConnectError::new(
                    Code::InvalidArgument,
                    format!("request: not a valid {}: {e}", m.input().full_name()),
                )
            })?;
            Ok(body.to_vec())
        }
        Codec::Json => {
            let mut de = serde_json::Deserializer::from_slice(body);
            let msg = DynamicMessage::deserialize(m.input(), &mut de)
                .and_then(|msg| de.end().map(|()| msg))
                .map_err(|e| {
                    ConnectError::new(Code::InvalidArgument, format!("request JSON: {e}"))
                })?;
            Ok(msg.encode_to_vec())
        }
    }
}

/// A response message (protobuf) → the codec's form.
fn from_proto(m: &MethodDescriptor, codec: Codec, bytes: &[u8]) -> Result<Bytes, ConnectError> {
    match codec {
        Codec::Proto => Ok(Bytes::copy_from_slice(bytes)),
        Codec::Json => {
            let msg = DynamicMessage::decode(m.output(), bytes)
                .map_err(|e| ConnectError::new(Code::Internal, format!("response: {e}")))?;
            let mut out = Vec::new();
            let mut ser = serde_json::Serializer::new(&mut out);
            msg.serialize_with_options(&mut ser, &SerializeOptions::new())
                .map_err(|e| ConnectError::new(Code::Internal, format!("response JSON: {e}")))?;
            Ok(Bytes::from(out))
        }
    }
}

/// A gRPC (and Connect) frame: flags, big-endian length, message.
fn frame(flags: u8, message: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + message.len());
    b.put_u8(flags);
    b.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
    b.put_slice(message);
    b.freeze()
}

/// Splits complete frames off the front of `buf`.
fn take_frame(buf: &mut BytesMut) -> Option<(u8, Bytes)> {
    if buf.len() < 5 {
        return None;
    }
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if buf.len() < 5 + len {
        return None;
    }
    let flags = buf[0];
    buf.advance(5);
    Some((flags, buf.split_to(len).freeze()))
}

async fn read_body(
    req: Request<Incoming>,
    max: usize,
) -> Result<(http::request::Parts, Bytes), ConnectError> {
    let (parts, body) = req.into_parts();
    let bytes = Limited::new(body, max.saturating_add(5))
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                ConnectError::new(
                    Code::ResourceExhausted,
                    format!("request: message size exceeds the limit of {max} bytes"),
                )
            } else {
                ConnectError::new(Code::InvalidArgument, format!("request body: {e}"))
            }
        })?
        .to_bytes();
    Ok((parts, bytes))
}

/// The gRPC request the Connect one becomes: same path, same credentials,
/// the Connect deadline as gRPC's.
fn grpc_request(parts: &http::request::Parts, message: &[u8]) -> Request<Body> {
    let mut req = Request::builder()
        .method(http::Method::POST)
        .uri(parts.uri.clone())
        .version(http::Version::HTTP_2)
        .header(header::CONTENT_TYPE, "application/grpc")
        .header("te", "trailers");
    if let Some(auth) = parts.headers.get(header::AUTHORIZATION) {
        req = req.header(header::AUTHORIZATION, auth.clone());
    }
    if let Some(ms) = parts
        .headers
        .get("connect-timeout-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        req = req.header("grpc-timeout", format!("{}m", ms.min(99_999_999)));
    }
    let mut req = req
        .body(Body::new(Full::new(frame(0, message))))
        .unwrap_or_default();
    // The caller's connection facts (peer address, TLS identity) go along.
    *req.extensions_mut() = parts.extensions.clone();
    req
}

/// The status a gRPC response ends with: in its headers (trailers-only)
/// or its trailers.
fn grpc_status(headers: &http::HeaderMap, trailers: Option<&http::HeaderMap>) -> tonic::Status {
    tonic::Status::from_header_map(headers)
        .or_else(|| trailers.and_then(tonic::Status::from_header_map))
        .unwrap_or_else(|| tonic::Status::unknown("the call ended without a status"))
}

async fn handle<S>(
    mut inner: S,
    req: Request<Incoming>,
    kind: Kind,
    max: usize,
) -> Result<Response<Body>, Response<Body>>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    let m = method(req.uri().path()).map_err(|e| e.response())?;
    match kind {
        Kind::Unary(codec) => {
            if m.is_server_streaming() || m.is_client_streaming() {
                return Err(ConnectError::new(
                    Code::Unimplemented,
                    "a streaming method needs application/connect+json or application/connect+proto",
                )
                .response());
            }
            let (parts, body) = read_body(req, max).await.map_err(|e| e.response())?;
            let message = decode(&m, codec, body).await.map_err(|e| e.response())?;
            let Ok(resp) = inner.call(grpc_request(&parts, &message)).await;
            let (head, body) = resp.into_parts();
            let collected = body.collect().await.map_err(|e| {
                ConnectError::new(Code::Internal, format!("response: {e}")).response()
            })?;
            let trailers = collected.trailers().cloned();
            let mut data = BytesMut::from(collected.to_bytes().as_ref());
            let status = grpc_status(&head.headers, trailers.as_ref());
            if status.code() != Code::Ok {
                return Err(ConnectError::from_status(&status).response());
            }
            let (_, message) = take_frame(&mut data).ok_or_else(|| {
                ConnectError::new(Code::Internal, "response without a message").response()
            })?;
            let out = from_proto(&m, codec, &message).map_err(|e| e.response())?;
            let mut r = Response::new(Body::new(Full::new(out)));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(match codec {
                    Codec::Json => "application/json",
                    Codec::Proto => "application/proto",
                }),
            );
            Ok(r)
        }
        Kind::Stream(codec) => Ok(stream(inner, req, m, codec, max).await),
    }
}

/// The end-of-stream envelope (flag 2), with the error if there is one.
fn end_frame(error: Option<ConnectError>) -> Bytes {
    let body = match error {
        Some(e) => serde_json::json!({"error": e.json()}),
        None => serde_json::json!({}),
    };
    frame(2, body.to_string().as_bytes())
}

fn stream_content_type(codec: Codec) -> &'static str {
    match codec {
        Codec::Json => "application/connect+json",
        Codec::Proto => "application/connect+proto",
    }
}

/// A stream that ends before its first message.
fn end_of_stream(codec: Codec, error: Option<ConnectError>) -> Response<Body> {
    let mut r = Response::new(Body::new(Full::new(end_frame(error))));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(stream_content_type(codec)),
    );
    r
}

/// A Connect server stream: every response message in an envelope, then
/// the end-of-stream envelope (flag 2) with the error, if there is one.
async fn stream<S>(
    mut inner: S,
    req: Request<Incoming>,
    m: MethodDescriptor,
    codec: Codec,
    max: usize,
) -> Response<Body>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    let content_type = stream_content_type(codec);
    let end = end_frame;
    let request = async {
        let (parts, mut body) = read_body(req, max).await?;
        let mut buf = BytesMut::from(body.split_to(body.len()).as_ref());
        let (flags, message) = take_frame(&mut buf).ok_or_else(|| {
            ConnectError::new(Code::InvalidArgument, "request: no enveloped message")
        })?;
        if flags & 1 != 0 {
            return Err(ConnectError::new(
                Code::Unimplemented,
                "request: a compressed envelope is not supported: send it uncompressed",
            ));
        }
        let message = decode(&m, codec, message).await?;
        Ok::<_, ConnectError>(grpc_request(&parts, &message))
    };
    let grpc = match request.await {
        Ok(r) => r,
        Err(e) => return end_of_stream(codec, Some(e)),
    };
    let Ok(resp) = inner.call(grpc).await;
    let (head, mut body) = resp.into_parts();
    if let Some(status) = tonic::Status::from_header_map(&head.headers)
        && status.code() != Code::Ok
    {
        // Refused before any message (trailers-only).
        return end_of_stream(codec, Some(ConnectError::from_status(&status)));
    }
    let m = Arc::new(m);
    let frames = async_stream::stream! {
        let mut buf = BytesMut::new();
        loop {
            match body.frame().await {
                Some(Ok(f)) => {
                    if f.is_data() {
                        if let Ok(data) = f.into_data() {
                            buf.extend_from_slice(&data);
                        }
                        while let Some((_, message)) = take_frame(&mut buf) {
                            match from_proto(&m, codec, &message) {
                                Ok(out) => yield Ok::<_, Infallible>(Frame::data(frame(0, &out))),
                                Err(e) => {
                                    yield Ok(Frame::data(end(Some(e))));
                                    return;
                                }
                            }
                        }
                    } else if let Ok(trailers) = f.into_trailers() {
                        let status = grpc_status(&trailers, None);
                        let error = (status.code() != Code::Ok).then(|| ConnectError::from_status(&status));
                        yield Ok(Frame::data(end(error)));
                        return;
                    }
                }
                Some(Err(e)) => {
                    yield Ok(Frame::data(end(Some(ConnectError::new(Code::Internal, e.to_string())))));
                    return;
                }
                None => {
                    yield Ok(Frame::data(end(None)));
                    return;
                }
            }
        }
    };
    let mut r = Response::new(Body::new(StreamBody::new(frames)));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_of_the_api_is_in_the_pool() {
        let m = method("/cairn.v1.PlanService/GetPlan").unwrap();
        assert_eq!(m.input().full_name(), "cairn.v1.GetPlanRequest");
        assert!(method("/cairn.v1.PlanService/Nope").is_err());
        assert!(
            method("/cairn.v1.WatchService/Watch")
                .unwrap()
                .is_server_streaming()
        );
    }

    #[test]
    fn json_maps_canonically_both_ways() {
        let m = method("/cairn.v1.PlanService/GetPlan").unwrap();
        let proto = to_proto(&m, Codec::Json, br#"{"sessionId":"demo"}"#).unwrap();
        let req = cairn_api::GetPlanRequest::decode(proto.as_slice()).unwrap();
        assert_eq!(req.session_id, "demo");
        assert!(to_proto(&m, Codec::Json, br#"{"sessionId":3}"#).is_err());
        let mut buf = BytesMut::from(&frame(0, b"abc")[..]);
        assert_eq!(take_frame(&mut buf), Some((0, Bytes::from_static(b"abc"))));
        assert!(buf.is_empty());
    }
}
