//! List commands: pushes and pops at both ends (LPUSH … LMPOP), LMOVE/RPOPLPUSH, index and range
//! reads, LSET/LINSERT/LREM/LTRIM and LPOS, with Redis 7.2's replies and error texts.
//!
//! The core operations are plain functions over locked shards, for the blocking variants
//! (BLPOP, BLMOVE, BLMPOP) to reuse once their wait is over:
//! - [`push`]: push elements at one end, creating the list (or only if it exists);
//! - [`pop`]: pop up to `count` elements from one end, deleting the list when emptied;
//! - [`move_element`]: pop from one list and push onto another (or the same) atomically;
//! - [`pop_first`]: pop from the first non-empty list of several (LMPOP).
//!
//! Each takes the shard(s) already locked by the caller (`Keyspace::lock` / `lock_keys`), the
//! command's clock and the live `list-max-listpack-size` ([`list_limit`], which decides when a
//! list is a listpack or a quicklist), checks the type first (WRONGTYPE leaves everything untouched), and changes an
//! entry only when it really changes (a no-op leaves its version, and any WATCH, alone).
//! Everything here is deterministic given the arguments and the state, as the log's replay needs.
//! This module depends only on the store's list value and the argument helpers, never on
//! connections or the codec.

use super::{cmd, flags, CommandSpec, Ctx, KEY1, NO_KEYS};
use crate::args::{int_arg, is, parse_i64};
use crate::error::{CmdError, CmdResult};
use bytes::Bytes;
use gradus_proto::Frame;
use gradus_store::{End, ListLimit, ListValue, MultiLock, Shard, Value};
use std::sync::atomic::Ordering;

const W: u32 = flags::WRITE;
const R: u32 = flags::READONLY;
const F: u32 = flags::FAST;
const D: u32 = flags::DENYOOM;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("lpush", -3, W | D | F, KEY1, "list", "Prepends one or more elements to a list. Creates the key if it doesn't exist.", lpush).notifies(&[(crate::notify::LIST, "lpush")]).key_flags(&["RW insert"]),
    cmd("rpush", -3, W | D | F, KEY1, "list", "Appends one or more elements to a list. Creates the key if it doesn't exist.", rpush).notifies(&[(crate::notify::LIST, "rpush")]).key_flags(&["RW insert"]),
    cmd("lpushx", -3, W | D | F, KEY1, "list", "Prepends one or more elements to a list only when the list exists.", lpushx).notifies_if_changed(&[(crate::notify::LIST, "lpush")]).key_flags(&["RW insert"]),
    cmd("rpushx", -3, W | D | F, KEY1, "list", "Appends an element to a list only when the list exists.", rpushx).notifies_if_changed(&[(crate::notify::LIST, "rpush")]).key_flags(&["RW insert"]),
    cmd("lpop", -2, W | F, KEY1, "list", "Returns the first elements in a list after removing it. Deletes the list if the last element was popped.", lpop).notifies_if_changed(&[(crate::notify::LIST, "lpop")]).key_flags(&["RW access delete"]),
    cmd("rpop", -2, W | F, KEY1, "list", "Returns and removes the last elements of a list. Deletes the list if the last element was popped.", rpop).notifies_if_changed(&[(crate::notify::LIST, "rpop")]).key_flags(&["RW access delete"]),
    cmd("llen", 2, R | F, KEY1, "list", "Returns the length of a list.", llen).key_flags(&["RO"]),
    cmd("lrange", 4, R, KEY1, "list", "Returns a range of elements from a list.", lrange),
    cmd("lindex", 3, R, KEY1, "list", "Returns an element from a list by its index.", lindex),
    cmd("lset", 4, W | D, KEY1, "list", "Sets the value of an element in a list by its index.", lset).notifies(&[(crate::notify::LIST, "lset")]).key_flags(&["RW update"]),
    cmd("linsert", 5, W | D, KEY1, "list", "Inserts an element before or after another element in a list.", linsert).key_flags(&["RW insert"]),
    cmd("lrem", 4, W, KEY1, "list", "Removes elements from a list. Deletes the list if the last element was removed.", lrem).notifies_if_changed(&[(crate::notify::LIST, "lrem")]).key_flags(&["RW delete"]),
    cmd("ltrim", 4, W, KEY1, "list", "Removes elements from both ends a list. Deletes the list if all elements were trimmed.", ltrim).notifies(&[(crate::notify::LIST, "ltrim")]).key_flags(&["RW delete"]),
    cmd("lpos", -3, R, KEY1, "list", "Returns the index of matching elements in a list.", lpos),
    cmd("lmove", 5, W | D, (1, 2, 1), "list", "Returns an element after popping it from one list and pushing it to another. Deletes the list if the last element was moved.", lmove).key_flags(&["RW access delete", "RW insert"]),
    cmd("rpoplpush", 3, W | D, (1, 2, 1), "list", "Returns the last element of a list after removing and pushing it to another list. Deletes the list if the last element was popped.", rpoplpush).key_flags(&["RW access delete", "RW insert"]),
    cmd("lmpop", -4, W, NO_KEYS, "list", "Returns multiple elements from a list after removing them. Deletes the list if the last element was popped.", lmpop).with_numkeys(1).key_flags(&["RW access delete"]),
];

