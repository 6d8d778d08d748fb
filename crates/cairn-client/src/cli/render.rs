//! Terminal rendering, pure: plain structs in, text out.
//!
//! The look docs/rules.md (Rendering) gives: a box headed `📋 Tasks` with `✓` (completed, struck
//! through), `▶` (in progress, bold) and `○` (pending); `📋 No tasks` when
//! empty. With `color` off (stdout is not a terminal, or `NO_COLOR`), the
//! same layout without escape codes.

use std::borrow::Cow;
use std::fmt::Write as _;

use unicode_width::UnicodeWidthStr;

use cairn_api as pb;

use crate::view::{ago, micros, secs_between};

/// Text from the server made safe for a terminal: a step or todo written by
/// anyone must not move the cursor, clear the screen or retitle the window.
/// Line breaks and tabs become spaces; other control characters become
/// their visible Unicode pictures (`␛` for ESC), so nothing is hidden.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| match c {
                '\n' | '\r' | '\t' => ' ',
                '\u{0}'..='\u{1f}' => char::from_u32(0x2400 + u32::from(c)).unwrap_or('\u{fffd}'),
                '\u{7f}' => '\u{2421}',
                c if c.is_control() => '\u{fffd}',
                c => c,
            })
            .collect(),
    )
}

/// The inbox as a numbered table, oldest first, with how to decide
/// (`cairn inbox` printed once).
pub fn inbox(items: &[pb::InboxItem], now: i64) -> String {
    let mut out = inbox_table(items, now);
    if !items.is_empty() {
        out.push_str(
            "\nDecide on a plan with `cairn plan approve SESSION` or `cairn plan reject SESSION --reason …`;\non a modification with the ApproveModification or RejectModification RPC.\n",
        );
    }
    out
}

/// The inbox as a numbered table, oldest first: how long each item has
/// waited at `now` (micros), its session and agent, and what it asks.
pub fn inbox_table(items: &[pb::InboxItem], now: i64) -> String {
    if items.is_empty() {
        return "Nothing awaits your approval.\n".into();
    }
    let mut out = String::from(" #  WAITING  SESSION / AGENT  ASKS\n");
    for (n, i) in items.iter().enumerate() {
        let waited = ago(secs_between(micros(i.waiting_since.as_ref()), now));
        let asks = match (&i.modification, i.kind()) {
            (Some(m), pb::InboxItemKind::Modification) => format!(
                "modification {} of step {}: {} ({})",
                m.modification_id, m.step_id, m.new_description, m.reason
            ),
            _ => format!("plan {}: {}", i.plan_id, i.summary),
        };
        let _ = writeln!(
            out,
            "{:>2}  {waited:>7}  {} / {}  {}",
            n + 1,
            printable(&i.session_id),
            printable(&i.agent_id),
            printable(&asks)
        );
        if !i.goal.is_empty() {
            let _ = writeln!(out, "    {:>7}  goal: {}", "", printable(&i.goal));
        }
        if let Some(d) = &i.deadline {
            let text = cairn_api::shapes::deadline_text(d, now);
            let _ = writeln!(out, "    {:>7}  deadline: {}", "", printable(&text));
        }
    }
    out
}

/// Status of one rendered line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Done,
    Active,
    Pending,
    /// Dropped without being done (an observed agent's plan).
    Cancelled,
}

impl Mark {
    fn glyph(self) -> &'static str {
        match self {
            Mark::Done => "✓",
            Mark::Active => "▶",
            Mark::Pending => "○",
            Mark::Cancelled => "✗",
        }
    }
}

const BOLD: &str = "\x1b[1m";
const STRIKE: &str = "\x1b[9m";
const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";
const RED: &str = "\x1b[31m";
const YELLOW: &str = "\x1b[33m";

