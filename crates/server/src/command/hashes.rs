//! Hash commands: HSET/HGET and friends, counters (HINCRBY, HINCRBYFLOAT), HSCAN and HRANDFIELD,
//! with Redis 7.2's replies and error texts.
//!
//! Every handler locks only the shard of its one key and never holds it while locking another.
//! Writes first check the key's type with a plain read and call `modify`/`upsert` only when they
//! really change the hash, so a failed or no-op command leaves the entry's version (and any WATCH
//! on it) untouched, as Redis does. HINCRBYFLOAT computes in x87 80-bit `long double` like Redis on
//! x86-64 (see [`long_double`]), so its text matches Redis digit for digit. Every write passes
//! the live `hash-max-listpack-*` limits ([`hash_limits`]), which decide when a hash stops being
//! a listpack. This module depends only on the store's values and the argument helpers, never
//! on connections or the codec.

use super::{arity_error, cmd, flags, CommandSpec, Ctx, KEY1};
use crate::args::{int_arg, is, parse_i64};
use crate::error::{CmdError, CmdResult};
use bytes::Bytes;
use gradus_proto::{BulkArray, Frame, ProtocolVersion};
use gradus_store::glob::glob_match;
use gradus_store::scan::{scan_position, scan_step};
use gradus_store::{HashLimits, HashValue, Shard, Value};
use rand::seq::IteratorRandom;
use rand::Rng;
use std::sync::atomic::Ordering;

const W: u32 = flags::WRITE;
const R: u32 = flags::READONLY;
const F: u32 = flags::FAST;
const D: u32 = flags::DENYOOM;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("hset", -4, W | D | F, KEY1, "hash", "Creates or modifies the value of a field in a hash.", hset).notifies(&[(crate::notify::HASH, "hset")]).key_flags(&["RW update"]),
    cmd("hmset", -4, W | D | F, KEY1, "hash", "Sets the values of multiple fields.", hmset).notifies(&[(crate::notify::HASH, "hset")]).key_flags(&["RW update"]),
    cmd("hsetnx", 4, W | D | F, KEY1, "hash", "Sets the value of a field in a hash only when the field doesn't exist.", hsetnx).notifies_if_changed(&[(crate::notify::HASH, "hset")]).key_flags(&["RW insert"]),
    cmd("hget", 3, R | F, KEY1, "hash", "Returns the value of a field in a hash.", hget),
    cmd("hmget", -3, R | F, KEY1, "hash", "Returns the values of all fields in a hash.", hmget),
    cmd("hdel", -3, W | F, KEY1, "hash", "Deletes one or more fields and their values from a hash. Deletes the hash if no fields remain.", hdel).notifies_if_changed(&[(crate::notify::HASH, "hdel")]).key_flags(&["RW delete"]),
    cmd("hexists", 3, R | F, KEY1, "hash", "Determines whether a field exists in a hash.", hexists).key_flags(&["RO"]),
    cmd("hlen", 2, R | F, KEY1, "hash", "Returns the number of fields in a hash.", hlen).key_flags(&["RO"]),
    cmd("hstrlen", 3, R | F, KEY1, "hash", "Returns the length of the value of a field.", hstrlen).key_flags(&["RO"]),
    cmd("hgetall", 2, R, KEY1, "hash", "Returns all fields and values in a hash.", hgetall),
    cmd("hkeys", 2, R, KEY1, "hash", "Returns all fields in a hash.", hkeys),
    cmd("hvals", 2, R, KEY1, "hash", "Returns all values in a hash.", hvals),
    cmd("hincrby", 4, W | D | F, KEY1, "hash", "Increments the integer value of a field in a hash by a number. Uses 0 as initial value if the field doesn't exist.", hincrby).notifies(&[(crate::notify::HASH, "hincrby")]),
    cmd("hincrbyfloat", 4, W | D | F, KEY1, "hash", "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't exist.", hincrbyfloat).notifies(&[(crate::notify::HASH, "hincrbyfloat")]),
    cmd("hscan", -3, R, KEY1, "hash", "Iterates over fields and values of a hash.", hscan),
    cmd("hrandfield", -2, R, KEY1, "hash", "Returns one or more random fields from a hash.", hrandfield),
];

