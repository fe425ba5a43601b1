//! HyperLogLog commands: PFADD, PFCOUNT, PFMERGE over string values in Redis' encoding
//! ([`crate::hll`]), with Redis 7.2's replies and error texts.
//!
//! PFCOUNT of one key stores the cardinality it computed in the value's header when the cached
//! one was stale, as Redis does: a read that changes the value. Its row is flagged
//! `MAY_REPLICATE` and `SELF_LOGGED`, so it runs on the write path and logs itself (an exact
//! re-run) only when it did change the cache; replay then recomputes the same bytes. May import
//! `hll`, `args`, `error`, the store and the protocol frames.

use super::{cmd, flags, CommandSpec, Ctx, KEY1};
use crate::error::{CmdError, CmdResult};
use crate::hll;
use bytes::Bytes;
use gradus_proto::Frame;
use gradus_store::{Shard, Value};
use std::sync::atomic::Ordering;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("pfadd", -2, flags::WRITE | flags::DENYOOM | flags::FAST, KEY1, "hyperloglog", "Adds elements to a HyperLogLog key. Creates the key if it doesn't exist.", pfadd).notifies_if_changed(&[(crate::notify::STRING, "pfadd")]).key_flags(&["RW insert"]),
    cmd("pfcount", -2, flags::READONLY | flags::MAY_REPLICATE | flags::SELF_LOGGED, (1, -1, 1), "hyperloglog", "Returns the approximated cardinality of the set(s) observed by the HyperLogLog key(s).", pfcount).key_flags(&["RW access"]),
    cmd("pfmerge", -2, flags::WRITE | flags::DENYOOM, (1, -1, 1), "hyperloglog", "Merges one or more HyperLogLog values into a single key.", pfmerge).reads(1, -1).notifies(&[(crate::notify::STRING, "pfadd"), (0, "")]).key_flags(&["RW access insert", "RO access"]),
];

fn not_hll() -> CmdError {
    CmdError::Other("WRONGTYPE Key is not a valid HyperLogLog string value.".into())
}

fn corrupt() -> CmdError {
    CmdError::Other("INVALIDOBJ Corrupted HLL object detected".into())
}

fn sparse_max(ctx: &Ctx<'_>) -> usize {
    ctx.shared.live.hll_sparse_max_bytes.load(Ordering::Relaxed)
}

/// The HyperLogLog at `key`: Ok(None) when absent; WRONGTYPE (Redis' two texts) when the key
/// holds another type or a string that is not a HyperLogLog.
fn read_hll(shard: &mut Shard, key: &[u8], now: u64) -> Result<Option<Bytes>, CmdError> {
    match shard.get(key, now) {
        None => Ok(None),
        Some(e) => match &e.value {
            Value::Str(b) if hll::is_valid(b) => Ok(Some(b.to_bytes())),
            Value::Str(_) => Err(not_hll()),
            _ => Err(CmdError::WrongType),
        },
    }
}

/// Replace the value of the live `key` with `bytes`, keeping its TTL and metadata.
fn replace(shard: &mut Shard, key: &[u8], now: u64, bytes: Vec<u8>) {
    shard.modify(key, now, |v| *v = Value::string(Bytes::from(bytes)));
}

fn pfadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let max = sparse_max(ctx);
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let existing = read_hll(&mut shard, key, now)?;
    let (mut h, mut updated) = match &existing {
        None => (hll::new_sparse(), true),
        Some(b) => (b.to_vec(), false),
    };
    for element in &args[2..] {
        updated |= hll::add(&mut h, element, max).map_err(|_| corrupt())?;
    }
    if updated {
        hll::invalidate(&mut h);
        if existing.is_some() {
            replace(&mut shard, key, now, h);
        } else {
            shard.set(key, Value::string(Bytes::from(h)), None, now);
        }
    }
    Ok(Frame::Integer(updated as i64))
}

fn pfcount(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let now = ctx.now_ms;
    if args.len() > 2 {
        let keys = &args[1..];
        let db = ctx.db();
        let mut lock = db.lock_keys(keys.iter().map(|k| k.as_ref()));
        let mut max = vec![0u8; hll::REGISTERS];
        for key in keys {
            if let Some(h) = read_hll(lock.shard(key), key, now)? {
                hll::merge_into(&mut max, &h).map_err(|_| corrupt())?;
            }
        }
        return Ok(Frame::Integer(hll::count_registers(&max) as i64));
    }
    let key = &args[1];
    let mut shard = ctx.db().lock(key);
    let Some(h) = read_hll(&mut shard, key, now)? else {
        return Ok(Frame::Integer(0));
    };
    if let Some(card) = hll::cached(&h) {
        return Ok(Frame::Integer(card as i64));
    }
    let card = hll::count(&h).map_err(|_| corrupt())?;
    let mut h = h.to_vec();
    hll::set_cached(&mut h, card);
    replace(&mut shard, key, now, h);
    drop(shard);
    ctx.log_effect(vec![Bytes::from_static(b"PFCOUNT"), key.clone()]);
    Ok(Frame::Integer(card as i64))
}

fn pfmerge(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let dest = &args[1];
    let max_bytes = sparse_max(ctx);
    let now = ctx.now_ms;
    let db = ctx.db();
    let mut lock = db.lock_keys(args[1..].iter().map(|k| k.as_ref()));
    let mut max = vec![0u8; hll::REGISTERS];
    let mut dense = false;
    let mut target = None;
    for (i, key) in args[1..].iter().enumerate() {
        let Some(h) = read_hll(lock.shard(key), key, now)? else {
            continue;
        };
        dense |= h[4] == 0;
        hll::merge_into(&mut max, &h).map_err(|_| corrupt())?;
        if i == 0 {
            target = Some(h);
        }
    }
    let exists = target.is_some();
    let mut h = target.map_or_else(hll::new_sparse, |b| b.to_vec());
    if dense {
        hll::to_dense(&mut h).map_err(|_| corrupt())?;
    }
    for (index, &value) in max.iter().enumerate() {
        if value != 0 {
            // The destination was merged into `max` and checked: nothing here can fail.
            let _ = hll::set_register(&mut h, index, value, max_bytes);
        }
    }
    hll::invalidate(&mut h);
    let shard = lock.shard(dest);
    if exists {
        replace(shard, dest, now, h);
    } else {
        shard.set(dest, Value::string(Bytes::from(h)), None, now);
    }
    Ok(Frame::ok())
}
