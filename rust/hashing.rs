//! Content hashes and chunk ids, byte-identical with memsearch 0.4.23 so ids
//! interoperate with its collections; xxh3 fingerprints for change detection.

use sha2::{Digest, Sha256};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Sixteen lowercase hex digits held inline: a chunk's content hash costs
/// no allocation of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hex16([u8; 16]);

impl Hex16 {
    #[inline]
    pub fn as_str(&self) -> &str {
        // Only ever filled from HEX, so always ASCII.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// First 16 hex digits of the SHA-256 of `data`, inline.
#[inline]
pub fn sha256_head(data: &[u8]) -> Hex16 {
    let digest = Sha256::digest(data);
    let mut out = [0u8; 16];
    for (i, b) in digest[..8].iter().enumerate() {
        out[2 * i] = HEX[(b >> 4) as usize];
        out[2 * i + 1] = HEX[(b & 0xf) as usize];
    }
    Hex16(out)
}

/// First 16 hex digits of the SHA-256 of `data`.
#[inline]
pub fn sha256_hex16(data: &[u8]) -> String {
    sha256_head(data).as_str().to_owned()
}

/// `sha256("markdown:{source}:{start}:{end}:{content_hash}:{model}")[:16]`.
pub fn chunk_id(
    source: &str,
    start_line: i64,
    end_line: i64,
    content_hash: &str,
    model: &str,
) -> String {
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
        assert_eq!(sha256_head(b"abc").as_str(), "ba7816bf8f01cfea");
    }
}
