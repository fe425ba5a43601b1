//! Server commands: INFO, CONFIG, COMMAND, DBSIZE, FLUSHDB, FLUSHALL, TIME, SHUTDOWN.
//!
//! `COMMAND` output is generated from the command table; `CONFIG` reads the settings table
//! ([`crate::settings`]), which reads and writes the live settings; nothing here keeps its own copy
//! of either.
//!
//! May import: `settings`, `info`, `persist` (snapshots), `client` (deferred replies), `state`.

use super::{cmd, flags, sub, table, CommandSpec, Ctx, NO_KEYS};
use crate::args::{is, show};
use crate::client::Deferred;
use crate::error::{CmdError, CmdResult};
use crate::settings;
use crate::tenancy::acl::category;
use bytes::Bytes;
use gradus_proto::Frame;
use gradus_store::glob::glob_match;
use std::sync::atomic::{AtomicU64, Ordering};

const ADMIN: u32 = flags::ADMIN | flags::LOADING;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("info", -1, flags::LOADING | flags::WHOLE_STORE, NO_KEYS, "server", "Returns information and statistics about the server.", info).with_acl(category::DANGEROUS),
    cmd("config", -2, ADMIN, NO_KEYS, "server", "A container for server configuration commands.", config).with_subcommands(&[
        sub("config|get", -3, ADMIN | flags::LOADING, "Returns the effective values of configuration parameters."),
        sub("config|set", -4, ADMIN, "Sets configuration parameters in-flight."),
        sub("config|resetstat", 2, ADMIN, "Resets the server's statistics."),
        sub("config|rewrite", 2, ADMIN, "Persists the effective configuration to file."),
        sub("config|help", 2, flags::LOADING, "Returns helpful text about the different subcommands."),
    ]),
    cmd("command", -1, flags::LOADING, NO_KEYS, "server", "Returns detailed information about all commands.", command).with_subcommands(&[
        sub("command|count", 2, flags::LOADING, "Returns a count of commands."),
        sub("command|list", -2, flags::LOADING, "Returns a list of command names."),
        sub("command|info", -2, flags::LOADING, "Returns information about one, multiple or all commands."),
        sub("command|docs", -2, flags::LOADING, "Returns documentary information about one, multiple or all commands."),
        sub("command|getkeys", -3, flags::LOADING, "Extracts the key names from an arbitrary command."),
        sub("command|getkeysandflags", -3, flags::LOADING, "Extracts the key names and access flags for an arbitrary command."),
        sub("command|help", 2, flags::LOADING, "Returns helpful text about the different subcommands."),
    ]),
    cmd("dbsize", 1, flags::READONLY | flags::FAST | flags::READS_KEYSPACE, NO_KEYS, "server", "Returns the number of keys in the database.", dbsize).with_acl(category::KEYSPACE),
    cmd("flushdb", -1, flags::WRITE | flags::FLUSHES, NO_KEYS, "server", "Removes all keys from the current keyspace, in O(1).", flushdb),
    cmd("flushall", -1, flags::WRITE | flags::FLUSHES | flags::TENANT_WIDE, NO_KEYS, "server", "Removes all keys from every keyspace of the caller's tenant, in O(1).", flushall),
    cmd("purge", 2, flags::WRITE | flags::FLUSHES, NO_KEYS, "server", "Removes every key starting with the given prefix from the current keyspace; returns how many.", purge),
    cmd("time", 1, flags::FAST | flags::LOADING | flags::RANDOM, NO_KEYS, "server", "Returns the server time.", time),
    cmd("lolwut", -1, flags::READONLY | flags::FAST, NO_KEYS, "server", "Displays computer art and the Redis version", lolwut),
    cmd("save", 1, ADMIN | flags::NO_MULTI, NO_KEYS, "server", "Synchronously saves the database(s) to disk.", save),
    cmd("bgsave", -1, ADMIN | flags::NO_MULTI, NO_KEYS, "server", "Asynchronously saves the database(s) to disk.", bgsave),
    cmd("bgrewriteaof", 1, ADMIN | flags::NO_MULTI, NO_KEYS, "server", "Asynchronously rewrites the append-only file to disk (here: a snapshot, after which the log it covers is removed).", bgrewriteaof),
    cmd("lastsave", 1, flags::LOADING | flags::FAST | flags::RANDOM, NO_KEYS, "server", "Returns the Unix timestamp of the last successful save to disk.", lastsave),
    // Not `noscript` since Redis 7.2: in a script, as inside MULTI, WAIT answers at once.
    cmd("wait", 3, 0, NO_KEYS, "generic", "Blocks until the asynchronous replication of all preceding write commands sent by the connection is completed.", wait),
    cmd("waitaof", 4, flags::NO_MULTI, NO_KEYS, "generic", "Blocks until all of the preceding write commands sent by the connection are written to the append-only file of the master and/or replicas.", waitaof),
    cmd("monitor", 1, ADMIN | flags::NO_MULTI | flags::NOSCRIPT | flags::LOADING, NO_KEYS, "server", "Listens for all requests received by the server in real-time.", monitor),
    // Runs while a script is past busy-reply-threshold (Redis' allow_busy: SHUTDOWN NOSAVE ends
    // such a script), so without the store gate, which that script may hold.
    cmd("shutdown", -1, ADMIN | flags::NO_MULTI | flags::ALLOW_BUSY | flags::OWN_GATE, NO_KEYS, "server", "Synchronously saves the database(s) to disk and shuts down the Redis server.", shutdown),
];

