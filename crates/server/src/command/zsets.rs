//! Sorted-set commands: ZADD/ZINCRBY, ZREM, score and rank lookups, the ZRANGE family (by rank,
//! score or lex, forward or reverse, with LIMIT, WITHSCORES and ZRANGESTORE), counts, range
//! removals, ZPOPMIN/ZPOPMAX, ZRANDMEMBER, ZSCAN, and the set algebra (ZUNION, ZINTER, ZDIFF, their
//! *STORE forms and ZINTERCARD; plain sets are inputs too), with Redis 7.2's replies and error texts.
//!
//! Every handler locks only the shard of its key (ZRANGESTORE and the set algebra lock all their
//! keys together with `lock_keys`). Writes decide on a read-only view first and call
//! `modify`/`upsert` only when the set really changes, so no-op commands leave the entry's
//! version (WATCH) alone, as Redis does.
//! Scores are `f64` and replied as `Frame::Double`, which the encoder turns into a bulk string for
//! RESP2; where the reply *shape* differs between RESP2 and RESP3 (score pairs) the handler checks
//! the client's protocol. A set's encoding (listpack or skiplist) is the store's business; writes
//! pass it the live `zset-max-listpack-*` limits ([`zset_limits`]). This module depends only on the
//! store's values, the live settings and the argument helpers.

use super::hashes::{
    pairs_reply, parse_random_count, parse_scan_cursor, parse_scan_options, random_picks,
    scan_reply,
};
use super::{arity_error, cmd, flags, CommandSpec, Ctx, KEY1, NO_KEYS};
use crate::args::{float_arg, int_arg, is, parse_i64, score_bound};
use crate::error::{CmdError, CmdResult};
use bytes::Bytes;
use gradus_proto::{format_double, Frame, ProtocolVersion};
use gradus_store::glob::glob_match;
use gradus_store::scan::{scan_position, scan_step};
use gradus_store::{MultiLock, ScoreBound, Shard, Value, ZMember, ZSetLimits, ZSetValue};
use rand::Rng;
use std::sync::atomic::Ordering;

const W: u32 = flags::WRITE;
const R: u32 = flags::READONLY;
const F: u32 = flags::FAST;
const D: u32 = flags::DENYOOM;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("zadd", -4, W | D | F, KEY1, "sorted-set", "Adds one or more members to a sorted set, or updates their scores. Creates the key if it doesn't exist.", zadd).key_flags(&["RW update"]),
    cmd("zincrby", 4, W | D | F, KEY1, "sorted-set", "Increments the score of a member in a sorted set.", zincrby),
    cmd("zrem", -3, W | F, KEY1, "sorted-set", "Removes one or more members from a sorted set. Deletes the sorted set if all members were removed.", zrem).notifies_if_changed(&[(crate::notify::ZSET, "zrem")]).key_flags(&["RW delete"]),
    cmd("zscore", 3, R | F, KEY1, "sorted-set", "Returns the score of a member in a sorted set.", zscore),
    cmd("zmscore", -3, R | F, KEY1, "sorted-set", "Returns the score of one or more members in a sorted set.", zmscore),
    cmd("zcard", 2, R | F, KEY1, "sorted-set", "Returns the number of members in a sorted set.", zcard).key_flags(&["RO"]),
    cmd("zcount", 4, R | F, KEY1, "sorted-set", "Returns the count of members in a sorted set that have scores within a range.", zcount),
    cmd("zlexcount", 4, R | F, KEY1, "sorted-set", "Returns the number of members in a sorted set within a lexicographical range.", zlexcount),
    cmd("zrange", -4, R, KEY1, "sorted-set", "Returns members in a sorted set within a range of indexes.", zrange),
    cmd("zrangestore", -5, W | D, (1, 2, 1), "sorted-set", "Stores a range of members from sorted set in a key.", zrangestore).reads(2, 2).key_flags(&["OW update", "RO access"]),
    cmd("zrangebyscore", -4, R, KEY1, "sorted-set", "Returns members in a sorted set within a range of scores.", zrangebyscore),
    cmd("zrevrangebyscore", -4, R, KEY1, "sorted-set", "Returns members in a sorted set within a range of scores in reverse order.", zrevrangebyscore),
    cmd("zrangebylex", -4, R, KEY1, "sorted-set", "Returns members in a sorted set within a lexicographical range.", zrangebylex),
    cmd("zrevrangebylex", -4, R, KEY1, "sorted-set", "Returns members in a sorted set within a lexicographical range in reverse order.", zrevrangebylex),
    cmd("zrevrange", -4, R, KEY1, "sorted-set", "Returns members in a sorted set within a range of indexes in reverse order.", zrevrange),
    cmd("zrank", -3, R | F, KEY1, "sorted-set", "Returns the index of a member in a sorted set ordered by ascending scores.", zrank),
    cmd("zrevrank", -3, R | F, KEY1, "sorted-set", "Returns the index of a member in a sorted set ordered by descending scores.", zrevrank),
    cmd("zremrangebyscore", 4, W, KEY1, "sorted-set", "Removes members in a sorted set within a range of scores. Deletes the sorted set if all members were removed.", zremrangebyscore).notifies_if_changed(&[(crate::notify::ZSET, "zremrangebyscore")]).key_flags(&["RW delete"]),
    cmd("zremrangebyrank", 4, W, KEY1, "sorted-set", "Removes members in a sorted set within a range of indexes. Deletes the sorted set if all members were removed.", zremrangebyrank).notifies_if_changed(&[(crate::notify::ZSET, "zremrangebyrank")]).key_flags(&["RW delete"]),
    cmd("zremrangebylex", 4, W, KEY1, "sorted-set", "Removes members in a sorted set within a lexicographical range. Deletes the sorted set if all members were removed.", zremrangebylex).notifies_if_changed(&[(crate::notify::ZSET, "zremrangebylex")]).key_flags(&["RW delete"]),
    cmd("zpopmin", -2, W | F, KEY1, "sorted-set", "Returns the lowest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.", zpopmin).key_flags(&["RW access delete"]),
    cmd("zpopmax", -2, W | F, KEY1, "sorted-set", "Returns the highest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.", zpopmax).key_flags(&["RW access delete"]),
    cmd("zrandmember", -2, R, KEY1, "sorted-set", "Returns one or more random members from a sorted set.", zrandmember),
    cmd("zscan", -3, R, KEY1, "sorted-set", "Iterates over members and scores of a sorted set.", zscan),
    cmd("zunion", -3, R, NO_KEYS, "sorted-set", "Returns the union of multiple sorted sets.", zunion).with_numkeys(1),
    cmd("zinter", -3, R, NO_KEYS, "sorted-set", "Returns the intersect of multiple sorted sets.", zinter).with_numkeys(1),
    cmd("zdiff", -3, R, NO_KEYS, "sorted-set", "Returns the difference between multiple sorted sets.", zdiff).with_numkeys(1),
    cmd("zunionstore", -4, W | D, KEY1, "sorted-set", "Stores the union of multiple sorted sets in a key.", zunionstore).with_numkeys(2).reads(3, -1).key_flags(&["OW update", "RO access"]),
    cmd("zinterstore", -4, W | D, KEY1, "sorted-set", "Stores the intersect of multiple sorted sets in a key.", zinterstore).with_numkeys(2).reads(3, -1).key_flags(&["OW update", "RO access"]),
    cmd("zdiffstore", -4, W | D, KEY1, "sorted-set", "Stores the difference of multiple sorted sets in a key.", zdiffstore).with_numkeys(2).reads(3, -1).key_flags(&["OW update", "RO access"]),
    cmd("zintercard", -3, R, NO_KEYS, "sorted-set", "Returns the number of members of the intersect of multiple sorted sets.", zintercard).with_numkeys(1),
];

