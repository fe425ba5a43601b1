//! A string value: up to [`INLINE_MAX`] bytes held inline (no allocation of its own), longer
//! ones in a reference-counted buffer with its count in the same allocation ([`HeapStr`]).
//!
//! Why: a key's block holds its `Value` inline (see `crate::table`), and a `Bytes` is 32 bytes
//! that point to a separate allocation. A short string (a session flag, a counter, a 16-byte
//! token) costs that allocation's size class on top of the block; kept inline in the same 32
//! bytes it costs nothing more (Redis' `embstr` idea: value and header in one allocation). The
//! representation is chosen by the length alone, so every string of at most [`INLINE_MAX`]
//! bytes is inline and memory accounting can size a string from its length (see
//! [`string_heap_bytes`]).
//!
//! Replies and snapshots: a long string is handed out as a clone of its buffer (a reference
//! count, no copy: a snapshot's copy shares it, a reply's `Bytes` holds it); a short one is
//! copied (at most [`INLINE_MAX`] bytes, what the reference count's atomic increment used to
//! cost). The buffer changes in place only while it is not shared ([`StrValue::edit`]).
//!
//! A string also knows whether an in-place edit made it (APPEND to an existing string, SETRANGE,
//! SETBIT, BITFIELD, BITOP's result: [`StrValue::raw`]), for `OBJECT ENCODING`, which in Redis
//! 7.2 says `raw` for such a string whatever its length or bytes, where a SET of the same bytes
//! says `int` or `embstr`. That costs no memory: for an inline string it is a bit of the length
//! byte; an edited string of [`INLINE_MAX`] + 1 to [`EMBSTR_MAX_LEN`] bytes (the only other
//! lengths where the encoding would differ) is held in an `Arc<[u8]>` that fits beside the
//! length byte's niche, and a longer one is `raw` anyway. The `Arc` (not a `Box`) keeps what a
//! snapshot's copy relies on: a clone shares the buffer, which never changes in place.
//!
//! May import: `crate::table::alloc_class` (sizes), `crate::heapstr` and nothing else of the
//! crate.

use crate::heapstr::HeapStr;
use bytes::Bytes;
use std::num::NonZeroU8;
use std::sync::Arc;

/// The longest string held inline (what fits beside the length in 24 bytes, the enum staying
/// 32 bytes: see the size test).
pub const INLINE_MAX: usize = 23;
/// Redis stores a string of up to this many bytes in one allocation with its header (`embstr`).
pub const EMBSTR_MAX_LEN: usize = 44;

/// A string value (see the module docs). Dereferences to its bytes.
#[derive(Clone)]
pub struct StrValue(Repr);

#[derive(Clone)]
enum Repr {
    /// At most [`INLINE_MAX`] bytes, or an edited string of at most [`EMBSTR_MAX_LEN`].
    Short(Short),
    /// More than [`INLINE_MAX`] bytes (not an edited one of at most [`EMBSTR_MAX_LEN`]).
    Heap(HeapStr),
}

/// What fits in 24 bytes: the length byte is non-zero, so its zero tells the `Arc` apart (see
/// the size test).
#[derive(Clone)]
enum Short {
    /// `len` ≤ [`INLINE_MAX`] bytes in `buf[..len]`; `tag` is `len + 1`, plus [`RAW_BIT`] for
    /// an edited string.
    Inline {
        tag: NonZeroU8,
        buf: [u8; INLINE_MAX],
    },
    /// An edited string of [`INLINE_MAX`] + 1 to [`EMBSTR_MAX_LEN`] bytes. Counted as a heap
    /// string of its length ([`string_heap_bytes`]), without the `Arc`'s 16-byte header: the
    /// accounting stays a function of the length, for a case that is rare.
    Raw(Arc<[u8]>),
}

/// The bit of an inline string's tag that marks an edited one.
const RAW_BIT: u8 = 0x80;

