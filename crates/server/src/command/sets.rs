//! Set commands: SADD/SREM, membership and cardinality, SMEMBERS, SPOP and SRANDMEMBER, SMOVE,
//! the algebra (SINTER, SINTERCARD, SUNION, SDIFF and their STORE forms) and SSCAN, with Redis
//! 7.2's replies and error texts; replies Redis sends as RESP3 sets are `Frame::Set`.
//!
//! Single-key handlers lock only their key's shard; SMOVE and the algebra lock every key they
//! name together (`lock_keys`), so a result and its store are atomic. Writes decide on a read
//! first and call `modify`/`upsert` only when the set really changes, so a no-op leaves the
//! entry's version (WATCH) alone, as Redis does. SPOP's outcome is random: it is flagged
//! `SELF_LOGGED` and logs what it removed (`SREM key member…`, or `DEL key` when it took every
//! member), so a replay is exact. Every write passes the live `set-max-*` limits
//! ([`set_limits`]), which decide when a set moves up from intset to listpack to hashtable. This
//! module depends on the store's values, the argument helpers and the scan/random helpers of
//! `hashes`, never on connections or the codec.

use super::hashes::{parse_scan_cursor, parse_scan_options, random_picks, scan_reply};
use super::{cmd, flags, CommandSpec, Ctx, KEY1, NO_KEYS};
use crate::args::{is, parse_i64};
use crate::error::{CmdError, CmdResult};
use bytes::Bytes;
use gradus_store::glob::glob_match;
use gradus_store::scan::{scan_position, scan_step};
use gradus_store::{Member, MultiLock, SetLimits, SetValue, Shard, Value};
use rand::Rng;
use std::sync::atomic::Ordering;

const W: u32 = flags::WRITE;
const R: u32 = flags::READONLY;
const F: u32 = flags::FAST;
const D: u32 = flags::DENYOOM;
const RND: u32 = flags::RANDOM;

/// Every argument from the first on is a key.
const KEYS: (i32, i32, i32) = (1, -1, 1);

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("sadd", -3, W | D | F, KEY1, "set", "Adds one or more members to a set. Creates the key if it doesn't exist.", sadd).notifies_if_changed(&[(crate::notify::SET, "sadd")]).key_flags(&["RW insert"]),
    cmd("srem", -3, W | F, KEY1, "set", "Removes one or more members from a set. Deletes the set if the last member was removed.", srem).notifies_if_changed(&[(crate::notify::SET, "srem")]).key_flags(&["RW delete"]),
    cmd("smembers", 2, R, KEY1, "set", "Returns all members of a set.", smembers),
    cmd("sismember", 3, R | F, KEY1, "set", "Determines whether a member belongs to a set.", sismember).key_flags(&["RO"]),
    cmd("smismember", -3, R | F, KEY1, "set", "Determines whether multiple members belong to a set.", smismember),
    cmd("scard", 2, R | F, KEY1, "set", "Returns the number of members in a set.", scard).key_flags(&["RO"]),
    cmd("spop", -2, W | F | RND | flags::SELF_LOGGED, KEY1, "set", "Returns one or more random members from a set after removing them. Deletes the set if the last member was popped.", spop).notifies_if_changed(&[(crate::notify::SET, "spop")]).key_flags(&["RW access delete"]),
    cmd("srandmember", -2, R | RND, KEY1, "set", "Get one or multiple random members from a set", srandmember),
    cmd("smove", 4, W | F, (1, 2, 1), "set", "Moves a member from one set to another.", smove).key_flags(&["RW access delete", "RW insert"]),
    cmd("sinter", -2, R, KEYS, "set", "Returns the intersect of multiple sets.", sinter),
    cmd("sintercard", -3, R, NO_KEYS, "set", "Returns the number of members of the intersect of multiple sets.", sintercard).with_numkeys(1),
    cmd("sinterstore", -3, W | D, KEYS, "set", "Stores the intersect of multiple sets in a key.", sinterstore).reads(2, -1).key_flags(&["RW update", "RO access"]),
    cmd("sunion", -2, R, KEYS, "set", "Returns the union of multiple sets.", sunion),
    cmd("sunionstore", -3, W | D, KEYS, "set", "Stores the union of multiple sets in a key.", sunionstore).reads(2, -1).key_flags(&["OW update", "RO access"]),
    cmd("sdiff", -2, R, KEYS, "set", "Returns the difference of multiple sets.", sdiff),
    cmd("sdiffstore", -3, W | D, KEYS, "set", "Stores the difference of multiple sets in a key.", sdiffstore).reads(2, -1).key_flags(&["OW update", "RO access"]),
    cmd("sscan", -3, R, KEY1, "set", "Iterates over members of a set.", sscan),
];

