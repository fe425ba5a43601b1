//! Stream commands: XADD XTRIM XDEL XLEN XRANGE XREVRANGE XREAD XREADGROUP XSETID XACK XPENDING
//! XCLAIM XAUTOCLAIM, the XGROUP and XINFO containers — Redis 7.2's replies and error texts.
//!
//! The stream itself (nodes, tombstones, groups, lag) is `gradus_store::stream`; this module
//! parses arguments, builds replies and decides what is logged. Writes whose outcome depends on
//! the clock or on the node layout are flagged `SELF_LOGGED` and log what they did, as Redis
//! propagates them: XADD with the ID it chose (and an approximate trim as the exact trim it
//! amounted to), XTRIM `~` likewise, XREADGROUP / XCLAIM / XAUTOCLAIM as `XCLAIM … FORCE JUSTID
//! LASTID` per entry delivered or claimed plus `XGROUP SETID … ENTRIESREAD` and `XGROUP
//! CREATECONSUMER`, so a replay (or a replica) rebuilds the same pending entries lists.
//! XREAD and XREADGROUP with BLOCK wait through `crate::blocking` like the blocking pops.
//!
//! May import: the store's streams, `args`, `command::blocking` (to block), `crate::blocking`.

use super::{cmd, flags, sub, CommandSpec, Ctx, KEY1};
use crate::args::{is, parse_i64};
use crate::error::{CmdError, CmdResult};
use bytes::Bytes;
use gradus_proto::{Frame, ProtocolVersion};
use gradus_store::stream::{
    AddError, Group, NewId, NodeLimits, StreamId, StreamValue, Trim, ENTRIES_READ_UNKNOWN,
};
use gradus_store::{Shard, Value};
use std::sync::atomic::Ordering;

const W: u32 = flags::WRITE;
const R: u32 = flags::READONLY;
const F: u32 = flags::FAST;
const D: u32 = flags::DENYOOM;
const SELF: u32 = flags::SELF_LOGGED;
const KEY2: (i32, i32, i32) = (2, 2, 1);

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("xadd", -5, W | D | F | SELF, KEY1, "stream", "Appends a new message to a stream. Creates the key if it doesn't exist.", xadd).key_flags(&["RW insert"]),
    cmd("xtrim", -4, W | SELF, KEY1, "stream", "Deletes messages from the beginning of a stream.", xtrim).key_flags(&["RW delete"]),
    cmd("xdel", -3, W | F, KEY1, "stream", "Returns the number of messages after removing them from a stream.", xdel).key_flags(&["RW delete"]),
    cmd("xlen", 2, R | F, KEY1, "stream", "Return the number of messages in a stream.", xlen).key_flags(&["RO"]),
    cmd("xrange", -4, R, KEY1, "stream", "Returns the messages from a stream within a range of IDs.", xrange).key_flags(&["RO access"]),
    cmd("xrevrange", -4, R, KEY1, "stream", "Returns the messages from a stream within a range of IDs in reverse order.", xrevrange).key_flags(&["RO access"]),
    cmd("xread", -4, R | flags::BLOCKING, (0, 0, 0), "stream", "Returns messages from multiple streams with IDs greater than the ones requested. Blocks until a message is available otherwise.", xread).keys_by(read_keys).key_flags(&["RO access"]),
    cmd("xreadgroup", -7, W | flags::BLOCKING | SELF, (0, 0, 0), "stream", "Returns new or historical messages from a stream for a consumer in a group. Blocks until a message is available otherwise.", xreadgroup).keys_by(read_keys).key_flags(&["RW access"]),
    cmd("xsetid", -3, W | D | F, KEY1, "stream", "An internal command for replicating stream values.", xsetid).key_flags(&["RW insert"]),
    cmd("xack", -4, W | F, KEY1, "stream", "Returns the number of messages that were successfully acknowledged by the consumer group member of a stream.", xack).key_flags(&["RW update"]),
    cmd("xpending", -3, R, KEY1, "stream", "Returns the information and entries from a stream consumer group's pending entries list.", xpending).key_flags(&["RO access"]),
    cmd("xclaim", -6, W | F | SELF, KEY1, "stream", "Changes, or acquires, ownership of a message in a consumer group, as if the message was delivered a consumer group member.", xclaim).key_flags(&["RW update"]),
    cmd("xautoclaim", -6, W | F | SELF, KEY1, "stream", "Changes, or acquires, ownership of messages in a consumer group, as if the messages were delivered to as consumer group member.", xautoclaim).key_flags(&["RW update"]),
    cmd("xgroup", -2, 0, (0, 0, 0), "stream", "A container for consumer groups commands.", xgroup).with_subcommands(&[
        cmd("xgroup|create", -5, W | D, (0, 0, 0), "", "Creates a consumer group.", xgroup).with_keys(KEY2).key_flags(&["RW insert"]),
        cmd("xgroup|setid", -5, W, (0, 0, 0), "", "Sets the last-delivered ID of a consumer group.", xgroup).with_keys(KEY2).key_flags(&["RW update"]),
        cmd("xgroup|destroy", 4, W, (0, 0, 0), "", "Destroys a consumer group.", xgroup).with_keys(KEY2).key_flags(&["RW delete"]),
        cmd("xgroup|createconsumer", 5, W | D, (0, 0, 0), "", "Creates a consumer in a consumer group.", xgroup).with_keys(KEY2).key_flags(&["RW insert"]),
        cmd("xgroup|delconsumer", 5, W, (0, 0, 0), "", "Deletes a consumer from a consumer group.", xgroup).with_keys(KEY2).key_flags(&["RW delete"]),
        sub("xgroup|help", 2, flags::LOADING, "Returns helpful text about the different subcommands."),
    ]),
    cmd("xinfo", -2, 0, (0, 0, 0), "stream", "A container for stream introspection commands.", xinfo).with_subcommands(&[
        cmd("xinfo|stream", -3, R, (0, 0, 0), "", "Returns information about a stream.", xinfo).with_keys(KEY2).key_flags(&["RO access"]),
        cmd("xinfo|groups", 3, R, (0, 0, 0), "", "Returns a list of the consumer groups of a stream.", xinfo).with_keys(KEY2).key_flags(&["RO access"]),
        cmd("xinfo|consumers", 4, R, (0, 0, 0), "", "Returns a list of the consumers in a consumer group.", xinfo).with_keys(KEY2).key_flags(&["RO access"]),
        sub("xinfo|help", 2, flags::LOADING, "Returns helpful text about the different subcommands."),
    ]),
];

const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

fn invalid_id() -> CmdError {
    CmdError::Other(INVALID_ID.into())
}

/// C's `strtoull` on a whole string (leading blanks, a sign — a minus negates, wrapping —,
/// decimal digits to the end, no overflow), as Redis' `string2ull` falls back to it.
fn strtoull(s: &[u8]) -> Option<u64> {
    let mut i = 0;
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r') {
        i += 1;
    }
    let negative = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let digits = &s[i..];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for d in digits {
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(if negative { v.wrapping_neg() } else { v })
}

/// Redis' `string2ull`: a canonical integer (negative refused), else `strtoull`'s reading.
fn string2ull(s: &[u8]) -> Option<u64> {
    match gradus_proto::parse_strict_i64(s) {
        Some(v) if v < 0 => None,
        Some(v) => Some(v as u64),
        None => strtoull(s),
    }
}

/// How an ID argument is read.
#[derive(Clone, Copy)]
struct IdRule {
    /// The sequence when only milliseconds are given.
    missing_seq: u64,
    /// `-` and `+` are refused (XADD, XDEL …).
    strict: bool,
}

