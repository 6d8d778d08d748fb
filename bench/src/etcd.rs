//! The two etcd v3 calls the comparison makes, with hand-declared messages
//! (the fields it sets), so comparing needs no etcd client.

use prost::Message;
use tonic::codegen::http::uri::PathAndQuery;

/// etcd's `PutRequest` (etcdserverpb), the fields the benchmark sets.
#[derive(Clone, PartialEq, Message)]
pub struct EtcdPutRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// etcd's `RangeRequest`, the fields the benchmark sets.
#[derive(Clone, PartialEq, Message)]
pub struct EtcdRangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bool, tag = "7")]
    pub serializable: bool,
}

/// Any etcd response, read for its count only (other fields are skipped).
#[derive(Clone, PartialEq, Message)]
pub struct EtcdResponse {
    #[prost(int64, tag = "4")]
    pub count: i64,
}

pub async fn etcd_call<Req: Message + Send + Sync + 'static>(
    channel: crate::conn::Conn,
    path: &'static str,
    req: Req,
) -> Result<(), tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let codec: tonic_prost::ProstCodec<Req, EtcdResponse> = tonic_prost::ProstCodec::default();
    grpc.unary(
        tonic::Request::new(req),
        PathAndQuery::from_static(path),
        codec,
    )
    .await
    .map(|_| ())
}