fn info(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sections: Vec<String> = args[1..]
        .iter()
        .map(|a| String::from_utf8_lossy(a).to_lowercase())
        .collect();
    let viewer = crate::info::Viewer {
        tenant: ctx.client.tenant,
        admin: ctx.client.perms.contains(crate::tenancy::Perms::ADMIN),
    };
    let text = crate::info::render(ctx.shared, &viewer, &sections);
    Ok(Frame::Verbatim {
        format: *b"txt",
        text: Bytes::from(text),
    })
}

fn dbsize(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    Ok(Frame::Integer(ctx.db().len() as i64))
}

/// Parse the optional ASYNC|SYNC argument of FLUSHDB/FLUSHALL; true = async.
fn flush_mode(args: &[Bytes]) -> Result<bool, CmdError> {
    match args.len() {
        1 => Ok(false),
        2 if is(&args[1], "async") => Ok(true),
        2 if is(&args[1], "sync") => Ok(false),
        _ => Err(CmdError::Syntax),
    }
}

/// Free flushed contents on a background thread: a flush detaches the maps in O(1) and the reply
/// never waits for millions of frees (SYNC and ASYNC are accepted and behave alike; the keys are
/// gone for every client the moment the command returns either way).
///
/// INFO's `lazyfree_pending_objects` / `lazyfreed_objects` count these background frees (one
/// per flushed keyspace: Redis counts values; tools and Redis' tests wait for the pending
/// figure to reach 0). Process-wide, like the server they describe.
pub(crate) fn dispose<T: Send + 'static>(old: T) {
    dispose_counted(old, 1);
}

/// [`dispose`] of `objects` objects at once (UNLINK's big values of one command).
pub(crate) fn dispose_counted<T: Send + 'static>(old: T, objects: u64) {
    LAZYFREE_PENDING.fetch_add(objects, Ordering::Relaxed);
    let job = Reclaim {
        old: Box::new(old),
        objects,
    };
    let sent = match reclaimer() {
        Some(queue) => queue.send(job).map_err(|e| e.0),
        None => Err(job),
    };
    if let Err(job) = sent {
        tracing::warn!("no reclaim thread; freed inline");
        LAZYFREE_PENDING.fetch_sub(job.objects, Ordering::Relaxed);
        drop(job.old);
    }
}

/// What the reclaim thread frees, and how many objects it counts as.
struct Reclaim {
    old: Box<dyn Send>,
    objects: u64,
}

/// The one reclaim thread's queue, started on first use (Redis' lazyfree background thread):
/// frees what it is sent, in order. None if the thread could not be started.
fn reclaimer() -> Option<&'static std::sync::mpsc::Sender<Reclaim>> {
    static QUEUE: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Reclaim>>> =
        std::sync::OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<Reclaim>();
            std::thread::Builder::new()
                .name("gradus-reclaim".into())
                .spawn(move || {
                    for job in rx {
                        drop(job.old);
                        LAZYFREE_PENDING.fetch_sub(job.objects, Ordering::Relaxed);
                        LAZYFREED.fetch_add(job.objects, Ordering::Relaxed);
                    }
                })
                .map_err(|e| tracing::warn!(error = %e, "cannot start the reclaim thread"))
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// Flushed keyspaces being freed in the background now, and freed so far (see [`dispose`]).
pub(crate) static LAZYFREE_PENDING: AtomicU64 = AtomicU64::new(0);
pub(crate) static LAZYFREED: AtomicU64 = AtomicU64::new(0);

fn flushdb(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    flush_mode(args)?;
    dispose(ctx.db().flush());
    let waited = ctx.shared.blocked.keys_waited_in(&[ctx.client.db]);
    ctx.client.ready_keys.extend(waited);
    Ok(Frame::ok())
}

