//! Dispatch: one decoded request in, one reply frame out.
//!
//! Order of checks, as in Redis' `processCommand`: look the command up in the table (and its
//! subcommand's row), check arity, authentication and rights, queue it if the connection is inside
//! MULTI, otherwise run it: a write through the write path (`persist::write`), anything else under
//! a shared hold of the store gate (EXEC and scripts take the exclusive hold themselves). Every
//! failure here is a reply, never a dropped connection.
//!
//! May import: `command` (the table and handlers), `persist::write`, `tenancy` (the rights check),
//! `client`, `state`, `observe` (timing each command), `repl` (a replica's refusals), `pause`
//! (CLIENT PAUSE: a paused command is handed back to the connection), `quota` (`maxmemory`
//! evictions before a command, and before one is queued).

use crate::client::ClientState;
use crate::command::{arity_error, flags, table, CommandSpec, Ctx, Named};
use crate::error::CmdError;
use crate::observe::Outcome;
use crate::pause::PauseMode;
use crate::persist::write::{Scope, WriteTxn};
use crate::state::Shared;
use bytes::Bytes;
use gradus_proto::Frame;
use std::sync::atomic::Ordering;

/// Run (or queue) one command and return its reply.
///
/// `now_ms` is the connection's clock for this batch of requests (one reading per batch, as Redis
/// caches its clock per event-loop iteration): every command of a pipeline sees the same time.
pub fn dispatch(shared: &Shared, client: &mut ClientState, args: Vec<Bytes>, now_ms: u64) -> Frame {
    let spec = match table().get(&args[0]) {
        Some(spec) => spec,
        None => return reject(client, unknown_command(&args)),
    };
    if !spec.arity_ok(args.len()) {
        return rejected(shared, client, spec, arity_error(&args[0]));
    }
    // The subcommand's row where there is one: its arity, and the rights it needs.
    let row = spec.resolve(&args);
    if !row.arity_ok(args.len()) {
        return rejected(
            shared,
            client,
            row,
            CmdError::WrongArity(row.name.to_string()),
        );
    }
    // DEBUG unless `enable-debug-command` allows it, before authentication, as Redis'
    // `processCommand` refuses a protected command.
    if spec.has(flags::PROTECTED) && !crate::command::diagnostics::debug_allowed(shared, client) {
        return rejected(
            shared,
            client,
            row,
            CmdError::err(crate::command::diagnostics::DEBUG_NOT_ALLOWED),
        );
    }
    if !client.authenticated && !spec.has(flags::NO_AUTH) {
        if shared.auth_required() {
            return rejected(shared, client, row, CmdError::NoAuth);
        }
        // requirepass was cleared at run time: everyone is in.
        client.authenticated = true;
    }
    if let Err(e) = crate::tenancy::check_perms(client, row) {
        return rejected(shared, client, row, e);
    }
    if let Err(denied) = crate::tenancy::acl::check_acl(client, row, spec, &args) {
        crate::command::acl::log_denial(shared, client, Some(&denied), None, now_ms);
        let e = CmdError::Other(denied.error_text(&client.user));
        return reject(client, e);
    }
    // Redis: a subscribed RESP2 connection may only (un)subscribe, PING, QUIT and RESET.
    if client.resp == gradus_proto::ProtocolVersion::Resp2
        && !spec.has(flags::SUBSCRIBED_OK)
        && client.is_subscribed()
    {
        return reject(client, CmdError::err(format!(
            "Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
            row.name
        )));
    }
    // A replica: writes from its clients are refused (also when queued, as Redis), and reads
    // too while its link is down when it must not serve stale data.
    if shared.repl.is_active() && !client.from_primary {
        if let Some(e) = shared.repl.refusal(
            row.has(flags::WRITE) || row.has(flags::TAKES_LOCKS),
            spec.has(flags::LOADING),
        ) {
            return reject(client, e);
        }
    }
    // A script past `busy-reply-threshold` (see `command::scripting`): only the rows flagged
    // allow-busy run, as in Redis' `processCommand`; the rest are refused, rather than wait
    // for the store gate that script may hold (and wait where they can be refused while a
    // script holds it exclusively). The admission is held until the command has finished: an
    // exclusive script that starts meanwhile waits for it, so it never waits at the gate
    // behind that script, where no BUSY reply could reach it.
    let _admitted = if row.has(flags::ALLOW_BUSY) {
        None
    } else {
        match crate::command::scripting::admit() {
            Ok(admitted) => Some(admitted),
            Err(busy) => return refused_while_busy(shared, client, spec, row, busy),
        }
    };
    // CLIENT PAUSE / FAILOVER: a paused command waits (the connection dispatches it again
    // once the pause changes), before it is queued or run, as in Redis' `processCommand`. The
    // link from a primary waits out a pause in `repl::replica`, before a record is applied.
    let paused = match shared.pauses.current(now_ms).0 {
        PauseMode::Off => false,
        PauseMode::Write => may_write(shared, client, spec, row, &args),
        PauseMode::All => true,
    };
    if paused && !client.from_primary {
        client.postponed = Some(args);
        return Frame::Null;
    }
    // CLIENT LIST `cmd`/`idle`: the last command, a queued one included (as Redis).
    client.handle.touch(row.name, now_ms);
    if client.multi.is_some() && !spec.has(flags::NO_QUEUE) {
        // Refused when queued: NO_MULTI commands, and anything over maxmemory (after what
        // eviction can free), since a queue would grow memory without bound (Redis'
        // `processCommand`; regression:
        // `test_a_command_queued_over_maxmemory_is_refused_and_exec_aborts`). Either makes
        // EXEC fail.
        let refused = if spec.has(flags::NO_MULTI) {
            Some(CmdError::err("Command not allowed inside a transaction"))
        } else {
            crate::quota::make_room_in_server(shared, client, now_ms)
                .err()
                .map(CmdError::from)
        };
        let Some(multi) = client.multi.as_mut() else {
            unreachable!("a transaction is open (checked above)")
        };
        if let Some(e) = refused {
            multi.dirty = true;
            return e.to_frame();
        }
        // Redis' `argv_len_sums`: the arguments' bytes and a pointer for each.
        let mem = crate::client::ConnectionMemory::argv_len(&args)
            + args.len() * std::mem::size_of::<usize>();
        client.handle.mem.multi.fetch_add(mem, Ordering::Relaxed);
        multi.queued.push((spec, args));
        client
            .handle
            .multi_len
            .store(multi.queued.len() as i64, Ordering::Relaxed);
        return Frame::Simple("QUEUED".into());
    }
    // MONITOR (see `feed_monitors`) shows a command once it has run, as Redis 7.2 does (a
    // script before it runs: its commands follow). One that carries credentials is shown in
    // the tenant it bound the connection to, and only if it is authenticated then (a failed
    // AUTH is shown where no one needs to authenticate, as in Redis; with tenants, no tenant's
    // monitor is told of another's or an unknown one's attempts).
    let shown_after = if !shared.monitors.any() {
        None
    } else if spec.has(flags::SKIP_MONITOR) {
        feed_monitors(shared, client, spec, &args, false);
        None
    } else {
        Some(args.clone())
    };
    let secret = row.has(flags::SECRET_ARGS);
    let argv_mem = crate::client::ConnectionMemory::argv_len(&args);
    client.handle.mem.argv.store(argv_mem, Ordering::Relaxed);
    crate::client::LocalCounters::bump(&client.counters.commands);
    // A subcommand's row decides how it runs where it says so (FUNCTION LOAD is a write,
    // FUNCTION KILL runs without the gate); such rows carry the container's handler. A
    // CLIENT NO-TOUCH connection's command (its EXEC's and scripts' commands too) leaves keys'
    // LRU/LFU data alone, as Redis' `lookupKey` (TOUCH touches anyway: see `command::keys`).
    let touch = !client.handle.no_touch.load(Ordering::Relaxed);
    let reply = gradus_store::with_touch(touch, || {
        run_observed(shared, client, spec, args, |shared, client, args| {
            if spec.has(flags::OWN_GATE) || row.has(flags::OWN_GATE) {
                run(shared, client, spec, args, now_ms)
            } else if row.runs_as_write() {
                run_write_in(shared, client, row, args, now_ms)
            } else {
                let _gate = shared.store.shared(client.id);
                run(shared, client, spec, args, now_ms)
            }
        })
    });
    if let Some(args) = shown_after.filter(|_| !secret || client.authenticated) {
        feed_monitors(shared, client, spec, &args, false);
    }
    client.handle.mem.argv.store(0, Ordering::Relaxed);
    if let Some((_, left)) = client.caching.as_mut() {
        *left = left.saturating_sub(1);
        if *left == 0 {
            client.caching = None;
        }
    }
    // Clients blocked on keys this command wrote (EXEC's and scripts' writes included) are
    // served now that it has finished, first blocked first (see `blocking`).
    if !client.ready_keys.is_empty() {
        crate::blocking::serve(shared, std::mem::take(&mut client.ready_keys));
    }
    flush_broadcasts(shared, client);
    reply
}

