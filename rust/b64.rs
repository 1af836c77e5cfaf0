//! Base64 vectors as OpenAI-compatible servers send them (`encoding_format:
//! base64`): decoded off the GIL, a batch of rows in one call.

const INVALID: u8 = 0xff;

const fn table() -> [u8; 256] {
    let mut t = [INVALID; 256];
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut i = 0;
    while i < 64 {
        t[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    t
}

static TABLE: [u8; 256] = table();

/// The bytes of `text`, rows of `row_len` characters each, every row standard
/// base64 (padding only at its end); an error names the first bad row.
pub fn decode_rows(text: &[u8], row_len: usize) -> Result<Vec<u8>, String> {
    if row_len == 0 || !row_len.is_multiple_of(4) || !text.len().is_multiple_of(row_len) {
        return Err(format!(
            "base64 rows of {row_len} characters do not divide {} characters",
            text.len()
        ));
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    for (r, row) in text.chunks_exact(row_len).enumerate() {
        let pad = row.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 {
            return Err(format!("bad base64 padding in row {r}"));
        }
        let (body, last) = row.split_at(row_len - 4);
        for q in body.chunks_exact(4) {
            let v = quad(q).ok_or_else(|| format!("bad base64 in row {r}"))?;
            out.extend_from_slice(&[(v >> 16) as u8, (v >> 8) as u8, v as u8]);
        }
        let mut tail = [b'A'; 4];
        tail[..4 - pad].copy_from_slice(&last[..4 - pad]);
        let v = quad(&tail).ok_or_else(|| format!("bad base64 in row {r}"))?;
        out.extend_from_slice(&[(v >> 16) as u8, (v >> 8) as u8, v as u8][..3 - pad]);
    }
    Ok(out)
}

#[inline]
fn quad(q: &[u8]) -> Option<u32> {
    let (a, b, c, d) = (
        TABLE[q[0] as usize],
        TABLE[q[1] as usize],
        TABLE[q[2] as usize],
        TABLE[q[3] as usize],
    );
    if (a | b | c | d) & 0xc0 != 0 {
        return None;
    }
    Some((a as u32) << 18 | (b as u32) << 12 | (c as u32) << 6 | d as u32)
}

#[cfg(test)]
mod tests {
    use super::decode_rows;

    #[test]
    fn rows_decode_as_the_standard_alphabet_does() {
        // "hello world!" and "hi" (padded): rows of one length each
        assert_eq!(
            decode_rows(b"aGVsbG8gd29ybGQh", 16).unwrap(),
            b"hello world!"
        );
        assert_eq!(decode_rows(b"aGk=aGk=", 4).unwrap(), b"hihi");
        assert_eq!(decode_rows(b"YQ==Yg==", 4).unwrap(), b"ab");
        assert_eq!(decode_rows(b"+/+/", 4).unwrap(), [0xfb, 0xff, 0xbf]);
    }

    #[test]
    fn bad_text_is_refused() {
        assert!(decode_rows(b"aGk", 3).is_err());
        assert!(decode_rows(b"aGk=aGk", 4).is_err());
        assert!(decode_rows(b"a*k=", 4).is_err());
        assert!(decode_rows(b"a===", 4).is_err());
        assert!(decode_rows(b"a=k=", 4).is_err());
    }
}