/// Heap bytes a string of `len` bytes takes beside its value slot: none when inline, its
/// allocation's size class otherwise.
pub fn string_heap_bytes(len: usize) -> usize {
    if len <= INLINE_MAX {
        0
    } else {
        crate::table::alloc_class(HeapStr::alloc_len(len))
    }
}

impl StrValue {
    /// The empty string.
    pub const fn new() -> StrValue {
        StrValue(Repr::Short(Short::Inline {
            tag: NonZeroU8::MIN,
            buf: [0; INLINE_MAX],
        }))
    }

    /// A copy of `bytes`.
    pub fn copy_from_slice(bytes: &[u8]) -> StrValue {
        match Self::inline(bytes) {
            Some(s) => s,
            None => StrValue(Repr::Heap(HeapStr::copy_from_slice(bytes))),
        }
    }

    fn inline(bytes: &[u8]) -> Option<StrValue> {
        Self::inline_tagged(bytes, 0)
    }

    fn inline_tagged(bytes: &[u8], raw: u8) -> Option<StrValue> {
        if bytes.len() > INLINE_MAX {
            return None;
        }
        let mut buf = [0; INLINE_MAX];
        buf[..bytes.len()].copy_from_slice(bytes);
        let tag = NonZeroU8::new((bytes.len() as u8 + 1) | raw).expect("a length + 1");
        Some(StrValue(Repr::Short(Short::Inline { tag, buf })))
    }

    /// `bytes` as an in-place edit left them (APPEND to an existing string, SETRANGE, SETBIT,
    /// BITFIELD, BITOP's result): [`StrValue::is_raw`] says so.
    pub fn raw(bytes: Bytes) -> StrValue {
        if let Some(s) = Self::inline_tagged(&bytes, RAW_BIT) {
            return s;
        }
        if bytes.len() <= EMBSTR_MAX_LEN {
            return StrValue(Repr::Short(Short::Raw(Arc::from(&bytes[..]))));
        }
        StrValue(Repr::Heap(HeapStr::copy_from_slice(&bytes)))
    }

    /// Whether an in-place edit made the string ([`StrValue::raw`]): Redis' `OBJECT ENCODING`
    /// says `raw` for it. (A string longer than [`EMBSTR_MAX_LEN`] is `raw` however it was
    /// made; this answers for those made by [`StrValue::raw`] only where it matters, so it
    /// is false for them.)
    pub fn is_raw(&self) -> bool {
        match &self.0 {
            Repr::Short(Short::Inline { tag, .. }) => tag.get() & RAW_BIT != 0,
            Repr::Short(Short::Raw(_)) => true,
            Repr::Heap(_) => false,
        }
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Short(Short::Inline { tag, buf }) => {
                &buf[..usize::from((tag.get() & !RAW_BIT) - 1)]
            }
            Repr::Short(Short::Raw(b)) => b,
            Repr::Heap(b) => b.as_slice(),
        }
    }

    /// The bytes as a `Bytes`: sharing the buffer of a long string (no copy), a copy of a short
    /// one.
    pub fn to_bytes(&self) -> Bytes {
        match &self.0 {
            Repr::Short(_) => Bytes::copy_from_slice(self.as_bytes()),
            Repr::Heap(b) => b.to_bytes(),
        }
    }

    /// The bytes as a `Bytes`, taking a long string's buffer (no copy).
    pub fn into_bytes(self) -> Bytes {
        match self.0 {
            Repr::Short(_) => Bytes::copy_from_slice(self.as_bytes()),
            Repr::Heap(b) => Bytes::from_owner(b),
        }
    }

    /// An in-place edit (SETBIT, BITFIELD, SETRANGE, APPEND to an existing string): the bytes,
    /// first grown to at least `min_len` with zero bytes, are passed to `f`; the result is
    /// marked [`StrValue::is_raw`], as Redis' `OBJECT ENCODING` says `raw` after such an edit.
    /// A long string's buffer that nothing else holds (no snapshot, no pending reply) is
    /// changed where it is, so repeated edits of a big bitmap do not copy it each time; a
    /// shared one is copied first, and its other holders keep what they had.
    pub fn edit<R>(&mut self, min_len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let len = self.len().max(min_len);
        if let Repr::Heap(b) = &mut self.0 {
            if len > EMBSTR_MAX_LEN {
                return b.edit(min_len, f);
            }
        }
        if len > EMBSTR_MAX_LEN {
            let mut b = HeapStr::zeroed(len);
            let old = self.len();
            let result = b.edit(len, |buf| {
                buf[..old].copy_from_slice(self.as_bytes());
                f(buf)
            });
            *self = StrValue(Repr::Heap(b));
            return result;
        }
        let mut buf = [0u8; EMBSTR_MAX_LEN];
        let old = self.len();
        buf[..old].copy_from_slice(self.as_bytes());
        let result = f(&mut buf[..len]);
        *self = match Self::inline_tagged(&buf[..len], RAW_BIT) {
            Some(s) => s,
            None => StrValue(Repr::Short(Short::Raw(Arc::from(&buf[..len])))),
        };
        result
    }

    /// Whether the bytes are held inline (for tests and the snapshot's copy, which copies an
    /// inline string and borrows any other's buffer).
    pub fn is_inline(&self) -> bool {
        matches!(self.0, Repr::Short(Short::Inline { .. }))
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
    /// Short strings are copied inline, long ones into their own buffer: a stored value never
    /// keeps alive the buffer it was sliced from (a connection's read buffer, a log record).
    fn from(b: Bytes) -> Self {
        match Self::inline(&b) {
            Some(s) => s,
            None => StrValue(Repr::Heap(HeapStr::copy_from_slice(&b))),
        }
    }
}