/// Redis' `performEvictions` at the top of `processCommand`: while the server is over
/// `maxmemory`, keys are evicted before the next command runs, a read too. The connection calls
/// this before it takes the pushes due before a command's reply, so the invalidations and
/// `evicted` events of the keys evicted reach it before that reply (as Redis' tracking test
/// "invalidation message of eviction keys should be before response" expects). Nothing is
/// refused here: when eviction cannot make room, the write path refuses a write that may grow
/// memory and MULTI refuses to queue (see above). Skipped for unknown commands, for rows that
/// manage the store gate themselves (EXEC and scripts make room when they may grow; SCRIPT
/// KILL, SHUTDOWN … must never wait for a running script), and while a script is past
/// `busy-reply-threshold` (eviction would wait for the gate that script may hold; the command
/// is then refused with BUSY). When `maxmemory` is 0 (the default) it costs one relaxed load.
/// Regression: `test_a_read_over_maxmemory_evicts_before_it_replies`.
pub fn evict_before_command(
    shared: &Shared,
    client: &mut ClientState,
    args: &[Bytes],
    now_ms: u64,
) {
    if !crate::quota::over_maxmemory(shared) || client.from_primary {
        return;
    }
    let Some(spec) = table().get(&args[0]) else {
        return;
    };
    if spec.has(flags::OWN_GATE) || spec.resolve(args).has(flags::OWN_GATE) {
        return;
    }
    // Evicting takes the gate: held until then (see `dispatch`'s admission).
    let Ok(_admitted) = crate::command::scripting::admit() else {
        return;
    };
    // A failure (noeviction, nothing left to evict) is the write path's to report.
    let _ = crate::quota::make_room_in_server(shared, client, now_ms);
}

