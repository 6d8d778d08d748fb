//! Server time: every stored timestamp is the server's, in microseconds.

/// Server time in microseconds since the Unix epoch. The server owns every
/// timestamp so that clients with skewed clocks cannot reorder history.
pub type Micros = i64;

/// ISO-8601 / RFC 3339 UTC text of a server time, to the millisecond, as
/// `todo_read` shows `created_at` / `updated_at`.
pub fn rfc3339(micros: Micros) -> String {
    let secs = micros.div_euclid(1_000_000);
    let millis = micros.rem_euclid(1_000_000) / 1000;
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let day = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        day / 3600,
        day % 3600 / 60,
        day % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// algorithm), so no date crate is needed for one format.
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_as_text() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_011_733_123_456), "2026-11-30T04:08:53.123Z");
    }
}
