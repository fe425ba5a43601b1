//! String commands: GET/SET and friends, counters, ranges, multi-key MGET/MSET, and LCS (the
//! longest common subsequence of two strings, with Redis 7.2's LEN/IDX replies).
//!
//! Values are copied out of the request buffer when stored (so a stored value never pins a whole
//! read buffer). Every handler locks only the shard(s) of its key(s); multi-key commands use
//! `lock_keys` so they see and change all their keys atomically.

use super::{cmd, flags, CommandSpec, Ctx, KEY1};
use crate::args::{expire_at_ms, int_arg, is, parse_i64, ExpireUnit};
use crate::error::{CmdError, CmdResult};
use bytes::Bytes;
use gradus_proto::Frame;
use gradus_store::{Shard, Value};
use std::sync::atomic::Ordering;

const W: u32 = flags::WRITE | flags::DENYOOM;
const R: u32 = flags::READONLY;
const F: u32 = flags::FAST;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("get", 2, R | F, KEY1, "string", "Returns the string value of a key.", get),
    cmd("set", -3, W, KEY1, "string", "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.", set).key_flags_by(set_key_flags),
    cmd("setex", 4, W, KEY1, "string", "Sets the string value and expiration time of a key.", setex).key_flags(&["OW update"]),
    cmd("psetex", 4, W, KEY1, "string", "Sets both string value and expiration time in milliseconds of a key.", psetex).key_flags(&["OW update"]),
    cmd("setnx", 3, W | F, KEY1, "string", "Set the string value of a key only when the key doesn't exist.", setnx).notifies_if_changed(&[(crate::notify::STRING, "set")]).key_flags(&["OW insert"]),
    cmd("getex", -2, flags::WRITE | F, KEY1, "string", "Returns the string value of a key after setting its expiration time.", getex).reads(1, 1),
    cmd("getdel", 2, flags::WRITE | F, KEY1, "string", "Returns the string value of a key after deleting the key.", getdel).notifies_if_changed(&[(crate::notify::GENERIC, "del")]).reads(1, 1).key_flags(&["RW access delete"]),
    cmd("getset", 3, W | F, KEY1, "string", "Returns the previous string value of a key after setting it to a new value.", getset).notifies(&[(crate::notify::STRING, "set")]),
    cmd("mget", -2, R | F, (1, -1, 1), "string", "Atomically returns the string values of one or more keys.", mget),
    cmd("mset", -3, W, (1, -1, 2), "string", "Atomically creates or modifies the string values of one or more keys.", mset).notifies(&[(crate::notify::STRING, "set")]).key_flags(&["OW update"]),
    cmd("msetnx", -3, W, (1, -1, 2), "string", "Atomically modifies the string values of one or more keys only when all keys don't exist.", msetnx).notifies_if_changed(&[(crate::notify::STRING, "set")]).key_flags(&["OW insert"]),
    cmd("append", 3, W | F, KEY1, "string", "Appends a string to the value of a key. Creates the key if it doesn't exist.", append).notifies(&[(crate::notify::STRING, "append")]).key_flags(&["RW insert"]),
    cmd("strlen", 2, R | F, KEY1, "string", "Returns the length of a string value.", strlen).key_flags(&["RO"]),
    cmd("getrange", 4, R, KEY1, "string", "Returns a substring of the string stored at a key.", getrange),
    cmd("substr", 4, R, KEY1, "string", "Returns a substring from a string value.", getrange),
    cmd("setrange", 4, W, KEY1, "string", "Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist.", setrange).notifies(&[(crate::notify::STRING, "setrange")]).key_flags(&["RW update"]),
    cmd("incr", 2, W | F, KEY1, "string", "Increments the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.", incr).notifies(&[(crate::notify::STRING, "incrby")]),
    cmd("incrby", 3, W | F, KEY1, "string", "Increments the integer value of a key by a number. Uses 0 as initial value if the key doesn't exist.", incrby).notifies(&[(crate::notify::STRING, "incrby")]),
    cmd("decr", 2, W | F, KEY1, "string", "Decrements the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.", decr).notifies(&[(crate::notify::STRING, "incrby")]),
    cmd("decrby", 3, W | F, KEY1, "string", "Decrements a number from the integer value of a key. Uses 0 as initial value if the key doesn't exist.", decrby).notifies(&[(crate::notify::STRING, "incrby")]),
    cmd("lcs", -3, R, (1, 2, 1), "string", "Finds the longest common substring.", lcs),
    cmd("incrbyfloat", 3, W | F, KEY1, "string", "Increment the floating point value of a key by a number. Uses 0 as initial value if the key doesn't exist.", incrbyfloat).notifies(&[(crate::notify::STRING, "incrbyfloat")]),
];

