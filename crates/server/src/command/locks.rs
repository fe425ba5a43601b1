//! Native session locks and the two-round-trip session commands.
//!
//! `LOCK`/`UNLOCK`/`LOCKS.INFO`/`LOCKS.LIST` expose the lock table of `gradus_store::locks`
//! (FIFO, fencing tokens, leases, waiter cap; released when the holding connection closes).
//! A waiting connection is parked by a deferred reply this module owns ([`wait_for_grant`]): the
//! server does no work for it until the grant or the deadline.
//!
//! `SESSION.OPEN` = lock + read; `SESSION.CLOSE` = write + refresh TTL + unlock, atomically and
//! only while the token holds the lock. The session data is an ordinary string key `sid` in the
//! caller's database (so `GET sid` works too); its writes are logged as plain effects (SET with an
//! absolute expiry, PEXPIREAT, DEL) because lock state is in memory only and must not be replayed.

use super::{cmd, flags, CommandSpec, Ctx, KEY1, NO_KEYS};
use crate::args::{int_arg, is};
use crate::client::{ClientState, Deferred};
use crate::error::{CmdError, CmdResult};
use crate::state::Shared;
use bytes::Bytes;
use gradus_proto::Frame;
use gradus_store::locks::{Acquire, LockInfo, ReleaseError};
use gradus_store::Value;
use std::time::{Duration, Instant};

const SW: u32 = flags::WRITE | flags::SELF_LOGGED;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("lock", -2, flags::FAST | flags::TAKES_LOCKS | flags::NOSCRIPT, NO_KEYS, "locks", "Takes a named lock, waiting server-side (FIFO) up to WAIT ms; returns a fencing token or nil.", lock),
    cmd("unlock", 3, flags::FAST | flags::TAKES_LOCKS, NO_KEYS, "locks", "Releases a named lock held under the given token.", unlock),
    cmd("locks.info", 2, flags::READONLY | flags::FAST | flags::READS_KEYSPACE, NO_KEYS, "locks", "Returns the holder, token, age, lease left and waiters of a lock.", locks_info),
    cmd("locks.list", -1, flags::READONLY | flags::READS_KEYSPACE, NO_KEYS, "locks", "Lists the locks that are held (the tenant's own; every tenant's for admins), optionally matching a pattern.", locks_list),
    cmd("session.open", -2, flags::READONLY | flags::TAKES_LOCKS | flags::READS_KEYSPACE | flags::NOSCRIPT, KEY1, "locks", "Locks a session and returns [token, data] in one round trip.", session_open),
    cmd("session.close", -3, SW | flags::DENYOOM, KEY1, "locks", "Writes the session data, refreshes its TTL and unlocks, if the token still holds the lock.", session_close),
    cmd("session.touch", 4, SW | flags::FAST, KEY1, "locks", "Extends a session's TTL without rewriting its data.", session_touch),
    cmd("session.destroy", -2, SW, KEY1, "locks", "Deletes a session's data and releases its lock if the token holds it.", session_destroy),
];

/// Options of LOCK and SESSION.OPEN after the name.
struct LockOptions {
    wait: Option<Duration>,
    lease: Option<Duration>,
    max_waiters: Option<usize>,
}

fn positive_ms(arg: &[u8], what: &str) -> Result<u64, CmdError> {
    match int_arg(arg) {
        Ok(n) if n >= 0 => Ok(n as u64),
        _ => Err(CmdError::err(format!(
            "{what} must be a non-negative integer (milliseconds)"
        ))),
    }
}

fn parse_lock_options(opts: &[Bytes]) -> Result<LockOptions, CmdError> {
    let mut o = LockOptions {
        wait: Some(Duration::ZERO),
        lease: None,
        max_waiters: None,
    };
    let mut i = 0;
    while i < opts.len() {
        let Some(value) = opts.get(i + 1) else {
            return Err(CmdError::Syntax);
        };
        if is(&opts[i], "wait") {
            o.wait = Some(Duration::from_millis(positive_ms(value, "WAIT")?));
        } else if is(&opts[i], "lease") {
            let ms = positive_ms(value, "LEASE")?;
            o.lease = (ms > 0).then(|| Duration::from_millis(ms));
        } else if is(&opts[i], "maxwaiters") {
            o.max_waiters = Some(positive_ms(value, "MAXWAITERS")? as usize);
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    Ok(o)
}

/// The deferred reply of a queued LOCK / SESSION.OPEN: wait (costing nothing: the task parks on
/// the grant) for the grant, the deadline (None: forever), the connection being killed or the
/// server shutting down. A grant that races the timeout is kept, never leaked (`cancel_wait`
/// reports it).
fn wait_for_grant(
    db: usize,
    name: Bytes,
    waiter: u64,
    mut grant: tokio::sync::oneshot::Receiver<u64>,
    deadline: Option<Instant>,
    session: bool,
) -> Deferred {
    Deferred::new("lock grant", move |shared, client| {
        Box::pin(async move {
            let handle = client.handle.clone();
            let mut shutdown = shared.shutdown.subscribe();
            let timeout = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
                    None => std::future::pending().await,
                }
            };
            let waiting_since = Instant::now();
            let token = tokio::select! {
                granted = &mut grant => granted.ok().inspect(|&t| {
                    // Hand-over latency: from the release that handed the lock on to here.
                    if let Some(latency) = shared.locks.held_for(db, &name, t) {
                        shared.observer.lock_handover.record(latency);
                    }
                    shared.observer.latency_event(&shared.live, "lock-wait", waiting_since.elapsed());
                }),
                _ = timeout => None,
                _ = handle.killed() => None,
                _ = shutdown.wait_for(|down| *down) => None,
            };
            let token = match token {
                Some(t) => Some(t),
                None => shared.locks.cancel_wait(db, &name, waiter, grant),
            };
            match token {
                None if session => Frame::NullArray,
                None => Frame::Null,
                Some(t) if session => session_open_reply(&shared, client, &name, t, true),
                Some(t) => Frame::Integer(t as i64),
            }
        })
    })
}