/// Redis' `streamGenericParseIDOrReply`; `Ok(None)` for XADD's `ms-*` (when `seq_star`).
fn parse_id_with(arg: &[u8], rule: IdRule, seq_star: bool) -> Result<(StreamId, bool), CmdError> {
    if arg.len() > 127 {
        return Err(invalid_id());
    }
    // The C string ends at the first NUL.
    let arg = arg.split(|&b| b == 0).next().unwrap_or_default();
    if arg == b"-" || arg == b"+" {
        if rule.strict {
            return Err(invalid_id());
        }
        return Ok((
            if arg == b"-" {
                StreamId::ZERO
            } else {
                StreamId::MAX
            },
            true,
        ));
    }
    let (ms, seq) = match arg.iter().position(|&b| b == b'-') {
        Some(dash) => (&arg[..dash], Some(&arg[dash + 1..])),
        None => (arg, None),
    };
    let ms = string2ull(ms).ok_or_else(invalid_id)?;
    match seq {
        Some(b"*") if seq_star => Ok((StreamId::new(ms, 0), false)),
        Some(seq) => Ok((
            StreamId::new(ms, string2ull(seq).ok_or_else(invalid_id)?),
            true,
        )),
        None => Ok((StreamId::new(ms, rule.missing_seq), true)),
    }
}

fn parse_id(arg: &[u8], missing_seq: u64) -> Result<StreamId, CmdError> {
    let rule = IdRule {
        missing_seq,
        strict: false,
    };
    Ok(parse_id_with(arg, rule, false)?.0)
}

fn parse_strict_id(arg: &[u8]) -> Result<StreamId, CmdError> {
    let rule = IdRule {
        missing_seq: 0,
        strict: true,
    };
    Ok(parse_id_with(arg, rule, false)?.0)
}

/// A range end: `(` excludes it (then it must be a strict ID). `start`: the low end.
fn parse_interval(arg: &[u8], start: bool) -> Result<StreamId, CmdError> {
    let missing_seq = if start { 0 } else { u64::MAX };
    if arg.len() > 1 && arg[0] == b'(' {
        let rule = IdRule {
            missing_seq,
            strict: true,
        };
        let (id, _) = parse_id_with(&arg[1..], rule, false)?;
        return if start {
            id.incr()
                .ok_or_else(|| CmdError::err("invalid start ID for the interval"))
        } else {
            id.decr()
                .ok_or_else(|| CmdError::err("invalid end ID for the interval"))
        };
    }
    parse_id(arg, missing_seq)
}

fn int_arg(arg: &[u8]) -> Result<i64, CmdError> {
    parse_i64(arg).ok_or(CmdError::NotInteger)
}

fn int_arg_or(arg: &[u8], text: &str) -> Result<i64, CmdError> {
    parse_i64(arg).ok_or_else(|| CmdError::err(text))
}

fn id_frame(id: StreamId) -> Frame {
    Frame::Bulk(id.to_bytes())
}

fn word(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

fn num(n: impl ToString) -> Bytes {
    Bytes::from(n.to_string())
}

/// `[id, [field, value, …]]` of a live entry.
fn entry_frame(e: gradus_store::stream::EntryRef<'_>) -> Frame {
    // The fields and values written into one buffer (no allocation per string).
    let pairs = e.fields();
    let bytes: usize = pairs.clone().map(|(f, v)| f.len() + v.len() + 32).sum();
    let mut fields = gradus_proto::BulkArray::with_capacity(0, bytes);
    for (f, v) in pairs {
        fields.push(f);
        fields.push(v);
    }
    Frame::Array(vec![id_frame(e.id), Frame::Bulks(fields)])
}

/// The stream at `key` for reading: Ok(None) when absent, WRONGTYPE for another type.
fn read_stream<'s>(
    ctx: &Ctx<'_>,
    shard: &'s mut Shard,
    key: &[u8],
) -> Result<Option<&'s StreamValue>, CmdError> {
    super::lookup_typed(ctx, shard, key, Value::as_stream)
}

/// Applies `f` to the stream at `key` (which the caller found to be one).
fn with_stream<T>(
    shard: &mut Shard,
    key: &[u8],
    now: u64,
    f: impl FnOnce(&mut StreamValue) -> T,
) -> Option<T> {
    shard.modify(key, now, |v| match v {
        Value::Stream(s) => Some(f(s)),
        _ => None,
    })?
}

/// The live `stream-node-max-*` settings.
fn node_limits(ctx: &Ctx<'_>) -> NodeLimits {
    let live = &ctx.shared.live;
    let as_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    NodeLimits {
        max_bytes: as_usize(live.stream_node_max_bytes.load(Ordering::Relaxed)),
        max_entries: as_usize(live.stream_node_max_entries.load(Ordering::Relaxed)),
    }
}

// ----- XADD / XTRIM

/// XADD's and XTRIM's options (Redis' `streamAddTrimArgs`).
struct AddTrim {
    id: NewId,
    no_mkstream: bool,
    trim: Option<Trim>,
    approx: bool,
    limit: u64,
    /// XADD: where the fields start.
    fields_at: usize,
}