/// The live `hash-max-listpack-entries` / `hash-max-listpack-value` limits a write keeps a hash
/// packed within.
pub(crate) fn hash_limits(ctx: &Ctx<'_>) -> HashLimits {
    let live = &ctx.shared.live;
    let as_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    HashLimits {
        entries: as_usize(live.hash_max_listpack_entries.load(Ordering::Relaxed)),
        value: as_usize(live.hash_max_listpack_value.load(Ordering::Relaxed)),
    }
}

/// The hash at `key` for reading: Ok(None) when absent, WRONGTYPE for another type.
fn read_hash<'s>(
    shard: &'s mut Shard,
    key: &[u8],
    now: u64,
) -> Result<Option<&'s HashValue>, CmdError> {
    super::read_typed(shard, key, now, Value::as_hash)
}

/// Like [`read_hash`], and counts the lookup in the keyspace hit/miss statistics.
fn lookup_hash<'s>(
    ctx: &Ctx<'_>,
    shard: &'s mut Shard,
    key: &[u8],
) -> Result<Option<&'s HashValue>, CmdError> {
    super::lookup_typed(ctx, shard, key, Value::as_hash)
}

/// Apply `f` to the hash at `key`, creating an empty one first when absent. The caller has already
/// checked the type with [`read_hash`] under the same lock.
fn upsert_hash<R>(
    shard: &mut Shard,
    key: &[u8],
    now: u64,
    f: impl FnOnce(&mut HashValue) -> R,
) -> R {
    shard.upsert(
        key,
        now,
        || Value::hash(HashValue::new()),
        |value| match value {
            Value::Hash(h) => f(h),
            // Unreachable after read_hash; a fresh empty hash is dropped again by upsert.
            _ => f(&mut HashValue::new()),
        },
    )
}

fn bulk_or_null(value: Option<&[u8]>) -> Frame {
    value.map_or(Frame::Null, bulk)
}

/// A field or value of a hash as a reply (copied: a small hash packs them in one buffer).
fn bulk(bytes: &[u8]) -> Frame {
    Frame::Bulk(Bytes::copy_from_slice(bytes))
}

/// Shared body of HSET and HMSET: returns how many fields were new.
fn hset_generic(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Result<i64, CmdError> {
    if args.len() % 2 == 1 {
        return Err(arity_error(&args[0]));
    }
    let key = &args[1];
    let now = ctx.now_ms;
    let limits = hash_limits(ctx);
    let mut shard = ctx.db().lock(key);
    // The type check and the write in one lookup of the key.
    shard.try_upsert(
        key,
        now,
        || Value::hash(HashValue::new()),
        |value| match value {
            Value::Hash(h) => {
                h.expect(args.len() / 2 - 1, limits);
                Ok(args[2..]
                    .chunks_exact(2)
                    .map(|pair| i64::from(h.insert(&pair[0], &pair[1], limits)))
                    .sum())
            }
            _ => Err(CmdError::WrongType),
        },
    )
}

fn hset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    hset_generic(ctx, args).map(Frame::Integer)
}

fn hmset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    hset_generic(ctx, args).map(|_| Frame::ok())
}

fn hsetnx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (key, field, value) = (&args[1], &args[2], &args[3]);
    let now = ctx.now_ms;
    let limits = hash_limits(ctx);
    let mut shard = ctx.db().lock(key);
    if read_hash(&mut shard, key, now)?.is_some_and(|h| h.contains(field)) {
        return Ok(Frame::Integer(0));
    }
    upsert_hash(&mut shard, key, now, |h| h.insert(field, value, limits));
    Ok(Frame::Integer(1))
}

fn hget(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let hash = lookup_hash(ctx, &mut shard, key)?;
    Ok(bulk_or_null(hash.and_then(|h| h.get(&args[2]))))
}

fn hmget(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let hash = lookup_hash(ctx, &mut shard, key)?;
    Ok(Frame::Array(
        args[2..]
            .iter()
            .map(|field| bulk_or_null(hash.and_then(|h| h.get(field))))
            .collect(),
    ))
}

