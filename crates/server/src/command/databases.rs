//! Commands that reach across the keyspaces of a tenant — COPY, MOVE, SWAPDB — and OBJECT, which
//! reports how a key's value is kept.
//!
//! A database number in these commands is a SELECT index of the caller's tenant (the tenant
//! owning the selected keyspace), so no command here can reach another tenant's data; a number
//! the tenant does not have is Redis' `DB index is out of range`. Each is logged as itself and
//! replayed by running it again, resolving its numbers the same way. The write path decides
//! what may cross keyspaces (`persist::write::Scope::Across` and `Scope::Swap`): keys may leave
//! a logged keyspace for any other, may not come from a `none` keyspace into a logged one, and
//! SWAPDB pairs keyspaces of the same degree and eviction policy only.
//!
//! Keys moved between keyspaces keep their value, TTL and last-access time and get a new
//! version where they land, so a WATCH on either side sees the change; SWAPDB moves every key of
//! both keyspaces one by one under the exclusive store gate (O(N) where Redis swaps two
//! pointers, but no command sees the keyspaces half swapped and a running snapshot keeps what
//! it needs key by key).

use super::{cmd, flags, sub, CommandSpec, Ctx, OtherKeyspaces, KEY1, NO_KEYS};
use crate::args::{is, parse_i64};
use crate::error::{CmdError, CmdResult};
use bytes::Bytes;
use gradus_proto::Frame;
use gradus_store::{AccessClock, Entry, ShardGuard};

const W: u32 = flags::WRITE;
/// OBJECT's subcommands read a key without naming it at a key position: they need `read`.
const OBJ: u32 = flags::READONLY | flags::READS_KEYSPACE;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("copy", -3, W | flags::DENYOOM, (1, 2, 1), "generic", "Copies the value of a key to a new key.", copy)
        .with_other_keyspaces(OtherKeyspaces::Target(copy_target)).reads(1, 1).key_flags(&["RO access", "OW update"]),
    cmd("move", 3, W | flags::FAST, KEY1, "generic", "Moves a key to another database.", move_key)
        .with_other_keyspaces(OtherKeyspaces::Target(move_target)),
    cmd("swapdb", 3, W | flags::FAST | flags::EXCLUSIVE, NO_KEYS, "server", "Swaps two Redis databases.", swapdb)
        .with_other_keyspaces(OtherKeyspaces::Swap(swap_pair)),
    cmd("object", -2, flags::READONLY, NO_KEYS, "generic", "A container for object introspection commands.", object).with_subcommands(&[
        sub("object|encoding", 3, OBJ, "Returns the internal encoding of a Redis object.").with_keys((2, 2, 1)).key_flags(&["RO"]),
        sub("object|freq", 3, OBJ, "Returns the logarithmic access frequency counter of a Redis object.").with_keys((2, 2, 1)).key_flags(&["RO"]),
        sub("object|idletime", 3, OBJ, "Returns the time since the last access to a Redis object.").with_keys((2, 2, 1)).key_flags(&["RO"]),
        sub("object|refcount", 3, OBJ, "Returns the reference count of a value of a key.").with_keys((2, 2, 1)).key_flags(&["RO"]),
        sub("object|help", 2, flags::LOADING, "Returns helpful text about the different subcommands."),
    ]),
];

/// The DB number of `COPY src dst [DB n] [REPLACE]`, when there is one (the last DB wins, as
/// Redis parses it).
fn copy_target(args: &[Bytes]) -> Option<i64> {
    let mut found = None;
    let mut i = 3;
    while i < args.len() {
        if is(&args[i], "db") && i + 1 < args.len() {
            found = parse_i64(&args[i + 1]);
            i += 1;
        }
        i += 1;
    }
    found
}

fn move_target(args: &[Bytes]) -> Option<i64> {
    parse_i64(&args[2])
}

fn swap_pair(args: &[Bytes]) -> Option<(i64, i64)> {
    Some((parse_i64(&args[1])?, parse_i64(&args[2])?))
}

/// A DB number argument as Redis reads it (a 32-bit int).
fn db_number(arg: &[u8]) -> Result<i64, CmdError> {
    parse_i64(arg)
        .filter(|n| i32::try_from(*n).is_ok())
        .ok_or(CmdError::NotInteger)
}

