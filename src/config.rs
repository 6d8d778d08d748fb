//! The `cairn` command line. Every flag has a `CAIRN_*` env var; doc comments
//! are the help text. The server's flags map onto `cairn_server`'s own
//! configuration types here, so nothing below the binary knows about the
//! command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use cairn_core::Limits;
use cairn_core::duration::parse_duration;
use cairn_redb::RedbOptions;
use cairn_server::auth::AuthMode;
use cairn_server::conn::ConnLimits;
use cairn_server::tls::TlsFiles;
use cairn_server::webhooks::WebhookConfig;
use cairn_server::{DEFAULT_BLOCKED_TOOLS, DEFAULT_MAX_REQUEST_BYTES, Policy, ServerConfig};
use cairn_store::lessor::LeaseConfig;

use crate::engine::Engine;
use cairn_store::compactor::Retention;

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
    /// OTLP/gRPC collector to send trace spans to (e.g.
    /// `http://127.0.0.1:4317`); off unless set. The standard variable.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", global = true)]
    pub otlp_endpoint: Option<String>,
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
    Serve(Box<ServeArgs>),
    /// Serve the seed tools (update_plan, todo_*, plan_*, wait, check_action)
    /// over MCP on stdin/stdout for one agent.
    Mcp(cairn_client::mcp::McpArgs),
    /// Sessions: create (under a parent), list as a tree, show, delete.
    Session {
        #[command(subcommand)]
        cmd: cairn_client::cli::SessionCmd,
        #[command(flatten)]
        client: cairn_client::cli::ClientArgs,
    },
    /// Plans: show, update from JSON, status, approve, reject, history.
    Plan {
        #[command(subcommand)]
        cmd: cairn_client::cli::PlanCmd,
        #[command(flatten)]
        client: cairn_client::cli::ClientArgs,
    },
    /// Todo lists: show, write from JSON.
    Todo {
        #[command(subcommand)]
        cmd: cairn_client::cli::TodoCmd,
        #[command(flatten)]
        client: cairn_client::cli::ClientArgs,
    },
    /// The store itself: a consistent online backup (admin only).
    Admin {
        #[command(subcommand)]
        cmd: cairn_client::cli::AdminCmd,
        #[command(flatten)]
        client: cairn_client::cli::ClientArgs,
    },
    /// Principals and their tokens (admin only, except `whoami`).
    Principal {
        #[command(subcommand)]
        cmd: cairn_client::cli::PrincipalCmd,
        #[command(flatten)]
        client: cairn_client::cli::ClientArgs,
    },
    /// Follow changes live; `--tree` shows a board of a session tree.
    Watch {
        #[command(flatten)]
        args: cairn_client::cli::WatchArgs,
        #[command(flatten)]
        client: cairn_client::cli::ClientArgs,
    },
    /// Mirror an agent CLI's own plans into Cairn through its hooks:
    /// `cairn hook install claude-code|codex|gemini`, then the CLI runs
    /// `cairn hook <cli>` at each event.
    Hook {
        #[command(subcommand)]
        cmd: cairn_client::hook::HookCmd,
    },
    /// What awaits your approval across every tree, oldest first.
    /// On a terminal, a live list you approve or reject from by number.
    Inbox {
        #[command(flatten)]
        args: cairn_client::cli::InboxArgs,
        #[command(flatten)]
        client: cairn_client::cli::ClientArgs,
    },
    /// Block until every plan in a session tree is completed.
    Wait {
        #[command(flatten)]
        args: cairn_client::cli::WaitArgs,
        #[command(flatten)]
        client: cairn_client::cli::ClientArgs,
    },
}

/// `--auth` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthArg {
    /// No authentication (loopback only, unless --allow-unauthenticated).
    Off,
    /// Bearer tokens of principals.
    Token,
}

/// Where the state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    /// One redb file under the data directory (one machine).
    Redb,
    /// An etcd v3 cluster (several replicas, several machines).
    Etcd,
}