fn parse_add_trim(ctx: &Ctx<'_>, args: &[Bytes], xadd: bool) -> Result<AddTrim, CmdError> {
    let mut out = AddTrim {
        id: NewId::Auto,
        no_mkstream: false,
        trim: None,
        approx: false,
        limit: 0,
        fields_at: args.len(),
    };
    let mut limit_given = false;
    let mut i = 2;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = &args[i][..];
        if xadd && opt == b"*" {
            break;
        } else if (is(opt, "maxlen") || is(opt, "minid")) && more > 0 {
            if out.trim.is_some() {
                return Err(CmdError::err(
                    "syntax error, MAXLEN and MINID options at the same time are not compatible",
                ));
            }
            out.approx = false;
            if more >= 2 && (args[i + 1][..] == *b"~" || args[i + 1][..] == *b"=") {
                out.approx = args[i + 1][..] == *b"~";
                i += 1;
            }
            let value = &args[i + 1];
            out.trim = Some(if is(opt, "maxlen") {
                let n = int_arg(value)?;
                if n < 0 {
                    return Err(CmdError::err("The MAXLEN argument must be >= 0."));
                }
                Trim::MaxLen(n as u64)
            } else {
                Trim::MinId(parse_strict_id(value)?)
            });
            i += 1;
        } else if is(opt, "limit") && more > 0 {
            let n = int_arg(&args[i + 1])?;
            if n < 0 {
                return Err(CmdError::err("The LIMIT argument must be >= 0."));
            }
            out.limit = n as u64;
            limit_given = true;
            i += 1;
        } else if xadd && is(opt, "nomkstream") {
            out.no_mkstream = true;
        } else if xadd {
            let rule = IdRule {
                missing_seq: 0,
                strict: true,
            };
            let (id, seq_given) = parse_id_with(opt, rule, true)?;
            out.id = if seq_given {
                NewId::Exact(id)
            } else {
                NewId::Ms(id.ms)
            };
            break;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    out.fields_at = i + 1;
    if out.limit != 0 && out.trim.is_none() {
        return Err(CmdError::err(
            "syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if !xadd && out.trim.is_none() {
        return Err(CmdError::err(
            "syntax error, XTRIM must be called with a trimming strategy",
        ));
    }
    // (A replay or a replica never sees `~`: what was logged is the exact trim it amounted to.)
    if limit_given {
        if !out.approx {
            return Err(CmdError::err(
                "syntax error, LIMIT cannot be used without the special ~ option",
            ));
        }
    } else if out.approx {
        let entries = ctx
            .shared
            .live
            .stream_node_max_entries
            .load(Ordering::Relaxed);
        out.limit = entries.saturating_mul(100);
        if out.limit == 0 {
            out.limit = 10_000;
        }
        out.limit = out.limit.min(1_000_000);
    } else {
        out.limit = 0;
    }
    Ok(out)
}

/// What a trim amounted to, as the exact trim logged for it (Redis' rewrite of `~`).
fn exact_trim(key: &Bytes, how: Trim, s: &StreamValue) -> Vec<Bytes> {
    let (word_, arg) = match how {
        Trim::MaxLen(_) => (word("MAXLEN"), num(s.len())),
        Trim::MinId(_) => (word("MINID"), s.first_with_tombstones().to_bytes()),
    };
    vec![word("XTRIM"), key.clone(), word_, word("="), arg]
}

fn xadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let parsed = parse_add_trim(ctx, args, true)?;
    let fields = args.get(parsed.fields_at..).unwrap_or_default();
    if fields.len() < 2 || !fields.len().is_multiple_of(2) {
        return Err(super::arity_error(b"xadd"));
    }
    if parsed.id == NewId::Exact(StreamId::ZERO) {
        return Err(CmdError::err(
            "The ID specified in XADD must be greater than 0-0",
        ));
    }
    let key = args[1].clone();
    let now = ctx.now_ms;
    let limits = node_limits(ctx);
    // Copied: an entry never pins the request's buffer.
    let owned: Vec<Bytes> = fields.iter().map(|f| Bytes::copy_from_slice(f)).collect();
    let mut shard = ctx.db().lock(&key);
    if parsed.no_mkstream && shard.get(&key, now).is_none() {
        return Ok(Frame::Null);
    }
    let outcome = shard.try_upsert(
        &key,
        now,
        || Value::Stream(StreamValue::new()),
        |value| match value {
            Value::Stream(s) => {
                let id = s.add(parsed.id, &owned, now, limits).map_err(|e| match e {
                    AddError::Exhausted => CmdError::err(
                        "The stream has exhausted the last possible ID, unable to add more items",
                    ),
                    AddError::NotAbove => CmdError::err(
                        "The ID specified in XADD is equal or smaller than the target stream top item",
                    ),
                    AddError::TooLarge => CmdError::err("Elements are too large to be stored"),
                })?;
                let trimmed = match parsed.trim {
                    Some(how) => s.trim(how, parsed.approx, parsed.limit),
                    None => 0,
                };
                let trim_effect = (trimmed > 0).then(|| exact_trim(&key, parsed.trim.expect("trimmed"), s));
                Ok((id, trimmed, trim_effect))
            }
            _ => Err(CmdError::WrongType),
        },
    );
    drop(shard);
    let (id, trimmed, trim_effect) = outcome?;
    let mut effect = vec![word("XADD"), key.clone(), id.to_bytes()];
    effect.extend(owned);
    ctx.log_effect(effect);
    ctx.notify(crate::notify::STREAM, "xadd", &key);
    if let Some(trim) = trim_effect {
        ctx.log_effect(trim);
    }
    if trimmed > 0 {
        ctx.notify(crate::notify::STREAM, "xtrim", &key);
    }
    Ok(id_frame(id))
}

fn xtrim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let parsed = parse_add_trim(ctx, args, false)?;
    let how = parsed.trim.expect("XTRIM has a strategy");
    let key = args[1].clone();
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(&key);
    if read_stream(ctx, &mut shard, &key)?.is_none() {
        return Ok(Frame::Integer(0));
    }
    // Trimming nothing is no write (no new version: a WATCH of the key holds).
    let trims = shard
        .get(&key, now)
        .and_then(|e| e.value.as_stream())
        .is_some_and(|s| s.trim_would_remove(how, parsed.approx, parsed.limit));
    if !trims {
        return Ok(Frame::Integer(0));
    }
    let (deleted, effect) = with_stream(&mut shard, &key, now, |s| {
        let n = s.trim(how, parsed.approx, parsed.limit);
        (n, exact_trim(&key, how, s))
    })
    .unwrap_or((0, Vec::new()));
    drop(shard);
    if deleted > 0 {
        ctx.log_effect(effect);
        ctx.notify(crate::notify::STREAM, "xtrim", &key);
    }
    Ok(Frame::Integer(deleted as i64))
}

fn xdel(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let Some(s) = read_stream(ctx, &mut shard, key)? else {
        return Ok(Frame::Integer(0));
    };
    let ids = args[2..]
        .iter()
        .map(|a| parse_strict_id(a))
        .collect::<Result<Vec<_>, _>>()?;
    if !ids.iter().any(|id| s.get(*id).is_some()) {
        return Ok(Frame::Integer(0));
    }
    let deleted = with_stream(&mut shard, key, now, |s| {
        let mut deleted = 0;
        let mut first = false;
        for id in &ids {
            if s.delete(*id) {
                first |= *id == s.first_id();
                deleted += 1;
            }
        }
        s.after_deletions(first);
        deleted
    })
    .unwrap_or(0);
    drop(shard);
    if deleted > 0 {
        ctx.notify(crate::notify::STREAM, "xdel", key);
    }
    Ok(Frame::Integer(deleted))
}

fn xlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let mut shard = ctx.db().lock(&args[1]);
    let s = read_stream(ctx, &mut shard, &args[1])?;
    Ok(Frame::Integer(s.map_or(0, |s| s.len() as i64)))
}

fn range_generic(ctx: &mut Ctx<'_>, args: &[Bytes], rev: bool) -> CmdResult {
    let (start_arg, end_arg) = if rev {
        (&args[3], &args[2])
    } else {
        (&args[2], &args[3])
    };
    let start = parse_interval(start_arg, true)?;
    let end = parse_interval(end_arg, false)?;
    let mut count: i64 = -1;
    let mut j = 4;
    while j < args.len() {
        if is(&args[j], "count") && j + 1 < args.len() {
            count = int_arg(&args[j + 1])?.max(0);
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let Some(s) = read_stream(ctx, &mut shard, key)? else {
        return Ok(Frame::Array(Vec::new()));
    };
    if count == 0 {
        return Ok(Frame::NullArray);
    }
    let limit = if count < 0 {
        usize::MAX
    } else {
        count as usize
    };
    Ok(Frame::Array(
        s.range(start, end, rev)
            .take(limit)
            .map(entry_frame)
            .collect(),
    ))
}

fn xrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    range_generic(ctx, args, false)
}

fn xrevrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    range_generic(ctx, args, true)
}

// ----- XREAD / XREADGROUP

/// The keys of XREAD / XREADGROUP: the first half of what follows STREAMS.
fn read_keys(args: &[Bytes]) -> Vec<usize> {
    let Some(at) = (1..args.len()).find(|&i| is(&args[i], "streams")) else {
        return Vec::new();
    };
    let rest = args.len() - at - 1;
    (at + 1..at + 1 + rest / 2).collect()
}

/// XREAD / XREADGROUP's options.
struct ReadArgs {
    block: Option<u64>,
    count: u64,
    group: Option<(Bytes, Bytes)>,
    noack: bool,
    keys: Vec<Bytes>,
    ids: Vec<Bytes>,
}

