//! The server's allocator: mimalloc, wrapped so the process knows how many bytes it has
//! allocated (Redis' `used_memory` is its allocator's count too).
//!
//! Every allocation and free adds or subtracts the size class it is served from
//! (`gradus_store::table::alloc_class`, mimalloc's classes) to one of a few cache-line-sized
//! counters chosen by thread, so that worker threads do not contend on one counter; reading the
//! total sums them (a relaxed, momentarily inexact sum, as any such figure is). mimalloc's own
//! statistics are not kept in release builds, which is why the count is kept here.
//!
//! The binary installs [`CountingAlloc`] as the global allocator; a library test that does not
//! reads 0 from [`allocated_bytes`] (callers fall back to the store's own estimate).
//!
//! It also owns the process' transparent-huge-page switch ([`disable_thp`], Redis'
//! `disable-thp`): mimalloc asks for huge pages on its arenas, and on a kernel whose THP mode is
//! `madvise` that makes every first touch of a 2 MiB region zero all of it.
//!
//! May import: `gradus_store::table::alloc_class`, `libmimalloc_sys`, `libc`. Nothing else.

use gradus_store::table::alloc_class;
use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};

/// Counters; a thread uses the one its index falls on.
const COUNTERS: usize = 16;

#[repr(align(64))]
struct Counter(AtomicIsize);

static ALLOCATED: [Counter; COUNTERS] = [const { Counter(AtomicIsize::new(0)) }; COUNTERS];
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);
/// Set once the binary said the counting allocator is the global one.
static COUNTING: AtomicBool = AtomicBool::new(false);
/// `allocated_bytes()` at activation, and the most it has been when read.
static STARTUP: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Const-initialised and without a destructor: usable from inside the allocator.
    static THREAD_SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn counter() -> &'static AtomicIsize {
    let slot = THREAD_SLOT
        .try_with(|slot| {
            let mut i = slot.get();
            if i == usize::MAX {
                i = NEXT_THREAD.fetch_add(1, Ordering::Relaxed) % COUNTERS;
                slot.set(i);
            }
            i
        })
        .unwrap_or(0);
    &ALLOCATED[slot].0
}

/// A global allocator that counts the bytes `A` has handed out.
pub struct CountingAlloc<A>(pub A);

/// Alignment every mimalloc block has: its size classes are whole words.
const WORD_ALIGN: usize = std::mem::size_of::<usize>();

/// mimalloc as a Rust allocator: plain `mi_malloc`/`mi_zalloc`/`mi_realloc` for the alignments
/// every block has ([`WORD_ALIGN`], nearly every Rust allocation), the aligned calls only above.
///
/// Why not the `mimalloc` crate's `MiMalloc`: it calls `mi_malloc_aligned` for everything, and
/// mimalloc 3's aligned path serves a size that is not a power of two by over-allocating
/// (`size + align - 1`) from the next class whenever the class' own page has no free block —
/// which is always, since only plain allocations ever create that page. Measured with
/// callgrind: every request's argument vector went that slow path (~230 instructions per
/// request), and a key's 80-byte block took a 96-byte one.
pub struct Mimalloc;