/// Send the BCAST invalidations of the keys the command that has just finished wrote (all of
/// an EXEC's or a script's at once, as Redis batches them until `beforeSleep`; see
/// `tracking`); the writer's own come after its reply.
pub fn flush_broadcasts(shared: &Shared, client: &mut ClientState) {
    if !client.bcast_written.is_empty() {
        let written = std::mem::take(&mut client.bcast_written);
        let own = shared.tracking.broadcast(client.id, written);
        client.after_reply.extend(own);
    }
}

/// Whether a command is held back by CLIENT PAUSE WRITE (Redis' `is_may_replicate_command`): a
/// write (session locks included: their grants are streamed), a read that may change the value
/// (PFCOUNT), PUBLISH, a script that does not declare `no-writes`, and EXEC when one of its
/// queued commands is any of those. Only asked while a pause is set.
fn may_write(
    shared: &Shared,
    client: &ClientState,
    spec: &'static CommandSpec,
    row: &'static CommandSpec,
    args: &[Bytes],
) -> bool {
    if spec.has(flags::RUNS_QUEUED) {
        return client.multi.as_ref().is_some_and(|m| {
            m.queued
                .iter()
                .any(|(spec, queued)| row_may_write(shared, client, spec.resolve(queued), queued))
        });
    }
    row_may_write(shared, client, row, args)
}

/// [`may_write`] for one command that is not EXEC.
fn row_may_write(
    shared: &Shared,
    client: &ClientState,
    row: &'static CommandSpec,
    args: &[Bytes],
) -> bool {
    row.has(flags::WRITE | flags::MAY_REPLICATE | flags::TAKES_LOCKS)
        || (row.has(flags::REPLICATES)
            && crate::command::scripting::may_write(shared, client.db, row, args))
}

