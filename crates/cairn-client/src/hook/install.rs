//! `cairn hook install|uninstall <cli>`: Cairn's hooks merged into the
//! CLI's own settings, next to every hook already there.
//!
//! - Claude Code: `settings.json` (`~/.claude`, or `$CLAUDE_CONFIG_DIR`;
//!   `.claude/` of the project with `--scope project`).
//! - Codex: `hooks.json` (Claude Code's format) in `$CODEX_HOME` (`~/.codex`)
//!   or the project's `.codex/`, and in `config.toml` the switches
//!   `features.hooks` and `tools.update_plan.enabled`.
//! - Gemini CLI: `settings.json` in `~/.gemini` (`$GEMINI_CLI_HOME/.gemini`)
//!   or the project's `.gemini/`, with `hooksConfig.enabled`.
//!
//! Cairn's entries are the ones whose command runs `… hook <cli>`: install
//! replaces them (so it is idempotent), uninstall removes them. Each file
//! is backed up (`<file>.cairn-backup`) before its first change.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::map::AgentCli;

/// Where the settings live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scope {
    /// The user's settings (every project).
    User,
    /// The current directory's project settings.
    Project,
}

/// `cairn hook install|uninstall`.
#[derive(Debug, Clone, clap::Args)]
pub struct InstallArgs {
    /// The CLI whose settings to change.
    #[arg(value_enum)]
    pub cli: AgentCli,
    #[arg(long, value_enum, default_value = "user")]
    pub scope: Scope,
    /// The server the hooks report to.
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    pub server: String,
    /// A token for the hooks (an orchestrator principal scoped to the
    /// parent session is the one to use). It is written into the settings
    /// file, which is then made readable by its owner only; leave it out to
    /// have the hooks read `CAIRN_TOKEN` from the agent's environment.
    #[arg(long)]
    pub token: Option<String>,
    /// The session every session of the agent hangs under.
    #[arg(long)]
    pub parent_session: Option<String>,
    /// The settings directory, instead of the CLI's default for the scope.
    #[arg(long)]
    pub config_dir: Option<PathBuf>,
    /// The `cairn` binary the hooks run (default: this one).
    #[arg(long)]
    pub cairn: Option<PathBuf>,
}

/// The hook events each CLI reports to Cairn, with their tool matcher.
fn events(cli: AgentCli) -> &'static [(&'static str, Option<&'static str>)] {
    match cli {
        AgentCli::ClaudeCode => &[
            ("SessionStart", None),
            ("SessionEnd", None),
            ("Stop", None),
            ("SubagentStart", None),
            ("SubagentStop", None),
            ("TaskCreated", None),
            ("TaskCompleted", None),
            ("PostToolUse", Some("TaskCreate|TaskUpdate")),
        ],
        AgentCli::Codex => &[
            ("SessionStart", None),
            ("Stop", None),
            ("SubagentStart", None),
            ("SubagentStop", None),
            ("PreToolUse", Some("update_plan")),
            ("PostToolUse", Some("update_plan")),
        ],
        AgentCli::Gemini => &[
            ("SessionStart", None),
            ("SessionEnd", None),
            ("BeforeTool", Some("write_todos")),
            ("AfterTool", Some("write_todos")),
        ],
    }
}

fn subcommand(cli: AgentCli) -> &'static str {
    match cli {
        AgentCli::ClaudeCode => "claude-code",
        AgentCli::Codex => "codex",
        AgentCli::Gemini => "gemini",
    }
}

/// The settings directory of a CLI for a scope.
fn config_dir(args: &InstallArgs) -> Result<PathBuf, String> {
    if let Some(dir) = &args.config_dir {
        return Ok(dir.clone());
    }
    let home = || {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .ok_or("HOME is not set: name the settings directory with --config-dir")
    };
    let cwd = || std::env::current_dir().map_err(|e| e.to_string());
    Ok(match (args.cli, args.scope) {
        (AgentCli::ClaudeCode, Scope::User) => match std::env::var_os("CLAUDE_CONFIG_DIR") {
            Some(d) => PathBuf::from(d),
            None => home()?.join(".claude"),
        },
        (AgentCli::ClaudeCode, Scope::Project) => cwd()?.join(".claude"),
        (AgentCli::Codex, Scope::User) => match std::env::var_os("CODEX_HOME") {
            Some(d) => PathBuf::from(d),
            None => home()?.join(".codex"),
        },
        (AgentCli::Codex, Scope::Project) => cwd()?.join(".codex"),
        (AgentCli::Gemini, Scope::User) => match std::env::var_os("GEMINI_CLI_HOME") {
            Some(d) => PathBuf::from(d).join(".gemini"),
            None => home()?.join(".gemini"),
        },
        (AgentCli::Gemini, Scope::Project) => cwd()?.join(".gemini"),
    })
}

