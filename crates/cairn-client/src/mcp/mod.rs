//! `cairn mcp`: the planning tools over the Model Context Protocol (stdio).
//!
//! One process serves one agent: it talks gRPC to a running Cairn server on
//! the agent's behalf, with the agent's session and agent ids fixed by flags,
//! and exposes the tools by the names and shapes agents know (`update_plan`,
//! `todo_read`, `todo_write`, `plan_enter` … `plan_modify`, `wait`,
//! `check_action`; see docs/rules.md). Rule violations and server errors
//! come back as tool errors carrying the server's exact message; nothing an
//! agent sends can crash the process.
//!
//! - [`args`]: the tools' arguments (their JSON schemas);
//! - [`tools`]: the tools;
//! - [`stdio`]: the transport, answering input that is not JSON; every
//!   call has a deadline (`--call-timeout`, see [`crate::conn`]);
//! - [`http`]: the same tools over Streamable HTTP at `/mcp`, served by
//!   `cairn serve` on its web listener for remote agents.

pub mod args;
pub mod http;
mod stdio;
pub mod tools;

use rmcp::ServiceExt;

pub use args::McpArgs;
pub use tools::CairnTools;

/// Serves MCP on stdin/stdout until the client closes it.
pub async fn run(args: McpArgs) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let api = args.server.connect_lazy(args.call_timeout)?;
    let server = CairnTools::new(args, api);
    // The lease lives as long as this process: a SIGKILL stops renewing
    // and the session stalls, then is lost.
    let lease = server.clone();
    let renewer = tokio::spawn(async move { lease.renew_forever().await });
    let done = server.clone();
    let (transport, pumps) = stdio::filtered(tokio::io::stdin(), tokio::io::stdout());
    let running = server.serve(transport).await?;
    let waited = running.waiting().await;
    renewer.abort();
    pumps.finish().await;
    done.release_if_complete().await;
    waited?;
    Ok(())
}
