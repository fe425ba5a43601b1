//! Stampede protection for RESP clients: the memcached meta protocol's leases (`mg … N`/`W`/`Z`,
//! `md … I`, `ms … C`), as two commands over the same item state, so RESP and memcached clients
//! of one key share one lease.
//!
//! * `GETLEASE key lease-ms` → `[value, token, stale]`:
//!   - a fresh hit: `[value, nil, 0]`;
//!   - a miss: a 0-byte placeholder with a `lease-ms` TTL is created and the caller gets the
//!     lease: `[nil, token, 0]` — recompute the value and `SETLEASE` it;
//!   - a miss while another client holds the lease: `[nil, nil, 0]` — retry shortly (or use a
//!     fallback); nobody else is told to recompute;
//!   - a stale value (marked by `md key I`): the first caller gets `[value, token, 1]`, later
//!     callers `[value, nil, 1]` — serve the stale value while one client refreshes it.
//! * `SETLEASE key token value [EX seconds | PX milliseconds]` → `OK` when `token` is still the
//!   item's CAS (nobody wrote it since the lease was handed out), else nil.
//!
//! The token is the item's CAS, the same number `mg … c` shows. Both commands log their effect
//! (an `MCSTORE`), never themselves, since the outcome depends on the CAS.

use super::records::mcstore_args;
use crate::command::{cmd, flags, CommandSpec, Ctx, KEY1};
use crate::error::{CmdError, CmdResult};
use bytes::Bytes;
use gradus_proto::Frame;
use gradus_store::{ItemMeta, Value};

pub const COMMANDS: &[CommandSpec] = &[
    cmd(
        "getlease",
        3,
        flags::WRITE | flags::SELF_LOGGED | flags::FAST,
        KEY1,
        "string",
        "Returns a value, or on a miss or a stale value hands one caller a lease to recompute it (stampede protection).",
        getlease,
    ),
    cmd(
        "setlease",
        -4,
        flags::WRITE | flags::SELF_LOGGED | flags::DENYOOM,
        KEY1,
        "string",
        "Stores a value computed under a lease from GETLEASE, if the lease is still current.",
        setlease,
    ),
];

fn positive(arg: &[u8]) -> Option<u64> {
    crate::args::parse_i64(arg)
        .filter(|&n| n > 0)
        .map(|n| n as u64)
}

fn getlease(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let lease_ms = positive(&args[2])
        .ok_or_else(|| CmdError::err("invalid lease time in 'getlease' command"))?;
    let key = args[1].clone();
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(&key);
    let reply = |value: Option<Bytes>, token: Option<u64>, stale: bool| {
        Frame::Array(vec![
            value.map_or(Frame::Null, Frame::Bulk),
            token.map_or(Frame::Null, |t| Frame::Integer(t as i64)),
            Frame::Integer(i64::from(stale)),
        ])
    };
    if let Some((entry, before, _, version)) = shard.fetch(&key, now, true) {
        let Value::Str(value) = &entry.value else {
            return Err(CmdError::WrongType);
        };
        let value = value.to_bytes();
        let stale = before.has(ItemMeta::STALE);
        let lease_out = before.has(ItemMeta::WIN_SENT);
        ctx.lookup(true);
        if stale && !lease_out {
            shard.update_meta(&key, now, |m| m.bits |= ItemMeta::WIN_SENT);
            return Ok(reply(Some(value), Some(version), true));
        }
        if lease_out && !stale && value.is_empty() {
            // The placeholder of a lease someone else holds.
            return Ok(reply(None, None, false));
        }
        return Ok(reply(Some(value), None, stale));
    }
    ctx.lookup(false);
    if shard.contains_live(&key, now) {
        return Err(CmdError::WrongType);
    }
    let expires_at = Some(now + lease_ms);
    let meta = ItemMeta {
        bits: ItemMeta::WIN_SENT,
        ..ItemMeta::default()
    };
    shard.set_with_meta(&key, Value::string(Bytes::new()), expires_at, meta, now);
    let token = shard.version_of(&key, now);
    drop(shard);
    ctx.log_effect(mcstore_args(&key, Bytes::new(), meta, expires_at));
    Ok(reply(None, Some(token), false))
}

fn setlease(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let token = crate::args::parse_i64(&args[2])
        .filter(|&t| t > 0)
        .ok_or(CmdError::NotInteger)? as u64;
    let ttl_ms = match &args[4..] {
        [] => None,
        [unit, n] if unit.eq_ignore_ascii_case(b"ex") => Some(
            positive(n)
                .ok_or(CmdError::NotInteger)?
                .saturating_mul(1000),
        ),
        [unit, n] if unit.eq_ignore_ascii_case(b"px") => {
            Some(positive(n).ok_or(CmdError::NotInteger)?)
        }
        _ => return Err(CmdError::Syntax),
    };
    let key = args[1].clone();
    // Copied: a stored value must not pin the request buffer it arrived in.
    let value = Bytes::copy_from_slice(&args[3]);
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(&key);
    let current = shard
        .get(&key, now)
        .filter(|e| matches!(e.value, Value::Str(_)))
        .map(|e| e.stored_version());
    let current = current.map(|v| shard.full_version(v));
    if current != Some(token) {
        return Ok(Frame::Null);
    }
    let expires_at = ttl_ms.map(|ms| now + ms);
    let meta = ItemMeta {
        ..ItemMeta::default()
    };
    shard.set_with_meta(&key, Value::string(value.clone()), expires_at, meta, now);
    drop(shard);
    ctx.log_effect(mcstore_args(&key, value, meta, expires_at));
    Ok(Frame::ok())
}