/// MONITOR shows what runs, as Redis does: every command but the admin ones (CONFIG,
/// SHUTDOWN …, Redis' `admin` flag), with credentials shown as `(redacted)` (AUTH, HELLO …
/// AUTH); the commands of a transaction as EXEC runs them, a script's as `[db lua]`.
pub fn feed_monitors(
    shared: &Shared,
    client: &ClientState,
    spec: &'static CommandSpec,
    args: &[Bytes],
    from_script: bool,
) {
    if !shared.monitors.any() {
        return;
    }
    let row = spec.resolve(args);
    if spec.has(flags::ADMIN) || row.has(flags::ADMIN) {
        return;
    }
    let redacted: Vec<Bytes>;
    let args = if row.has(flags::SECRET_ARGS) || spec.has(flags::SECRET_ARGS) {
        let (from, to) = crate::observe::slowlog::secret_args(args);
        redacted = args
            .iter()
            .enumerate()
            .map(|(i, a)| {
                if i >= from && i < to {
                    Bytes::from_static(b"(redacted)")
                } else {
                    a.clone()
                }
            })
            .collect();
        &redacted[..]
    } else {
        args
    };
    let addr = if from_script {
        "lua".to_string()
    } else {
        client.handle.addr.to_string()
    };
    let db = shared.tenancy.select_of(client.db);
    shared
        .monitors
        .feed(client.tenant, db, &addr, args, &shared.pubsub.limits);
}

/// Run a command through `body`, timing it for the command statistics, the slow log and the
/// latency monitor (`observe`). A write that joins an open record (in EXEC, under the exclusive
/// gate) gives its arguments to it, so they are kept for the slow log only then and while the
/// slow log is on (`Bytes` clones: reference counts, not copies); a lone write leaves them.
pub fn run_observed(
    shared: &Shared,
    client: &mut ClientState,
    spec: &'static CommandSpec,
    mut args: Vec<Bytes>,
    body: impl FnOnce(&Shared, &mut ClientState, &mut Vec<Bytes>) -> Frame,
) -> Frame {
    let row = spec.resolve(&args);
    let kept = (spec.runs_as_write()
        && !spec.has(flags::OWN_GATE)
        && (client.record.is_some() || spec.has(flags::EXCLUSIVE) || row.has(flags::EXCLUSIVE))
        && crate::observe::slowlog_on(&shared.live))
    .then(|| args.clone());
    let started = quanta::Instant::now();
    // The body takes the arguments when it hands them to the write path.
    let reply = body(shared, client, &mut args);
    let elapsed = started.elapsed();
    let args = if args.is_empty() {
        kept.unwrap_or_default()
    } else {
        args
    };
    client.deferred_observation = Some((row, args, elapsed));
    if client.deferred.is_none() {
        finish_deferred(shared, client, &reply);
    }
    // Else it blocked (or waits): counted when its reply is made (see `finish_deferred`), as
    // Redis counts a blocked command when it is unblocked. Regression:
    // `test_a_blocking_command_is_in_the_slow_log_only_once_unblocked`.
    reply
}

fn outcome_of(reply: &Frame) -> Outcome {
    if reply.is_error() {
        Outcome::Failed
    } else {
        Outcome::Ok
    }
}

/// Count the command [`run_observed`] ran (in commandstats, the slow log, the latency monitor)
/// now that `reply` is its reply: at once, or, for one that blocked, when its reply is made,
/// with its own running time, not the time it waited.
pub fn finish_deferred(shared: &Shared, client: &mut ClientState, reply: &Frame) {
    if let Some((row, args, elapsed)) = client.deferred_observation.take() {
        shared.observer.finish_command(
            &shared.live,
            client,
            row,
            &args,
            elapsed,
            outcome_of(reply),
        );
    }
}