/// The sorted set at `key` for reading: Ok(None) when absent, WRONGTYPE for another type.
fn read_zset<'s>(
    shard: &'s mut Shard,
    key: &[u8],
    now: u64,
) -> Result<Option<&'s ZSetValue>, CmdError> {
    super::read_typed(shard, key, now, Value::as_zset)
}

/// Like [`read_zset`], and counts the lookup in the keyspace hit/miss statistics.
fn lookup_zset<'s>(
    ctx: &Ctx<'_>,
    shard: &'s mut Shard,
    key: &[u8],
) -> Result<Option<&'s ZSetValue>, CmdError> {
    super::lookup_typed(ctx, shard, key, Value::as_zset)
}

/// The live `zset-max-listpack-entries` / `zset-max-listpack-value` limits a write keeps a
/// sorted set packed within.
pub(crate) fn zset_limits(ctx: &Ctx<'_>) -> ZSetLimits {
    let live = &ctx.shared.live;
    let as_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    ZSetLimits {
        entries: as_usize(live.zset_max_listpack_entries.load(Ordering::Relaxed)),
        value: as_usize(live.zset_max_listpack_value.load(Ordering::Relaxed)),
    }
}

/// Apply `f` to the sorted set at `key`, creating it as `create` when given and absent.
/// The caller has already checked the type with [`read_zset`] under the same lock.
fn change_zset<R: Default>(
    shard: &mut Shard,
    key: &[u8],
    now: u64,
    create: Option<ZSetValue>,
    f: impl FnOnce(&mut ZSetValue) -> R,
) -> R {
    let apply = |value: &mut Value| match value {
        Value::ZSet(z) => f(z),
        // Unreachable after read_zset.
        _ => R::default(),
    };
    match create {
        Some(fresh) => shard.upsert(key, now, || Value::zset(fresh), apply),
        None => shard.modify(key, now, apply).unwrap_or_default(),
    }
}

/// Remove `members` from the set at `key` (whose type the caller checked); returns how many went.
fn remove_members(shard: &mut Shard, key: &[u8], now: u64, members: &[Bytes]) -> i64 {
    if members.is_empty() {
        return 0;
    }
    change_zset(shard, key, now, None, |z| {
        members.iter().filter(|m| z.remove(m)).count() as i64
    })
}

/// A score argument, parsed like Redis' `string2d`: besides what `float_arg` rejects, `strtod`
/// range errors (overflow to infinity, underflow to zero) are rejected too.
pub(crate) fn score_arg(arg: &[u8]) -> Result<f64, CmdError> {
    let value = float_arg(arg)?;
    let mantissa = arg.split(|&c| c == b'e' || c == b'E').next().unwrap_or(arg);
    let spelled_infinity = arg
        .iter()
        .any(|c| c.is_ascii_alphabetic() && !matches!(c, b'e' | b'E'));
    let underflow = value == 0.0 && mantissa.iter().any(|c| (b'1'..=b'9').contains(c));
    if (value.is_infinite() && !spelled_infinity) || underflow {
        return Err(CmdError::NotFloat);
    }
    Ok(value)
}

/// Members with scores, in reply order.
type Scored = Vec<(Bytes, f64)>;

/// Members with scores as the set holds them (borrowed), in reply order.
type ScoredRef<'z> = Vec<(ZMember<'z>, f64)>;

/// Borrowed members made the reply's own (a skiplist's shared, a listpack's copied).
fn owned(items: ScoredRef<'_>) -> Scored {
    items.into_iter().map(|(m, s)| (m.to_bytes(), s)).collect()
}

/// A member-and-score list as a reply: members only, or with scores (flat in RESP2, pairs in RESP3).
fn scored_reply(items: Scored, with_scores: bool, resp: ProtocolVersion) -> Frame {
    if with_scores {
        pairs_reply(
            items
                .into_iter()
                .map(|(m, s)| (Frame::Bulk(m), Frame::Double(s)))
                .collect(),
            resp,
        )
    } else {
        Frame::Array(items.into_iter().map(|(m, _)| Frame::Bulk(m)).collect())
    }
}

// ---------------------------------------------------------------------------------------------
// ZADD / ZINCRBY

/// ZADD's options after parsing.
#[derive(Default, Clone, Copy)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

/// What one score/member pair does to the set (Redis' `zsetAdd` out flags).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
enum AddOutcome {
    /// Nothing, and the member does not count as processed (NX/XX/GT/LT said no).
    #[default]
    Nop,
    /// Processed, score unchanged (compared with `==`, so 0 and -0 are the same).
    Same(f64),
    Updated(f64),
    Added(f64),
}

fn nan_error() -> CmdError {
    CmdError::err("resulting score is not a number (NaN)")
}

/// Decide what adding `score` does to a member whose current score is `current`.
fn add_outcome(current: Option<f64>, score: f64, opts: AddFlags) -> Result<AddOutcome, CmdError> {
    let Some(current) = current else {
        return Ok(if opts.xx {
            AddOutcome::Nop
        } else {
            AddOutcome::Added(score)
        });
    };
    if opts.nx {
        return Ok(AddOutcome::Nop);
    }
    let new = if opts.incr { score + current } else { score };
    if new.is_nan() {
        return Err(nan_error());
    }
    if (opts.lt && new >= current) || (opts.gt && new <= current) {
        return Ok(AddOutcome::Nop);
    }
    Ok(if new == current {
        AddOutcome::Same(new)
    } else {
        AddOutcome::Updated(new)
    })
}

