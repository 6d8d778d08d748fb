//! The `cairn` command line. Every flag has a `CAIRN_*` env var; doc comments
//! are the help text.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::api::server::ServerConfig;
use crate::api::{DEFAULT_BLOCKED_TOOLS, Policy};
use crate::domain::Limits;
use crate::store::StoreOptions;

/// Cairn: durable, observable plans and todo lists for LLM agents.
#[derive(Debug, Parser)]
#[command(name = "cairn", version, about)]
pub struct Cli {
    /// Log format.
    #[arg(long, env = "CAIRN_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// Log filter, in `tracing` env-filter syntax (e.g. `info,cairn=debug`).
    #[arg(long, env = "CAIRN_LOG", default_value = "info", global = true)]
    pub log: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server on an embedded redb database under the data directory.
    Serve(ServeArgs),
}

/// `cairn serve` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on for gRPC (and gRPC-Web).
    #[arg(long, env = "CAIRN_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// Directory of the database; created if missing.
    #[arg(long, env = "CAIRN_DATA_DIR", default_value = "./cairn-data")]
    pub data_dir: PathBuf,
    /// Plans with fewer items get the simple-task hint and are not stored; 0 stores all.
    #[arg(long, env = "CAIRN_SIMPLE_TASK_THRESHOLD", default_value_t = 4)]
    pub simple_task_threshold: usize,
    /// Tools (`tool`) or tool actions (`tool:action`) blocked in plan mode, comma-separated.
    #[arg(long, env = "CAIRN_BLOCKED_TOOLS", value_delimiter = ',', default_values_t = DEFAULT_BLOCKED_TOOLS.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())]
    pub blocked_tools: Vec<String>,
    /// Most items in a checklist or steps in an implementation plan.
    #[arg(long, env = "CAIRN_MAX_PLAN_STEPS", default_value_t = Limits::default().max_plan_steps)]
    pub max_plan_steps: usize,
    /// Most todos in one agent's list.
    #[arg(long, env = "CAIRN_MAX_TODOS", default_value_t = Limits::default().max_todos)]
    pub max_todos: usize,
    /// Most bytes in one text field.
    #[arg(long, env = "CAIRN_MAX_TEXT_BYTES", default_value_t = Limits::default().max_text_bytes)]
    pub max_text_bytes: usize,
    /// Most characters in an id.
    #[arg(long, env = "CAIRN_MAX_ID_LEN", default_value_t = Limits::default().max_id_len)]
    pub max_id_len: usize,
    /// Most labels on a session.
    #[arg(long, env = "CAIRN_MAX_LABELS", default_value_t = Limits::default().max_labels)]
    pub max_labels: usize,
    /// Most mutations committed together in one durable transaction (1: one commit per mutation).
    #[arg(long, env = "CAIRN_COMMIT_BATCH", default_value_t = 256)]
    pub commit_batch: usize,
    /// Mutations queued for the writer before callers wait.
    #[arg(long, env = "CAIRN_COMMIT_QUEUE", default_value_t = 4096)]
    pub commit_queue: usize,
}

impl ServeArgs {
    /// The server configuration these flags describe.
    pub fn server_config(&self) -> ServerConfig {
        let mut store = StoreOptions::new(&self.data_dir);
        store.commit_batch = self.commit_batch.max(1);
        store.queue_depth = self.commit_queue.max(1);
        ServerConfig {
            store,
            policy: Policy {
                limits: Limits {
                    max_plan_steps: self.max_plan_steps,
                    max_todos: self.max_todos,
                    max_text_bytes: self.max_text_bytes,
                    max_id_len: self.max_id_len,
                    max_labels: self.max_labels,
                },
                simple_task_threshold: self.simple_task_threshold,
                blocked_tools: self
                    .blocked_tools
                    .iter()
                    .map(|t| t.trim().to_owned())
                    .filter(|t| !t.is_empty())
                    .collect(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_spec() {
        let cli = Cli::try_parse_from(["cairn", "serve"]).unwrap();
        let Command::Serve(args) = cli.command;
        assert_eq!(args.listen.to_string(), "127.0.0.1:50051");
        let cfg = args.server_config();
        assert_eq!(cfg.policy, Policy::default());
        assert_eq!(cfg.store.commit_batch, 256);
    }

    #[test]
    fn blocked_tools_are_a_list() {
        let cli =
            Cli::try_parse_from(["cairn", "serve", "--blocked-tools", "write_file, shell:rm"])
                .unwrap();
        let Command::Serve(args) = cli.command;
        assert_eq!(
            args.server_config().policy.blocked_tools,
            vec!["write_file", "shell:rm"]
        );
    }
}
