//! Durations as people write them in flags: `250ms`, `10s`, `5m`, `24h`,
//! `2d`.

use std::time::Duration;

/// Longest duration any flag takes: beyond it, timers would overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 86_400);

/// Parses `250ms`, `10s`, `5m`, `24h` or `2d` (a bare number is seconds),
/// at most a year.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = parse_any(text)?;
    if d > MAX_DURATION {
        return Err(format!("{text:?} is longer than the most allowed, 366d"));
    }
    Ok(d)
}

fn parse_any(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 500ms, 10s, 5m, 24h"))?;
    let secs = |k: u64| Duration::from_secs(n.saturating_mul(k));
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "" | "s" => Ok(secs(1)),
        "m" => Ok(secs(60)),
        "h" => Ok(secs(3600)),
        "d" => Ok(secs(86_400)),
        other => Err(format!(
            "unknown duration unit {other:?}: use ms, s, m, h or d"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999d").is_err());
        assert_eq!(parse_duration("366d"), Ok(MAX_DURATION));
    }
}