/// ZADD and ZINCRBY (which is ZADD with INCR forced, options parsing included, as in Redis).
fn zadd_generic(ctx: &mut Ctx<'_>, args: &[Bytes], incr: bool) -> CmdResult {
    let mut opts = AddFlags {
        incr,
        ..AddFlags::default()
    };
    let mut first = 2;
    while let Some(arg) = args.get(first) {
        if is(arg, "nx") {
            opts.nx = true;
        } else if is(arg, "xx") {
            opts.xx = true;
        } else if is(arg, "ch") {
            opts.ch = true;
        } else if is(arg, "incr") {
            opts.incr = true;
        } else if is(arg, "gt") {
            opts.gt = true;
        } else if is(arg, "lt") {
            opts.lt = true;
        } else {
            break;
        }
        first += 1;
    }
    let rest = &args[first..];
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    if opts.nx && opts.xx {
        return Err(CmdError::err(
            "XX and NX options at the same time are not compatible",
        ));
    }
    if (opts.nx && (opts.gt || opts.lt)) || (opts.gt && opts.lt) {
        return Err(CmdError::err(
            "GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if opts.incr && rest.len() > 2 {
        return Err(CmdError::err(
            "INCR option supports a single increment-element pair",
        ));
    }
    let pairs = rest
        .chunks_exact(2)
        .map(|p| Ok((score_arg(&p[0])?, &p[1])))
        .collect::<Result<Vec<(f64, &Bytes)>, CmdError>>()?;

    let key = &args[1];
    let now = ctx.now_ms;
    let limits = zset_limits(ctx);
    let mut shard = ctx.db().lock(key);
    // Decide on the current state first: if no pair changes anything, nothing is written (and,
    // since each pair is then a no-op against the same state, that is also the sequential answer).
    let (changes, outcome) = match read_zset(&mut shard, key, now)? {
        None => (!opts.xx, None),
        Some(z) => {
            let mut changes = false;
            let mut last = AddOutcome::Nop;
            for &(score, member) in &pairs {
                last = add_outcome(z.score(member), score, opts)?;
                changes |= matches!(last, AddOutcome::Added(_) | AddOutcome::Updated(_));
            }
            (changes, Some(last))
        }
    };
    // More pairs than a listpack holds make an existing one a skiplist first, whatever they
    // change (Redis 7.2's zsetTypeMaybeConvert; a new key is created so, below).
    if outcome.is_some() && pairs.len() > limits.entries {
        shard.zset_to_skiplist(key);
    }
    let (added, updated, last) = if changes {
        // A new key starts as the encoding its first pairs call for (Redis' zsetTypeCreate).
        let create = outcome
            .is_none()
            .then(|| ZSetValue::sized_for(pairs.len(), pairs[0].1.len(), limits));
        // On a new key, distinct members are all added as given (NX, GT and LT only refuse
        // updates): the set is built at once, one allocation for a listpack.
        let all_new = create.is_some() && distinct_members(&pairs);
        change_zset(&mut shard, key, now, create, |z| {
            if all_new {
                z.extend(pairs.iter().map(|&(s, m)| (&m[..], s)), limits);
                let last = pairs
                    .last()
                    .map_or(AddOutcome::Nop, |&(s, _)| AddOutcome::Added(s));
                return (pairs.len() as i64, 0, last);
            }
            let (mut added, mut updated, mut last) = (0i64, 0i64, AddOutcome::Nop);
            for &(score, member) in &pairs {
                // An error is impossible here: it would have been returned by the check above.
                last = add_outcome(z.score(member), score, opts).unwrap_or(AddOutcome::Nop);
                match last {
                    AddOutcome::Added(s) => {
                        z.insert(member, s, limits);
                        added += 1;
                    }
                    AddOutcome::Updated(s) => {
                        z.insert(member, s, limits);
                        updated += 1;
                    }
                    AddOutcome::Same(_) | AddOutcome::Nop => {}
                }
            }
            (added, updated, last)
        })
    } else {
        (0, 0, outcome.unwrap_or(AddOutcome::Nop))
    };
    drop(shard);
    // Redis: `zincr` or `zadd` when a member was added or its score changed.
    if added + updated > 0 {
        let event = if opts.incr { "zincr" } else { "zadd" };
        ctx.notify(crate::notify::ZSET, event, key);
    }
    Ok(if opts.incr {
        match last {
            AddOutcome::Nop => Frame::Null,
            AddOutcome::Same(s) | AddOutcome::Updated(s) | AddOutcome::Added(s) => Frame::Double(s),
        }
    } else {
        Frame::Integer(if opts.ch { added + updated } else { added })
    })
}

/// Whether no member appears twice among `pairs`.
fn distinct_members(pairs: &[(f64, &Bytes)]) -> bool {
    let mut members: Vec<&[u8]> = pairs.iter().map(|(_, m)| &m[..]).collect();
    members.sort_unstable();
    members.windows(2).all(|w| w[0] != w[1])
}

fn zadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zadd_generic(ctx, args, false)
}

fn zincrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zadd_generic(ctx, args, true)
}

// ---------------------------------------------------------------------------------------------
// Single-member reads and removal

fn zrem(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let members = &args[2..];
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let present = read_zset(&mut shard, key, now)?
        .is_some_and(|z| members.iter().any(|m| z.score(m).is_some()));
    if !present {
        return Ok(Frame::Integer(0));
    }
    Ok(Frame::Integer(remove_members(
        &mut shard, key, now, members,
    )))
}

fn score_or_null(score: Option<f64>) -> Frame {
    score.map_or(Frame::Null, Frame::Double)
}

fn zscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let zset = lookup_zset(ctx, &mut shard, key)?;
    Ok(score_or_null(zset.and_then(|z| z.score(&args[2]))))
}

fn zmscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let zset = lookup_zset(ctx, &mut shard, key)?;
    Ok(Frame::Array(
        args[2..]
            .iter()
            .map(|m| score_or_null(zset.and_then(|z| z.score(m))))
            .collect(),
    ))
}

fn zcard(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let zset = lookup_zset(ctx, &mut shard, key)?;
    Ok(Frame::Integer(zset.map_or(0, |z| z.len()) as i64))
}

/// ZRANK/ZREVRANK key member [WITHSCORE].
fn zrank_generic(ctx: &mut Ctx<'_>, args: &[Bytes], reverse: bool) -> CmdResult {
    if args.len() > 4 {
        return Err(arity_error(&args[0]));
    }
    let with_score = match args.get(3) {
        None => false,
        Some(a) if is(a, "withscore") => true,
        Some(_) => return Err(CmdError::Syntax),
    };
    let missing = if with_score {
        Frame::NullArray
    } else {
        Frame::Null
    };
    let (key, member) = (&args[1], &args[2]);
    let mut shard = ctx.db().lock(key);
    let Some(z) = lookup_zset(ctx, &mut shard, key)? else {
        return Ok(missing);
    };
    let Some((below, score)) = z.rank(member) else {
        return Ok(missing);
    };
    let rank = if reverse { z.len() - 1 - below } else { below } as i64;
    Ok(if with_score {
        Frame::Array(vec![Frame::Integer(rank), Frame::Double(score)])
    } else {
        Frame::Integer(rank)
    })
}

fn zrank(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zrank_generic(ctx, args, false)
}

fn zrevrank(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zrank_generic(ctx, args, true)
}

// ---------------------------------------------------------------------------------------------
// Ranges

/// One end of a lexicographical range (`-`, `+`, `[member`, `(member`).
#[derive(Debug, Clone, PartialEq)]
enum LexBound {
    Min,
    Max,
    Inclusive(Bytes),
    Exclusive(Bytes),
}

