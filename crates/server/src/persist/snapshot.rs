//! Taking a snapshot (SAVE, BGSAVE, the size/time trigger): arm the store's copy-on-write
//! snapshot under the exclusive gate, walk the keyspaces on one thread while the log writes the
//! encoded items on another, with a byte budget (`SNAPSHOT_IN_FLIGHT_BYTES`) between the two,
//! then record the outcome in `Persistence` for INFO and LASTSAVE.
//!
//! May import: `persist::record` (the item encoding), `state`, `alloc`. Must not import `command`,
//! `persist::write` or `persist::replay`.

use super::record;
use super::unix_now;
use bytes::Bytes;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Encoded snapshot items may wait for the snapshot writer up to this many bytes: the thread
/// walking the keyspaces encodes faster than the disk takes them, and a count bound alone let a
/// `SAVE` of 2.4 GB in 4 MiB values hold 1.3 GB of copies at once.
const SNAPSHOT_IN_FLIGHT_BYTES: usize = 64 << 20;

/// The bytes of encoded items between the walking thread and the writer, and whether the writer
/// has stopped taking them (then the walker must not wait).
#[derive(Default)]
struct InFlight {
    state: Mutex<(usize, bool)>,
    changed: parking_lot::Condvar,
}

impl InFlight {
    /// Waits until `len` more bytes fit (one item of any size fits when none is waiting);
    /// false once the writer is gone.
    fn take(&self, len: usize) -> bool {
        let mut state = self.state.lock();
        while state.0 > 0 && state.0 + len > SNAPSHOT_IN_FLIGHT_BYTES && !state.1 {
            self.changed.wait(&mut state);
        }
        state.0 += len;
        !state.1
    }
    fn give(&self, len: usize) {
        self.state.lock().0 -= len;
        self.changed.notify_one();
    }
    fn close(&self) {
        self.state.lock().1 = true;
        self.changed.notify_all();
    }
}

/// The writer's side of the item channel: returns each item's bytes to the budget, and closes
/// it when dropped (the snapshot ended, or failed and stopped reading).
struct Received<'a> {
    rx: std::sync::mpsc::Receiver<Bytes>,
    budget: &'a InFlight,
}

impl Iterator for Received<'_> {
    type Item = Bytes;
    fn next(&mut self) -> Option<Bytes> {
        let item = self.rx.recv().ok()?;
        self.budget.give(item.len());
        Some(item)
    }
}

impl Drop for Received<'_> {
    fn drop(&mut self) {
        self.budget.close();
    }
}

/// Take a snapshot now (SAVE, BGSAVE, the size/time trigger). Blocking: run it off the async
/// workers. Writers stall at most once, for one shard's copy (see `gradus_store::snapshot`).
///
/// Then the memory the snapshot took is given back to the system (`alloc::purge`): its
/// buffers (encoding, compression) and the parts of values that writes copied while it ran are
/// freed by then, but mimalloc keeps freed pages for reuse, so RSS stayed up by what the
/// snapshot took (a 200 k-field hash: +18 MB after every snapshot, `used_memory` unchanged), as
/// redis-server's RSS does not, its child's copied pages going with the child.
pub fn take_snapshot(shared: &crate::state::Shared) -> Result<u64, String> {
    let result = snapshot_now(shared);
    crate::alloc::purge();
    result
}