/// The task box for `(mark, text)` items.
pub fn task_box(items: &[(Mark, String)], color: bool) -> String {
    if items.is_empty() {
        return "📋 No tasks\n".to_owned();
    }
    let title = "📋 Tasks";
    let body: Vec<String> = items
        .iter()
        .map(|(mark, text)| format!("{} {}", mark.glyph(), printable(text)))
        .collect();
    let inner = body
        .iter()
        .map(|l| l.width())
        .chain(std::iter::once(title.width() + 2))
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    let top_fill = inner.saturating_sub(title.width() + 1);
    let _ = writeln!(out, "╭─ {title} {}╮", "─".repeat(top_fill));
    for ((mark, _), line) in items.iter().zip(&body) {
        let pad = " ".repeat(inner - line.width());
        let styled = if color {
            // Style the text, not the space after the glyph.
            let (glyph, text) = line.split_at(mark.glyph().len() + 1);
            match mark {
                Mark::Done | Mark::Cancelled => {
                    format!("{DIM}{glyph}{RESET}{STRIKE}{text}{RESET}")
                }
                Mark::Active => format!("{BOLD}{glyph}{text}{RESET}"),
                Mark::Pending => line.clone(),
            }
        } else {
            line.clone()
        };
        let _ = writeln!(out, "│ {styled}{pad} │");
    }
    let _ = writeln!(out, "╰{}╯", "─".repeat(inner + 2));
    out
}

/// A progress bar of `width` cells.
pub fn bar(done: usize, total: usize, width: usize) -> String {
    if total == 0 {
        return "·".repeat(width);
    }
    let filled = (done * width + total / 2) / total;
    format!(
        "{}{}",
        "█".repeat(filled.min(width)),
        "░".repeat(width - filled.min(width))
    )
}

/// One row of the live board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardRow {
    /// Depth in the tree (0 for the root).
    pub depth: usize,
    pub session_id: String,
    pub agent_id: String,
    pub done: usize,
    pub total: usize,
    /// The in-progress step, if any.
    pub current: Option<String>,
    /// `normal`, `planning` or `awaiting approval`.
    pub mode: String,
    /// Seconds since the session or its plan last changed.
    pub idle_secs: u64,
    /// The agent's liveness (`lost`, …) and seconds since its last sign
    /// of life, for a leased session.
    pub liveness: Option<(String, u64)>,
}

/// The liveness column: the state in capitals and the time since the last
/// sign of life (`LOST 2m`), red for the lost and yellow for the stalled.
fn liveness_cell(l: Option<&(String, u64)>, color: bool) -> String {
    let Some((state, secs)) = l else {
        return clip("—", 11);
    };
    let cell = clip(&format!("{} {}", state.to_uppercase(), ago(*secs)), 11);
    match (color, state.as_str()) {
        (true, "lost") => format!("{BOLD}{RED}{cell}{RESET}"),
        (true, "stalled") => format!("{YELLOW}{cell}{RESET}"),
        _ => cell,
    }
}

fn clip(text: &str, width: usize) -> String {
    let text = printable(text);
    let text = text.as_ref();
    if text.width() <= width {
        return format!("{text}{}", " ".repeat(width - text.width()));
    }
    let mut out = String::new();
    for c in text.chars() {
        if out.width() + c.to_string().width() > width.saturating_sub(1) {
            break;
        }
        out.push(c);
    }
    out.push('…');
    let w = out.width();
    format!("{out}{}", " ".repeat(width.saturating_sub(w)))
}