impl LexBound {
    fn parse(arg: &Bytes) -> Option<LexBound> {
        match arg.first()? {
            b'-' if arg.len() == 1 => Some(LexBound::Min),
            b'+' if arg.len() == 1 => Some(LexBound::Max),
            b'[' => Some(LexBound::Inclusive(arg.slice(1..))),
            b'(' => Some(LexBound::Exclusive(arg.slice(1..))),
            _ => None,
        }
    }

    /// True when `member` is on the inner side of this bound used as a minimum.
    fn below(&self, member: &[u8]) -> bool {
        match self {
            LexBound::Min => true,
            LexBound::Max => false,
            LexBound::Inclusive(b) => member >= &b[..],
            LexBound::Exclusive(b) => member > &b[..],
        }
    }

    /// True when `member` is on the inner side of this bound used as a maximum.
    fn above(&self, member: &[u8]) -> bool {
        match self {
            LexBound::Min => false,
            LexBound::Max => true,
            LexBound::Inclusive(b) => member <= &b[..],
            LexBound::Exclusive(b) => member < &b[..],
        }
    }
}

fn lex_range(min: &Bytes, max: &Bytes) -> Result<(LexBound, LexBound), CmdError> {
    match (LexBound::parse(min), LexBound::parse(max)) {
        (Some(min), Some(max)) => Ok((min, max)),
        _ => Err(CmdError::err("min or max not valid string range item")),
    }
}

fn score_range(min: &[u8], max: &[u8]) -> Result<(ScoreBound, ScoreBound), CmdError> {
    Ok((score_bound(min)?, score_bound(max)?))
}

/// Which members a range selects.
#[derive(Debug, Clone, PartialEq)]
enum Range {
    /// Ranks `start..=stop`; negative values count from the end.
    Rank {
        start: i64,
        stop: i64,
    },
    Score {
        min: ScoreBound,
        max: ScoreBound,
    },
    Lex {
        min: LexBound,
        max: LexBound,
    },
}

/// `skip(offset).take(limit)` with Redis' LIMIT rules: a negative offset selects nothing, a
/// negative count means no limit.
fn apply_limit<T>(items: impl Iterator<Item = T>, offset: i64, limit: i64) -> Vec<T> {
    if offset < 0 {
        return Vec::new();
    }
    let skip = usize::try_from(offset).unwrap_or(usize::MAX);
    let take = usize::try_from(limit).unwrap_or(usize::MAX);
    items.skip(skip).take(take).collect()
}

/// The members `range` selects from `z`, made the reply's own (see [`select_ref`]).
fn select(z: &ZSetValue, range: &Range, reverse: bool, offset: i64, limit: i64) -> Scored {
    owned(select_ref(z, range, reverse, offset, limit))
}