/// SPOP logs what it removed in SREM effects of at most this many members each (as Redis
/// propagates it).
const SPOP_EFFECT_BATCH: usize = 1024;

/// The set at `key` for reading: Ok(None) when absent, WRONGTYPE for another type.
fn read_set<'s>(
    shard: &'s mut Shard,
    key: &[u8],
    now: u64,
) -> Result<Option<&'s SetValue>, CmdError> {
    super::read_typed(shard, key, now, Value::as_set)
}

/// Like [`read_set`], and counts the lookup in the keyspace hit/miss statistics.
fn lookup_set<'s>(
    ctx: &Ctx<'_>,
    shard: &'s mut Shard,
    key: &[u8],
) -> Result<Option<&'s SetValue>, CmdError> {
    super::lookup_typed(ctx, shard, key, Value::as_set)
}

/// Remove `members` from the set at `key` (whose type the caller checked); how many went.
fn remove_members(shard: &mut Shard, key: &[u8], now: u64, members: &[Bytes]) -> usize {
    shard
        .modify(key, now, |value| match value {
            Value::Set(s) => members.iter().filter(|m| s.remove(m)).count(),
            _ => 0,
        })
        .unwrap_or(0)
}

fn bulk(member: Member<'_>) -> gradus_proto::Frame {
    gradus_proto::Frame::Bulk(member.to_bytes())
}

/// Members read in place as Redis replies a set (a RESP3 set, an array in RESP2), written
/// into one buffer (see `Frame::Bulks`).
fn members_reply<'a>(members: impl Iterator<Item = Member<'a>>) -> gradus_proto::Frame {
    let mut out = gradus_proto::BulkArray::with_capacity(members.size_hint().0, 0).into_set();
    for member in members {
        member.with_bytes(|b| out.push(b));
    }
    gradus_proto::Frame::Bulks(out)
}

/// Members as Redis replies a set: a RESP3 set (an array in RESP2).
fn set_reply(members: impl Iterator<Item = Bytes>) -> gradus_proto::Frame {
    gradus_proto::Frame::Set(members.map(gradus_proto::Frame::Bulk).collect())
}

/// The live `set-max-intset-entries`, `set-max-listpack-entries` and `set-max-listpack-value`
/// limits a write keeps a set an intset or a listpack within.
pub(crate) fn set_limits(ctx: &Ctx<'_>) -> SetLimits {
    let live = &ctx.shared.live;
    let as_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    SetLimits {
        intset_entries: as_usize(live.set_max_intset_entries.load(Ordering::Relaxed)),
        entries: as_usize(live.set_max_listpack_entries.load(Ordering::Relaxed)),
        value: as_usize(live.set_max_listpack_value.load(Ordering::Relaxed)),
    }
}

fn sadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let members = &args[2..];
    let now = ctx.now_ms;
    let limits = set_limits(ctx);
    let mut shard = ctx.db().lock(key);
    // The type check, the membership check and the write in one lookup of the key. Adding
    // nothing is no write (no new version: a WATCH of the key holds, as in Redis).
    let added = shard.try_upsert(
        key,
        now,
        || Value::set(SetValue::sized_for(&members[0], members.len(), limits)),
        |value| match value {
            Value::Set(s) if members.iter().any(|m| !s.contains(m)) => {
                s.expect(members.len(), limits);
                Ok(members.iter().filter(|m| s.insert(m, limits)).count())
            }
            Value::Set(_) => Err(None),
            _ => Err(Some(CmdError::WrongType)),
        },
    );
    match added {
        Ok(n) => Ok(gradus_proto::Frame::Integer(n as i64)),
        Err(None) => Ok(gradus_proto::Frame::Integer(0)),
        Err(Some(e)) => Err(e),
    }
}

fn srem(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let members = &args[2..];
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let present =
        read_set(&mut shard, key, now)?.is_some_and(|s| members.iter().any(|m| s.contains(m)));
    if !present {
        return Ok(gradus_proto::Frame::Integer(0));
    }
    let removed = remove_members(&mut shard, key, now, members);
    Ok(gradus_proto::Frame::Integer(removed as i64))
}