// ---------------------------------------------------------------------------------------------
// Core operations (reused by the blocking variants)

/// The live `list-max-listpack-size`: what one pack of a list holds (see `gradus_store::list`).
pub(crate) fn list_limit(ctx: &Ctx<'_>) -> ListLimit {
    ListLimit::from_fill(
        ctx.shared
            .live
            .list_max_listpack_size
            .load(Ordering::Relaxed),
    )
}

/// The list at `key` for reading: Ok(None) when absent, WRONGTYPE for another type.
pub fn read_list<'s>(
    shard: &'s mut Shard,
    key: &[u8],
    now: u64,
) -> Result<Option<&'s ListValue>, CmdError> {
    super::read_typed(shard, key, now, Value::as_list)
}

/// Like [`read_list`], and counts the lookup in the keyspace hit/miss statistics.
fn lookup_list<'s>(
    ctx: &Ctx<'_>,
    shard: &'s mut Shard,
    key: &[u8],
) -> Result<Option<&'s ListValue>, CmdError> {
    super::lookup_typed(ctx, shard, key, Value::as_list)
}

/// `f` on the list at `key`, which the caller has checked is a live list; the key is deleted
/// if `f` leaves the list empty.
fn change_list<R: Default>(
    shard: &mut Shard,
    key: &[u8],
    now: u64,
    f: impl FnOnce(&mut ListValue) -> R,
) -> R {
    shard
        .modify(key, now, |value| match value {
            Value::List(l) => f(l),
            _ => R::default(),
        })
        .unwrap_or_default()
}

/// Push `items` one after the other at `end` of the list at `key` (LPUSH a b c leaves c at the
/// head), creating the list when absent — unless `only_existing` (LPUSHX/RPUSHX), which then
/// pushes nothing. Returns the list's length after the push (0 when nothing was pushed to an
/// absent key). WRONGTYPE when `key` holds another type.
pub fn push(
    shard: &mut Shard,
    key: &[u8],
    end: End,
    items: &[Bytes],
    only_existing: bool,
    now: u64,
    limit: ListLimit,
) -> Result<usize, CmdError> {
    let push = |value: &mut Value| match value {
        Value::List(l) => Ok(l.push(end, items, limit)),
        _ => Err(CmdError::WrongType),
    };
    if only_existing || items.is_empty() {
        return shard.try_modify(key, now, push).unwrap_or(Ok(0));
    }
    // The type check and the write in one lookup of the key.
    shard.try_upsert(key, now, || Value::List(ListValue::new()), push)
}

/// Pop up to `count` elements from `end` of the list at `key`, in the order popped; the key is
/// deleted when its last element goes. Ok(None) when the key is absent; Ok(Some(empty)) for a
/// count of 0 on an existing list (nothing changes then). WRONGTYPE for another type.
pub fn pop(
    shard: &mut Shard,
    key: &[u8],
    end: End,
    count: usize,
    now: u64,
    limit: ListLimit,
) -> Result<Option<Vec<Bytes>>, CmdError> {
    if count == 0 {
        return read_list(shard, key, now).map(|l| l.map(|_| Vec::new()));
    }
    // The type check and the pop in one lookup of the key.
    shard
        .try_modify(key, now, |value| match value {
            Value::List(l) => Ok(l.pop_many(end, count, limit)),
            _ => Err(CmdError::WrongType),
        })
        .transpose()
}

