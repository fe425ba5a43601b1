//! Generic key commands: deletion, existence, type, rename, iteration (KEYS/SCAN/RANDOMKEY) and
//! TTL management (EXPIRE family, TTL family, PERSIST).
//!
//! Expiry times are stored absolute (Unix ms), as Redis does, so a replayed or copied key keeps its
//! deadline. A deadline in the past deletes the key at once.

use super::{cmd, flags, CommandSpec, Ctx, KEY1, NO_KEYS};
use crate::args::{expire_at_ms, int_arg, is, usize_arg, ExpireUnit};
use crate::error::{CmdError, CmdResult};
use crate::tenancy::acl::category::DANGEROUS;
use bytes::Bytes;
use gradus_proto::Frame;
use gradus_store::ValueKind;

const W: u32 = flags::WRITE;
const R: u32 = flags::READONLY;
const F: u32 = flags::FAST;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("del", -2, W, (1, -1, 1), "generic", "Deletes one or more keys.", del).notifies_existing(&[(crate::notify::GENERIC, "del")]).key_flags(&["RM delete"]),
    cmd("unlink", -2, W | F, (1, -1, 1), "generic", "Asynchronously deletes one or more keys.", unlink).notifies_existing(&[(crate::notify::GENERIC, "del")]).key_flags(&["RM delete"]),
    cmd("exists", -2, R | F, (1, -1, 1), "generic", "Determines whether one or more keys exist.", exists).key_flags(&["RO"]),
    cmd("touch", -2, R | F, (1, -1, 1), "generic", "Returns the number of existing keys out of those specified after updating the time they were last accessed.", touch).key_flags(&["RO"]),
    cmd("type", 2, R | F, KEY1, "generic", "Determines the type of value stored at a key.", key_type).key_flags(&["RO"]),
    cmd("rename", 3, W, (1, 2, 1), "generic", "Renames a key and overwrites the destination.", rename).key_flags(&["RW access delete", "OW update"]),
    cmd("renamenx", 3, W | F, (1, 2, 1), "generic", "Renames a key only when the target key name doesn't exist.", renamenx).key_flags(&["RW access delete", "OW insert"]),
    cmd("randomkey", 1, R | flags::RANDOM | flags::READS_KEYSPACE, NO_KEYS, "generic", "Returns a random key name from the database.", randomkey),
    cmd("keys", 2, R | flags::READS_KEYSPACE, NO_KEYS, "generic", "Returns all key names that match a pattern.", keys).with_acl(DANGEROUS),
    cmd("scan", -2, R | flags::READS_KEYSPACE, NO_KEYS, "generic", "Iterates over the key names in the database.", scan),
    cmd("expire", -3, W | F, KEY1, "generic", "Sets the expiration time of a key in seconds.", expire).key_flags(&["RW update"]),
    cmd("pexpire", -3, W | F, KEY1, "generic", "Sets the expiration time of a key in milliseconds.", pexpire).key_flags(&["RW update"]),
    cmd("expireat", -3, W | F, KEY1, "generic", "Sets the expiration time of a key to a Unix timestamp.", expireat).key_flags(&["RW update"]),
    cmd("pexpireat", -3, W | F, KEY1, "generic", "Sets the expiration time of a key to a Unix milliseconds timestamp.", pexpireat).key_flags(&["RW update"]),
    cmd("ttl", 2, R | F, KEY1, "generic", "Returns the expiration time in seconds of a key.", ttl),
    cmd("pttl", 2, R | F, KEY1, "generic", "Returns the expiration time in milliseconds of a key.", pttl),
    cmd("expiretime", 2, R | F, KEY1, "generic", "Returns the expiration time of a key as a Unix timestamp.", expiretime),
    cmd("pexpiretime", 2, R | F, KEY1, "generic", "Returns the expiration time of a key as a Unix milliseconds timestamp.", pexpiretime),
    cmd("persist", 2, W | F, KEY1, "generic", "Removes the expiration time of a key.", persist).notifies_if_changed(&[(crate::notify::GENERIC, "persist")]).key_flags(&["RW update"]),
];

fn del(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let keys = &args[1..];
    let db = ctx.db();
    let mut lock = db.lock_keys(keys.iter().map(|k| k.as_ref()));
    let removed = keys
        .iter()
        .filter(|k| lock.shard(k).remove(k, ctx.now_ms).is_some())
        .count();
    Ok(Frame::Integer(removed as i64))
}

/// UNLINK: DEL whose big values (Redis' free effort past [`LAZYFREE_THRESHOLD`]) are freed on
/// the background reclaim thread, after the reply, not under the shard's lock (counted in INFO
/// `lazyfreed_objects`, as Redis counts each value it frees lazily).
fn unlink(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let keys = &args[1..];
    let db = ctx.db();
    let mut lock = db.lock_keys(keys.iter().map(|k| k.as_ref()));
    let mut removed = 0;
    let mut big = Vec::new();
    for key in keys {
        if let Some(entry) = lock.shard(key).remove(key, ctx.now_ms) {
            removed += 1;
            if entry.value.free_effort() > LAZYFREE_THRESHOLD {
                big.push(entry);
            }
        }
    }
    drop(lock);
    if !big.is_empty() {
        let objects = big.len() as u64;
        super::server::dispose_counted(big, objects);
    }
    Ok(Frame::Integer(removed as i64))
}

