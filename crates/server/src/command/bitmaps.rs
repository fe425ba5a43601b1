//! Bitmap commands on string values: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD and
//! BITFIELD_RO, with Redis 7.2's argument checks, order of checks and error texts.
//!
//! Bit 0 is the most significant bit of the first byte; a string grows with zero bytes when a
//! write reaches past its end, and a missing key reads as an endless run of zero bits. Offsets
//! are limited as Redis limits them: the byte an offset names must lie below
//! `proto-max-bulk-len`. The bit arithmetic (counting, searching, fields of 1 to 64 bits with
//! wrap/saturate/fail overflow) is in pure functions at the end of the module; handlers lock only
//! the shards of their keys. May import `args`, `error`, the store and the protocol frames.

use super::strings::{modify_string, read_string};
use super::{cmd, flags, CommandSpec, Ctx, KEY1};
use crate::args::{int_arg, is, parse_i64};
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
    cmd("setbit", 4, W, KEY1, "bitmap", "Sets or clears the bit at offset of the string value. Creates the key if it doesn't exist.", setbit),
    cmd("getbit", 3, R | F, KEY1, "bitmap", "Returns a bit value by offset.", getbit),
    cmd("bitcount", -2, R, KEY1, "bitmap", "Counts the number of set bits (population counting) in a string.", bitcount),
    cmd("bitpos", -3, R, KEY1, "bitmap", "Finds the first set (1) or clear (0) bit in a string.", bitpos),
    cmd("bitop", -4, W, (2, -1, 1), "bitmap", "Performs bitwise operations on multiple strings, and stores the result.", bitop).reads(3, -1).key_flags(&["OW update", "RO access"]),
    cmd("bitfield", -2, W, KEY1, "bitmap", "Performs arbitrary bitfield integer operations on strings.", bitfield).key_flags_by(bitfield_key_flags),
    cmd("bitfield_ro", -2, R | F, KEY1, "bitmap", "Performs arbitrary read-only bitfield integer operations on strings.", bitfield_ro),
];

/// BITFIELD's key-spec flags (Redis' `bitfieldGetKeys`): only GETs (and OVERFLOW) read the key;
/// a SET, an INCRBY or anything it cannot parse may change it.
fn bitfield_key_flags(args: &[Bytes]) -> &'static [&'static str] {
    let mut i = 2;
    while i < args.len() {
        let left = args.len() - i - 1;
        if is(&args[i], "get") && left >= 2 {
            i += 3;
        } else if is(&args[i], "overflow") && left >= 1 {
            i += 2;
        } else {
            return &["RW access update"];
        }
    }
    &["RO access"]
}

fn offset_error() -> CmdError {
    CmdError::err("bit offset is not an integer or out of range")
}

/// A bit offset argument. `field_bits`: BITFIELD's `#N` form (N fields of that width) is
/// accepted. The byte it falls in must be below `proto-max-bulk-len`.
fn offset_arg(ctx: &Ctx<'_>, arg: &[u8], field_bits: Option<u32>) -> Result<u64, CmdError> {
    let hashed = field_bits.filter(|_| arg.first() == Some(&b'#'));
    let digits = if hashed.is_some() { &arg[1..] } else { arg };
    let mut offset = parse_i64(digits).ok_or_else(offset_error)?;
    if let Some(bits) = hashed {
        offset = offset.wrapping_mul(i64::from(bits));
    }
    let max = ctx.shared.live.proto_max_bulk_len.load(Ordering::Relaxed) as u64;
    if offset < 0 || (offset as u64 >> 3) >= max {
        return Err(offset_error());
    }
    Ok(offset as u64)
}

/// WRONGTYPE unless `key` is absent or holds a string; Ok(true) when it holds one.
/// The length of the string at `key`, None when absent (the caller checked the type).
fn string_len(shard: &mut Shard, key: &[u8], now: u64) -> Option<usize> {
    match &shard.get(key, now)?.value {
        Value::Str(b) => Some(b.len()),
        _ => None,
    }
}