/// The command a hook runs, each word quoted for the shell.
fn command(args: &InstallArgs) -> Result<String, String> {
    let cairn = match &args.cairn {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(|e| e.to_string())?,
    };
    let mut words = vec![
        cairn.display().to_string(),
        "hook".into(),
        subcommand(args.cli).into(),
        "--server".into(),
        args.server.clone(),
    ];
    if let Some(t) = &args.token {
        words.extend(["--token".into(), t.clone()]);
    }
    if let Some(p) = &args.parent_session {
        words.extend(["--parent-session".into(), p.clone()]);
    }
    Ok(words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" "))
}

/// A word for `sh -c`: as it is when plain, else in single quotes.
fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:=@,+".contains(c))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Whether a hook entry is Cairn's for this CLI.
fn is_ours(cli: AgentCli, hook: &Value) -> bool {
    hook.get("command")
        .and_then(Value::as_str)
        .is_some_and(|c| c.contains(&format!(" hook {}", subcommand(cli))))
}

/// `hooks` with Cairn's entries for `cli` removed, and added again when
/// `command` is given. Every other hook stays as it was.
pub fn merge_hooks(cli: AgentCli, map: &mut serde_json::Map<String, Value>, command: Option<&str>) {
    for groups in map.values_mut() {
        if let Some(groups) = groups.as_array_mut() {
            for group in groups.iter_mut() {
                if let Some(list) = group.get_mut("hooks").and_then(Value::as_array_mut) {
                    list.retain(|h| !is_ours(cli, h));
                }
            }
            groups.retain(|g| {
                g.get("hooks")
                    .and_then(Value::as_array)
                    .is_none_or(|l| !l.is_empty())
            });
        }
    }
    map.retain(|_, groups| groups.as_array().is_none_or(|g| !g.is_empty()));
    let Some(command) = command else {
        return;
    };
    // Five seconds, well past the hook's own bound: Claude Code and Codex
    // count seconds, Gemini CLI milliseconds.
    let timeout = if cli == AgentCli::Gemini { 5000 } else { 5 };
    for (event, matcher) in events(cli) {
        let mut group =
            json!({ "hooks": [{ "type": "command", "command": command, "timeout": timeout }] });
        if let Some(m) = matcher {
            group["matcher"] = json!(m);
        }
        let groups = map.entry((*event).to_owned()).or_insert_with(|| json!([]));
        if let Some(groups) = groups.as_array_mut() {
            groups.push(group);
        }
    }
    if cli == AgentCli::ClaudeCode {
        // Leaving plan mode waits for a person in Cairn: an hour, past the
        // hook's own --wait (55 minutes), after which Claude Code asks.
        let plan = command.replacen(" hook claude-code ", " hook claude-code-plan ", 1);
        let group = json!({
            "matcher": "ExitPlanMode",
            "hooks": [{ "type": "command", "command": plan, "timeout": 3600 }],
        });
        let groups = map
            .entry("PreToolUse".to_owned())
            .or_insert_with(|| json!([]));
        if let Some(groups) = groups.as_array_mut() {
            groups.push(group);
        }
    }
}

