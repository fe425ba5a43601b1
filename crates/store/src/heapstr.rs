//! A long string's bytes: one exact-sized allocation holding a reference count, the length and
//! the bytes, behind an 8-byte pointer.
//!
//! Used for long string values ([`crate::string`]) and for the fields, values and members of
//! hashes, sets and sorted sets in their hashtable encodings (8 bytes in a table slot where a
//! `Bytes` took 32).
//!
//! Why not `Bytes`: a `Bytes` made from a `Vec` (how every stored value was made) has no
//! reference count of its own; its first clone allocates a separate 24-byte header and keeps it
//! for as long as the value lives. Every GET of a key and every snapshot clones its value, so a
//! store whose keys had all been read once held 32 more bytes per key than one freshly loaded
//! (1 M keys of 100 bytes: 212 → 244 bytes of RSS per key after one GET each, against Redis'
//! 204 both times; `docs/benchmarks/memory.md`). Here the count lives in the allocation's own
//! first bytes, as in Redis' `robj` + `sds` (one allocation for an `embstr`): a clone is an
//! atomic increment, never an allocation, and the header costs 8 bytes (100 bytes of data still
//! take mimalloc's 112-byte class).
//!
//! Layout (8-aligned): a `u32` reference count, a `u32` length, the bytes. A string of
//! `u32::MAX` bytes or more keeps `u32::MAX` in the length field and its length as a `u64` in the
//! next 8 bytes; its bytes start at 16.
//!
//! A buffer never changes while it is shared: [`HeapStr::edit`] changes it in place only when
//! this is its one reference (no reply and no snapshot holds it), and otherwise edits a copy, so
//! a snapshot's copy of a value stays as it was (copy-on-write).
//!
//! May import: nothing of the crate.

use bytes::Bytes;
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, Ordering};

/// The length field's value for a string whose length is kept in the extra `u64`.
const BIG: u32 = u32::MAX;
const ALIGN: usize = 8;
/// The longest string [`HeapStr::to_bytes`] copies rather than shares.
pub const COPY_MAX: usize = 64;

/// A reference-counted, immutable-while-shared byte string (see the module docs).
pub struct HeapStr(NonNull<AtomicU32>);

// SAFETY: the bytes are only written through `&mut self` while the count is 1 (no other handle
// exists), and the count is atomic, as for `Arc<[u8]>`.
unsafe impl Send for HeapStr {}
unsafe impl Sync for HeapStr {}

/// Bytes before the data for a string of `len` bytes.
const fn header_len(len: usize) -> usize {
    if len < BIG as usize {
        8
    } else {
        16
    }
}

fn layout(len: usize) -> Layout {
    Layout::from_size_align(header_len(len) + len, ALIGN).expect("a string length fits a layout")
}

impl HeapStr {
    /// A buffer of `len` bytes, all zero.
    pub fn zeroed(len: usize) -> HeapStr {
        // SAFETY: `alloc_zeroed` initializes every byte.
        unsafe { Self::with_header(len, std::alloc::alloc_zeroed) }
    }

