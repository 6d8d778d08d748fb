//! The arguments of each client subcommand; every flag with a `CAIRN_*`
//! env var where a person would set it once.

use std::time::Duration;

use cairn_core::duration::parse_duration;
use clap::{Subcommand, ValueEnum};

use crate::conn::ServerArgs;

/// Output format of client commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// For people: boxes, trees and tables.
    Text,
    /// One JSON document, for scripts.
    Json,
}

/// Flags every client command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// The server, and who we are to it.
    #[command(flatten)]
    pub server: ServerArgs,
    /// Output format.
    #[arg(long, env = "CAIRN_OUTPUT", value_enum, default_value_t = Output::Text, global = true)]
    pub output: Output,
}

/// `cairn session …`
#[derive(Debug, Clone, Subcommand)]
pub enum SessionCmd {
    /// Create a session (the server picks an id when none is given).
    Create {
        /// Session id.
        id: Option<String>,
        /// Parent session (an orchestrator's).
        #[arg(long)]
        parent: Option<String>,
        /// Agent working in it.
        #[arg(long)]
        agent: Option<String>,
        /// Title.
        #[arg(long)]
        title: Option<String>,
    },
    /// List sessions as a tree.
    List,
    /// Show one session with its plan.
    Show {
        /// Session id.
        id: String,
    },
    /// Delete a session (`--cascade` for its subtree).
    Delete {
        /// Session id.
        id: String,
        /// Delete its descendants too.
        #[arg(long)]
        cascade: bool,
    },
}

/// `cairn plan …`
#[derive(Debug, Clone, Subcommand)]
pub enum PlanCmd {
    /// Show a session's checklist.
    Show {
        /// Session id.
        session: String,
    },
    /// Replace the checklist from JSON `{"explanation": …, "plan": [{"step", "status"}]}`.
    Update {
        /// Session id.
        session: String,
        /// File with the JSON, or `-` for standard input.
        #[arg(long, default_value = "-")]
        file: String,
    },
    /// Show plan mode: mode, goal, pending plan, progress.
    Status {
        /// Session id.
        session: String,
    },
    /// Approve the plan awaiting approval.
    Approve {
        /// Session id.
        session: String,
        /// Who approves.
        #[arg(long, env = "USER", default_value = "cli")]
        approver: String,
    },
    /// Reject the plan awaiting approval.
    Reject {
        /// Session id.
        session: String,
        /// Why.
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// List past plans.
    History {
        /// Session id.
        session: String,
    },
}

/// `cairn todo …`
#[derive(Debug, Clone, Subcommand)]
pub enum TodoCmd {
    /// Show an agent's todo list.
    Show {
        /// Agent id.
        agent: String,
    },
    /// Replace an agent's list from JSON `[{"id", "content", "status", "priority"}]`.
    Write {
        /// Agent id.
        agent: String,
        /// File with the JSON, or `-` for standard input.
        #[arg(long, default_value = "-")]
        file: String,
    },
}

/// `cairn watch` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct WatchArgs {
    /// A session tree, shown as a live board.
    #[arg(long, group = "target")]
    pub tree: Option<String>,
    /// One session's events.
    #[arg(long, group = "target")]
    pub session: Option<String>,
    /// One agent's todo events.
    #[arg(long, group = "target")]
    pub agent: Option<String>,
    /// Every event.
    #[arg(long, group = "target")]
    pub all: bool,
    /// Replay from this revision (events only, not the board).
    #[arg(long)]
    pub from_revision: Option<u64>,
}

/// `cairn inbox` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct InboxArgs {
    /// Print the inbox once and exit (the default when not on a terminal,
    /// and with `--output json`).
    #[arg(long)]
    pub once: bool,
}

/// `cairn wait` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct WaitArgs {
    /// Wait for every plan in this session tree to be completed.
    #[arg(long)]
    pub tree: String,
    /// Give up after this long (e.g. `10m`).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Keep waiting when a sub-agent is lost (by default the wait ends at
    /// once, naming it).
    #[arg(long)]
    pub keep_waiting: bool,
}

/// `cairn admin …` (admin only).
#[derive(Debug, Clone, Subcommand)]
pub enum AdminCmd {
    /// A consistent online copy of the whole store (redb backend), taken
    /// while the server keeps writing; save it as `cairn.redb` in an empty
    /// data directory to restore.
    Backup {
        /// File to write (must not exist yet).
        #[arg(long)]
        out: std::path::PathBuf,
    },
    /// Webhook subscriptions (Standard Webhooks) and their dead letters.
    #[command(subcommand)]
    Webhook(WebhookCmd),
}

/// `cairn admin webhook …`
#[derive(Debug, Clone, Subcommand)]
pub enum WebhookCmd {
    /// Subscribe a URL; prints the `whsec_` signing secret (shown once).
    Create {
        /// Subscription id.
        id: String,
        /// Where deliveries are POSTed (https://).
        #[arg(long)]
        url: String,
        /// An event type: approval.requested, approval.decided,
        /// approval.escalated, plan.completed, session.lost (repeat for several).
        #[arg(long = "event", required = true)]
        events: Vec<String>,
        /// Only events of this session's tree.
        #[arg(long)]
        tree: Option<String>,
    },
    /// List the subscriptions and how far each has delivered.
    List,
    /// Delete a subscription, its undelivered events and dead letters.
    Delete {
        /// Subscription id.
        id: String,
    },
    /// List a subscription's dead letters.
    Dead {
        /// Subscription id.
        id: String,
    },
    /// Queue a dead letter for delivery again.
    Retry {
        /// Subscription id.
        id: String,
        /// The dead letter's key (from `dead`).
        key: String,
    },
}

/// `cairn principal …` (admin only, except `whoami`).
#[derive(Debug, Clone, Subcommand)]
pub enum PrincipalCmd {
    /// Create a principal and print its token (shown once).
    Create {
        /// Principal id.
        id: String,
        /// A role: admin, orchestrator, agent, approver or viewer (repeat for several).
        #[arg(long = "role", required = true)]
        roles: Vec<String>,
        /// An agent it acts as (repeat for several).
        #[arg(long = "agent")]
        agents: Vec<String>,
        /// A session subtree it may touch (repeat; none: the whole store).
        #[arg(long = "root")]
        roots: Vec<String>,
    },
    /// List principals.
    List,
    /// Delete a principal: its token stops working, its watches end.
    Delete {
        /// Principal id.
        id: String,
    },
    /// Replace a principal's token and print the new one (shown once).
    Rotate {
        /// Principal id.
        id: String,
    },
    /// Show who the token in use belongs to.
    Whoami,
}