/// Empties the keyspaces of the tenant that owns the selected keyspace (on replay, too, the
/// record's keyspace names the tenant).
fn flushall(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    flush_mode(args)?;
    let shared = ctx.shared;
    let Some(tenant) = shared.tenancy.tenant_of(ctx.client.db) else {
        return Ok(Frame::ok());
    };
    let keyspaces = &shared.tenancy.tenants[tenant].keyspaces;
    let old: Vec<_> = keyspaces
        .iter()
        .filter_map(|&g| shared.store.db(g))
        .map(|k| k.flush())
        .collect();
    dispose(old);
    let waited = shared.blocked.keys_waited_in(keyspaces);
    ctx.client.ready_keys.extend(waited);
    Ok(Frame::ok())
}

fn purge(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let removed = ctx.db().purge_prefix(&args[1], ctx.now_ms);
    Ok(Frame::Integer(removed as i64))
}

fn time(_ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Ok(Frame::Array(vec![
        Frame::Bulk(Bytes::from(now.as_secs().to_string())),
        Frame::Bulk(Bytes::from(now.subsec_micros().to_string())),
    ]))
}

/// LOLWUT [VERSION v ...]: the version line Redis' own (unstable) LOLWUT replies with. The
/// drawings of `VERSION 5` and `VERSION 6` are not drawn: those get the line too.
fn lolwut(_ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args.len() >= 3 && is(&args[1], "version") {
        crate::args::parse_i64(&args[2]).ok_or(CmdError::NotInteger)?;
    }
    Ok(Frame::Verbatim {
        format: *b"txt",
        text: Bytes::from(format!("Redis ver. {}\n", crate::REDIS_COMPAT_VERSION)),
    })
}

/// SAVE/BGSAVE need a log to snapshot into and no snapshot already running.
fn check_snapshot_possible(ctx: &Ctx<'_>) -> Result<(), CmdError> {
    let persist = &ctx.shared.persist;
    if persist.log.get().is_none() {
        return Err(CmdError::err(
            "nothing to save: every database has durability none",
        ));
    }
    if persist.snapshot_pending() {
        return Err(CmdError::err("Background save already in progress"));
    }
    Ok(())
}

fn save(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    check_snapshot_possible(ctx)?;
    // Run off the async workers; the reply waits for it.
    ctx.client.deferred = Some(Deferred::new("snapshot", |shared, _client| {
        Box::pin(async move {
            let s = shared.clone();
            match tokio::task::spawn_blocking(move || crate::persist::snapshot::take_snapshot(&s))
                .await
            {
                Ok(Ok(_)) => Frame::ok(),
                Ok(Err(e)) => Frame::Error(format!("ERR {e}")),
                Err(e) => Frame::Error(format!("ERR snapshot task failed: {e}")),
            }
        })
    }));
    Ok(Frame::ok())
}

fn bgsave(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args.len() > 2 || (args.len() == 2 && !is(&args[1], "schedule")) {
        return Err(CmdError::Syntax);
    }
    // BGSAVE SCHEDULE while a snapshot runs: another one follows it (Redis schedules it when an
    // AOF rewrite runs, and refuses like plain BGSAVE when a BGSAVE does; here both are snapshots).
    background_snapshot(
        ctx,
        args.len() == 2,
        "Background saving started",
        "Background saving scheduled",
    )
}

/// BGREWRITEAOF: Redis rewrites its append-only file so it stops growing. Here a snapshot does
/// that job: once it is durable, the log segments it covers are removed. While a snapshot runs,
/// another one is scheduled after it, as Redis schedules a rewrite asked for during a BGSAVE.
fn bgrewriteaof(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    background_snapshot(
        ctx,
        true,
        "Background append only file rewriting started",
        "Background append only file rewriting scheduled",
    )
}

/// Start a snapshot in the background (reply `started`), or, if one runs and `schedule`, ask for
/// another after it (reply `scheduled`); otherwise refuse as `check_snapshot_possible` does.
fn background_snapshot(
    ctx: &Ctx<'_>,
    schedule: bool,
    started: &'static str,
    scheduled: &'static str,
) -> CmdResult {
    let reply = if schedule
        && ctx.shared.persist.log.get().is_some()
        && ctx.shared.persist.snapshot_pending()
    {
        scheduled
    } else {
        check_snapshot_possible(ctx)?;
        started
    };
    request_snapshot(ctx);
    Ok(Frame::Simple(reply.into()))
}

/// Ask the snapshot task for a snapshot: the next one it can start (at once, or after the one
/// running), whatever its automatic triggers say.
fn request_snapshot(ctx: &Ctx<'_>) {
    ctx.shared
        .persist
        .snapshot_requested
        .store(true, Ordering::Release);
    ctx.shared.snapshot_request.notify_one();
}