/// SET's key-spec flags (Redis' `setGetKeys`): it overwrites its key, unless GET reads it too.
fn set_key_flags(args: &[Bytes]) -> &'static [&'static str] {
    if args.iter().skip(3).any(|a| is(a, "get")) {
        &["RW access update"]
    } else {
        &["OW update"]
    }
}

fn str_value(v: &[u8]) -> Value {
    Value::string_copy(v)
}

/// The string at `key`: Ok(None) when absent, WRONGTYPE when another type.
pub(crate) fn read_string(
    shard: &mut Shard,
    key: &[u8],
    now: u64,
) -> Result<Option<Bytes>, CmdError> {
    match shard.get(key, now) {
        None => Ok(None),
        Some(e) => match &e.value {
            Value::Str(b) => Ok(Some(b.to_bytes())),
            _ => Err(CmdError::WrongType),
        },
    }
}

fn bulk_or_null(v: Option<Bytes>) -> Frame {
    match v {
        Some(b) => Frame::Bulk(b),
        None => Frame::Null,
    }
}

fn max_string(ctx: &Ctx<'_>) -> usize {
    ctx.shared.live.proto_max_bulk_len.load(Ordering::Relaxed)
}

fn get(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let value = read_string(&mut ctx.db().lock(key), key, ctx.now_ms)?;
    ctx.lookup(value.is_some());
    Ok(bulk_or_null(value))
}

#[derive(PartialEq)]
enum Cond {
    Always,
    Nx,
    Xx,
}

/// What SET does with the TTL.
enum Ttl {
    /// Clear it (plain SET).
    Clear,
    Keep,
    At(i64),
}

fn invalid_expire(cmd: &str) -> CmdError {
    CmdError::err(format!("invalid expire time in '{cmd}' command"))
}