/// Pop one element from `from` of the list `src` and push it at `to` of the list `dst` (which
/// may be `src`: a rotation), both keys' shards locked in `lock`. Ok(None) when `src` is
/// absent (whatever `dst` holds); WRONGTYPE when either holds another type, with nothing
/// changed.
pub fn move_element(
    lock: &mut MultiLock<'_>,
    src: &[u8],
    dst: &[u8],
    from: End,
    to: End,
    now: u64,
    limit: ListLimit,
) -> Result<Option<Bytes>, CmdError> {
    if read_list(lock.shard(src), src, now)?.is_none() {
        return Ok(None);
    }
    if src == dst {
        return Ok(change_list(lock.shard(src), src, now, |l| {
            let item = l.pop(from, limit)?;
            l.push(to, std::slice::from_ref(&item), limit);
            Some(item)
        }));
    }
    read_list(lock.shard(dst), dst, now)?;
    let popped = change_list(lock.shard(src), src, now, |l| l.pop(from, limit));
    if let Some(item) = &popped {
        push(
            lock.shard(dst),
            dst,
            to,
            std::slice::from_ref(item),
            false,
            now,
            limit,
        )?;
    }
    Ok(popped)
}

/// LMPOP's core: pop up to `count` elements from `end` of the first of `keys` that holds a
/// list (all their shards locked in `lock`), and name it. Ok(None) when none does; WRONGTYPE
/// as soon as a key before the first list holds another type.
pub fn pop_first(
    lock: &mut MultiLock<'_>,
    keys: &[Bytes],
    end: End,
    count: usize,
    now: u64,
    limit: ListLimit,
) -> Result<Option<(Bytes, Vec<Bytes>)>, CmdError> {
    for key in keys {
        if let Some(items) = pop(lock.shard(key), key, end, count, now, limit)? {
            return Ok(Some((key.clone(), items)));
        }
    }
    Ok(None)
}

// ---------------------------------------------------------------------------------------------
// Argument helpers

/// LEFT or RIGHT (Redis' `getListPositionFromObjectOrReply`).
fn end_arg(arg: &[u8]) -> Result<End, CmdError> {
    if is(arg, "left") {
        Ok(End::Left)
    } else if is(arg, "right") {
        Ok(End::Right)
    } else {
        Err(CmdError::Syntax)
    }
}

/// An integer within `min..=max` (Redis' `getRangeLongFromObjectOrReply`): `msg` for both a
/// bad integer and one out of range when given, else Redis' two default texts.
fn ranged_arg(arg: &[u8], min: i64, max: i64, msg: Option<&str>) -> Result<i64, CmdError> {
    let error = |default: CmdError| msg.map_or(default, CmdError::err);
    let value = parse_i64(arg).ok_or_else(|| error(CmdError::NotInteger))?;
    if value < min || value > max {
        return Err(error(CmdError::err(format!(
            "value is out of range, value must between {min} and {max}"
        ))));
    }
    Ok(value)
}

/// A non-negative integer (Redis' `getPositiveLongFromObjectOrReply`), `msg` or Redis' text.
fn positive_arg(arg: &[u8], msg: Option<&str>) -> Result<usize, CmdError> {
    let msg = msg.unwrap_or("value is out of range, must be positive");
    ranged_arg(arg, 0, i64::MAX, Some(msg)).map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

fn bulk(item: &[u8]) -> Frame {
    Frame::Bulk(Bytes::copy_from_slice(item))
}

fn bulks(items: Vec<Bytes>) -> Frame {
    Frame::Array(items.into_iter().map(Frame::Bulk).collect())
}

// ---------------------------------------------------------------------------------------------
// Handlers

fn push_generic(ctx: &mut Ctx<'_>, args: &[Bytes], end: End, only_existing: bool) -> CmdResult {
    let key = &args[1];
    let now = ctx.now_ms;
    let limit = list_limit(ctx);
    let mut shard = ctx.db().lock(key);
    let len = push(&mut shard, key, end, &args[2..], only_existing, now, limit)?;
    Ok(Frame::Integer(len as i64))
}

fn lpush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    push_generic(ctx, args, End::Left, false)
}

