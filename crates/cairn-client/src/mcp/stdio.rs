//! The stdio transport, with JSON-RPC's answer to input that is not JSON.
//!
//! rmcp skips unparsable lines silently; JSON-RPC 2.0 says to answer them
//! with a parse error (-32700, id null), and an agent's host that sent a
//! broken line deserves to hear so rather than wait for a reply that never
//! comes. Lines go through a filter: JSON lines on to rmcp, anything else
//! answered here. Replies from rmcp and from the filter are written whole
//! lines at a time by one writer, so they never interleave.

use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Longest input line passed on (rmcp's own limit is the same order).
const MAX_LINE: usize = 16 << 20;

/// The parse error JSON-RPC prescribes for input that is not JSON.
fn parse_error(detail: &str) -> String {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": -32700, "message": format!("Parse error: {detail}") },
    })
    .to_string()
}

/// The tasks that pump real stdin and stdout through the filter.
pub struct Pumps {
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

impl Pumps {
    /// Once rmcp is done: lets the last replies out, then stops reading.
    pub async fn finish(self) {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), self.writer).await;
        self.reader.abort();
    }
}

/// The transport rmcp serves on, and the tasks that pump real stdin and
/// stdout through the filter.
pub fn filtered<R, W>(input: R, output: W) -> ((DuplexStream, DuplexStream), Pumps)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (to_rmcp, rmcp_in) = tokio::io::duplex(1 << 16);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(1 << 16);
    let (errors, mut error_rx) = mpsc::channel::<String>(16);
    let reader = tokio::spawn(async move {
        let mut lines = BufReader::new(input);
        let mut to_rmcp = to_rmcp;
        let mut line = Vec::new();
        loop {
            line.clear();
            match (&mut lines)
                .take(MAX_LINE as u64)
                .read_until(b'\n', &mut line)
                .await
            {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<serde::de::IgnoredAny>(text) {
                Ok(_) => {
                    let mut framed = text.to_vec();
                    framed.push(b'\n');
                    if to_rmcp.write_all(&framed).await.is_err() {
                        break;
                    }
                }
                Err(e) => {
                    if errors.send(parse_error(&e.to_string())).await.is_err() {
                        break;
                    }
                }
            }
        }
        // EOF: rmcp sees it and ends the session.
        let _ = to_rmcp.shutdown().await;
    });
    let writer = tokio::spawn(async move {
        let mut replies = BufReader::new(from_rmcp).lines();
        let mut output = output;
        loop {
            let line = tokio::select! {
                reply = replies.next_line() => match reply {
                    Ok(Some(line)) => line,
                    _ => break,
                },
                Some(error) = error_rx.recv() => error,
            };
            if output
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
                || output.flush().await.is_err()
            {
                break;
            }
        }
    });
    ((rmcp_in, rmcp_out), Pumps { reader, writer })
}
