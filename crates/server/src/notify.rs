//! Keyspace notifications: the `notify-keyspace-events` classes (Redis' letters, their parsing
//! and the form CONFIG GET shows), and emission of `__keyspace@N__:key` / `__keyevent@N__:event`
//! messages through [`crate::pubsub`] in the tenant that owns the keyspace (`N` is the
//! keyspace's SELECT number in that tenant, as the tenant's clients know it).
//!
//! Expiry publishes `expired` (and invalidates the key for client-side caching), eviction
//! `evicted`. Emission costs one atomic load per command when notifications and client-side
//! caching are off.
//!
//! Handlers publish their own events through `Ctx::notify` in the order Redis' handlers call
//! `notifyKeyspaceEvent`; simple commands name theirs in their table row instead. Around every
//! command, [`before`] and [`after`] add what no handler says: `new` (a key the command found
//! absent, before its first event on it), `keymiss` (a read of an absent key) and the
//! expirations its lookups caused (published at once, before the command's own events).
//!
//! May import: `pubsub`, `state`, `tenancy`, `tracking` (expired keys are invalidated),
//! `client`, the command table's rows (not its handlers).

use crate::client::ClientState;
use crate::command::{flags, CommandSpec, Notify};
use crate::state::Shared;
use bytes::{Bytes, BytesMut};
use gradus_proto::Frame;
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
    on(shared.live.notify_flags.load(Ordering::Relaxed))
}

fn on(flags: u32) -> bool {
    flags & (KEYSPACE | KEYEVENT) != 0 && flags & !(KEYSPACE | KEYEVENT) != 0
}

/// True when expirations are to be published.
pub fn wants_expired(shared: &Shared) -> bool {
    let flags = shared.live.notify_flags.load(Ordering::Relaxed);
    flags & (KEYSPACE | KEYEVENT) != 0 && flags & EXPIRED != 0
}

/// True while the store must keep the keys it expires: for `expired` notifications, or for
/// client-side caching's invalidations (a cached key that expires is invalidated, as in Redis).
pub fn keeps_expired(shared: &Shared) -> bool {
    wants_expired(shared) || shared.tracking.is_active()
}

/// Publish `expired` for the keys the store reclaimed since the last call (lazily or by the
/// sweep), and invalidate them for the connections that may cache them; the active-expiry
/// timer calls it each cycle.
pub fn publish_expired(shared: &Shared) {
    for db in 0..shared.store.keyspaces().len() {
        expired_in(shared, None, db);
    }
}

/// [`publish_expired`] for keyspace `db` only, during a command of `client` (a lazy expiry:
/// Redis publishes it at once, before the command's own events; an invalidation due to the
/// client itself comes after its reply).
pub fn expired_in(shared: &Shared, mut client: Option<&mut ClientState>, db: usize) {
    let Some(keyspace) = shared.store.db(db) else {
        return;
    };
    let keys = keyspace.take_expired();
    if keys.is_empty() {
        return;
    }
    let tenant = shared.tenancy.tenant_of(db);
    // BCAST invalidations: with the running command's (sent once it has finished), or, for
    // the expiry cycle, all of this cycle's keys at once.
    let mut written = Vec::new();
    for key in keys {
        // Redis' deleteExpiredKeyAndPropagate: the event, then the invalidation.
        emit(shared, EXPIRED, "expired", db, &key);
        if let Some(tenant) = tenant.filter(|_| shared.tracking.is_active()) {
            let by = client.as_ref().map_or(0, |c| c.id);
            let batch = match client.as_mut() {
                Some(c) => &mut c.bcast_written,
                None => &mut written,
            };
            let own =
                shared
                    .tracking
                    .invalidate_batched(by, tenant, std::slice::from_ref(&key), batch);
            if let Some(c) = client.as_mut() {
                c.after_reply.extend(own);
            }
        }
    }
    let own = shared.tracking.broadcast(0, written);
    debug_assert!(own.is_empty(), "no connection has id 0");
}

/// Events that never create their key (the others, on a key the command found absent, are
/// preceded by `new`, where Redis' `dbAdd` publishes it).
fn creates(event: &str) -> bool {
    !matches!(
        event,
        "del" | "rename_from" | "move_from" | "expired" | "evicted" | "keymiss" | "new"
    )
}