/// Parse SET's options after `key value`.
fn parse_set_options(args: &[Bytes], now: u64) -> Result<(Cond, Ttl, bool), CmdError> {
    let mut cond = Cond::Always;
    let mut ttl = Ttl::Clear;
    let mut ttl_given = false;
    let mut get = false;
    let mut i = 3;
    while i < args.len() {
        let a = &args[i];
        if is(a, "nx") && cond != Cond::Xx {
            cond = Cond::Nx;
        } else if is(a, "xx") && cond != Cond::Nx {
            cond = Cond::Xx;
        } else if is(a, "get") {
            get = true;
        } else if is(a, "keepttl") && !ttl_given {
            ttl = Ttl::Keep;
            ttl_given = true;
        } else if !ttl_given
            && (is(a, "ex") || is(a, "px") || is(a, "exat") || is(a, "pxat"))
            && i + 1 < args.len()
        {
            let unit = if is(a, "ex") || is(a, "exat") {
                ExpireUnit::Seconds
            } else {
                ExpireUnit::Millis
            };
            let absolute = is(a, "exat") || is(a, "pxat");
            let n = int_arg(&args[i + 1])?;
            if n <= 0 {
                return Err(invalid_expire("set"));
            }
            let at = expire_at_ms(now, n, unit, absolute).ok_or_else(|| invalid_expire("set"))?;
            ttl = Ttl::At(at);
            ttl_given = true;
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    Ok((cond, ttl, get))
}

/// Store `value` at `key` honouring the condition and TTL mode; returns (stored, old value if `get`).
fn set_generic(
    shard: &mut Shard,
    key: &[u8],
    value: &[u8],
    cond: Cond,
    ttl: Ttl,
    want_old: bool,
    now: u64,
) -> Result<(bool, Option<Bytes>), CmdError> {
    if cond == Cond::Always && !want_old {
        // Plain SET [EX..]: no need to look at the old entry first (except KEEPTTL).
        let expires_at = match ttl {
            Ttl::Clear => None,
            Ttl::At(t) => Some(t.max(0) as u64),
            Ttl::Keep => shard.peek(key, now).and_then(|e| e.expires_at()),
        };
        shard.set(key, str_value(value), expires_at, now);
        return Ok((true, None));
    }
    // Looked at with `peek`: the `set` below is the one access (a replaced key's LFU counter
    // grows once, as from Redis' lookup), here and in the other read-then-set commands.
    let (exists, old_ttl, old) = match shard.peek(key, now) {
        None => (false, None, None),
        Some(e) => {
            let old = match (&e.value, want_old) {
                (Value::Str(b), true) => Some(b.to_bytes()),
                (_, true) => return Err(CmdError::WrongType),
                _ => None,
            };
            (true, e.expires_at(), old)
        }
    };
    if (cond == Cond::Nx && exists) || (cond == Cond::Xx && !exists) {
        return Ok((false, old));
    }
    let expires_at = match ttl {
        Ttl::Clear => None,
        Ttl::Keep => old_ttl,
        Ttl::At(t) => Some(t.max(0) as u64),
    };
    shard.set(key, str_value(value), expires_at, now);
    Ok((true, old))
}

fn set(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (cond, ttl, get) = parse_set_options(args, ctx.now_ms)?;
    let key = &args[1];
    let expires = matches!(ttl, Ttl::At(_));
    let (stored, old) = set_generic(
        &mut ctx.db().lock(key),
        key,
        &args[2],
        cond,
        ttl,
        get,
        ctx.now_ms,
    )?;
    if stored {
        ctx.notify(crate::notify::STRING, "set", key);
        if expires {
            ctx.notify(crate::notify::GENERIC, "expire", key);
        }
    }
    Ok(if get {
        bulk_or_null(old)
    } else if stored {
        Frame::ok()
    } else {
        Frame::Null
    })
}

fn setex_generic(ctx: &mut Ctx<'_>, args: &[Bytes], unit: ExpireUnit, name: &str) -> CmdResult {
    let n = int_arg(&args[2])?;
    if n <= 0 {
        return Err(invalid_expire(name));
    }
    let at = expire_at_ms(ctx.now_ms, n, unit, false).ok_or_else(|| invalid_expire(name))?;
    let key = &args[1];
    ctx.db()
        .lock(key)
        .set(key, str_value(&args[3]), Some(at as u64), ctx.now_ms);
    ctx.notify(crate::notify::STRING, "set", key);
    ctx.notify(crate::notify::GENERIC, "expire", key);
    Ok(Frame::ok())
}

fn setex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    setex_generic(ctx, args, ExpireUnit::Seconds, "setex")
}

fn psetex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    setex_generic(ctx, args, ExpireUnit::Millis, "psetex")
}

fn setnx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let (stored, _) = set_generic(
        &mut ctx.db().lock(key),
        key,
        &args[2],
        Cond::Nx,
        Ttl::Clear,
        false,
        ctx.now_ms,
    )?;
    Ok(Frame::Integer(stored as i64))
}