fn rpush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    push_generic(ctx, args, End::Right, false)
}

fn lpushx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    push_generic(ctx, args, End::Left, true)
}

fn rpushx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    push_generic(ctx, args, End::Right, true)
}

/// LPOP/RPOP key [count]: one element (or nil) without a count; an array (or a null array for
/// a missing key) with one.
fn pop_generic(ctx: &mut Ctx<'_>, args: &[Bytes], end: End) -> CmdResult {
    if args.len() > 3 {
        return Err(super::arity_error(&args[0]));
    }
    let count = args.get(2).map(|a| positive_arg(a, None)).transpose()?;
    let key = &args[1];
    let now = ctx.now_ms;
    let limit = list_limit(ctx);
    let mut shard = ctx.db().lock(key);
    let popped = pop(&mut shard, key, end, count.unwrap_or(1), now, limit)?;
    Ok(match (count, popped) {
        (None, None) => Frame::Null,
        (None, Some(mut items)) => items.pop().map_or(Frame::Null, Frame::Bulk),
        (Some(_), None) => Frame::NullArray,
        (Some(_), Some(items)) => bulks(items),
    })
}

fn lpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    pop_generic(ctx, args, End::Left)
}

fn rpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    pop_generic(ctx, args, End::Right)
}

fn llen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let list = lookup_list(ctx, &mut shard, key)?;
    Ok(Frame::Integer(list.map_or(0, ListValue::len) as i64))
}

fn lrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let start = int_arg(&args[2])?;
    let stop = int_arg(&args[3])?;
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let list = lookup_list(ctx, &mut shard, key)?;
    Ok(Frame::Bulks(list.map_or_else(Default::default, |l| {
        l.range(start, stop).into_iter().collect()
    })))
}

fn lindex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    // Redis looks the key up before it parses the index.
    let Some(list) = lookup_list(ctx, &mut shard, key)? else {
        return Ok(Frame::Null);
    };
    let index = int_arg(&args[2])?;
    Ok(list.get(index).map_or(Frame::Null, bulk))
}

fn lset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (key, item) = (&args[1], &args[3]);
    let now = ctx.now_ms;
    let limit = list_limit(ctx);
    let mut shard = ctx.db().lock(key);
    // Redis looks the key up before it parses the index.
    let Some(list) = read_list(&mut shard, key, now)? else {
        return Err(CmdError::NoSuchKey);
    };
    let index = int_arg(&args[2])?;
    if list.get(index).is_none() {
        return Err(CmdError::err("index out of range"));
    }
    change_list(&mut shard, key, now, |l| l.set(index, item, limit));
    Ok(Frame::ok())
}

fn linsert(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let after = if is(&args[2], "after") {
        true
    } else if is(&args[2], "before") {
        false
    } else {
        return Err(CmdError::Syntax);
    };
    let (key, pivot, item) = (&args[1], &args[3], &args[4]);
    let now = ctx.now_ms;
    let limit = list_limit(ctx);
    let mut shard = ctx.db().lock(key);
    let Some(list) = read_list(&mut shard, key, now)? else {
        return Ok(Frame::Integer(0));
    };
    if !list.iter().any(|e| e == &pivot[..]) {
        return Ok(Frame::Integer(-1));
    }
    let len = change_list(&mut shard, key, now, |l| {
        l.insert(pivot, item, after, limit)
    });
    drop(shard);
    if len.is_some() {
        ctx.notify(crate::notify::LIST, "linsert", key);
    }
    Ok(Frame::Integer(len.map_or(-1, |n| n as i64)))
}