fn check_string(shard: &mut Shard, key: &[u8], now: u64) -> Result<bool, CmdError> {
    match shard.get(key, now) {
        None => Ok(false),
        Some(e) if matches!(e.value, Value::Str(_)) => Ok(true),
        Some(_) => Err(CmdError::WrongType),
    }
}

fn setbit(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let offset = offset_arg(ctx, &args[2], None)?;
    let bit_error = || CmdError::err("bit is not an integer or out of range");
    let on = parse_i64(&args[3]).ok_or_else(bit_error)?;
    if on & !1 != 0 {
        return Err(bit_error());
    }
    let key = &args[1];
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    check_string(&mut shard, key, now)?;
    let byte = (offset >> 3) as usize;
    let len_before = string_len(&mut shard, key, now);
    let old = modify_string(&mut shard, key, now, byte + 1, |buf| {
        let mask = 1u8 << (7 - (offset & 7));
        let old = buf[byte] & mask != 0;
        if on == 1 {
            buf[byte] |= mask;
        } else {
            buf[byte] &= !mask;
        }
        old
    });
    drop(shard);
    // Redis: an event when the key was created or grew, or the bit changed.
    if len_before.is_none_or(|n| n <= byte) || old != (on == 1) {
        ctx.notify(crate::notify::STRING, "setbit", key);
    }
    Ok(Frame::Integer(old as i64))
}

fn getbit(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let offset = offset_arg(ctx, &args[2], None)?;
    let key = &args[1];
    let value = read_string(&mut ctx.db().lock(key), key, ctx.now_ms)?;
    ctx.lookup(value.is_some());
    let byte = (offset >> 3) as usize;
    let bit = value
        .as_deref()
        .and_then(|v| v.get(byte))
        .is_some_and(|b| b & (1 << (7 - (offset & 7))) != 0);
    Ok(Frame::Integer(bit as i64))
}

/// A range given to BITCOUNT/BITPOS, resolved against a string of `len` bytes: the first and
/// last byte and, in BIT mode, masks of the bits of those bytes that lie outside the range.
struct Range {
    start: i64,
    end: i64,
    first_outside: u8,
    last_outside: u8,
}