fn snapshot_now(shared: &crate::state::Shared) -> Result<u64, String> {
    let p = &shared.persist;
    let Some(log) = p.log.get() else {
        return Err("no database is logged (every degree is none)".into());
    };
    if p.snapshot_in_progress.swap(true, Ordering::AcqRel) {
        return Err("Background save already in progress".into());
    }
    // A request made before this point is answered by this snapshot; one made from here on
    // (while it runs) stays set, and another snapshot follows. Cleared only now, so that
    // `snapshot_pending` never reads false between a BGSAVE and the start of its snapshot.
    p.snapshot_requested.store(false, Ordering::Release);
    p.snapshot_started_ms
        .store(gradus_store::now_ms(), Ordering::Relaxed);
    let started = std::time::Instant::now();
    let result = (|| {
        let (lsn, sink, bytes_now, libraries) = {
            // No command is half-applied while the gate is held exclusively, and every applied
            // write has been appended: the state is exactly the log up to `lsn`.
            let _exclusive = shared.store.exclusive();
            (
                log.last_lsn(),
                shared.store.arm_snapshot(),
                log.stats().bytes_written,
                crate::command::functions::snapshot_libraries(shared),
            )
        };
        // Function libraries go first: a loader needs nothing else to read them.
        let libraries: Vec<Bytes> = libraries
            .iter()
            .map(|(db, codes)| record::encode_functions(*db, codes))
            .collect();
        let arm_micros = started.elapsed().as_micros() as u64;
        let now = gradus_store::now_ms();
        let compress = shared.config.durability.snapshot_compression;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Bytes>(4096);
        let budget = InFlight::default();
        // Set by the drain thread after its last item, before its sender goes: the channel
        // closing without it (the thread panicked) must fail the snapshot, not end it early.
        let drained = AtomicBool::new(false);
        let (written, longest_copy) = std::thread::scope(|scope| {
            let (drained, budget) = (&drained, &budget);
            let drain = scope.spawn(move || {
                let longest = sink.drain(&shared.store, now, |db, key, item| {
                    if p.degrees.get(db).is_some_and(|d| d.is_logged()) {
                        // The receiver only goes away if the snapshot failed; stop quietly then.
                        record::encode_item(db, key, item, compress, |item| {
                            if budget.take(item.len()) {
                                let _ = tx.send(item);
                            }
                        });
                    }
                });
                drained.store(true, Ordering::Release);
                longest
            });
            let incomplete = std::iter::from_fn(|| {
                (!drained.load(Ordering::Acquire))
                    .then(|| Err("the thread walking the keyspaces stopped early".to_string()))
            })
            .take(1);
            let received = Received { rx, budget };
            let written = log.write_snapshot_from(
                lsn,
                &mut libraries
                    .into_iter()
                    .map(Ok)
                    .chain(received.map(Ok))
                    .chain(incomplete),
            );
            // A panic there has failed the snapshot (above); report it as this snapshot's error.
            (written, drain.join())
        });
        let written = written.map_err(|e| e.to_string())?;
        let longest_copy =
            longest_copy.map_err(|_| "the thread walking the keyspaces panicked".to_string())?;
        let copy_micros = longest_copy.with_wait.as_micros() as u64;
        let hold_micros = longest_copy.held.as_micros() as u64;
        p.bytes_at_last_snapshot.store(bytes_now, Ordering::Relaxed);
        p.last_snapshot_arm_micros
            .store(arm_micros, Ordering::Relaxed);
        p.last_snapshot_max_copy_micros
            .store(copy_micros, Ordering::Relaxed);
        p.last_snapshot_max_hold_micros
            .store(hold_micros, Ordering::Relaxed);
        tracing::info!(
            lsn,
            bytes = written,
            millis = started.elapsed().as_millis() as u64,
            arm_micros,
            longest_shard_copy_micros = copy_micros,
            longest_shard_hold_micros = hold_micros,
            "snapshot written"
        );
        Ok(written)
    })();
    p.last_snapshot_millis
        .store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
    p.snapshot_started_ms.store(0, Ordering::Relaxed);
    p.snapshot_in_progress.store(false, Ordering::Release);
    match &result {
        Ok(written) => {
            p.last_snapshot_bytes.store(*written, Ordering::Relaxed);
            p.snapshots_written.fetch_add(1, Ordering::Relaxed);
            p.last_save_unix.store(unix_now(), Ordering::Relaxed);
            *p.last_snapshot_status.lock() = "ok".into();
        }
        Err(e) => {
            tracing::error!(error = %e, "snapshot failed");
            *p.last_snapshot_status.lock() = format!("err: {e}");
            p.snapshot_failures.fetch_add(1, Ordering::Relaxed);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_snapshot_walk_waits_while_its_items_fill_the_budget() {
        let budget = InFlight::default();
        let half = SNAPSHOT_IN_FLIGHT_BYTES / 2 + 1;
        assert!(budget.take(half), "fits");
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            let budget = &budget;
            scope.spawn(move || done.send(budget.take(half)).unwrap());
            assert!(
                finished.recv_timeout(Duration::from_millis(200)).is_err(),
                "two halves and a byte do not fit: the walk waits"
            );
            budget.give(half);
            assert_eq!(finished.recv_timeout(Duration::from_secs(10)), Ok(true));
        });
        // One item larger than the whole budget still goes when nothing else waits.
        budget.give(half);
        assert!(budget.take(2 * SNAPSHOT_IN_FLIGHT_BYTES));
    }

    #[test]
    fn a_writer_that_stopped_reading_never_leaves_the_walk_waiting() {
        let budget = InFlight::default();
        assert!(budget.take(SNAPSHOT_IN_FLIGHT_BYTES));
        std::thread::scope(|scope| {
            let budget = &budget;
            let walker = scope.spawn(move || budget.take(1));
            std::thread::sleep(Duration::from_millis(50));
            let (_tx, rx) = std::sync::mpsc::sync_channel::<Bytes>(1);
            drop(Received { rx, budget }); // the writer gives up
            assert!(!walker.join().unwrap(), "told that nobody reads any more");
        });
        assert!(!budget.take(1));
    }
}