fn lrem(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let count = int_arg(&args[2])?;
    let (key, item) = (&args[1], &args[3]);
    let now = ctx.now_ms;
    let limit = list_limit(ctx);
    let mut shard = ctx.db().lock(key);
    let Some(list) = read_list(&mut shard, key, now)? else {
        return Ok(Frame::Integer(0));
    };
    if !list.iter().any(|e| e == &item[..]) {
        return Ok(Frame::Integer(0));
    }
    let removed = change_list(&mut shard, key, now, |l| l.remove(item, count, limit));
    Ok(Frame::Integer(removed as i64))
}

fn ltrim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let start = int_arg(&args[2])?;
    let stop = int_arg(&args[3])?;
    let key = &args[1];
    let now = ctx.now_ms;
    let limit = list_limit(ctx);
    let mut shard = ctx.db().lock(key);
    if read_list(&mut shard, key, now)?.is_some() {
        // Redis signals the key as modified even when nothing was trimmed.
        change_list(&mut shard, key, now, |l| l.trim(start, stop, limit));
    }
    Ok(Frame::ok())
}

/// LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len].
fn lpos(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (mut rank, mut count, mut maxlen) = (1i64, None::<usize>, 0usize);
    let mut i = 3;
    while i < args.len() {
        let has_value = i + 1 < args.len();
        if is(&args[i], "rank") && has_value {
            rank = ranged_arg(&args[i + 1], -i64::MAX, i64::MAX, None)?;
            if rank == 0 {
                return Err(CmdError::err(
                    "RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list",
                ));
            }
        } else if is(&args[i], "count") && has_value {
            count = Some(positive_arg(&args[i + 1], Some("COUNT can't be negative"))?);
        } else if is(&args[i], "maxlen") && has_value {
            maxlen = positive_arg(&args[i + 1], Some("MAXLEN can't be negative"))?;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    let (key, item) = (&args[1], &args[2][..]);
    let mut shard = ctx.db().lock(key);
    let Some(list) = lookup_list(ctx, &mut shard, key)? else {
        return Ok(if count.is_some() {
            Frame::Array(Vec::new())
        } else {
            Frame::Null
        });
    };
    let len = list.len();
    let scan = if maxlen == 0 { len } else { maxlen.min(len) };
    let skip = usize::try_from(rank.unsigned_abs() - 1).unwrap_or(usize::MAX);
    let wanted = match count {
        None => 1,
        Some(0) => usize::MAX,
        Some(n) => n,
    };
    let matches: Vec<usize> = if rank > 0 {
        list.iter()
            .take(scan)
            .enumerate()
            .filter(|(_, e)| *e == item)
            .map(|(i, _)| i)
            .skip(skip)
            .take(wanted)
            .collect()
    } else {
        list.iter()
            .rev()
            .take(scan)
            .enumerate()
            .filter(|(_, e)| *e == item)
            .map(|(i, _)| len - 1 - i)
            .skip(skip)
            .take(wanted)
            .collect()
    };
    Ok(match count {
        Some(_) => Frame::Array(
            matches
                .into_iter()
                .map(|i| Frame::Integer(i as i64))
                .collect(),
        ),
        None => matches
            .first()
            .map_or(Frame::Null, |&i| Frame::Integer(i as i64)),
    })
}

fn move_generic(ctx: &mut Ctx<'_>, args: &[Bytes], from: End, to: End) -> CmdResult {
    let (src, dst) = (&args[1], &args[2]);
    let now = ctx.now_ms;
    let limit = list_limit(ctx);
    let db = ctx.db();
    let mut lock = db.lock_keys([src.as_ref(), dst.as_ref()]);
    let moved = move_element(&mut lock, src, dst, from, to, now, limit)?;
    drop(lock);
    if moved.is_some() {
        // Redis: the push, then the pop, then `del` for a source left empty.
        ctx.notify(crate::notify::LIST, push_event(to), dst);
        ctx.notify(crate::notify::LIST, pop_event(from), src);
        popped_all(ctx, src);
    }
    Ok(moved.map_or(Frame::Null, Frame::Bulk))
}

fn lmove(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let from = end_arg(&args[3])?;
    let to = end_arg(&args[4])?;
    move_generic(ctx, args, from, to)
}

fn rpoplpush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    move_generic(ctx, args, End::Right, End::Left)
}

/// LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count].
fn lmpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let numkeys = ranged_arg(
        &args[1],
        1,
        i64::MAX,
        Some("numkeys should be greater than 0"),
    )?;
    let where_at = usize::try_from(numkeys)
        .ok()
        .and_then(|n| n.checked_add(2))
        .filter(|&at| at < args.len())
        .ok_or(CmdError::Syntax)?;
    let end = end_arg(&args[where_at])?;
    let mut count = None;
    let mut i = where_at + 1;
    while i < args.len() {
        if count.is_none() && is(&args[i], "count") && i + 1 < args.len() {
            let n = ranged_arg(
                &args[i + 1],
                1,
                i64::MAX,
                Some("count should be greater than 0"),
            )?;
            count = Some(usize::try_from(n).unwrap_or(usize::MAX));
            i += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let keys = &args[2..where_at];
    let now = ctx.now_ms;
    let limit = list_limit(ctx);
    let db = ctx.db();
    let mut lock = db.lock_keys(keys.iter().map(|k| k.as_ref()));
    let popped = pop_first(&mut lock, keys, end, count.unwrap_or(1), now, limit)?;
    drop(lock);
    Ok(match popped {
        None => Frame::NullArray,
        Some((key, items)) => {
            ctx.notify(crate::notify::LIST, pop_event(end), &key);
            popped_all(ctx, &key);
            Frame::Array(vec![Frame::Bulk(key), bulks(items)])
        }
    })
}

/// The keyspace event of a push at `end`.
fn push_event(end: End) -> &'static str {
    match end {
        End::Left => "lpush",
        End::Right => "rpush",
    }
}

/// The keyspace event of a pop at `end`.
fn pop_event(end: End) -> &'static str {
    match end {
        End::Left => "lpop",
        End::Right => "rpop",
    }
}