fn smembers(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let set = lookup_set(ctx, &mut shard, key)?;
    Ok(members_reply(set.into_iter().flat_map(|s| s.iter())))
}

fn sismember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let set = lookup_set(ctx, &mut shard, key)?;
    Ok(gradus_proto::Frame::Integer(i64::from(
        set.is_some_and(|s| s.contains(&args[2])),
    )))
}

fn smismember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let set = lookup_set(ctx, &mut shard, key)?;
    Ok(gradus_proto::Frame::Array(
        args[2..]
            .iter()
            .map(|m| gradus_proto::Frame::Integer(i64::from(set.is_some_and(|s| s.contains(m)))))
            .collect(),
    ))
}

fn scard(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let set = lookup_set(ctx, &mut shard, key)?;
    Ok(gradus_proto::Frame::Integer(
        set.map_or(0, SetValue::len) as i64
    ))
}

/// `count` members of `set` chosen at random, distinct, in the set's order (one pass).
fn distinct_sample(set: &SetValue, count: usize) -> Vec<Bytes> {
    let mut picked = rand::seq::index::sample(&mut rand::thread_rng(), set.len(), count).into_vec();
    picked.sort_unstable();
    let mut wanted = picked.into_iter().peekable();
    let mut out = Vec::with_capacity(count);
    for (i, member) in set.iter().enumerate() {
        match wanted.peek() {
            None => break,
            Some(&next) if next == i => {
                out.push(member.to_bytes());
                wanted.next();
            }
            Some(_) => {}
        }
    }
    out
}

/// SPOP key [count].
fn spop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args.len() > 3 {
        return Err(CmdError::Syntax);
    }
    let count = match args.get(2) {
        None => None,
        // Redis' getPositiveLongFromObjectOrReply: one text for both failures.
        Some(a) => match parse_i64(a) {
            Some(n) if n >= 0 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
            _ => return Err(CmdError::err("value is out of range, must be positive")),
        },
    };
    let key = args[1].clone();
    let now = ctx.now_ms;
    let db = ctx.db();
    let mut shard = db.lock(&key);
    let Some(set) = read_set(&mut shard, &key, now)? else {
        return Ok(match count {
            None => gradus_proto::Frame::Null,
            Some(_) => gradus_proto::Frame::Set(Vec::new()),
        });
    };
    let len = set.len();
    let popped: Vec<Bytes> = match count {
        None => {
            let index = rand::thread_rng().gen_range(0..len);
            set.member_at(index)
                .map(|m| m.to_bytes())
                .into_iter()
                .collect()
        }
        Some(0) => return Ok(gradus_proto::Frame::Set(Vec::new())),
        Some(n) if n >= len => set.iter().map(|m| m.to_bytes()).collect(),
        Some(n) => distinct_sample(set, n),
    };
    let effects: Vec<Vec<Bytes>> = if popped.len() == len {
        shard.remove(&key, now);
        vec![vec![Bytes::from_static(b"DEL"), key.clone()]]
    } else {
        remove_members(&mut shard, &key, now, &popped);
        popped
            .chunks(SPOP_EFFECT_BATCH)
            .map(|batch| {
                let mut effect = Vec::with_capacity(2 + batch.len());
                effect.push(Bytes::from_static(b"SREM"));
                effect.push(key.clone());
                effect.extend(batch.iter().cloned());
                effect
            })
            .collect()
    };
    drop(shard);
    for effect in effects {
        ctx.log_effect(effect);
    }
    Ok(match count {
        None => popped
            .into_iter()
            .next()
            .map_or(gradus_proto::Frame::Null, gradus_proto::Frame::Bulk),
        Some(_) => set_reply(popped.into_iter()),
    })
}

