//! Every call to the server has a deadline, including the wait for a
//! connection: with the server down, a tool answers with an error in
//! bounded time instead of leaving the agent hanging.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::transport::Channel;
use tower::{Service, ServiceExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A longer deadline for one call (a `wait`), set in its extensions.
#[derive(Debug, Clone, Copy)]
pub struct CallTimeout(pub Duration);

/// A channel whose calls fail with `DEADLINE_EXCEEDED` after a timeout.
#[derive(Debug, Clone)]
pub struct Deadline {
    inner: Channel,
    timeout: Duration,
}

impl Deadline {
    /// Calls on `inner` with `timeout` each, unless a call says otherwise.
    pub fn new(inner: Channel, timeout: Duration) -> Self {
        Deadline { inner, timeout }
    }
}

impl Service<http::Request<tonic::body::Body>> for Deadline {
    type Response = http::Response<tonic::body::Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Readiness is awaited inside the call, under its deadline.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let channel = self.inner.clone();
        let timeout = req
            .extensions()
            .get::<CallTimeout>()
            .map_or(self.timeout, |t| t.0);
        Box::pin(async move {
            match tokio::time::timeout(timeout, channel.oneshot(req)).await {
                Ok(result) => result.map_err(Into::into),
                Err(_) => Err(Box::new(tonic::Status::deadline_exceeded(format!(
                    "the Cairn server did not answer within {timeout:?}"
                ))) as BoxError),
            }
        })
    }
}