fn read_json(path: &Path) -> Result<Value, String> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => Ok(json!({})),
        Ok(text) => serde_json::from_str(&text)
            .map_err(|e| format!("{}: not JSON ({e}); left as it is", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(json!({})),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Writes `text` to `path`, after a backup of what was there (once), and
/// owner-only when it carries a token.
fn write(path: &Path, text: &str, secret: bool) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let backup = path.with_extension(format!(
        "{}.cairn-backup",
        path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ));
    if path.exists() && !backup.exists() {
        std::fs::copy(path, &backup).map_err(|e| format!("{}: {e}", backup.display()))?;
    }
    let tmp = path.with_extension("cairn-tmp");
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    // Owner-only from its first byte when it carries a token; otherwise
    // the settings file keeps the mode it had.
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        if secret {
            opts.mode(0o600);
        }
    }
    #[cfg(not(unix))]
    let _ = secret;
    let mut file = opts
        .open(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::io::Write::write_all(&mut file, text.as_bytes())
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    if !secret && let Ok(meta) = std::fs::metadata(path) {
        std::fs::set_permissions(&tmp, meta.permissions()).map_err(|e| e.to_string())?;
    }
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Changes the CLI's hook settings: Cairn's hooks with `command`, or none.
fn apply(args: &InstallArgs, command: Option<&str>) -> Result<Vec<PathBuf>, String> {
    let dir = config_dir(args)?;
    let secret = args.token.is_some();
    let mut changed = Vec::new();
    let hooks_file = match args.cli {
        AgentCli::ClaudeCode | AgentCli::Gemini => dir.join("settings.json"),
        AgentCli::Codex => dir.join("hooks.json"),
    };
    let mut settings = read_json(&hooks_file)?;
    let left = |what: &str| format!("{}: {what}; left as it is", hooks_file.display());
    let top = settings
        .as_object_mut()
        .ok_or_else(|| left("not a JSON object"))?;
    let hooks = top
        .entry("hooks")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| left("`hooks` is not an object"))?;
    merge_hooks(args.cli, hooks, command);
    if args.cli == AgentCli::Gemini && command.is_some() {
        top.entry("hooksConfig")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or_else(|| left("`hooksConfig` is not an object"))?
            .insert("enabled".into(), json!(true));
    }
    let text = serde_json::to_string_pretty(&settings).map_err(|e| e.to_string())? + "\n";
    write(&hooks_file, &text, secret)?;
    changed.push(hooks_file);
    if args.cli == AgentCli::Codex && command.is_some() {
        let config = dir.join("config.toml");
        let text = match std::fs::read_to_string(&config) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(format!("{}: {e}", config.display())),
        };
        let mut doc: toml_edit::DocumentMut = text
            .parse()
            .map_err(|e| format!("{}: not TOML ({e}); left as it is", config.display()))?;
        for (path, key) in [
            (&["features"][..], "hooks"),
            (&["tools", "update_plan"][..], "enabled"),
        ] {
            let mut table = doc.as_table_mut();
            for name in path {
                if !table.contains_key(name) {
                    let mut new = toml_edit::Table::new();
                    new.set_implicit(true);
                    table.insert(name, toml_edit::Item::Table(new));
                }
                table = table[name].as_table_mut().ok_or_else(|| {
                    format!(
                        "{}: `{name}` is not a table; left as it is",
                        config.display()
                    )
                })?;
            }
            table.insert(key, toml_edit::value(true));
        }
        write(&config, &doc.to_string(), false)?;
        changed.push(config);
    }
    Ok(changed)
}

/// `cairn hook install`.
pub fn install(args: &InstallArgs) -> Result<(), String> {
    let command = command(args)?;
    for path in apply(args, Some(&command))? {
        eprintln!("cairn hook install: {}", path.display());
    }
    if args.cli == AgentCli::Codex {
        eprintln!(
            "Codex runs hooks it trusts: review them once in Codex, or run it with --dangerously-bypass-hook-trust"
        );
    }
    Ok(())
}