/// Take the lock now, or park the connection (a deferred reply: [`wait_for_grant`]), or fail.
fn lock_generic(ctx: &mut Ctx<'_>, name: &Bytes, opts: &[Bytes], session: bool) -> CmdResult {
    let mut o = parse_lock_options(opts)?;
    if ctx.client.in_transaction() {
        // Inside MULTI/EXEC nothing may wait (Redis runs a blocking command in a transaction as
        // if its timeout had passed): a lock held by someone else is a miss, like a try-lock, and
        // EXEC keeps one reply per queued command.
        o.wait = Some(Duration::ZERO);
    }
    let db = ctx.client.db;
    match ctx
        .shared
        .locks
        .acquire(db, name, ctx.client.id, o.lease, o.max_waiters)
    {
        Acquire::Granted(token) => Ok(if session {
            session_open_reply(ctx.shared, ctx.client, name, token, false)
        } else {
            Frame::Integer(token as i64)
        }),
        Acquire::TooManyWaiters => Err(CmdError::Other("LOCKBUSY too many waiters".into())),
        Acquire::Queued { waiter, grant } => {
            if o.wait == Some(Duration::ZERO) {
                // Try-lock: leave the queue at once (a grant cannot have raced: we hold no lock).
                if let Some(token) = ctx.shared.locks.cancel_wait(db, name, waiter, grant) {
                    let _ = ctx.shared.locks.release(db, name, token);
                }
                return Ok(if session {
                    Frame::NullArray
                } else {
                    Frame::Null
                });
            }
            let deadline = o.wait.map(|w| Instant::now() + w);
            ctx.client.deferred = Some(wait_for_grant(
                db,
                name.clone(),
                waiter,
                grant,
                deadline,
                session,
            ));
            Ok(Frame::Null)
        }
    }
}

fn lock(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    lock_generic(ctx, &args[1], &args[2..], false)
}

fn token_arg(arg: &[u8]) -> Result<u64, CmdError> {
    match int_arg(arg) {
        Ok(n) if n > 0 => Ok(n as u64),
        _ => Err(CmdError::err("invalid lock token")),
    }
}

fn release_error(e: ReleaseError) -> CmdError {
    match e {
        ReleaseError::NotHeld => CmdError::Other("NOLOCK the lock is not held".into()),
        ReleaseError::WrongToken => CmdError::Other(
            "WRONGTOKEN the lock is held under another token; nothing was released".into(),
        ),
    }
}

fn unlock(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let token = token_arg(&args[2])?;
    ctx.shared
        .locks
        .release(ctx.client.db, &args[1], token)
        .map_err(release_error)?;
    Ok(Frame::ok())
}

fn info_frame(shared: &crate::state::Shared, i: &LockInfo) -> Frame {
    let b = |s: &str| Frame::Bulk(Bytes::from(s.to_string()));
    let tenant = shared
        .tenancy
        .tenant_of(i.db)
        .map_or("", |t| shared.tenancy.tenants[t].name.as_str());
    Frame::Map(vec![
        (b("name"), Frame::Bulk(i.name.clone())),
        (b("tenant"), b(tenant)),
        (
            b("db"),
            Frame::Integer(shared.tenancy.select_of(i.db) as i64),
        ),
        (b("holder"), Frame::Integer(i.holder_client as i64)),
        (b("token"), Frame::Integer(i.token as i64)),
        (b("held_ms"), Frame::Integer(i.held_for.as_millis() as i64)),
        (
            b("lease_left_ms"),
            Frame::Integer(i.lease_left.map_or(-1, |l| l.as_millis() as i64)),
        ),
        (b("waiters"), Frame::Integer(i.waiters as i64)),
    ])
}

fn locks_info(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    Ok(match ctx.shared.locks.info(ctx.client.db, &args[1]) {
        Some(i) => info_frame(ctx.shared, &i),
        None => Frame::Null,
    })
}

