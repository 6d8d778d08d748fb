//! Reaching a Cairn server: its address, TLS (a CA to trust, and a client
//! certificate for mutual TLS), the caller's bearer token on every call,
//! and an optional deadline on every call, including the wait for a
//! connection (with the server down, a call fails in bounded time instead
//! of hanging).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::HeaderValue;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tower::{Service, ServiceExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where the server is and how to prove who we are; every flag has a
/// `CAIRN_*` env var, so an agent's environment carries them.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// The Cairn server (`https://…` for TLS).
    #[arg(
        long,
        env = "CAIRN_SERVER",
        default_value = "http://127.0.0.1:50051",
        global = true
    )]
    pub server: String,
    /// Bearer token of the principal to act as (servers with `--auth token`).
    #[arg(long, env = "CAIRN_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// CA certificate (PEM) to trust for the server's certificate.
    #[arg(long, env = "CAIRN_TLS_CA", global = true)]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM), for servers that require mutual TLS.
    #[arg(
        long,
        env = "CAIRN_TLS_CLIENT_CERT",
        global = true,
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(
        long,
        env = "CAIRN_TLS_CLIENT_KEY",
        global = true,
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
}

/// A longer deadline for one call (a `wait`), set in its extensions.
#[derive(Debug, Clone, Copy)]
pub struct CallTimeout(pub Duration);

/// A channel to the server that carries the token and the deadline.
#[derive(Debug, Clone)]
pub struct Api {
    channel: Channel,
    token: Option<HeaderValue>,
    timeout: Option<Duration>,
}

impl Api {
    /// A handle on an existing channel that presents `authorization` (a
    /// whole `Bearer …` header, passed through) on every call.
    pub fn with(channel: Channel, authorization: Option<HeaderValue>, timeout: Duration) -> Self {
        Api {
            channel,
            token: authorization,
            timeout: Some(timeout),
        }
    }
}

impl ServerArgs {
    /// The endpoint, with TLS when the server's address is `https` or a CA
    /// or client certificate is given.
    pub fn endpoint(&self) -> Result<Endpoint, BoxError> {
        let mut endpoint =
            Endpoint::from_shared(self.server.clone())?.connect_timeout(Duration::from_secs(5));
        let wants_tls =
            self.server.starts_with("https://") || self.tls_ca.is_some() || self.tls_cert.is_some();
        if wants_tls {
            let mut tls = ClientTlsConfig::new();
            if let Some(ca) = &self.tls_ca {
                tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
            }
            if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
                tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            endpoint = endpoint.tls_config(tls)?;
        }
        Ok(endpoint)
    }

    fn token(&self) -> Result<Option<HeaderValue>, BoxError> {
        self.token
            .as_deref()
            .map(|t| {
                let mut value =
                    HeaderValue::from_str(&format!("Bearer {}", t.trim())).map_err(|_| {
                        BoxError::from("the token holds characters a header cannot carry")
                    })?;
                // Kept out of debug output and HPACK tables.
                value.set_sensitive(true);
                Ok(value)
            })
            .transpose()
    }

    /// Connects now (a person's command: fail at once if the server is not
    /// there).
    pub async fn connect(&self) -> Result<Api, BoxError> {
        Ok(Api {
            channel: self.endpoint()?.connect().await?,
            token: self.token()?,
            timeout: None,
        })
    }

    /// Connects on first use, every call bounded by `timeout` (an agent's
    /// tools: the process starts before the server may be up).
    pub fn connect_lazy(&self, timeout: Duration) -> Result<Api, BoxError> {
        Ok(Api {
            channel: self.endpoint()?.connect_lazy(),
            token: self.token()?,
            timeout: Some(timeout),
        })
    }
}

fn read(path: &PathBuf) -> Result<Vec<u8>, BoxError> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()).into())
}

impl Service<http::Request<tonic::body::Body>> for Api {
    type Response = http::Response<tonic::body::Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Readiness is awaited inside the call, under its deadline.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: http::Request<tonic::body::Body>) -> Self::Future {
        if let Some(token) = &self.token {
            req.headers_mut()
                .insert(http::header::AUTHORIZATION, token.clone());
        }
        let channel = self.channel.clone();
        let timeout = req
            .extensions()
            .get::<CallTimeout>()
            .map(|t| t.0)
            .or(self.timeout);
        Box::pin(async move {
            let call = channel.oneshot(req);
            match timeout {
                None => call.await.map_err(Into::into),
                Some(timeout) => match tokio::time::timeout(timeout, call).await {
                    Ok(result) => result.map_err(Into::into),
                    Err(_) => Err(Box::new(tonic::Status::deadline_exceeded(format!(
                        "the Cairn server did not answer within {timeout:?}"
                    ))) as BoxError),
                },
            }
        })
    }
}