fn lastsave(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    Ok(Frame::Integer(
        ctx.shared.persist.last_save_unix.load(Ordering::Relaxed) as i64,
    ))
}

/// WAITAOF numlocal numreplicas timeout (Redis 7.2): completes in the connection once the
/// connection's last write is fsynced locally and acknowledged by `numreplicas` replicas.
fn waitaof(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let numlocal = crate::args::int_arg(&args[1])?;
    let numreplicas = crate::args::int_arg(&args[2])?;
    let timeout = crate::args::int_arg(&args[3])
        .map_err(|_| CmdError::err("timeout is not an integer or out of range"))?;
    if numlocal < 0 || numreplicas < 0 {
        return Err(CmdError::NotInteger);
    }
    if timeout < 0 {
        return Err(CmdError::err("timeout is negative"));
    }
    if numlocal > 0 && ctx.shared.persist.log.get().is_none() {
        return Err(CmdError::err(
            "WAITAOF cannot be used when numlocal is set but appendonly is disabled.",
        ));
    }
    let lsn = ctx.client.last_write_lsn;
    ctx.client.deferred = Some(Deferred::new("waitaof", move |shared, client| {
        Box::pin(wait_aof(
            shared,
            client,
            lsn,
            numlocal,
            numreplicas,
            timeout as u64,
        ))
    }));
    Ok(Frame::ok())
}

/// WAIT numreplicas timeout: answers how many replicas acknowledged (REPLCONF ACK) the
/// replication offset of this connection's last write, once `numreplicas` have or the timeout
/// (ms; 0: none) has passed. A replica acknowledges a record once its own log has it durable at
/// its degree. Inside MULTI or a script, or when enough have acknowledged already, it answers at
/// once (as Redis).
fn wait(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let numreplicas = crate::args::int_arg(&args[1])?;
    let timeout = crate::args::int_arg(&args[2])
        .map_err(|_| CmdError::err("timeout is not an integer or out of range"))?;
    if timeout < 0 {
        return Err(CmdError::err("timeout is negative"));
    }
    if ctx.shared.repl.is_replica() {
        return Err(CmdError::err("WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated."));
    }
    let offset = ctx.client.repl_offset;
    let acked = ctx.shared.repl.acked_at_least(offset) as i64;
    if acked >= numreplicas || ctx.client.in_transaction() {
        return Ok(Frame::Integer(acked));
    }
    ctx.client.deferred = Some(Deferred::new("wait", move |shared, client| {
        Box::pin(async move {
            let acked = wait_for_acks(shared, client, offset, numreplicas, timeout as u64).await;
            Frame::Integer(acked as i64)
        })
    }));
    Ok(Frame::Null)
}

/// Wait until `numreplicas` replicas acknowledged `offset`, the timeout passes (ms; 0: none),
/// the connection is killed or the server shuts down; returns how many acknowledged it.
async fn wait_for_acks(
    shared: std::sync::Arc<crate::state::Shared>,
    client: &mut crate::client::ClientState,
    offset: u64,
    numreplicas: i64,
    timeout_ms: u64,
) -> usize {
    let handle = client.handle.clone();
    let mut shutdown = shared.shutdown.subscribe();
    let repl = &shared.repl;
    let deadline = (timeout_ms > 0)
        .then(|| tokio::time::Instant::now() + std::time::Duration::from_millis(timeout_ms));
    loop {
        let notified = repl.acked.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let acked = repl.acked_at_least(offset);
        if acked as i64 >= numreplicas {
            return acked;
        }
        let timeout = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = notified => {}
            _ = timeout => return repl.acked_at_least(offset),
            _ = handle.killed() => return repl.acked_at_least(offset),
            _ = shutdown.wait_for(|down| *down) => return repl.acked_at_least(offset),
        }
    }
}