/// `cairn hook uninstall`.
pub fn uninstall(args: &InstallArgs) -> Result<(), String> {
    for path in apply(args, None)? {
        eprintln!("cairn hook uninstall: {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_keeps_other_hooks_is_idempotent_and_uninstall_reverses_it() {
        let theirs = json!({
            "PostToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "lint.sh"}]}],
            "Stop": [{"hooks": [{"type": "command", "command": "notify.sh"}]}],
        });
        let mut hooks = theirs.as_object().unwrap().clone();
        let cmd = "/usr/bin/cairn hook claude-code --server http://127.0.0.1:50051";
        merge_hooks(AgentCli::ClaudeCode, &mut hooks, Some(cmd));
        let once = hooks.clone();
        merge_hooks(AgentCli::ClaudeCode, &mut hooks, Some(cmd));
        assert_eq!(hooks, once, "installing twice is installing once");
        // Leaving plan mode waits for a decision in Cairn, up to an hour.
        let plan = &hooks["PreToolUse"][0];
        assert_eq!(plan["matcher"], "ExitPlanMode");
        assert_eq!(
            plan["hooks"][0]["command"],
            "/usr/bin/cairn hook claude-code-plan --server http://127.0.0.1:50051"
        );
        assert_eq!(plan["hooks"][0]["timeout"], 3600);
        assert_eq!(hooks["PostToolUse"].as_array().unwrap().len(), 2);
        assert_eq!(hooks["PostToolUse"][0], theirs["PostToolUse"][0]);
        assert_eq!(hooks["PostToolUse"][1]["matcher"], "TaskCreate|TaskUpdate");
        merge_hooks(AgentCli::ClaudeCode, &mut hooks, None);
        assert_eq!(Value::Object(hooks), theirs);
    }

    fn args(cli: AgentCli, dir: &Path) -> InstallArgs {
        InstallArgs {
            cli,
            scope: Scope::User,
            server: "http://127.0.0.1:1".into(),
            token: None,
            parent_session: None,
            config_dir: Some(dir.to_owned()),
            cairn: Some("/bin/cairn".into()),
        }
    }

    #[test]
    fn malformed_settings_are_refused_and_left_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("settings.json");
        for bad in [
            "[1, 2]",
            r#"{"hooks": [1]}"#,
            r#"{"hooksConfig": "on"}"#,
            "{not json",
        ] {
            std::fs::write(&file, bad).unwrap();
            let e = install(&args(AgentCli::Gemini, dir.path())).unwrap_err();
            assert!(e.contains("left as it is"), "{e}");
            assert_eq!(std::fs::read_to_string(&file).unwrap(), bad);
        }
    }

    #[test]
    fn gemini_counts_milliseconds_and_a_token_makes_the_file_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = args(AgentCli::Gemini, dir.path());
        a.token = Some("cairn_secret".into());
        install(&a).unwrap();
        let file = dir.path().join("settings.json");
        let s = read_json(&file).unwrap();
        assert_eq!(s["hooks"]["BeforeTool"][0]["hooks"][0]["timeout"], 5000);
        assert_eq!(s["hooksConfig"]["enabled"], true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{mode:o}");
        }
        let claude = tempfile::tempdir().unwrap();
        install(&args(AgentCli::ClaudeCode, claude.path())).unwrap();
        let s = read_json(&claude.path().join("settings.json")).unwrap();
        assert_eq!(s["hooks"]["Stop"][0]["hooks"][0]["timeout"], 5);
    }

    #[test]
    fn words_are_quoted_for_the_shell() {
        assert_eq!(quote("http://127.0.0.1:50051"), "http://127.0.0.1:50051");
        assert_eq!(quote("it's me"), r"'it'\''s me'");
    }

    #[test]
    fn codex_gets_its_switches_and_settings_files_their_backup() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.toml"),
            "model = \"gpt-5\"\n[features]\nother = 1\n",
        )
        .unwrap();
        let args = InstallArgs {
            cli: AgentCli::Codex,
            scope: Scope::User,
            server: "http://127.0.0.1:1".into(),
            token: None,
            parent_session: Some("orch".into()),
            config_dir: Some(dir.path().to_owned()),
            cairn: Some("/bin/cairn".into()),
        };
        install(&args).unwrap();
        let toml = std::fs::read_to_string(dir.path().join("config.toml")).unwrap();
        assert!(
            toml.contains("model = \"gpt-5\"") && toml.contains("other = 1"),
            "{toml}"
        );
        assert!(
            toml.contains("hooks = true") && toml.contains("enabled = true"),
            "{toml}"
        );
        assert!(dir.path().join("config.toml.cairn-backup").exists());
        let hooks = read_json(&dir.path().join("hooks.json")).unwrap();
        let cmd = hooks["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
            .as_str()
            .unwrap();
        assert_eq!(
            cmd,
            "/bin/cairn hook codex --server http://127.0.0.1:1 --parent-session orch"
        );
        uninstall(&args).unwrap();
        let hooks = read_json(&dir.path().join("hooks.json")).unwrap();
        assert_eq!(hooks["hooks"], json!({}));
    }
}