/// Resolve `start..=end` (negative: from the end) in bytes or, with `bits`, in bits.
fn resolve_range(len: i64, mut start: i64, mut end: i64, bits: bool) -> Range {
    let total = if bits { len << 3 } else { len };
    if start < 0 {
        start += total;
    }
    if end < 0 {
        end += total;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= total {
        end = total - 1;
    }
    let (mut first_outside, mut last_outside) = (0, 0);
    if bits && start <= end {
        first_outside = !((1u16 << (8 - (start & 7))) - 1) as u8;
        last_outside = ((1u16 << (7 - (end & 7))) - 1) as u8;
        start >>= 3;
        end >>= 3;
    }
    Range {
        start,
        end,
        first_outside,
        last_outside,
    }
}

/// BYTE or BIT (ASCII case-insensitive): true for BIT.
fn unit_arg(arg: &[u8]) -> Result<bool, CmdError> {
    if is(arg, "bit") {
        Ok(true)
    } else if is(arg, "byte") {
        Ok(false)
    } else {
        Err(CmdError::Syntax)
    }
}

fn bitcount(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let value = read_string(&mut ctx.db().lock(key), key, ctx.now_ms)?;
    ctx.lookup(value.is_some());
    let Some(v) = value else {
        return Ok(Frame::Integer(0));
    };
    let range = match args.len() {
        2 => Range {
            start: 0,
            end: v.len() as i64 - 1,
            first_outside: 0,
            last_outside: 0,
        },
        4 | 5 => {
            let start = int_arg(&args[2])?;
            let end = int_arg(&args[3])?;
            if start < 0 && end < 0 && start > end {
                return Ok(Frame::Integer(0));
            }
            let bits = match args.get(4) {
                Some(unit) => unit_arg(unit)?,
                None => false,
            };
            resolve_range(v.len() as i64, start, end, bits)
        }
        _ => return Err(CmdError::Syntax),
    };
    if range.start > range.end {
        return Ok(Frame::Integer(0));
    }
    let (s, e) = (range.start as usize, range.end as usize);
    let mut count = popcount(&v[s..=e]);
    count -= u64::from((v[s] & range.first_outside).count_ones());
    count -= u64::from((v[e] & range.last_outside).count_ones());
    Ok(Frame::Integer(count as i64))
}

fn bitpos(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let bit = int_arg(&args[2])?;
    if bit != 0 && bit != 1 {
        return Err(CmdError::err("The bit argument must be 1 or 0."));
    }
    let bit = bit == 1;
    let key = &args[1];
    let value = read_string(&mut ctx.db().lock(key), key, ctx.now_ms)?;
    ctx.lookup(value.is_some());
    let Some(v) = value else {
        return Ok(Frame::Integer(if bit { -1 } else { 0 }));
    };
    let len = v.len() as i64;
    let (range, end_given) = match args.len() {
        3 => (
            Range {
                start: 0,
                end: len - 1,
                first_outside: 0,
                last_outside: 0,
            },
            false,
        ),
        4..=6 => {
            let start = int_arg(&args[3])?;
            let bits = match args.get(5) {
                Some(unit) => unit_arg(unit)?,
                None => false,
            };
            let end = match args.get(4) {
                Some(end) => int_arg(end)?,
                None if bits => (len << 3) + 7,
                None => len - 1,
            };
            (resolve_range(len, start, end, bits), args.len() >= 5)
        }
        _ => return Err(CmdError::Syntax),
    };
    Ok(Frame::Integer(bitpos_in_range(&v, bit, &range, end_given)))
}

/// BITPOS over a resolved range of `v` (Redis' order of cases, edge bytes masked in BIT mode).
fn bitpos_in_range(v: &[u8], bit: bool, range: &Range, end_given: bool) -> i64 {
    let (mut start, end) = (range.start, range.end);
    if start > end {
        return -1;
    }
    // A byte with the bits outside the range made to not match.
    let masked = |byte: u8, outside: u8| if bit { byte & !outside } else { byte | outside };
    let mut bytes = end - start + 1;
    let pos = 'found: {
        if range.first_outside != 0 {
            let mut b = masked(v[start as usize], range.first_outside);
            if range.last_outside != 0 && bytes == 1 {
                b = masked(b, range.last_outside);
            }
            let pos = first_bit(&[b], bit);
            if bytes == 1 || (pos != -1 && pos != 8) {
                break 'found pos;
            }
            start += 1;
            bytes -= 1;
        }
        let whole = bytes - i64::from(range.last_outside != 0);
        if whole > 0 {
            let s = start as usize;
            let pos = first_bit(&v[s..s + whole as usize], bit);
            if bytes == whole || (pos != -1 && pos != whole << 3) {
                break 'found pos;
            }
            start += whole;
            bytes -= whole;
        }
        first_bit(&[masked(v[end as usize], range.last_outside)], bit)
    };
    if end_given && !bit && pos == bytes << 3 {
        return -1;
    }
    if pos == -1 {
        -1
    } else {
        pos + (start << 3)
    }
}