/// WAITAOF's reply `[local, replicas]`: forces the fsync covering `lsn` when `numlocal` > 0;
/// then waits for `numreplicas` replicas to acknowledge the connection's last write (a replica
/// acknowledges only what its own log made durable: Redis' `FACK`), or the timeout.
async fn wait_aof(
    shared: std::sync::Arc<crate::state::Shared>,
    client: &mut crate::client::ClientState,
    lsn: u64,
    numlocal: i64,
    numreplicas: i64,
    timeout_ms: u64,
) -> Frame {
    let deadline = (timeout_ms > 0).then(|| std::time::Duration::from_millis(timeout_ms));
    let mut local = 0;
    if let Some(log) = shared.persist.log.get().cloned() {
        if numlocal > 0 && log.durable_lsn() < lsn {
            // Force the fsync rather than wait for the background one.
            let sync = tokio::task::spawn_blocking(move || log.sync_now());
            let synced = match deadline {
                Some(d) => tokio::time::timeout(d, sync).await.ok(),
                None => Some(sync.await),
            };
            if let Some(Ok(Err(e))) = synced {
                return Frame::Error(format!("ERR {e}"));
            }
        }
        if shared
            .persist
            .log
            .get()
            .is_some_and(|l| l.durable_lsn() >= lsn)
        {
            local = 1;
        }
    }
    let offset = client.repl_offset;
    let replicas = if numreplicas > 0 {
        wait_for_acks(shared, client, offset, numreplicas, timeout_ms).await
    } else {
        shared.repl.acked_at_least(offset)
    };
    Frame::Array(vec![Frame::Integer(local), Frame::Integer(replicas as i64)])
}

fn shutdown(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    for a in &args[1..] {
        if !(is(a, "nosave") || is(a, "save") || is(a, "now") || is(a, "force")) {
            if is(a, "abort") {
                return Err(CmdError::err("No shutdown in progress."));
            }
            return Err(CmdError::Syntax);
        }
    }
    // While a script is past busy-reply-threshold only SHUTDOWN NOSAVE runs (Redis): the
    // script's writes are never logged, and the process exits without waiting for it.
    if !args[1..].iter().any(|a| is(a, "nosave")) {
        if let Some(busy) = super::scripting::busy_error() {
            return Err(CmdError::Other(busy.to_string()));
        }
    }
    tracing::info!(client = ctx.client.id, "SHUTDOWN requested");
    ctx.shared.request_shutdown();
    // Like Redis: no reply, the connection just closes.
    ctx.client.suppress_reply = true;
    ctx.client.close_after_reply = true;
    Ok(Frame::ok())
}

/// CONFIG GET pattern [pattern ...]: every setting (and reported value) whose name matches one of
/// the glob patterns (ASCII case-insensitive), each once. As in Redis, a setting found by an
/// argument without `*`, `?` or `[` is named as that argument was typed.
fn config_get(ctx: &Ctx<'_>, patterns: &[Bytes]) -> Frame {
    let reply_name = |name: &'static str| -> Option<Bytes> {
        let first = patterns
            .iter()
            .find(|p| glob_match(&p.to_ascii_lowercase(), name.as_bytes()))?;
        Some(if first.iter().any(|b| b"*?[".contains(b)) {
            Bytes::from_static(name.as_bytes())
        } else {
            first.clone()
        })
    };
    let settings = settings::SETTINGS
        .iter()
        .filter_map(|s| Some((reply_name(s.name)?, s.current(ctx.shared))));
    let aliases = settings::ALIASES.iter().filter_map(|(alias, _)| {
        let row = settings::find(alias)?;
        Some((reply_name(alias)?, row.current(ctx.shared)))
    });
    let reported = settings::REPORTED
        .iter()
        .filter_map(|(name, get)| Some((reply_name(name)?, get(ctx.shared))));
    Frame::Map(
        settings
            .chain(aliases)
            .chain(reported)
            .map(|(name, value)| (Frame::Bulk(name), Frame::Bulk(Bytes::from(value))))
            .collect(),
    )
}

