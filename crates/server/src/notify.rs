//! Keyspace notifications: the `notify-keyspace-events` classes (Redis' letters, their parsing
//! and the form CONFIG GET shows), and emission of `__keyspace@N__:key` / `__keyevent@N__:event`
//! messages through [`crate::pubsub`] in the tenant that owns the keyspace (`N` is the
//! keyspace's SELECT number in that tenant, as the tenant's clients know it).
//!
//! What a command emits is data: the write path emits the event its table row names (see
//! `command::Event`) for each key it wrote, expiry emits `expired`, eviction `evicted`. Emission
//! costs one atomic load when notifications are off.
//!
//! May import: `pubsub`, `state`, `tenancy`; no command handlers.

use crate::state::Shared;
use bytes::{Bytes, BytesMut};
use std::sync::atomic::Ordering;

pub const KEYSPACE: u32 = 1 << 0;
pub const KEYEVENT: u32 = 1 << 1;
pub const GENERIC: u32 = 1 << 2;
pub const STRING: u32 = 1 << 3;
pub const LIST: u32 = 1 << 4;
pub const SET: u32 = 1 << 5;
pub const HASH: u32 = 1 << 6;
pub const ZSET: u32 = 1 << 7;
pub const EXPIRED: u32 = 1 << 8;
pub const EVICTED: u32 = 1 << 9;
pub const STREAM: u32 = 1 << 10;
pub const KEY_MISS: u32 = 1 << 11;
pub const MODULE: u32 = 1 << 12;
pub const NEW: u32 = 1 << 13;
/// The classes of values that disappear when emptied.
pub const CONTAINERS: u32 = LIST | SET | HASH | ZSET;
/// Redis' `A`: every class but `m` (key misses) and `n` (new keys).
pub const ALL: u32 =
    GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The classes' letters, in the order Redis shows them.
const LETTERS: [(char, u32); 11] = [
    ('g', GENERIC),
    ('$', STRING),
    ('l', LIST),
    ('s', SET),
    ('h', HASH),
    ('z', ZSET),
    ('x', EXPIRED),
    ('e', EVICTED),
    ('t', STREAM),
    ('d', MODULE),
    ('n', NEW),
];

/// Redis' `keyspaceEventsStringToFlags`: None on a letter it does not know.
pub fn parse(text: &str) -> Option<u32> {
    let mut flags = 0;
    for c in text.chars() {
        flags |= match c {
            'A' => ALL,
            'K' => KEYSPACE,
            'E' => KEYEVENT,
            'm' => KEY_MISS,
            _ => LETTERS.iter().find(|(l, _)| *l == c)?.1,
        };
    }
    Some(flags)
}

/// Redis' `keyspaceEventsFlagsToString`: the form CONFIG GET shows.
pub fn format(flags: u32) -> String {
    let mut out = String::new();
    if flags & ALL == ALL {
        out.push('A');
        if flags & NEW != 0 {
            out.push('n');
        }
    } else {
        for (letter, class) in LETTERS {
            if flags & class != 0 {
                out.push(letter);
            }
        }
    }
    for (letter, class) in [('K', KEYSPACE), ('E', KEYEVENT), ('m', KEY_MISS)] {
        if flags & class != 0 {
            out.push(letter);
        }
    }
    out
}

/// The settings table's check of a `notify-keyspace-events` value: the canonical form, or
/// Redis' error.
pub fn normalize(text: &str) -> Result<String, String> {
    parse(text)
        .map(format)
        .ok_or_else(|| "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.".to_string())
}

/// True when some class is on and has somewhere to go (K or E): one atomic load.
pub fn enabled(shared: &Shared) -> bool {
    let flags = shared.live.notify_flags.load(Ordering::Relaxed);
    flags & (KEYSPACE | KEYEVENT) != 0 && flags & !(KEYSPACE | KEYEVENT) != 0
}

/// True when expirations are to be published (the store keeps the keys it expires for
/// [`publish_expired`] only then).
pub fn wants_expired(shared: &Shared) -> bool {
    let flags = shared.live.notify_flags.load(Ordering::Relaxed);
    flags & (KEYSPACE | KEYEVENT) != 0 && flags & EXPIRED != 0
}

/// Publish `expired` for the keys the store reclaimed since the last call (lazily or by the
/// sweep); the active-expiry timer calls it each cycle.
pub fn publish_expired(shared: &Shared) {
    for (db, keyspace) in shared.store.keyspaces().iter().enumerate() {
        for key in keyspace.take_expired() {
            emit(shared, EXPIRED, "expired", db, &key);
        }
    }
}

/// Publish the notification of `event` (of `class`) on `key` in keyspace `db` (global index),
/// if the configured classes ask for it.
pub fn emit(shared: &Shared, class: u32, event: &str, db: usize, key: &[u8]) {
    let flags = shared.live.notify_flags.load(Ordering::Relaxed);
    if flags & class == 0 || flags & (KEYSPACE | KEYEVENT) == 0 {
        return;
    }
    let Some(tenant) = shared.tenancy.tenant_of(db) else {
        return;
    };
    let select = shared.tenancy.select_of(db);
    let hub = &shared.pubsub;
    if !hub.anyone_listens(tenant) {
        return;
    }
    let mut digits = itoa::Buffer::new();
    let n = digits.format(select).as_bytes();
    if flags & KEYSPACE != 0 {
        let channel = channel(b"__keyspace@", n, key);
        hub.publish(
            crate::pubsub::Kind::Channel,
            tenant,
            &channel,
            event.as_bytes(),
        );
    }
    if flags & KEYEVENT != 0 {
        let channel = channel(b"__keyevent@", n, event.as_bytes());
        hub.publish(crate::pubsub::Kind::Channel, tenant, &channel, key);
    }
}

fn channel(prefix: &[u8], n: &[u8], tail: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(prefix.len() + n.len() + 3 + tail.len());
    out.extend_from_slice(prefix);
    out.extend_from_slice(n);
    out.extend_from_slice(b"__:");
    out.extend_from_slice(tail);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_parse_and_show_like_redis() {
        assert_eq!(normalize("").unwrap(), "");
        assert_eq!(normalize("KEA").unwrap(), "AKE");
        assert_eq!(normalize("Ex").unwrap(), "xE");
        assert_eq!(normalize("K$lg").unwrap(), "g$lK");
        assert_eq!(normalize("Kg$lshzxetd").unwrap(), "AK");
        assert_eq!(normalize("AKEm").unwrap(), "AKEm");
        assert!(normalize("Kq").is_err());
    }
}