fn bitop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    #[derive(PartialEq)]
    enum Op {
        And,
        Or,
        Xor,
        Not,
    }
    let op = match &args[1] {
        a if is(a, "and") => Op::And,
        a if is(a, "or") => Op::Or,
        a if is(a, "xor") => Op::Xor,
        a if is(a, "not") => Op::Not,
        _ => return Err(CmdError::Syntax),
    };
    if op == Op::Not && args.len() != 4 {
        return Err(CmdError::err(
            "BITOP NOT must be called with a single source key.",
        ));
    }
    let dest = &args[2];
    let sources = &args[3..];
    let now = ctx.now_ms;
    let db = ctx.db();
    let mut lock = db.lock_keys(args[2..].iter().map(|k| k.as_ref()));
    let mut values: Vec<Bytes> = Vec::with_capacity(sources.len());
    for key in sources {
        values.push(read_string(lock.shard(key), key, now)?.unwrap_or_default());
    }
    let maxlen = values.iter().map(Bytes::len).max().unwrap_or(0);
    if maxlen == 0 {
        let deleted = lock.shard(dest).remove(dest, now).is_some();
        drop(lock);
        if deleted {
            ctx.notify(crate::notify::GENERIC, "del", dest);
        }
        return Ok(Frame::Integer(0));
    }
    let byte_at = |v: &Bytes, j: usize| v.get(j).copied().unwrap_or(0);
    let mut out = Vec::with_capacity(maxlen);
    for j in 0..maxlen {
        let mut acc = byte_at(&values[0], j);
        for v in &values[1..] {
            let b = byte_at(v, j);
            match op {
                Op::And => acc &= b,
                Op::Or => acc |= b,
                Op::Xor => acc ^= b,
                Op::Not => {}
            }
        }
        if op == Op::Not {
            acc = !acc;
        }
        out.push(acc);
    }
    lock.shard(dest)
        .set(dest, Value::raw_string(Bytes::from(out)), None, now);
    drop(lock);
    ctx.notify(crate::notify::STRING, "set", dest);
    Ok(Frame::Integer(maxlen as i64))
}

/// How BITFIELD's SET and INCRBY handle a result that does not fit the field.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum FieldOp {
    Get,
    Set(i64),
    IncrBy(i64),
}

/// One parsed BITFIELD operation.
#[derive(Debug, Clone, Copy)]
struct Field {
    op: FieldOp,
    signed: bool,
    bits: u32,
    offset: u64,
    overflow: Overflow,
}

fn field_type(arg: &[u8]) -> Result<(bool, u32), CmdError> {
    let err = || {
        CmdError::err(
            "Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.",
        )
    };
    let signed = match arg.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(err()),
    };
    let bits = parse_i64(&arg[1..]).ok_or_else(err)?;
    if bits < 1 || (signed && bits > 64) || (!signed && bits > 63) {
        return Err(err());
    }
    Ok((signed, bits as u32))
}

/// Parse BITFIELD's operations (`args[2..]`) in Redis' order of checks.
fn parse_fields(ctx: &Ctx<'_>, args: &[Bytes]) -> Result<Vec<Field>, CmdError> {
    let mut fields = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < args.len() {
        let rest = args.len() - j - 1;
        let sub = &args[j];
        let takes_value = if is(sub, "get") && rest >= 2 {
            false
        } else if (is(sub, "set") || is(sub, "incrby")) && rest >= 3 {
            true
        } else if is(sub, "overflow") && rest >= 1 {
            let kind = &args[j + 1];
            overflow = if is(kind, "wrap") {
                Overflow::Wrap
            } else if is(kind, "sat") {
                Overflow::Sat
            } else if is(kind, "fail") {
                Overflow::Fail
            } else {
                return Err(CmdError::err("Invalid OVERFLOW type specified"));
            };
            j += 2;
            continue;
        } else {
            return Err(CmdError::Syntax);
        };
        let (signed, bits) = field_type(&args[j + 1])?;
        let offset = offset_arg(ctx, &args[j + 2], Some(bits))?;
        let op = if takes_value {
            let v = int_arg(&args[j + 3])?;
            if is(sub, "set") {
                FieldOp::Set(v)
            } else {
                FieldOp::IncrBy(v)
            }
        } else {
            FieldOp::Get
        };
        fields.push(Field {
            op,
            signed,
            bits,
            offset,
            overflow,
        });
        j += if takes_value { 4 } else { 3 };
    }
    Ok(fields)
}

fn bitfield(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    bitfield_generic(ctx, args, false)
}

fn bitfield_ro(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    bitfield_generic(ctx, args, true)
}