/// Redis' `del` event after a pop or move left list `key` empty (and so deleted).
fn popped_all(ctx: &mut Ctx<'_>, key: &[u8]) {
    if crate::notify::enabled(ctx.shared) && !ctx.db().lock(key).contains_live(key, ctx.now_ms) {
        ctx.notify(crate::notify::GENERIC, "del", key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: ListLimit = ListLimit::REDIS_DEFAULT;
    use gradus_store::Keyspace;

    fn b(s: &str) -> Bytes {
        Bytes::from(s.to_owned())
    }

    fn items(v: &[&str]) -> Vec<Bytes> {
        v.iter().map(|s| b(s)).collect()
    }

    fn contents(shard: &mut Shard, key: &[u8]) -> Option<Vec<Bytes>> {
        read_list(shard, key, 0)
            .unwrap()
            .map(|l| l.iter().map(Bytes::copy_from_slice).collect())
    }

    #[test]
    fn push_and_pop_keep_redis_order_and_delete_empty_lists() {
        let mut shard = Shard::new();
        assert_eq!(
            push(&mut shard, b"l", End::Left, &items(&["a", "b"]), true, 0, L).unwrap(),
            0
        );
        assert!(
            contents(&mut shard, b"l").is_none(),
            "PUSHX creates nothing"
        );
        assert_eq!(
            push(
                &mut shard,
                b"l",
                End::Left,
                &items(&["a", "b", "c"]),
                false,
                0,
                L
            )
            .unwrap(),
            3
        );
        assert_eq!(
            push(&mut shard, b"l", End::Right, &items(&["d"]), true, 0, L).unwrap(),
            4
        );
        assert_eq!(
            contents(&mut shard, b"l").unwrap(),
            items(&["c", "b", "a", "d"])
        );
        assert_eq!(
            pop(&mut shard, b"l", End::Right, 0, 0, L).unwrap(),
            Some(vec![])
        );
        assert_eq!(
            pop(&mut shard, b"l", End::Right, 2, 0, L).unwrap(),
            Some(items(&["d", "a"]))
        );
        assert_eq!(
            pop(&mut shard, b"l", End::Left, 5, 0, L).unwrap(),
            Some(items(&["c", "b"]))
        );
        assert_eq!(pop(&mut shard, b"l", End::Left, 1, 0, L).unwrap(), None);
        assert_eq!(shard.len(), 0, "the emptied list is deleted");
        assert_eq!(shard.used_bytes(), 0);
        shard.set(b"s", Value::string(b("x")), None, 0);
        assert!(matches!(
            push(&mut shard, b"s", End::Left, &items(&["a"]), false, 0, L),
            Err(CmdError::WrongType)
        ));
        assert!(matches!(
            pop(&mut shard, b"s", End::Left, 1, 0, L),
            Err(CmdError::WrongType)
        ));
    }

    #[test]
    fn move_element_rotates_and_moves_between_shards() {
        let db = Keyspace::new();
        db.lock(b"s").set(b"s", Value::string(b("x")), None, 0);
        push(
            &mut db.lock(b"a"),
            b"a",
            End::Right,
            &items(&["1", "2", "3"]),
            false,
            0,
            L,
        )
        .unwrap();
        let mut lock = db.lock_keys([&b"a"[..], &b"a"[..]]);
        assert_eq!(
            move_element(&mut lock, b"a", b"a", End::Left, End::Right, 0, L).unwrap(),
            Some(b("1"))
        );
        assert_eq!(
            contents(lock.shard(b"a"), b"a").unwrap(),
            items(&["2", "3", "1"])
        );
        drop(lock);
        let mut lock = db.lock_keys([&b"a"[..], &b"s"[..], &b"b"[..]]);
        assert!(matches!(
            move_element(&mut lock, b"a", b"s", End::Left, End::Left, 0, L),
            Err(CmdError::WrongType)
        ));
        assert_eq!(
            contents(lock.shard(b"a"), b"a").unwrap().len(),
            3,
            "nothing moved"
        );
        for _ in 0..3 {
            move_element(&mut lock, b"a", b"b", End::Right, End::Left, 0, L).unwrap();
        }
        assert!(contents(lock.shard(b"a"), b"a").is_none());
        assert_eq!(
            contents(lock.shard(b"b"), b"b").unwrap(),
            items(&["2", "3", "1"])
        );
        assert_eq!(
            move_element(&mut lock, b"a", b"s", End::Left, End::Left, 0, L).unwrap(),
            None
        );
        assert_eq!(
            pop_first(&mut lock, &items(&["a", "b"]), End::Left, 2, 0, L).unwrap(),
            Some((b("b"), items(&["2", "3"])))
        );
        assert!(matches!(
            pop_first(&mut lock, &items(&["a", "s", "b"]), End::Left, 1, 0, L),
            Err(CmdError::WrongType)
        ));
    }

    #[test]
    fn arguments_parse_like_redis() {
        assert_eq!(positive_arg(b"3", None).unwrap(), 3);
        assert_eq!(
            positive_arg(b"-1", None).unwrap_err().to_string(),
            "ERR value is out of range, must be positive"
        );
        assert_eq!(
            positive_arg(b"x", Some("COUNT can't be negative"))
                .unwrap_err()
                .to_string(),
            "ERR COUNT can't be negative"
        );
        assert_eq!(
            ranged_arg(b"-9223372036854775808", -i64::MAX, i64::MAX, None).unwrap_err().to_string(),
            "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807"
        );
        assert_eq!(
            ranged_arg(b"1.5", -i64::MAX, i64::MAX, None)
                .unwrap_err()
                .to_string(),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(end_arg(b"LeFt").unwrap(), End::Left);
        assert!(matches!(end_arg(b"middle"), Err(CmdError::Syntax)));
    }

    #[test]
    fn lmpop_keys_follow_numkeys() {
        let spec = super::super::table().get(b"lmpop").unwrap();
        assert!(spec.has(flags::MOVABLE_KEYS));
        assert_eq!(
            spec.key_indexes(&items(&["lmpop", "2", "a", "b", "left"])),
            vec![2, 3]
        );
        assert!(spec
            .key_indexes(&items(&["lmpop", "3", "a", "b"]))
            .is_empty());
        assert!(spec.key_indexes(&items(&["lmpop", "x", "a"])).is_empty());
        let lmove = super::super::table().get(b"lmove").unwrap();
        assert_eq!(
            lmove.key_indexes(&items(&["lmove", "a", "b", "left", "right"])),
            vec![1, 2]
        );
    }
}
