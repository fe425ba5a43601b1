//! Standard base64 (RFC 4648, with padding), for keys sent with the meta `b` flag and returned
//! by `k`. Pure functions; decoding rejects anything that is not canonical base64.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn value(c: u8) -> Option<u32> {
    Some(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    } as u32)
}

/// Decode `input`; None when it is empty, not a multiple of 4 long, or not base64.
pub fn decode(input: &[u8]) -> Option<Vec<u8>> {
    if input.is_empty() || !input.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(input.len() / 4 * 3);
    let chunks = input.len() / 4;
    for (i, chunk) in input.chunks(4).enumerate() {
        let last = i + 1 == chunks;
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n: u32 = 0;
        for &c in &chunk[..4 - pad] {
            n = (n << 6) | value(c)?;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

/// Encode `input` into `out`.
pub fn encode_into(input: &[u8], out: &mut Vec<u8>) {
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        for s in [&b"f"[..], b"fo", b"foo", b"foob", b"\0\xff\x10binary"] {
            let mut e = Vec::new();
            encode_into(s, &mut e);
            assert_eq!(decode(&e).as_deref(), Some(s));
        }
        let mut e = Vec::new();
        encode_into(b"foo", &mut e);
        assert_eq!(e, b"Zm9v");
        assert_eq!(decode(b"Zm8="), Some(b"fo".to_vec()));
        assert_eq!(decode(b"Zm=8"), None);
        assert_eq!(decode(b"Zm9"), None);
        assert_eq!(decode(b"Z!9v"), None);
    }
}