/// Client-side caching: a tracking connection's read remembers its keys (default mode; OPTIN
/// only after CLIENT CACHING yes, OPTOUT unless CLIENT CACHING no), so a later write of them
/// sends it an invalidation (see `tracking`).
fn remember_read(shared: &Shared, client: &mut ClientState, spec: &CommandSpec, args: &[Bytes]) {
    let Some(options) = &client.tracking else {
        return;
    };
    let caching = client.caching.map(|(yes, _)| yes);
    let wanted = if options.bcast {
        false
    } else if options.optin {
        caching == Some(true)
    } else if options.optout {
        caching != Some(false)
    } else {
        true
    };
    if !wanted {
        return;
    }
    let keys: Vec<Bytes> = spec
        .key_indexes(args)
        .into_iter()
        .filter_map(|i| args.get(i).cloned())
        .collect();
    if !keys.is_empty() {
        let max = shared.live.tracking_table_max_keys.load(Ordering::Relaxed) as usize;
        let own = shared
            .tracking
            .remember(client.id, client.tenant, &keys, max);
        client.after_reply.extend(own);
    }
}

/// Note the keys of a write that has just been applied, when clients are blocked: one of them
/// may be ready for them. (Read after the change left its shard: see `blocking`'s docs.)
fn note_ready_keys(
    shared: &Shared,
    client: &mut ClientState,
    spec: &CommandSpec,
    db: usize,
    args: &[Bytes],
) {
    if shared.blocked.any() {
        for i in spec.key_indexes(args) {
            if let Some(key) = args.get(i) {
                client.ready_keys.push((db, key.clone()));
            }
        }
    }
}

/// Run a command flagged `write` (or `may_replicate`) through the write path (`persist::write`): on its own, or
/// inside the transaction the connection has open (EXEC, a script), whose record it joins. A
/// command is logged as itself when it succeeds; one flagged `self_logged` logs its effects.
pub fn run_write(
    shared: &Shared,
    client: &mut ClientState,
    spec: &CommandSpec,
    mut args: Vec<Bytes>,
    now_ms: u64,
) -> Frame {
    run_write_in(shared, client, spec, &mut args, now_ms)
}

/// [`run_write`] with the arguments left in `args` unless the write joins an open record (see
/// `WriteTxn::apply_command`).
pub fn run_write_in(
    shared: &Shared,
    client: &mut ClientState,
    spec: &CommandSpec,
    args: &mut Vec<Bytes>,
    now_ms: u64,
) -> Frame {
    // Client-side caching: the keys it wrote are invalidated for whoever may cache them, and
    // a flush invalidates everything (see `tracking`).
    if shared.tracking.is_active() {
        let keys: Vec<Bytes> = spec
            .key_indexes(args)
            .into_iter()
            .filter_map(|i| args.get(i).cloned())
            .collect();
        let flushes = spec.has(flags::FLUSHES);
        let (id, tenant) = (client.id, client.tenant);
        let reply = run_write_logged(shared, client, spec, args, now_ms);
        if !reply.is_error() {
            if flushes {
                let own = shared.tracking.flush(tenant, id);
                client.after_reply.extend(own);
            } else if !keys.is_empty() {
                let own = shared.tracking.invalidate_batched(
                    id,
                    tenant,
                    &keys,
                    &mut client.bcast_written,
                );
                client.after_reply.extend(own);
            }
        }
        if client.record.is_none() {
            // Not part of a larger command (EXEC, a script): its BCAST batch is complete.
            flush_broadcasts(shared, client);
        }
        return reply;
    }
    run_write_logged(shared, client, spec, args, now_ms)
}