fn locks_list(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let pattern = match args.len() {
        1 => None,
        2 => Some(&args[1]),
        _ => return Err(CmdError::Syntax),
    };
    // Admins see every tenant's locks; everyone else their own tenant's.
    let all = ctx.client.perms.contains(crate::tenancy::Perms::ADMIN);
    Ok(Frame::Array(
        ctx.shared
            .locks
            .list()
            .iter()
            .filter(|i| pattern.is_none_or(|p| gradus_store::glob::glob_match(p, &i.name)))
            .filter(|i| all || ctx.shared.tenancy.tenant_of(i.db) == Some(ctx.client.tenant))
            .map(|i| info_frame(ctx.shared, i))
            .collect(),
    ))
}

/// `[token, data | nil]` for a granted SESSION.OPEN (the read happens after the grant).
/// `take_gate`: false when called from a handler, which already runs under the dispatcher's
/// shared hold of the store gate (taking it again could deadlock behind a waiting EXEC).
fn session_open_reply(
    shared: &Shared,
    client: &mut ClientState,
    sid: &[u8],
    token: u64,
    take_gate: bool,
) -> Frame {
    let data = {
        let _gate = take_gate.then(|| shared.store.shared(client.id));
        shared.store.db(client.db).and_then(|ks| {
            match ks
                .lock(sid)
                .get(sid, gradus_store::now_ms())
                .map(|e| &e.value)
            {
                Some(Value::Str(b)) => Some(b.to_bytes()),
                _ => None,
            }
        })
    };
    Frame::Array(vec![
        Frame::Integer(token as i64),
        data.map_or(Frame::Null, Frame::Bulk),
    ])
}

fn session_open(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    lock_generic(ctx, &args[1], &args[2..], true)
}

fn ttl_seconds(arg: &[u8]) -> Result<u64, CmdError> {
    match int_arg(arg) {
        Ok(n) if n > 0 => Ok(n as u64),
        _ => Err(CmdError::err("invalid expire time in 'session' command")),
    }
}

fn session_close(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sid = args[1].clone();
    let token = token_arg(&args[2])?;
    let (mut data, mut ttl) = (None, None);
    let mut i = 3;
    while i < args.len() {
        let value = args.get(i + 1).ok_or(CmdError::Syntax)?;
        if is(&args[i], "data") {
            data = Some(value.clone());
        } else if is(&args[i], "ttl") {
            ttl = Some(ttl_seconds(value)?);
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    let db = ctx.client.db;
    if !ctx.shared.locks.holds(db, &sid, token) {
        return Err(CmdError::Other(
            "WRONGTOKEN the session lock is not held under this token; nothing was written".into(),
        ));
    }
    let now = ctx.now_ms;
    let expires_at = ttl.map(|s| now + s * 1000);
    let effect = {
        let mut shard = ctx.db().lock(&sid);
        match (&data, expires_at) {
            (Some(d), _) => {
                let keep = shard.get(&sid, now).and_then(|e| e.expires_at());
                let at = expires_at.or(keep);
                shard.set(&sid, Value::string_copy(d), at, now);
                let mut set = vec![Bytes::from_static(b"SET"), sid.clone(), d.clone()];
                if let Some(t) = at {
                    set.push(Bytes::from_static(b"PXAT"));
                    set.push(Bytes::from(t.to_string()));
                }
                Some(set)
            }
            (None, Some(t)) => shard.set_expiry(&sid, Some(t), now).then(|| {
                vec![
                    Bytes::from_static(b"PEXPIREAT"),
                    sid.clone(),
                    Bytes::from(t.to_string()),
                ]
            }),
            (None, None) => None,
        }
    };
    if let Some(effect) = effect {
        ctx.log_effect(effect);
    }
    ctx.shared
        .locks
        .release(db, &sid, token)
        .map_err(release_error)?;
    Ok(Frame::ok())
}

fn session_touch(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if !is(&args[2], "ttl") {
        return Err(CmdError::Syntax);
    }
    let seconds = ttl_seconds(&args[3])?;
    let sid = args[1].clone();
    let now = ctx.now_ms;
    let at = now + seconds * 1000;
    let touched = ctx.db().lock(&sid).set_expiry(&sid, Some(at), now);
    if touched {
        ctx.log_effect(vec![
            Bytes::from_static(b"PEXPIREAT"),
            sid,
            Bytes::from(at.to_string()),
        ]);
    }
    Ok(Frame::Integer(touched as i64))
}

fn session_destroy(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sid = args[1].clone();
    let token = match args.len() {
        2 => None,
        3 => Some(token_arg(&args[2])?),
        _ => return Err(CmdError::Syntax),
    };
    let db = ctx.client.db;
    if let Some(t) = token {
        if !ctx.shared.locks.holds(db, &sid, t) {
            return Err(CmdError::Other(
                "WRONGTOKEN the session lock is not held under this token; nothing was deleted"
                    .into(),
            ));
        }
    }
    let removed = ctx.db().lock(&sid).remove(&sid, ctx.now_ms).is_some();
    if let Some(t) = token {
        let _ = ctx.shared.locks.release(db, &sid, t);
    }
    if removed {
        ctx.log_effect(vec![Bytes::from_static(b"DEL"), sid]);
    }
    Ok(Frame::Integer(removed as i64))
}