/// CONFIG SET name value [name value ...], as Redis does it: every name is looked up first (the
/// first unknown, immutable or repeated one fails the command), then every value is parsed, and
/// only when all are valid are they applied, so a failure changes nothing.
fn config_set(ctx: &Ctx<'_>, pairs: &[Bytes]) -> CmdResult {
    let failed = |name: &str, why: &str| {
        CmdError::err(format!(
            "CONFIG SET failed (possibly related to argument '{name}') - {why}"
        ))
    };
    let mut rows: Vec<(&settings::Setting, &settings::Live, &Bytes)> = Vec::new();
    for pair in pairs.chunks_exact(2) {
        let (name, value) = (&pair[0], &pair[1]);
        let row = std::str::from_utf8(name).ok().and_then(settings::find);
        let reported = settings::REPORTED
            .iter()
            .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name));
        let Some(row) = row else {
            if let Some((_, read)) = reported {
                // As for an immutable row below: its own value is accepted.
                if value.eq_ignore_ascii_case(read(ctx.shared).as_bytes()) {
                    continue;
                }
                return Err(failed(&show(name), "can't set immutable config"));
            }
            return Err(CmdError::err(format!(
                "Unknown option or number of arguments for CONFIG SET - '{}'",
                show(name)
            )));
        };
        let Some(live) = &row.live else {
            // Set to the value in force: nothing to change (tools that write every setting back,
            // such as Redis' own "CONFIG sanity" check, set `bind` or `port`, which Redis can
            // change at run time, to what they read).
            let same = row
                .kind
                .parse(&show(value))
                .is_ok_and(|v| v.text() == row.current(ctx.shared));
            if same {
                continue;
            }
            return Err(failed(&show(name), "can't set immutable config"));
        };
        if rows.iter().any(|(r, _, _)| std::ptr::eq(*r, row)) {
            return Err(failed(&show(name), "duplicate parameter"));
        }
        rows.push((row, live, value));
    }
    let mut parsed = Vec::with_capacity(rows.len());
    for (row, live, value) in rows {
        let v = row
            .kind
            .parse(&show(value))
            .map_err(|why| failed(row.name, &why))?;
        parsed.push((row, live, v));
    }
    let previous: Vec<_> = parsed
        .iter()
        .map(|(_, live, _)| (live.get)(&ctx.shared.live))
        .collect();
    for (_, live, v) in &parsed {
        (live.set)(&ctx.shared.live, v);
    }
    // Then each distinct apply step once (CONFIG SET tls-cert-file A tls-key-file B loads the
    // pair together); if one fails, every value goes back to what it was.
    let mut applied: Vec<settings::Apply> = Vec::new();
    for (row, live, _) in &parsed {
        let Some(apply) = live.apply else { continue };
        if applied.iter().any(|a| *a as usize == apply as usize) {
            continue;
        }
        applied.push(apply);
        if let Err(why) = apply(ctx.shared) {
            for ((_, live, _), old) in parsed.iter().zip(&previous) {
                (live.set)(&ctx.shared.live, old);
            }
            return Err(failed(row.name, &why));
        }
    }
    Ok(Frame::ok())
}

/// CONFIG REWRITE: the settings in force (CONFIG SET's, and those changed by commands such as
/// REPLICAOF) written back into the config file the server started with (see
/// [`crate::config_rewrite`]); Redis' errors when there is none or it cannot be written.
fn config_rewrite(ctx: &Ctx<'_>) -> CmdResult {
    use crate::config_rewrite::{rewrite_text, strerror, write_atomically, RewriteError};
    let Some(path) = &ctx.shared.config_file else {
        return Err(CmdError::err("The server is running without a config file"));
    };
    // Serialises rewrites: two at once would each write the file from the same old text.
    static REWRITING: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    let _one_at_a_time = REWRITING.lock();
    let result = (|| {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            // As Redis: a file removed since start-up is written anew.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(RewriteError::Io(e)),
        };
        let new = rewrite_text(&text, |row| row.current_value(ctx.shared))?;
        if new != text {
            write_atomically(path, &new)?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => {
            tracing::info!("CONFIG REWRITE executed with success.");
            Ok(Frame::ok())
        }
        Err(e) => {
            let why = match &e {
                RewriteError::Io(io) => strerror(io),
                other => other.to_string(),
            };
            tracing::warn!("CONFIG REWRITE failed: {why}");
            Err(CmdError::err(format!("Rewriting config file: {why}")))
        }
    }
}

/// CONFIG HELP, Redis 7's text (the table had the row, the handler did not answer it).
const CONFIG_HELP: &[&str] = &[
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern>",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value>",
    "    Set the configuration <directive> to <value>.",
    "RESETSTAT",
    "    Reset statistics reported by the INFO command.",
    "REWRITE",
    "    Rewrite the configuration file.",
    "HELP",
    "    Print this help.",
];

fn config(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&args[1]).to_lowercase();
    match sub.as_str() {
        "get" if args.len() >= 3 => Ok(config_get(ctx, &args[2..])),
        "set" if args.len() >= 4 && args.len().is_multiple_of(2) => config_set(ctx, &args[2..]),
        "set" if args.len() >= 4 => Err(CmdError::Syntax),
        "resetstat" if args.len() == 2 => {
            let s = &ctx.shared.stats;
            for counter in [
                &s.commands_processed,
                &s.keyspace_hits,
                &s.keyspace_misses,
                &s.rejected_connections,
                &s.connections_received,
                &s.net_input_bytes,
                &s.net_output_bytes,
            ] {
                counter.store(0, Ordering::Relaxed);
            }
            ctx.shared.observer.commands.reset();
            LAZYFREED.store(0, Ordering::Relaxed);
            s.error_replies.store(0, Ordering::Relaxed);
            s.evicted_clients.store(0, Ordering::Relaxed);
            s.errors_by_code.lock().clear();
            Ok(Frame::ok())
        }
        "rewrite" if args.len() == 2 => config_rewrite(ctx),
        "help" if args.len() == 2 => Ok(Frame::Array(
            CONFIG_HELP
                .iter()
                .map(|l| Frame::Simple((*l).into()))
                .collect(),
        )),
        "get" | "set" | "resetstat" | "rewrite" | "help" => Err(CmdError::err(format!(
            "wrong number of arguments for 'config|{sub}' command"
        ))),
        _ => Err(CmdError::UnknownSubcommand {
            cmd: "CONFIG".into(),
            sub: show(&args[1]),
        }),
    }
}