fn bitfield_generic(ctx: &mut Ctx<'_>, args: &[Bytes], read_only: bool) -> CmdResult {
    let fields = parse_fields(ctx, args)?;
    let key = &args[1];
    let now = ctx.now_ms;
    let highest = fields
        .iter()
        .filter(|f| f.op != FieldOp::Get)
        .map(|f| f.offset + u64::from(f.bits) - 1)
        .max();
    let mut shard = ctx.db().lock(key);
    let Some(highest) = highest else {
        let value = read_string(&mut shard, key, now)?;
        drop(shard);
        // Redis looks a GET-only BITFIELD's key up for reading: a miss is a `keymiss` event
        // (BITFIELD_RO, a read, has it from its row).
        if value.is_none() && !read_only {
            ctx.notify(crate::notify::KEY_MISS, "keymiss", key);
        }
        let value = value.unwrap_or_default();
        let replies = fields
            .iter()
            .map(|f| Frame::Integer(get_field(&value, f.offset, f.bits, f.signed)))
            .collect();
        return Ok(Frame::Array(replies));
    };
    if read_only {
        return Err(CmdError::err(
            "BITFIELD_RO only supports the GET subcommand",
        ));
    }
    check_string(&mut shard, key, now)?;
    let len = (highest >> 3) as usize + 1;
    let before = read_string(&mut shard, key, now)?;
    let replies: Vec<Frame> = modify_string(&mut shard, key, now, len, |buf| {
        fields.iter().map(|f| apply_field(buf, f)).collect()
    });
    let after = read_string(&mut shard, key, now)?;
    drop(shard);
    // Redis counts a write that ran (not one OVERFLOW FAIL refused) as a change when the key
    // was created or grew, or the bits it wrote differ: one `setbit` event for any change.
    let grew = before.as_ref().is_none_or(|b| b.len() < len);
    let wrote = fields
        .iter()
        .zip(&replies)
        .any(|(f, r)| f.op != FieldOp::Get && !matches!(r, Frame::Null));
    if (grew && wrote) || before != after {
        ctx.notify(crate::notify::STRING, "setbit", key);
    }
    Ok(Frame::Array(replies))
}

/// Run one BITFIELD operation on `buf` (long enough for every write): its reply.
fn apply_field(buf: &mut [u8], f: &Field) -> Frame {
    let (incr, is_incr) = match f.op {
        FieldOp::Get => return Frame::Integer(get_field(buf, f.offset, f.bits, f.signed)),
        FieldOp::Set(v) => (v, false),
        FieldOp::IncrBy(v) => (v, true),
    };
    let (old, new, overflowed) = if f.signed {
        let old = get_signed(buf, f.offset, f.bits);
        let (base, by) = if is_incr { (old, incr) } else { (incr, 0) };
        let (overflowed, limit) = signed_overflow(base, by, f.bits, f.overflow);
        let new = limit.unwrap_or(base.wrapping_add(by));
        (old, new as u64, overflowed)
    } else {
        let old = get_unsigned(buf, f.offset, f.bits);
        let (base, by) = if is_incr {
            (old, incr)
        } else {
            (incr as u64, 0)
        };
        let (overflowed, limit) = unsigned_overflow(base, by, f.bits, f.overflow);
        let new = limit.unwrap_or(base.wrapping_add(by as u64));
        (old as i64, new, overflowed)
    };
    if overflowed && f.overflow == Overflow::Fail {
        return Frame::Null;
    }
    set_field(buf, f.offset, f.bits, new);
    if is_incr {
        Frame::Integer(new as i64)
    } else {
        Frame::Integer(old)
    }
}

// --- pure bit arithmetic -----------------------------------------------------------------

/// Number of set bits.
pub fn popcount(bytes: &[u8]) -> u64 {
    let mut chunks = bytes.chunks_exact(8);
    let mut n: u64 = chunks
        .by_ref()
        .map(|c| u64::from(u64::from_ne_bytes(c.try_into().expect("8 bytes")).count_ones()))
        .sum();
    n += chunks
        .remainder()
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum::<u64>();
    n
}