fn getex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    // Redis' order of checks: option syntax, then the key (nil / WRONGTYPE), then the expire value.
    // None = leave the TTL; Some(None) = PERSIST; Some(Some((unit, absolute, arg))) = expire.
    let mut change: Option<Option<(ExpireUnit, bool, &Bytes)>> = None;
    let mut i = 2;
    while i < args.len() {
        let a = &args[i];
        if is(a, "persist") && change.is_none() {
            change = Some(None);
        } else if change.is_none()
            && (is(a, "ex") || is(a, "px") || is(a, "exat") || is(a, "pxat"))
            && i + 1 < args.len()
        {
            let unit = if is(a, "ex") || is(a, "exat") {
                ExpireUnit::Seconds
            } else {
                ExpireUnit::Millis
            };
            let absolute = is(a, "exat") || is(a, "pxat");
            change = Some(Some((unit, absolute, &args[i + 1])));
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    let key = &args[1];
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let value = read_string(&mut shard, key, now)?;
    ctx.lookup(value.is_some());
    let change = match change {
        Some(Some((unit, absolute, arg))) if value.is_some() => {
            let n = int_arg(arg)?;
            if n <= 0 {
                return Err(invalid_expire("getex"));
            }
            let at = expire_at_ms(now, n, unit, absolute).ok_or_else(|| invalid_expire("getex"))?;
            Some(Some(at))
        }
        Some(Some(_)) => None,
        Some(None) => Some(None),
        None => None,
    };
    let mut event = None;
    if value.is_some() {
        match change {
            None => {}
            Some(None)
                if shard
                    .get(key, now)
                    .is_some_and(|e| e.expires_at().is_some()) =>
            {
                shard.set_expiry(key, None, now);
                event = Some("persist");
            }
            Some(None) => {}
            Some(Some(at)) if at <= now as i64 => {
                shard.remove(key, now);
                event = Some("del");
            }
            Some(Some(at)) => {
                shard.set_expiry(key, Some(at as u64), now);
                event = Some("expire");
            }
        }
    }
    drop(shard);
    if let Some(event) = event {
        ctx.notify(crate::notify::GENERIC, event, key);
    }
    Ok(bulk_or_null(value))
}

fn getdel(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let value = read_string(&mut shard, key, now)?;
    ctx.lookup(value.is_some());
    if value.is_some() {
        shard.remove(key, now);
    }
    Ok(bulk_or_null(value))
}

fn getset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let (_, old) = set_generic(
        &mut ctx.db().lock(key),
        key,
        &args[2],
        Cond::Always,
        Ttl::Clear,
        true,
        ctx.now_ms,
    )?;
    Ok(bulk_or_null(old))
}

fn mget(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let keys = &args[1..];
    let db = ctx.db();
    let mut lock = db.lock_keys(keys.iter().map(|k| k.as_ref()));
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let v = match lock.shard(key).get(key, ctx.now_ms) {
            Some(e) => match &e.value {
                Value::Str(b) => Some(b.to_bytes()),
                _ => None,
            },
            None => None,
        };
        ctx.lookup(v.is_some());
        out.push(bulk_or_null(v));
    }
    Ok(Frame::Array(out))
}

fn mset_generic(ctx: &mut Ctx<'_>, args: &[Bytes], only_new: bool) -> CmdResult {
    if args.len().is_multiple_of(2) {
        return Err(super::arity_error(&args[0]));
    }
    let pairs: Vec<(&Bytes, &Bytes)> = args[1..].chunks_exact(2).map(|p| (&p[0], &p[1])).collect();
    let db = ctx.db();
    let mut lock = db.lock_keys(pairs.iter().map(|(k, _)| k.as_ref()));
    if only_new
        && pairs
            .iter()
            .any(|(k, _)| lock.shard(k).get(k, ctx.now_ms).is_some())
    {
        return Ok(Frame::Integer(0));
    }
    for (k, v) in &pairs {
        lock.shard(k).set(k, str_value(v), None, ctx.now_ms);
    }
    Ok(if only_new {
        Frame::Integer(1)
    } else {
        Frame::ok()
    })
}

fn mset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    mset_generic(ctx, args, false)
}

fn msetnx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    mset_generic(ctx, args, true)
}

fn append(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let piece = &args[2];
    let max = max_string(ctx);
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let old_len = match shard.peek(key, now) {
        None => None,
        Some(e) => match &e.value {
            Value::Str(b) => Some(b.len()),
            _ => return Err(CmdError::WrongType),
        },
    };
    let new_len = old_len.unwrap_or(0) + piece.len();
    if new_len > max {
        return Err(CmdError::StringTooLong);
    }
    match old_len {
        // Redis stores the argument as SET would for a new key (`int`/`embstr`), and edits an
        // existing string in place (which OBJECT ENCODING then calls `raw`): so does this, and
        // a long string nothing else holds grows where it is (the allocator's realloc), so
        // appending to it costs the piece, not a copy of the whole string.
        Some(old_len) => modify_string(&mut shard, key, now, new_len, |buf| {
            buf[old_len..].copy_from_slice(piece)
        }),
        None => {
            shard.set(key, Value::string(piece.clone()), None, now);
        }
    }
    Ok(Frame::Integer(new_len as i64))
}