fn hdel(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let fields = &args[2..];
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let present =
        read_hash(&mut shard, key, now)?.is_some_and(|h| fields.iter().any(|f| h.contains(f)));
    if !present {
        return Ok(Frame::Integer(0));
    }
    let deleted = shard
        .modify(key, now, |value| match value {
            Value::Hash(h) => fields.iter().filter(|f| h.remove(f)).count(),
            _ => 0,
        })
        .unwrap_or(0);
    Ok(Frame::Integer(deleted as i64))
}

fn hexists(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let hash = lookup_hash(ctx, &mut shard, key)?;
    Ok(Frame::Integer(i64::from(
        hash.is_some_and(|h| h.contains(&args[2])),
    )))
}

fn hlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let hash = lookup_hash(ctx, &mut shard, key)?;
    Ok(Frame::Integer(hash.map_or(0, |h| h.len()) as i64))
}

fn hstrlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let hash = lookup_hash(ctx, &mut shard, key)?;
    let len = hash.and_then(|h| h.get(&args[2])).map_or(0, |v| v.len());
    Ok(Frame::Integer(len as i64))
}

fn hgetall(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let hash = lookup_hash(ctx, &mut shard, key)?;
    Ok(Frame::Bulks(
        hash.map_or_else(Default::default, |h| {
            h.iter().flat_map(|(f, v)| [f, v]).collect::<BulkArray>()
        })
        .into_map(),
    ))
}

fn hkeys(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let hash = lookup_hash(ctx, &mut shard, key)?;
    Ok(Frame::Bulks(hash.map_or_else(Default::default, |h| {
        h.iter().map(|(f, _)| f).collect()
    })))
}

fn hvals(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let hash = lookup_hash(ctx, &mut shard, key)?;
    Ok(Frame::Bulks(hash.map_or_else(Default::default, |h| {
        h.iter().map(|(_, v)| v).collect()
    })))
}

fn hincrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let incr = int_arg(&args[3])?;
    let (key, field) = (&args[1], &args[2]);
    let now = ctx.now_ms;
    let limits = hash_limits(ctx);
    let mut shard = ctx.db().lock(key);
    let current = match read_hash(&mut shard, key, now)?.and_then(|h| h.get(field)) {
        None => 0,
        Some(v) => parse_i64(v).ok_or_else(|| CmdError::err("hash value is not an integer"))?,
    };
    let next = current.checked_add(incr).ok_or(CmdError::Overflow)?;
    let mut text = itoa::Buffer::new();
    upsert_hash(&mut shard, key, now, |h| {
        h.insert(field, text.format(next).as_bytes(), limits)
    });
    Ok(Frame::Integer(next))
}

fn hincrbyfloat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    use crate::long_double::{self, LongDouble, Parsed};
    let incr = match long_double::parse(&args[3]) {
        None => return Err(CmdError::NotFloat),
        Some(Parsed::Infinite) => return Err(CmdError::err("value is NaN or Infinity")),
        Some(Parsed::Finite(v)) => v,
    };
    let (key, field) = (&args[1], &args[2]);
    let now = ctx.now_ms;
    let limits = hash_limits(ctx);
    let mut shard = ctx.db().lock(key);
    let current = match read_hash(&mut shard, key, now)?.and_then(|h| h.get(field)) {
        None => Some(LongDouble::ZERO),
        Some(v) => match long_double::parse(v) {
            None => return Err(CmdError::err("hash value is not a float")),
            Some(Parsed::Infinite) => None,
            Some(Parsed::Finite(v)) => Some(v),
        },
    };
    let next = current
        .and_then(|c| c.checked_add(incr))
        .ok_or_else(|| CmdError::err("increment would produce NaN or Infinity"))?;
    let text = Bytes::from(next.to_human_string());
    // A result past `hash-max-listpack-value` converts the hash, as in Redis.
    upsert_hash(&mut shard, key, now, |h| h.insert(field, &text, limits));
    Ok(Frame::Bulk(text))
}

