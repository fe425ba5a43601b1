//! MULTI/EXEC/DISCARD/WATCH/UNWATCH.
//!
//! Queueing happens in the dispatcher (commands are checked for existence and arity when queued, and
//! a failure makes EXEC answer EXECABORT). EXEC is a write transaction (`persist::write`) under
//! the *exclusive* store gate: the WATCH check and every queued command run with no other command
//! interleaving, which is what makes the transaction atomic, and every queued write (commands
//! that log their own effects and scripts included) joins its one log record. WATCH remembers each key's version; any write, expiry or flush of the key
//! changes it, and EXEC then returns a null array without running anything.
//!
//! May import: `dispatch` (to run queued commands), `persist::write`, `client`.

use super::{cmd, flags, scripting, CommandSpec, Ctx, NO_KEYS};
use crate::client::{Deferred, MultiState, Watch};
use crate::dispatch;
use crate::error::{CmdError, CmdResult};
use crate::persist::record::commands_record_len;
use crate::persist::write::{WriteError, WriteTxn};
use bytes::Bytes;
use gradus_log::format::MAX_RECORD_LEN;
use gradus_proto::Frame;
use std::sync::atomic::Ordering;

const TX: u32 = flags::NO_QUEUE | flags::FAST | flags::LOADING;
/// MULTI, DISCARD, WATCH and UNWATCH run while a script is past `busy-reply-threshold` (Redis'
/// `allow_busy`: a pipelined MULTI … EXEC must not lose its MULTI to BUSY and run half its
/// commands outside a transaction, Redis PR #7022), so they never wait for the store gate: only
/// WATCH reads the keyspace, and it takes the gate itself (see [`watch`]).
const TX_BUSY: u32 = TX | flags::ALLOW_BUSY | flags::OWN_GATE;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("multi", 1, TX_BUSY, NO_KEYS, "transactions", "Starts a transaction.", multi),
    cmd("exec", 1, flags::NO_QUEUE | flags::LOADING | flags::OWN_GATE | flags::SKIP_SLOWLOG | flags::RUNS_QUEUED, NO_KEYS, "transactions", "Executes all commands in a transaction.", exec),
    cmd("discard", 1, TX_BUSY, NO_KEYS, "transactions", "Discards a transaction.", discard),
    cmd("watch", -2, TX_BUSY, (1, -1, 1), "transactions", "Monitors changes to keys to determine the execution of a transaction.", watch).key_flags(&["RO"]),
    cmd("unwatch", 1, TX_BUSY, NO_KEYS, "transactions", "Forgets about watched keys of a transaction.", unwatch),
];

fn multi(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    if ctx.client.multi.is_some() {
        return Err(CmdError::err("MULTI calls can not be nested"));
    }
    ctx.client.multi = Some(MultiState::default());
    ctx.client.handle.multi_len.store(0, Ordering::Relaxed);
    Ok(Frame::ok())
}

fn discard(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    if ctx.client.multi.is_none() {
        return Err(CmdError::err("DISCARD without MULTI"));
    }
    ctx.client.clear_transaction();
    Ok(Frame::ok())
}

/// A watched key's version that no key ever has: EXEC finds it changed.
const CHANGED: u64 = u64::MAX;

/// Runs without the dispatcher's gate (it is allow-busy): it takes the gate shared itself to
/// read the keys' versions, after waiting out a script that holds it exclusively
/// (`scripting::wait_unless_busy`), except while a script is past `busy-reply-threshold`. That
/// script may hold the gate for as long as it runs, and WATCH must not wait for it: the keys are
/// then watched as already changed, so EXEC answers nil and the client tries again (a spurious
/// retry, never a lost update). Redis would watch them as they are.
fn watch(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if ctx.client.multi.is_some() {
        return Err(CmdError::err("WATCH inside MULTI is not allowed"));
    }
    // Held while the gate is (see `scripting::admit`).
    let admitted = super::scripting::admit();
    let busy = admitted.is_err();
    let _gate = (!busy).then(|| ctx.shared.store.shared(ctx.client.id));
    let db_index = ctx.client.db;
    for key in &args[1..] {
        let already = ctx
            .client
            .watched
            .iter()
            .any(|w| w.db == db_index && w.key == *key);
        if already {
            continue;
        }
        let version = if busy {
            CHANGED
        } else {
            ctx.db().lock(key).version_of(key, ctx.now_ms)
        };
        ctx.client.watched.push(Watch {
            db: db_index,
            key: Bytes::copy_from_slice(key),
            version,
        });
    }
    ctx.client
        .handle
        .watch_count
        .store(ctx.client.watched.len(), Ordering::Relaxed);
    Ok(Frame::ok())
}

fn unwatch(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    ctx.client.watched.clear();
    ctx.client.handle.watch_count.store(0, Ordering::Relaxed);
    Ok(Frame::ok())
}

