//! Which names and origins a browser may reach this server under: one
//! rule for every browser-facing surface (the dashboard, and Connect and
//! gRPC-Web on the gRPC port).
//!
//! A server on a person's machine is reachable from every web page that
//! person opens. Two defences hold it:
//!
//! - **Host**: a request must name this server (its listen addresses,
//!   `localhost`/`127.0.0.1`/`[::1]` at a loopback port, or the host of a
//!   `--web-origin`). That defeats DNS rebinding, where an attacker's name
//!   is made to resolve to 127.0.0.1 and its page becomes "same-origin"
//!   with the server.
//! - **Origin**: a request a browser marks as coming from a page must come
//!   from an allowed origin (this server's own, or a `--web-origin`);
//!   cross-origin calls to the API get an explicit CORS answer naming
//!   exactly those origins.
//!
//! Native gRPC over HTTP/2 without an `Origin` is not a browser (browsers
//! speak HTTP/2 only over TLS, where a rebound name fails the certificate)
//! and passes untouched: a gRPC client in a cluster may dial any name.

use std::collections::HashSet;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use tonic::body::Body;

/// The names and origins of one server.
#[derive(Debug, Clone, Default)]
pub struct Site {
    /// `Host` values (`host:port`) that name this server, lowercased.
    hosts: HashSet<String>,
    /// Origins (`scheme://host:port`) whose pages may call it, lowercased.
    origins: HashSet<String>,
}

/// Why a request was refused: a fixed text, safe to log and to return.
pub type Refusal = &'static str;

impl Site {
    /// The site of a server listening on `listens`, also reachable through
    /// `origins` (e.g. a reverse proxy's `https://cairn.example.com`).
    pub fn new(listens: &[SocketAddr], origins: &[String]) -> Self {
        let mut hosts = HashSet::new();
        for addr in listens {
            let port = addr.port();
            let ip = addr.ip();
            if ip.is_unspecified() || ip.is_loopback() {
                hosts.insert(format!("localhost:{port}"));
                hosts.insert(format!("127.0.0.1:{port}"));
                hosts.insert(format!("[::1]:{port}"));
            }
            if !ip.is_unspecified() {
                hosts.insert(addr.to_string());
            }
        }
        let mut allowed = HashSet::new();
        for host in &hosts {
            allowed.insert(format!("http://{host}"));
            allowed.insert(format!("https://{host}"));
        }
        for origin in origins {
            let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
            if let Some((_, host)) = origin.split_once("://") {
                hosts.insert(host.to_owned());
            }
            allowed.insert(origin);
        }
        Site {
            hosts,
            origins: allowed,
        }
    }

    /// Whether `headers` (or the HTTP/2 `authority`) name this server.
    pub fn names_us(&self, headers: &HeaderMap, authority: Option<&str>) -> bool {
        headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or(authority)
            .map(str::to_ascii_lowercase)
            .is_some_and(|h| self.hosts.contains(&h))
    }

    /// Whether a page of `origin` may call this server.
    pub fn allows_origin(&self, origin: &HeaderValue) -> bool {
        origin
            .to_str()
            .is_ok_and(|o| self.origins.contains(&o.to_ascii_lowercase()))
    }

    /// Why a browser's request is refused before anything else, if it is:
    /// another host name, or a change from another origin or site.
    /// `GET` and `HEAD` change nothing and may come from anywhere that
    /// names us (a link to the dashboard).
    pub fn refuse(
        &self,
        method: &Method,
        headers: &HeaderMap,
        authority: Option<&str>,
    ) -> Option<Refusal> {
        if !self.names_us(headers, authority) {
            return Some("this server is not served under that host name");
        }
        if matches!(*method, Method::GET | Method::HEAD) {
            return None;
        }
        if let Some(origin) = headers.get(header::ORIGIN)
            && !self.allows_origin(origin)
        {
            return Some("cross-origin requests may not change anything");
        }
        if headers
            .get("sec-fetch-site")
            .is_some_and(|s| s.as_bytes() == b"cross-site")
        {
            return Some("cross-site requests may not change anything");
        }
        None
    }
}

/// Whether a request on the gRPC port may come from a browser: anything
/// but native gRPC over HTTP/2 without an `Origin`. Connect, gRPC-Web,
/// HTTP/1.x of any content type, and anything a page sent are.
fn from_a_browser<B>(req: &Request<B>) -> bool {
    if req.headers().contains_key(header::ORIGIN) || req.version() != http::Version::HTTP_2 {
        return true;
    }
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    !(ct == "application/grpc"
        || ct.starts_with("application/grpc+")
        || ct.starts_with("application/grpc;"))
}

/// Request headers a page may send to the API (Connect and gRPC-Web).
const ALLOW_HEADERS: &str = "authorization, content-type, connect-protocol-version, connect-timeout-ms, connect-content-encoding, connect-accept-encoding, grpc-timeout, x-grpc-web, x-user-agent, traceparent";
/// Response headers a page may read.
const EXPOSE_HEADERS: &str = "grpc-status, grpc-message, grpc-status-details-bin, content-encoding, connect-content-encoding";

/// The browser gate in front of the gRPC port: the [`Site`] rule for
/// every browser protocol, and an explicit CORS policy.
#[derive(Clone)]
pub struct Gate<S> {
    inner: S,
    site: Arc<Site>,
}

