//! Client-side value compression, as the PHP extensions do it (php-memcached's
//! `memcached.compression_threshold`, phpredis' `compression` option): a value of at least the
//! threshold is compressed with LZ4 before it is sent and stored with a marker; a value read
//! back with the marker is decompressed. Smaller values go as they are. The marker is four
//! bytes (`\x1fLZ4`) followed by the LZ4 block with its length prepended; php-memcached marks
//! compression in the item flags instead, which costs nothing on the wire — the four bytes are
//! counted against us. A value that would not shrink is sent uncompressed (as php-memcached does
//! when the saving is under its factor).
//!
//! May import: `error`.

use bytes::Bytes;

use crate::error::{BenchError, Result};

/// Marks a compressed value.
pub const MARKER: &[u8; 4] = b"\x1fLZ4";

/// Compression settings of one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compression {
    /// Values of at least this many bytes are compressed.
    pub threshold: usize,
}

impl Compression {
    /// The bytes to send for `value`: compressed with the marker when that is worth it.
    pub fn encode(&self, value: &[u8]) -> Option<Vec<u8>> {
        if value.len() < self.threshold || value.starts_with(MARKER) {
            return None;
        }
        let packed = lz4_flex::compress_prepend_size(value);
        if packed.len() + MARKER.len() >= value.len() {
            return None;
        }
        let mut out = Vec::with_capacity(MARKER.len() + packed.len());
        out.extend_from_slice(MARKER);
        out.extend_from_slice(&packed);
        Some(out)
    }
}

/// The stored bytes back as the application's value (decompressed when marked).
pub fn decode(stored: Bytes) -> Result<Bytes> {
    match stored.strip_prefix(MARKER) {
        Some(packed) => lz4_flex::decompress_size_prepended(packed)
            .map(Bytes::from)
            .map_err(|e| BenchError::Protocol(format!("compressed value does not decode: {e}"))),
        None => Ok(stored),
    }
}

/// [`decode`] over an optional value.
pub fn decode_opt(stored: Option<Bytes>) -> Result<Option<Bytes>> {
    stored.map(decode).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::keys::tagged_value;

    #[test]
    fn compression_round_trips_and_only_above_the_threshold() {
        let c = Compression { threshold: 256 };
        let small = tagged_value("core_string:k1", 200);
        assert!(c.encode(&small).is_none());
        let big = tagged_value("core_string:k2", 4096);
        let packed = c
            .encode(&big)
            .expect("compressible value above the threshold");
        assert!(packed.starts_with(MARKER));
        assert!(packed.len() < big.len());
        assert_eq!(
            decode(Bytes::from(packed)).unwrap().as_ref(),
            big.as_slice()
        );
        // Uncompressed values pass through decode unchanged.
        assert_eq!(
            decode(Bytes::from(small.clone())).unwrap().as_ref(),
            small.as_slice()
        );
        assert_eq!(decode_opt(None).unwrap(), None);
    }

    #[test]
    fn incompressible_values_go_as_they_are() {
        let c = Compression { threshold: 16 };
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let noise: Vec<u8> = (0..1024)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(c.encode(&noise).is_none());
    }

    #[test]
    fn a_damaged_compressed_value_is_an_error() {
        let mut bad = MARKER.to_vec();
        bad.extend_from_slice(&[200, 0, 0, 0, 1, 2]);
        assert!(decode(Bytes::from(bad)).is_err());
    }
}