/// SRANDMEMBER key [count].
fn srandmember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args.len() > 3 {
        return Err(CmdError::Syntax);
    }
    let count = match args.get(2) {
        None => None,
        Some(a) => match parse_i64(a) {
            None => return Err(CmdError::NotInteger),
            Some(i64::MIN) => {
                return Err(CmdError::err(format!(
                    "value is out of range, value must between {} and {}",
                    -i64::MAX,
                    i64::MAX
                )))
            }
            Some(n) => Some(n),
        },
    };
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let set = lookup_set(ctx, &mut shard, key)?;
    let Some(count) = count else {
        return Ok(set
            .and_then(|s| s.member_at(rand::thread_rng().gen_range(0..s.len())))
            .map_or(gradus_proto::Frame::Null, bulk));
    };
    let Some(set) = set else {
        return Ok(gradus_proto::Frame::Array(Vec::new()));
    };
    // A count of 1 picks like a negative one (Redis' case 1): no difference to the caller.
    let picks = random_picks(set.iter(), set.len(), count);
    Ok(gradus_proto::Frame::Array(
        picks.into_iter().map(bulk).collect(),
    ))
}

/// SMOVE source destination member.
fn smove(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (src, dst, member) = (&args[1], &args[2], &args[3]);
    let now = ctx.now_ms;
    let limits = set_limits(ctx);
    let db = ctx.db();
    let mut locked = db.lock_keys([&src[..], &dst[..]]);
    let zero = gradus_proto::Frame::Integer(0);
    let one = gradus_proto::Frame::Integer(1);
    let source = locked.shard(src);
    let Some(in_source) = read_set(source, src, now)?.map(|s| s.contains(member)) else {
        return Ok(zero);
    };
    read_set(locked.shard(dst), dst, now)?;
    if src == dst {
        return Ok(if in_source { one } else { zero });
    }
    if !in_source {
        return Ok(zero);
    }
    remove_members(locked.shard(src), src, now, std::slice::from_ref(member));
    let emptied = !locked.shard(src).contains_live(src, now);
    let target = locked.shard(dst);
    let added = !read_set(target, dst, now)?.is_some_and(|s| s.contains(member));
    if added {
        target.upsert(
            dst,
            now,
            || Value::set(SetValue::sized_for(member, 1, limits)),
            |value| {
                if let Value::Set(s) = value {
                    s.insert(member, limits);
                }
            },
        );
    }
    drop(locked);
    // Redis' order: srem (and del) of the source, then sadd when the member was new there.
    ctx.notify(crate::notify::SET, "srem", src);
    if emptied {
        ctx.notify(crate::notify::GENERIC, "del", src);
    }
    if added {
        ctx.notify(crate::notify::SET, "sadd", dst);
    }
    Ok(one)
}

/// The sizes of the sets at `keys` (all locked in `locked`): None for an absent key; WRONGTYPE
/// when any holds another type. Each lookup counts as a hit or a miss.
fn set_sizes(
    ctx: &Ctx<'_>,
    locked: &mut MultiLock<'_>,
    keys: &[Bytes],
) -> Result<Vec<Option<usize>>, CmdError> {
    let mut sizes = Vec::with_capacity(keys.len());
    for key in keys {
        let shard = locked.shard(key);
        sizes.push(lookup_set(ctx, shard, key)?.map(SetValue::len));
    }
    Ok(sizes)
}

/// The set at `key`, which [`set_sizes`] found present.
fn present<'s>(locked: &'s mut MultiLock<'_>, key: &[u8], now: u64) -> Option<&'s SetValue> {
    read_set(locked.shard(key), key, now).ok().flatten()
}

/// The members every set at `keys` holds, in the order of the smallest set, at most `limit`
/// of them (0: no limit). Empty when a key is absent.
fn intersection(
    ctx: &Ctx<'_>,
    locked: &mut MultiLock<'_>,
    keys: &[Bytes],
    limit: usize,
) -> Result<Vec<Bytes>, CmdError> {
    let sizes = set_sizes(ctx, locked, keys)?;
    let now = ctx.now_ms;
    let Some(sizes) = sizes.into_iter().collect::<Option<Vec<usize>>>() else {
        return Ok(Vec::new());
    };
    let smallest = (0..keys.len()).min_by_key(|&i| sizes[i]).unwrap_or(0);
    let mut members: Vec<Bytes> = present(locked, &keys[smallest], now)
        .map(|s| s.iter().map(|m| m.to_bytes()).collect())
        .unwrap_or_default();
    for key in keys {
        if members.is_empty() {
            break;
        }
        if *key == keys[smallest] {
            continue;
        }
        if let Some(set) = present(locked, key, now) {
            members.retain(|m| set.contains(m));
        }
    }
    if limit > 0 {
        members.truncate(limit);
    }
    Ok(members)
}

