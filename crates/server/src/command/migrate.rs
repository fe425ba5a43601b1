//! MIGRATE (Redis 7.2's `migrateCommand`): move keys to another Redis-protocol server as DUMP
//! payloads it RESTOREs, then delete them here unless COPY.
//!
//! `MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE] [AUTH password]
//! [AUTH2 username password] [KEYS key [key ...]]`, in three steps:
//! 1. The handler reads the arguments and refuses them as Redis does, in its order. Then, under
//!    a shared hold of the store gate and the locks of all the keys' shards at once (one
//!    consistent view of them), it takes each existing key's value, TTL and version, as Redis'
//!    `lookupKeyRead` (hits, misses, `keymiss`). No key exists: `NOKEY`, at once.
//! 2. It defers its reply (`client::Deferred`): the conversation with the target
//!    (`crate::migrate`, with its connection cache) is awaited on the connection's task, with
//!    no lock held, so no server thread waits for the network.
//! 3. Unless COPY, the keys the target acknowledged are deleted through the write path as one
//!    `DEL` (logged, replicated, notified and invalidated as DEL: Redis also propagates MIGRATE
//!    as DEL), holding their shards (`WriteTxn::begin_keyed`), and only those whose version is
//!    still the one read in step 1: a key another client wrote meanwhile keeps its new value
//!    (Redis blocks the whole server during the exchange, so nothing writes in between there).
//!    A pause of writes (CLIENT PAUSE WRITE, FAILOVER) is waited out first, as a DEL would be.
//!
//! Then it answers `OK`, or the first error: Redis' `IOERR …` texts, or the target's error as
//! `ERR Target instance replied with error: …`. The keys acknowledged before an error are
//! deleted all the same, as in Redis.
//!
//! Differences from Redis, where nothing may wait: inside MULTI, MIGRATE answers an error
//! (but NOKEY when no key exists); a script may not call it (as no `own_gate` command). And
//! RESTORE-ASKING is never sent (there is no cluster mode). MIGRATE itself is never logged: it
//! runs without the dispatcher's gate (`own_gate`) and its effects are the DEL (`self_logged`).
//!
//! May import: `migrate` (the conversation and the cache), `command::dump` (payloads),
//! `dispatch` and `persist::write` (the delete), `args`, `client`, `state`, `notify`.

use super::{cmd, flags, CommandSpec, Ctx};
use crate::args::{is, parse_i64};
use crate::client::{ClientState, Deferred};
use crate::error::{CmdError, CmdResult};
use crate::migrate::{Credentials, Request, Restore};
use crate::persist::write::WriteTxn;
use crate::state::Shared;
use crate::tenancy::acl::category::DANGEROUS;
use bytes::Bytes;
use gradus_proto::{rdb, Frame};
use std::time::Duration;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("migrate", -6, flags::WRITE | flags::OWN_GATE | flags::SELF_LOGGED, (3, 3, 1), "generic", "Atomically transfers a key from one Redis instance to another.", migrate)
        .keys_by(migrate_keys).key_flags(&["RW access delete"]).secrets_at(secrets).with_acl(DANGEROUS),
];

/// MIGRATE's keys as Redis 7.2 finds them: its key specs first (the key at 3, unless a `KEYS`
/// word comes between arguments 2 and the one before last: that spec is incomplete, so Redis
/// asks `migrateGetKeys`), which skips the options' values and takes every argument after
/// `KEYS`, or none when the key argument is not empty then.
fn migrate_keys(args: &[Bytes]) -> Vec<usize> {
    if args.len() < 4 {
        return Vec::new();
    }
    let keyword = (2..args.len() - 1).any(|i| is(&args[i], "keys"));
    if !keyword {
        return vec![3];
    }
    let mut i = 6;
    while i < args.len() {
        let a = &args[i];
        if is(a, "keys") {
            return if args[3].is_empty() {
                (i + 1..args.len()).collect()
            } else {
                Vec::new()
            };
        }
        if is(a, "auth") {
            i += 1;
        } else if is(a, "auth2") {
            i += 2;
        }
        i += 1;
    }
    vec![3]
}

/// Where MIGRATE's secrets are: AUTH's password, AUTH2's username and password (Redis redacts
/// each; one range from the first to the last here, when both options are given).
fn secrets(args: &[Bytes]) -> (usize, usize) {
    let (mut from, mut to) = (usize::MAX, 0);
    let mut j = 6;
    while j < args.len() {
        let width = if is(&args[j], "auth") {
            1
        } else if is(&args[j], "auth2") {
            2
        } else if is(&args[j], "keys") {
            break;
        } else {
            0
        };
        if width > 0 && j + width < args.len() {
            from = from.min(j + 1);
            to = to.max(j + width + 1);
        }
        j += width + 1;
    }
    (from, to)
}

/// MIGRATE's options once read.
#[derive(Debug, PartialEq, Eq)]
struct Options {
    copy: bool,
    replace: bool,
    credentials: Option<Credentials>,
    /// The arguments that are keys: 3 alone, or those after KEYS.
    keys: std::ops::Range<usize>,
    db: i64,
    timeout: Duration,
}

