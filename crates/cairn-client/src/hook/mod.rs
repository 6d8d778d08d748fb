//! `cairn hook`: the agents people already run (Claude Code, Codex, Gemini
//! CLI), mirrored into Cairn through their own hooks, unchanged.
//!
//! ```text
//!  agent CLI ──stdin JSON──▶ cairn hook <cli> ──map──▶ Observation
//!                                     │ append to the spool (in order, bounded)
//!                                     └ deliver the spool, oldest first, within --timeout
//!                                         ──▶ GetPlan / UpdatePlan(OBSERVED, expected_revision)
//! ```
//!
//! - [`map`]: a payload to an observation (pure; every captured payload is a
//!   test);
//! - [`spool`]: what is not delivered yet, in order, across processes;
//! - [`deliver`]: an observation applied to the server;
//! - [`install`]: Cairn's hooks merged into each CLI's settings;
//! - [`approval`]: Claude Code's `ExitPlanMode` held until a person decides
//!   in Cairn (this hook blocks, by design, and prints the decision).
//!
//! A hook never slows or breaks its agent: it exits 0, prints nothing on
//! stdout (the CLIs parse it as a decision), returns within `--timeout`
//! (1 s) whether the server is up or not, and says on stderr what it
//! skipped.

pub mod approval;
pub mod deliver;
pub mod install;
pub mod map;
pub mod spool;

use std::io::Read as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cairn_core::duration::parse_duration;

use crate::conn::ServerArgs;
use deliver::Failed;
use map::AgentCli;
use spool::Spool;

/// Largest payload read from stdin.
const MAX_PAYLOAD: u64 = 4 * 1024 * 1024;

/// `cairn hook` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum HookCmd {
    /// Mirror one Claude Code hook payload (stdin) into Cairn.
    ClaudeCode(HookArgs),
    /// Claude Code's `ExitPlanMode` (a PreToolUse payload on stdin): the
    /// plan awaits approval in Cairn, and the decision is Claude Code's.
    ClaudeCodePlan(approval::ApprovalArgs),
    /// Mirror one Codex hook payload (stdin) into Cairn.
    Codex(HookArgs),
    /// Mirror one Gemini CLI hook payload (stdin) into Cairn.
    Gemini(HookArgs),
    /// Deliver what the hooks spooled while the server was away.
    Flush(FlushArgs),
    /// Merge Cairn's hooks into a CLI's settings (keeping every other hook).
    Install(install::InstallArgs),
    /// Remove Cairn's hooks from a CLI's settings.
    Uninstall(install::InstallArgs),
}

/// What every hook invocation takes.
#[derive(Debug, Clone, clap::Args)]
pub struct HookArgs {
    /// The Cairn server, and the token of the principal the hooks act as.
    #[command(flatten)]
    pub server: ServerArgs,
    /// The session every session of the agent hangs under (an
    /// orchestrator's); it must exist.
    #[arg(long, env = "CAIRN_PARENT_SESSION_ID")]
    pub parent_session: Option<String>,
    /// How long one hook may take, the server up or not.
    #[arg(long, env = "CAIRN_HOOK_TIMEOUT", default_value = "1s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Where undelivered observations wait (default: the user's state dir,
    /// `~/.local/state/cairn/hooks`).
    #[arg(long, env = "CAIRN_HOOK_SPOOL")]
    pub spool_dir: Option<PathBuf>,
}

/// `cairn hook flush`.
#[derive(Debug, Clone, clap::Args)]
pub struct FlushArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// How long to keep delivering.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub timeout: Duration,
    #[arg(long, env = "CAIRN_HOOK_SPOOL")]
    pub spool_dir: Option<PathBuf>,
}

/// The default spool directory.
pub fn default_spool() -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir);
    state.join("cairn/hooks")
}