/// [`run_write`] under its write transaction.
fn run_write_logged(
    shared: &Shared,
    client: &mut ClientState,
    spec: &CommandSpec,
    args: &mut Vec<Bytes>,
    now_ms: u64,
) -> Frame {
    let db = client.db;
    if spec.has(flags::EXCLUSIVE) && client.record.is_none() {
        // Under the exclusive gate: the write joins this transaction's record.
        let mut outer = match WriteTxn::begin_exclusive(shared, client, now_ms, false) {
            Ok(txn) => txn,
            Err(e) => return CmdError::from(e).to_frame(),
        };
        let reply = run_write_in(shared, outer.client(), spec, args, now_ms);
        return match outer.commit() {
            Ok(()) => reply,
            Err(e) => CmdError::from(e).to_frame(),
        };
    }
    let scope = if spec.has(flags::TENANT_WIDE) {
        Scope::Tenant(db)
    } else {
        match spec.named_keyspaces(&shared.tenancy, db, args) {
            Named::Selected => Scope::Keyspace(db),
            Named::Target { from, to } => Scope::Across { from, to },
            Named::Swap(a, b) => Scope::Swap(a, b),
        }
    };
    let mut txn = match WriteTxn::begin(shared, client, scope, now_ms, spec.has(flags::DENYOOM)) {
        Ok(txn) => txn,
        Err(e) => return CmdError::from(e).to_frame(),
    };
    let reply = if spec.has(flags::SELF_LOGGED) {
        txn.apply(|client| {
            let reply = run(shared, client, spec, args, now_ms);
            note_ready_keys(shared, client, spec, db, args);
            reply
        })
    } else {
        let applied = txn.apply_command(
            db,
            args,
            |client, args| {
                let reply = run(shared, client, spec, args, now_ms);
                note_ready_keys(shared, client, spec, db, args);
                reply
            },
            |reply| !reply.is_error(),
        );
        match applied {
            Ok(reply) => reply,
            Err(e) => return CmdError::from(e).to_frame(),
        }
    };
    match txn.commit() {
        Ok(()) => reply,
        Err(e) => CmdError::from(e).to_frame(),
    }
}

/// Run a command whose checks have passed, with the clock at `now_ms`. The caller holds the store
/// gate as appropriate.
pub fn run(
    shared: &Shared,
    client: &mut ClientState,
    spec: &CommandSpec,
    args: &[Bytes],
    now_ms: u64,
) -> Frame {
    // Keyspace notifications no handler publishes itself (`new`, `keymiss`, expirations, the
    // row's events) are worked out around it (see `notify`).
    let before = crate::notify::before(shared, client, spec, args, now_ms);
    let mut ctx = Ctx {
        shared,
        client,
        now_ms,
    };
    let reply = match (spec.handler)(&mut ctx, args) {
        Ok(frame) => frame,
        Err(e) => e.to_frame(),
    };
    crate::notify::after(shared, client, spec, before, &reply, now_ms);
    // A read remembers its keys for client-side caching, wherever it runs (alone, in EXEC, in
    // a script: the caller's connection tracks them, as in Redis).
    if client.tracking.is_some() && spec.has(flags::READONLY) {
        remember_read(shared, client, spec, args);
    }
    reply
}

/// A command of the table refused before it ran: counted as rejected (Redis'
/// `rejected_calls`), then as [`reject`].
fn rejected(
    shared: &Shared,
    client: &mut ClientState,
    row: &'static CommandSpec,
    err: CmdError,
) -> Frame {
    shared.observer.finish_command(
        &shared.live,
        client,
        row,
        &[],
        std::time::Duration::ZERO,
        Outcome::Rejected,
    );
    reject(client, err)
}

/// A command refused with BUSY (a script is past `busy-reply-threshold`), counted as rejected.
/// EXEC discards the transaction and says why, as Redis' `execCommandAbort`; any other command
/// marks an open transaction as failed.
fn refused_while_busy(
    shared: &Shared,
    client: &mut ClientState,
    spec: &'static CommandSpec,
    row: &'static CommandSpec,
    busy: &str,
) -> Frame {
    let text = if spec.has(flags::RUNS_QUEUED) {
        client.clear_transaction();
        format!("EXECABORT Transaction discarded because of: {busy}")
    } else {
        busy.to_string()
    };
    rejected(shared, client, row, CmdError::Other(text))
}

/// An error before queueing marks an open transaction as failed (EXEC will answer EXECABORT).
fn reject(client: &mut ClientState, err: CmdError) -> Frame {
    if let Some(multi) = client.multi.as_mut() {
        multi.dirty = true;
    }
    err.to_frame()
}

/// Redis' text: `unknown command 'foo', with args beginning with: 'a' 'b' `.
fn unknown_command(args: &[Bytes]) -> CmdError {
    let name: String = String::from_utf8_lossy(&args[0])
        .chars()
        .take(128)
        .collect();
    let mut shown = String::new();
    for a in args.iter().skip(1) {
        if shown.len() >= 128 {
            break;
        }
        let a: String = String::from_utf8_lossy(a).chars().take(128).collect();
        shown.push_str(&format!("'{a}' "));
    }
    CmdError::UnknownCommand { name, args: shown }
}