/// The members `range` selects from `z`, in ascending order or, with `reverse`, descending
/// (for which score and lex ranges are still given as min, max). LIMIT applies to score and lex
/// ranges only.
fn select_ref<'z>(
    z: &'z ZSetValue,
    range: &Range,
    reverse: bool,
    offset: i64,
    limit: i64,
) -> ScoredRef<'z> {
    match range {
        Range::Rank { start, stop } => {
            let len = z.len() as i64;
            let start = if *start < 0 {
                len.saturating_add(*start)
            } else {
                *start
            }
            .max(0);
            let stop = if *stop < 0 {
                len.saturating_add(*stop)
            } else {
                *stop
            };
            if start > stop || start >= len {
                return Vec::new();
            }
            let count = (stop.min(len - 1) - start + 1) as usize;
            let start = start as usize;
            if reverse {
                z.iter().rev().skip(start).take(count).collect()
            } else {
                z.iter().skip(start).take(count).collect()
            }
        }
        Range::Score { min, max } => {
            let items = z.range_by_score(*min, *max);
            if reverse {
                apply_limit(items.rev(), offset, limit)
            } else {
                apply_limit(items, offset, limit)
            }
        }
        Range::Lex { min, max } => {
            if reverse {
                let items = z
                    .iter()
                    .rev()
                    .skip_while(|(m, _)| !max.above(m))
                    .take_while(|(m, _)| min.below(m));
                apply_limit(items, offset, limit)
            } else {
                let items = z
                    .iter()
                    .skip_while(|(m, _)| !min.below(m))
                    .take_while(|(m, _)| max.above(m));
                apply_limit(items, offset, limit)
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum RangeBy {
    Rank,
    Score,
    Lex,
}

/// A parsed ZRANGE-family request.
#[derive(Debug, Clone, PartialEq)]
struct RangeRequest {
    range: Range,
    reverse: bool,
    with_scores: bool,
    offset: i64,
    limit: i64,
}

/// Parse the arguments of the ZRANGE family the way Redis' `zrangeGenericCommand` does.
/// `key_index` is the source key's position (2 for ZRANGESTORE, else 1); `by` and `reverse` are
/// fixed by the command name, or None when options choose them (ZRANGE, ZRANGESTORE).
fn parse_range_request(
    args: &[Bytes],
    key_index: usize,
    store: bool,
    by: Option<RangeBy>,
    reverse: Option<bool>,
) -> Result<RangeRequest, CmdError> {
    let (mut by_chosen, mut by) = (by.is_some(), by.unwrap_or(RangeBy::Rank));
    let (mut reverse_chosen, mut reverse) = (reverse.is_some(), reverse.unwrap_or(false));
    let (mut with_scores, mut offset, mut limit) = (false, 0i64, -1i64);
    let mut j = key_index + 3;
    while j < args.len() {
        let arg = &args[j];
        let left = args.len() - j - 1;
        if !store && is(arg, "withscores") {
            with_scores = true;
        } else if is(arg, "limit") && left >= 2 {
            offset = int_arg(&args[j + 1])?;
            limit = int_arg(&args[j + 2])?;
            j += 2;
        } else if !reverse_chosen && is(arg, "rev") {
            (reverse_chosen, reverse) = (true, true);
        } else if !by_chosen && is(arg, "bylex") {
            (by_chosen, by) = (true, RangeBy::Lex);
        } else if !by_chosen && is(arg, "byscore") {
            (by_chosen, by) = (true, RangeBy::Score);
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    if limit != -1 && by == RangeBy::Rank {
        return Err(CmdError::err(
            "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if with_scores && by == RangeBy::Lex {
        return Err(CmdError::err(
            "syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    let (mut min, mut max) = (&args[key_index + 1], &args[key_index + 2]);
    if reverse && by != RangeBy::Rank {
        // Reverse score and lex ranges are written max first.
        std::mem::swap(&mut min, &mut max);
    }
    let range = match by {
        RangeBy::Rank => Range::Rank {
            start: int_arg(min)?,
            stop: int_arg(max)?,
        },
        RangeBy::Score => {
            let (min, max) = score_range(min, max)?;
            Range::Score { min, max }
        }
        RangeBy::Lex => {
            let (min, max) = lex_range(min, max)?;
            Range::Lex { min, max }
        }
    };
    Ok(RangeRequest {
        range,
        reverse,
        with_scores,
        offset,
        limit,
    })
}

fn zrange_generic(
    ctx: &mut Ctx<'_>,
    args: &[Bytes],
    by: Option<RangeBy>,
    reverse: Option<bool>,
) -> CmdResult {
    let req = parse_range_request(args, 1, false, by, reverse)?;
    let key = &args[1];
    let resp = ctx.client.resp;
    let mut shard = ctx.db().lock(key);
    let Some(z) = lookup_zset(ctx, &mut shard, key)? else {
        return Ok(Frame::Array(Vec::new()));
    };
    if !req.with_scores {
        // Members only: written in place into one buffer (see `Frame::Bulks`).
        let items = select_ref(z, &req.range, req.reverse, req.offset, req.limit);
        return Ok(Frame::Bulks(
            items.iter().map(|(m, _)| m.as_slice()).collect(),
        ));
    }
    let items = select(z, &req.range, req.reverse, req.offset, req.limit);
    Ok(scored_reply(items, true, resp))
}

fn zrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zrange_generic(ctx, args, None, None)
}

fn zrevrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zrange_generic(ctx, args, Some(RangeBy::Rank), Some(true))
}

fn zrangebyscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zrange_generic(ctx, args, Some(RangeBy::Score), Some(false))
}

fn zrevrangebyscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zrange_generic(ctx, args, Some(RangeBy::Score), Some(true))
}

fn zrangebylex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zrange_generic(ctx, args, Some(RangeBy::Lex), Some(false))
}

fn zrevrangebylex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zrange_generic(ctx, args, Some(RangeBy::Lex), Some(true))
}

/// ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]: both keys' shards are
/// locked together so the copy is atomic.
fn zrangestore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let req = parse_range_request(args, 2, true, None, None)?;
    let (dst, src) = (&args[1], &args[2]);
    let now = ctx.now_ms;
    let limits = zset_limits(ctx);
    let db = ctx.db();
    let mut locked = db.lock_keys([&dst[..], &src[..]]);
    let source = locked.shard(src);
    ctx.lookup(source.get(src, now).is_some());
    let stored = match read_zset(source, src, now)? {
        None => None,
        Some(z) => {
            let items = select_ref(z, &req.range, req.reverse, req.offset, req.limit);
            let count = items.len();
            let mut stored = ZSetValue::sized_for(count, 0, limits);
            stored.extend(items.iter().map(|(m, s)| (m.as_slice(), *s)), limits);
            Some((stored, count))
        }
    };
    let target = locked.shard(dst);
    let Some((z, count)) = stored.filter(|(_, count)| *count > 0) else {
        let deleted = target.remove(dst, now).is_some();
        drop(locked);
        if deleted {
            ctx.notify(crate::notify::GENERIC, "del", dst);
        }
        return Ok(Frame::Integer(0));
    };
    target.set(dst, Value::zset(z), None, now);
    drop(locked);
    ctx.notify(crate::notify::ZSET, "zrangestore", dst);
    Ok(Frame::Integer(count as i64))
}

fn zcount(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (min, max) = score_range(&args[2], &args[3])?;
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let zset = lookup_zset(ctx, &mut shard, key)?;
    Ok(Frame::Integer(
        zset.map_or(0, |z| z.range_by_score(min, max).count()) as i64,
    ))
}

fn zlexcount(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (min, max) = lex_range(&args[2], &args[3])?;
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let zset = lookup_zset(ctx, &mut shard, key)?;
    let range = Range::Lex { min, max };
    Ok(Frame::Integer(
        zset.map_or(0, |z| select_ref(z, &range, false, 0, -1).len()) as i64,
    ))
}

/// Remove the members `range` selects from the set at `args[1]`.
fn zremrange_generic(ctx: &mut Ctx<'_>, args: &[Bytes], range: Range) -> CmdResult {
    let key = &args[1];
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let doomed: Vec<Bytes> = match read_zset(&mut shard, key, now)? {
        None => return Ok(Frame::Integer(0)),
        Some(z) => select_ref(z, &range, false, 0, -1)
            .into_iter()
            .map(|(m, _)| m.to_bytes())
            .collect(),
    };
    Ok(Frame::Integer(remove_members(
        &mut shard, key, now, &doomed,
    )))
}

fn zremrangebyscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (min, max) = score_range(&args[2], &args[3])?;
    zremrange_generic(ctx, args, Range::Score { min, max })
}

fn zremrangebyrank(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let start = int_arg(&args[2])?;
    let stop = int_arg(&args[3])?;
    zremrange_generic(ctx, args, Range::Rank { start, stop })
}

fn zremrangebylex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (min, max) = lex_range(&args[2], &args[3])?;
    zremrange_generic(ctx, args, Range::Lex { min, max })
}

// ---------------------------------------------------------------------------------------------
// Pops, random members, scans

/// ZPOPMIN/ZPOPMAX key [count].
fn zpop_generic(ctx: &mut Ctx<'_>, args: &[Bytes], max: bool) -> CmdResult {
    if args.len() > 3 {
        return Err(CmdError::Syntax);
    }
    let count = match args.get(2) {
        None => None,
        // Redis' getPositiveLongFromObjectOrReply uses one message for both failures.
        Some(a) => match crate::args::parse_i64(a) {
            Some(n) if n >= 0 => Some(n),
            _ => return Err(CmdError::err("value is out of range, must be positive")),
        },
    };
    // RESP3 nests [member, score] pairs only when a count was given.
    let resp = match (ctx.client.resp, count) {
        (ProtocolVersion::Resp3, Some(_)) => ProtocolVersion::Resp3,
        _ => ProtocolVersion::Resp2,
    };
    let key = &args[1];
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let wanted = usize::try_from(count.unwrap_or(1)).unwrap_or(usize::MAX);
    let popped: Scored = match read_zset(&mut shard, key, now)? {
        None => return Ok(Frame::Array(Vec::new())),
        Some(z) => {
            let owned = |(m, s): (ZMember<'_>, f64)| (m.to_bytes(), s);
            if max {
                z.iter().rev().take(wanted).map(owned).collect()
            } else {
                z.iter().take(wanted).map(owned).collect()
            }
        }
    };
    if !popped.is_empty() {
        let members: Vec<Bytes> = popped.iter().map(|(m, _)| m.clone()).collect();
        remove_members(&mut shard, key, now, &members);
        let emptied = !shard.contains_live(key, now);
        drop(shard);
        ctx.notify(
            crate::notify::ZSET,
            if max { "zpopmax" } else { "zpopmin" },
            key,
        );
        if emptied {
            ctx.notify(crate::notify::GENERIC, "del", key);
        }
    }
    Ok(scored_reply(popped, true, resp))
}

fn zpopmin(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zpop_generic(ctx, args, false)
}

fn zpopmax(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zpop_generic(ctx, args, true)
}

fn zrandmember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let counted = if args.len() >= 3 {
        Some(parse_random_count(args, "withscores")?)
    } else {
        None
    };
    let resp = ctx.client.resp;
    let mut shard = ctx.db().lock(key);
    let zset = lookup_zset(ctx, &mut shard, key)?;
    let Some((count, with_scores)) = counted else {
        let Some(z) = zset else {
            return Ok(Frame::Null);
        };
        let index = rand::thread_rng().gen_range(0..z.len().max(1));
        return Ok(z
            .members()
            .map(|(m, _)| m)
            .nth(index)
            .map_or(Frame::Null, |m| Frame::Bulk(m.to_bytes())));
    };
    let Some(z) = zset else {
        return Ok(Frame::Array(Vec::new()));
    };
    let picks = random_picks(z.members(), z.len(), count);
    let items = picks.into_iter().map(|(m, s)| (m.to_bytes(), s)).collect();
    Ok(scored_reply(items, with_scores, resp))
}

fn zscan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let cursor = parse_scan_cursor(&args[2])?;
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let Some(z) = lookup_zset(ctx, &mut shard, key)? else {
        return Ok(scan_reply(0, Vec::new()));
    };
    let options = parse_scan_options(&args[3..], false)?;
    // A listpack-encoded set is returned whole, whatever the cursor, like Redis does.
    let (page, next): (ScoredRef<'_>, u64) = if z.is_packed() {
        (z.members().collect(), 0)
    } else {
        let hasher = gradus_store::FieldHasher::default();
        let items = z
            .members()
            .map(|(m, s)| (scan_position(&hasher, m.as_slice()), (m, s)));
        let (page, next) = scan_step(items, cursor, options.count);
        (page, next.unwrap_or(0))
    };
    let mut elements = Vec::with_capacity(page.len() * 2);
    for (member, score) in page {
        if options.pattern.is_some_and(|p| !glob_match(p, &member)) {
            continue;
        }
        elements.push(Frame::Bulk(member.to_bytes()));
        // ZSCAN scores are plain bulk strings in both protocols.
        elements.push(Frame::Bulk(Bytes::from(format_double(score))));
    }
    Ok(scan_reply(next, elements))
}