/// Parse a SCAN-family cursor the way Redis' `parseScanCursorOrReply` does with `strtoul`: no
/// leading space, an optional sign (a `-` wraps around, as C does), decimal digits, no overflow.
/// An empty argument is cursor 0.
pub(crate) fn parse_scan_cursor(arg: &[u8]) -> Result<u64, CmdError> {
    let invalid = || CmdError::err("invalid cursor");
    let (negative, digits) = match arg.first() {
        None => return Ok(0),
        Some(b'-') => (true, &arg[1..]),
        Some(b'+') => (false, &arg[1..]),
        Some(_) => (false, arg),
    };
    if digits.is_empty() {
        return Err(invalid());
    }
    let mut value: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return Err(invalid());
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(c - b'0')))
            .ok_or_else(invalid)?;
    }
    Ok(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

/// Options of HSCAN/ZSCAN after the cursor.
pub(crate) struct ScanOptions<'a> {
    pub count: usize,
    /// None for no pattern or `*`.
    pub pattern: Option<&'a [u8]>,
    pub no_values: bool,
}

/// Parse `[MATCH pattern] [COUNT count] [NOVALUES]` as Redis' `scanGenericCommand` does;
/// NOVALUES (Redis 7.4) is accepted only when `allow_no_values` (HSCAN).
pub(crate) fn parse_scan_options(
    args: &[Bytes],
    allow_no_values: bool,
) -> Result<ScanOptions<'_>, CmdError> {
    let mut options = ScanOptions {
        count: 10,
        pattern: None,
        no_values: false,
    };
    let mut i = 0;
    while i < args.len() {
        let has_value = i + 1 < args.len();
        if is(&args[i], "count") && has_value {
            let count = int_arg(&args[i + 1])?;
            if count < 1 {
                return Err(CmdError::Syntax);
            }
            options.count = usize::try_from(count).unwrap_or(usize::MAX);
            i += 2;
        } else if is(&args[i], "match") && has_value {
            let pattern: &[u8] = &args[i + 1];
            options.pattern = (pattern != b"*").then_some(pattern);
            i += 2;
        } else if is(&args[i], "novalues") {
            if !allow_no_values {
                return Err(CmdError::err("NOVALUES option can only be used in HSCAN"));
            }
            options.no_values = true;
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    Ok(options)
}

/// The reply of every SCAN-family command: `[cursor, [elements...]]`.
pub(crate) fn scan_reply(cursor: u64, elements: Vec<Frame>) -> Frame {
    Frame::Array(vec![
        Frame::Bulk(Bytes::from(cursor.to_string())),
        Frame::Array(elements),
    ])
}

/// A field of a hash and its value.
type FieldValue<'a> = (&'a [u8], &'a [u8]);

fn hscan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let cursor = parse_scan_cursor(&args[2])?;
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let Some(hash) = lookup_hash(ctx, &mut shard, key)? else {
        return Ok(scan_reply(0, Vec::new()));
    };
    let options = parse_scan_options(&args[3..], true)?;
    // A listpack-encoded hash is returned whole, whatever the cursor, like Redis does.
    let (page, next): (Vec<FieldValue<'_>>, u64) = if hash.is_packed() {
        (hash.iter().collect(), 0)
    } else {
        let hasher = gradus_store::FieldHasher::default();
        let items = hash
            .iter()
            .map(|(f, v)| (scan_position(&hasher, f), (f, v)));
        let (page, next) = scan_step(items, cursor, options.count);
        (page, next.unwrap_or(0))
    };
    let mut elements = Vec::with_capacity(page.len() * 2);
    for (field, value) in page {
        if options.pattern.is_some_and(|p| !glob_match(p, field)) {
            continue;
        }
        elements.push(bulk(field));
        if !options.no_values {
            elements.push(bulk(value));
        }
    }
    Ok(scan_reply(next, elements))
}

/// Parse the `count` argument of HRANDFIELD/ZRANDMEMBER and the optional WITH... flag named
/// `with`. Returns (count, with).
pub(crate) fn parse_random_count(args: &[Bytes], with: &str) -> Result<(i64, bool), CmdError> {
    let count = int_arg(&args[2])?;
    if count == i64::MIN {
        return Err(CmdError::err(format!(
            "value is out of range, value must between {} and {}",
            -i64::MAX,
            i64::MAX
        )));
    }
    match args.len() {
        3 => Ok((count, false)),
        4 if is(&args[3], with) => {
            if !(-i64::MAX / 2..=i64::MAX / 2).contains(&count) {
                return Err(CmdError::err("value is out of range"));
            }
            Ok((count, true))
        }
        _ => Err(CmdError::Syntax),
    }
}