/// Read MIGRATE's arguments with Redis' checks in its order: the options (a syntax error, or
/// KEYS with a key argument that is not empty), then the timeout and the database as integers.
fn parse(args: &[Bytes]) -> Result<Options, CmdError> {
    let (mut copy, mut replace) = (false, false);
    let (mut username, mut password) = (None, None);
    let mut keys = 3..4;
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - 1 - j;
        let a = &args[j];
        if is(a, "copy") {
            copy = true;
        } else if is(a, "replace") {
            replace = true;
        } else if is(a, "auth") {
            if more == 0 {
                return Err(CmdError::Syntax);
            }
            j += 1;
            password = Some(args[j].clone());
        } else if is(a, "auth2") {
            if more < 2 {
                return Err(CmdError::Syntax);
            }
            username = Some(args[j + 1].clone());
            password = Some(args[j + 2].clone());
            j += 2;
        } else if is(a, "keys") {
            if !args[3].is_empty() {
                return Err(CmdError::err(
                    "When using MIGRATE KEYS option, the key argument must be set to the empty string",
                ));
            }
            keys = j + 1..args.len();
            break;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let timeout = parse_i64(&args[5]).ok_or(CmdError::NotInteger)?;
    let db = parse_i64(&args[4]).ok_or(CmdError::NotInteger)?;
    let timeout = if timeout <= 0 { 1000 } else { timeout as u64 };
    Ok(Options {
        copy,
        replace,
        credentials: password.map(|password| Credentials { username, password }),
        keys,
        db,
        timeout: Duration::from_millis(timeout),
    })
}

/// A key as read for the transfer.
struct Found {
    key: Bytes,
    value: rdb::RdbValue,
    expires_at: Option<u64>,
    /// Its version then (see `Shard::version_of`): it is deleted only if still the same.
    version: u64,
}

fn migrate(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let options = parse(args)?;
    let keys = &args[options.keys.clone()];
    let now = ctx.now_ms;
    // One consistent view of every key. At the top level it runs without the dispatcher's
    // gate (`own_gate`) and takes it here; inside EXEC or a script (an open record) the
    // transaction holds it already.
    let (found, missing) = {
        let _gate = (ctx.client.record.is_none()).then(|| ctx.shared.store.shared(ctx.client.id));
        let db = ctx.db();
        let mut lock = db.lock_keys(keys.iter().map(|k| k.as_ref()));
        let mut found = Vec::new();
        let mut missing = Vec::new();
        for key in keys {
            let shard = lock.shard(key);
            let Some(entry) = shard.get(key, now) else {
                missing.push(key);
                continue;
            };
            let (value, expires_at) = (super::dump::to_rdb(&entry.value), entry.expires_at());
            let version = entry.stored_version();
            found.push(Found {
                key: key.clone(),
                value,
                expires_at,
                version: shard.full_version(version),
            });
        }
        (found, missing)
    };
    for _ in &found {
        ctx.lookup(true);
    }
    for key in missing {
        ctx.lookup(false);
        ctx.notify(crate::notify::KEY_MISS, "keymiss", key);
    }
    if found.is_empty() {
        // Often a normal condition (the keys expired meanwhile): not an error, as in Redis.
        return Ok(Frame::Simple(Bytes::from_static(b"NOKEY")));
    }
    if ctx.client.in_transaction() {
        return Err(CmdError::err(
            "MIGRATE is not allowed inside MULTI: it would wait for the target instance",
        ));
    }
    let mut restores = Vec::with_capacity(found.len());
    let mut versions = Vec::with_capacity(found.len());
    for f in found {
        let payload = rdb::dump(&f.value)
            .map_err(|e| CmdError::err(format!("cannot serialize this value: {e}")))?;
        // Redis sends the TTL left, at least 1 ms.
        let ttl_ms = f.expires_at.map_or(0, |at| at.saturating_sub(now).max(1));
        restores.push(Restore {
            key: f.key.clone(),
            ttl_ms,
            payload,
        });
        versions.push((f.key, f.version));
    }
    let request = Request {
        host: args[1].clone(),
        port: args[2].clone(),
        db: options.db,
        timeout: options.timeout,
        credentials: options.credentials,
        replace: options.replace,
        keys: restores,
    };
    let (copy, db) = (options.copy, ctx.client.db);
    ctx.client.deferred = Some(Deferred::new("migrate", move |shared, client| {
        Box::pin(async move {
            let done = crate::migrate::transfer(&shared.migrate_sockets, &request).await;
            let moved: Vec<(Bytes, u64)> = if copy {
                Vec::new()
            } else {
                done.acknowledged
                    .iter()
                    .map(|&i| versions[i].clone())
                    .collect()
            };
            let deleted = if moved.is_empty() {
                Ok(())
            } else {
                delete_moved(&shared, client, db, &moved).await
            };
            match (done.outcome, deleted) {
                (Err(failure), _) => Frame::Error(failure.text()),
                (Ok(()), Err(e)) => e.to_frame(),
                (Ok(()), Ok(())) => Frame::ok(),
            }
        })
    }));
    Ok(Frame::Null)
}

/// Delete the keys the target acknowledged (see the module docs, step 3), once writes are not
/// paused.
async fn delete_moved(
    shared: &Shared,
    client: &mut ClientState,
    db: usize,
    moved: &[(Bytes, u64)],
) -> Result<(), CmdError> {
    while shared.pauses.writes_paused(gradus_store::now_ms()) {
        shared.pauses.changed().await;
    }
    delete_unchanged(shared, client, db, moved)
}

/// One `DEL` through the write path of those of `moved` whose version is unchanged, holding
/// their shards from the check to the delete (nothing here awaits: the hold is this thread's).
fn delete_unchanged(
    shared: &Shared,
    client: &mut ClientState,
    db: usize,
    moved: &[(Bytes, u64)],
) -> Result<(), CmdError> {
    let now = gradus_store::now_ms();
    let keyspace = shared.store.db(db).ok_or(CmdError::DbIndexOutOfRange)?;
    let keys: Vec<Bytes> = moved.iter().map(|(k, _)| k.clone()).collect();
    let mut txn = WriteTxn::begin_keyed(shared, client, now, false, db, &keys)?;
    let mut del = vec![Bytes::from_static(b"DEL")];
    for (key, version) in moved {
        let unchanged = keyspace.lock(key).version_of(key, now) == *version;
        if unchanged && !del[1..].contains(key) {
            del.push(key.clone());
        }
    }
    let reply = if del.len() > 1 {
        let row = super::table()
            .get(b"del")
            .expect("DEL is a row of the command table");
        // Joins this transaction's record; runs in the selected keyspace, `db`.
        crate::dispatch::run_write_in(shared, txn.client(), row, &mut del, now)
    } else {
        Frame::Integer(0)
    };
    txn.commit()?;
    if !client.ready_keys.is_empty() {
        crate::blocking::serve(shared, std::mem::take(&mut client.ready_keys));
    }
    match reply {
        Frame::Error(text) => Err(CmdError::Other(text)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<Bytes> {
        s.split(' ')
            .map(|w| match w {
                "''" => Bytes::new(),
                w => Bytes::copy_from_slice(w.as_bytes()),
            })
            .collect()
    }

    #[test]
    fn keys_are_found_as_redis_7_2_finds_them() {
        let keys = |s: &str| migrate_keys(&args(s));
        assert_eq!(keys("migrate h 1 k 0 5"), vec![3]);
        assert_eq!(keys("migrate h 1 '' 0 5 KEYS a b"), vec![7, 8]);
        assert_eq!(keys("migrate h 1 '' 0 5 copy auth pw keys a"), vec![10]);
        assert_eq!(keys("migrate h 1 '' 0 5 auth keys keys a"), vec![9]);
        assert_eq!(keys("migrate h 1 k 0 5 keys a"), Vec::<usize>::new());
        // KEYS as the last argument: Redis' key spec finds no keyword, and the key is at 3.
        assert_eq!(keys("migrate h 1 '' 0 5 keys"), vec![3]);
        assert_eq!(keys("migrate h 1 k 0 5 auth2 keys pw"), vec![3]);
    }

    #[test]
    fn secrets_are_auth_and_auth2_values() {
        assert_eq!(secrets(&args("migrate h 1 k 0 5 AUTH pw")), (7, 8));
        assert_eq!(secrets(&args("migrate h 1 k 0 5 copy AUTH2 u pw")), (8, 10));
        assert_eq!(
            secrets(&args("migrate h 1 '' 0 5 auth2 u p KEYS auth x")),
            (7, 9)
        );
        assert_eq!(secrets(&args("migrate h 1 k 0 5 copy")), (usize::MAX, 0));
    }

    #[test]
    fn options_are_refused_in_redis_order() {
        let parsed = parse(&args("migrate h 1 '' 0 0 COPY AUTH2 u p AUTH q KEYS a b")).unwrap();
        assert!(parsed.copy && !parsed.replace);
        assert_eq!(parsed.keys, 13..15);
        assert_eq!(parsed.timeout, Duration::from_millis(1000));
        assert_eq!(
            parsed.credentials,
            Some(Credentials {
                username: Some(Bytes::from_static(b"u")),
                password: Bytes::from_static(b"q"),
            })
        );
        assert_eq!(
            parse(&args("migrate h 1 k x 5 nope")),
            Err(CmdError::Syntax)
        );
        assert_eq!(parse(&args("migrate h 1 k x y")), Err(CmdError::NotInteger));
        assert_eq!(
            parse(&args("migrate h 1 k 0 5 auth")),
            Err(CmdError::Syntax)
        );
        assert!(parse(&args("migrate h 1 k 0 5 keys a"))
            .unwrap_err()
            .to_string()
            .contains("empty string"));
    }
}