// ---------------------------------------------------------------------------------------------
// ZUNION / ZINTER / ZDIFF, their *STORE forms and ZINTERCARD

/// Which set operation a command does.
#[derive(Debug, Clone, Copy, PartialEq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

/// How the scores of a member found in several inputs combine.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    /// Redis' `zunionInterAggregate`: a sum of opposite infinities is 0.
    fn fold(self, target: &mut f64, value: f64) {
        match self {
            Aggregate::Sum => {
                *target += value;
                if target.is_nan() {
                    *target = 0.0;
                }
            }
            Aggregate::Min => {
                if value < *target {
                    *target = value;
                }
            }
            Aggregate::Max => {
                if value > *target {
                    *target = value;
                }
            }
        }
    }
}

/// One input of a set operation, read under the keys' locks: its members with their scores
/// (a plain set's members score 1), or None when the key is absent.
struct SetOpSource {
    key: Bytes,
    members: Option<Vec<(Bytes, f64)>>,
    weight: f64,
}

impl SetOpSource {
    fn len(&self) -> usize {
        self.members.as_ref().map_or(0, Vec::len)
    }
}

/// `numkeys key… [options]` from `args[at]` on, in Redis' `zunionInterDiffGenericCommand` order:
/// numkeys first, then the keys' types (see [`read_sources`]), then the options. This part
/// checks numkeys and returns the keys and where the options start.
fn setop_keys(args: &[Bytes], at: usize) -> Result<(&[Bytes], usize), CmdError> {
    let numkeys = int_arg(&args[at])?;
    if numkeys < 1 {
        return Err(CmdError::err(format!(
            "at least 1 input key is needed for '{}' command",
            String::from_utf8_lossy(&args[0]).to_lowercase()
        )));
    }
    let available = (args.len() - at - 1) as u64;
    if numkeys as u64 > available {
        return Err(CmdError::Syntax);
    }
    let end = at + 1 + numkeys as usize;
    Ok((&args[at + 1..end], end))
}

