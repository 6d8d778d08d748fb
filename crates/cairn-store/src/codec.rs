//! How records are encoded: one format byte, then JSON of serde structs
//! with `#[serde(default)]`, LZ4-compressed when that makes it smaller.
//! Adding a field never breaks reading old records. Compression takes a
//! plan record or a logged revision to about a third of its JSON (field
//! names repeat), which means fewer pages for redb to copy and write per
//! commit and a smaller file to verify at start.
//!
//! A logged revision puts its commit time (8 bytes, little-endian) between
//! the format byte and the rest, so the compactor reads times without
//! decoding revisions.

use cairn_core::error::{Error, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::records::Revision;

const FORMAT_JSON: u8 = 1;
/// A revision: its commit time, then JSON.
const FORMAT_TIMED_JSON: u8 = 2;
/// LZ4 of the JSON (its length first, 4 bytes little-endian).
const FORMAT_LZ4_JSON: u8 = 3;
/// A revision: its commit time, then LZ4 of the JSON.
const FORMAT_TIMED_LZ4_JSON: u8 = 4;

/// Shorter JSON is stored as it is: compressing it saves little.
const COMPRESS_FROM: usize = 192;
/// The most a compressed record may claim to expand to; a larger claim is
/// damage, not a record (the limits keep real ones far below).
const MAX_RECORD_BYTES: usize = 64 * 1024 * 1024;

fn json<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    // Room for a typical record up front: growing a buffer by doubling
    // from one byte was a visible share of the writer's allocations.
    let mut out = Vec::with_capacity(1024);
    serde_json::to_writer(&mut out, value).map_err(|e| Error::Storage(format!("encode: {e}")))?;
    Ok(out)
}

/// `head`, then the JSON: compressed (and the format byte `lz4`) when that
/// is smaller, else as it is (and `plain`).
fn frame(plain: u8, lz4: u8, head: &[u8], body: &[u8]) -> Vec<u8> {
    if body.len() >= COMPRESS_FROM {
        let packed = lz4_flex::block::compress_prepend_size(body);
        if packed.len() < body.len() {
            let mut out = Vec::with_capacity(1 + head.len() + packed.len());
            out.push(lz4);
            out.extend_from_slice(head);
            out.extend_from_slice(&packed);
            return out;
        }
    }
    let mut out = Vec::with_capacity(1 + head.len() + body.len());
    out.push(plain);
    out.extend_from_slice(head);
    out.extend_from_slice(body);
    out
}

/// The JSON of a compressed body.
fn unpack(packed: &[u8]) -> Result<Vec<u8>> {
    let claimed = packed
        .get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| damaged("a compressed record shorter than its length"))?;
    if usize::try_from(claimed).map_or(true, |n| n > MAX_RECORD_BYTES) {
        return Err(damaged("a compressed record claims an impossible length"));
    }
    lz4_flex::block::decompress_size_prepended(packed).map_err(|e| damaged(&e.to_string()))
}

fn from_json<T: DeserializeOwned>(body: &[u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| damaged(&e.to_string()))
}

/// A record's stored bytes.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    Ok(encode_sized(value)?.0)
}

/// A record's stored bytes and its size decoded, which limits are
/// checked against (what compression saves on disk it costs in memory).
pub fn encode_sized<T: Serialize>(value: &T) -> Result<(Vec<u8>, usize)> {
    let body = json(value)?;
    Ok((frame(FORMAT_JSON, FORMAT_LZ4_JSON, &[], &body), body.len()))
}

fn damaged(detail: &str) -> Error {
    Error::DataLoss {
        file: String::new(),
        detail: format!("a stored record cannot be decoded ({detail})"),
    }
}

/// A record from its stored bytes. Bytes that do not decode were damaged
/// on disk: data loss, not a passing failure.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    Ok(decode_sized(bytes)?.0)
}

/// A record and its size decoded, for reads that stop at a byte budget.
pub fn decode_sized<T: DeserializeOwned>(bytes: &[u8]) -> Result<(T, usize)> {
    match bytes.split_first() {
        Some((&FORMAT_JSON, body)) => Ok((from_json(body)?, body.len())),
        Some((&FORMAT_LZ4_JSON, packed)) => {
            let body = unpack(packed)?;
            Ok((from_json(&body)?, body.len()))
        }
        Some((other, _)) => Err(damaged(&format!("unknown record format {other}"))),
        None => Err(damaged("empty record")),
    }
}

/// A logged revision's stored bytes.
pub fn encode_revision(r: &Revision) -> Result<Vec<u8>> {
    Ok(frame(
        FORMAT_TIMED_JSON,
        FORMAT_TIMED_LZ4_JSON,
        &r.time.to_le_bytes(),
        &json(r)?,
    ))
}