fn strlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let v = read_string(&mut ctx.db().lock(key), key, ctx.now_ms)?;
    Ok(Frame::Integer(v.map_or(0, |b| b.len() as i64)))
}

fn getrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let start = int_arg(&args[2])?;
    let end = int_arg(&args[3])?;
    let key = &args[1];
    let v = read_string(&mut ctx.db().lock(key), key, ctx.now_ms)?.unwrap_or_default();
    let len = v.len() as i64;
    if len == 0 || (start < 0 && end < 0 && start > end) {
        return Ok(Frame::Bulk(Bytes::new()));
    }
    let mut s = if start < 0 { len + start } else { start };
    let mut e = if end < 0 { len + end } else { end };
    s = s.max(0);
    e = e.max(0);
    if e >= len {
        e = len - 1;
    }
    if s > e {
        return Ok(Frame::Bulk(Bytes::new()));
    }
    Ok(Frame::Bulk(v.slice(s as usize..=e as usize)))
}

fn setrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let offset = int_arg(&args[2])?;
    if offset < 0 {
        return Err(CmdError::err("offset is out of range"));
    }
    let offset = offset as usize;
    let piece = &args[3];
    let key = &args[1];
    let max = max_string(ctx);
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let old_len = match shard.peek(key, now) {
        None => 0,
        Some(e) => match &e.value {
            Value::Str(b) => b.len(),
            _ => return Err(CmdError::WrongType),
        },
    };
    if piece.is_empty() {
        return Ok(Frame::Integer(old_len as i64));
    }
    if offset.saturating_add(piece.len()) > max {
        return Err(CmdError::StringTooLong);
    }
    let needed = offset + piece.len();
    // An edit in place (or a new zero-padded string): `raw` for OBJECT ENCODING, as in Redis.
    let new_len = modify_string(&mut shard, key, now, needed, |buf| {
        buf[offset..needed].copy_from_slice(piece);
        buf.len()
    });
    Ok(Frame::Integer(new_len as i64))
}

/// Add `delta` to the integer at `key` (0 when absent), keeping its TTL.
fn incr_generic(ctx: &mut Ctx<'_>, key: &[u8], delta: i64) -> CmdResult {
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    // Read, check and replace the value in one lookup of the key (its TTL stays); an absent
    // key counts from 0. A refused increment changes nothing.
    let mut text = itoa::Buffer::new();
    shard
        .try_upsert(
            key,
            now,
            || str_value(b"0"),
            |value| match value {
                Value::Str(b) => {
                    let current = parse_i64(b).ok_or(CmdError::NotInteger)?;
                    let next = current.checked_add(delta).ok_or(CmdError::Overflow)?;
                    *value = str_value(text.format(next).as_bytes());
                    Ok(next)
                }
                _ => Err(CmdError::WrongType),
            },
        )
        .map(Frame::Integer)
}

fn incr(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    incr_generic(ctx, &args[1], 1)
}

fn decr(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    incr_generic(ctx, &args[1], -1)
}

fn incrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let delta = int_arg(&args[2])?;
    incr_generic(ctx, &args[1], delta)
}

fn decrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let delta = int_arg(&args[2])?;
    if delta == i64::MIN {
        return Err(CmdError::err("decrement would overflow"));
    }
    incr_generic(ctx, &args[1], -delta)
}