impl<S> Gate<S> {
    pub fn new(inner: S, site: Arc<Site>) -> Self {
        Gate { inner, site }
    }
}

fn refused(status: StatusCode, why: Refusal) -> Response<Body> {
    let body = serde_json::json!({"code": "permission_denied", "message": why}).to_string();
    let mut r = Response::new(Body::new(Full::new(Bytes::from(body))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The answer to a CORS preflight from an allowed origin.
fn preflight(origin: HeaderValue) -> Response<Body> {
    let mut r = Response::new(Body::default());
    *r.status_mut() = StatusCode::NO_CONTENT;
    let h = r.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("POST, GET"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(ALLOW_HEADERS),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    h.insert(header::VARY, HeaderValue::from_static("origin"));
    r
}

impl<S, ReqB> tower::Service<Request<ReqB>> for Gate<S>
where
    S: tower::Service<Request<ReqB>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    ReqB: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        if !from_a_browser(&req) {
            return Box::pin(inner.call(req));
        }
        let authority = req.uri().authority().map(|a| a.as_str().to_owned());
        let origin = req.headers().get(header::ORIGIN).cloned();
        let refusal = if !self.site.names_us(req.headers(), authority.as_deref()) {
            Some((
                StatusCode::MISDIRECTED_REQUEST,
                "this server is not served under that host name",
            ))
        } else if origin.as_ref().is_some_and(|o| !self.site.allows_origin(o)) {
            Some((
                StatusCode::FORBIDDEN,
                "cross-origin requests from that origin are not allowed",
            ))
        } else if req
            .headers()
            .get("sec-fetch-site")
            .is_some_and(|s| s.as_bytes() == b"cross-site")
            && origin.is_none()
        {
            Some((StatusCode::FORBIDDEN, "cross-site requests are not allowed"))
        } else {
            None
        };
        if let Some((status, why)) = refusal {
            tracing::debug!(path = %req.uri().path(), why, "browser request refused");
            return Box::pin(async move { Ok(refused(status, why)) });
        }
        if req.method() == Method::OPTIONS {
            let answer = match origin {
                Some(origin) => preflight(origin),
                None => refused(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "OPTIONS is for CORS preflights",
                ),
            };
            return Box::pin(async move { Ok(answer) });
        }
        Box::pin(async move {
            let Ok(mut response) = inner.call(req).await;
            if let Some(origin) = origin {
                let h = response.headers_mut();
                h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
                h.insert(
                    header::ACCESS_CONTROL_EXPOSE_HEADERS,
                    HeaderValue::from_static(EXPOSE_HEADERS),
                );
                h.append(header::VARY, HeaderValue::from_static("origin"));
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> Site {
        Site::new(
            &["127.0.0.1:8080".parse().unwrap()],
            &["https://Cairn.example.com/".into()],
        )
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn hosts_and_origins() {
        let g = site();
        let get = Method::GET;
        let post = Method::POST;
        assert_eq!(
            g.refuse(&get, &headers(&[("host", "127.0.0.1:8080")]), None),
            None
        );
        assert_eq!(
            g.refuse(&get, &headers(&[("host", "localhost:8080")]), None),
            None
        );
        assert_eq!(
            g.refuse(&get, &headers(&[("host", "cairn.example.com")]), None),
            None
        );
        assert_eq!(g.refuse(&get, &HeaderMap::new(), Some("[::1]:8080")), None);
        assert!(
            g.refuse(&get, &headers(&[("host", "evil.example:8080")]), None)
                .is_some()
        );
        assert!(g.refuse(&get, &HeaderMap::new(), None).is_some());
        let ok = [("host", "127.0.0.1:8080")];
        assert_eq!(g.refuse(&post, &headers(&ok), None), None);
        let mut cross = ok.to_vec();
        cross.push(("origin", "https://evil.example"));
        assert!(g.refuse(&post, &headers(&cross), None).is_some());
        let mut same = ok.to_vec();
        same.push(("origin", "https://cairn.example.com"));
        assert_eq!(g.refuse(&post, &headers(&same), None), None);
        let mut fetched = ok.to_vec();
        fetched.push(("sec-fetch-site", "cross-site"));
        assert!(g.refuse(&post, &headers(&fetched), None).is_some());
    }

    #[test]
    fn only_native_grpc_over_http2_is_not_a_browser() {
        use http::Version;
        let req = |version, ct: &str, origin: Option<&str>| {
            let mut b = Request::builder()
                .version(version)
                .header("content-type", ct);
            if let Some(o) = origin {
                b = b.header("origin", o);
            }
            b.body(()).unwrap()
        };
        assert!(!from_a_browser(&req(
            Version::HTTP_2,
            "application/grpc",
            None
        )));
        assert!(!from_a_browser(&req(
            Version::HTTP_2,
            "application/grpc+proto",
            None
        )));
        assert!(from_a_browser(&req(
            Version::HTTP_11,
            "application/grpc",
            None
        )));
        assert!(from_a_browser(&req(
            Version::HTTP_2,
            "application/grpc-web+proto",
            None
        )));
        assert!(from_a_browser(&req(
            Version::HTTP_2,
            "application/json",
            None
        )));
        assert!(from_a_browser(&req(
            Version::HTTP_2,
            "application/grpc",
            Some("http://127.0.0.1:1")
        )));
    }
}
