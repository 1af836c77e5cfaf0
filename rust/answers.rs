//! An OpenAI-shaped embeddings answer (`{"data": [{"index": i, "embedding":
//! "<base64>"}, ...]}`) read straight into its vectors' bytes, without the
//! GIL: at 50 MB of markdown the answers hold a gigabyte of base64, which
//! Python's JSON parser read string by string under the GIL.
//!
//! Only a well-formed answer is read here; anything else (float lists, a bad
//! or missing index, a row of another length, JSON that is not strict UTF-8)
//! gives `None`, and the caller's Python path reads it and names the fault.

use serde_json::Value;

use crate::b64;

/// The vectors' little-endian bytes in input order, for `n` texts; `None` when
/// the answer is not a well-formed base64 answer for `n` texts.
pub fn base64_answer(body: &[u8], n: usize) -> Option<Vec<u8>> {
    let answer: Value = serde_json::from_slice(body).ok()?;
    let items = answer.get("data")?.as_array()?;
    if n == 0 || items.len() != n {
        return None;
    }
    let mut rows: Vec<Option<&str>> = vec![None; n];
    for (pos, item) in items.iter().enumerate() {
        let index = match item.get("index") {
            None => pos,
            Some(v) => usize::try_from(v.as_u64()?).ok()?,
        };
        let slot = rows.get_mut(index)?;
        if slot.is_some() {
            return None;
        }
        *slot = Some(item.get("embedding")?.as_str()?);
    }
    let row_len = rows[0]?.len();
    let mut joined = Vec::with_capacity(row_len * n);
    for row in rows {
        let row = row?;
        if row.len() != row_len {
            return None;
        }
        joined.extend_from_slice(row.as_bytes());
    }
    let raw = b64::decode_rows(&joined, row_len).ok()?;
    (!raw.is_empty() && raw.len().is_multiple_of(4 * n)).then_some(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_come_back_in_input_order() {
        // 1.0f32 and 2.0f32, little-endian, base64; the answer lists them out of order.
        let body = br#"{"object":"list","data":[{"index":1,"embedding":"AAAAQA=="},{"index":0,"embedding":"AACAPw=="}],"usage":{"total_tokens":2}}"#;
        let raw = base64_answer(body, 2).unwrap();
        assert_eq!(raw, [0, 0, 0x80, 0x3f, 0, 0, 0, 0x40]);
    }

    #[test]
    fn anything_else_is_left_to_the_caller() {
        for body in [
            &br#"{"data":[{"index":0,"embedding":[1.0]}]}"#[..],
            br#"{"data":[{"index":0,"embedding":"AACAPw=="},{"index":0,"embedding":"AAAAQA=="}]}"#,
            br#"{"data":[{"index":null,"embedding":"AACAPw=="}]}"#,
            br#"{"data":[{"index":0,"embedding":"AACAP!=="}]}"#,
            br#"{"data":[]}"#,
            b"not json",
        ] {
            assert_eq!(
                base64_answer(body, 1),
                None,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let shorter = br#"{"data":[{"embedding":"AACAPw=="},{"embedding":"AAAA"}]}"#;
        assert_eq!(base64_answer(shorter, 2), None);
    }
}
