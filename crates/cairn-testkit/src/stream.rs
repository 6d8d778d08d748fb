//! Reading watch streams in tests.

use std::time::Duration;

use cairn_api as pb;
use cairn_api::EventType;
use cairn_api::watch_request::Target;
use cairn_api::watch_response::Kind;
use cairn_api::watch_service_client::WatchServiceClient;
use tonic::Streaming;
use tonic::transport::Channel;

/// What a test compares: revision, type, session, agent.
pub type Seen = (u64, EventType, String, String);

/// Bound on any one wait for a stream message, so a broken stream fails
/// the test instead of hanging it. Not a timing assertion.
pub const PATIENCE: Duration = Duration::from_secs(20);

pub async fn next(stream: &mut Streaming<pb::WatchResponse>) -> Kind {
    tokio::time::timeout(PATIENCE, stream.message())
        .await
        .expect("a message within the patience bound")
        .expect("stream ok")
        .expect("stream open")
        .kind
        .expect("kind set")
}

pub fn seen(e: &pb::Event) -> Seen {
    (
        e.revision,
        e.r#type(),
        e.session_id.clone(),
        e.agent_id.clone(),
    )
}

/// Reads until `n` events arrived, skipping heartbeats.
/// Heartbeats keep coming on a live stream: the patience bounds the whole
/// wait, not each message.
pub async fn events(stream: &mut Streaming<pb::WatchResponse>, n: usize) -> Vec<pb::Event> {
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + PATIENCE;
    while out.len() < n {
        match next(stream).await {
            Kind::Event(e) => out.push(e),
            Kind::Progress(p) => assert!(
                std::time::Instant::now() < deadline,
                "{n} events not seen within the patience bound, only heartbeats \
                 (last {p:?}) after {out:?}"
            ),
            Kind::Synced(s) => panic!("unexpected synced {s:?}"),
        }
    }
    out
}

/// The revisions a stream delivers (each once its last event arrived),
/// until `last`: what a test compares with the revisions acknowledged.
pub async fn revisions_through(stream: &mut Streaming<pb::WatchResponse>, last: u64) -> Vec<u64> {
    let mut revisions = Vec::new();
    while revisions.last().is_none_or(|r| *r < last) {
        if let Kind::Event(e) = next(stream).await
            && e.index_in_revision + 1 == e.events_in_revision
        {
            revisions.push(e.revision);
        }
    }
    revisions
}

pub async fn watch(
    client: &mut WatchServiceClient<Channel>,
    target: Target,
    start: Option<u64>,
    initial: bool,
) -> Streaming<pb::WatchResponse> {
    client
        .watch(pb::WatchRequest {
            target: Some(target),
            start_revision: start,
            send_initial_state: initial,
            progress_interval: None,
        })
        .await
        .expect("watch")
        .into_inner()
}

/// Every event in the log from revision 1 up to `upto`, via an `all` watch.
pub async fn history(client: &mut WatchServiceClient<Channel>, upto: u64) -> Vec<pb::Event> {
    let mut out: Vec<pb::Event> = Vec::new();
    if upto == 0 {
        return out;
    }
    let mut stream = watch(client, Target::All(true), Some(1), false).await;
    while out
        .last()
        .is_none_or(|e| e.revision < upto || e.index_in_revision + 1 < e.events_in_revision)
    {
        if let Kind::Event(e) = next(&mut stream).await {
            out.push(e);
        }
    }
    out
}