/// `cairn serve` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on for gRPC (and gRPC-Web).
    #[arg(long, env = "CAIRN_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// Address of the web dashboard (off unless set), e.g. `127.0.0.1:8080`.
    #[arg(long, env = "CAIRN_WEB_LISTEN")]
    pub web_listen: Option<SocketAddr>,
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
    /// Approximate request bytes committed together in one durable transaction.
    #[arg(long, env = "CAIRN_COMMIT_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub commit_bytes: usize,
    /// Mutations queued for the writer before callers wait.
    #[arg(long, env = "CAIRN_COMMIT_QUEUE", default_value_t = 4096)]
    pub commit_queue: usize,
    /// Heartbeat interval of idle watch streams that ask for none (e.g. `10s`, `500ms`).
    #[arg(long, env = "CAIRN_PROGRESS_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub progress_interval: Duration,
    /// TTL of a session's lease when its keep-alive names none: no renewal
    /// for this long and the session is STALLED (e.g. `60s`, 1s to 1h).
    #[arg(long, env = "CAIRN_LEASE_TTL", default_value = "60s", value_parser = parse_duration)]
    pub lease_ttl: Duration,
    /// Grace after a stall before the session is LOST, when the keep-alive names none.
    #[arg(long, env = "CAIRN_LEASE_GRACE", default_value = "30s", value_parser = parse_duration)]
    pub lease_grace: Duration,
    /// A renewing agent with no change of its plan for this long is IDLE.
    #[arg(long, env = "CAIRN_LEASE_IDLE", default_value = "5m", value_parser = parse_duration)]
    pub lease_idle: Duration,
    /// Accept plain `http://` webhook URLs (a receiver on a trusted
    /// network); without it only `https://`.
    #[arg(long, env = "CAIRN_WEBHOOK_ALLOW_HTTP")]
    pub webhook_allow_http: bool,
    /// Attempts at one webhook delivery before it is dead-lettered.
    #[arg(long, env = "CAIRN_WEBHOOK_MAX_ATTEMPTS", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub webhook_max_attempts: u32,
    /// Delay before a webhook delivery's first retry; each later one
    /// doubles (with jitter), up to --webhook-max-backoff.
    #[arg(long, env = "CAIRN_WEBHOOK_BACKOFF", default_value = "1s", value_parser = parse_duration)]
    pub webhook_backoff: Duration,
    /// Longest delay between two attempts at a webhook delivery.
    #[arg(long, env = "CAIRN_WEBHOOK_MAX_BACKOFF", default_value = "5m", value_parser = parse_duration)]
    pub webhook_max_backoff: Duration,
    /// How long one webhook delivery attempt may take.
    #[arg(long, env = "CAIRN_WEBHOOK_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub webhook_timeout: Duration,
    /// Webhook deliveries in flight to one host at once.
    #[arg(long, env = "CAIRN_WEBHOOK_PER_HOST", default_value_t = 4)]
    pub webhook_per_host: usize,
    /// File of the key webhook secrets are sealed with (32 bytes, made
    /// 0600 when missing). Default: `webhook.key` in the data dir on redb;
    /// on etcd every replica needs the same file, so it must be given.
    #[arg(long, env = "CAIRN_WEBHOOK_KEY_FILE")]
    pub webhook_key_file: Option<PathBuf>,
    /// Most revisions the event log keeps for replay.
    #[arg(long, env = "CAIRN_RETENTION_REVISIONS", default_value_t = Retention::default().revisions)]
    pub retention_revisions: u64,
    /// Oldest revision the event log keeps for replay (e.g. `24h`).
    #[arg(long, env = "CAIRN_RETENTION_AGE", default_value = "24h", value_parser = parse_duration)]
    pub retention_age: Duration,
    /// How often the log is compacted (e.g. `60s`).
    #[arg(long, env = "CAIRN_COMPACTION_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub compaction_interval: Duration,
    /// Deepest session tree: sessions on the path from a root to a leaf.
    #[arg(long, env = "CAIRN_MAX_TREE_DEPTH", default_value_t = Limits::default().max_tree_depth)]
    pub max_tree_depth: usize,
    /// Largest stored plan (checklist and plan-mode state together), in bytes.
    #[arg(long, env = "CAIRN_MAX_PLAN_BYTES", default_value_t = Limits::default().max_plan_bytes)]
    pub max_plan_bytes: usize,
    /// Largest request message, in bytes.
    #[arg(long, env = "CAIRN_MAX_REQUEST_BYTES", default_value_t = DEFAULT_MAX_REQUEST_BYTES)]
    pub max_request_bytes: usize,
    /// Most connections open at once (gRPC and dashboard each); more are closed at once.
    #[arg(long, env = "CAIRN_MAX_CONNECTIONS", default_value_t = ConnLimits::default().max_connections)]
    pub max_connections: usize,
    /// Close connections with no request in flight for this long (open watch streams count).
    #[arg(long, env = "CAIRN_IDLE_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Close connections that take longer than this to send a whole request (or request headers).
    #[arg(long, env = "CAIRN_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// How long a request body may take to arrive, plus a second per 64 KiB it brings; slower, the request fails and its connection closes.
    #[arg(long, env = "CAIRN_BODY_READ_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub body_read_timeout: Duration,
    /// Most connections one peer address may hold at once (per listener).
    #[arg(long, env = "CAIRN_MAX_CONNECTIONS_PER_PEER", default_value_t = ConnLimits::default().max_connections_per_peer)]
    pub max_connections_per_peer: usize,
    /// On SIGTERM, how long open requests get to finish before their connections are closed.
    #[arg(long, env = "CAIRN_DRAIN_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// Bytes of database pages cached in memory.
    #[arg(long, env = "CAIRN_DB_CACHE_BYTES", default_value_t = RedbOptions::new("").cache_bytes)]
    pub db_cache_bytes: usize,
    /// Bytes of hot plans kept in memory, so `GetPlan` answers without a
    /// database read (0: off).
    #[arg(long, env = "CAIRN_PLAN_CACHE_BYTES", default_value_t = RedbOptions::new("").plan_cache_bytes)]
    pub plan_cache_bytes: u64,
    /// Verify every page of the database when starting (reads the whole file once).
    #[arg(long, env = "CAIRN_CHECK_INTEGRITY", default_value_t = true, action = clap::ArgAction::Set)]
    pub check_integrity: bool,
    /// How callers authenticate: `off` (loopback only, unless
    /// --allow-unauthenticated) or `token` (bearer tokens of principals).
    #[arg(long, env = "CAIRN_AUTH", value_enum, default_value_t = AuthArg::Off)]
    pub auth: AuthArg,
    /// File whose trimmed contents are the bootstrap admin's token (a mounted secret).
    #[arg(long, env = "CAIRN_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Accept serving with --auth off on addresses other than loopback:
    /// anyone who reaches it may do anything.
    #[arg(long, env = "CAIRN_ALLOW_UNAUTHENTICATED")]
    pub allow_unauthenticated: bool,
    /// Certificate chain (PEM) to serve TLS with, on both listeners.
    #[arg(long, env = "CAIRN_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, env = "CAIRN_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA (PEM) that client certificates must chain to: mutual TLS.
    #[arg(long, env = "CAIRN_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Address of the Prometheus metrics endpoint (`GET /metrics`), off unless set.
    #[arg(long, env = "CAIRN_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Where the state lives: `redb` (one file under --data-dir) or `etcd`
    /// (a cluster several replicas share).
    #[arg(long, env = "CAIRN_BACKEND", value_enum, default_value_t = BackendArg::Redb)]
    pub backend: BackendArg,
    /// etcd members, comma-separated (`--backend etcd`).
    #[arg(
        long,
        env = "CAIRN_ETCD_ENDPOINTS",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:2379"
    )]
    pub etcd_endpoints: Vec<String>,
    /// Prefix of Cairn's keys in etcd, so one cluster holds several deployments.
    #[arg(long, env = "CAIRN_ETCD_PREFIX", default_value = "/cairn/")]
    pub etcd_prefix: String,
    /// Deadline of each etcd call: past it, the call fails with UNAVAILABLE.
    #[arg(long, env = "CAIRN_ETCD_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub etcd_timeout: Duration,
    /// CA (PEM) of the etcd members' certificates (`https://` endpoints).
    #[arg(long, env = "CAIRN_ETCD_CA_FILE")]
    pub etcd_ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for etcd's mutual TLS.
    #[arg(long, env = "CAIRN_ETCD_CERT_FILE", requires = "etcd_key_file")]
    pub etcd_cert_file: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, env = "CAIRN_ETCD_KEY_FILE", requires = "etcd_cert_file")]
    pub etcd_key_file: Option<PathBuf>,
    /// etcd user, when the cluster has authentication on.
    #[arg(long, env = "CAIRN_ETCD_USER", requires = "etcd_password_file")]
    pub etcd_user: Option<String>,
    /// File holding that user's password.
    #[arg(long, env = "CAIRN_ETCD_PASSWORD_FILE", requires = "etcd_user")]
    pub etcd_password_file: Option<PathBuf>,
    /// Most operations etcd accepts in one transaction (its --max-txn-ops).
    #[arg(long, env = "CAIRN_ETCD_MAX_TXN_OPS", default_value_t = 128)]
    pub etcd_max_txn_ops: usize,
    /// TTL of a replica's presence in etcd: this long after a replica dies,
    /// the others take over the agent leases it held (each with a full
    /// lease TTL). etcd may raise it to its own minimum.
    #[arg(long, env = "CAIRN_ETCD_REPLICA_TTL", default_value = "10s", value_parser = parse_duration)]
    pub etcd_replica_ttl: Duration,
    /// Origins besides the listen address that may use the dashboard, e.g.
    /// `https://cairn.example.com` behind a reverse proxy (comma-separated).
    #[arg(long, env = "CAIRN_WEB_ORIGINS", value_delimiter = ',')]
    pub web_origin: Vec<String>,
}