/// Position of the first bit equal to `bit` in `bytes`; when there is none: -1 for a set bit,
/// and the length in bits for a clear bit (the string is taken as zero-padded on the right).
pub fn first_bit(bytes: &[u8], bit: bool) -> i64 {
    let skip = if bit { 0u8 } else { 0xff };
    match bytes.iter().position(|&b| b != skip) {
        Some(i) => {
            let b = bytes[i];
            let within = if bit {
                b.leading_zeros()
            } else {
                b.leading_ones()
            };
            (i as i64) * 8 + i64::from(within)
        }
        None if bit => -1,
        None => bytes.len() as i64 * 8,
    }
}

/// The `bits`-wide unsigned field at bit `offset` (bits past the end of `bytes` read as 0).
pub fn get_unsigned(bytes: &[u8], offset: u64, bits: u32) -> u64 {
    let mut value = 0u64;
    for j in 0..u64::from(bits) {
        let pos = offset + j;
        let byte = bytes.get((pos >> 3) as usize).copied().unwrap_or(0);
        value = (value << 1) | u64::from((byte >> (7 - (pos & 7))) & 1);
    }
    value
}

/// The `bits`-wide two's complement field at bit `offset`.
pub fn get_signed(bytes: &[u8], offset: u64, bits: u32) -> i64 {
    let mut value = get_unsigned(bytes, offset, bits);
    if bits < 64 && value & (1 << (bits - 1)) != 0 {
        value |= u64::MAX << bits;
    }
    value as i64
}

fn get_field(bytes: &[u8], offset: u64, bits: u32, signed: bool) -> i64 {
    if signed {
        get_signed(bytes, offset, bits)
    } else {
        get_unsigned(bytes, offset, bits) as i64
    }
}

/// Store the low `bits` bits of `value` at bit `offset` (`bytes` is long enough).
pub fn set_field(bytes: &mut [u8], offset: u64, bits: u32, value: u64) {
    for j in 0..u64::from(bits) {
        let on = value & (1 << (u64::from(bits) - 1 - j)) != 0;
        let pos = offset + j;
        let mask = 1u8 << (7 - (pos & 7));
        let byte = &mut bytes[(pos >> 3) as usize];
        if on {
            *byte |= mask;
        } else {
            *byte &= !mask;
        }
    }
}

/// Whether `value + incr` overflows an unsigned field of `bits` bits (or `value` alone does not
/// fit), and the value to store instead under WRAP or SAT (None under FAIL or when it fits).
fn unsigned_overflow(value: u64, incr: i64, bits: u32, how: Overflow) -> (bool, Option<u64>) {
    let max = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = value.wrapping_neg() as i64;
    let wrapped = || value.wrapping_add(incr as u64) & !(u64::MAX.checked_shl(bits).unwrap_or(0));
    let (over, sat) = if value > max || (incr > 0 && incr > max_incr) {
        (true, max)
    } else if incr < 0 && incr < min_incr {
        (true, 0)
    } else {
        return (false, None);
    };
    match how {
        Overflow::Wrap => (over, Some(wrapped())),
        Overflow::Sat => (over, Some(sat)),
        Overflow::Fail => (over, None),
    }
}