/// The union of the sets at `keys` (absent keys are empty sets), built as Redis builds it: a
/// new set the members of each are added to in turn.
fn union(ctx: &Ctx<'_>, locked: &mut MultiLock<'_>, keys: &[Bytes]) -> Result<SetValue, CmdError> {
    let sizes = set_sizes(ctx, locked, keys)?;
    let limits = set_limits(ctx);
    let mut out = SetValue::new();
    for (key, size) in keys.iter().zip(sizes) {
        if size.is_none() {
            continue;
        }
        if let Some(set) = present(locked, key, ctx.now_ms) {
            for m in set.iter() {
                m.with_bytes(|b| out.insert(b, limits));
            }
        }
    }
    Ok(out)
}

/// The members of the first set at `keys` that none of the others holds, as a new set.
fn difference(
    ctx: &Ctx<'_>,
    locked: &mut MultiLock<'_>,
    keys: &[Bytes],
) -> Result<SetValue, CmdError> {
    let sizes = set_sizes(ctx, locked, keys)?;
    let now = ctx.now_ms;
    let mut out = SetValue::new();
    if sizes[0].is_none() || keys[1..].contains(&keys[0]) {
        return Ok(out);
    }
    let mut members: Vec<Bytes> = present(locked, &keys[0], now)
        .map(|s| s.iter().map(|m| m.to_bytes()).collect())
        .unwrap_or_default();
    for key in &keys[1..] {
        if members.is_empty() {
            break;
        }
        if let Some(set) = present(locked, key, now) {
            members.retain(|m| !set.contains(m));
        }
    }
    let limits = set_limits(ctx);
    for m in &members {
        out.insert(m, limits);
    }
    Ok(out)
}

/// Store `result` at `dst` (replacing whatever is there, TTL included), or delete `dst` when
/// it is empty; the reply is the stored set's size.
/// Returns the size and whether an existing `dst` was deleted, for [`stored`].
fn store(locked: &mut MultiLock<'_>, dst: &[u8], now: u64, result: SetValue) -> (usize, bool) {
    let len = result.len();
    let target = locked.shard(dst);
    if len == 0 {
        (0, target.remove(dst, now).is_some())
    } else {
        target.set(dst, Value::set(result), None, now);
        (len, false)
    }
}

/// The reply and keyspace event of a *STORE: `event` when a set was stored, `del` when an
/// existing destination was deleted, nothing otherwise (as Redis).
fn stored(ctx: &mut Ctx<'_>, dst: &[u8], (len, deleted): (usize, bool), event: &str) -> CmdResult {
    if len > 0 {
        ctx.notify(crate::notify::SET, event, dst);
    } else if deleted {
        ctx.notify(crate::notify::GENERIC, "del", dst);
    }
    Ok(gradus_proto::Frame::Integer(len as i64))
}

/// A set built from `members` in their order, within `limits`.
fn set_of(members: &[Bytes], limits: SetLimits) -> SetValue {
    let mut set = SetValue::new();
    for m in members {
        set.insert(m, limits);
    }
    set
}

fn sinter(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let keys = &args[1..];
    let db = ctx.db();
    let mut locked = db.lock_keys(keys.iter().map(|k| &k[..]));
    let members = intersection(ctx, &mut locked, keys, 0)?;
    Ok(set_reply(members.into_iter()))
}

fn sinterstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (dst, keys) = (&args[1], &args[2..]);
    let db = ctx.db();
    let mut locked = db.lock_keys(args[1..].iter().map(|k| &k[..]));
    let members = intersection(ctx, &mut locked, keys, 0)?;
    let done = store(
        &mut locked,
        dst,
        ctx.now_ms,
        set_of(&members, set_limits(ctx)),
    );
    drop(locked);
    stored(ctx, dst, done, "sinterstore")
}