impl ServeArgs {
    /// The engine these flags choose, and its options.
    pub fn engine(&self) -> Engine {
        match self.backend {
            BackendArg::Redb => {
                let mut redb = RedbOptions::new(&self.data_dir);
                redb.commit_batch = self.commit_batch.max(1);
                redb.queue_depth = self.commit_queue.max(1);
                redb.commit_bytes = self.commit_bytes.max(1);
                redb.check_integrity = self.check_integrity;
                redb.cache_bytes = self.db_cache_bytes;
                redb.plan_cache_bytes = self.plan_cache_bytes;
                Engine::Redb(redb)
            }
            BackendArg::Etcd => {
                let mut etcd = cairn_etcd::EtcdOptions::new(
                    self.etcd_endpoints
                        .iter()
                        .map(|e| e.trim().to_owned())
                        .filter(|e| !e.is_empty())
                        .collect(),
                );
                etcd.prefix.clone_from(&self.etcd_prefix);
                etcd.connection.timeout = self.etcd_timeout;
                etcd.connection.ca_file.clone_from(&self.etcd_ca_file);
                etcd.connection.identity_files =
                    self.etcd_cert_file.clone().zip(self.etcd_key_file.clone());
                etcd.connection.credentials =
                    self.etcd_user.clone().zip(self.etcd_password_file.clone());
                etcd.max_txn_ops = self.etcd_max_txn_ops.max(1);
                etcd.replica_ttl = self.etcd_replica_ttl.max(Duration::from_secs(1));
                Engine::Etcd(etcd)
            }
        }
    }