/// Runs without the dispatcher's shared gate: its write transaction takes the exclusive one, and
/// every queued write joins that transaction's record (one record, in queue order: replay applies
/// all of it or none). The reply has one element per queued command.
fn exec(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    let Some(multi) = ctx.client.multi.take() else {
        return Err(CmdError::err("EXEC without MULTI"));
    };
    let watched = std::mem::take(&mut ctx.client.watched);
    ctx.client.clear_transaction();
    if multi.dirty {
        return Err(CmdError::Other(
            "EXECABORT Transaction discarded because of previous errors.".into(),
        ));
    }
    // All its writes go into one log record; one over the log's limit could only fail after
    // the transaction was applied, so refuse it first (from the queued arguments: commands are
    // logged as queued, or as effects of about the same size).
    let record_len = commands_record_len(multi.queued.iter().map(|(_, args)| args.as_slice()));
    if record_len > MAX_RECORD_LEN {
        return Err(CmdError::Other(format!(
            "EXECABORT Transaction discarded: {}",
            CmdError::from(WriteError::RecordTooLarge { len: record_len })
                .to_string()
                .trim_start_matches("ERR ")
        )));
    }
    let shared = ctx.shared;
    let grows = multi.queued.iter().any(|(s, _)| s.has(flags::DENYOOM));
    // One clock for the whole transaction, so its replay is exact.
    let now = gradus_store::now_ms();
    // A script in the transaction may pass busy-reply-threshold while EXEC holds the gate: the
    // transaction is announced as an exclusive script is, so commands that come meanwhile wait
    // where they can be told BUSY (see `scripting::hold_for_exec`).
    let _script_hold = if multi.queued.iter().any(|(s, _)| s.runs_script) {
        Some(scripting::hold_for_exec().map_err(|busy| {
            CmdError::Other(format!(
                "EXECABORT Transaction discarded because of: {busy}"
            ))
        })?)
    } else {
        None
    };
    // Refused before it runs (over maxmemory with a queued command that may grow memory, the
    // log poisoned, too few replicas): Redis' `execCommandAbort` words, the refusal after them.
    let mut txn = WriteTxn::begin_exclusive(shared, ctx.client, now, grows).map_err(|e| {
        CmdError::Other(format!(
            "EXECABORT Transaction discarded because of: {}",
            CmdError::from(&e)
        ))
    })?;
    for w in &watched {
        let changed = match shared.store.db(w.db) {
            Some(db) => db.lock(&w.key).version_of(&w.key, now) != w.version,
            None => true,
        };
        if changed {
            return Ok(Frame::NullArray);
        }
    }
    let mut replies = Vec::with_capacity(multi.queued.len());
    // Which replies' errors were counted already (a script's: see `ClientState::errors_counted`).
    let mut counted = Vec::with_capacity(multi.queued.len());
    // A command that defers its reply (a throttled AUTH; nothing else in a transaction waits:
    // locks are tried, not waited for) holds the whole EXEC reply until its own is known.
    let mut late = Vec::new();
    for (spec, args) in multi.queued {
        dispatch::feed_monitors(shared, txn.client(), spec, &args, false);
        // Each queued command counts and may be slow-logged on its own (EXEC itself is not).
        replies.push(dispatch::run_observed(
            shared,
            txn.client(),
            spec,
            args,
            |shared, client, args| {
                if spec.runs_as_write() {
                    dispatch::run_write_in(shared, client, spec, args, now)
                } else {
                    dispatch::run(shared, client, spec, args, now)
                }
            },
        ));
        counted.push(std::mem::take(&mut txn.client().errors_counted));
        if let Some(work) = txn.client().deferred.take() {
            // Counted now, as a command in a transaction never waits for others' writes.
            dispatch::finish_deferred(shared, txn.client(), &Frame::Null);
            late.push((replies.len() - 1, work));
        }
    }
    txn.commit()?;
    if !late.is_empty() {
        ctx.client.deferred = Some(Deferred::new("exec", move |shared, client| {
            Box::pin(async move {
                for (i, work) in late {
                    replies[i] = work.complete(shared.clone(), client).await;
                }
                count_uncounted(&shared, &replies, &counted);
                Frame::Array(replies)
            })
        }));
        return Ok(Frame::Null);
    }
    count_uncounted(shared, &replies, &counted);
    let replies = Frame::Array(replies);
    Ok(replies)
}

/// Count the errors among EXEC's `replies` but those `counted` already.
fn count_uncounted(shared: &crate::state::Shared, replies: &[Frame], counted: &[bool]) {
    for (reply, counted) in replies.iter().zip(counted) {
        if !counted {
            shared.stats.count_errors(reply);
        }
    }
}