/// What follows a revision's commit time.
fn after_time(rest: &[u8]) -> Result<&[u8]> {
    rest.get(8..)
        .ok_or_else(|| damaged("a revision shorter than its time"))
}

/// A logged revision from its stored bytes (any format).
pub fn decode_revision(bytes: &[u8]) -> Result<Revision> {
    Ok(decode_revision_sized(bytes)?.0)
}

/// A logged revision and its size decoded.
pub fn decode_revision_sized(bytes: &[u8]) -> Result<(Revision, usize)> {
    match bytes.split_first() {
        Some((&FORMAT_TIMED_JSON, rest)) => {
            let body = after_time(rest)?;
            Ok((from_json(body)?, body.len()))
        }
        Some((&FORMAT_TIMED_LZ4_JSON, rest)) => {
            let body = unpack(after_time(rest)?)?;
            Ok((from_json(&body)?, body.len()))
        }
        _ => decode_sized(bytes),
    }
}

/// A logged revision's commit time, decoding only what it must.
pub fn revision_time(bytes: &[u8]) -> Result<cairn_core::Micros> {
    match bytes.split_first() {
        Some((&(FORMAT_TIMED_JSON | FORMAT_TIMED_LZ4_JSON), rest)) => rest
            .get(..8)
            .and_then(|t| <[u8; 8]>::try_from(t).ok())
            .map(i64::from_le_bytes)
            .ok_or_else(|| damaged("a revision shorter than its time")),
        _ => Ok(decode::<Revision>(bytes)?.time),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_core::session::Session;

    #[test]
    fn records_round_trip_and_tolerate_new_fields() {
        let s = Session {
            session_id: "a".into(),
            title: "t".into(),
            ..Session::default()
        };
        let bytes = encode(&s).unwrap();
        assert_eq!(decode::<Session>(&bytes).unwrap(), s);
        // A record from a newer Cairn with an extra field, and one from an
        // older Cairn missing fields, both load.
        let newer = b"\x01{\"session_id\":\"a\",\"future\":1}";
        assert_eq!(decode::<Session>(newer).unwrap().session_id, "a");
        assert!(decode::<Session>(b"\x09{}").is_err());
        assert!(decode::<Session>(b"").is_err());
    }

    #[test]
    fn revisions_carry_their_time_up_front() {
        let r = Revision {
            revision: 7,
            time: 1_700_000_000_123_456,
            events: Vec::new(),
        };
        let bytes = encode_revision(&r).unwrap();
        assert_eq!(revision_time(&bytes).unwrap(), r.time);
        assert_eq!(decode_revision(&bytes).unwrap(), r);
        // Revisions logged before the time prefix still read.
        let old = encode(&r).unwrap();
        assert_eq!(revision_time(&old).unwrap(), r.time);
        assert_eq!(decode_revision(&old).unwrap(), r);
        assert!(revision_time(&[FORMAT_TIMED_JSON, 1, 2]).is_err());
    }

    #[test]
    fn large_records_are_compressed_and_damage_is_data_loss() {
        let s = Session {
            session_id: "a".into(),
            title: "a title that repeats ".repeat(40),
            ..Session::default()
        };
        let bytes = encode(&s).unwrap();
        assert_eq!(bytes[0], FORMAT_LZ4_JSON);
        assert!(bytes.len() < s.title.len() / 4, "{} bytes", bytes.len());
        assert_eq!(decode::<Session>(&bytes).unwrap(), s);
        let r = Revision {
            revision: 9,
            time: 5,
            events: vec![crate::records::Event::session(
                crate::records::EventKind::SessionCreated,
                &s,
                Vec::new(),
            )],
        };
        let logged = encode_revision(&r).unwrap();
        assert_eq!(logged[0], FORMAT_TIMED_LZ4_JSON);
        assert_eq!(decode_revision(&logged).unwrap(), r);
        assert_eq!(revision_time(&logged).unwrap(), 5);
        // A flipped byte, a claim of 4 GB, a cut record: errors, not panics.
        let mut flipped = bytes.clone();
        let last = flipped.len() - 3;
        flipped[last] ^= 0xff;
        assert!(decode::<Session>(&flipped).is_err());
        let mut huge = bytes.clone();
        huge[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode::<Session>(&huge),
            Err(Error::DataLoss { .. })
        ));
        assert!(decode::<Session>(&bytes[..bytes.len() / 2]).is_err());
        // Short records stay plain JSON.
        assert_eq!(encode(&Session::default()).unwrap()[0], FORMAT_JSON);
    }
}
