//! How records are encoded: one format byte, then JSON of serde structs
//! with `#[serde(default)]`. Adding a field never breaks reading old
//! records, and the byte leaves room for a denser format later.

use cairn_core::error::{Error, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;

const FORMAT_JSON: u8 = 1;

/// A record's stored bytes.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    let mut out = vec![FORMAT_JSON];
    serde_json::to_writer(&mut out, value).map_err(|e| Error::Storage(format!("encode: {e}")))?;
    Ok(out)
}

/// A record from its stored bytes. Bytes that do not decode were damaged
/// on disk: data loss, not a passing failure.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let damaged = |detail: String| Error::DataLoss {
        file: String::new(),
        detail: format!("a stored record cannot be decoded ({detail})"),
    };
    match bytes.split_first() {
        Some((&FORMAT_JSON, body)) => {
            serde_json::from_slice(body).map_err(|e| damaged(e.to_string()))
        }
        Some((other, _)) => Err(damaged(format!("unknown record format {other}"))),
        None => Err(damaged("empty record".into())),
    }
}

/// Bytes a record takes in the store.
pub fn encoded_len<T: Serialize>(record: &T) -> Result<usize> {
    Ok(encode(record)?.len())
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
}