/// The live board: one row per session, indented by depth.
pub fn board(title: &str, rows: &[BoardRow], revision: u64, color: bool) -> String {
    let mut out = String::new();
    let head = format!("cairn · {} · revision {revision}", printable(title));
    if color {
        let _ = writeln!(out, "{BOLD}{head}{RESET}");
    } else {
        let _ = writeln!(out, "{head}");
    }
    let _ = writeln!(
        out,
        "{}  {}  {}  {:>5}  {}  {}  {}  {:>4}",
        clip("SESSION", 28),
        clip("AGENT", 12),
        clip("PROGRESS", 10),
        "",
        clip("CURRENT STEP", 32),
        clip("MODE", 17),
        clip("AGENT LIFE", 11),
        "AGO"
    );
    if rows.is_empty() {
        let _ = writeln!(out, "(no sessions)");
    }
    for r in rows {
        let name = format!("{}{}", "  ".repeat(r.depth), r.session_id);
        let current = r.current.clone().unwrap_or_else(|| {
            if r.total > 0 && r.done == r.total {
                "done".into()
            } else {
                "—".into()
            }
        });
        let mode = if color && r.mode != "normal" {
            format!("{BOLD}{}{RESET}", clip(&r.mode, 17))
        } else {
            clip(&r.mode, 17)
        };
        let _ = writeln!(
            out,
            "{}  {}  {}  {:>5}  {}  {}  {}  {:>4}",
            clip(&name, 28),
            clip(&r.agent_id, 12),
            bar(r.done, r.total, 10),
            format!("{}/{}", r.done, r.total),
            clip(&current, 32),
            mode,
            liveness_cell(r.liveness.as_ref(), color),
            ago(r.idle_secs)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inbox() {
        let at = |secs: i64| {
            Some(prost_types::Timestamp {
                seconds: secs,
                nanos: 0,
            })
        };
        let items = [
            pb::InboxItem {
                session_id: "orch:coder".into(),
                agent_id: "coder".into(),
                kind: pb::InboxItemKind::Plan.into(),
                plan_id: "plan_2026-12-01_abcdef".into(),
                goal: "Add authentication".into(),
                summary: "JWT login\u{1b}[2J".into(),
                waiting_since: at(1_000),
                deadline: Some(pb::Deadline {
                    deadline_time: at(1_600),
                    policy: pb::DeadlinePolicy::Reject.into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            pb::InboxItem {
                session_id: "orch:tester".into(),
                agent_id: "tester".into(),
                kind: pb::InboxItemKind::Modification.into(),
                plan_id: "plan_2026-11-30_zyxwvu".into(),
                modification: Some(pb::PlanModification {
                    modification_id: 1,
                    step_id: 2,
                    reason: "flaky".into(),
                    new_description: "Retry the login test".into(),
                    ..Default::default()
                }),
                waiting_since: at(1_200),
                deadline: Some(pb::Deadline {
                    deadline_time: at(1_290),
                    escalated_to: "role:admin".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ];
        insta::assert_snapshot!(inbox(&items, 1_300 * 1_000_000));
        assert_eq!(inbox(&[], 0), "Nothing awaits your approval.\n");
    }

    fn items() -> Vec<(Mark, String)> {
        vec![
            (Mark::Done, "Design the database schema".into()),
            (Mark::Active, "Implement the sign-up API".into()),
            (Mark::Pending, "Implement the login API".into()),
        ]
    }

    #[test]
    fn the_seed_box_plain() {
        insta::assert_snapshot!(task_box(&items(), false));
    }

    #[test]
    fn the_seed_box_in_colour() {
        insta::assert_snapshot!(task_box(&items(), true).replace('\x1b', "<ESC>"));
    }

    #[test]
    fn control_characters_never_reach_the_terminal() {
        let hostile = "a\u{1b}[2J\u{1b}]0;pwned\u{7}b\nc\u{9b}d\u{7f}";
        let text = task_box(&[(Mark::Active, hostile.into())], false);
        assert!(
            !text.contains(['\u{1b}', '\u{7}', '\u{9b}', '\u{7f}']),
            "{text:?}"
        );
        // In colour, the only escapes are the box's own bold and reset.
        let coloured = task_box(&[(Mark::Active, hostile.into())], true);
        assert_eq!(coloured.matches('\u{1b}').count(), 2, "{coloured:?}");
        assert_eq!(printable(hostile), "a␛[2J␛]0;pwned␇b c\u{fffd}d␡");
        let board = board("t\u{1b}", &[], 1, false);
        assert!(!board.contains('\u{1b}'));
    }

    #[test]
    fn an_empty_list() {
        assert_eq!(task_box(&[], false), "📋 No tasks\n");
    }

    #[test]
    fn wide_text_keeps_the_box_aligned() {
        let text = task_box(&[(Mark::Active, "设计数据库 schema".into())], false);
        let widths: Vec<usize> = text.lines().map(UnicodeWidthStr::width).collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "{text}");
    }

    #[test]
    fn the_board() {
        let rows = vec![
            BoardRow {
                depth: 0,
                session_id: "orch".into(),
                agent_id: "main".into(),
                done: 0,
                total: 0,
                current: None,
                mode: "normal".into(),
                idle_secs: 3,
                liveness: None,
            },
            BoardRow {
                depth: 1,
                session_id: "orch:coder".into(),
                agent_id: "coder".into(),
                done: 2,
                total: 5,
                current: Some("Implement the login API".into()),
                mode: "normal".into(),
                idle_secs: 75,
                liveness: Some(("lost".into(), 130)),
            },
            BoardRow {
                depth: 1,
                session_id: "orch:researcher".into(),
                agent_id: "researcher".into(),
                done: 0,
                total: 0,
                current: None,
                mode: "awaiting approval".into(),
                idle_secs: 7200,
                liveness: Some(("active".into(), 4)),
            },
        ];
        insta::assert_snapshot!(board("tree orch", &rows, 42, false));
        // In colour the lost stand out in bold red.
        assert!(board("t", &rows, 1, true).contains("\x1b[1m\x1b[31mLOST 2m"));
    }
}