/// Lock the shard of `src_key` in keyspace `src` and that of `dst_key` in keyspace `dst`
/// (distinct keyspaces), in ascending keyspace order so two such commands never deadlock.
fn lock_across<'a>(
    ctx: &'a Ctx<'_>,
    (src, src_key): (usize, &[u8]),
    (dst, dst_key): (usize, &[u8]),
) -> (ShardGuard<'a>, ShardGuard<'a>) {
    let store = &ctx.shared.store;
    let keyspace = |g: usize| store.db(g).expect("a tenant's keyspace exists");
    if src < dst {
        let s = keyspace(src).lock(src_key);
        (s, keyspace(dst).lock(dst_key))
    } else {
        let d = keyspace(dst).lock(dst_key);
        (keyspace(src).lock(src_key), d)
    }
}

/// Note `key` of keyspace `db` as written, for clients blocked on it (BZPOPMIN & co.).
fn note_ready(ctx: &mut Ctx<'_>, db: usize, key: &Bytes) {
    if ctx.shared.blocked.any() {
        ctx.client.ready_keys.push((db, key.clone()));
    }
}

/// The entry a copy writes: the same value and TTL, memcached flags included, accessed now.
fn duplicate(entry: &Entry) -> (gradus_store::Value, Option<u64>, gradus_store::ItemMeta) {
    (entry.value.clone(), entry.expires_at(), entry.meta())
}