/// [`unsigned_overflow`] for a two's complement field of `bits` bits.
fn signed_overflow(value: i64, incr: i64, bits: u32, how: Overflow) -> (bool, Option<i64>) {
    let max = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
    let min_incr = min.wrapping_sub(value);
    let wide = bits != 64;
    let wrapped = || {
        let mut c = (value as u64).wrapping_add(incr as u64);
        if bits < 64 {
            let mask = u64::MAX << bits;
            if c & (1 << (bits - 1)) != 0 {
                c |= mask;
            } else {
                c &= !mask;
            }
        }
        c as i64
    };
    let sat = if value > max
        || (wide && incr > max_incr)
        || (value >= 0 && incr > 0 && incr > max_incr)
    {
        max
    } else if value < min || (wide && incr < min_incr) || (value < 0 && incr < 0 && incr < min_incr)
    {
        min
    } else {
        return (false, None);
    };
    match how {
        Overflow::Wrap => (true, Some(wrapped())),
        Overflow::Sat => (true, Some(sat)),
        Overflow::Fail => (true, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_big_endian_bit_strings() {
        // Redis' example: a 5-bit unsigned 23 at offset 7 of zeros is 00000001 01110000.
        let mut buf = [0u8; 2];
        set_field(&mut buf, 7, 5, 23);
        assert_eq!(buf, [0b0000_0001, 0b0111_0000]);
        assert_eq!(get_unsigned(&buf, 7, 5), 23);
        assert_eq!(get_signed(&buf, 7, 5), 23 - 32);
        assert_eq!(
            get_unsigned(&buf, 12, 64),
            0,
            "bits past the end read as zero"
        );
        let mut wide = [0u8; 9];
        set_field(&mut wide, 3, 64, i64::MIN as u64);
        assert_eq!(get_signed(&wide, 3, 64), i64::MIN);
    }

    #[test]
    fn first_bit_pads_with_zeros() {
        assert_eq!(first_bit(&[0xff, 0xf0], false), 12);
        assert_eq!(first_bit(&[0xff, 0xff], false), 16);
        assert_eq!(first_bit(&[0x00, 0x00], true), -1);
        assert_eq!(first_bit(&[0x00, 0x01], true), 15);
        assert_eq!(first_bit(&[], false), 0);
    }

    #[test]
    fn popcount_counts_every_byte() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(popcount(&bytes), 8 * 128);
        assert_eq!(
            popcount(&bytes[..13]),
            bytes[..13].iter().map(|b| u64::from(b.count_ones())).sum()
        );
    }

    #[test]
    fn overflow_wraps_saturates_or_fails() {
        // u8: 250 + 10.
        assert_eq!(
            unsigned_overflow(250, 10, 8, Overflow::Wrap),
            (true, Some(4))
        );
        assert_eq!(
            unsigned_overflow(250, 10, 8, Overflow::Sat),
            (true, Some(255))
        );
        assert_eq!(unsigned_overflow(250, 10, 8, Overflow::Fail), (true, None));
        assert_eq!(unsigned_overflow(5, -10, 8, Overflow::Sat), (true, Some(0)));
        assert_eq!(unsigned_overflow(5, -5, 8, Overflow::Sat), (false, None));
        // A negative SET into an unsigned field is "too large" as Redis sees it.
        assert_eq!(
            unsigned_overflow(-1i64 as u64, 0, 8, Overflow::Sat),
            (true, Some(255))
        );
        // i8: 120 + 10, -120 - 10.
        assert_eq!(
            signed_overflow(120, 10, 8, Overflow::Wrap),
            (true, Some(-126))
        );
        assert_eq!(
            signed_overflow(120, 10, 8, Overflow::Sat),
            (true, Some(127))
        );
        assert_eq!(
            signed_overflow(-120, -10, 8, Overflow::Sat),
            (true, Some(-128))
        );
        assert_eq!(signed_overflow(-120, -8, 8, Overflow::Sat), (false, None));
        // i64 at its limits.
        assert_eq!(
            signed_overflow(i64::MAX, 1, 64, Overflow::Wrap),
            (true, Some(i64::MIN))
        );
        assert_eq!(
            signed_overflow(i64::MIN, -1, 64, Overflow::Sat),
            (true, Some(i64::MIN))
        );
        assert_eq!(
            signed_overflow(-1, i64::MAX, 64, Overflow::Sat),
            (false, None)
        );
    }

    #[test]
    fn bit_ranges_mask_their_edge_bytes() {
        // Bits 5..=17 of three bytes: the first byte keeps its last three bits, the third its
        // first two.
        let r = resolve_range(3, 5, 17, true);
        assert_eq!((r.start, r.end), (0, 2));
        assert_eq!(r.first_outside, 0b1111_1000);
        assert_eq!(r.last_outside, 0b0011_1111);
        let v = [0xff, 0xff, 0xff];
        assert_eq!(bitpos_in_range(&v, false, &r, true), -1);
        assert_eq!(bitpos_in_range(&[0, 0, 0xff], true, &r, true), 16);
        assert_eq!(bitpos_in_range(&[0xff, 0, 0], false, &r, true), 8);
    }
}