/// A command's event `event` (of `class`) on `key` in keyspace `db`: expirations its lookups
/// caused come first, then `new` when this event created the key, then the event itself.
pub fn key_event(
    shared: &Shared,
    client: &mut ClientState,
    class: u32,
    event: &str,
    db: usize,
    key: &[u8],
) {
    let flags = shared.live.notify_flags.load(Ordering::Relaxed);
    if !on(flags) || client.notify_muted {
        return;
    }
    if keeps_expired(shared) {
        expired_in(shared, Some(&mut *client), db);
    }
    publish_misses(shared, client);
    if flags & NEW != 0 && creates(event) {
        key_created(shared, client, db, key);
    }
    emit(shared, class, event, db, key);
}

/// The running write's pending `keymiss` events (see `ClientState::pending_misses`).
fn publish_misses(shared: &Shared, client: &mut ClientState) {
    for (db, key) in std::mem::take(&mut client.pending_misses) {
        emit(shared, KEY_MISS, "keymiss", db, &key);
    }
}

/// Publish `new` for `key`, which the running command has just added (Redis' `dbAdd` where a
/// command adds a key before its first event on it, or over a key it deleted: RENAME, COPY,
/// MOVE, RESTORE).
pub fn key_added(shared: &Shared, client: &mut ClientState, db: usize, key: &[u8]) {
    let flags = shared.live.notify_flags.load(Ordering::Relaxed);
    if !on(flags) || flags & NEW == 0 || client.notify_muted {
        return;
    }
    client
        .absent_keys
        .retain(|(d, k)| !(*d == db && k.as_ref() == key));
    emit(shared, NEW, "new", db, key);
}

/// Publish `new` for `key` if the running command found it absent and has not said so yet.
fn key_created(shared: &Shared, client: &mut ClientState, db: usize, key: &[u8]) {
    if let Some(i) = client
        .absent_keys
        .iter()
        .position(|(d, k)| *d == db && k.as_ref() == key)
    {
        client.absent_keys.swap_remove(i);
        emit(shared, NEW, "new", db, key);
    }
}

/// What the notifications of a command need from before it ran (see [`before`]).
pub struct Before {
    /// Its keys, and whether each was live.
    keys: Vec<(Bytes, bool)>,
    /// The enclosing command's absent keys and pending misses (a script's), restored after.
    saved_absent: Vec<(usize, Bytes)>,
    saved_misses: Vec<(usize, Bytes)>,
    /// Notifications are on (else only expirations are drained after).
    on: bool,
}

/// Called before a command runs: notes what [`after`] needs (which of its keys exist, for
/// `new`, `keymiss` and DEL's `del`). None when there is nothing to do (one atomic load and a
/// flag check when notifications and client-side caching are off).
pub fn before(
    shared: &Shared,
    client: &mut ClientState,
    spec: &CommandSpec,
    args: &[Bytes],
    now_ms: u64,
) -> Option<Before> {
    let flags = shared.live.notify_flags.load(Ordering::Relaxed);
    let on = on(flags);
    if !on && !keeps_expired(shared) {
        return None;
    }
    let write = spec.runs_as_write();
    let want_new = on && flags & NEW != 0 && write;
    let want_miss = on && flags & KEY_MISS != 0 && spec.has(flags::READONLY);
    // Whether each key exists is looked up only when something needs it (`new`, `keymiss`,
    // DEL's `del`): a row's events need the keys alone.
    let look = want_new || want_miss || spec.notify.is_some_and(|n| n.only_existing);
    let keys = if on && (look || spec.notify.is_some()) {
        let db = client.db;
        let keyspace = shared.store.db(db)?;
        spec.key_indexes(args)
            .into_iter()
            .filter_map(|i| args.get(i).cloned())
            .map(|key| {
                let live = !look || keyspace.lock(&key).is_live(&key, now_ms);
                (key, live)
            })
            .collect()
    } else {
        Vec::new()
    };
    let misses = match spec.read_keys {
        Some((first, last)) if on && flags & KEY_MISS != 0 && write => {
            let db = client.db;
            let end = if last < 0 {
                args.len()
            } else {
                (last as usize + 1).min(args.len())
            };
            let keyspace = shared.store.db(db)?;
            // After a `numkeys` argument only the keys it counts are read (ZUNIONSTORE's
            // options follow them).
            let counted = (spec.numkeys_at > 0).then(|| spec.key_indexes(args));
            (first..end.max(first))
                .filter(|i| counted.as_ref().is_none_or(|keys| keys.contains(i)))
                .filter_map(|i| args.get(i))
                .filter(|key| !keyspace.lock(key).is_live(key, now_ms))
                .map(|key| (db, key.clone()))
                .collect()
        }
        _ => Vec::new(),
    };
    let saved_absent = if want_new {
        let db = client.db;
        let absent = keys
            .iter()
            .filter(|(_, live)| !live)
            .map(|(k, _)| (db, k.clone()))
            .collect();
        std::mem::replace(&mut client.absent_keys, absent)
    } else {
        std::mem::take(&mut client.absent_keys)
    };
    let saved_misses = std::mem::replace(&mut client.pending_misses, misses);
    Some(Before {
        keys,
        saved_absent,
        saved_misses,
        on,
    })
}

