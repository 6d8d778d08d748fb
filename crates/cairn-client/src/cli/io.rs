//! The CLI's I/O: input files, and output
//! that never lets server text drive the terminal.

use std::io::{IsTerminal, Read, Write};

use serde_json::Value;

use super::render;

pub type CliResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Colour only for a person at a terminal.
pub(crate) fn color() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

#[allow(clippy::print_stdout)] // printing is what the CLI is for
pub(crate) fn emit(text: &str) {
    print!("{text}");
    let _ = std::io::stdout().flush();
}

/// Plain text output (no styling of ours): every control character the
/// server's text may hold is made visible, line by line.
pub(crate) fn emit_plain(text: &str) {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        out.push_str(&render::printable(body));
        out.push_str(newline);
    }
    emit(&out);
}

pub(crate) fn emit_json(value: &Value) {
    emit(&format!("{value:#}\n"));
}

pub(crate) fn read_input(file: &str) -> Result<String, std::io::Error> {
    if file == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        Ok(s)
    } else {
        std::fs::read_to_string(file)
    }
}
