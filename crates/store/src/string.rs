//! A string value: up to [`INLINE_MAX`] bytes held inline (no allocation of its own), longer
//! ones in a shared `Bytes`.
//!
//! Why: a key's block holds its `Value` inline (see `crate::table`), and a `Bytes` is 32 bytes
//! that point to a separate allocation. A short string (a session flag, a counter, a 16-byte
//! token) costs that allocation's size class on top of the block; kept inline in the same 32
//! bytes it costs nothing more (Redis' `embstr` idea: value and header in one allocation). The
//! representation is chosen by the length alone, so every string of at most [`INLINE_MAX`]
//! bytes is inline and memory accounting can size a string from its length (see
//! [`string_heap_bytes`]).
//!
//! Replies and snapshots: a long string is handed out as a clone of its `Bytes` (a reference
//! count, no copy); a short one is copied (at most [`INLINE_MAX`] bytes, what the reference
//! count's atomic increment used to cost).
//!
//! May import: `crate::table::alloc_class` (sizes) and nothing else of the crate.

use bytes::Bytes;

/// The longest string held inline (what fits beside the length in a `Bytes`' 32 bytes while
/// the enum stays 32 bytes: see the size test).
pub const INLINE_MAX: usize = 23;

/// A string value (see the module docs). Dereferences to its bytes.
#[derive(Clone)]
pub struct StrValue(Repr);

#[derive(Clone)]
enum Repr {
    /// `len` ≤ [`INLINE_MAX`] bytes, in `buf[..len]`.
    Inline { len: u8, buf: [u8; INLINE_MAX] },
    /// More than [`INLINE_MAX`] bytes.
    Heap(Bytes),
}

/// Heap bytes a string of `len` bytes takes beside its value slot: none when inline, its
/// allocation's size class otherwise.
pub fn string_heap_bytes(len: usize) -> usize {
    if len <= INLINE_MAX {
        0
    } else {
        crate::table::alloc_class(len)
    }
}

impl StrValue {
    /// The empty string.
    pub const fn new() -> StrValue {
        StrValue(Repr::Inline {
            len: 0,
            buf: [0; INLINE_MAX],
        })
    }

    /// A copy of `bytes`.
    pub fn copy_from_slice(bytes: &[u8]) -> StrValue {
        match Self::inline(bytes) {
            Some(s) => s,
            None => StrValue(Repr::Heap(Bytes::copy_from_slice(bytes))),
        }
    }

    fn inline(bytes: &[u8]) -> Option<StrValue> {
        if bytes.len() > INLINE_MAX {
            return None;
        }
        let mut buf = [0; INLINE_MAX];
        buf[..bytes.len()].copy_from_slice(bytes);
        Some(StrValue(Repr::Inline {
            len: bytes.len() as u8,
            buf,
        }))
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, buf } => &buf[..usize::from(*len)],
            Repr::Heap(b) => b,
        }
    }

    /// The bytes as a `Bytes`: the shared buffer of a long string (no copy), a copy of a short
    /// one.
    pub fn to_bytes(&self) -> Bytes {
        match &self.0 {
            Repr::Inline { .. } => Bytes::copy_from_slice(self.as_bytes()),
            Repr::Heap(b) => b.clone(),
        }
    }

    /// The bytes as a `Bytes`, taking a long string's buffer (unique if nothing else shares
    /// it, so a `BytesMut` can reuse it).
    pub fn into_bytes(self) -> Bytes {
        match self.0 {
            Repr::Inline { .. } => Bytes::copy_from_slice(self.as_bytes()),
            Repr::Heap(b) => b,
        }
    }

    /// Whether the bytes are held inline (for tests and the snapshot's copy).
    pub fn is_inline(&self) -> bool {
        matches!(self.0, Repr::Inline { .. })
    }
}

impl Default for StrValue {
    fn default() -> Self {
        Self::new()
    }
}

impl std::ops::Deref for StrValue {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<[u8]> for StrValue {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl From<Bytes> for StrValue {
    /// Short strings are copied inline (and the `Bytes` dropped); long ones kept as they are.
    fn from(b: Bytes) -> Self {
        match Self::inline(&b) {
            Some(s) => s,
            None => StrValue(Repr::Heap(b)),
        }
    }
}

impl From<Vec<u8>> for StrValue {
    fn from(v: Vec<u8>) -> Self {
        match Self::inline(&v) {
            Some(s) => s,
            None => StrValue(Repr::Heap(Bytes::from(v))),
        }
    }
}

impl From<&[u8]> for StrValue {
    fn from(v: &[u8]) -> Self {
        Self::copy_from_slice(v)
    }
}

impl From<&str> for StrValue {
    fn from(v: &str) -> Self {
        Self::copy_from_slice(v.as_bytes())
    }
}

impl PartialEq for StrValue {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for StrValue {}

impl PartialEq<[u8]> for StrValue {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_bytes() == other
    }
}

impl PartialEq<&[u8]> for StrValue {
    fn eq(&self, other: &&[u8]) -> bool {
        self.as_bytes() == *other
    }
}

impl PartialEq<str> for StrValue {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for StrValue {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl std::fmt::Debug for StrValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // As `Bytes` prints itself: b"..." with escapes.
        write!(f, "b\"")?;
        for &b in self.as_bytes() {
            write!(f, "{}", std::ascii::escape_default(b))?;
        }
        write!(f, "\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_value_is_as_small_as_a_bytes() {
        assert_eq!(std::mem::size_of::<StrValue>(), 32);
        assert_eq!(
            std::mem::size_of::<StrValue>(),
            std::mem::size_of::<Bytes>()
        );
    }

    #[test]
    fn short_strings_are_inline_and_long_ones_shared() {
        for len in [0, 1, 16, INLINE_MAX] {
            let bytes = vec![b'x'; len];
            for s in [
                StrValue::copy_from_slice(&bytes),
                StrValue::from(Bytes::from(bytes.clone())),
                StrValue::from(bytes.clone()),
            ] {
                assert!(s.is_inline(), "{len}");
                assert_eq!(s.as_bytes(), &bytes[..]);
                assert_eq!(s.to_bytes(), bytes);
                assert_eq!(string_heap_bytes(s.len()), 0);
            }
        }
        let long = Bytes::from(vec![b'y'; INLINE_MAX + 1]);
        let s = StrValue::from(long.clone());
        assert!(!s.is_inline());
        assert_eq!(s.to_bytes().as_ptr(), long.as_ptr(), "no copy");
        assert_eq!(s, StrValue::copy_from_slice(&long));
        assert_eq!(string_heap_bytes(s.len()), 24);
        assert_eq!(format!("{:?}", StrValue::from("a\n")), "b\"a\\n\"");
    }
}