/// SINTERCARD numkeys key [key ...] [LIMIT limit].
fn sintercard(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let numkeys = match parse_i64(&args[1]) {
        Some(n) if n >= 1 => usize::try_from(n).unwrap_or(usize::MAX),
        _ => return Err(CmdError::err("numkeys should be greater than 0")),
    };
    if numkeys > args.len() - 2 {
        return Err(CmdError::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    let keys = &args[2..2 + numkeys];
    let mut limit = 0;
    let mut rest = args[2 + numkeys..].iter();
    while let Some(option) = rest.next() {
        match rest.as_slice().first() {
            Some(value) if is(option, "limit") => {
                rest.next();
                limit = match parse_i64(value) {
                    Some(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX),
                    _ => return Err(CmdError::err("LIMIT can't be negative")),
                };
            }
            _ => return Err(CmdError::Syntax),
        }
    }
    let db = ctx.db();
    let mut locked = db.lock_keys(keys.iter().map(|k| &k[..]));
    let members = intersection(ctx, &mut locked, keys, limit)?;
    Ok(gradus_proto::Frame::Integer(members.len() as i64))
}

fn sunion(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let keys = &args[1..];
    let db = ctx.db();
    let mut locked = db.lock_keys(keys.iter().map(|k| &k[..]));
    let result = union(ctx, &mut locked, keys)?;
    Ok(members_reply(result.iter()))
}

fn sunionstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (dst, keys) = (&args[1], &args[2..]);
    let db = ctx.db();
    let mut locked = db.lock_keys(args[1..].iter().map(|k| &k[..]));
    let result = union(ctx, &mut locked, keys)?;
    let done = store(&mut locked, dst, ctx.now_ms, result);
    drop(locked);
    stored(ctx, dst, done, "sunionstore")
}

fn sdiff(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let keys = &args[1..];
    let db = ctx.db();
    let mut locked = db.lock_keys(keys.iter().map(|k| &k[..]));
    let result = difference(ctx, &mut locked, keys)?;
    Ok(members_reply(result.iter()))
}

fn sdiffstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (dst, keys) = (&args[1], &args[2..]);
    let db = ctx.db();
    let mut locked = db.lock_keys(args[1..].iter().map(|k| &k[..]));
    let result = difference(ctx, &mut locked, keys)?;
    let done = store(&mut locked, dst, ctx.now_ms, result);
    drop(locked);
    stored(ctx, dst, done, "sdiffstore")
}

/// SSCAN key cursor [MATCH pattern] [COUNT count]: an intset or listpack is returned whole with
/// cursor 0, as Redis does; a hashtable is walked in hash order like HSCAN.
fn sscan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let cursor = parse_scan_cursor(&args[2])?;
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let Some(set) = lookup_set(ctx, &mut shard, key)? else {
        return Ok(scan_reply(0, Vec::new()));
    };
    let options = parse_scan_options(&args[3..], false)?;
    let (page, next): (Vec<Member<'_>>, u64) = if set.is_compact() {
        (set.iter().collect(), 0)
    } else {
        let hasher = gradus_store::FieldHasher::default();
        let items = set
            .iter()
            .map(|m| (m.with_bytes(|b| scan_position(&hasher, b)), m));
        let (page, next) = scan_step(items, cursor, options.count);
        (page, next.unwrap_or(0))
    };
    let elements = page
        .into_iter()
        .filter(|m| {
            options
                .pattern
                .is_none_or(|p| m.with_bytes(|b| glob_match(p, b)))
        })
        .map(bulk)
        .collect();
    Ok(scan_reply(next, elements))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(members: &[&str]) -> SetValue {
        set_of(
            &members
                .iter()
                .map(|m| Bytes::copy_from_slice(m.as_bytes()))
                .collect::<Vec<_>>(),
            SetLimits::REDIS_DEFAULT,
        )
    }

    #[test]
    fn a_distinct_sample_has_the_size_asked_for_and_no_repeats() {
        for s in [
            set(&["1", "2", "3", "4", "5", "6"]),
            set(&["a", "b", "c", "d", "e", "f"]),
        ] {
            for count in 0..=s.len() {
                let mut picked = distinct_sample(&s, count);
                assert_eq!(picked.len(), count);
                assert!(picked.iter().all(|m| s.contains(m)));
                picked.sort();
                picked.dedup();
                assert_eq!(picked.len(), count);
            }
        }
    }

    #[test]
    fn sets_built_from_members_keep_an_intsets_order() {
        let s = set(&["3", "-1", "2"]);
        assert_eq!(s.encoding(), "intset");
        let order: Vec<Bytes> = s.iter().map(|m| m.to_bytes()).collect();
        assert_eq!(order, ["-1", "2", "3"]);
        let mixed = set(&["b", "3", "a"]);
        assert_eq!(mixed.encoding(), "listpack");
        let order: Vec<Bytes> = mixed.iter().map(|m| m.to_bytes()).collect();
        assert_eq!(order, ["b", "3", "a"]);
    }
}
