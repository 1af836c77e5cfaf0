//! An embeddings answer of OpenAI's shape with base64 vectors
//! (`{"data": [{"index": i, "embedding": "<base64>"}, ...]}`) read straight to
//! the vectors' bytes, without the GIL and without a Python object a vector:
//! a 50 MB index reads about 1 GB of such answers. Anything else (floats, an
//! escape in a row, a bad or repeated index, rows of two lengths, invalid
//! JSON) is left to the general path, which reads it or says what is wrong.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::b64;

#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow)]
    data: Vec<BTreeMap<Cow<'a, str>, &'a RawValue>>,
}

/// The vectors' bytes (little-endian `f32`) in input order, when *body* holds
/// exactly `n` base64 rows of one length, indexed `0..n` once each (a missing
/// index is the item's position); None otherwise.
pub fn base64_vectors(body: &[u8], n: usize) -> Option<Vec<u8>> {
    let answer: Answer = serde_json::from_slice(body).ok()?;
    if n == 0 || answer.data.len() != n {
        return None;
    }
    let mut rows: Vec<Option<&str>> = vec![None; n];
    for (pos, item) in answer.data.iter().enumerate() {
        let index = match item.get("index") {
            None => pos,
            Some(raw) => raw.get().parse::<usize>().ok()?,
        };
        let text = item.get("embedding")?.get();
        let row = text.strip_prefix('"')?.strip_suffix('"')?;
        if index >= n || rows[index].is_some() || row.contains('\\') {
            return None;
        }
        rows[index] = Some(row);
    }
    let row_len = rows[0]?.len();
    let mut out = Vec::with_capacity(row_len / 4 * 3 * n);
    for row in rows {
        let row = row?;
        if row.len() != row_len || b64::decode_into(row.as_bytes(), &mut out).is_err() {
            return None;
        }
    }
    (!out.is_empty() && out.len().is_multiple_of(4 * n)).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rows_in_index_order() {
        let body = br#"{"object":"list","data":[{"index":1,"embedding":"AACAPw=="},{"object":"embedding","index":0,"embedding":"AAAAQA=="}],"usage":{}}"#;
        let out = base64_vectors(body, 2).unwrap();
        let v: Vec<f32> = out
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(v, vec![2.0, 1.0]);
    }

    #[test]
    fn leaves_the_rest_to_the_general_path() {
        let one = r#"{"embedding":"AACAPw=="}"#;
        for (body, n) in [
            (r#"{"data":[{"index":0,"embedding":[1.0]}]}"#.to_string(), 1),
            (
                format!(r#"{{"data":[{one},{{"index":0,"embedding":"AACAPw=="}}]}}"#),
                2,
            ),
            (
                r#"{"data":[{"index":null,"embedding":"AACAPw=="}]}"#.to_string(),
                1,
            ),
            (
                r#"{"data":[{"index":"0","embedding":"AACAPw=="}]}"#.to_string(),
                1,
            ),
            (r#"{"data":[{"embedding":"AACA\/w=="}]}"#.to_string(), 1),
            (
                format!(r#"{{"data":[{one},{{"embedding":"AACAPwAAgD8="}}]}}"#),
                2,
            ),
            (r#"{"data":[{"embedding":"AA!APw=="}]}"#.to_string(), 1),
            (format!(r#"{{"data":[{one}]}}"#), 2),
            (r#"{"data":[]}"#.to_string(), 0),
            ("not json".to_string(), 1),
        ] {
            assert!(base64_vectors(body.as_bytes(), n).is_none(), "{body}");
        }
        assert!(base64_vectors(format!(r#"{{"data":[{one}]}}"#).as_bytes(), 1).is_some());
    }
}