/// The options after the keys: WEIGHTS and AGGREGATE (not for ZDIFF nor ZINTERCARD),
/// WITHSCORES (replying forms only), LIMIT (ZINTERCARD only).
fn setop_options(
    args: &[Bytes],
    from: usize,
    numkeys: usize,
    op: SetOp,
    store: bool,
    card: bool,
) -> Result<(Vec<f64>, Aggregate, bool, usize), CmdError> {
    let mut weights = vec![1.0; numkeys];
    let (mut aggregate, mut with_scores, mut limit) = (Aggregate::Sum, false, 0usize);
    let mut j = from;
    while j < args.len() {
        let remaining = args.len() - j;
        let arg = &args[j];
        let weighs = op != SetOp::Diff && !card;
        if weighs && remaining > numkeys && is(arg, "weights") {
            for (i, w) in weights.iter_mut().enumerate() {
                *w = score_arg(&args[j + 1 + i])
                    .map_err(|_| CmdError::err("weight value is not a float"))?;
            }
            j += 1 + numkeys;
        } else if weighs && remaining >= 2 && is(arg, "aggregate") {
            let how = &args[j + 1];
            aggregate = if is(how, "sum") {
                Aggregate::Sum
            } else if is(how, "min") {
                Aggregate::Min
            } else if is(how, "max") {
                Aggregate::Max
            } else {
                return Err(CmdError::Syntax);
            };
            j += 2;
        } else if !store && !card && is(arg, "withscores") {
            with_scores = true;
            j += 1;
        } else if card && remaining >= 2 && is(arg, "limit") {
            limit = match parse_i64(&args[j + 1]) {
                Some(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX),
                _ => return Err(CmdError::err("LIMIT can't be negative")),
            };
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    Ok((weights, aggregate, with_scores, limit))
}

/// Read every input (sorted sets, or sets whose members score 1) in order; WRONGTYPE at the
/// first key of another type, as Redis' lookups stop there.
fn read_sources(
    ctx: &Ctx<'_>,
    locked: &mut MultiLock<'_>,
    keys: &[Bytes],
) -> Result<Vec<SetOpSource>, CmdError> {
    let now = ctx.now_ms;
    let mut sources = Vec::with_capacity(keys.len());
    for key in keys {
        let shard = locked.shard(key);
        let members = match shard.get(key, now) {
            None => {
                ctx.lookup(false);
                None
            }
            Some(entry) => {
                ctx.lookup(true);
                match &entry.value {
                    Value::ZSet(z) => Some(z.members().map(|(m, s)| (m.to_bytes(), s)).collect()),
                    Value::Set(s) => Some(s.iter().map(|m| (m.to_bytes(), 1.0)).collect()),
                    _ => return Err(CmdError::WrongType),
                }
            }
        };
        sources.push(SetOpSource {
            key: key.clone(),
            members,
            weight: 1.0,
        });
    }
    Ok(sources)
}

/// Redis' weighted score: NaN (0 × ±inf) counts as 0.
fn weighted(score: f64, weight: f64) -> f64 {
    let v = score * weight;
    if v.is_nan() {
        0.0
    } else {
        v
    }
}

/// Run `op` over `sources`, stopping an intersection at `limit` members (0: no limit); the
/// result is in no particular order.
fn run_setop(
    mut sources: Vec<SetOpSource>,
    op: SetOp,
    aggregate: Aggregate,
    limit: usize,
) -> Vec<(Bytes, f64)> {
    use std::collections::HashMap;
    if op != SetOp::Diff {
        // Smallest first, as Redis sorts its inputs by size.
        sources.sort_by_key(SetOpSource::len);
    }
    match op {
        SetOp::Union => {
            let mut scores: HashMap<Bytes, f64> = HashMap::new();
            let mut order: Vec<Bytes> = Vec::new();
            for src in &sources {
                for (m, s) in src.members.iter().flatten() {
                    let score = weighted(*s, src.weight);
                    match scores.get_mut(m) {
                        Some(total) => aggregate.fold(total, score),
                        None => {
                            scores.insert(m.clone(), score);
                            order.push(m.clone());
                        }
                    }
                }
            }
            order
                .into_iter()
                .map(|m| {
                    let s = scores[&m];
                    (m, s)
                })
                .collect()
        }
        SetOp::Inter => {
            if sources.first().is_none_or(|s| s.len() == 0) {
                return Vec::new();
            }
            let others: Vec<(HashMap<&Bytes, f64>, f64)> = sources[1..]
                .iter()
                .map(|src| {
                    let map = src.members.iter().flatten().map(|(m, s)| (m, *s)).collect();
                    (map, src.weight)
                })
                .collect();
            let mut out = Vec::new();
            for (m, s) in sources[0].members.iter().flatten() {
                let mut score = weighted(*s, sources[0].weight);
                let mut everywhere = true;
                for (map, weight) in &others {
                    match map.get(m) {
                        Some(v) => aggregate.fold(&mut score, *v * weight),
                        None => {
                            everywhere = false;
                            break;
                        }
                    }
                }
                if everywhere {
                    out.push((m.clone(), score));
                    if limit > 0 && out.len() >= limit {
                        break;
                    }
                }
            }
            out
        }
        SetOp::Diff => {
            let first = &sources[0];
            if first.len() == 0 || sources[1..].iter().any(|s| s.key == first.key) {
                return Vec::new();
            }
            let others: Vec<std::collections::HashSet<&Bytes>> = sources[1..]
                .iter()
                .map(|src| src.members.iter().flatten().map(|(m, _)| m).collect())
                .collect();
            first
                .members
                .iter()
                .flatten()
                .filter(|(m, _)| !others.iter().any(|o| o.contains(m)))
                .cloned()
                .collect()
        }
    }
}

/// A result in sorted-set order: by score, then member.
fn sorted(mut items: Vec<(Bytes, f64)>) -> Vec<(Bytes, f64)> {
    items.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    items
}

/// A set operation's error, with the keys it had found absent: an option error comes after
/// Redis has looked every key up, so those lookups still publish `keymiss` (see [`failed`]).
type SetOpError = (CmdError, Vec<Bytes>);

/// Parse and run a set operation whose `numkeys` is at `args[at]`, with the inputs read under
/// `locked` (which holds every key of the command).
fn setop_result(
    ctx: &Ctx<'_>,
    locked: &mut MultiLock<'_>,
    args: &[Bytes],
    at: usize,
    op: SetOp,
    store: bool,
    card: bool,
) -> Result<(Vec<(Bytes, f64)>, bool), SetOpError> {
    let (keys, options_at) = setop_keys(args, at).map_err(|e| (e, Vec::new()))?;
    let mut sources = read_sources(ctx, locked, keys).map_err(|e| (e, Vec::new()))?;
    let (weights, aggregate, with_scores, limit) =
        match setop_options(args, options_at, keys.len(), op, store, card) {
            Ok(options) => options,
            Err(e) => {
                let missing = sources
                    .into_iter()
                    .filter(|s| s.members.is_none())
                    .map(|s| s.key)
                    .collect();
                return Err((e, missing));
            }
        };
    for (src, w) in sources.iter_mut().zip(weights) {
        src.weight = w;
    }
    Ok((run_setop(sources, op, aggregate, limit), with_scores))
}

/// The error of a set operation, after publishing the `keymiss` events of its lookups (the
/// command's own events are published only for a reply that is not an error).
fn failed(ctx: &mut Ctx<'_>, (err, missing): SetOpError) -> CmdError {
    // A *STORE's pending misses (its row's `reads`) are these same lookups: published here
    // once, in order, rather than by the first event.
    ctx.client.pending_misses.clear();
    for key in &missing {
        ctx.notify(crate::notify::KEY_MISS, "keymiss", key);
    }
    err
}

/// The keys a set operation names, for locking: `args[at]` is numkeys (checked by
/// [`setop_keys`] before anything is locked).
fn setop_lock_keys(args: &[Bytes], at: usize) -> Result<Vec<Bytes>, CmdError> {
    Ok(setop_keys(args, at)?.0.to_vec())
}

/// ZUNION/ZINTER/ZDIFF numkeys key… [WEIGHTS …] [AGGREGATE …] [WITHSCORES].
fn zsetop_reply(ctx: &mut Ctx<'_>, args: &[Bytes], op: SetOp) -> CmdResult {
    let keys = setop_lock_keys(args, 1)?;
    let resp = ctx.client.resp;
    let db = ctx.db();
    let mut locked = db.lock_keys(keys.iter().map(|k| &k[..]));
    let result = setop_result(ctx, &mut locked, args, 1, op, false, false);
    drop(locked);
    let (items, with_scores) = result.map_err(|e| failed(ctx, e))?;
    Ok(scored_reply(sorted(items), with_scores, resp))
}

/// ZUNIONSTORE/ZINTERSTORE/ZDIFFSTORE dst numkeys key… [WEIGHTS …] [AGGREGATE …]: the result
/// replaces `dst` (TTL included), or deletes it when empty.
fn zsetop_store(ctx: &mut Ctx<'_>, args: &[Bytes], op: SetOp, event: &str) -> CmdResult {
    let mut keys = setop_lock_keys(args, 2)?;
    keys.push(args[1].clone());
    let dst = &args[1];
    let now = ctx.now_ms;
    let limits = zset_limits(ctx);
    let db = ctx.db();
    let mut locked = db.lock_keys(keys.iter().map(|k| &k[..]));
    let items = match setop_result(ctx, &mut locked, args, 2, op, true, false) {
        Ok((items, _)) => sorted(items),
        Err(e) => {
            drop(locked);
            return Err(failed(ctx, e));
        }
    };
    let target = locked.shard(dst);
    if items.is_empty() {
        let deleted = target.remove(dst, now).is_some();
        drop(locked);
        if deleted {
            ctx.notify(crate::notify::GENERIC, "del", dst);
        }
        return Ok(Frame::Integer(0));
    }
    let count = items.len();
    let longest = items.iter().map(|(m, _)| m.len()).max().unwrap_or(0);
    let mut z = ZSetValue::sized_for(count, longest, limits);
    z.extend(items.iter().map(|(m, s)| (&m[..], *s)), limits);
    target.set(dst, Value::zset(z), None, now);
    drop(locked);
    ctx.notify(crate::notify::ZSET, event, dst);
    Ok(Frame::Integer(count as i64))
}

fn zunion(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zsetop_reply(ctx, args, SetOp::Union)
}

fn zinter(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zsetop_reply(ctx, args, SetOp::Inter)
}

fn zdiff(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zsetop_reply(ctx, args, SetOp::Diff)
}

fn zunionstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zsetop_store(ctx, args, SetOp::Union, "zunionstore")
}

fn zinterstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zsetop_store(ctx, args, SetOp::Inter, "zinterstore")
}

