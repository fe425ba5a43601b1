//! MULTI/EXEC/DISCARD/WATCH/UNWATCH.
//!
//! Queueing happens in the dispatcher (commands are checked for existence and arity when queued, and
//! a failure makes EXEC answer EXECABORT). EXEC takes the store gate *exclusively*: the WATCH check
//! and every queued command run with no other command interleaving, which is what makes the
//! transaction atomic. WATCH remembers each key's version; any write, expiry or flush of the key
//! changes it, and EXEC then returns a null array without running anything.

use super::{cmd, flags, CommandSpec, Ctx, NO_KEYS};
use crate::client::{ExecEffects, MultiState, Watch};
use crate::dispatch;
use crate::error::{CmdError, CmdResult};
use crate::persist::record::{commands_record_len, LoggedCommand, RecordRoom};
use bytes::Bytes;
use gradus_log::format::MAX_RECORD_LEN;
use gradus_proto::Frame;
use std::sync::atomic::Ordering;

const TX: u32 = flags::NO_QUEUE | flags::FAST | flags::LOADING;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("multi", 1, TX, NO_KEYS, "transactions", "Starts a transaction.", multi),
    cmd("exec", 1, flags::NO_QUEUE | flags::LOADING | flags::OWN_GATE, NO_KEYS, "transactions", "Executes all commands in a transaction.", exec),
    cmd("discard", 1, TX, NO_KEYS, "transactions", "Discards a transaction.", discard),
    cmd("watch", -2, TX, (1, -1, 1), "transactions", "Monitors changes to keys to determine the execution of a transaction.", watch),
    cmd("unwatch", 1, TX, NO_KEYS, "transactions", "Forgets about watched keys of a transaction.", unwatch),
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

fn watch(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if ctx.client.multi.is_some() {
        return Err(CmdError::err("WATCH inside MULTI is not allowed"));
    }
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
        let version = ctx.db().lock(key).version_of(key, ctx.now_ms);
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

/// Runs without the shared gate (see dispatch): it takes the exclusive one.
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
    // logged as queued, or rewritten to about the same size).
    let record_len = commands_record_len(multi.queued.iter().map(|(_, args)| args.as_slice()));
    if record_len > MAX_RECORD_LEN {
        return Err(CmdError::Other(format!(
            "EXECABORT Transaction discarded: its log record would be {record_len} bytes, over the {MAX_RECORD_LEN}-byte limit"
        )));
    }
    let shared = ctx.shared;
    let _exclusive = shared.store.exclusive();
    let now = gradus_store::now_ms();
    for w in &watched {
        let changed = match shared.store.db(w.db) {
            Some(db) => db.lock(&w.key).version_of(&w.key, now) != w.version,
            None => true,
        };
        if changed {
            return Ok(Frame::NullArray);
        }
    }
    // One clock for the whole transaction, so its replay is exact.
    let mut logged = Vec::new();
    let mut degree = gradus_log::Durability::None;
    let mut replies = Vec::with_capacity(multi.queued.len());
    // Scripts queued in the transaction hand their effects over through `exec_effects`.
    // The queued arguments counted above include the scripts' own (EVAL and its body), which are
    // not logged: what the scripts write must fit in what the queued commands leave.
    ctx.client.exec_effects = Some(ExecEffects {
        logged: Vec::new(),
        degree: gradus_log::Durability::None,
        room: RecordRoom::after(record_len),
    });
    for (spec, args) in multi.queued {
        if !spec.has(flags::WRITE) {
            replies.push(dispatch::run(shared, ctx.client, spec, &args, now));
            if let Some(effects) = ctx.client.exec_effects.as_mut() {
                logged.append(&mut effects.logged);
                degree = degree.max(std::mem::replace(
                    &mut effects.degree,
                    gradus_log::Durability::None,
                ));
            }
            continue;
        }
        let checked = shared
            .persist
            .degree_for(ctx.client, spec)
            .and_then(|d| shared.persist.check_writable(d).map(|_| d));
        let this_degree = match checked {
            Ok(d) => d,
            Err(e) => {
                replies.push(e.to_frame());
                continue;
            }
        };
        let db = ctx.client.db;
        let reply = dispatch::run(shared, ctx.client, spec, &args, now);
        if this_degree.is_logged() && !reply.is_error() {
            logged.push(LoggedCommand { db, args });
            degree = degree.max(this_degree);
        }
        replies.push(reply);
    }
    ctx.client.exec_effects = None;
    // All writes of the transaction go into one record: replay applies all of them or none.
    if !logged.is_empty() {
        if let Err(e) = shared.persist.append(ctx.client, now, &logged, degree) {
            tracing::error!(error = %e, "log append failed");
            return Err(CmdError::Other(format!(
                "MISCONF transaction applied in memory but not logged: {e}"
            )));
        }
    }
    Ok(Frame::Array(replies))
}
