//! Content hashes and chunk ids, byte-identical with memsearch 0.4.23 so ids
//! interoperate with its collections; xxh3 fingerprints for change detection.

use sha2::{Digest, Sha256};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// First 16 hex digits of the SHA-256 of `data`.
#[inline]
pub fn sha256_hex16(data: &[u8]) -> String {
    let digest = Sha256::digest(data);
    let mut out = String::with_capacity(16);
    for b in &digest[..8] {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 0xf) as usize] as char);
    }
    out
}

/// `sha256("markdown:{source}:{start}:{end}:{content_hash}:{model}")[:16]`.
pub fn chunk_id(source: &str, start_line: i64, end_line: i64, content_hash: &str, model: &str) -> String {
    let raw = format!("markdown:{source}:{start_line}:{end_line}:{content_hash}:{model}");
    sha256_hex16(raw.as_bytes())
}

/// 64-bit xxh3 of a file's bytes, as 16 hex digits.
#[inline]
pub fn fingerprint(data: &[u8]) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digest() {
        // sha256("abc") = ba7816bf8f01cfea...
        assert_eq!(sha256_hex16(b"abc"), "ba7816bf8f01cfea");
    }
}