fn zdiffstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    zsetop_store(ctx, args, SetOp::Diff, "zdiffstore")
}

/// ZINTERCARD numkeys key… [LIMIT limit].
fn zintercard(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let keys = setop_lock_keys(args, 1)?;
    let db = ctx.db();
    let mut locked = db.lock_keys(keys.iter().map(|k| &k[..]));
    let result = setop_result(ctx, &mut locked, args, 1, SetOp::Inter, false, true);
    drop(locked);
    let (items, _) = result.map_err(|e| failed(ctx, e))?;
    Ok(Frame::Integer(items.len() as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::from(s.to_owned())
    }

    fn args(v: &[&str]) -> Vec<Bytes> {
        v.iter().map(|s| b(s)).collect()
    }

    fn sample() -> ZSetValue {
        let mut z = ZSetValue::new();
        for (m, s) in [("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0)] {
            z.insert(m.as_bytes(), s, ZSetLimits::REDIS_DEFAULT);
        }
        z
    }

    fn members(items: Scored) -> Vec<String> {
        items
            .into_iter()
            .map(|(m, _)| String::from_utf8_lossy(&m).into_owned())
            .collect()
    }

    #[test]
    fn score_arguments_follow_string2d() {
        assert_eq!(score_arg(b"1.5"), Ok(1.5));
        assert_eq!(score_arg(b"-inf"), Ok(f64::NEG_INFINITY));
        assert_eq!(score_arg(b"+Inf"), Ok(f64::INFINITY));
        assert_eq!(score_arg(b"0e5"), Ok(0.0));
        assert_eq!(score_arg(b"1e400"), Err(CmdError::NotFloat));
        assert_eq!(score_arg(b"1e-400"), Err(CmdError::NotFloat));
        assert_eq!(score_arg(b"nan"), Err(CmdError::NotFloat));
    }

    #[test]
    fn add_outcomes() {
        let f = AddFlags::default();
        assert_eq!(add_outcome(None, 1.0, f), Ok(AddOutcome::Added(1.0)));
        assert_eq!(add_outcome(Some(1.0), 1.0, f), Ok(AddOutcome::Same(1.0)));
        assert_eq!(add_outcome(Some(-0.0), 0.0, f), Ok(AddOutcome::Same(0.0)));
        let gt = AddFlags { gt: true, ..f };
        assert_eq!(add_outcome(Some(2.0), 1.0, gt), Ok(AddOutcome::Nop));
        assert_eq!(add_outcome(None, 1.0, gt), Ok(AddOutcome::Added(1.0)));
        let incr = AddFlags { incr: true, ..f };
        assert_eq!(
            add_outcome(Some(2.0), 1.0, incr),
            Ok(AddOutcome::Updated(3.0))
        );
        assert!(add_outcome(Some(f64::INFINITY), f64::NEG_INFINITY, incr).is_err());
        let xx = AddFlags { xx: true, ..f };
        assert_eq!(add_outcome(None, 1.0, xx), Ok(AddOutcome::Nop));
    }

    #[test]
    fn rank_ranges() {
        let z = sample();
        let rank = |start, stop, rev| members(select(&z, &Range::Rank { start, stop }, rev, 0, -1));
        assert_eq!(rank(0, -1, false), ["a", "b", "c", "d"]);
        assert_eq!(rank(-2, -1, false), ["c", "d"]);
        assert_eq!(rank(0, 0, true), ["d"]);
        assert_eq!(rank(2, 100, false), ["c", "d"]);
        assert!(rank(3, 1, false).is_empty());
        assert!(rank(i64::MIN, i64::MIN, false).is_empty());
        assert_eq!(rank(-100, 0, false), ["a"]);
    }

    #[test]
    fn score_and_lex_ranges_with_limit() {
        let z = sample();
        let (min, max) = score_range(b"(1", b"+inf").unwrap();
        let range = Range::Score { min, max };
        assert_eq!(members(select(&z, &range, false, 0, -1)), ["b", "c", "d"]);
        assert_eq!(members(select(&z, &range, true, 1, 1)), ["c"]);
        assert!(select(&z, &range, false, -1, 5).is_empty());
        let (min, max) = lex_range(&b("[b"), &b("(d")).unwrap();
        let range = Range::Lex { min, max };
        assert_eq!(members(select(&z, &range, false, 0, -1)), ["b", "c"]);
        assert_eq!(members(select(&z, &range, true, 0, -1)), ["c", "b"]);
        assert!(lex_range(&b("b"), &b("+")).is_err());
        assert!(lex_range(&b("-x"), &b("+")).is_err());
    }

    #[test]
    fn range_requests_parse_like_redis() {
        let req = parse_range_request(
            &args(&[
                "zrange",
                "k",
                "5",
                "1",
                "BYSCORE",
                "REV",
                "LIMIT",
                "0",
                "2",
                "WITHSCORES",
            ]),
            1,
            false,
            None,
            None,
        )
        .unwrap();
        assert!(req.reverse && req.with_scores && req.limit == 2);
        match req.range {
            Range::Score { min, max } => assert!(min.value == 1.0 && max.value == 5.0),
            other => panic!("{other:?}"),
        }
        let limit_on_rank = parse_range_request(
            &args(&["zrange", "k", "0", "1", "LIMIT", "0", "1"]),
            1,
            false,
            None,
            None,
        );
        assert!(matches!(limit_on_rank, Err(CmdError::Other(m)) if m.contains("LIMIT is only")));
        let rev_twice = parse_range_request(
            &args(&["zrevrange", "k", "0", "1", "REV"]),
            1,
            false,
            Some(RangeBy::Rank),
            Some(true),
        );
        assert_eq!(rev_twice, Err(CmdError::Syntax));
        let store_with_scores = parse_range_request(
            &args(&["zrangestore", "d", "k", "0", "1", "WITHSCORES"]),
            2,
            true,
            None,
            None,
        );
        assert_eq!(store_with_scores, Err(CmdError::Syntax));
    }
}
