//! How records are encoded: one format byte, then JSON of serde structs
//! with `#[serde(default)]`. Adding a field never breaks reading old
//! records, and the byte leaves room for a denser format later.
//!
//! A logged revision puts its commit time (8 bytes, little-endian) between
//! the format byte and the JSON, so the compactor reads times without
//! decoding revisions.

use cairn_core::error::{Error, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::records::Revision;

const FORMAT_JSON: u8 = 1;
/// A revision: its commit time, then JSON.
const FORMAT_TIMED_JSON: u8 = 2;

/// A record's stored bytes.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    // Room for a typical record up front: growing a buffer by doubling
    // from one byte was a visible share of the writer's allocations.
    let mut out = Vec::with_capacity(1024);
    out.push(FORMAT_JSON);
    serde_json::to_writer(&mut out, value).map_err(|e| Error::Storage(format!("encode: {e}")))?;
    Ok(out)
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
    match bytes.split_first() {
        Some((&FORMAT_JSON, body)) => {
            serde_json::from_slice(body).map_err(|e| damaged(&e.to_string()))
        }
        Some((other, _)) => Err(damaged(&format!("unknown record format {other}"))),
        None => Err(damaged("empty record")),
    }
}

/// A logged revision's stored bytes.
pub fn encode_revision(r: &Revision) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(2048);
    out.push(FORMAT_TIMED_JSON);
    out.extend_from_slice(&r.time.to_le_bytes());
    serde_json::to_writer(&mut out, r).map_err(|e| Error::Storage(format!("encode: {e}")))?;
    Ok(out)
}

/// A logged revision from its stored bytes (either format).
pub fn decode_revision(bytes: &[u8]) -> Result<Revision> {
    match bytes.split_first() {
        Some((&FORMAT_TIMED_JSON, rest)) => match rest.get(8..) {
            Some(body) => serde_json::from_slice(body).map_err(|e| damaged(&e.to_string())),
            None => Err(damaged("a revision shorter than its time")),
        },
        _ => decode(bytes),
    }
}

/// A logged revision's commit time, decoding only what it must.
pub fn revision_time(bytes: &[u8]) -> Result<cairn_core::Micros> {
    match bytes.split_first() {
        Some((&FORMAT_TIMED_JSON, rest)) => rest
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
}