/// Runs a hook subcommand. Hooks always succeed (exit 0); `flush`,
/// `install` and `uninstall` report failures.
pub async fn run(cmd: HookCmd) -> Result<(), String> {
    match cmd {
        HookCmd::ClaudeCode(args) => hook(AgentCli::ClaudeCode, &args).await,
        HookCmd::ClaudeCodePlan(args) => approval::run(&args).await,
        HookCmd::Codex(args) => hook(AgentCli::Codex, &args).await,
        HookCmd::Gemini(args) => hook(AgentCli::Gemini, &args).await,
        HookCmd::Flush(args) => flush(&args).await,
        HookCmd::Install(args) => install::install(&args),
        HookCmd::Uninstall(args) => install::uninstall(&args),
    }
}

/// One hook invocation: never an error, whatever happens.
async fn hook(cli: AgentCli, args: &HookArgs) -> Result<(), String> {
    let until = Instant::now() + args.timeout;
    if let Err(e) = observe_and_deliver(cli, args, until).await {
        eprintln!("cairn hook {}: {e}", cli.prefix());
    }
    Ok(())
}

async fn observe_and_deliver(cli: AgentCli, args: &HookArgs, until: Instant) -> Result<(), String> {
    let mut text = String::new();
    std::io::stdin()
        .take(MAX_PAYLOAD)
        .read_to_string(&mut text)
        .map_err(|e| format!("reading the payload: {e}"))?;
    let payload: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("skipped a payload that is not JSON ({e})"))?;
    let observed = map::observe(cli, &payload, args.parent_session.as_deref())
        .map_err(|e| format!("skipped a payload: {e}"))?;
    let dir = args.spool_dir.clone().unwrap_or_else(default_spool);
    let spool = Spool::open(&dir)?;
    // Spooled first, delivered from the spool: whatever the server's
    // state, this observation goes after every earlier one.
    spool.append(&observed.into_iter().collect::<Vec<_>>(), until)?;
    if spool.backing_off()? {
        // Cairn failed a moment ago: every hook would wait out its timeout
        // again and slow the agent down. Spooled; a later hook delivers.
        return Err(format!(
            "Cairn was unreachable moments ago: spooled in {}",
            spool_name(&args.server)
        ));
    }
    // One process delivers at a time. Another one delivering may have
    // looked at the spool before this observation arrived: wait for it to
    // finish, then deliver what is left, until the spool is empty or the
    // time is up.
    loop {
        if let Some(delivering) = spool.try_deliver()? {
            let out = drain(&spool, &delivering, &args.server, until).await;
            drop(delivering);
            if out.is_err() {
                spool.back_off()?;
            }
            out?;
        }
        if spool.pending()? == 0 {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(format!(
                "another hook is delivering: left in {}",
                spool_name(&args.server)
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Delivers the spool, oldest first, until it is empty, the server fails,
/// or time is up.
async fn drain(
    spool: &Spool,
    delivering: &spool::Delivering,
    server: &ServerArgs,
    until: Instant,
) -> Result<(), String> {
    let api = server
        .connect_lazy(until.saturating_duration_since(Instant::now()))
        .map_err(|e| e.to_string())?;
    while let Some((o, next)) = spool.peek(delivering, until)? {
        match deliver::apply(&api, &o, until).await {
            Ok(()) => {}
            Err(Failed::Refused(why)) => {
                eprintln!(
                    "cairn hook: the server refused a change to {}, dropped: {why}",
                    o.place.session_id
                );
            }
            Err(Failed::Retry(why)) => {
                return Err(format!(
                    "Cairn is not reachable ({why}): spooled in {}, delivered by the next hook or `cairn hook flush`",
                    spool_name(server)
                ));
            }
        }
        spool.done(delivering, next, until)?;
    }
    spool.clear_back_off();
    Ok(())
}

fn spool_name(server: &ServerArgs) -> String {
    format!("the spool (for {})", server.server)
}

async fn flush(args: &FlushArgs) -> Result<(), String> {
    let until = Instant::now() + args.timeout;
    let dir = args.spool_dir.clone().unwrap_or_else(default_spool);
    let spool = Spool::open(&dir)?;
    let delivering = spool.deliver()?;
    drain(&spool, &delivering, &args.server, until).await?;
    let left = spool.pending()?;
    if left > 0 {
        return Err(format!("{left} bytes of observations are still spooled"));
    }
    Ok(())
}