fn copy(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (src, dst) = (&args[1], &args[2]);
    let here = ctx.client.db;
    let mut target = here;
    let mut replace = false;
    let mut i = 3;
    while i < args.len() {
        if is(&args[i], "replace") {
            replace = true;
        } else if is(&args[i], "db") && i + 1 < args.len() {
            target = ctx.sibling(db_number(&args[i + 1])?)?;
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if target == here && src == dst {
        return Err(CmdError::err("source and destination objects are the same"));
    }
    let now = ctx.now_ms;
    let copied = if target == here {
        let db = ctx.db();
        let mut lock = db.lock_keys([src.as_ref(), dst.as_ref()]);
        let Some(entry) = lock.shard(src).get(src, now) else {
            return Ok(Frame::Integer(0));
        };
        let (value, expires_at, meta) = duplicate(entry);
        if !replace && lock.shard(dst).get(dst, now).is_some() {
            return Ok(Frame::Integer(0));
        }
        lock.shard(dst)
            .set_with_meta(dst, value, expires_at, meta, now);
        true
    } else {
        let (mut from, mut to) = lock_across(ctx, (here, src), (target, dst));
        let Some(entry) = from.get(src, now) else {
            return Ok(Frame::Integer(0));
        };
        let (value, expires_at, meta) = duplicate(entry);
        if !replace && to.get(dst, now).is_some() {
            return Ok(Frame::Integer(0));
        }
        to.set_with_meta(dst, value, expires_at, meta, now);
        true
    };
    ctx.notify_new_in(target, dst);
    ctx.notify_in(target, crate::notify::GENERIC, "copy_to", dst);
    note_ready(ctx, target, dst);
    Ok(Frame::Integer(copied as i64))
}

fn move_key(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let here = ctx.client.db;
    let target = ctx.sibling(db_number(&args[2])?)?;
    if target == here {
        return Err(CmdError::err("source and destination objects are the same"));
    }
    let now = ctx.now_ms;
    {
        let (mut from, mut to) = lock_across(ctx, (here, key), (target, key));
        if from.get(key, now).is_none() || to.get(key, now).is_some() {
            return Ok(Frame::Integer(0));
        }
        let entry = from.remove(key, now).ok_or(CmdError::NoSuchKey)?;
        to.adopt(key, entry, now);
    }
    ctx.notify_new_in(target, key);
    ctx.notify_in(here, crate::notify::GENERIC, "move_from", key);
    ctx.notify_in(target, crate::notify::GENERIC, "move_to", key);
    note_ready(ctx, target, key);
    Ok(Frame::Integer(1))
}

fn swapdb(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let first = db_number(&args[1]).map_err(|_| CmdError::err("invalid first DB index"))?;
    let second = db_number(&args[2]).map_err(|_| CmdError::err("invalid second DB index"))?;
    let (a, b) = (ctx.sibling(first)?, ctx.sibling(second)?);
    if a == b {
        return Ok(Frame::ok());
    }
    let now = ctx.now_ms;
    let store = &ctx.shared.store;
    let (ka, kb) = (
        store.db(a).expect("a tenant's keyspace exists"),
        store.db(b).expect("a tenant's keyspace exists"),
    );
    let (from_a, from_b) = (ka.take_all(now), kb.take_all(now));
    let mut moved = Vec::new();
    for (into, entries, g) in [(kb, from_a, b), (ka, from_b, a)] {
        for (key, entry) in entries {
            into.lock(&key).adopt(&key, entry, now);
            moved.push((g, key));
        }
    }
    if ctx.shared.blocked.any() {
        // The keys that came in, and those waited on that may have gone.
        ctx.client.ready_keys.extend(moved);
        let waited = ctx.shared.blocked.keys_waited_in(&[a, b]);
        ctx.client.ready_keys.extend(waited);
    }
    Ok(Frame::ok())
}

const OBJECT_HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Print this help.",
];

/// Redis shares one object for each small integer string (0 to 9999) and reports this count
/// for it.
const SHARED_REFCOUNT: i64 = i32::MAX as i64;
const SHARED_INTEGERS: i64 = 10_000;

/// `OBJECT REFCOUNT` of a value: shared small integers as Redis reports them, 1 otherwise.
pub(super) fn refcount(value: &gradus_store::Value) -> i64 {
    match value {
        gradus_store::Value::Str(b) if value.encoding() == "int" => match parse_i64(b) {
            Some(n) if (0..SHARED_INTEGERS).contains(&n) => SHARED_REFCOUNT,
            _ => 1,
        },
        _ => 1,
    }
}

fn object(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&args[1]).to_lowercase();
    if sub == "help" {
        return Ok(Frame::Array(
            OBJECT_HELP
                .iter()
                .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
                .collect(),
        ));
    }
    if !matches!(sub.as_str(), "encoding" | "freq" | "idletime" | "refcount") {
        return Err(CmdError::UnknownSubcommand {
            cmd: "OBJECT".into(),
            sub: String::from_utf8_lossy(&args[1]).into_owned(),
        });
    }
    let key = &args[2];
    let now = ctx.now_ms;
    let db = ctx.db();
    let mut shard = db.lock(key);
    // The keys' access data is LRU or LFU data per the policy (see `gradus_store::AccessClock`);
    // OBJECT reads the kind kept and refuses the other, as Redis' `objectCommand`.
    let clock = shard.access_clock();
    // Looked at without counting as an access, as Redis' OBJECT does.
    let Some(entry) = shard.peek(key, now) else {
        return Ok(Frame::Null);
    };
    Ok(match (sub.as_str(), clock) {
        ("encoding", _) => Frame::Bulk(Bytes::from_static(entry.value.encoding().as_bytes())),
        ("refcount", _) => Frame::Integer(refcount(&entry.value)),
        ("idletime", AccessClock::Lru) => Frame::Integer(i64::from(entry.idle_ticks(now)) / 100),
        ("idletime", AccessClock::Lfu { .. }) => {
            return Err(CmdError::err(
                "An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
            ))
        }
        // The counter as decayed by now (the entry is not changed: Redis' `LFUDecrAndReturn`).
        (_, AccessClock::Lfu { decay_time, .. }) => {
            Frame::Integer(i64::from(entry.frequency(decay_time, now)))
        }
        (_, AccessClock::Lru) => {
            return Err(CmdError::err(
                "An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::from(w.to_string())).collect()
    }

    #[test]
    fn the_named_database_is_read_as_redis_parses_it() {
        assert_eq!(copy_target(&args(&["copy", "a", "b"])), None);
        assert_eq!(copy_target(&args(&["copy", "a", "b", "db", "3"])), Some(3));
        assert_eq!(
            copy_target(&args(&["copy", "a", "b", "DB", "3", "replace", "db", "5"])),
            Some(5)
        );
        assert_eq!(
            copy_target(&args(&["copy", "a", "b", "replace", "db"])),
            None
        );
        assert_eq!(move_target(&args(&["move", "k", "x"])), None);
        assert_eq!(swap_pair(&args(&["swapdb", "1", "2"])), Some((1, 2)));
        assert_eq!(db_number(b"2147483648"), Err(CmdError::NotInteger));
    }

    #[test]
    fn small_integers_are_shared_as_in_redis() {
        let s = |v: &'static str| gradus_store::Value::string(Bytes::from_static(v.as_bytes()));
        assert_eq!(refcount(&s("0")), SHARED_REFCOUNT);
        assert_eq!(refcount(&s("9999")), SHARED_REFCOUNT);
        assert_eq!(refcount(&s("10000")), 1);
        assert_eq!(refcount(&s("-1")), 1);
        assert_eq!(refcount(&s("007")), 1);
    }
}