/// Redis' `LAZYFREE_THRESHOLD`: a value that takes more frees than this is freed lazily.
const LAZYFREE_THRESHOLD: usize = 64;

fn exists(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let keys = &args[1..];
    let db = ctx.db();
    let mut lock = db.lock_keys(keys.iter().map(|k| k.as_ref()));
    let found = keys
        .iter()
        .filter(|k| lock.shard(k).peek(k, ctx.now_ms).is_some())
        .count();
    Ok(Frame::Integer(found as i64))
}

/// TOUCH: EXISTS that counts as an access of each key, also from a CLIENT NO-TOUCH connection
/// (Redis 7.2 exempts TOUCH from it).
fn touch(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let keys = &args[1..];
    let db = ctx.db();
    let mut lock = db.lock_keys(keys.iter().map(|k| k.as_ref()));
    let found = gradus_store::with_touch(true, || {
        keys.iter()
            .filter(|k| lock.shard(k).get(k, ctx.now_ms).is_some())
            .count()
    });
    Ok(Frame::Integer(found as i64))
}

fn key_type(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let kind = ctx
        .db()
        .lock(key)
        .peek(key, ctx.now_ms)
        .map(|e| e.value.kind().name());
    Ok(Frame::Simple(kind.unwrap_or("none").into()))
}

/// Move `src` to `dst` keeping the TTL. Ok(false) when `only_if_absent` and `dst` exists.
fn rename_generic(
    ctx: &mut Ctx<'_>,
    args: &[Bytes],
    only_if_absent: bool,
) -> Result<bool, CmdError> {
    let (src, dst) = (&args[1], &args[2]);
    let now = ctx.now_ms;
    let db = ctx.db();
    let mut lock = db.lock_keys([src.as_ref(), dst.as_ref()]);
    if lock.shard(src).get(src, now).is_none() {
        return Err(CmdError::NoSuchKey);
    }
    if src == dst {
        return Ok(!only_if_absent);
    }
    if only_if_absent && lock.shard(dst).get(dst, now).is_some() {
        return Ok(false);
    }
    let entry = lock
        .shard(src)
        .remove(src, now)
        .ok_or(CmdError::NoSuchKey)?;
    let expires_at = entry.expires_at();
    // Redis deletes the destination and adds the value anew (`dbAdd`): fresh LRU/LFU data,
    // not the overwritten key's.
    lock.shard(dst).remove(dst, now);
    lock.shard(dst).set(dst, entry.value, expires_at, now);
    drop(lock);
    // Redis deletes the destination and adds it anew: `new` even when it existed.
    let db = ctx.client.db;
    ctx.notify_new_in(db, dst);
    ctx.notify(crate::notify::GENERIC, "rename_from", src);
    ctx.notify(crate::notify::GENERIC, "rename_to", dst);
    Ok(true)
}

fn rename(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    rename_generic(ctx, args, false).map(|_| Frame::ok())
}

fn renamenx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    rename_generic(ctx, args, true).map(|done| Frame::Integer(done as i64))
}

fn randomkey(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    Ok(match ctx.db().random_key(ctx.now_ms) {
        Some(k) => Frame::Bulk(k),
        None => Frame::Null,
    })
}

fn keys(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let found = ctx.db().keys(&args[1], ctx.now_ms);
    Ok(Frame::Array(found.into_iter().map(Frame::Bulk).collect()))
}