fn parse_read(ctx: &Ctx<'_>, args: &[Bytes], group_cmd: bool) -> Result<ReadArgs, CmdError> {
    let name = if group_cmd { "XREADGROUP" } else { "XREAD" };
    let mut out = ReadArgs {
        block: None,
        count: 0,
        group: None,
        noack: false,
        keys: Vec::new(),
        ids: Vec::new(),
    };
    let mut streams_at = None;
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        let o = &args[i];
        if is(o, "block") && more > 0 {
            if ctx.client.in_script {
                return Err(CmdError::err(format!(
                    "{} command is not allowed with BLOCK option from scripts",
                    String::from_utf8_lossy(&args[0])
                )));
            }
            i += 1;
            let ms = parse_i64(&args[i])
                .ok_or_else(|| CmdError::err("timeout is not an integer or out of range"))?;
            if ms < 0 {
                return Err(CmdError::err("timeout is negative"));
            }
            if ms > 0 && ms as u64 > (i64::MAX as u64).saturating_sub(gradus_store::now_ms()) {
                return Err(CmdError::err("timeout is out of range"));
            }
            out.block = Some(ms as u64);
        } else if is(o, "count") && more > 0 {
            i += 1;
            out.count = int_arg(&args[i])?.max(0) as u64;
        } else if is(o, "streams") && more > 0 {
            let n = args.len() - i - 1;
            if !n.is_multiple_of(2) {
                let symbol = if group_cmd { '>' } else { '$' };
                return Err(CmdError::err(format!(
                    "Unbalanced '{}' list of streams: for each stream key an ID or '{symbol}' must be specified.",
                    name.to_lowercase()
                )));
            }
            streams_at = Some(i + 1);
            break;
        } else if is(o, "group") && more >= 2 {
            if !group_cmd {
                return Err(CmdError::err(
                    "The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            out.group = Some((args[i + 1].clone(), args[i + 2].clone()));
            i += 2;
        } else if is(o, "noack") {
            if !group_cmd {
                return Err(CmdError::err(
                    "The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            out.noack = true;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    let Some(at) = streams_at else {
        return Err(CmdError::Syntax);
    };
    if group_cmd && out.group.is_none() {
        return Err(CmdError::err("Missing GROUP option for XREADGROUP"));
    }
    let n = (args.len() - at) / 2;
    out.keys = args[at..at + n].to_vec();
    out.ids = args[at + n..].to_vec();
    Ok(out)
}

/// Where one stream of an XREAD / XREADGROUP starts.
#[derive(Clone, Copy)]
enum ReadFrom {
    /// Entries after this ID.
    After(StreamId),
    /// XREADGROUP `>`: entries never delivered to the group.
    New,
}

fn xread(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    read_generic(ctx, args, false)
}

fn xreadgroup(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    read_generic(ctx, args, true)
}

fn read_generic(ctx: &mut Ctx<'_>, args: &[Bytes], group_cmd: bool) -> CmdResult {
    let parsed = parse_read(ctx, args, group_cmd)?;
    let now = ctx.now_ms;
    // Every stream's start, checked before anything is served (as Redis does).
    let mut from = Vec::with_capacity(parsed.keys.len());
    for (key, id) in parsed.keys.iter().zip(&parsed.ids) {
        let mut shard = ctx.db().lock(key);
        let s = read_stream(ctx, &mut shard, key)?;
        if let Some((group, _)) = &parsed.group {
            if s.and_then(|s| s.group(group)).is_none() {
                return Err(CmdError::Other(format!(
                    "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                    String::from_utf8_lossy(key),
                    String::from_utf8_lossy(group)
                )));
            }
        }
        if id[..] == *b"$" {
            if group_cmd {
                return Err(CmdError::err(
                    "The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.",
                ));
            }
            from.push(ReadFrom::After(s.map_or(StreamId::ZERO, |s| s.last_id())));
        } else if id[..] == *b">" {
            if !group_cmd {
                return Err(CmdError::err(
                    "The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
                ));
            }
            from.push(ReadFrom::New);
        } else {
            match parse_strict_id(id)? {
                // Redis keeps `>` as the last possible ID, so that ID written out reads as `>`.
                StreamId::MAX if group_cmd => from.push(ReadFrom::New),
                after => from.push(ReadFrom::After(after)),
            }
        }
    }
    let mut served: Vec<(Frame, Frame)> = Vec::new();
    for (key, start) in parsed.keys.iter().zip(&from) {
        if let Some(entries) = read_one(ctx, key, *start, &parsed, now)? {
            served.push((Frame::Bulk(key.clone()), entries));
        }
    }
    if !served.is_empty() {
        return Ok(match ctx.client.resp {
            ProtocolVersion::Resp2 => Frame::Array(
                served
                    .into_iter()
                    .map(|(k, v)| Frame::Array(vec![k, v]))
                    .collect(),
            ),
            ProtocolVersion::Resp3 => Frame::Map(served),
        });
    }
    let Some(block) = parsed.block else {
        return Ok(Frame::NullArray);
    };
    // Block: each stream is waited on from where this read started (`$` resolved now).
    let wait = (block > 0).then(|| std::time::Duration::from_millis(block));
    let streams = parsed
        .keys
        .iter()
        .zip(&from)
        .map(|(k, f)| {
            (
                k.clone(),
                match f {
                    ReadFrom::After(id) => Some(*id),
                    ReadFrom::New => None,
                },
            )
        })
        .collect();
    let op = crate::blocking::Op::XRead {
        count: parsed.count,
        streams,
        group: parsed.group.clone().map(|(g, c)| (g, c, parsed.noack)),
    };
    super::blocking::block_on(ctx, parsed.keys.clone(), wait, op)
}

/// One stream of a read: its entries, or None when it has none to give.
fn read_one(
    ctx: &mut Ctx<'_>,
    key: &Bytes,
    start: ReadFrom,
    parsed: &ReadArgs,
    now: u64,
) -> Result<Option<Frame>, CmdError> {
    let count = if parsed.count == 0 {
        usize::MAX
    } else {
        parsed.count as usize
    };
    let mut shard = ctx.db().lock(key);
    let Some(s) = read_stream(ctx, &mut shard, key)? else {
        return Ok(None);
    };
    let Some((group_name, consumer)) = &parsed.group else {
        let ReadFrom::After(after) = start else {
            return Ok(None);
        };
        let Some(from) = after.incr() else {
            return Ok(None);
        };
        if s.last_live().is_none_or(|last| last <= after) {
            return Ok(None);
        }
        return Ok(Some(Frame::Array(
            s.range(from, StreamId::MAX, false)
                .take(count)
                .map(entry_frame)
                .collect(),
        )));
    };
    // XREADGROUP: the consumer is created (or seen) in any case.
    let Some(group) = s.group(group_name) else {
        return Ok(None);
    };
    let serve = match start {
        ReadFrom::After(_) => true,
        ReadFrom::New => s.last_live().is_some_and(|last| last > group.last_id),
    };
    let created = !group.consumers.contains_key(&consumer[..]);
    let mut effects: Vec<Vec<Bytes>> = Vec::new();
    let reply = with_stream(&mut shard, key, now, |s| {
        let group_start = s.group(group_name).map(|g| (g.last_id, g.entries_read));
        {
            let g = s.group_mut(group_name).expect("checked");
            let (c, _) = g.consumer(consumer, now);
            c.seen_time = now;
        }
        if !serve {
            return None;
        }
        let frames = match start {
            ReadFrom::After(after) => history(s, group_name, consumer, after, count, now),
            ReadFrom::New => deliver_new(
                s,
                group_name,
                consumer,
                count,
                parsed.noack,
                now,
                key,
                &mut effects,
            ),
        };
        if let (Some((last, read)), Some(g)) = (group_start, s.group(group_name)) {
            if g.last_id != last || g.entries_read != read {
                effects.push(setid_effect(key, group_name, g));
            }
        }
        Some(Frame::Array(frames))
    })
    .flatten();
    drop(shard);
    log_claims(
        ctx,
        key,
        group_name,
        created.then(|| consumer.clone()),
        effects,
    );
    Ok(reply)
}

fn setid_effect(key: &Bytes, group_name: &Bytes, g: &Group) -> Vec<Bytes> {
    vec![
        word("XGROUP"),
        word("SETID"),
        key.clone(),
        group_name.clone(),
        g.last_id.to_bytes(),
        word("ENTRIESREAD"),
        num(g.entries_read),
    ]
}

/// The effect logged for a pending entry as it now is (Redis' `streamPropagateXCLAIM`).
fn claim_effect(key: &Bytes, group_name: &Bytes, id: StreamId, g: &Group) -> Vec<Bytes> {
    let mut out = vec![word("XCLAIM"), key.clone(), group_name.clone()];
    match g.pel.get(&id) {
        Some(nack) => out.extend([
            nack.consumer.clone(),
            word("0"),
            id.to_bytes(),
            word("TIME"),
            num(nack.delivery_time),
            word("RETRYCOUNT"),
            num(nack.delivery_count),
        ]),
        // Gone from the PEL (its entry was deleted): a claim of it by anyone removes it.
        None => out.extend([word("_"), word("0"), id.to_bytes()]),
    }
    out.extend([
        word("FORCE"),
        word("JUSTID"),
        word("LASTID"),
        g.last_id.to_bytes(),
    ]);
    out
}

/// XREADGROUP `>`: the group's next entries, made pending for `consumer` (unless NOACK).
#[allow(clippy::too_many_arguments)]
fn deliver_new(
    s: &mut StreamValue,
    group_name: &Bytes,
    consumer: &Bytes,
    count: usize,
    noack: bool,
    now: u64,
    key: &Bytes,
    effects: &mut Vec<Vec<Bytes>>,
) -> Vec<Frame> {
    let last = s.group(group_name).map_or(StreamId::MAX, |g| g.last_id);
    let Some(from) = last.incr() else {
        return Vec::new();
    };
    let picked: Vec<(StreamId, Frame)> = s
        .range(from, StreamId::MAX, false)
        .take(count)
        .map(|e| (e.id, entry_frame(e)))
        .collect();
    let consumer_name = consumer.clone();
    let mut frames = Vec::with_capacity(picked.len());
    for (id, frame) in picked {
        s.advance_group(group_name, id);
        let g = s.group_mut(group_name).expect("checked");
        if !noack {
            g.assign(id, &consumer_name, now, 1);
            if let Some(c) = g.consumers.get_mut(&consumer_name[..]) {
                c.active_time = now as i64;
            }
            effects.push(claim_effect(key, group_name, id, g));
        }
        frames.push(frame);
    }
    frames
}

/// XREADGROUP with an ID: the consumer's own pending entries after `after` (a deleted one as
/// `[id, nil]`), each delivered once more.
fn history(
    s: &mut StreamValue,
    group_name: &Bytes,
    consumer: &Bytes,
    after: StreamId,
    count: usize,
    now: u64,
) -> Vec<Frame> {
    let Some(from) = after.incr() else {
        return Vec::new();
    };
    let ids: Vec<StreamId> = s
        .group(group_name)
        .and_then(|g| g.consumers.get(&consumer[..]))
        .map(|c| c.pending.range(from..).take(count).copied().collect())
        .unwrap_or_default();
    let mut frames = Vec::with_capacity(ids.len());
    for id in ids {
        match s.get(id).map(entry_frame) {
            Some(frame) => {
                frames.push(frame);
                if let Some(nack) = s.group_mut(group_name).and_then(|g| g.pel.get_mut(&id)) {
                    nack.delivery_time = now;
                    nack.delivery_count += 1;
                }
            }
            None => frames.push(Frame::Array(vec![id_frame(id), Frame::NullArray])),
        }
    }
    frames
}

// ----- XSETID / XACK / XPENDING

fn xsetid(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let id = parse_strict_id(&args[2])?;
    let mut entries_added: Option<u64> = None;
    let mut max_deleted: Option<StreamId> = None;
    let mut i = 3;
    while i < args.len() {
        let more = args.len() - 1 - i;
        if is(&args[i], "entriesadded") && more > 0 {
            let n = int_arg(&args[i + 1])?;
            if n < 0 {
                return Err(CmdError::err("entries_added must be positive"));
            }
            entries_added = Some(n as u64);
        } else if is(&args[i], "maxdeletedid") && more > 0 {
            let m = parse_strict_id(&args[i + 1])?;
            if id < m {
                return Err(CmdError::err(
                    "The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                ));
            }
            max_deleted = Some(m);
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    let key = &args[1];
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let Some(s) = read_stream(ctx, &mut shard, key)? else {
        return Err(CmdError::NoSuchKey);
    };
    if id < s.max_deleted_id() {
        return Err(CmdError::err(
            "The ID specified in XSETID is smaller than current max_deleted_entry_id",
        ));
    }
    if !s.is_empty() {
        if s.last_live().is_some_and(|top| id < top) {
            return Err(CmdError::err(
                "The ID specified in XSETID is smaller than the target stream top item",
            ));
        }
        if entries_added.is_some_and(|n| s.len() > n) {
            return Err(CmdError::err(
                "The entries_added specified in XSETID is smaller than the target stream length",
            ));
        }
    }
    with_stream(&mut shard, key, now, |s| {
        s.set_id(id, entries_added, max_deleted.filter(|m| !m.is_zero()))
    });
    drop(shard);
    ctx.notify(crate::notify::STREAM, "xsetid", key);
    Ok(Frame::ok())
}

fn xack(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let Some(group) = read_stream(ctx, &mut shard, key)?.and_then(|s| s.group(&args[2])) else {
        return Ok(Frame::Integer(0));
    };
    let ids = args[3..]
        .iter()
        .map(|a| parse_strict_id(a))
        .collect::<Result<Vec<_>, _>>()?;
    if !ids.iter().any(|id| group.pel.contains_key(id)) {
        return Ok(Frame::Integer(0));
    }
    let acked = with_stream(&mut shard, key, now, |s| {
        let g = s.group_mut(&args[2]).expect("checked");
        ids.iter().filter(|id| g.ack(**id)).count()
    })
    .unwrap_or(0);
    Ok(Frame::Integer(acked as i64))
}

fn nogroup(key: &[u8], group: &[u8]) -> CmdError {
    CmdError::Other(format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

fn xpending(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let argc = args.len();
    let just_info = argc == 3;
    if argc != 3 && !(6..=9).contains(&argc) {
        return Err(CmdError::Syntax);
    }
    let (mut start, mut end, mut count, mut min_idle, mut consumer) =
        (StreamId::ZERO, StreamId::MAX, 0i64, 0i64, None);
    if argc >= 6 {
        let mut at = 3;
        if is(&args[3], "idle") {
            min_idle = int_arg(&args[4])?;
            if argc < 8 {
                return Err(CmdError::Syntax);
            }
            at += 2;
        }
        count = int_arg(&args[at + 2])?.max(0);
        start = parse_interval(&args[at], true)?;
        end = parse_interval(&args[at + 1], false)?;
        consumer = args.get(at + 3);
    }
    let key = &args[1];
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let Some(g) = read_stream(ctx, &mut shard, key)?.and_then(|s| s.group(&args[2])) else {
        return Err(nogroup(key, &args[2]));
    };
    if just_info {
        if g.pel.is_empty() {
            return Ok(Frame::Array(vec![
                Frame::Integer(0),
                Frame::Null,
                Frame::Null,
                Frame::NullArray,
            ]));
        }
        let first = *g.pel.keys().next().expect("not empty");
        let last = *g.pel.keys().next_back().expect("not empty");
        let owners = g
            .consumers
            .iter()
            .filter(|(_, c)| !c.pending.is_empty())
            .map(|(name, c)| {
                Frame::Array(vec![
                    Frame::Bulk(name.clone()),
                    Frame::Bulk(num(c.pending.len())),
                ])
            })
            .collect();
        return Ok(Frame::Array(vec![
            Frame::Integer(g.pel.len() as i64),
            id_frame(first),
            id_frame(last),
            Frame::Array(owners),
        ]));
    }
    let ids: Box<dyn Iterator<Item = StreamId>> = match consumer {
        Some(name) => match g.consumers.get(&name[..]) {
            None => return Ok(Frame::Array(Vec::new())),
            Some(c) => Box::new(c.pending.range(start..).copied()),
        },
        None => Box::new(g.pel.range(start..).map(|(id, _)| *id)),
    };
    let mut out = Vec::new();
    for id in ids.take_while(|id| *id <= end) {
        if count == 0 {
            break;
        }
        let nack = &g.pel[&id];
        let idle = now as i64 - nack.delivery_time as i64;
        if min_idle != 0 && idle < min_idle {
            continue;
        }
        count -= 1;
        out.push(Frame::Array(vec![
            id_frame(id),
            Frame::Bulk(nack.consumer.clone()),
            Frame::Integer(idle.max(0)),
            Frame::Integer(nack.delivery_count as i64),
        ]));
    }
    Ok(Frame::Array(out))
}

// ----- XCLAIM / XAUTOCLAIM

fn xclaim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = args[1].clone();
    let group_name = args[2].clone();
    let consumer = args[3].clone();
    let now = ctx.now_ms;
    {
        let mut shard = ctx.db().lock(&key);
        if read_stream(ctx, &mut shard, &key)?
            .and_then(|s| s.group(&group_name))
            .is_none()
        {
            return Err(nogroup(&key, &group_name));
        }
    }
    let min_idle = int_arg_or(&args[4], "Invalid min-idle-time argument for XCLAIM")?.max(0);
    let mut ids = Vec::new();
    let mut j = 5;
    while j < args.len() {
        let rule = IdRule {
            missing_seq: 0,
            strict: true,
        };
        match parse_id_with(&args[j], rule, false) {
            Ok((id, _)) => ids.push(id),
            Err(_) => break,
        }
        j += 1;
    }
    let (mut force, mut justid, mut retrycount, mut delivery, mut last_id) =
        (false, false, None::<i64>, None::<i64>, StreamId::ZERO);
    while j < args.len() {
        let more = args.len() - 1 - j;
        let opt = &args[j];
        if is(opt, "force") {
            force = true;
        } else if is(opt, "justid") {
            justid = true;
        } else if is(opt, "idle") && more > 0 {
            j += 1;
            let idle = int_arg_or(&args[j], "Invalid IDLE option argument for XCLAIM")?;
            delivery = Some((now as i64).wrapping_sub(idle));
        } else if is(opt, "time") && more > 0 {
            j += 1;
            delivery = Some(int_arg_or(
                &args[j],
                "Invalid TIME option argument for XCLAIM",
            )?);
        } else if is(opt, "retrycount") && more > 0 {
            j += 1;
            retrycount = Some(int_arg_or(
                &args[j],
                "Invalid RETRYCOUNT option argument for XCLAIM",
            )?);
        } else if is(opt, "lastid") && more > 0 {
            j += 1;
            last_id = parse_strict_id(&args[j])?;
        } else {
            return Err(CmdError::err(format!(
                "Unrecognized XCLAIM option '{}'",
                String::from_utf8_lossy(opt)
            )));
        }
        j += 1;
    }
    let delivery = match delivery {
        Some(t) if t >= 0 && t <= now as i64 => t as u64,
        _ => now,
    };
    let retrycount = retrycount.filter(|n| *n >= 0);
    let mut effects = Vec::new();
    let mut created = false;
    let mut shard = ctx.db().lock(&key);
    let reply = with_stream(&mut shard, &key, now, |s| {
        let mut propagate_last_id = false;
        {
            let g = s.group_mut(&group_name).expect("checked");
            if last_id > g.last_id {
                g.last_id = last_id;
                propagate_last_id = true;
            }
            let (c, new) = g.consumer(&consumer, now);
            c.seen_time = now;
            created = new;
        }
        let mut out = Vec::new();
        for id in ids {
            let exists = s.get(id).is_some();
            let g = s.group_mut(&group_name).expect("checked");
            if !exists {
                if g.pel.contains_key(&id) {
                    g.ack(id);
                    effects.push(claim_effect(&key, &group_name, id, g));
                    propagate_last_id = false;
                }
                continue;
            }
            let pending = g.pel.get(&id).cloned();
            let count = match &pending {
                None if !force => continue,
                // A forced entry starts as Redis' `streamCreateNACK` makes it: delivered once.
                None => 1,
                Some(nack) => {
                    if min_idle > 0 && (now as i64 - nack.delivery_time as i64) < min_idle {
                        continue;
                    }
                    nack.delivery_count
                }
            };
            let count = match retrycount {
                Some(n) => n as u64,
                None if !justid => count + 1,
                None => count,
            };
            g.assign(id, &consumer, delivery, count);
            if let Some(c) = g.consumers.get_mut(&consumer[..]) {
                c.active_time = now as i64;
            }
            effects.push(claim_effect(&key, &group_name, id, g));
            propagate_last_id = false;
            out.push(if justid {
                id_frame(id)
            } else {
                s.get(id).map(entry_frame).expect("exists")
            });
        }
        if propagate_last_id {
            let g = s.group(&group_name).expect("checked");
            effects.push(setid_effect(&key, &group_name, g));
        }
        Frame::Array(out)
    })
    .unwrap_or(Frame::Array(Vec::new()));
    drop(shard);
    log_claims(ctx, &key, &group_name, created.then_some(consumer), effects);
    Ok(reply)
}

fn xautoclaim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = args[1].clone();
    let group_name = args[2].clone();
    let consumer = args[3].clone();
    let now = ctx.now_ms;
    let min_idle = int_arg_or(&args[4], "Invalid min-idle-time argument for XAUTOCLAIM")?.max(0);
    let start = parse_interval(&args[5], true)?;
    let mut count: i64 = 100;
    let mut justid = false;
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - 1 - j;
        if is(&args[j], "count") && more > 0 {
            let max = i64::MAX / 16;
            count = match parse_i64(&args[j + 1]) {
                Some(n) if (1..=max).contains(&n) => n,
                _ => return Err(CmdError::err("COUNT must be > 0")),
            };
            j += 1;
        } else if is(&args[j], "justid") {
            justid = true;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    {
        let mut shard = ctx.db().lock(&key);
        if read_stream(ctx, &mut shard, &key)?
            .and_then(|s| s.group(&group_name))
            .is_none()
        {
            return Err(nogroup(&key, &group_name));
        }
    }
    let mut effects = Vec::new();
    let mut created = false;
    let mut shard = ctx.db().lock(&key);
    let reply = with_stream(&mut shard, &key, now, |s| {
        {
            let g = s.group_mut(&group_name).expect("checked");
            let (c, new) = g.consumer(&consumer, now);
            c.seen_time = now;
            created = new;
        }
        let mut attempts = count.saturating_mul(10);
        let mut count = count;
        let mut claimed = Vec::new();
        let mut deleted = Vec::new();
        let mut cursor = start;
        let mut next = StreamId::ZERO;
        loop {
            let g = s.group(&group_name).expect("checked");
            let Some((&id, nack)) = g.pel.range(cursor..).next() else {
                break;
            };
            if attempts == 0 || count == 0 {
                next = id;
                break;
            }
            attempts -= 1;
            let delivered = nack.delivery_time;
            let times = nack.delivery_count;
            cursor = match id.incr() {
                Some(n) => n,
                None => StreamId::MAX,
            };
            let last = id == StreamId::MAX;
            if s.get(id).is_none() {
                let g = s.group_mut(&group_name).expect("checked");
                g.ack(id);
                effects.push(claim_effect(&key, &group_name, id, g));
                deleted.push(id_frame(id));
                count -= 1;
            } else if min_idle == 0 || now as i64 - delivered as i64 >= min_idle {
                let g = s.group_mut(&group_name).expect("checked");
                g.assign(id, &consumer, now, if justid { times } else { times + 1 });
                if let Some(c) = g.consumers.get_mut(&consumer[..]) {
                    c.active_time = now as i64;
                }
                effects.push(claim_effect(&key, &group_name, id, g));
                claimed.push(if justid {
                    id_frame(id)
                } else {
                    s.get(id).map(entry_frame).expect("exists")
                });
                count -= 1;
            }
            if last {
                break;
            }
        }
        Frame::Array(vec![
            id_frame(next),
            Frame::Array(claimed),
            Frame::Array(deleted),
        ])
    })
    .unwrap_or(Frame::Array(Vec::new()));
    drop(shard);
    log_claims(ctx, &key, &group_name, created.then_some(consumer), effects);
    Ok(reply)
}

/// After a read or claim of a group: the consumer it created (logged as `XGROUP
/// CREATECONSUMER`, with its event) and what it did to the pending entries.
fn log_claims(
    ctx: &mut Ctx<'_>,
    key: &Bytes,
    group_name: &Bytes,
    created: Option<Bytes>,
    effects: Vec<Vec<Bytes>>,
) {
    if let Some(consumer) = created {
        ctx.log_effect(vec![
            word("XGROUP"),
            word("CREATECONSUMER"),
            key.clone(),
            group_name.clone(),
            consumer,
        ]);
        ctx.notify(crate::notify::STREAM, "xgroup-createconsumer", key);
    }
    for effect in effects {
        ctx.log_effect(effect);
    }
}

// ----- XGROUP

const XGROUP_HELP: &[&str] = &[
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Print this help.",
];

const XINFO_HELP: &[&str] = &[
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Print this help.",
];

fn help(lines: &[&'static str]) -> Frame {
    Frame::Array(
        lines
            .iter()
            .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
            .collect(),
    )
}

fn subcommand_error(args: &[Bytes], cmd: &str) -> CmdError {
    CmdError::err(format!(
        "unknown subcommand or wrong number of arguments for '{}'. Try {cmd} HELP.",
        String::from_utf8_lossy(&args[1])
    ))
}

fn xgroup(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let opt = String::from_utf8_lossy(&args[1]).to_lowercase();
    let argc = args.len();
    if argc == 2 && opt == "help" {
        return Ok(help(XGROUP_HELP));
    }
    if !matches!(
        opt.as_str(),
        "create" | "setid" | "destroy" | "createconsumer" | "delconsumer" | "help"
    ) {
        return Err(CmdError::UnknownSubcommand {
            cmd: "XGROUP".into(),
            sub: String::from_utf8_lossy(&args[1]).into_owned(),
        });
    }
    if argc < 4 {
        return Err(subcommand_error(args, "XGROUP"));
    }
    let (mut mkstream, mut entries_read) = (false, ENTRIES_READ_UNKNOWN);
    let mut i = 5;
    while i < argc {
        if opt == "create" && is(&args[i], "mkstream") {
            mkstream = true;
            i += 1;
        } else if (opt == "create" || opt == "setid") && is(&args[i], "entriesread") && i + 1 < argc
        {
            entries_read = int_arg(&args[i + 1])?;
            if entries_read < 0 && entries_read != ENTRIES_READ_UNKNOWN {
                return Err(CmdError::err(
                    "value for ENTRIESREAD must be positive or -1",
                ));
            }
            i += 2;
        } else {
            return Err(subcommand_error(args, "XGROUP"));
        }
    }
    let key = args[2].clone();
    let name = args[3].clone();
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(&key);
    let (exists, has_group, last_id) = match read_stream(ctx, &mut shard, &key)? {
        Some(s) => (true, s.group(&name).is_some(), s.last_id()),
        None => (false, false, StreamId::ZERO),
    };
    // CREATECONSUMER's and DELCONSUMER's consumer: whether the group has it already.
    let has_consumer = argc == 5
        && shard
            .get(&key, now)
            .and_then(|e| e.value.as_stream())
            .and_then(|s| s.group(&name))
            .is_some_and(|g| g.consumers.contains_key(&args[4][..]));
    if !mkstream {
        if !exists {
            return Err(CmdError::err(
                "The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
            ));
        }
        if !has_group && matches!(opt.as_str(), "setid" | "createconsumer" | "delconsumer") {
            return Err(CmdError::Other(format!(
                "NOGROUP No such consumer group '{}' for key name '{}'",
                String::from_utf8_lossy(&name),
                String::from_utf8_lossy(&key)
            )));
        }
    }
    let event;
    let reply = match (opt.as_str(), argc) {
        ("create", 5..=8) => {
            let id = if args[4][..] == *b"$" {
                last_id
            } else {
                parse_strict_id(&args[4])?
            };
            if has_group {
                return Err(CmdError::Other(
                    "BUSYGROUP Consumer Group name already exists".into(),
                ));
            }
            shard.upsert(
                &key,
                now,
                || Value::Stream(StreamValue::new()),
                |v| {
                    if let Value::Stream(s) = v {
                        s.create_group(&name, id, entries_read);
                    }
                },
            );
            event = "xgroup-create";
            Frame::ok()
        }
        ("setid", 5 | 7) => {
            let id = if args[4][..] == *b"$" {
                last_id
            } else {
                parse_id(&args[4], 0)?
            };
            with_stream(&mut shard, &key, now, |s| {
                if let Some(g) = s.group_mut(&name) {
                    g.last_id = id;
                    g.entries_read = entries_read;
                }
            });
            event = "xgroup-setid";
            Frame::ok()
        }
        ("destroy", 4) => {
            if !has_group {
                return Ok(Frame::Integer(0));
            }
            with_stream(&mut shard, &key, now, |s| s.destroy_group(&name));
            event = "xgroup-destroy";
            Frame::Integer(1)
        }
        ("createconsumer", 5) => {
            if has_consumer {
                return Ok(Frame::Integer(0));
            }
            with_stream(&mut shard, &key, now, |s| {
                if let Some(g) = s.group_mut(&name) {
                    g.consumer(&args[4], now);
                }
            });
            event = "xgroup-createconsumer";
            Frame::Integer(1)
        }
        ("delconsumer", 5) => {
            if !has_consumer {
                return Ok(Frame::Integer(0));
            }
            let pending = with_stream(&mut shard, &key, now, |s| {
                s.group_mut(&name)
                    .and_then(|g| g.delete_consumer(&args[4]))
                    .unwrap_or(0)
            })
            .unwrap_or(0);
            event = "xgroup-delconsumer";
            Frame::Integer(pending as i64)
        }
        _ => return Err(subcommand_error(args, "XGROUP")),
    };
    drop(shard);
    ctx.notify(crate::notify::STREAM, event, &key);
    Ok(reply)
}

// ----- XINFO

/// The number of nodes Redis' radix tree has for these keys (16-byte node keys, shared
/// prefixes compressed): one node per compressed run, branching point and key end.
fn rax_nodes(keys: &[[u8; 16]]) -> i64 {
    fn count(keys: &[&[u8]]) -> i64 {
        if keys.len() == 1 {
            return if keys[0].is_empty() { 1 } else { 2 };
        }
        let first = keys[0];
        let prefix = (0..first.len())
            .take_while(|&i| keys.iter().all(|k| k[i] == first[i]))
            .count();
        let mut nodes = i64::from(prefix > 0) + 1;
        let mut at = 0;
        while at < keys.len() {
            let byte = keys[at][prefix];
            let end = at + keys[at..].iter().take_while(|k| k[prefix] == byte).count();
            let rest: Vec<&[u8]> = keys[at..end].iter().map(|k| &k[prefix + 1..]).collect();
            nodes += count(&rest);
            at = end;
        }
        nodes
    }
    if keys.is_empty() {
        return 1;
    }
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    count(&refs)
}

fn node_key(id: StreamId) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&id.ms.to_be_bytes());
    out[8..].copy_from_slice(&id.seq.to_be_bytes());
    out
}

fn lag_frame(s: &StreamValue, g: &Group) -> Frame {
    s.lag(g).map_or(Frame::Null, Frame::Integer)
}

fn entries_read_frame(g: &Group) -> Frame {
    if g.entries_read == ENTRIES_READ_UNKNOWN {
        Frame::Null
    } else {
        Frame::Integer(g.entries_read)
    }
}

fn bulk_str(s: &'static str) -> Frame {
    Frame::Bulk(Bytes::from_static(s.as_bytes()))
}

fn xinfo(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if is(&args[1], "help") {
        return Ok(help(XINFO_HELP));
    }
    let sub = String::from_utf8_lossy(&args[1]).to_lowercase();
    if !matches!(sub.as_str(), "stream" | "groups" | "consumers") {
        return Err(CmdError::UnknownSubcommand {
            cmd: "XINFO".into(),
            sub: String::from_utf8_lossy(&args[1]).into_owned(),
        });
    }
    if args.len() < 3 {
        return Err(subcommand_error(args, "XINFO"));
    }
    let key = &args[2];
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let Some(s) = read_stream(ctx, &mut shard, key)? else {
        return Err(CmdError::NoSuchKey);
    };
    if is(&args[1], "consumers") && args.len() == 4 {
        let Some(g) = s.group(&args[3]) else {
            return Err(CmdError::Other(format!(
                "NOGROUP No such consumer group '{}' for key name '{}'",
                String::from_utf8_lossy(&args[3]),
                String::from_utf8_lossy(key)
            )));
        };
        return Ok(Frame::Array(
            g.consumers
                .iter()
                .map(|(name, c)| {
                    let inactive = if c.active_time == -1 {
                        -1
                    } else {
                        now as i64 - c.active_time
                    };
                    Frame::Map(vec![
                        (bulk_str("name"), Frame::Bulk(name.clone())),
                        (bulk_str("pending"), Frame::Integer(c.pending.len() as i64)),
                        (
                            bulk_str("idle"),
                            Frame::Integer((now as i64 - c.seen_time as i64).max(0)),
                        ),
                        (bulk_str("inactive"), Frame::Integer(inactive)),
                    ])
                })
                .collect(),
        ));
    }
    if is(&args[1], "groups") && args.len() == 3 {
        return Ok(Frame::Array(
            s.groups()
                .iter()
                .map(|(name, g)| {
                    Frame::Map(vec![
                        (bulk_str("name"), Frame::Bulk(name.clone())),
                        (
                            bulk_str("consumers"),
                            Frame::Integer(g.consumers.len() as i64),
                        ),
                        (bulk_str("pending"), Frame::Integer(g.pel.len() as i64)),
                        (bulk_str("last-delivered-id"), id_frame(g.last_id)),
                        (bulk_str("entries-read"), entries_read_frame(g)),
                        (bulk_str("lag"), lag_frame(s, g)),
                    ])
                })
                .collect(),
        ));
    }
    if !is(&args[1], "stream") {
        return Err(subcommand_error(args, "XINFO"));
    }
    let opts = &args[3..];
    let mut full = false;
    let mut count: i64 = 10;
    if !opts.is_empty() {
        if (opts.len() != 1 && opts.len() != 3) || !is(&opts[0], "full") {
            return Err(subcommand_error(args, "XINFO"));
        }
        if opts.len() == 3 {
            if !is(&opts[1], "count") {
                return Err(subcommand_error(args, "XINFO"));
            }
            count = int_arg(&opts[2])?;
            if count < 0 {
                count = 10;
            }
        }
        full = true;
    }
    let node_keys: Vec<[u8; 16]> = s.nodes().map(|n| node_key(n.master_id)).collect();
    let meta = s.meta();
    let mut out = vec![
        (bulk_str("length"), Frame::Integer(meta.length as i64)),
        (
            bulk_str("radix-tree-keys"),
            Frame::Integer(node_keys.len() as i64),
        ),
        (
            bulk_str("radix-tree-nodes"),
            Frame::Integer(rax_nodes(&node_keys)),
        ),
        (bulk_str("last-generated-id"), id_frame(meta.last_id)),
        (
            bulk_str("max-deleted-entry-id"),
            id_frame(meta.max_deleted_id),
        ),
        (
            bulk_str("entries-added"),
            Frame::Integer(meta.entries_added as i64),
        ),
        (bulk_str("recorded-first-entry-id"), id_frame(meta.first_id)),
    ];
    let limit = |n: usize| if count == 0 { n } else { n.min(count as usize) };
    if !full {
        let first = s
            .range(StreamId::ZERO, StreamId::MAX, false)
            .next()
            .map_or(Frame::Null, entry_frame);
        let last = s
            .range(StreamId::ZERO, StreamId::MAX, true)
            .next()
            .map_or(Frame::Null, entry_frame);
        out.push((bulk_str("groups"), Frame::Integer(s.groups().len() as i64)));
        out.push((bulk_str("first-entry"), first));
        out.push((bulk_str("last-entry"), last));
        return Ok(Frame::Map(out));
    }
    let entries = s
        .range(StreamId::ZERO, StreamId::MAX, false)
        .take(limit(usize::MAX))
        .map(entry_frame)
        .collect();
    out.push((bulk_str("entries"), Frame::Array(entries)));
    let groups = s
        .groups()
        .iter()
        .map(|(name, g)| {
            let pel = g
                .pel
                .iter()
                .take(limit(g.pel.len()))
                .map(|(id, n)| {
                    Frame::Array(vec![
                        id_frame(*id),
                        Frame::Bulk(n.consumer.clone()),
                        Frame::Integer(n.delivery_time as i64),
                        Frame::Integer(n.delivery_count as i64),
                    ])
                })
                .collect();
            let consumers = g
                .consumers
                .iter()
                .map(|(cname, c)| {
                    let pending = c
                        .pending
                        .iter()
                        .take(limit(c.pending.len()))
                        .map(|id| {
                            let n = &g.pel[id];
                            Frame::Array(vec![
                                id_frame(*id),
                                Frame::Integer(n.delivery_time as i64),
                                Frame::Integer(n.delivery_count as i64),
                            ])
                        })
                        .collect();
                    Frame::Map(vec![
                        (bulk_str("name"), Frame::Bulk(cname.clone())),
                        (bulk_str("seen-time"), Frame::Integer(c.seen_time as i64)),
                        (bulk_str("active-time"), Frame::Integer(c.active_time)),
                        (
                            bulk_str("pel-count"),
                            Frame::Integer(c.pending.len() as i64),
                        ),
                        (bulk_str("pending"), Frame::Array(pending)),
                    ])
                })
                .collect();
            Frame::Map(vec![
                (bulk_str("name"), Frame::Bulk(name.clone())),
                (bulk_str("last-delivered-id"), id_frame(g.last_id)),
                (bulk_str("entries-read"), entries_read_frame(g)),
                (bulk_str("lag"), lag_frame(s, g)),
                (bulk_str("pel-count"), Frame::Integer(g.pel.len() as i64)),
                (bulk_str("pending"), Frame::Array(pel)),
                (bulk_str("consumers"), Frame::Array(consumers)),
            ])
        })
        .collect();
    out.push((bulk_str("groups"), Frame::Array(groups)));
    Ok(Frame::Map(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_as_redis_reads_them() {
        let loose = |a: &str| parse_id(a.as_bytes(), 0).ok();
        assert_eq!(loose("5"), Some(StreamId::new(5, 0)));
        assert_eq!(loose("5-3"), Some(StreamId::new(5, 3)));
        assert_eq!(loose("-"), Some(StreamId::ZERO));
        assert_eq!(loose("+"), Some(StreamId::MAX));
        assert_eq!(
            loose("+5"),
            Some(StreamId::new(5, 0)),
            "strtoull takes a plus sign"
        );
        assert_eq!(
            loose("-0"),
            None,
            "the ms part before the first dash is empty"
        );
        assert_eq!(loose("-5"), None, "a canonical negative number is refused");
        assert_eq!(loose("5-x"), None);
        assert_eq!(loose("18446744073709551616"), None);
        assert_eq!(parse_strict_id(b"-").ok(), None);
        assert_eq!(
            parse_interval(b"(5-0", true).ok(),
            Some(StreamId::new(5, 1))
        );
        assert_eq!(
            parse_interval(b"(5", false).ok(),
            Some(StreamId::new(5, u64::MAX - 1))
        );
        assert!(parse_interval(b"(0-0", false).is_err());
        let star = parse_id_with(
            b"7-*",
            IdRule {
                missing_seq: 0,
                strict: true,
            },
            true,
        )
        .unwrap();
        assert_eq!(star, (StreamId::new(7, 0), false));
    }

    #[test]
    fn radix_tree_nodes_are_counted_as_redis_builds_the_tree() {
        assert_eq!(rax_nodes(&[]), 1);
        assert_eq!(rax_nodes(&[node_key(StreamId::new(1, 0))]), 2);
        // Two keys that differ in the last byte: a compressed run, a branch, two key ends.
        let two = [node_key(StreamId::new(1, 0)), node_key(StreamId::new(1, 1))];
        assert_eq!(rax_nodes(&two), 4);
    }
}
