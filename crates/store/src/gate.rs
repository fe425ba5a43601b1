//! The store gate: a reader-writer lock split into padded slots so that ordinary commands on
//! different connections never touch the same cache line (a "big reader" lock).
//!
//! A reader locks one slot chosen by the caller (the connection id); a writer (EXEC, arming a
//! snapshot) locks every slot in index order, which excludes all readers. With one shared lock
//! word every command on every core would bounce that word between caches; with slots, readers
//! on different slots share nothing.

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Number of reader slots (a power of two).
const SLOTS: usize = 16;

/// One slot on its own 128-byte line (two 64-byte lines: adjacent-line prefetchers pair them).
#[repr(align(128))]
#[derive(Default)]
struct Slot(RwLock<()>);

/// See the module docs.
pub struct Gate {
    slots: [Slot; SLOTS],
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            slots: std::array::from_fn(|_| Slot::default()),
        }
    }
}

/// A shared hold of the gate.
pub struct SharedHold<'a> {
    _guard: RwLockReadGuard<'a, ()>,
}

/// An exclusive hold of the gate: every slot, in order.
pub struct ExclusiveHold<'a> {
    _guards: Vec<RwLockWriteGuard<'a, ()>>,
}

impl Gate {
    /// Shared hold on the slot for `who` (any stable number, e.g. a connection id).
    pub fn shared(&self, who: u64) -> SharedHold<'_> {
        SharedHold {
            _guard: self.slots[(who as usize) & (SLOTS - 1)].0.read(),
        }
    }

    /// Exclusive hold: waits for every reader to leave, keeps new ones out until dropped.
    pub fn exclusive(&self) -> ExclusiveHold<'_> {
        ExclusiveHold {
            _guards: self.slots.iter().map(|s| s.0.write()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn exclusive_excludes_every_slot() {
        let gate = Arc::new(Gate::default());
        let inside = Arc::new(AtomicBool::new(false));
        let hold = gate.exclusive();
        let handles: Vec<_> = (0..SLOTS as u64)
            .map(|who| {
                let (gate, inside) = (gate.clone(), inside.clone());
                std::thread::spawn(move || {
                    let _s = gate.shared(who);
                    assert!(
                        inside.load(Ordering::SeqCst),
                        "reader got in during exclusive"
                    );
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(50));
        inside.store(true, Ordering::SeqCst);
        drop(hold);
        for h in handles {
            h.join().unwrap();
        }
    }
}
