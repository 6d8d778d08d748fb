//! The bench's connections: one HTTP/2 channel each, with the token (if
//! any) added to every call, shared by the Cairn and the etcd scenarios.

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// A connection that sends the bench's token with every call.
pub type Conn = InterceptedService<Channel, Bearer>;

/// Adds `authorization: Bearer …` when the bench has a token.
#[derive(Debug, Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            req.metadata_mut().insert("authorization", token.clone());
        }
        Ok(req)
    }
}

pub async fn connect(
    addr: &str,
    token: Option<&str>,
    n: usize,
) -> Result<Vec<Conn>, Box<dyn std::error::Error + Send + Sync>> {
    let bearer = match token {
        Some(t) => Some(
            format!("Bearer {}", t.trim())
                .parse()
                .map_err(|_| "the token holds characters a header cannot carry")?,
        ),
        None => None,
    };
    let mut out = Vec::with_capacity(n);
    for _ in 0..n.max(1) {
        let channel = Endpoint::from_shared(addr.to_string())?
            .tcp_nodelay(true)
            .connect()
            .await?;
        out.push(InterceptedService::new(channel, Bearer(bearer.clone())));
    }
    Ok(out)
}