impl From<Vec<u8>> for StrValue {
    fn from(v: Vec<u8>) -> Self {
        Self::copy_from_slice(&v)
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

/// Equal bytes are equal strings, edited or not (the mark only names an encoding).
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
        assert_eq!(s, StrValue::copy_from_slice(&long));
        assert_eq!(
            string_heap_bytes(s.len()),
            32,
            "24 bytes and the 8-byte header"
        );
        let longer = StrValue::from(vec![b'z'; crate::heapstr::COPY_MAX + 1]);
        assert_eq!(
            longer.to_bytes().as_ptr(),
            longer.as_ptr(),
            "a reply shares the buffer"
        );
        assert_eq!(format!("{:?}", StrValue::from("a\n")), "b\"a\\n\"");
    }

    #[test]
    fn an_edited_string_is_marked_raw_at_no_cost() {
        for len in [
            0,
            1,
            INLINE_MAX,
            INLINE_MAX + 1,
            EMBSTR_MAX_LEN,
            EMBSTR_MAX_LEN + 1,
        ] {
            let bytes = Bytes::from(vec![b'7'; len]);
            let raw = StrValue::raw(bytes.clone());
            let plain = StrValue::from(bytes.clone());
            assert_eq!(raw.as_bytes(), &bytes[..], "{len}");
            assert_eq!(raw.to_bytes(), bytes);
            assert_eq!(raw.clone().into_bytes(), bytes);
            assert_eq!(raw, plain, "the mark is not part of the value");
            assert!(!plain.is_raw());
            assert_eq!(raw.is_raw(), len <= EMBSTR_MAX_LEN, "{len}");
            assert_eq!(raw.is_inline(), len <= INLINE_MAX);
            assert_eq!(raw.clone().is_raw(), raw.is_raw(), "a clone keeps it");
        }
        // An edited mid-length string's clone shares its buffer (a snapshot borrows it).
        let mid = StrValue::raw(Bytes::from(vec![b'x'; 30]));
        assert_eq!(mid.clone().as_ptr(), mid.as_ptr());
    }
}