    /// A copy of `bytes`.
    pub fn copy_from_slice(bytes: &[u8]) -> HeapStr {
        let len = bytes.len();
        // SAFETY: the bytes are written at once, before the buffer is handed out (not zeroed
        // first: that would write every byte twice).
        unsafe {
            let s = Self::with_header(len, std::alloc::alloc);
            let data = s.base().as_ptr().add(header_len(len));
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), data, len);
            s
        }
    }

    /// A block from `alloc` for `len` bytes, its header written.
    ///
    /// # Safety
    /// When `alloc` does not initialize the bytes, the caller writes all `len` of them before
    /// the buffer is read.
    unsafe fn with_header(len: usize, alloc: unsafe fn(Layout) -> *mut u8) -> HeapStr {
        let layout = layout(len);
        // SAFETY: the layout is non-zero-sized (it holds the header).
        let raw = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        let rc = ptr.cast::<AtomicU32>();
        // SAFETY: the allocation is at least 8 (16 for a big length) bytes, 8-aligned, ours.
        unsafe {
            rc.as_ptr().write(AtomicU32::new(1));
            Self::write_len(ptr, len);
        }
        HeapStr(rc)
    }

    /// # Safety
    /// `ptr` is a live allocation made by [`layout`]`(len)`.
    unsafe fn write_len(ptr: NonNull<u8>, len: usize) {
        let field = ptr.as_ptr().add(4).cast::<u32>();
        if len < BIG as usize {
            field.write(len as u32);
        } else {
            field.write(BIG);
            ptr.as_ptr().add(8).cast::<u64>().write(len as u64);
        }
    }

    fn base(&self) -> NonNull<u8> {
        self.0.cast::<u8>()
    }

    fn count(&self) -> &AtomicU32 {
        // SAFETY: the count is initialized and lives as long as any handle.
        unsafe { self.0.as_ref() }
    }

    /// The number of bytes.
    pub fn len(&self) -> usize {
        // SAFETY: the header is initialized; the length fields never change while shared, and
        // only through `&mut self` otherwise.
        unsafe {
            let short = self.base().as_ptr().add(4).cast::<u32>().read();
            if short == BIG {
                self.base().as_ptr().add(8).cast::<u64>().read() as usize
            } else {
                short as usize
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        let len = self.len();
        // SAFETY: `len` initialized bytes follow the header; they do not change while `&self`
        // is borrowed (writes need `&mut` and a count of 1).
        unsafe {
            std::slice::from_raw_parts(self.base().as_ptr().add(header_len(len)).cast_const(), len)
        }
    }

    /// Whether this is the buffer's one handle.
    pub fn is_unique(&self) -> bool {
        // Acquire: another handle's drop (a Release decrement) happened before any write here.
        self.count().load(Ordering::Acquire) == 1
    }

    /// The bytes, writable: only for a buffer no one else holds.
    fn unique_bytes_mut(&mut self) -> &mut [u8] {
        debug_assert!(self.is_unique());
        let len = self.len();
        // SAFETY: as `as_slice`, and no other handle exists to read them meanwhile.
        unsafe { std::slice::from_raw_parts_mut(self.base().as_ptr().add(header_len(len)), len) }
    }

    /// Change the bytes, first grown to at least `min_len` with zero bytes: in place when this
    /// is the buffer's one handle (a grown buffer is reallocated to its exact new length), else
    /// in a copy that this handle then holds (the other holders keep the bytes as they were).
    pub fn edit<R>(&mut self, min_len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let len = self.len();
        let new_len = len.max(min_len);
        // A copy when others hold the buffer, or when the length crosses into the long header
        // form (the data moves within the block); else in place, grown by `realloc`.
        if !self.is_unique() || header_len(new_len) != header_len(len) {
            let mut copy = HeapStr::zeroed(new_len);
            copy.unique_bytes_mut()[..len].copy_from_slice(self.as_slice());
            *self = copy;
        } else if new_len > len {
            let old = layout(len);
            let new = layout(new_len);
            // SAFETY: the block was made with `old`; `new` has the same alignment and a
            // non-zero size; on success the old pointer is no longer used.
            let raw = unsafe { std::alloc::realloc(self.base().as_ptr(), old, new.size()) };
            let Some(ptr) = NonNull::new(raw) else {
                std::alloc::handle_alloc_error(new)
            };
            // SAFETY: the new block holds the header and `new_len` bytes; the grown tail is
            // zeroed before anyone reads it.
            unsafe {
                Self::write_len(ptr, new_len);
                std::ptr::write_bytes(
                    ptr.as_ptr().add(header_len(new_len) + len),
                    0,
                    new_len - len,
                );
            }
            self.0 = ptr.cast();
        }
        f(self.unique_bytes_mut())
    }

    /// The bytes as a `Bytes`: one that shares this buffer (one small allocation for the
    /// `Bytes`' own header, no copy), or for up to [`COPY_MAX`] bytes a copy (an allocation
    /// either way; the copy spares the shared count's atomic operations).
    pub fn to_bytes(&self) -> Bytes {
        if self.len() <= COPY_MAX {
            Bytes::copy_from_slice(self.as_slice())
        } else {
            Bytes::from_owner(self.clone())
        }
    }

    /// Bytes the allocation takes: the header and the data (before the allocator's rounding).
    pub fn alloc_len(len: usize) -> usize {
        header_len(len) + len
    }
}

impl Clone for HeapStr {
    fn clone(&self) -> Self {
        // Relaxed, as `Arc::clone`: a new handle needs no ordering with other accesses.
        let old = self.count().fetch_add(1, Ordering::Relaxed);
        if old >= u32::MAX / 2 {
            // Two billion handles to one buffer is a leak somewhere; wrapping the count would
            // free the buffer while it is in use.
            std::process::abort();
        }
        HeapStr(self.0)
    }
}

impl Drop for HeapStr {
    fn drop(&mut self) {
        if self.count().fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Acquire: every other handle's use happened before the free (as `Arc::drop`).
        fence(Ordering::Acquire);
        let len = self.len();
        // SAFETY: the last handle: the block was made with `layout(len)` and no one uses it.
        unsafe { std::alloc::dealloc(self.base().as_ptr(), layout(len)) }
    }
}

impl AsRef<[u8]> for HeapStr {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::ops::Deref for HeapStr {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// A map keyed by `HeapStr` is looked up by `&[u8]`: equality, order and hash are the bytes'.
impl std::borrow::Borrow<[u8]> for HeapStr {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for HeapStr {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for HeapStr {}

impl PartialOrd for HeapStr {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for HeapStr {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl std::hash::Hash for HeapStr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl From<&[u8]> for HeapStr {
    fn from(bytes: &[u8]) -> HeapStr {
        HeapStr::copy_from_slice(bytes)
    }
}

impl std::fmt::Debug for HeapStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&Bytes::copy_from_slice(self.as_slice()), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heap_string_is_a_thin_pointer_with_its_count_in_the_allocation() {
        assert_eq!(std::mem::size_of::<HeapStr>(), 8);
        assert_eq!(std::mem::size_of::<Option<HeapStr>>(), 8);
        assert_eq!(HeapStr::alloc_len(100), 108);
        assert_eq!(
            HeapStr::alloc_len(u32::MAX as usize),
            16 + u32::MAX as usize
        );
    }

    #[test]
    fn clones_share_the_bytes_and_the_last_drop_frees_them() {
        let data: Vec<u8> = (0..200u8).collect();
        let a = HeapStr::copy_from_slice(&data);
        assert!(a.is_unique());
        let b = a.clone();
        assert!(!a.is_unique() && !b.is_unique());
        assert_eq!(a.as_slice().as_ptr(), b.as_slice().as_ptr(), "no copy");
        let bytes = b.to_bytes();
        assert_eq!(
            bytes.as_ptr(),
            a.as_slice().as_ptr(),
            "a long string is shared"
        );
        drop(a);
        drop(b);
        assert_eq!(
            &bytes[..],
            &data[..],
            "a reply outlives the value it was read from"
        );
        let c = HeapStr::copy_from_slice(&[]);
        assert!(c.is_empty());
    }

    #[test]
    fn an_edit_of_a_shared_buffer_leaves_the_other_holders_their_bytes() {
        let mut a = HeapStr::copy_from_slice(b"0123456789abcdefghijklmnopqrstuvwxyz");
        let snapshot = a.clone();
        let reply = a.to_bytes();
        a.edit(40, |b| b[0] = b'X');
        assert_eq!(a.len(), 40);
        assert_eq!(&a.as_slice()[..3], b"X12");
        assert_eq!(&a.as_slice()[36..], &[0, 0, 0, 0]);
        assert_eq!(snapshot.as_slice(), b"0123456789abcdefghijklmnopqrstuvwxyz");
        assert_eq!(&reply[..], b"0123456789abcdefghijklmnopqrstuvwxyz");
        assert!(a.is_unique());
    }

    #[test]
    fn an_edit_of_a_unique_buffer_is_in_place_and_grows_with_zero_bytes() {
        let mut a = HeapStr::copy_from_slice(&[7u8; 64]);
        let at = a.as_slice().as_ptr();
        a.edit(10, |b| b[63] = 1);
        assert_eq!(
            a.as_slice().as_ptr(),
            at,
            "no copy for an edit within the length"
        );
        assert_eq!(a.len(), 64);
        for grow in [65, 100, 1000, 70_000] {
            let before = a.len();
            a.edit(grow, |b| b[grow - 1] = 9);
            assert_eq!(a.len(), grow);
            assert!(a.as_slice()[..64].iter().take(63).all(|&b| b == 7));
            assert_eq!(a.as_slice()[63], 1);
            assert!(a.as_slice()[before..grow - 1].iter().all(|&b| b == 0));
            assert_eq!(a.as_slice()[grow - 1], 9);
        }
    }

    #[test]
    fn concurrent_clones_and_drops_keep_the_count() {
        let a = HeapStr::copy_from_slice(&[1u8; 300]);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let b = a.clone();
                        let r = b.to_bytes();
                        assert_eq!(r.len(), 300);
                    }
                });
            }
        });
        assert!(a.is_unique());
    }
}
