//! Cursor scans over hash maps that keep Redis' SCAN guarantee: an element present for the whole
//! iteration is returned at least once, even if the map grows, shrinks or rehashes in between.
//!
//! The cursor is a position in *hash order*: each call returns the entries whose (60-bit) hash is the
//! smallest at or above the cursor, and the next cursor is one past the largest hash returned. Because
//! an element's hash never changes while the map lives, resizing cannot make the cursor skip it.
//! Equal hashes are returned together, so a call may return a few more than `count`.
//! Cost per call is O(map length); the number of calls is length / count.

use std::collections::BinaryHeap;
use std::hash::{BuildHasher, Hash};

/// Bits of the hash that order a scan (the low bits of a cursor are left for a shard index:
/// `SHARDS` is at most 2^8).
pub const SCAN_HASH_BITS: u32 = 56;

/// The scan position of `key` in a map using `hasher`.
pub fn scan_position<K: Hash + ?Sized, S: BuildHasher>(hasher: &S, key: &K) -> u64 {
    hasher.hash_one(key) >> (64 - SCAN_HASH_BITS)
}

/// One step of a hash-ordered scan over `items` (each with its scan position).
/// Returns the selected items and the next position, or None when the map is exhausted.
pub fn scan_step<T>(
    items: impl Iterator<Item = (u64, T)> + Clone,
    from: u64,
    count: usize,
) -> (Vec<T>, Option<u64>) {
    let count = count.max(1);
    // Pass 1: the `count` smallest positions >= from (a bounded max-heap).
    let mut heap: BinaryHeap<u64> = BinaryHeap::with_capacity(count + 1);
    let mut seen = 0usize;
    for (pos, _) in items.clone() {
        if pos < from {
            continue;
        }
        seen += 1;
        if heap.len() < count {
            heap.push(pos);
        } else if let Some(&top) = heap.peek() {
            if pos < top {
                heap.pop();
                heap.push(pos);
            }
        }
    }
    let Some(&upto) = heap.peek() else {
        return (Vec::new(), None);
    };
    // Pass 2: everything in [from, upto], ties included.
    let out: Vec<T> = items
        .filter(|(pos, _)| *pos >= from && *pos <= upto)
        .map(|(_, t)| t)
        .collect();
    let exhausted = seen <= out.len() || upto + 1 >= (1u64 << SCAN_HASH_BITS);
    (out, if exhausted { None } else { Some(upto + 1) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hashbrown::HashMap;
    use std::collections::HashSet;

    #[test]
    fn full_iteration_returns_every_stable_element_despite_churn() {
        let mut map: HashMap<u32, ()> = (0..1000).map(|i| (i, ())).collect();
        let mut seen = HashSet::new();
        let mut cursor = Some(0u64);
        let mut next_new = 1000;
        while let Some(from) = cursor {
            let items = map
                .iter()
                .map(|(k, _)| (scan_position(map.hasher(), k), *k));
            let (got, next) = scan_step(items, from, 10);
            seen.extend(got);
            cursor = next;
            // Churn: add 20 new elements (forcing rehashes) and remove 5 of the new ones.
            for _ in 0..20 {
                map.insert(next_new, ());
                next_new += 1;
            }
            for k in (next_new - 5)..next_new {
                map.remove(&k);
            }
        }
        for i in 0..1000 {
            assert!(seen.contains(&i), "stable element {i} was skipped");
        }
    }

    #[test]
    fn empty_map_finishes_at_once() {
        let map: HashMap<u32, ()> = HashMap::new();
        let items = map
            .iter()
            .map(|(k, _)| (scan_position(map.hasher(), k), *k));
        let (got, next) = scan_step(items, 0, 10);
        assert!(got.is_empty());
        assert!(next.is_none());
    }
}