fn scan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let cursor = super::hashes::parse_scan_cursor(&args[1])?;
    let mut count = 10usize;
    let mut pattern: Option<&[u8]> = None;
    let mut kind: Option<Option<ValueKind>> = None;
    let mut i = 2;
    while i < args.len() {
        let a = &args[i];
        let Some(value) = args.get(i + 1) else {
            return Err(CmdError::Syntax);
        };
        if is(a, "count") {
            count = usize_arg(value)?;
            if count < 1 {
                return Err(CmdError::Syntax);
            }
        } else if is(a, "match") {
            pattern = Some(value.as_ref()).filter(|p| *p != b"*");
        } else if is(a, "type") {
            kind = Some(ValueKind::parse(value));
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    let page = match kind {
        // A type name that no value has matches nothing (Redis 7.2 behaviour): still walk the cursor.
        Some(None) => {
            let mut page = ctx.db().scan(cursor, count, pattern, None, ctx.now_ms);
            page.keys.clear();
            page
        }
        Some(k) => ctx.db().scan(cursor, count, pattern, k, ctx.now_ms),
        None => ctx.db().scan(cursor, count, pattern, None, ctx.now_ms),
    };
    Ok(Frame::Array(vec![
        Frame::Bulk(Bytes::from(page.cursor.to_string())),
        Frame::Array(page.keys.into_iter().map(Frame::Bulk).collect()),
    ]))
}

#[derive(Clone, Copy, PartialEq)]
enum ExpireCond {
    Always,
    Nx,
    Xx,
    Gt,
    Lt,
}

fn expire_generic(
    ctx: &mut Ctx<'_>,
    args: &[Bytes],
    unit: ExpireUnit,
    absolute: bool,
) -> CmdResult {
    let name = String::from_utf8_lossy(&args[0]).to_lowercase();
    let amount = int_arg(&args[2])?;
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for a in &args[3..] {
        if is(a, "nx") {
            nx = true;
        } else if is(a, "xx") {
            xx = true;
        } else if is(a, "gt") {
            gt = true;
        } else if is(a, "lt") {
            lt = true;
        } else {
            return Err(CmdError::err(format!(
                "Unsupported option {}",
                String::from_utf8_lossy(a)
            )));
        }
    }
    if nx && (xx || gt || lt) {
        return Err(CmdError::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(CmdError::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    let cond = if nx {
        ExpireCond::Nx
    } else if gt {
        ExpireCond::Gt
    } else if lt {
        ExpireCond::Lt
    } else if xx {
        ExpireCond::Xx
    } else {
        ExpireCond::Always
    };
    let at = expire_at_ms(ctx.now_ms, amount, unit, absolute)
        .ok_or_else(|| CmdError::err(format!("invalid expire time in '{name}' command")))?;
    let key = &args[1];
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let Some(entry) = shard.get(key, now) else {
        return Ok(Frame::Integer(0));
    };
    let current = entry.expires_at();
    // XX with GT/LT: both must hold; a key with no TTL counts as an infinite TTL.
    let allowed = match (cond, current) {
        (ExpireCond::Always, _) => true,
        (ExpireCond::Nx, c) => c.is_none(),
        (ExpireCond::Xx, c) => c.is_some(),
        (ExpireCond::Gt, None) => false,
        (ExpireCond::Gt, Some(c)) => at > c as i64,
        (ExpireCond::Lt, None) => !xx,
        (ExpireCond::Lt, Some(c)) => at < c as i64,
    };
    if !allowed {
        return Ok(Frame::Integer(0));
    }
    let event = if at <= now as i64 {
        shard.remove(key, now);
        "del"
    } else {
        shard.set_expiry(key, Some(at as u64), now);
        "expire"
    };
    drop(shard);
    ctx.notify(crate::notify::GENERIC, event, key);
    Ok(Frame::Integer(1))
}

fn expire(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    expire_generic(ctx, args, ExpireUnit::Seconds, false)
}
fn pexpire(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    expire_generic(ctx, args, ExpireUnit::Millis, false)
}
fn expireat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    expire_generic(ctx, args, ExpireUnit::Seconds, true)
}
fn pexpireat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    expire_generic(ctx, args, ExpireUnit::Millis, true)
}

/// The TTL state of `key`: Err(-2) absent, Err(-1) no TTL, Ok(deadline ms). Like EXISTS and
/// TYPE it leaves the key's last access as it was (Redis' `LOOKUP_NOTOUCH`; regression:
/// `test_ttl_type_and_exists_leave_the_last_access_time_alone`).
fn deadline(ctx: &Ctx<'_>, key: &[u8]) -> Result<u64, i64> {
    match ctx.db().lock(key).peek(key, ctx.now_ms) {
        None => Err(-2),
        Some(e) => e.expires_at().ok_or(-1),
    }
}

fn ttl(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    Ok(Frame::Integer(match deadline(ctx, &args[1]) {
        Ok(t) => ((t.saturating_sub(ctx.now_ms) + 500) / 1000) as i64,
        Err(code) => code,
    }))
}

fn pttl(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    Ok(Frame::Integer(match deadline(ctx, &args[1]) {
        Ok(t) => t.saturating_sub(ctx.now_ms) as i64,
        Err(code) => code,
    }))
}

fn expiretime(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    Ok(Frame::Integer(match deadline(ctx, &args[1]) {
        Ok(t) => (t / 1000) as i64,
        Err(code) => code,
    }))
}

fn pexpiretime(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    Ok(Frame::Integer(match deadline(ctx, &args[1]) {
        Ok(t) => t as i64,
        Err(code) => code,
    }))
}

fn persist(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let now = ctx.now_ms;
    let mut shard = ctx.db().lock(key);
    let has_ttl = shard
        .get(key, now)
        .is_some_and(|e| e.expires_at().is_some());
    if has_ttl {
        shard.set_expiry(key, None, now);
    }
    Ok(Frame::Integer(has_ttl as i64))
}