/// Called after a command ran, with its reply: publishes the expirations it caused, `keymiss`
/// for the keys a read found absent, and the events its table row names (commands whose
/// handler publishes its own events have none).
pub fn after(
    shared: &Shared,
    client: &mut ClientState,
    spec: &CommandSpec,
    before: Option<Before>,
    reply: &Frame,
    now_ms: u64,
) {
    let Some(before) = before else {
        return;
    };
    let db = client.db;
    if keeps_expired(shared) {
        expired_in(shared, Some(&mut *client), db);
    }
    if before.on && !client.notify_muted {
        if reply.is_error() {
            client.pending_misses.clear();
        }
        publish_misses(shared, client);
        let flags = shared.live.notify_flags.load(Ordering::Relaxed);
        if flags & KEY_MISS != 0 && spec.has(flags::READONLY) {
            // Redis looks keys up in order: a WRONGTYPE stops at the first key that exists
            // (the misses before it were published); another error looks nothing up.
            let looked_up = match reply {
                Frame::Error(e) if e.starts_with("WRONGTYPE") => {
                    before.keys.iter().position(|(_, live)| *live).unwrap_or(0)
                }
                Frame::Error(_) => 0,
                _ => before.keys.len(),
            };
            for (key, _) in before.keys[..looked_up].iter().filter(|(_, live)| !live) {
                emit(shared, KEY_MISS, "keymiss", db, key);
            }
        }
        if let Some(notify) = spec.notify {
            table_events(shared, client, notify, &before.keys, reply, db, now_ms);
        }
    }
    client.absent_keys = before.saved_absent;
    client.pending_misses = before.saved_misses;
}

/// The events a table row names (`CommandSpec::notifies`), for its keys.
fn table_events(
    shared: &Shared,
    client: &mut ClientState,
    notify: Notify,
    keys: &[(Bytes, bool)],
    reply: &Frame,
    db: usize,
    now_ms: u64,
) {
    let unchanged = matches!(
        reply,
        Frame::Integer(0) | Frame::Null | Frame::NullArray | Frame::Error(_)
    );
    if (unchanged && notify.only_if_changed) || reply.is_error() || notify.events.is_empty() {
        return;
    }
    let exists = |key: &[u8]| {
        shared
            .store
            .db(db)
            .is_some_and(|ks| ks.lock(key).is_live(key, now_ms))
    };
    for (i, (key, existed)) in keys.iter().enumerate() {
        let (class, event) = notify.events[i.min(notify.events.len() - 1)];
        if event.is_empty() || (notify.only_existing && !existed) {
            continue;
        }
        key_event(shared, client, class, event, db, key);
        // A list, set, hash or sorted set left empty is deleted: Redis says `del` too.
        if class & CONTAINERS != 0 && !exists(key) {
            key_event(shared, client, GENERIC, "del", db, key);
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