/// Pick random items from `items` (of length `len`) the way HRANDFIELD/ZRANDMEMBER with a count
/// do: a positive count gives distinct items (all of them when count >= len), a negative count
/// gives exactly |count| items that may repeat.
pub(crate) fn random_picks<T: Clone>(
    items: impl Iterator<Item = T>,
    len: usize,
    count: i64,
) -> Vec<T> {
    let mut rng = rand::thread_rng();
    if count >= 0 {
        let wanted = usize::try_from(count).unwrap_or(usize::MAX);
        if wanted >= len {
            return items.collect();
        }
        return items.choose_multiple(&mut rng, wanted);
    }
    let all: Vec<T> = items.collect();
    if all.is_empty() {
        return Vec::new();
    }
    let wanted = count.unsigned_abs();
    let mut out = Vec::new();
    for _ in 0..wanted {
        out.push(all[rng.gen_range(0..all.len())].clone());
    }
    out
}

/// Reply for items picked WITH a second element (value or score): RESP3 nests pairs, RESP2 is flat.
pub(crate) fn pairs_reply(pairs: Vec<(Frame, Frame)>, resp: ProtocolVersion) -> Frame {
    match resp {
        ProtocolVersion::Resp3 => Frame::Array(
            pairs
                .into_iter()
                .map(|(a, b)| Frame::Array(vec![a, b]))
                .collect(),
        ),
        ProtocolVersion::Resp2 => {
            Frame::Array(pairs.into_iter().flat_map(|(a, b)| [a, b]).collect())
        }
    }
}

fn hrandfield(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let counted = if args.len() >= 3 {
        Some(parse_random_count(args, "withvalues")?)
    } else {
        None
    };
    let resp = ctx.client.resp;
    let mut shard = ctx.db().lock(key);
    let hash = lookup_hash(ctx, &mut shard, key)?;
    let Some((count, with_values)) = counted else {
        let Some(h) = hash else {
            return Ok(Frame::Null);
        };
        let index = rand::thread_rng().gen_range(0..h.len().max(1));
        return Ok(bulk_or_null(h.iter().nth(index).map(|(f, _)| f)));
    };
    let Some(h) = hash else {
        return Ok(Frame::Array(Vec::new()));
    };
    let picks = random_picks(h.iter(), h.len(), count);
    Ok(if with_values {
        pairs_reply(
            picks.into_iter().map(|(f, v)| (bulk(f), bulk(v))).collect(),
            resp,
        )
    } else {
        Frame::Array(picks.into_iter().map(|(f, _)| bulk(f)).collect())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_parse_like_strtoul() {
        assert_eq!(parse_scan_cursor(b"0"), Ok(0));
        assert_eq!(parse_scan_cursor(b"123"), Ok(123));
        assert_eq!(parse_scan_cursor(b""), Ok(0));
        assert_eq!(parse_scan_cursor(b"+7"), Ok(7));
        assert_eq!(parse_scan_cursor(b"-1"), Ok(u64::MAX));
        assert_eq!(parse_scan_cursor(b"18446744073709551615"), Ok(u64::MAX));
        for bad in [
            &b"18446744073709551616"[..],
            b" 1",
            b"1 ",
            b"x",
            b"-",
            b"1.0",
        ] {
            assert!(parse_scan_cursor(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn scan_options() {
        let args = |v: &[&str]| {
            v.iter()
                .map(|s| Bytes::from(s.to_string()))
                .collect::<Vec<_>>()
        };
        let a = args(&["MATCH", "f*", "COUNT", "5", "NOVALUES"]);
        let o = parse_scan_options(&a, true).unwrap();
        assert_eq!(
            (o.count, o.pattern, o.no_values),
            (5, Some(&b"f*"[..]), true)
        );
        assert_eq!(
            parse_scan_options(&args(&["count", "0"]), true).err(),
            Some(CmdError::Syntax)
        );
        assert_eq!(
            parse_scan_options(&args(&["count"]), true).err(),
            Some(CmdError::Syntax)
        );
        assert_eq!(
            parse_scan_options(&args(&["count", "x"]), true).err(),
            Some(CmdError::NotInteger)
        );
        assert!(parse_scan_options(&args(&["novalues"]), false).is_err());
        assert_eq!(
            parse_scan_options(&args(&["match", "*"]), true)
                .unwrap()
                .pattern,
            None
        );
    }
}