fn simple(s: &str) -> Frame {
    Frame::Simple(s.to_string().into())
}

fn bulk(s: &str) -> Frame {
    Frame::Bulk(Bytes::from(s.to_string()))
}

/// `COMMAND INFO` entry for one spec (Redis 7 shape: 10 fields, the last its subcommands').
fn command_info(spec: &CommandSpec) -> Frame {
    info_entry(spec, spec)
}

/// A row's `COMMAND INFO` entry; `container`: the command's own row (itself, or a subcommand's container).
fn info_entry(spec: &CommandSpec, container: &CommandSpec) -> Frame {
    Frame::Array(vec![
        bulk(spec.name),
        Frame::Integer(spec.arity as i64),
        Frame::Set(spec.flag_names().into_iter().map(simple).collect()),
        Frame::Integer(spec.first_key as i64),
        Frame::Integer(spec.last_key as i64),
        Frame::Integer(spec.step as i64),
        Frame::Set(
            acl_categories(spec, container)
                .into_iter()
                .map(|c| Frame::Simple(c.into()))
                .collect(),
        ),
        Frame::Set(vec![]),
        Frame::Array(vec![]),
        Frame::Array(
            spec.subcommands
                .iter()
                .map(|sub| info_entry(sub, container))
                .collect(),
        ),
    ])
}

/// Redis' ACL categories of a command (`@read`, `@string` …), from its table row.
fn acl_categories(spec: &CommandSpec, container: &CommandSpec) -> Vec<String> {
    let bits = crate::tenancy::acl::categories(spec, container);
    crate::tenancy::acl::category::NAMES
        .iter()
        .filter(|(_, bit)| bits & bit != 0)
        .map(|(name, _)| format!("@{name}"))
        .collect()
}

fn command_docs(spec: &CommandSpec) -> Frame {
    let mut doc = vec![
        (bulk("summary"), bulk(spec.summary)),
        (bulk("since"), bulk("1.0.0")),
        (bulk("group"), bulk(spec.group)),
    ];
    if !spec.subcommands.is_empty() {
        let subs = spec
            .subcommands
            .iter()
            .map(|sub| {
                let entry = vec![
                    (bulk("summary"), bulk(sub.summary)),
                    (bulk("since"), bulk("1.0.0")),
                    (bulk("group"), bulk(spec.group)),
                ];
                (bulk(sub.name), Frame::Map(entry))
            })
            .collect();
        doc.push((bulk("subcommands"), Frame::Map(subs)));
    }
    Frame::Map(doc)
}

/// COMMAND LIST [FILTERBY MODULE name|ACLCAT category|PATTERN pattern], as Redis 7 answers it:
/// every command's name and, after it, its subcommands' `container|sub` names; the pattern
/// matched without case against those names; no modules exist, so FILTERBY MODULE lists none.
fn command_list(options: &[Bytes]) -> CmdResult {
    enum Filter {
        None,
        Module,
        Category(u32),
        Pattern(Vec<u8>),
    }
    let filter = match options {
        [] => Filter::None,
        [by, kind, arg] if is(by, "filterby") => {
            if is(kind, "module") {
                Filter::Module
            } else if is(kind, "aclcat") {
                let name = String::from_utf8_lossy(arg).to_ascii_lowercase();
                let bit = category::NAMES
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map_or(0, |(_, bit)| *bit);
                Filter::Category(bit)
            } else if is(kind, "pattern") {
                Filter::Pattern(arg.to_ascii_lowercase())
            } else {
                return Err(CmdError::Syntax);
            }
        }
        _ => return Err(CmdError::Syntax),
    };
    let mut names = Vec::new();
    for &spec in table().all() {
        // A subcommand row's name is already its full `container|sub` name.
        for row in std::iter::once(spec).chain(spec.subcommands.iter()) {
            let name = row.name;
            let listed = match &filter {
                Filter::None => true,
                Filter::Module => false,
                Filter::Category(bit) => {
                    *bit != 0 && crate::tenancy::acl::categories(row, spec) & bit != 0
                }
                Filter::Pattern(p) => glob_match(p, name.as_bytes()),
            };
            if listed {
                names.push(bulk(name));
            }
        }
    }
    Ok(Frame::Array(names))
}

