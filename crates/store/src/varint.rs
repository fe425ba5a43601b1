//! LEB128 lengths, as the packed list's entries, a packed hash's or set's fields and a key's
//! block in the table store them (seven bits a byte, the high bit set on every byte but the last).
//!
//! May import: nothing of the crate.

/// Bytes `n` takes as LEB128.
pub fn len(mut n: usize) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

/// `n` as LEB128 (at most 10 bytes) and how many bytes of it are used.
pub fn encode(mut n: usize) -> ([u8; 10], usize) {
    let mut head = [0u8; 10];
    let mut k = 0;
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            head[k] = byte;
            return (head, k + 1);
        }
        head[k] = byte | 0x80;
        k += 1;
    }
}

/// The LEB128 number starting at `buf[at]` and the position just after it. The buffer is one
/// this crate wrote (a packed value's own), so a truncated number is a bug: it panics on the
/// index like any other out-of-bounds read of that buffer.
pub fn decode(buf: &[u8], at: usize) -> (usize, usize) {
    let (mut n, mut shift, mut k) = (0usize, 0u32, at);
    loop {
        let byte = buf[k];
        n |= usize::from(byte & 0x7f) << shift;
        k += 1;
        if byte & 0x80 == 0 {
            return (n, k);
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_match_the_encoding() {
        for n in [0usize, 1, 127, 128, 16_383, 16_384, usize::MAX] {
            let (bytes, k) = encode(n);
            assert_eq!(k, len(n), "{n}");
            assert!(bytes[..k - 1].iter().all(|b| b & 0x80 != 0));
            assert_eq!(bytes[k - 1] & 0x80, 0);
            assert_eq!(decode(&bytes[..k], 0), (n, k));
        }
    }
}