    /// Checks what clap cannot: lease timings within the core's bounds.
    pub fn check_leases(&self) -> Result<(), String> {
        cairn_core::liveness::validate(millis(self.lease_ttl), millis(self.lease_grace))
            .map_err(|e| format!("--lease-ttl/--lease-grace: {e}"))
    }

    /// The server configuration these flags describe.
    pub fn server_config(&self) -> ServerConfig {
        // Replicas share the store but not the renewals each receives:
        // each names itself, once per process.
        let holder = match self.backend {
            BackendArg::Etcd => replica_name(),
            BackendArg::Redb => String::new(),
        };
        ServerConfig {
            progress_interval: self.progress_interval,
            web_listen: self.web_listen,
            retention: Retention {
                revisions: self.retention_revisions,
                age: self.retention_age,
                interval: self.compaction_interval,
                ..Retention::default()
            },
            policy: Policy {
                limits: Limits {
                    max_plan_steps: self.max_plan_steps,
                    max_todos: self.max_todos,
                    max_text_bytes: self.max_text_bytes,
                    max_id_len: self.max_id_len,
                    max_labels: self.max_labels,
                    max_tree_depth: self.max_tree_depth.max(1),
                    max_plan_bytes: self.max_plan_bytes,
                },
                simple_task_threshold: self.simple_task_threshold,
                blocked_tools: self
                    .blocked_tools
                    .iter()
                    .map(|t| t.trim().to_owned())
                    .filter(|t| !t.is_empty())
                    .collect(),
            },
            web_origins: self.web_origin.clone(),
            leases: LeaseConfig {
                ttl_ms: millis(self.lease_ttl),
                grace_ms: millis(self.lease_grace),
                idle_after_ms: millis(self.lease_idle),
                holder: holder.clone(),
            },
            webhooks: WebhookConfig {
                allow_http: self.webhook_allow_http,
                max_attempts: self.webhook_max_attempts,
                backoff: self.webhook_backoff,
                max_backoff: self.webhook_max_backoff.max(self.webhook_backoff),
                timeout: self.webhook_timeout,
                per_host: self.webhook_per_host.max(1),
                key_file: self
                    .webhook_key_file
                    .clone()
                    .or_else(|| match self.backend {
                        BackendArg::Redb => Some(self.data_dir.join("webhook.key")),
                        BackendArg::Etcd => None,
                    }),
                replica: holder,
            },
            conn: ConnLimits {
                max_connections: self.max_connections.max(1),
                idle_timeout: self.idle_timeout,
                header_read_timeout: self.header_read_timeout,
                drain_timeout: self.drain_timeout,
                body_read_timeout: self.body_read_timeout,
                max_connections_per_peer: self.max_connections_per_peer.max(1),
            },
            max_request_bytes: self.max_request_bytes.max(1024),
            auth: match self.auth {
                AuthArg::Off => AuthMode::Off,
                AuthArg::Token => AuthMode::Token,
            },
            admin_token_file: self.admin_token_file.clone(),
            allow_unauthenticated: self.allow_unauthenticated,
            tls: self
                .tls_cert
                .clone()
                .zip(self.tls_key.clone())
                .map(|(cert, key)| TlsFiles {
                    cert,
                    key,
                    client_ca: self.tls_client_ca.clone(),
                }),
            // Wired by `main`, which knows the bound listener.
            web_extra: None,
            metrics_listen: self.metrics_listen,
            // Set by `main` when spans are exported.
            trace_context: false,
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// This process's name among replicas: host, process id and start time,
/// so that a restarted replica is a new one.
fn replica_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{host}-{}-{started}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_spec() {
        let cli = Cli::try_parse_from(["cairn", "serve"]).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("serve");
        };
        assert_eq!(args.listen.to_string(), "127.0.0.1:50051");
        let cfg = args.server_config();
        assert_eq!(cfg.policy, Policy::default());
        let crate::engine::Engine::Redb(redb) = args.engine() else {
            panic!("redb is the default engine");
        };
        assert_eq!(redb.commit_batch, 256);
        assert_eq!(cfg.progress_interval, Duration::from_secs(10));
        assert_eq!(cfg.retention, Retention::default());
    }

    #[test]
    fn blocked_tools_are_a_list() {
        let cli =
            Cli::try_parse_from(["cairn", "serve", "--blocked-tools", "write_file, shell:rm"])
                .unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("serve");
        };
        assert_eq!(
            args.server_config().policy.blocked_tools,
            vec!["write_file", "shell:rm"]
        );
    }
}