fn command(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let _ = ctx;
    let t = table();
    if args.len() == 1 {
        return Ok(Frame::Array(
            t.all().iter().map(|s| command_info(s)).collect(),
        ));
    }
    let sub = String::from_utf8_lossy(&args[1]).to_lowercase();
    match sub.as_str() {
        "count" if args.len() == 2 => Ok(Frame::Integer(t.len() as i64)),
        "list" => command_list(&args[2..]),
        "info" => {
            if args.len() == 2 {
                return Ok(Frame::Array(
                    t.all().iter().map(|s| command_info(s)).collect(),
                ));
            }
            Ok(Frame::Array(
                args[2..]
                    .iter()
                    .map(|n| t.get(n).map_or(Frame::NullArray, command_info))
                    .collect(),
            ))
        }
        "docs" => {
            let specs: Vec<&CommandSpec> = if args.len() == 2 {
                t.all().to_vec()
            } else {
                args[2..].iter().filter_map(|n| t.get(n)).collect()
            };
            Ok(Frame::Map(
                specs
                    .into_iter()
                    .map(|s| (bulk(s.name), command_docs(s)))
                    .collect(),
            ))
        }
        "getkeys" | "getkeysandflags" if args.len() >= 3 => {
            get_keys(&args[2..], sub.as_str() == "getkeysandflags")
        }
        "help" => Ok(Frame::Array(
            [
                "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "(no subcommand)",
                "    Return details about all commands.",
                "COUNT",
                "    Return the total number of commands in this server.",
                "LIST",
                "    Return a list of all commands in this server.",
                "INFO [<command-name> ...]",
                "    Return details about multiple commands.",
                "DOCS [<command-name> ...]",
                "    Return documentation details about multiple commands.",
                "GETKEYS <full-command>",
                "    Return the keys from a full command.",
                "GETKEYSANDFLAGS <full-command>",
                "    Return the keys and the access flags from a full command.",
                "HELP",
                "    Print this help.",
            ]
            .iter()
            .map(|l| simple(l))
            .collect(),
        )),
        _ => Err(CmdError::UnknownSubcommand {
            cmd: "COMMAND".into(),
            sub: show(&args[1]),
        }),
    }
}

/// COMMAND GETKEYS / GETKEYSANDFLAGS of the command `inner`, with Redis' checks in its order
/// (`getKeysSubcommandImpl`): the command (or subcommand) is known, it has keys at all, its
/// arity holds; then its keys, or an empty list when it may have none (EVAL … 0), or an error.
/// With `with_flags`, each key comes with its key-spec flags (see `KeyFlags`).
fn get_keys(inner: &[Bytes], with_flags: bool) -> CmdResult {
    let t = table();
    let spec = match t.get(&inner[0]) {
        Some(spec) if !spec.subcommands.is_empty() && inner.len() >= 2 => {
            let row = spec.resolve(inner);
            if std::ptr::eq(row, spec) {
                return Err(CmdError::err("Invalid command specified"));
            }
            row
        }
        Some(spec) => spec,
        None => return Err(CmdError::err("Invalid command specified")),
    };
    if spec.first_key <= 0 && spec.numkeys_at == 0 && spec.store_keyword_from == 0 {
        return Err(CmdError::err("The command has no key arguments"));
    }
    if !spec.arity_ok(inner.len()) {
        return Err(CmdError::err(
            "Invalid number of arguments specified for command",
        ));
    }
    let keys = spec.key_indexes(inner);
    if keys.is_empty() && !spec.has(flags::NO_MANDATORY_KEYS) {
        return Err(CmdError::err("Invalid arguments specified for command"));
    }
    Ok(Frame::Array(
        keys.into_iter()
            .enumerate()
            .map(|(n, i)| {
                let key = Frame::Bulk(inner[i].clone());
                if !with_flags {
                    return key;
                }
                let names = spec.flags_of_key(inner, n);
                let names = names.into_iter().map(simple).collect();
                Frame::Array(vec![key, Frame::Set(names)])
            })
            .collect(),
    ))
}

/// MONITOR: from now on the connection is sent every command its tenant's connections run
/// (see `monitor`).
fn monitor(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    let outbox = ctx.client.outbox();
    ctx.shared.monitors.add(ctx.client.tenant, outbox);
    ctx.client.handle.monitoring.store(true, Ordering::Relaxed);
    Ok(Frame::ok())
}