fn incrbyfloat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    use crate::long_double::{self, LongDouble, Parsed};
    let key = &args[1];
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    // Redis checks the key's type before the increment.
    if shard
        .peek(key, now)
        .is_some_and(|e| !matches!(e.value, Value::Str(_)))
    {
        return Err(CmdError::WrongType);
    }
    let delta = match long_double::parse(&args[2]) {
        None => return Err(CmdError::NotFloat),
        Some(Parsed::Infinite) => {
            return Err(CmdError::err("increment would produce NaN or Infinity"))
        }
        Some(Parsed::Finite(v)) => v,
    };
    let (current, ttl) = match shard.peek(key, now) {
        None => (Some(LongDouble::ZERO), None),
        Some(e) => match &e.value {
            Value::Str(b) => match long_double::parse(b) {
                None => return Err(CmdError::NotFloat),
                Some(Parsed::Infinite) => (None, e.expires_at()),
                Some(Parsed::Finite(v)) => (Some(v), e.expires_at()),
            },
            _ => return Err(CmdError::WrongType),
        },
    };
    let next = current
        .and_then(|c| c.checked_add(delta))
        .ok_or_else(|| CmdError::err("increment would produce NaN or Infinity"))?;
    let text = next.to_human_string();
    shard.set(key, str_value(text.as_bytes()), ttl, now);
    Ok(Frame::Bulk(Bytes::from(text)))
}

// ---------------------------------------------------------------------------------------------
// LCS

/// LCS's options.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct LcsOptions {
    len: bool,
    idx: bool,
    with_match_len: bool,
    min_match_len: i64,
}

/// Parse `args[3..]` as Redis' `lcsCommand` does (later words win; a negative MINMATCHLEN is 0).
fn lcs_options(args: &[Bytes]) -> Result<LcsOptions, CmdError> {
    let mut opts = LcsOptions::default();
    let mut j = 3;
    while j < args.len() {
        let arg = &args[j];
        if is(arg, "idx") {
            opts.idx = true;
        } else if is(arg, "len") {
            opts.len = true;
        } else if is(arg, "withmatchlen") {
            opts.with_match_len = true;
        } else if is(arg, "minmatchlen") && j + 1 < args.len() {
            opts.min_match_len = int_arg(&args[j + 1])?.max(0);
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    if opts.len && opts.idx {
        return Err(CmdError::err(
            "If you want both the length and indexes, please just use IDX.",
        ));
    }
    Ok(opts)
}

/// One matching run found walking the table back: its ranges in `a` and in `b` (inclusive).
#[derive(Debug, Clone, Copy, PartialEq)]
struct LcsMatch {
    a: (usize, usize),
    b: (usize, usize),
}

impl LcsMatch {
    fn len(&self) -> usize {
        self.a.1 - self.a.0 + 1
    }
}

/// The longest common subsequence of `a` and `b` and its matching runs, last first (the order
/// Redis walks its dynamic-programming table back in).
fn lcs_of(a: &[u8], b: &[u8]) -> (Vec<u8>, Vec<LcsMatch>) {
    let width = b.len() + 1;
    // table[i * width + j]: the LCS length of a[..i] and b[..j].
    let mut table = vec![0u32; (a.len() + 1) * width];
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            table[i * width + j] = if a[i - 1] == b[j - 1] {
                table[(i - 1) * width + j - 1] + 1
            } else {
                table[(i - 1) * width + j].max(table[i * width + j - 1])
            };
        }
    }
    let total = table[a.len() * width + b.len()] as usize;
    let mut common = vec![0u8; total];
    let mut matches = Vec::new();
    let mut current: Option<LcsMatch> = None;
    let (mut i, mut j, mut k) = (a.len(), b.len(), total);
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            common[k - 1] = a[i - 1];
            match current.as_mut() {
                None => {
                    current = Some(LcsMatch {
                        a: (i - 1, i - 1),
                        b: (j - 1, j - 1),
                    })
                }
                // Contiguous with the run so far: extend it backwards.
                Some(run) if run.a.0 == i && run.b.0 == j => {
                    run.a.0 -= 1;
                    run.b.0 -= 1;
                }
                Some(_) => emit = true,
            }
            if current.is_some_and(|run| run.a.0 == 0 || run.b.0 == 0) {
                emit = true;
            }
            (i, j, k) = (i - 1, j - 1, k - 1);
        } else {
            if table[(i - 1) * width + j] > table[i * width + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            emit = current.is_some();
        }
        if emit {
            if let Some(run) = current.take() {
                matches.push(run);
            }
        }
    }
    (common, matches)
}

/// LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN].
fn lcs(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (k1, k2) = (&args[1], &args[2]);
    let now = ctx.now_ms;
    let (a, b) = {
        let db = ctx.db();
        let mut locked = db.lock_keys([&k1[..], &k2[..]]);
        let mut read = |key: &Bytes| -> Result<Option<Bytes>, CmdError> {
            let shard = locked.shard(key);
            ctx.lookup(shard.get(key, now).is_some());
            read_string(shard, key, now)
        };
        let (a, b) = (read(k1), read(k2));
        match (a, b) {
            (Ok(a), Ok(b)) => (a.unwrap_or_default(), b.unwrap_or_default()),
            (a, b) => {
                // Both keys were looked up: a missing one is still a `keymiss` (the
                // dispatcher publishes none for an error reply).
                let missing: Vec<&Bytes> = [(k1, a), (k2, b)]
                    .into_iter()
                    .filter(|(_, v)| matches!(v, Ok(None)))
                    .map(|(k, _)| k)
                    .collect();
                drop(locked);
                for key in missing {
                    ctx.notify(crate::notify::KEY_MISS, "keymiss", key);
                }
                return Err(CmdError::err(
                    "The specified keys must contain string values",
                ));
            }
        }
    };
    let opts = lcs_options(args)?;
    let table_bytes = (a.len() as u128 + 1) * (b.len() as u128 + 1) * 4;
    if table_bytes > max_string(ctx) as u128 {
        return Err(CmdError::err(
            "Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        ));
    }
    let (common, matches) = lcs_of(&a, &b);
    if opts.len {
        return Ok(Frame::Integer(common.len() as i64));
    }
    if !opts.idx {
        return Ok(Frame::Bulk(Bytes::from(common)));
    }
    let pair = |(from, to): (usize, usize)| {
        Frame::Array(vec![Frame::Integer(from as i64), Frame::Integer(to as i64)])
    };
    let shown = matches
        .iter()
        .filter(|run| opts.min_match_len == 0 || run.len() as i64 >= opts.min_match_len)
        .map(|run| {
            let mut entry = vec![pair(run.a), pair(run.b)];
            if opts.with_match_len {
                entry.push(Frame::Integer(run.len() as i64));
            }
            Frame::Array(entry)
        })
        .collect();
    let text = |s: &'static str| Frame::Bulk(Bytes::from_static(s.as_bytes()));
    Ok(Frame::Map(vec![
        (text("matches"), Frame::Array(shown)),
        (text("len"), Frame::Integer(common.len() as i64)),
    ]))
}

/// Change the string at `key` in place (created empty when absent), grown with zero bytes to at
/// least `min_len` first; its TTL is kept, memcached client flags are not (a RESP write replaces
/// the whole item, as SET does). The caller has checked the key holds a string.
pub(crate) fn modify_string<R>(
    shard: &mut Shard,
    key: &[u8],
    now: u64,
    min_len: usize,
    f: impl FnOnce(&mut [u8]) -> R,
) -> R {
    let result = shard.upsert(
        key,
        now,
        || Value::string(Bytes::new()),
        |value| {
            let Value::Str(bytes) = value else {
                unreachable!("modify_string: the caller checked the type")
            };
            // An edit in place (`raw` for OBJECT ENCODING, as in Redis): a bitmap no snapshot
            // or reply holds is changed where it is, not copied.
            bytes.edit(min_len, f)
        },
    );
    if shard
        .peek(key, now)
        .is_some_and(|e| e.meta().client_flags != 0)
    {
        shard.update_meta(key, now, |m| m.client_flags = 0);
    }
    result
}

#[cfg(test)]
mod lcs_tests {
    use super::*;

    #[test]
    fn lcs_finds_redis_documented_example() {
        let (common, matches) = lcs_of(b"ohmytext", b"mynewtext");
        assert_eq!(common, b"mytext");
        assert_eq!(
            matches,
            vec![
                LcsMatch {
                    a: (4, 7),
                    b: (5, 8)
                },
                LcsMatch {
                    a: (2, 3),
                    b: (0, 1)
                },
            ]
        );
    }

    #[test]
    fn lcs_of_empty_strings_is_empty() {
        assert_eq!(lcs_of(b"", b"abc"), (Vec::new(), Vec::new()));
    }
}