// SAFETY: forwards to mimalloc, whose blocks are all aligned to `WORD_ALIGN`; larger
// alignments use its aligned calls. `mi_free` frees blocks from either.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe {
            if layout.align() <= WORD_ALIGN {
                libmimalloc_sys::mi_malloc(layout.size()) as *mut u8
            } else {
                libmimalloc_sys::mi_malloc_aligned(layout.size(), layout.align()) as *mut u8
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        unsafe {
            if layout.align() <= WORD_ALIGN {
                libmimalloc_sys::mi_zalloc(layout.size()) as *mut u8
            } else {
                libmimalloc_sys::mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        unsafe { libmimalloc_sys::mi_free(ptr.cast()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        unsafe {
            if layout.align() <= WORD_ALIGN {
                libmimalloc_sys::mi_realloc(ptr.cast(), new_size) as *mut u8
            } else {
                libmimalloc_sys::mi_realloc_aligned(ptr.cast(), new_size, layout.align()) as *mut u8
            }
        }
    }
}

// SAFETY: every call is forwarded to `A` unchanged; only counters are updated besides.
unsafe impl<A: GlobalAlloc> GlobalAlloc for CountingAlloc<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            counter().fetch_add(alloc_class(layout.size()) as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { self.0.alloc_zeroed(layout) };
        if !p.is_null() {
            counter().fetch_add(alloc_class(layout.size()) as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { self.0.dealloc(ptr, layout) };
        counter().fetch_sub(alloc_class(layout.size()) as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            let delta = alloc_class(new_size) as isize - alloc_class(layout.size()) as isize;
            counter().fetch_add(delta, Ordering::Relaxed);
        }
        p
    }
}

impl<A> CountingAlloc<A> {
    /// Note that this allocator is in use (the binary calls this at start).
    pub fn activate(&self) {
        COUNTING.store(true, Ordering::Relaxed);
        STARTUP.store(allocated_bytes(), Ordering::Relaxed);
    }
}

/// Bytes allocated through the global allocator now, or 0 when it is not [`CountingAlloc`].
pub fn allocated_bytes() -> usize {
    if !COUNTING.load(Ordering::Relaxed) {
        return 0;
    }
    let total: isize = ALLOCATED.iter().map(|c| c.0.load(Ordering::Relaxed)).sum();
    let total = total.max(0) as usize;
    // Written only when passed: a read-modify-write of the shared line on every read would
    // contend (`maxmemory` reads this before every command).
    if total > PEAK.load(Ordering::Relaxed) {
        PEAK.fetch_max(total, Ordering::Relaxed);
    }
    total
}

/// The most [`allocated_bytes`] has been when read (INFO, MEMORY and the memory limits read it).
pub fn peak_allocated_bytes() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// [`allocated_bytes`] when the server started.
pub fn startup_allocated_bytes() -> usize {
    STARTUP.load(Ordering::Relaxed)
}

/// What mimalloc reports of the process (`mi_process_info`): resident and committed bytes now
/// and at their peak.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessMemory {
    pub rss: usize,
    pub peak_rss: usize,
    pub commit: usize,
    pub peak_commit: usize,
}

pub fn process_memory() -> ProcessMemory {
    let (mut elapsed, mut user, mut system) = (0usize, 0usize, 0usize);
    let mut out = ProcessMemory::default();
    let mut faults = 0usize;
    // SAFETY: every pointer is to a live local of the type mimalloc writes.
    unsafe {
        libmimalloc_sys::mi_process_info(
            &mut elapsed,
            &mut user,
            &mut system,
            &mut out.rss,
            &mut out.peak_rss,
            &mut out.commit,
            &mut out.peak_commit,
            &mut faults,
        );
    }
    out
}

/// Turns transparent huge pages off for the whole process (`prctl(PR_SET_THP_DISABLE)`, as
/// redis-server does with `disable-thp yes`); the kernel applies it to every mapping at its next
/// fault, mimalloc's arenas included. With THP, memory mimalloc purged and reuses is faulted in
/// again 2 MiB at a time (LPUSH of 1 KiB elements spent half its time zeroing pages) and a
/// partly used huge page is resident whole (a hash of 10 fields: 360 instead of 310 bytes per
/// key); see `docs/benchmarks/memory.md`. Returns the OS error if the kernel refused.
pub fn disable_thp() -> std::io::Result<()> {
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether transparent huge pages are off for this process (`PR_GET_THP_DISABLE`).
pub fn thp_disabled() -> bool {
    // SAFETY: PR_GET_THP_DISABLE takes integer arguments only.
    unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1 }
}

/// Give memory that mimalloc keeps for reuse back to the system (MEMORY PURGE).
pub fn purge() {
    // SAFETY: no preconditions.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// Set by [`ask_purge`], taken by [`purge_if_asked`].
static PURGE_ASKED: AtomicBool = AtomicBool::new(false);

/// Ask for a [`purge`] soon: a large buffer was freed (see `connection::give_back_big_buffers`).
pub fn ask_purge() {
    PURGE_ASKED.store(true, Ordering::Relaxed);
}

/// [`purge`] if it was asked for since the last call (the server's housekeeping calls this
/// every [`PURGE_PERIOD`] on the worker thread, as redis-server's jemalloc purges dirty pages
/// from a background thread). True when it purged.
pub fn purge_if_asked() -> bool {
    let asked = PURGE_ASKED.swap(false, Ordering::Relaxed);
    if asked {
        purge();
    }
    asked
}

/// How often the server looks whether a purge was asked for: at most one purge per period,
/// however many big buffers are freed in it.
pub const PURGE_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unused_counting_reads_zero_and_process_figures_are_there() {
        // The test binary's allocator is the system's: the count is not kept.
        assert_eq!(allocated_bytes(), 0);
        let memory = process_memory();
        assert!(
            memory.rss > 0 && memory.peak_rss >= memory.rss,
            "{memory:?}"
        );
        purge();
    }
}
