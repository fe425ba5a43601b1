//! Reply encoders: the few reply shapes with variable parts (`VALUE` lines, meta status lines
//! with their return flags). Fixed replies (`STORED`, `END`, …) are written by the caller as
//! literals. Pure functions over a `Vec<u8>`/`BytesMut`-like buffer.

use bytes::{BufMut, BytesMut};

/// `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`.
pub fn value(out: &mut BytesMut, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    out.reserve(key.len() + data.len() + 48);
    out.put_slice(b"VALUE ");
    out.put_slice(key);
    out.put_u8(b' ');
    out.put_slice(itoa::Buffer::new().format(flags).as_bytes());
    out.put_u8(b' ');
    out.put_slice(itoa::Buffer::new().format(data.len()).as_bytes());
    if let Some(cas) = cas {
        out.put_u8(b' ');
        out.put_slice(itoa::Buffer::new().format(cas).as_bytes());
    }
    out.put_slice(b"\r\n");
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

/// A line: `text\r\n`.
pub fn line(out: &mut BytesMut, text: &[u8]) {
    out.reserve(text.len() + 2);
    out.put_slice(text);
    out.put_slice(b"\r\n");
}

/// ` <code><number>` — one numeric return flag of a meta reply (e.g. ` t30`).
pub fn flag_num(out: &mut BytesMut, code: u8, n: impl itoa::Integer) {
    out.put_u8(b' ');
    out.put_u8(code);
    out.put_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// ` <code><bytes>` — one return flag with a byte token (opaque, key).
pub fn flag_bytes(out: &mut BytesMut, code: u8, token: &[u8]) {
    out.put_u8(b' ');
    out.put_u8(code);
    out.put_slice(token);
}

/// ` k<key>` — the key return flag; base64-encoded (followed by ` b`) when the request used `b`.
pub fn flag_key(out: &mut BytesMut, key: &[u8], base64: bool) {
    if base64 {
        let mut enc = Vec::with_capacity(key.len() * 4 / 3 + 4);
        crate::base64::encode_into(key, &mut enc);
        flag_bytes(out, b'k', &enc);
        out.put_slice(b" b");
    } else {
        flag_bytes(out, b'k', key);
    }
}
