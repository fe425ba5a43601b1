//! Lua scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT LOAD|EXISTS|FLUSH|KILL|HELP, FCALL
//! and FCALL_RO, and the Lua side of Redis 7 functions (running a library's code to learn what
//! it registers; the FUNCTION commands are `command::functions`').
//!
//! Scripts run in an embedded Lua 5.1 (the `mlua` crate, vendored), the version Redis uses, in a
//! sandbox (no `os`, `io`, `package`/`require`, `loadfile`, `dofile`, `coroutine`, `debug`). Like
//! Redis, each thread keeps one Lua state and the compiled scripts and libraries ([`Vm`]); as in
//! Redis 7 the globals and the libraries are read-only and each script has its own environment,
//! so no script can leave anything behind for another. The libraries Redis bundles that scripts
//! have here, `bit` and `cjson`, are `lua_bit` and `lua_cjson` (C functions run through
//! [`lua_library_call`]).
//!
//! Atomicity: a script (or function) runs as one write transaction, in one of two ways, chosen
//! before it starts:
//! - **under the locks of its keys** when it declares keys (numkeys > 0) and is not flagged
//!   `allow-cross-slot-keys`: it holds the store gate shared and the shards of its keys for its
//!   whole run (`WriteTxn::begin_keyed`), so scripts on other keys and every other command run
//!   beside it. Every `redis.call` must then name only declared keys, in the caller's
//!   database, and no command that reads or writes the keyspace without naming keys (KEYS,
//!   SCAN, FLUSHDB, INFO's key counts…);
//! - **exclusively** (the store gate's exclusive hold, like EXEC) otherwise: no declared keys,
//!   `allow-cross-slot-keys`, inside MULTI, or a script seen touching an undeclared key before.
//!
//! A key-locked script that touches an undeclared key before it has written anything is
//! stopped, its replies thrown away, and run again exclusively (from then on it always runs
//! exclusively): nothing it did is visible. After a write it cannot start again, so it takes
//! the shards of the keys it names too (`ScriptRun::hold_more`: BullMQ's scripts reach a job's
//! keys from a prefix in ARGV, which standalone Redis allows) and goes on; from then on it runs
//! exclusively. Only an access that cannot be held that way (the whole keyspace, another
//! keyspace, a shard another script — or a multi-key write waiting for one of this script's
//! keys — keeps busy or unlogged for 200 ms: see `persist::write::hold_more`) is an error, as in a Redis Cluster
//! (`Script attempted to access a non local key…`): the writes before it stand, as after any
//! error in a script.
//!
//! Protocol: as in Redis, the commands a run calls see a RESP2 client unless the run has called
//! `redis.setresp(3)` (each run starts at 2, whatever the caller speaks); then their replies
//! reach the script in Redis 7.2's RESP3 forms (`{map=…}`, `{set=…}`, `{double=…}`…: see
//! `lua_stack`), and the booleans the script returns are boolean replies (RESP2: 1 and null).
//! Only the run's own flag is read per call: a run that never calls `setresp` costs nothing
//! more.
//!
//! Either way `redis.call`/`redis.pcall` go through the command table and
//! [`crate::dispatch::run`] with one clock reading for the whole script, and every successful
//! write is collected as a [`LoggedCommand`](crate::persist::record::LoggedCommand); after the
//! script they are appended as ONE record at the strongest degree seen. The log therefore holds
//! the script's *effects*, never its text: replay never runs Lua, so `TIME` or `math.random`
//! inside a script come back with the same values.
//!
//! Long scripts (Redis' BUSY): an instruction-count hook looks at the clock every
//! [`HOOK_EVERY`] instructions. Once a script or function has run `busy-reply-threshold` ms
//! ([`SCRIPT_TIME_LIMIT`] by default; 0: never):
//! - with two worker threads or more (a multi-threaded runtime) it runs on, as in Redis 7.2.
//!   [`SCRIPTS`] counts it, and while it does dispatch refuses every command not flagged
//!   `allow-busy` with `-BUSY Redis is busy running a script. You can only call SCRIPT KILL or
//!   SHUTDOWN NOSAVE.` (`FUNCTION KILL` when only functions are past it), EXEC with `EXECABORT
//!   … BUSY …` (its transaction discarded). SCRIPT KILL / FUNCTION KILL stop it unless it has
//!   written (`UNKILLABLE`; the first write and a kill exclude each other, whichever comes
//!   first wins), and its caller gets Redis' `ERR Script killed by user with SCRIPT KILL...
//!   script: <name>, on @user_script:<line>.` (that text for functions too). SHUTDOWN NOSAVE
//!   exits without waiting for it, so its writes are never logged.
//!   Commands that come while a script holds the store gate exclusively wait for it before
//!   they reach the gate (dispatch, memcached and WATCH call [`admit`] or [`wait_unless_busy`]
//!   first), where they can be told BUSY when it passes the threshold, as Redis answers them; those that wait for the keys of a key-locked script
//!   (its shards) wait until it ends or is killed. No command may be left at the gate behind
//!   an exclusive script, where no BUSY reply reaches it: such a script announces itself
//!   before it takes the gate, waits for the commands admitted before that to finish, and
//!   takes its turn among exclusive scripts where it can itself be told BUSY (see [`admit`]).
//!   And the thread running the script hands its queued tasks and its place among the
//!   workers to a new thread ([`hand_off_worker`], again while it finds it still has them);
//!   else what was queued on it, and the network when the other workers sleep, would wait for
//!   the script (as they may before the threshold: a script occupies its worker while it
//!   runs);
//! - with one worker (a current-thread runtime: the default on two cores) nothing else could
//!   run to answer BUSY or take a KILL, so the hook aborts a script that has not written yet
//!   with `ERR Script killed: it ran longer than the script time limit` (Gradus' own; from then
//!   on it could not write), and lets one that has written run to its end, as Redis never stops
//!   a script halfway through its writes (SCRIPT KILL answers UNKILLABLE then); every other
//!   client waits meanwhile. FUNCTION LOAD's run of a library's code is always aborted after
//!   500 ms.
//!
//! Either way a killed script stays killed if it catches the error with `pcall`. A short run
//! costs what it did (a clock reading per hook call, no allocation or lock); a run holding the
//! gate exclusively adds an uncontended lock and a look at the admission counters; only a run
//! that passes the threshold does more.
//!
//! This module depends on the command table and dispatch only (and on tokio for the hand-off
//! above); it must not touch the log directly other than through `shared.persist`.

mod lua_bit;
mod lua_cjson;
mod lua_cmsgpack;
mod lua_stack;
mod lua_struct;

use super::{cmd, flags, sub, table, CommandSpec, Ctx, Named, NO_KEYS};
use crate::client::ClientState;
use crate::dispatch;
use crate::error::{CmdError, CmdResult};
use crate::functions::{FunctionDef, Library, ScriptFlags};
use crate::persist::write::WriteTxn;
use crate::state::Shared;
use bytes::Bytes;
use gradus_proto::{Frame, ProtocolVersion};
use lua_stack::one_line;
use mlua::{
    ffi, Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState,
};
use parking_lot::{Condvar, Mutex};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::os::raw::c_int;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// `busy-reply-threshold`'s default, as Redis': how long a script runs before other commands
/// are answered BUSY (with one worker: before it is aborted; see the module docs).
pub const SCRIPT_TIME_LIMIT: Duration = Duration::from_secs(5);
/// Redis' replies to a command refused while an EVAL script (`BUSY_SCRIPT`) or only functions
/// (`BUSY_FUNCTION`) run past `busy-reply-threshold`.
pub const BUSY_SCRIPT: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
pub const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";
/// The reply of a script stopped by SCRIPT KILL or FUNCTION KILL (Redis 7.2's text for both;
/// the script's name and line follow).
const KILLED_BY_USER_TEXT: &str = "ERR Script killed by user with SCRIPT KILL...";
/// The reply of a script aborted at the time limit (one worker; see the module docs).
const TIME_LIMIT_TEXT: &str = "ERR Script killed: it ran longer than the script time limit";
/// How long [`hand_off_worker`] waits for its tasks to be picked up before it lets the script
/// run on regardless.
const HAND_OFF_WAIT: Duration = Duration::from_secs(5);
/// How long [`hand_off_worker`] waits after its task was picked up, so the thread given this
/// worker's core has taken it if another worker ran that task (a thread starts in well under a
/// millisecond; this is for a loaded machine, where [`HAND_OFF_AGAIN`] covers the rest).
const HAND_OFF_GRACE: Duration = Duration::from_millis(5);
/// How often a script past the threshold checks that its thread holds no worker core (see
/// [`hand_off_worker`]).
const HAND_OFF_AGAIN: Duration = Duration::from_millis(20);
/// How long [`holds_core`] waits for its task.
const CORE_CHECK_WAIT: Duration = Duration::from_millis(2);
/// Longest FUNCTION LOAD may run a library's code (Redis' load timeout).
const LOAD_TIME_LIMIT: Duration = Duration::from_millis(500);
/// The hook runs every this many VM instructions.
const HOOK_EVERY: u32 = 10_000;
/// Lua's collector pause (percent): a new collection cycle starts when the heap has grown to
/// this share of what the last cycle left live. Lua's default is 200; a thread's state holds
/// little live data (the prelude, compiled scripts) while every script run leaves a little
/// garbage, so at 200 the collector marks that live data again every few dozen runs. At 400 it
/// does so a third as often, for at most a few hundred KiB more garbage per state.
const GC_PAUSE: i32 = 400;
/// Memory a thread's Lua state may hold while a script or a library's code runs (see
/// [`MemoryLimit`]); past it the allocation fails and the script stops with an error.
const SCRIPT_MEMORY_LIMIT: usize = 256 * 1024 * 1024;

// Their keys follow `numkeys` (`with_numkeys`), and may be none.
const SCRIPT_FLAGS: u32 = flags::OWN_GATE
    | flags::DENYOOM
    | flags::NOSCRIPT
    | flags::SKIP_MONITOR
    | flags::REPLICATES
    | flags::NO_MANDATORY_KEYS;
const SCRIPT_RO_FLAGS: u32 =
    flags::OWN_GATE | flags::NOSCRIPT | flags::SKIP_MONITOR | flags::NO_MANDATORY_KEYS;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("eval", -3, SCRIPT_FLAGS, NO_KEYS, "scripting", "Executes a server-side Lua script.", eval).runs_script().with_numkeys(2).key_flags(&["RW access update"]),
    cmd("evalsha", -3, SCRIPT_FLAGS, NO_KEYS, "scripting", "Executes a server-side Lua script by SHA1 digest.", evalsha).runs_script().with_numkeys(2).key_flags(&["RW access update"]),
    cmd("eval_ro", -3, SCRIPT_RO_FLAGS, NO_KEYS, "scripting", "Executes a read-only server-side Lua script.", eval_ro).runs_script().with_numkeys(2).key_flags(&["RO access"]),
    cmd("evalsha_ro", -3, SCRIPT_RO_FLAGS, NO_KEYS, "scripting", "Executes a read-only server-side Lua script by SHA1 digest.", evalsha_ro).runs_script().with_numkeys(2).key_flags(&["RO access"]),
    cmd("fcall", -3, SCRIPT_FLAGS, NO_KEYS, "scripting", "Invokes a function.", fcall).runs_script().with_numkeys(2).key_flags(&["RW access update"]),
    cmd("fcall_ro", -3, SCRIPT_RO_FLAGS, NO_KEYS, "scripting", "Invokes a read-only function.", fcall_ro).runs_script().with_numkeys(2).key_flags(&["RO access"]),
    cmd("script", -2, flags::NO_MULTI | flags::NOSCRIPT, NO_KEYS, "scripting", "A container for Lua scripts management commands.", script).with_subcommands(&[
        sub("script|load", 3, flags::NO_MULTI | flags::NOSCRIPT, "Loads a server-side Lua script to the script cache."),
        sub("script|exists", -3, flags::NO_MULTI | flags::NOSCRIPT, "Determines whether server-side Lua scripts exist in the script cache."),
        // Empties every tenant's script cache: an administrator's right.
        sub("script|flush", -2, flags::ADMIN | flags::NO_MULTI | flags::NOSCRIPT, "Removes all server-side Lua scripts from the script cache."),
        // Answers while a script runs, even one that holds the gate exclusively, and while one
        // is past busy-reply-threshold.
        cmd("script|kill", 2, flags::OWN_GATE | flags::ALLOW_BUSY | flags::NO_MULTI | flags::NOSCRIPT, NO_KEYS, "", "Terminates a server-side Lua script during execution.", script),
        sub("script|help", 2, flags::NO_MULTI | flags::NOSCRIPT, "Returns helpful text about the different subcommands."),
    ]),
];

/// A script in the cache: its body, what its shebang line says, and whether it was seen
/// touching keys it did not declare.
struct CachedScript {
    body: Bytes,
    shebang: Result<Shebang, String>,
    cross_key: AtomicBool,
}

/// What an EVAL script's `#!lua flags=…` line says. `flags` is None without a shebang (Redis'
/// compatibility mode: the script may write). `skip`: the shebang line's length; the code Lua
/// compiles starts at its newline, so line numbers stay the script's.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Shebang {
    flags: Option<ScriptFlags>,
    skip: usize,
}

/// The script cache: lower-case hex SHA1 → script.
///
/// Process-wide (a static, not a field of `Shared`): one server per process in production; in
/// unit tests several servers would share it, which is harmless because a body's key is its own
/// digest. Held only for a lookup or an insert, never while a script runs.
/// INFO memory's `number_of_cached_scripts` and `used_memory_scripts_eval` (here: the bytes of
/// the cached scripts' bodies and digests).
pub fn cache_figures() -> (usize, usize) {
    let cache = cache().lock();
    let bytes = cache.iter().map(|(sha, s)| sha.len() + s.body.len()).sum();
    (cache.len(), bytes)
}

fn cache() -> &'static Mutex<HashMap<String, Arc<CachedScript>>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<CachedScript>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Lower-case hex SHA1 of `body`.
pub fn sha1_hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

/// Store `body` in the cache; its digest and entry.
fn cache_script(body: &Bytes) -> (String, Arc<CachedScript>) {
    let sha = sha1_hex(body);
    let entry = cache()
        .lock()
        .entry(sha.clone())
        .or_insert_with(|| {
            Arc::new(CachedScript {
                body: body.clone(),
                shebang: parse_shebang(body),
                cross_key: AtomicBool::new(false),
            })
        })
        .clone();
    (sha, entry)
}

/// Redis 7's EVAL shebang: `#!lua` then options, of which only `flags=a,b` exists.
fn parse_shebang(body: &[u8]) -> Result<Shebang, String> {
    if !body.starts_with(b"#!") {
        return Ok(Shebang {
            flags: None,
            skip: 0,
        });
    }
    let end = body.iter().position(|&b| b == b'\n').unwrap_or(body.len());
    let line = String::from_utf8_lossy(&body[2..end]);
    let mut parts = line.split_ascii_whitespace();
    let engine = parts.next().unwrap_or("");
    if engine != "lua" {
        return Err(format!("Unexpected engine in script shebang: {engine}"));
    }
    let mut flags = ScriptFlags::default();
    for part in parts {
        let Some(list) = part.strip_prefix("flags=") else {
            return Err(format!("Unknown lua shebang option: {part}"));
        };
        for name in list.split(',').filter(|n| !n.is_empty()) {
            match ScriptFlags::named(name.as_bytes()) {
                Some(f) => flags.insert(f),
                None => return Err(format!("Unexpected flag in script shebang: {name}")),
            }
        }
    }
    Ok(Shebang {
        flags: Some(flags),
        skip: end,
    })
}

/// Whether an EVAL, EVALSHA or FCALL (`row`) may write, for CLIENT PAUSE WRITE (Redis'
/// `evalGetCommandFlags` / `fcallGetCommandFlags`): a script or function that declares
/// `no-writes` does not; one without flags (or unknown yet, or unreadable) may.
pub fn may_write(shared: &Shared, db: usize, row: &CommandSpec, args: &[Bytes]) -> bool {
    let Some(arg) = args.get(1) else {
        return true;
    };
    let declared = match row.name {
        "fcall" => shared
            .functions
            .get(shared.tenancy.tenant_of(db).unwrap_or(0))
            .function(&String::from_utf8_lossy(arg))
            .map(|(_, f)| f.flags),
        "evalsha" => {
            let sha = String::from_utf8_lossy(arg).to_ascii_lowercase();
            let cached = cache().lock().get(&sha).cloned();
            cached.and_then(|s| s.shebang.as_ref().ok().and_then(|b| b.flags))
        }
        _ => parse_shebang(arg).ok().and_then(|b| b.flags),
    };
    !declared.is_some_and(|f| f.contains(ScriptFlags::NO_WRITES))
}

fn eval(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (sha, script) = cache_script(&args[1]);
    eval_cached(ctx, args, &sha, &script, false)
}

fn eval_ro(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (sha, script) = cache_script(&args[1]);
    eval_cached(ctx, args, &sha, &script, true)
}

fn evalsha(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    evalsha_generic(ctx, args, false)
}

fn evalsha_ro(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    evalsha_generic(ctx, args, true)
}

fn evalsha_generic(ctx: &mut Ctx<'_>, args: &[Bytes], read_only: bool) -> CmdResult {
    // A lower-case digest (what clients send) is its own key: no copy.
    let sha: std::borrow::Cow<'_, str> = match std::str::from_utf8(&args[1]) {
        Ok(s) if !s.bytes().any(|b| b.is_ascii_uppercase()) => s.into(),
        _ => String::from_utf8_lossy(&args[1])
            .to_ascii_lowercase()
            .into(),
    };
    let script = cache().lock().get(sha.as_ref()).cloned();
    let Some(script) = script else {
        return Err(CmdError::Other(
            "NOSCRIPT No matching script. Please use EVAL.".into(),
        ));
    };
    eval_cached(ctx, args, &sha, &script, read_only)
}

fn eval_cached(
    ctx: &mut Ctx<'_>,
    args: &[Bytes],
    sha: &str,
    script: &CachedScript,
    read_only: bool,
) -> CmdResult {
    let (keys, argv) = split_keys(args, || CmdError::NotInteger)?;
    let shebang = script.shebang.clone().map_err(CmdError::err)?;
    let flags = shebang.flags.unwrap_or_default();
    if read_only && shebang.flags.is_some() && !flags.contains(ScriptFlags::NO_WRITES) {
        return Err(CmdError::err(
            "Can not execute a script with write flag using *_ro command.",
        ));
    }
    run_script(
        ctx,
        &Invocation {
            name: sha,
            target: Target::Script {
                sha,
                code: script.body.slice(shebang.skip..),
            },
            keys,
            argv,
            flags,
            read_only,
            cross_key: &script.cross_key,
            function: false,
            compat: shebang.flags.is_none(),
            called_as: &args[..2],
        },
    )
}

fn fcall(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    fcall_generic(ctx, args, false)
}

fn fcall_ro(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    fcall_generic(ctx, args, true)
}

/// FCALL / FCALL_RO: the caller's tenant's function, with Redis' checks in Redis' order.
fn fcall_generic(ctx: &mut Ctx<'_>, args: &[Bytes], read_only: bool) -> CmdResult {
    let tenant = ctx.shared.tenancy.tenant_of(ctx.client.db).unwrap_or(0);
    let libraries = ctx.shared.functions.get(tenant);
    let name = String::from_utf8_lossy(&args[1]);
    let Some((library, function)) = libraries.function(&name) else {
        return Err(CmdError::err("Function not found"));
    };
    let (keys, argv) = split_keys(args, || CmdError::err("Bad number of keys provided"))?;
    if read_only && !function.flags.contains(ScriptFlags::NO_WRITES) {
        return Err(CmdError::err(
            "Can not execute a script with write flag using *_ro command.",
        ));
    }
    run_script(
        ctx,
        &Invocation {
            name: &function.name,
            target: Target::Function {
                library,
                name: &function.name,
            },
            keys,
            argv,
            flags: function.flags,
            read_only,
            cross_key: &function.cross_key,
            function: true,
            compat: false,
            called_as: &args[..2],
        },
    )
}

/// `args` = [EVAL, script, numkeys, key..., arg...] → (keys, args), with Redis' errors
/// (`not_integer`: EVAL's and FCALL's differ; made only when needed, not on every call).
fn split_keys(
    args: &[Bytes],
    not_integer: fn() -> CmdError,
) -> Result<(&[Bytes], &[Bytes]), CmdError> {
    let Some(numkeys) = crate::args::parse_i64(&args[2]) else {
        return Err(not_integer());
    };
    let rest = &args[3..];
    if numkeys as i128 > rest.len() as i128 {
        return Err(CmdError::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    if numkeys < 0 {
        return Err(CmdError::err("Number of keys can't be negative"));
    }
    Ok(rest.split_at(numkeys as usize))
}

fn script(_ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match (sub.as_str(), args.len()) {
        ("load", 3) => Ok(Frame::Bulk(cache_script(&args[2]).0.into())),
        ("exists", n) if n >= 3 => {
            let cache = cache().lock();
            Ok(Frame::Array(
                args[2..]
                    .iter()
                    .map(|sha| {
                        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                        Frame::Integer(cache.contains_key(&sha) as i64)
                    })
                    .collect(),
            ))
        }
        ("flush", 2) => {
            flush_scripts();
            Ok(Frame::ok())
        }
        ("flush", 3)
            if args[2].eq_ignore_ascii_case(b"async") || args[2].eq_ignore_ascii_case(b"sync") =>
        {
            flush_scripts();
            Ok(Frame::ok())
        }
        ("flush", _) => Err(CmdError::Syntax),
        ("kill", 2) => kill_running(false),
        ("help", 2) => Ok(Frame::Array(
            [
                "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "EXISTS <sha1> [<sha1> ...]",
                "    Return information about the existence of the scripts in the script cache.",
                "FLUSH [ASYNC|SYNC]",
                "    Flush the Lua scripts cache.",
                "KILL",
                "    Kill the currently executing Lua script.",
                "LOAD <script>",
                "    Load a script into the scripts cache without executing it.",
                "HELP",
                "    Print this help.",
            ]
            .iter()
            .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
            .collect(),
        )),
        ("load" | "exists" | "help" | "kill", _) => Err(CmdError::Other(format!(
            "ERR unknown subcommand or wrong number of arguments for '{sub}'. Try SCRIPT HELP."
        ))),
        _ => Err(CmdError::UnknownSubcommand {
            cmd: "SCRIPT".into(),
            sub: String::from_utf8_lossy(&args[1]).into_owned(),
        }),
    }
}

/// SCRIPT FLUSH: forget every script, here and in every thread's compiled cache.
fn flush_scripts() {
    cache().lock().clear();
    FLUSH_GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// Whether a script may call `spec`: not one flagged `noscript` (scripts, AUTH, CLIENT, LOCK
/// and SESSION.OPEN, which may wait server-side), nor one that is itself not allowed in MULTI,
/// manages the gate itself, or is never queued.
/// Whether a script may run `spec`: not a command that must be alone or take its own gate, nor
/// one flagged `noscript` unless `DEBUG SET-DISABLE-DENY-SCRIPTS 1` lifted that (as Redis).
fn allowed_in_script(shared: &Shared, spec: &CommandSpec) -> bool {
    !spec.has(flags::NO_MULTI | flags::NO_QUEUE | flags::OWN_GATE)
        && (!spec.has(flags::NOSCRIPT) || shared.live.disable_deny_scripts.load(Ordering::Relaxed))
}

/// One run of a script or function, as the caller asked for it.
struct Invocation<'a> {
    /// What error replies name: the digest, or the function's name.
    name: &'a str,
    target: Target<'a>,
    keys: &'a [Bytes],
    argv: &'a [Bytes],
    flags: ScriptFlags,
    /// EVAL_RO, EVALSHA_RO, FCALL_RO.
    read_only: bool,
    /// Set when a key-locked run touched an undeclared key (then it always runs exclusively).
    cross_key: &'a AtomicBool,
    function: bool,
    /// An EVAL script without a shebang line (Redis' compatibility mode): it is not refused
    /// when the server is out of memory, only its first write command is (see `ScriptRun::oom`).
    compat: bool,
    /// The command and its first argument as the caller sent them (FUNCTION STATS).
    called_as: &'a [Bytes],
}

enum Target<'a> {
    /// An EVAL script: its digest and the code Lua compiles (after the shebang line).
    Script { sha: &'a str, code: Bytes },
    /// A function of a loaded library.
    Function {
        library: &'a Arc<Library>,
        name: &'a str,
    },
}

/// The keys a key-locked run declared (in keyspace `db`).
struct Declared<'a> {
    db: usize,
    keys: &'a [Bytes],
}

/// Why a key-locked run was stopped.
#[derive(Debug)]
enum Abort {
    /// It touched an undeclared key before writing anything: run it again exclusively.
    Restart,
    /// It touched an undeclared key after writing: this error is its reply.
    Undeclared(String),
}

/// What `redis.call` needs while a script runs.
struct ScriptRun<'a> {
    shared: &'a Shared,
    client: &'a mut ClientState,
    now_ms: u64,
    /// No write command may run (`no-writes`, or a `*_RO` command).
    read_only: bool,
    /// Key-locked: only these keys may be touched.
    declared: Option<Declared<'a>>,
    /// A write command has been run (or tried).
    wrote: bool,
    abort: Option<Abort>,
    /// It held shards of keys it did not declare ([`ScriptRun::hold_more`]): from then on the
    /// script runs exclusively.
    held_more: bool,
    /// A script in compatibility mode that started out of memory: the error its first command
    /// flagged denyoom gets, unless a write ran before it (Redis' `scriptVerifyOOM`: a script
    /// is not stopped halfway through its writes).
    oom: Option<Frame>,
}

impl ScriptRun<'_> {
    /// Run one command for the script and return its reply (errors as error frames). A write
    /// joins the script's write transaction (or the EXEC's running the script): the script's
    /// writes are logged as one record after it has run, and one that would take that record
    /// over the log's limit is refused before it is applied (the script's earlier writes stand,
    /// as after any error in a script). `slot`: the state's, where the first write and a KILL
    /// meet. `resp`: the run's protocol (`redis.setresp`), which the command sees as the
    /// client's (the caller's is put back after).
    fn call(&mut self, args: Vec<Bytes>, slot: &RunSlot, resp: ProtocolVersion) -> Frame {
        let reply = self.call_counted(args, slot, resp);
        // Every error a command gives a script counts in INFO errorstats when it is made, as
        // Redis' `call()`/`scriptCall` count it, whether the script then catches it (pcall) or
        // not; the script's reply does not count it again (`lua_stack::COUNTED`). Not in a
        // run stopped to run again exclusively.
        if !matches!(self.abort, Some(Abort::Restart)) {
            self.shared.stats.count_errors(&reply);
        }
        reply
    }

    /// [`ScriptRun::call`] but for counting its error. A command refused before it runs counts
    /// as a rejected call of that command in INFO commandstats (Redis' `scriptCall`).
    fn call_counted(&mut self, args: Vec<Bytes>, slot: &RunSlot, resp: ProtocolVersion) -> Frame {
        if self.abort.is_some() {
            return CmdError::err("the script was stopped").to_frame();
        }
        let Some(spec) = table().get(&args[0]) else {
            return CmdError::err("Unknown Redis command called from script").to_frame();
        };
        let row = spec.resolve(&args);
        if let Some(refused) = self.refusal(spec, &args) {
            if !matches!(self.abort, Some(Abort::Restart)) {
                let observer = &self.shared.observer.commands;
                observer.record(row, Duration::ZERO, crate::observe::Outcome::Rejected);
            }
            return refused;
        }
        if spec.runs_as_write() && !self.wrote && !slot.claim_write() {
            // SCRIPT KILL / FUNCTION KILL came first: it stops before writing anything.
            return Frame::Error(KILLED_BY_USER_TEXT.into());
        }
        dispatch::feed_monitors(self.shared, self.client, spec, &args, true);
        let started = quanta::Instant::now();
        self.client.in_script = true;
        let caller_resp = std::mem::replace(&mut self.client.resp, resp);
        let reply = if spec.runs_as_write() {
            self.wrote = true;
            dispatch::run_write(self.shared, self.client, spec, args, self.now_ms)
        } else {
            dispatch::run(self.shared, self.client, spec, &args, self.now_ms)
        };
        self.client.in_script = false;
        self.client.resp = caller_resp;
        // As Redis' `call()`: a command a script runs counts in INFO commandstats and
        // latencystats under its own name (an error reply as a failed call).
        let outcome = if reply.is_error() {
            crate::observe::Outcome::Failed
        } else {
            crate::observe::Outcome::Ok
        };
        self.shared
            .observer
            .commands
            .record(row, started.elapsed(), outcome);
        reply
    }

    /// Why the script may not run this command now (Redis' `scriptCall` checks, then the
    /// declared keys and the memory limit), or None.
    fn refusal(&mut self, spec: &'static CommandSpec, args: &[Bytes]) -> Option<Frame> {
        if !spec.arity_ok(args.len()) {
            return Some(
                CmdError::err("Wrong number of args calling Redis command from script").to_frame(),
            );
        }
        // The subcommand's row too (CLUSTER RESET, MODULE LOAD are `noscript` under parents
        // that are not), as Redis checks the command it resolved.
        if !allowed_in_script(self.shared, spec)
            || !allowed_in_script(self.shared, spec.resolve(args))
        {
            return Some(CmdError::err("This Redis command is not allowed from script").to_frame());
        }
        // A may-replicate command (PUBLISH, PFCOUNT) counts as a write here, as in Redis 7.2's
        // `scriptVerifyWriteCommandAllow`: a read-only script may then run under CLIENT PAUSE
        // WRITE. Regression: `test_a_read_only_script_may_not_publish`.
        if self.read_only && spec.has(flags::WRITE | flags::MAY_REPLICATE | flags::REPLICATES) {
            return Some(
                CmdError::err("Write commands are not allowed from read-only scripts.").to_frame(),
            );
        }
        if let Err(e) = crate::tenancy::check_perms(self.client, spec.resolve(args)) {
            return Some(e.to_frame());
        }
        if let Err(denied) =
            crate::tenancy::acl::check_acl(self.client, spec.resolve(args), spec, args)
        {
            return Some(CmdError::Other(denied.error_text(&self.client.user)).to_frame());
        }
        if let Some(declared) = &self.declared {
            let allowed = declares(self.shared, spec, args, self.client.db, declared)
                || (self.wrote && self.hold_more(spec, args));
            if !allowed {
                return Some(self.undeclared(spec, args));
            }
        }
        if !self.wrote && spec.resolve(args).has(flags::DENYOOM) {
            return self.oom.clone();
        }
        None
    }

    /// A key-locked script that has written names keys it did not declare, in its keyspace (as
    /// BullMQ's scripts reach a job's keys from a prefix in ARGV; standalone Redis allows it):
    /// hold their shards too, until the script ends, and go on. Commands on the whole keyspace
    /// or on another one cannot be held this way; nor a shard another script keeps busy.
    fn hold_more(&mut self, spec: &CommandSpec, args: &[Bytes]) -> bool {
        let Some(declared) = &self.declared else {
            return false;
        };
        if self.client.db != declared.db
            || !reaches_only_named_keys(self.shared, spec, args, declared.db)
        {
            return false;
        }
        let keys = spec.key_indexes(args);
        if keys.is_empty() {
            return false;
        }
        let Some(keys) = keys
            .iter()
            .map(|&i| args.get(i).map(|k| k.as_ref()))
            .collect::<Option<Vec<&[u8]>>>()
        else {
            return false;
        };
        let held =
            crate::persist::write::hold_more(self.shared, declared.db, &keys, HOLD_MORE_PATIENCE);
        self.held_more |= held;
        held
    }

    /// A key-locked script touched what it did not declare: stop it (see the module docs).
    fn undeclared(&mut self, spec: &CommandSpec, args: &[Bytes]) -> Frame {
        let text = if self.wrote {
            let what = match spec.key_indexes(args).first().and_then(|&i| args.get(i)) {
                Some(key) => format!("key '{}'", String::from_utf8_lossy(key)),
                None => format!("the keyspace ({})", spec.name.to_uppercase()),
            };
            format!(
                "ERR Script attempted to access a non local key in a cluster node script: {what} \
                 was not declared (scripts that declare keys run under those keys' locks; \
                 declare every key, or use the allow-cross-slot-keys flag)"
            )
        } else {
            "ERR Script attempted to access an undeclared key; it runs again exclusively".into()
        };
        self.abort = Some(if self.wrote {
            Abort::Undeclared(text.clone())
        } else {
            Abort::Restart
        });
        Frame::Error(text)
    }
}

/// Whether `args` (command `spec`, run in keyspace `db`) reaches the keyspace only through the
/// keys it names, all in `db`: not the whole keyspace (KEYS, FLUSHDB, INFO's key counts…), not
/// keys found some other way, not another keyspace.
fn reaches_only_named_keys(shared: &Shared, spec: &CommandSpec, args: &[Bytes], db: usize) -> bool {
    let whole_keyspace = flags::READS_KEYSPACE
        | flags::FLUSHES
        | flags::TENANT_WIDE
        | flags::EXCLUSIVE
        | flags::WHOLE_STORE;
    let keys_found_otherwise = spec.has(flags::MOVABLE_KEYS) && spec.numkeys_at == 0;
    !spec.has(whole_keyspace)
        && !keys_found_otherwise
        && spec.named_keyspaces(&shared.tenancy, db, args) == Named::Selected
}

/// Whether a key-locked script may run `args` (command `spec`) in keyspace `db`: it names only
/// declared keys, in the declared keyspace, and does not reach the keyspace any other way. A
/// command that touches no keyspace (PING, TIME, SELECT, UNLOCK…) is always allowed.
fn declares(
    shared: &Shared,
    spec: &CommandSpec,
    args: &[Bytes],
    db: usize,
    declared: &Declared<'_>,
) -> bool {
    if !reaches_only_named_keys(shared, spec, args, db) {
        return false;
    }
    let keys = spec.key_indexes(args);
    if keys.is_empty() {
        return !spec.has(flags::WRITE | flags::READONLY | flags::MAY_REPLICATE)
            || spec.has(flags::TAKES_LOCKS);
    }
    db == declared.db
        && keys
            .iter()
            .all(|&i| args.get(i).is_some_and(|k| declared.keys.contains(k)))
}

/// Run a script or function as one write transaction, key-locked or exclusive (see the module
/// docs; inside EXEC: joined to the EXEC's, with its clock), so its writes are one record:
/// replay applies all of them or none, and never runs the script again.
fn run_script(ctx: &mut Ctx<'_>, inv: &Invocation<'_>) -> CmdResult {
    let shared = ctx.shared;
    let now = ctx.now_ms;
    // SELECT inside a script does not change the caller's database (as in Redis 7).
    let caller_db = ctx.client.db;
    let read_only = inv.read_only || inv.flags.contains(ScriptFlags::NO_WRITES);
    // Redis refuses a script that may write when over memory, unless it is flagged allow-oom;
    // one without a shebang runs, and only its first denyoom command is refused.
    // And one with a shebang that may write is refused at once on a read-only replica or a
    // primary short of good replicas (Redis' `scriptPrepareForRun`); without one, its writes are.
    if !read_only && !inv.compat {
        crate::persist::write::check_role(shared, ctx.client)?;
    }
    let may_grow = !read_only && !inv.flags.contains(ScriptFlags::ALLOW_OOM);
    let grows = may_grow && !inv.compat;
    let oom = if may_grow && inv.compat && ctx.client.record.is_none() && !ctx.client.from_primary {
        crate::quota::make_room(shared, ctx.client, caller_db, now)
            .err()
            .map(|e| CmdError::from(e).to_frame())
    } else {
        None
    };
    let keyed = ctx.client.record.is_none()
        && !inv.keys.is_empty()
        && !inv.flags.contains(ScriptFlags::ALLOW_CROSS_SLOT_KEYS)
        && !inv.cross_key.load(Ordering::Relaxed);
    if keyed {
        let mut txn = WriteTxn::begin_keyed(shared, ctx.client, now, grows, caller_db, inv.keys)?;
        let run = RefCell::new(ScriptRun {
            shared,
            client: txn.client(),
            now_ms: now,
            read_only,
            declared: Some(Declared {
                db: caller_db,
                keys: inv.keys,
            }),
            wrote: false,
            abort: None,
            held_more: false,
            oom: oom.clone(),
        });
        let reply = execute(&run, inv);
        let (held_more, abort) = {
            let run = run.into_inner();
            (run.held_more, run.abort)
        };
        if held_more {
            inv.cross_key.store(true, Ordering::Relaxed);
        }
        txn.client().db = caller_db;
        match abort {
            None => {
                txn.commit()?;
                return Ok(reply);
            }
            Some(Abort::Undeclared(text)) => {
                inv.cross_key.store(true, Ordering::Relaxed);
                txn.commit()?;
                return Ok(Frame::Error(text));
            }
            Some(Abort::Restart) => {
                // Nothing was written: let everything go and run it exclusively.
                drop(txn);
                inv.cross_key.store(true, Ordering::Relaxed);
            }
        }
    }
    // Inside EXEC (its record is open) the script joins EXEC's exclusive hold: no gate to take.
    let joined = ctx.client.record.is_some();
    let busy = |busy: &str| CmdError::Other(busy.into());
    let _unadmitted = (!joined).then(Unadmitted::start);
    let _turn = if joined {
        None
    } else {
        Some(exclusive_turn().map_err(busy)?)
    };
    // Announced before it takes the gate: commands that come from now on wait for it where they
    // can be told BUSY, and those admitted before finish first (see `admit`), so none waits at
    // the gate behind it.
    let _exclusive = ExclusiveRun::start();
    if !joined {
        wait_for_admitted().map_err(busy)?;
    }
    let mut txn = WriteTxn::begin_exclusive(shared, ctx.client, now, grows)?;
    let reply = execute(
        &RefCell::new(ScriptRun {
            shared,
            client: txn.client(),
            now_ms: now,
            read_only,
            declared: None,
            wrote: false,
            abort: None,
            held_more: false,
            oom,
        }),
        inv,
    );
    txn.client().db = caller_db;
    txn.commit()?;
    Ok(reply)
}

/// Run the script on this thread's Lua state; the reply frame (errors included).
fn execute(run: &RefCell<ScriptRun<'_>>, inv: &Invocation<'_>) -> Frame {
    // `busy-reply-threshold` (0: never reached).
    let limit = match run
        .borrow()
        .shared
        .live
        .busy_reply_threshold
        .load(Ordering::Relaxed)
    {
        0 => NEVER,
        ms => Duration::from_millis(ms),
    };
    lua_stack::take_counted();
    let frame = with_vm(|vm| {
        vm.time_limit = limit;
        vm.run(run, inv).map_err(|e| {
            Frame::Error(format!(
                "ERR Error running script: {} script: {}",
                one_line(&e.to_string()),
                inv.name
            ))
        })
    })
    .unwrap_or_else(|e| e);
    // The reply's errors, at any depth, are counted here, as Redis' `luaReplyToRedisReply`
    // counts each error table it writes, but for those a failed command made: counted then.
    // (A run stopped to run again exclusively counts nothing: its reply is thrown away.)
    let mut counted = lua_stack::take_counted();
    let mut run = run.borrow_mut();
    if !matches!(run.abort, Some(Abort::Restart)) {
        count_reply_errors(&run.shared.stats, &frame, &mut counted);
        run.client.errors_counted = true;
    }
    frame
}

/// Count the errors in `frame` (at any depth) in INFO errorstats, but for one of each code in
/// `counted` (counted already).
fn count_reply_errors(stats: &crate::state::Stats, frame: &Frame, counted: &mut Vec<String>) {
    match frame {
        Frame::Error(text) => {
            let code = text.split(' ').next().unwrap_or("");
            match counted.iter().position(|c| c == code) {
                Some(at) => {
                    counted.swap_remove(at);
                }
                None => stats.count_errors(frame),
            }
        }
        Frame::Array(items) | Frame::Set(items) | Frame::Push(items) => {
            for item in items {
                count_reply_errors(stats, item, counted);
            }
        }
        Frame::Map(pairs) => {
            for (k, v) in pairs {
                count_reply_errors(stats, k, counted);
                count_reply_errors(stats, v, counted);
            }
        }
        _ => {}
    }
}

/// Run `f` on this thread's Lua state (created on first use). When `f` fails (`Err`) for a
/// reason outside the script itself, the state is dropped: the next script gets a new one
/// rather than trust this one.
fn with_vm<T, E>(f: impl FnOnce(&mut Vm) -> Result<T, E>) -> Result<T, E>
where
    E: From<Frame>,
{
    VM.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            match Vm::new() {
                Ok(vm) => *slot = Some(vm),
                Err(e) => {
                    return Err(E::from(
                        CmdError::err(format!("cannot create the Lua state: {e}")).to_frame(),
                    ))
                }
            }
        }
        let result = f(slot.as_mut().expect("just created"));
        if result.is_err() {
            *slot = None;
        }
        result
    })
}

thread_local! {
    /// This thread's Lua state, created by the first script that runs here.
    static VM: RefCell<Option<Vm>> = const { RefCell::new(None) };
}

/// Bumped by SCRIPT FLUSH: every thread's state drops its compiled scripts when it sees a new value.
static FLUSH_GENERATION: AtomicU64 = AtomicU64::new(0);
/// Bumped by FUNCTION DELETE|FLUSH|RESTORE and LOAD REPLACE: every thread's state drops the
/// libraries it compiled (they may be gone).
static LIBRARY_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Tell every thread's state that libraries were removed or replaced.
pub fn libraries_changed() {
    LIBRARY_GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// Longest `KEYS`/`ARGV` whose tables a state keeps for the next script (a table keeps its
/// size when emptied).
const MAX_KEPT_LIST: usize = 1024;

/// Compiled scripts a state keeps (EVAL of ever-new bodies would grow it without bound); past
/// this many the cache is emptied and refilled as scripts run again. Libraries likewise.
const MAX_COMPILED: usize = 1000;

/// Why a state's kill flag was set.
const KILLED_BY_TIME: u8 = 1;
const KILLED_BY_USER: u8 = 2;
const KILLED_TO_RESTART: u8 = 3;

/// A run's [`RunSlot::write_or_kill`]: neither yet, it has written, or a user killed it.
const FRESH: u8 = 0;
const WROTE: u8 = 1;
const KILL_CLAIMED: u8 = 2;

/// What runs now, for dispatch (see the module docs): scripts and functions past
/// `busy-reply-threshold` on a multi-threaded runtime (EVAL scripts from [`BUSY_EVAL_UNIT`],
/// functions from [`BUSY_FUNCTION_UNIT`]) and scripts holding the store gate exclusively
/// (from [`EXCLUSIVE_UNIT`]), 16 bits each. Dispatch loads it once per command
/// ([`wait_unless_busy`]); an exclusive run's start and end, and a run passing the threshold,
/// write it.
static SCRIPTS: AtomicU64 = AtomicU64::new(0);
const BUSY_EVAL_UNIT: u64 = 1;
const BUSY_FUNCTION_UNIT: u64 = 1 << 16;
const EXCLUSIVE_UNIT: u64 = 1 << 32;
const BUSY_EVALS: u64 = 0xffff;
const BUSY_ANY: u64 = 0xffff_ffff;

/// Commands waiting in [`wait_for_exclusive_scripts`], and what they wait on: a change of
/// [`SCRIPTS`] is announced under [`WAIT_LOCK`] when there are any (no lock otherwise).
static WAITERS: AtomicUsize = AtomicUsize::new(0);
static WAIT_LOCK: Mutex<()> = Mutex::new(());
static WAIT_CHANGE: Condvar = Condvar::new();

fn busy_unit(function: bool) -> u64 {
    if function {
        BUSY_FUNCTION_UNIT
    } else {
        BUSY_EVAL_UNIT
    }
}

/// Change [`SCRIPTS`] (`add` or subtract `unit`) and wake the commands waiting on it.
fn scripts_change(unit: u64, add: bool) {
    if add {
        SCRIPTS.fetch_add(unit, Ordering::SeqCst);
    } else {
        SCRIPTS.fetch_sub(unit, Ordering::SeqCst);
    }
    if WAITERS.load(Ordering::SeqCst) != 0 {
        let _lock = WAIT_LOCK.lock();
        WAIT_CHANGE.notify_all();
    }
}

/// While a script or function runs past `busy-reply-threshold` (see the module docs): the BUSY
/// reply every command not flagged `allow-busy` gets. One atomic load.
#[inline]
pub fn busy_error() -> Option<&'static str> {
    let scripts = SCRIPTS.load(Ordering::Relaxed);
    if scripts & BUSY_ANY == 0 {
        None
    } else if scripts & BUSY_EVALS != 0 {
        Some(BUSY_SCRIPT)
    } else {
        Some(BUSY_FUNCTION)
    }
}

/// Before a command that may wait for the store gate (dispatch, for every command not flagged
/// `allow-busy`; the memcached front end; WATCH): the BUSY reply it gets instead, if a script
/// is past the threshold, else this thread's [`Admission`], to hold until the command has
/// finished. While a script holds the gate exclusively (or is about to take it) and none is
/// past the threshold it waits here first, for that script to end (then it runs, as it would
/// have after waiting at the gate) or to pass the threshold (then it is refused): so a command
/// that came while the script ran is answered BUSY, as in Redis, rather than left waiting at
/// the gate until the script is killed.
///
/// The admission closes the gap between this check and the gate: a script that is to hold the
/// gate exclusively first announces itself in [`SCRIPTS`], then waits until no command admitted
/// before that is still running ([`wait_for_admitted`]), and only then takes the gate. A command
/// admitted just before the announcement therefore runs before the script, as in Redis, instead
/// of waiting at the gate behind it, where no BUSY reply could reach it (its connection would
/// hang for as long as the script runs, and with it any client waiting for that reply before
/// it sends SCRIPT KILL). Nothing to wait for: two atomic additions on a line of this thread's
/// and one load. Inside an admitted command (nested) it never waits.
pub fn admit() -> Result<Admission, &'static str> {
    let depth = ADMISSION_DEPTH.get();
    if depth > 0 {
        // Part of a command already admitted: an exclusive script may be waiting for that very
        // command, so waiting for the script here would never end.
        if let Some(busy) = busy_error() {
            return Err(busy);
        }
        ADMISSION_DEPTH.set(depth + 1);
        return Ok(Admission(PhantomData));
    }
    let stripe = ADMISSION_STRIPE.with(|s| *s);
    let counter = &ADMITTED[stripe].0;
    loop {
        // Counted before the check (both sequentially consistent, as the announcement and the
        // script's reads of the counters): either this check sees the script's announcement,
        // or the script sees this count and waits for the command (see `wait_for_admitted`).
        counter.fetch_add(1, Ordering::SeqCst);
        if SCRIPTS.load(Ordering::SeqCst) == 0 {
            ADMISSION_DEPTH.set(1);
            ADMISSION_HELD.set(Some(stripe));
            return Ok(Admission(PhantomData));
        }
        counter.fetch_sub(1, Ordering::SeqCst);
        if let Some(busy) = wait_for_exclusive_scripts() {
            return Err(busy);
        }
    }
}

/// [`admit`] without holding the admission: the BUSY reply, after waiting out a script that
/// holds the gate exclusively. A command that then takes the gate may still meet a script that
/// took it meanwhile (see [`admit`]); callers that take the gate should hold an admission
/// instead. Inside an admitted command it never waits. Nothing to wait for: one atomic load.
#[inline]
pub fn wait_unless_busy() -> Option<&'static str> {
    if SCRIPTS.load(Ordering::Relaxed) == 0 {
        return None;
    }
    if ADMISSION_DEPTH.get() > 0 {
        return busy_error();
    }
    wait_for_exclusive_scripts()
}

#[cold]
fn wait_for_exclusive_scripts() -> Option<&'static str> {
    let held = |scripts: u64| scripts & BUSY_ANY == 0 && scripts >= EXCLUSIVE_UNIT;
    if held(SCRIPTS.load(Ordering::SeqCst)) {
        // Counted before the check under the lock: a change after it is announced (see
        // `scripts_change`); the timeout is only a safety net.
        WAITERS.fetch_add(1, Ordering::SeqCst);
        let mut lock = WAIT_LOCK.lock();
        while held(SCRIPTS.load(Ordering::SeqCst)) {
            WAIT_CHANGE.wait_for(&mut lock, Duration::from_millis(100));
        }
        drop(lock);
        WAITERS.fetch_sub(1, Ordering::SeqCst);
    }
    busy_error()
}

/// A command let in by [`admit`]: until it is dropped (on the thread that took it), a script
/// that is to hold the store gate exclusively waits for the command to finish before it takes
/// the gate.
pub struct Admission(PhantomData<*const ()>);

impl Drop for Admission {
    fn drop(&mut self) {
        let depth = ADMISSION_DEPTH.get() - 1;
        ADMISSION_DEPTH.set(depth);
        if depth == 0 {
            if let Some(stripe) = ADMISSION_HELD.take() {
                ADMITTED[stripe].0.fetch_sub(1, Ordering::Release);
            }
        }
    }
}

/// Commands admitted and not finished ([`admit`]), counted per thread on padded counters (a
/// thread always uses the same one; threads may share one): a command touches no line another
/// thread's commands touch.
const ADMISSION_STRIPES: usize = 32;
#[repr(align(128))]
struct AdmissionCounter(AtomicUsize);
static ADMITTED: [AdmissionCounter; ADMISSION_STRIPES] =
    [const { AdmissionCounter(AtomicUsize::new(0)) }; ADMISSION_STRIPES];
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's counter in [`ADMITTED`].
    static ADMISSION_STRIPE: usize = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % ADMISSION_STRIPES;
    /// How many [`Admission`]s this thread holds (nested ones included).
    static ADMISSION_DEPTH: Cell<u32> = const { Cell::new(0) };
    /// The counter this thread's outermost admission is counted on, while it is (not while
    /// the script the command runs waits for the others: see `Unadmitted`).
    static ADMISSION_HELD: Cell<Option<usize>> = const { Cell::new(None) };
}

/// For an exclusive script: this thread's own admission (the EVAL or FCALL that runs it) stops
/// counting until it is dropped, so the script does not wait for itself, nor two scripts for
/// each other.
struct Unadmitted(Option<usize>);

impl Unadmitted {
    fn start() -> Unadmitted {
        let stripe = ADMISSION_HELD.take();
        if let Some(stripe) = stripe {
            ADMITTED[stripe].0.fetch_sub(1, Ordering::SeqCst);
        }
        Unadmitted(stripe)
    }
}

impl Drop for Unadmitted {
    fn drop(&mut self) {
        if let Some(stripe) = self.0 {
            ADMITTED[stripe].0.fetch_add(1, Ordering::SeqCst);
            ADMISSION_HELD.set(Some(stripe));
        }
    }
}

/// One exclusive script at a time gets past its announcement to the gate: the others wait
/// here, where they can be told BUSY (at the gate they could not), as a script sent while
/// another runs past the threshold is in Redis.
static EXCLUSIVE_TURN: Mutex<()> = Mutex::new(());

/// [`EXCLUSIVE_TURN`], or the BUSY reply when the script holding it (or any) passes the
/// threshold first.
fn exclusive_turn() -> Result<parking_lot::MutexGuard<'static, ()>, &'static str> {
    loop {
        if let Some(turn) = EXCLUSIVE_TURN.try_lock_for(Duration::from_millis(2)) {
            return Ok(turn);
        }
        if let Some(busy) = busy_error() {
            return Err(busy);
        }
    }
}

/// After an exclusive script's announcement, before it takes the gate: wait until every
/// command admitted before the announcement has finished (those admitted after it saw the
/// announcement and wait for the script instead). They are short, unless one waits for the
/// keys of a key-locked script: the BUSY reply when a script passes the threshold meanwhile.
fn wait_for_admitted() -> Result<(), &'static str> {
    for counter in &ADMITTED {
        let mut rounds = 0u32;
        while counter.0.load(Ordering::SeqCst) != 0 {
            if let Some(busy) = busy_error() {
                return Err(busy);
            }
            rounds += 1;
            if rounds < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
    Ok(())
}

/// What EXEC holds while it runs a transaction that queues a script (see [`hold_for_exec`]).
/// Its fields drop in this order: the announcement, then the turn, then the admission comes
/// back, as for a script sent on its own.
pub struct ExecHold {
    _exclusive: ExclusiveRun,
    _turn: parking_lot::MutexGuard<'static, ()>,
    _unadmitted: Unadmitted,
}

/// For EXEC of a transaction that queues a script: the same announcement as an exclusive script
/// makes, from before EXEC takes the store gate until it releases it, so a command that comes
/// while the transaction runs (a command queued before the script included) waits where it can
/// be told BUSY once the script passes the threshold, rather than at the gate behind EXEC
/// (regression: `test_busy_scripts.py::test_commands_that_came_while_exec_ran_a_script_get_busy`).
/// The BUSY reply when a script passes the threshold first.
pub fn hold_for_exec() -> Result<ExecHold, &'static str> {
    let unadmitted = Unadmitted::start();
    let turn = exclusive_turn()?;
    let exclusive = ExclusiveRun::start();
    wait_for_admitted()?;
    Ok(ExecHold {
        _exclusive: exclusive,
        _turn: turn,
        _unadmitted: unadmitted,
    })
}

/// Counts a script's run under the exclusive gate in [`SCRIPTS`] for as long as it lives.
struct ExclusiveRun;

impl ExclusiveRun {
    fn start() -> ExclusiveRun {
        scripts_change(EXCLUSIVE_UNIT, true);
        ExclusiveRun
    }
}

impl Drop for ExclusiveRun {
    fn drop(&mut self) {
        scripts_change(EXCLUSIVE_UNIT, false);
    }
}

/// FUNCTION STATS' refusal while an EVAL script runs past `busy-reply-threshold` (Redis:
/// FUNCTION STATS answers only about functions).
pub fn busy_eval_error() -> Option<CmdError> {
    (SCRIPTS.load(Ordering::Relaxed) & BUSY_EVALS != 0).then(|| CmdError::Other(BUSY_SCRIPT.into()))
}

/// What SCRIPT KILL, FUNCTION KILL and FUNCTION STATS see of the script a thread runs: one per
/// Lua state, registered once (so a script's start and end only store atomics).
pub struct RunSlot {
    running: AtomicBool,
    function: AtomicBool,
    /// [`FRESH`], [`WROTE`] or [`KILL_CLAIMED`]: the run's first write and a user's kill
    /// exclude each other (one compare-and-swap each), so a kill never stops a script that has
    /// written (Redis' UNKILLABLE) and a script a kill got to first writes nothing.
    write_or_kill: AtomicU8,
    /// The run is counted in [`SCRIPTS`] (it passed the threshold on a multi-threaded runtime).
    busy: AtomicBool,
    killed: Arc<AtomicBool>,
    kill_reason: AtomicU8,
    /// The running function's start, name and command (FUNCTION STATS), and its arguments
    /// (numkeys, keys, args) once it is past the threshold. The name's buffer is reused from
    /// call to call: an FCALL copies the name into it without allocating.
    started: Mutex<RunningFunction>,
}

/// See [`RunSlot::started`].
struct RunningFunction {
    at: Instant,
    name: String,
    /// FCALL or FCALL_RO and the function's name, as the caller wrote them (copied: the
    /// request's buffer is not kept alive).
    command: String,
    called_name: String,
    args: Vec<Bytes>,
}

impl RunSlot {
    fn new(killed: Arc<AtomicBool>) -> RunSlot {
        RunSlot {
            running: AtomicBool::new(false),
            function: AtomicBool::new(false),
            write_or_kill: AtomicU8::new(FRESH),
            busy: AtomicBool::new(false),
            killed,
            kill_reason: AtomicU8::new(0),
            started: Mutex::new(RunningFunction {
                at: Instant::now(),
                name: String::new(),
                command: String::new(),
                called_name: String::new(),
                args: Vec::new(),
            }),
        }
    }

    /// Before the run's first write: false when a kill got there first (nothing may be written).
    fn claim_write(&self) -> bool {
        match self
            .write_or_kill
            .compare_exchange(FRESH, WROTE, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) | Err(WROTE) => true,
            Err(_) => false,
        }
    }

    /// SCRIPT KILL / FUNCTION KILL: stop the run unless it has written; whether it will stop.
    fn claim_kill(&self) -> bool {
        match self.write_or_kill.compare_exchange(
            FRESH,
            KILL_CLAIMED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) | Err(KILL_CLAIMED) => {
                self.kill_reason.store(KILLED_BY_USER, Ordering::Relaxed);
                self.killed.store(true, Ordering::Release);
                true
            }
            Err(_) => false,
        }
    }

    /// The hook saw the run pass `busy-reply-threshold`: on a multi-threaded runtime, count it
    /// in [`SCRIPTS`], note a function's arguments for FUNCTION STATS, hand this worker's other
    /// tasks on, and let it run on (true); elsewhere, false (it is aborted). Called again every
    /// [`HAND_OFF_AGAIN`] while it runs on: hands the worker on again if this thread has it
    /// back (see [`hand_off_worker`]).
    fn enter_busy(&self) -> bool {
        if self.busy.load(Ordering::Relaxed) {
            if holds_core(&self.killed) {
                hand_off_worker(&self.killed);
            }
            return true;
        }
        let multi_threaded = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if !multi_threaded {
            // One worker: nothing could answer BUSY or take a KILL meanwhile. A run that has
            // not written is stopped (and can no longer write); one that has runs to its end,
            // never stopped halfway through its writes (Redis' SCRIPT KILL answers UNKILLABLE
            // then), while every other client waits for it.
            let stopped = self
                .write_or_kill
                .compare_exchange(FRESH, KILL_CLAIMED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
            if stopped || self.write_or_kill.load(Ordering::Acquire) != WROTE {
                return false;
            }
            tracing::warn!(
                "a script that has written has run longer than busy-reply-threshold: with one \
                 worker thread it runs to its end, and other clients wait for it"
            );
            return true;
        }
        let function = self.function.load(Ordering::Relaxed);
        if function {
            if let Some(context) = CALL_CONTEXT.with(Cell::get) {
                // SAFETY: the context is this run's (the hook runs inside it); its keys and
                // arguments live until the run ends.
                let (keys, argv) = unsafe { (&*context.keys, &*context.argv) };
                let mut started = self.started.lock();
                started.args.clear();
                started.args.push(Bytes::from(keys.len().to_string()));
                started.args.extend(keys.iter().chain(argv).cloned());
            }
        }
        self.busy.store(true, Ordering::Relaxed);
        scripts_change(busy_unit(function), true);
        tracing::warn!(
            function,
            "a script has run longer than busy-reply-threshold: other commands get BUSY until \
             it ends or SCRIPT KILL / FUNCTION KILL stops it"
        );
        hand_off_worker(&self.killed);
        true
    }

    /// The run has ended: no longer counted in [`SCRIPTS`].
    fn leave_busy(&self) {
        if self.busy.swap(false, Ordering::Relaxed) {
            let function = self.function.load(Ordering::Relaxed);
            scripts_change(busy_unit(function), false);
            if function {
                self.started.lock().args.clear();
            }
        }
    }
}

/// Marks a slot running for as long as it lives, so a run that unwinds (a panic) is neither
/// left running nor left counted in [`SCRIPTS`] (which would refuse every command for good).
struct Running<'a>(&'a RunSlot);

impl<'a> Running<'a> {
    /// Clears the kill flag a previous run left, *then* shows the slot running: a SCRIPT KILL
    /// that sees it running sets the flag after the clear, so the hook sees that kill.
    fn start(slot: &'a RunSlot) -> Running<'a> {
        slot.killed.store(false, Ordering::Relaxed);
        slot.running.store(true, Ordering::Release);
        Running(slot)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::Release);
        self.0.leave_busy();
    }
}

/// Called from the instruction hook of a script that has just passed the threshold, on a
/// worker of the multi-threaded runtime: gives this worker's queued tasks and its place among
/// the workers to a new thread (`block_in_place`), and keeps this thread for the script.
/// Without it what waits on this worker waits for the script, so no BUSY reply and no KILL
/// may be served: the task in its LIFO slot (never stolen; the accept loop, say), tasks the
/// script itself wakes (a PUBLISH's subscribers: a task woken on a worker goes to its LIFO
/// slot), and the network itself when the other workers sleep (tokio wakes one only when there
/// is a task to steal, and a sleeping worker does not poll for I/O) or wait at the store gate
/// for this very script (commands that reached it before a key-locked script's threshold).
///
/// `block_in_place` moves the LIFO slot's task to the stealable queue, puts the worker's core
/// where a new blocking-pool thread takes it, and, when its closure returns, takes the core
/// back if that thread has not taken it yet. So the closure waits until a task spawned here
/// beforehand has run, plus [`HAND_OFF_GRACE`]: run by the new thread, or stolen by another
/// worker, which shows that one is awake, but not that the new thread has the core (on a
/// loaded machine it may start later than that). This thread may thus keep the core; the
/// hook therefore calls this again every [`HAND_OFF_AGAIN`] while this thread still holds a
/// core ([`holds_core`]), each time with a new thread to take it, until one has. Waits at
/// most [`HAND_OFF_WAIT`] (the script then runs on regardless), and not once the script is
/// killed. Not on a current-thread runtime (`block_in_place` would panic there; the caller
/// checks).
fn hand_off_worker(killed: &AtomicBool) {
    let picked_up = Arc::new(AtomicBool::new(false));
    let flag = picked_up.clone();
    tokio::spawn(async move { flag.store(true, Ordering::Release) });
    tokio::task::block_in_place(|| {
        let until = Instant::now() + HAND_OFF_WAIT;
        while !picked_up.load(Ordering::Acquire)
            && !killed.load(Ordering::Relaxed)
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_micros(200));
        }
        std::thread::sleep(HAND_OFF_GRACE);
    });
}

/// Whether this thread (running a script past the threshold) still holds its worker's core
/// with the LIFO slot on, i.e. whether tasks it wakes would wait for the script: a task spawned
/// here then goes to that slot, which only this thread runs, and so does not run within
/// [`CORE_CHECK_WAIT`]. Without a core (handed on) the task goes to the runtime's shared queue
/// and another thread runs it at once; with the LIFO slot off (tokio turns it off for the rest
/// of a poll after a few LIFO tasks in a row) it goes to the stealable queue, and every task
/// this thread wakes does too. A false "holds" (every other thread busy) only costs a
/// `block_in_place` that has nothing to hand on. A held task is moved to the stealable queue
/// by the hand-off that follows.
fn holds_core(killed: &AtomicBool) -> bool {
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    tokio::spawn(async move { flag.store(true, Ordering::Release) });
    let until = Instant::now() + CORE_CHECK_WAIT;
    while !ran.load(Ordering::Acquire) && !killed.load(Ordering::Relaxed) {
        if Instant::now() >= until {
            return true;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    false
}

fn running_slots() -> &'static Mutex<Vec<Arc<RunSlot>>> {
    static SLOTS: OnceLock<Mutex<Vec<Arc<RunSlot>>>> = OnceLock::new();
    SLOTS.get_or_init(|| Mutex::new(Vec::new()))
}

/// SCRIPT KILL (`function` false) / FUNCTION KILL: stop the running script(s) of that kind that
/// have not written, with Redis' replies: OK, UNKILLABLE (one has written: it runs on), the
/// other kind's BUSY reply when only a script of the other kind runs past the threshold (SCRIPT
/// KILL does not stop a function, nor FUNCTION KILL a script), else NOTBUSY.
pub fn kill_running(function: bool) -> CmdResult {
    let slots = running_slots().lock();
    let (mut found, mut unkillable, mut other_busy) = (false, false, false);
    for slot in slots.iter() {
        if !slot.running.load(Ordering::Acquire) {
            continue;
        }
        if slot.function.load(Ordering::Relaxed) != function {
            other_busy |= slot.busy.load(Ordering::Relaxed);
            continue;
        }
        found = true;
        unkillable |= !slot.claim_kill();
    }
    if unkillable {
        return Err(CmdError::Other(
            "UNKILLABLE Sorry the script already executed write commands against the dataset. \
             You can either wait the script termination or kill the server in a hard way \
             using the SHUTDOWN NOSAVE command."
                .into(),
        ));
    }
    if found {
        return Ok(Frame::ok());
    }
    if other_busy {
        let busy = if function { BUSY_SCRIPT } else { BUSY_FUNCTION };
        return Err(CmdError::Other(busy.into()));
    }
    Err(CmdError::Other(
        "NOTBUSY No scripts in execution right now.".into(),
    ))
}

/// FUNCTION STATS' `running_script`: a function running now (name, command, duration in ms).
pub fn running_function() -> Option<(String, Vec<Bytes>, u64)> {
    let slots = running_slots().lock();
    slots.iter().find_map(|slot| {
        (slot.running.load(Ordering::Acquire) && slot.function.load(Ordering::Relaxed)).then(|| {
            let started = slot.started.lock();
            let command = [started.command.as_bytes(), started.called_name.as_bytes()]
                .into_iter()
                .map(Bytes::copy_from_slice)
                .chain(started.args.iter().cloned())
                .collect();
            (
                started.name.clone(),
                command,
                started.at.elapsed().as_millis() as u64,
            )
        })
    })
}

/// One function a library's code registered (FUNCTION LOAD, or a state compiling it for FCALL).
struct Registered {
    name: String,
    callback: Function,
    flags: ScriptFlags,
    description: Option<Bytes>,
}

/// FUNCTION LOAD's work on the Lua side: run `code` (the whole library, shebang line first;
/// `skip`: that line's length) on this thread's state and return what it registered, or
/// Redis' error text (without `ERR `).
pub fn load_library(code: &[u8], skip: usize) -> Result<Vec<FunctionDef>, String> {
    with_vm(|vm| Ok::<_, Frame>(vm.load_library(code, skip)))
        .unwrap_or_else(|frame| match frame {
            Frame::Error(e) => Err(e),
            _ => Err("cannot create the Lua state".into()),
        })
        .map(|registered| {
            registered
                .into_iter()
                .map(|r| FunctionDef {
                    name: r.name,
                    description: r.description,
                    flags: r.flags,
                    cross_key: AtomicBool::new(false),
                })
                .collect()
        })
}

/// A Lua state reused by every script run on one thread.
///
/// Creating a state, opening its libraries and compiling the prelude cost far more than a small
/// script (with a fresh state per call, `EVALSHA` of phpredis' unlock script ran at a tenth of
/// Redis' rate), so like Redis each thread keeps one state and each script's compiled function,
/// and each function library it has run (its registered functions, by library id). Scripts stay
/// isolated as in Redis 7: a script runs in an environment of its own (`KEYS`, `ARGV`, and the
/// sandbox's globals read through it), global assignment fails with "Attempt to modify a
/// readonly table", and the library tables (`string`, `table`, `math`, `redis`) and the string
/// metatable are read-only, so no script can leave anything behind for the next one. A
/// library's functions share the library's environment (read-only too; reading a global it
/// does not have is an error, as in Redis); their upvalues live in this thread's state.
struct Vm {
    lua: Lua,
    /// Compiled scripts by digest (as of `generation`).
    compiled: HashMap<String, Function>,
    generation: u64,
    /// Libraries run here: id → their functions by name (as of `library_generation`).
    libraries: HashMap<u64, HashMap<String, Function>>,
    library_generation: u64,
    /// The prelude's private table: `library_env` makes a library's environment.
    hidden: Table,
    /// Lua's own `pcall`, to run a library's code and catch what it raises.
    pcall: Function,
    /// The environment every EVAL script runs in (each compiled script's, set once), and its
    /// `KEYS` and `ARGV`: emptied and refilled for each run ([`lua_run`]) rather than made
    /// anew. No script can keep a reference to them past its run (it has nowhere to store
    /// one), so reusing them shows no script anything of another.
    script_env: Table,
    /// What the environment shows besides the libraries: `KEYS`, `ARGV` and `_G` (the
    /// environment itself). Kept out of the environment, which stays empty, so that assigning
    /// any of them (`_G = {}`, `KEYS = nil`) is refused as every other global assignment is:
    /// Redis' globals are a read-only table.
    script_globals: Table,
    keys: Table,
    argv: Table,
    /// [`lua_run`]: runs a script or function.
    entry: Function,
    /// Set by the time-limit hook or a KILL; read by the `pcall`/`xpcall` wrappers so a script
    /// cannot swallow its own kill. Reset for each script.
    killed: Arc<AtomicBool>,
    /// What the instruction hook reads besides the kill flag; reset for each run.
    hook: Rc<HookState>,
    /// `busy-reply-threshold` ([`SCRIPT_TIME_LIMIT`]; tests shorten it).
    time_limit: Duration,
    /// This state's entry among the running scripts.
    slot: Arc<RunSlot>,
    /// The run has called `redis.setresp(3)` (RESP3 replies to it, boolean replies from it);
    /// false at the start of each run.
    resp3: Cell<bool>,
}

/// What a state's instruction hook reads (besides the kill flag), set for each run.
struct HookState {
    /// When the run passes `busy-reply-threshold` (or FUNCTION LOAD's limit).
    deadline: Cell<Instant>,
    /// Past the deadline the run may go on, answered BUSY about, if the runtime allows (a
    /// script or function); false: it is aborted (a library's code at FUNCTION LOAD).
    may_run_on: Cell<bool>,
    /// The line of the user's code a kill stopped, for the reply (0: not known).
    kill_line: Cell<i32>,
}

/// How long a key-locked script that has written waits for the shard of a key it did not
/// declare (see `ScriptRun::hold_more`) before that access is an error.
const HOLD_MORE_PATIENCE: Duration = Duration::from_millis(200);

/// As good as never (`busy-reply-threshold` 0; a run past the threshold).
const NEVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The line a hook call stopped in, when it is the user's code (a script, or a library's
/// functions) rather than the prelude.
fn user_code_line(debug: &mlua::Debug<'_>) -> Option<i32> {
    let source = debug.source();
    matches!(
        source.source.as_deref(),
        Some("@user_script" | "@user_function")
    )
    .then(|| debug.curr_line())
}

impl Drop for Vm {
    fn drop(&mut self) {
        running_slots()
            .lock()
            .retain(|s| !Arc::ptr_eq(s, &self.slot));
    }
}

impl Vm {
    fn new() -> mlua::Result<Vm> {
        let lua = new_state()?;
        let killed = Arc::new(AtomicBool::new(false));
        let flag = killed.clone();
        let read_killed = lua.create_function(move |_, ()| Ok(flag.load(Ordering::Relaxed)))?;
        let hidden = lua.create_table()?;
        // SAFETY: both follow `lua_stack`'s contract (see `lua_redis_call`).
        unsafe {
            hidden.raw_set("call", lua.create_c_function(lua_redis_call)?)?;
            hidden.raw_set("pcall", lua.create_c_function(lua_redis_pcall)?)?;
            hidden.raw_set("setresp", lua.create_c_function(lua_redis_setresp)?)?;
            hidden.raw_set(
                "acl_check_cmd",
                lua.create_c_function(lua_redis_acl_check_cmd)?,
            )?;
        }
        // `redis.REDIS_VERSION` and `REDIS_VERSION_NUM` (0x00MMmmpp), the version INFO reports.
        let version = crate::REDIS_COMPAT_VERSION;
        let num = version
            .split('.')
            .map(|part| part.parse::<i64>().unwrap_or(0))
            .fold(0, |acc, part| (acc << 8) | part);
        hidden.raw_set("version", version)?;
        hidden.raw_set("version_num", num)?;
        let (env_mt, pcall): (Table, Function) = lua
            .load(PRELUDE)
            .set_name("=prelude")
            .call((hidden.clone(), read_killed))?;
        let hook = Rc::new(HookState {
            deadline: Cell::new(Instant::now()),
            may_run_on: Cell::new(false),
            kill_line: Cell::new(0),
        });
        let slot = Arc::new(RunSlot::new(killed.clone()));
        let (hook_flag, hook_state, hook_slot) = (killed.clone(), hook.clone(), slot.clone());
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            move |_, debug| {
                if hook_flag.load(Ordering::Relaxed) {
                    // Killed: raise again wherever it runs now, so `pcall` cannot keep it.
                    if let Some(line) = user_code_line(&debug) {
                        hook_state.kill_line.set(line);
                    }
                    return Err(mlua::Error::runtime(TIME_LIMIT_TEXT));
                }
                if Instant::now() > hook_state.deadline.get() {
                    if hook_state.may_run_on.get() && hook_slot.enter_busy() {
                        // Runs on, answered BUSY about (see the module docs); back here in a
                        // while to check that its worker is still handed on. (With one worker,
                        // a run that has written runs on to its end: not back here.)
                        let again = if hook_slot.busy.load(Ordering::Relaxed) {
                            HAND_OFF_AGAIN
                        } else {
                            NEVER
                        };
                        hook_state.deadline.set(Instant::now() + again);
                        return Ok(VmState::Continue);
                    }
                    if !hook_flag.swap(true, Ordering::Relaxed) {
                        hook_slot
                            .kill_reason
                            .store(KILLED_BY_TIME, Ordering::Relaxed);
                    }
                    return Err(mlua::Error::runtime(TIME_LIMIT_TEXT));
                }
                Ok(VmState::Continue)
            },
        );
        // SAFETY: follows `lua_stack`'s contract (see `lua_error_handler`).
        let handler = unsafe { lua.create_c_function(lua_error_handler)? };
        lua.set_named_registry_value(ERROR_HANDLER_KEY.to_str().expect("an ASCII name"), handler)?;
        // environment (empty) → its globals (`KEYS`, `ARGV`, `_G`) → the libraries.
        let script_env = lua.create_table()?;
        let script_globals = lua.create_table_with_capacity(0, 3)?;
        let globals_mt = lua.create_table()?;
        globals_mt.raw_set("__index", env_mt.raw_get::<Value>("__index")?)?;
        script_globals.set_metatable(Some(globals_mt));
        let script_env_mt = lua.create_table()?;
        script_env_mt.raw_set("__index", &script_globals)?;
        script_env_mt.raw_set("__newindex", env_mt.raw_get::<Value>("__newindex")?)?;
        script_env_mt.raw_set("__metatable", false)?;
        script_env.set_metatable(Some(script_env_mt));
        // SAFETY: follows `lua_stack`'s contract (see `lua_run`).
        let entry = unsafe { lua.create_c_function(lua_run)? };
        let keys = lua.create_table()?;
        let argv = lua.create_table()?;
        script_globals.raw_set("KEYS", &keys)?;
        script_globals.raw_set("ARGV", &argv)?;
        script_globals.raw_set("_G", &script_env)?;
        hidden
            .raw_get::<Function>("show_globals")?
            .call::<()>((&script_env, &script_globals))?;
        running_slots().lock().push(slot.clone());
        Ok(Vm {
            lua,
            compiled: HashMap::new(),
            generation: FLUSH_GENERATION.load(Ordering::Acquire),
            libraries: HashMap::new(),
            library_generation: LIBRARY_GENERATION.load(Ordering::Acquire),
            hidden,
            pcall,
            script_env,
            script_globals,
            keys,
            argv,
            entry,
            killed,
            hook,
            time_limit: SCRIPT_TIME_LIMIT,
            slot,
            resp3: Cell::new(false),
        })
    }

    /// Compile `body` (digest `sha`) into `compiled` unless it is there; the compile error's
    /// reply.
    fn compile(&mut self, sha: &str, body: &[u8]) -> Result<(), Frame> {
        let generation = FLUSH_GENERATION.load(Ordering::Acquire);
        if generation != self.generation || self.compiled.len() >= MAX_COMPILED {
            self.compiled.clear();
            self.generation = generation;
        }
        if self.compiled.contains_key(sha) {
            return Ok(());
        }
        let f = self
            .lua
            .load(body)
            .set_name("@user_script")
            .into_function()
            .map_err(|e| {
                Frame::Error(format!(
                    "ERR Error compiling script (new function): {}",
                    one_line(&e.to_string())
                ))
            })?;
        f.set_environment(self.script_env.clone())
            .map_err(|e| Frame::Error(format!("ERR {e}")))?;
        self.compiled.insert(sha.to_string(), f);
        Ok(())
    }

    /// Run `library`'s code on this state into `libraries` unless it is there.
    fn load(&mut self, library: &Library) -> Result<(), Frame> {
        let generation = LIBRARY_GENERATION.load(Ordering::Acquire);
        if generation != self.library_generation || self.libraries.len() >= MAX_COMPILED {
            self.libraries.clear();
            self.library_generation = generation;
        }
        if self.libraries.contains_key(&library.id) {
            return Ok(());
        }
        let skip = library
            .code
            .iter()
            .position(|&b| b == b'\n')
            .unwrap_or(library.code.len());
        let registered = self
            .load_library(&library.code, skip)
            .map_err(|e| Frame::Error(format!("ERR {e}")))?;
        let functions = registered
            .into_iter()
            .map(|r| (r.name, r.callback))
            .collect();
        self.libraries.insert(library.id, functions);
        Ok(())
    }

    /// Run a library's code with `redis.register_function` available and collect what it
    /// registers; Redis' error texts (without `ERR `).
    fn load_library(&mut self, code: &[u8], skip: usize) -> Result<Vec<Registered>, String> {
        let chunk = self
            .lua
            .load(&code[skip.min(code.len())..])
            .set_name("@user_function")
            .into_function()
            .map_err(|e| format!("Error compiling function: {}", lua_message(&e)))?;
        let collected: RefCell<Vec<Registered>> = RefCell::new(Vec::new());
        self.killed.store(false, Ordering::Relaxed);
        // A library's code never runs on past its limit: FUNCTION LOAD fails (Redis').
        self.hook.deadline.set(Instant::now() + LOAD_TIME_LIMIT);
        self.hook.may_run_on.set(false);
        let outcome = self.lua.scope(|scope| {
            let collect = scope.create_function(
                |_, (name, callback, flags, description): (mlua::String, Function, u8, Option<mlua::String>)| {
                    let name = name.to_string_lossy();
                    let mut collected = collected.borrow_mut();
                    if collected.iter().any(|r| r.name == name) {
                        return Ok(Some("ERR Function already exists in the library".to_string()));
                    }
                    if name.is_empty()
                        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    {
                        return Ok(Some(
                            "ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long"
                                .to_string(),
                        ));
                    }
                    collected.push(Registered {
                        name,
                        callback,
                        flags: ScriptFlags::from_bits(flags),
                        description: description.map(|d| Bytes::copy_from_slice(&d.as_bytes())),
                    });
                    Ok(None)
                },
            )?;
            let library_env: Function = self.hidden.raw_get("library_env")?;
            let (env, finish): (Table, Function) = library_env.call(collect)?;
            chunk.set_environment(env)?;
            let out: MultiValue = {
                let _limit = MemoryLimit::enforce(&self.lua);
                self.pcall.call(chunk)?
            };
            finish.call::<()>(())?;
            Ok(out)
        });
        let out =
            outcome.map_err(|e| format!("Error registering functions: {}", lua_message(&e)))?;
        let mut out = out.into_iter();
        if !matches!(out.next(), Some(Value::Boolean(true))) {
            let message = match out.next() {
                _ if self.killed.load(Ordering::Relaxed) => "FUNCTION LOAD timeout".to_string(),
                Some(Value::Table(t)) => match t.raw_get::<Value>("err") {
                    Ok(Value::String(s)) => s.to_string_lossy(),
                    _ => "unknown error".into(),
                },
                Some(Value::String(s)) => with_err_prefix(&s.to_string_lossy()),
                Some(other) => with_err_prefix(&other.to_string().unwrap_or_default()),
                None => "unknown error".into(),
            };
            return Err(format!(
                "Error registering functions: {}",
                one_line(&message)
            ));
        }
        let registered = collected.into_inner();
        if registered.is_empty() {
            return Err("No functions registered".into());
        }
        Ok(registered)
    }

    /// Run `func` through [`lua_run`] under the memory limit: a script (`script_env`: in the
    /// scripts' environment, with `KEYS`/`ARGV`) or a function (called with `keys`, `argv`),
    /// `run` reachable by `redis.call` (null: none). `Ok(Ok(reply))` when it returned,
    /// `Ok(Err(error value))` when it raised; `Err` only for failures of the state itself.
    fn call(
        &self,
        func: &Function,
        script_env: bool,
        keys: &[Bytes],
        argv: &[Bytes],
        run: *const (),
    ) -> mlua::Result<Result<Frame, Value>> {
        // The instruction hook must see this run's deadline, not what the last run left (a
        // deadline long past after the thread sat idle); the kill flag was cleared by
        // `Running::start`, before a SCRIPT KILL could see this run.
        self.hook.deadline.set(Instant::now() + self.time_limit);
        self.hook.may_run_on.set(true);
        self.hook.kill_line.set(0);
        // Each run starts speaking RESP2 to its commands, as in Redis.
        self.resp3.set(false);
        let mut reply = None;
        let out = {
            let _current = CurrentRun::set(CallContext {
                run,
                lua: &self.lua,
                killed: &*self.killed,
                slot: &*self.slot,
                keys,
                argv,
                reply: &mut reply,
                resp3: &self.resp3,
            });
            if script_env {
                self.entry
                    .call::<MultiValue>((func, &self.script_env, &self.keys, &self.argv))
            } else {
                self.entry.call::<MultiValue>((func, Value::Nil))
            }
        };
        let mut out = out?.into_iter();
        if matches!(out.next(), Some(Value::Boolean(true))) {
            Ok(Ok(reply.unwrap_or(Frame::Null)))
        } else {
            Ok(Err(out.next().unwrap_or(Value::Nil)))
        }
    }

    /// Before a script gets `keys`/`argv`: let go of `KEYS`/`ARGV` tables that a long list
    /// would grow (or has grown) past [`MAX_KEPT_LIST`].
    fn size_lists(&mut self, keys: &[Bytes], argv: &[Bytes]) -> mlua::Result<()> {
        if keys.len().max(argv.len()) > MAX_KEPT_LIST {
            self.keys = self.lua.create_table()?;
            self.argv = self.lua.create_table()?;
            self.script_globals.raw_set("KEYS", &self.keys)?;
            self.script_globals.raw_set("ARGV", &self.argv)?;
        }
        Ok(())
    }

    /// Runs one script or function. `Err` only for failures of the state itself; whatever the
    /// script does (errors, kills, compile errors) comes back as the reply frame.
    fn run(&mut self, run: &RefCell<ScriptRun<'_>>, inv: &Invocation<'_>) -> mlua::Result<Frame> {
        match &inv.target {
            Target::Script { sha, code } => {
                if let Err(reply) = self.compile(sha, code) {
                    return Ok(reply);
                }
                self.size_lists(inv.keys, inv.argv)?;
            }
            Target::Function { library, .. } => {
                if let Err(reply) = self.load(library) {
                    return Ok(reply);
                }
            }
        }
        let func = match &inv.target {
            Target::Script { sha, .. } => self.compiled.get(*sha),
            Target::Function { library, name } => self
                .libraries
                .get(&library.id)
                .and_then(|functions| functions.get(*name)),
        };
        let Some(func) = func else {
            return Ok(Frame::Error("ERR Function not found".into()));
        };
        self.slot.kill_reason.store(0, Ordering::Relaxed);
        self.slot.write_or_kill.store(FRESH, Ordering::Relaxed);
        self.slot.function.store(inv.function, Ordering::Relaxed);
        let now = Instant::now();
        if inv.function {
            let mut started = self.slot.started.lock();
            started.at = now;
            started.name.clear();
            started.name.push_str(inv.name);
            started.command.clear();
            started.called_name.clear();
            if let [command, name] = inv.called_as {
                started.command.push_str(&String::from_utf8_lossy(command));
                started.called_name.push_str(&String::from_utf8_lossy(name));
            }
            started.args.clear();
        }
        let script = matches!(inv.target, Target::Script { .. });
        let run_ptr = run as *const RefCell<ScriptRun<'_>> as *const ();
        let result = {
            let _running = Running::start(&self.slot);
            self.call(func, script, inv.keys, inv.argv, run_ptr)
        };
        let value = match result? {
            Ok(frame) => return Ok(frame),
            Err(value) => value,
        };
        let frame = if self.killed.load(Ordering::Relaxed) {
            match self.slot.kill_reason.load(Ordering::Relaxed) {
                // Redis' reply, with where the script was (as its error handler adds).
                KILLED_BY_USER => Frame::Error(match self.hook.kill_line.get() {
                    0 => format!("{KILLED_BY_USER_TEXT} script: {}", inv.name),
                    line => format!(
                        "{KILLED_BY_USER_TEXT} script: {}, on @user_{}:{line}.",
                        inv.name,
                        if inv.function { "function" } else { "script" }
                    ),
                }),
                _ => Frame::Error(TIME_LIMIT_TEXT.into()),
            }
        } else if matches!(&value, Value::String(s) if s.as_bytes() == LUA_MEMORY_ERROR.as_bytes())
        {
            Frame::Error(format!(
                "ERR Script used more than the script memory limit ({} MiB): {LUA_MEMORY_ERROR} \
                 script: {}",
                SCRIPT_MEMORY_LIMIT >> 20,
                inv.name
            ))
        } else {
            script_error(&value, inv.name)
        };
        // A script that failed may have failed for memory: give it back now.
        let _ = self.lua.gc_collect();
        Ok(frame)
    }
}

/// An mlua error's message as Lua would show it (no traceback).
fn lua_message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::SyntaxError { message, .. } => one_line(message),
        mlua::Error::RuntimeError(m) => one_line(m),
        mlua::Error::CallbackError { cause, .. } => lua_message(cause),
        other => one_line(&other.to_string()),
    }
}

/// Redis prefixes a Lua error message that has no error code with `ERR `.
fn with_err_prefix(message: &str) -> String {
    let code = message.split(' ').next().unwrap_or("");
    if !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase()) {
        message.to_string()
    } else {
        format!("ERR {message}")
    }
}

fn script_error(value: &Value, sha: &str) -> Frame {
    match value {
        // An error reply (raised by redis.call, or a table the script raised), or any other
        // error made into one by `lua_error_handler`: with the script's name and the line that
        // raised it when known (Redis' `luaCallFunction`).
        Value::Table(t) => match t.get::<Value>("err") {
            Ok(Value::String(s)) => {
                let message = one_line(&s.to_string_lossy());
                if t.raw_get::<bool>(lua_stack::COUNTED).unwrap_or(false) {
                    lua_stack::note_counted(&message);
                }
                match (t.get::<Value>("source"), t.get::<Value>("line")) {
                    (Ok(Value::String(source)), Ok(Value::Integer(line))) => Frame::Error(format!(
                        "{message} script: {sha}, on {}:{line}.",
                        source.to_string_lossy()
                    )),
                    _ => Frame::Error(message),
                }
            }
            _ => Frame::Error(format!("ERR Error running script script: {sha}")),
        },
        Value::String(s) => Frame::Error(format!(
            "ERR {} script: {sha}",
            one_line(&s.to_string_lossy())
        )),
        Value::Error(e) => Frame::Error(format!("ERR {} script: {sha}", one_line(&e.to_string()))),
        other => Frame::Error(format!(
            "ERR {} script: {sha}",
            one_line(&other.to_string().unwrap_or_default())
        )),
    }
}

/// Run once per state, with the private table (`hidden`) and the kill-flag reader: defines
/// `redis.call` & co, the `pcall`/`xpcall` wrappers that re-raise once the time limit has killed
/// the script, read-only views of the libraries, and returns the metatable of script
/// environments plus Lua's own `pcall`. Nothing a script can reach leads back to a mutable
/// table of the state (the globals, the libraries, the string metatable).
const PRELUDE: &str = r#"
local hidden, killed = ...
local G = _G
local raw_pcall, raw_xpcall, raw_error, raw_rawset = pcall, xpcall, error, rawset
local raw_setmetatable, raw_getmetatable, raw_loadstring = setmetatable, getmetatable, loadstring
local raw_setfenv, raw_getfenv, raw_type, raw_pairs = setfenv, getfenv, type, pairs
local raw_next, raw_rawget = next, rawget
-- Read-only view -> the table it shows (never handed to a script).
local readonly_tables = raw_setmetatable({}, {__mode = 'k'})
local function readonly_error() raw_error('Attempt to modify a readonly table', 2) end
local function readonly(t)
  local view = raw_setmetatable({}, {__index = t, __newindex = readonly_error, __metatable = false})
  readonly_tables[view] = t
  return view
end
local redis = G.redis
-- C functions (`lua_redis_call`, `lua_redis_pcall`): call raises an error reply ({err=...}).
redis.call, redis.pcall, redis.setresp = hidden.call, hidden.pcall, hidden.setresp
redis.acl_check_cmd = hidden.acl_check_cmd
local raw_sub, raw_find = string.sub, string.find
-- As Redis' `luaPushErrorBuff`: a leading '-' goes, and a text without a space (no code of its
-- own) gets the code ERR: 'x' and '-x' give 'ERR x', '' gives 'ERR ', '-A b' gives 'A b'.
redis.error_reply = function(msg)
  if raw_type(msg) ~= 'string' then raw_error('wrong number or type of arguments', 2) end
  if raw_sub(msg, 1, 1) == '-' then msg = raw_sub(msg, 2) end
  if not raw_find(msg, ' ', 1, true) then msg = 'ERR ' .. msg end
  return {err = msg}
end
redis.status_reply = function(msg)
  if raw_type(msg) ~= 'string' then raw_error('wrong number or type of arguments', 2) end
  return {ok = msg}
end
redis.log = function() end
redis.replicate_commands = function() return true end
redis.set_repl = function() end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
redis.REDIS_VERSION, redis.REDIS_VERSION_NUM = hidden.version, hidden.version_num
local function recheck(...)
  if killed() then raw_error('ERR Script killed: it ran longer than the script time limit', 0) end
  return ...
end
local base = {}
-- Every library table (`bit`, `cjson`, `cmsgpack`, `struct`…) is seen read-only, as in Redis 7.
for k, v in raw_pairs(G) do
  if k ~= '_G' and k ~= 'setfenv' and k ~= 'getfenv' then
    base[k] = raw_type(v) == 'table' and readonly(v) or v
  end
end
-- Redis 7's `pcall` (`luaRedisPcall`) gives an error table's `err` (a string or a number) in its
-- place, so `local ok, e = pcall(redis.call, ...)` sees the error text, as scripts written for
-- Redis 6 expect; any other error object is given as it is.
local function pcall_result(ok, ...)
  recheck()
  if ok then return ok, ... end
  local e = ...
  if raw_type(e) == 'table' then
    local text = e.err
    local kind = raw_type(text)
    if kind == 'string' or kind == 'number' then e = text end
  end
  return false, e
end
base.pcall = function(...) return pcall_result(raw_pcall(...)) end
base.xpcall = function(...) return recheck(raw_xpcall(...)) end
base.rawset = function(t, k, v)
  -- No position: Redis raises it from `rawset` itself (a C function).
  -- A script's globals (an environment, whose metatable is hidden) are read-only too.
  if readonly_tables[t] or (raw_type(t) == 'table' and raw_getmetatable(t) == false) then
    raw_error('Attempt to modify a readonly table', 0)
  end
  return raw_rawset(t, k, v)
end
-- A view is an empty table: next, pairs and rawget read what it shows (as on Redis' read-only
-- tables), without giving the script the table itself.
base.next = function(t, k) return raw_next(readonly_tables[t] or t, k) end
base.pairs = function(t)
  if readonly_tables[t] then return base.next, t, nil end
  return raw_pairs(t)
end
base.rawget = function(t, k) return raw_rawget(readonly_tables[t] or t, k) end
-- A library table has no metatable in Redis (its read-only flag is not one).
-- A script's globals (`_G`, an environment whose metatable is hidden) show a read-only table
-- as their metatable, and setting the metatable of either is refused, with Redis 7's words
-- (its globals and their protecting metatable are read-only tables).
local shown_env_mt = readonly({})
local script_envs = raw_setmetatable({}, {__mode = 'k'})
base.getmetatable = function(t)
  if readonly_tables[t] and not script_envs[t] then return nil end
  local mt = raw_getmetatable(t)
  if mt == false then return shown_env_mt end
  return mt
end
-- A script environment shows its globals table (`KEYS`, `ARGV`, `_G`) to next, pairs and
-- rawget, as a read-only view shows its table.
hidden.show_globals = function(env, globals)
  readonly_tables[env] = globals
  script_envs[env] = true
end
base.setmetatable = function(t, mt)
  -- No position: Redis raises it from `setmetatable` itself (a C function).
  if readonly_tables[t] or (raw_type(t) == 'table' and raw_getmetatable(t) == false) then
    raw_error('Attempt to modify a readonly table', 0)
  end
  return raw_setmetatable(t, mt)
end
-- Chunks loaded by a script run in the script's own environment; no bytecode.
base.loadstring = function(s, name)
  if raw_type(s) == 'string' and s:byte(1) == 27 then return nil, 'binary chunks are not allowed' end
  local f, err = raw_loadstring(s, name)
  if f then raw_setfenv(f, raw_getfenv(2)) end
  return f, err
end
base.string = readonly(G.string)
base.table = readonly(G.table)
base.math = readonly(G.math)
base.redis = readonly(redis)
local string_mt = raw_getmetatable('')
string_mt.__index = base.string
string_mt.__metatable = readonly(string_mt)
-- A function library's environment (FUNCTION LOAD, or a state compiling a library for FCALL):
-- `redis.register_function` while the library's code runs (`collect` gets what it registers;
-- it returns an error text or nil), `redis.call`/`pcall` missing then, as in Redis; reading a
-- global the sandbox does not have is an error; writing any is too. Returns the environment
-- and the function that ends the loading.
local flag_bits = {['no-writes'] = 1, ['allow-oom'] = 2, ['allow-stale'] = 4, ['no-cluster'] = 8,
  ['allow-cross-slot-keys'] = 16}
local raw_select, raw_tostring = select, tostring
local function fail(msg) raw_error(msg, 0) end
local load_api = {log = true, LOG_DEBUG = true, LOG_VERBOSE = true, LOG_NOTICE = true,
  LOG_WARNING = true, REDIS_VERSION = true, REDIS_VERSION_NUM = true}
-- Reading a global the sandbox does not have is an error in a script too, as in Redis 7 (a
-- script's environment reads through `base`). Regression:
-- `test_an_error_escaping_a_script_names_the_script_and_its_line`.
raw_setmetatable(base, {
  __index = function(_, k)
    raw_error("Script attempted to access nonexistent global variable '" .. raw_tostring(k) .. "'", 2)
  end,
  __metatable = false})
hidden.library_env = function(collect)
  local loading = true
  local function register_function(...)
    local n = raw_select('#', ...)
    local name, callback, flags, description
    if n == 1 then
      local t = ...
      if raw_type(t) ~= 'table' then
        fail('ERR calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).')
      end
      for k, v in raw_pairs(t) do
        if k == 'function_name' then name = v
        elseif k == 'callback' then callback = v
        elseif k == 'flags' then flags = v
        elseif k == 'description' then description = v
        else fail('ERR unknown argument given to redis.register_function') end
      end
      if name == nil then fail('ERR redis.register_function must get a function name argument') end
      if callback == nil then fail('ERR redis.register_function must get a callback argument') end
      if raw_type(name) == 'number' then name = raw_tostring(name) end
      if raw_type(name) ~= 'string' then fail('ERR function_name argument given to redis.register_function must be a string') end
      if raw_type(callback) ~= 'function' then fail('ERR callback argument given to redis.register_function must be a function') end
      if raw_type(description) == 'number' then description = raw_tostring(description) end
      if description ~= nil and raw_type(description) ~= 'string' then
        fail('ERR description argument given to redis.register_function must be a string')
      end
    elseif n == 2 then
      name, callback = ...
      -- A number is a string to Lua's C API, as Redis reads it.
      if raw_type(name) == 'number' then name = raw_tostring(name) end
      if raw_type(name) ~= 'string' then fail('ERR first argument to redis.register_function must be a string') end
      if raw_type(callback) ~= 'function' then fail('ERR second argument to redis.register_function must be a function') end
    else
      fail('ERR wrong number of arguments to redis.register_function')
    end
    local bits = 0
    if flags ~= nil then
      if raw_type(flags) ~= 'table' then fail('ERR flags argument to redis.register_function must be a table representing function flags') end
      for _, f in raw_pairs(flags) do
        local bit = raw_type(f) == 'string' and flag_bits[f]
        if not bit then fail('ERR unknown flag given') end
        if bits % (bit * 2) < bit then bits = bits + bit end
      end
    end
    local err = collect(name, callback, bits, description)
    if err then fail(err) end
  end
  local function nonexistent(k)
    raw_error("Script attempted to access nonexistent global variable '" .. raw_tostring(k) .. "'", 3)
  end
  -- While the library's code runs, Redis 7.2 gives it only `redis` with these (its "load
  -- library globals"): anything else, `math` or `redis.call` alike, does not exist. A function
  -- that kept that table finds `register_function` refusing once the load is over.
  local function register_after_load()
    raw_error('redis.register_function can only be called on FUNCTION LOAD command', 2)
  end
  local lib_redis = raw_setmetatable({}, {
    __index = function(_, k)
      if k == 'register_function' then
        if loading then return register_function end
        return register_after_load
      end
      if not load_api[k] then nonexistent(k) end
      return base.redis[k]
    end,
    __newindex = readonly_error, __metatable = false})
  local env
  env = raw_setmetatable({}, {
    __index = function(_, k)
      if loading then
        if k == 'redis' then return lib_redis end
        nonexistent(k)
      end
      -- `_G` is the environment itself, read-only, as a Redis 7.2 function sees its globals.
      if k == '_G' then return env end
      local v = raw_rawget(base, k)
      if v == nil then nonexistent(k) end
      return v
    end,
    __newindex = readonly_error, __metatable = false})
  return env, function() loading = false end
end
return {__index = base, __newindex = readonly_error, __metatable = false}, raw_pcall
"#;

/// A Lua 5.1 state with only the safe libraries (the prelude then makes them read-only).
fn new_state() -> mlua::Result<Lua> {
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH,
        LuaOptions::default(),
    )?;
    // No memory limit outside a run's Lua code (see `MemoryLimit`).
    let _ = lua.set_memory_limit(0);
    lua.gc_set_pause(GC_PAUSE);
    let globals = lua.globals();
    for name in [
        "loadfile",
        "dofile",
        "load",
        "require",
        "module",
        "package",
        "coroutine",
        "newproxy",
        "collectgarbage",
        "gcinfo",
        "print",
    ] {
        globals.raw_remove(name)?;
    }
    let redis = lua.create_table()?;
    // SAFETY: `lua_sha1hex` raises only with nothing of Rust to drop (see it).
    redis.set("sha1hex", unsafe { lua.create_c_function(lua_sha1hex)? })?;
    globals.set("redis", redis)?;
    // The libraries Redis bundles (the prelude makes them read-only).
    // SAFETY: `push_library` follows `lua_stack`'s contract: no memory limit yet.
    let bit: Table =
        unsafe { lua.exec_raw((), |state| lua_bit::push_library(state, lua_library_call))? };
    globals.set("bit", bit)?;
    // SAFETY: as above.
    let cjson: Table =
        unsafe { lua.exec_raw((), |state| lua_cjson::push_table(state, lua_library_call))? };
    globals.set("cjson", cjson)?;
    lua_cmsgpack::install(&lua, &globals)?;
    lua_struct::install(&lua, &globals)?;
    Ok(lua)
}

/// Lua's memory limit, on only while Lua code runs.
///
/// mlua runs each of its own operations that may allocate (`create_string`, `raw_set`,
/// `create_table`…) inside a new C closure and a `lua_pcall` whenever the state has a memory
/// limit, so that a failed allocation cannot unwind through Rust frames; with no limit an
/// allocation cannot fail (it succeeds or the process aborts, as for any Rust allocation) and
/// those operations are plain Lua API calls. A profile of `EVALSHA` showed that protection as
/// ~7 % of the server's time. So the limit is set only around the Lua code of a run (the
/// script, a function, a library's code: [`MemoryLimit::enforce`]) and lifted again inside
/// `redis.call` and after the run ([`MemoryLimit::lift`]), where Rust builds Lua values: the
/// conversions are unprotected, and a script still cannot allocate past the limit — not in
/// one step either (`string.rep`, `..`, `table.concat` allocate through the same allocator
/// and fail as soon as they cross it). A reply built by `redis.call` may take the state over
/// the limit; the script's next allocation then fails.
struct MemoryLimit<'a> {
    lua: &'a Lua,
    restore: usize,
}

impl<'a> MemoryLimit<'a> {
    /// Set the limit until the guard is dropped.
    fn enforce(lua: &'a Lua) -> MemoryLimit<'a> {
        MemoryLimit::set(lua, SCRIPT_MEMORY_LIMIT)
    }

    /// Lift the limit until the guard is dropped (then restore what it was).
    fn lift(lua: &'a Lua) -> MemoryLimit<'a> {
        MemoryLimit::set(lua, 0)
    }

    fn set(lua: &'a Lua, limit: usize) -> MemoryLimit<'a> {
        // Only an embedded module's state has no limit to set; this one always has.
        let restore = lua.set_memory_limit(limit).unwrap_or(0);
        MemoryLimit { lua, restore }
    }
}

impl Drop for MemoryLimit<'_> {
    fn drop(&mut self) {
        let _ = self.lua.set_memory_limit(self.restore);
    }
}

/// Lua's message for an allocation that failed (here: past [`SCRIPT_MEMORY_LIMIT`]).
const LUA_MEMORY_ERROR: &str = "not enough memory";

/// Push [`LUA_MEMORY_ERROR`] onto `state`'s stack (a library function about to raise it).
///
/// # Safety
/// `state` must be a live Lua state with room for one more value on its stack.
unsafe fn push_memory_error(state: *mut mlua::ffi::lua_State) {
    // SAFETY: see the contract; the text is copied by Lua.
    unsafe {
        mlua::ffi::lua_pushlstring(
            state,
            LUA_MEMORY_ERROR.as_ptr().cast(),
            LUA_MEMORY_ERROR.len(),
        );
    }
}

/// What the C functions of a run ([`lua_run`], [`lua_redis_call`]) need of it, reached through
/// [`CALL_CONTEXT`] (a C function has no Rust closure to carry it).
#[derive(Clone, Copy)]
struct CallContext {
    /// The running script's `RefCell<ScriptRun>`; null when none (then `redis.call` fails).
    run: *const (),
    /// The state: its memory limit is set and lifted around the script's own code.
    lua: *const Lua,
    /// The state's kill flag and entry among the running scripts.
    killed: *const AtomicBool,
    slot: *const RunSlot,
    /// `KEYS`/`ARGV` (a function's `keys`/`args`).
    keys: *const [Bytes],
    argv: *const [Bytes],
    /// Where [`lua_run`] leaves the reply of a script that returned.
    reply: *mut Option<Frame>,
    /// The run's protocol: set by `redis.setresp`, read by `redis.call` and [`lua_run`].
    resp3: *const Cell<bool>,
}

thread_local! {
    /// The run under way on this thread; None between runs. Set only by [`CurrentRun`].
    static CALL_CONTEXT: Cell<Option<CallContext>> = const { Cell::new(None) };
}

/// Makes a run the one the C functions reach, for as long as it lives (until the end of the
/// run, or a panic through it).
struct CurrentRun;

impl CurrentRun {
    /// Every pointer in `context` must stay valid while the guard lives.
    fn set(context: CallContext) -> CurrentRun {
        CALL_CONTEXT.with(|c| c.set(Some(context)));
        CurrentRun
    }
}

impl Drop for CurrentRun {
    fn drop(&mut self) {
        CALL_CONTEXT.with(|c| c.set(None));
    }
}

/// Runs a script or function; mlua calls it (protected) with the function and, for an EVAL
/// script, the scripts' environment and its `KEYS` and `ARGV` tables (else nothing), with no
/// memory limit:
/// 1. an EVAL script's environment, `KEYS` and `ARGV` are emptied (whatever the last script
///    put in them) and the lists refilled (the environment shows them, and `_G`, through
///    `Vm::script_globals`); a function gets fresh `keys` and `args` tables as its arguments (as Redis
///    does, sized for their items: a library may keep them);
/// 2. the function runs under Lua's `pcall`, with the memory limit on (see [`MemoryLimit`]);
/// 3. it returns `true` and leaves the reply (Redis' conversion of the first value the
///    script returned) in the context's `reply`, or returns `false` and the error value.
///
/// The Lua API calls outside step 2 run with no memory limit and cannot raise (see
/// `lua_stack`); step 2 is protected.
unsafe extern "C-unwind" fn lua_run(state: *mut ffi::lua_State) -> c_int {
    let Some(context) = CALL_CONTEXT.with(Cell::get) else {
        return 0;
    };
    ffi::lua_settop(state, 4);
    // [function, env|nil, KEYS, ARGV, handler] (made once per state: see `Vm::new`)
    ffi::lua_getfield(state, ffi::LUA_REGISTRYINDEX, ERROR_HANDLER_KEY.as_ptr());
    let handler = ffi::lua_gettop(state);
    let (keys, argv) = (&*context.keys, &*context.argv);
    let nargs = if ffi::lua_type(state, 2) == ffi::LUA_TTABLE {
        // [function, env, KEYS, ARGV]
        for table in 2..=4 {
            lua_stack::clear_table(state, table);
        }
        // (The environment shows them through its globals table: see `Vm::script_globals`.)
        lua_stack::fill_string_list(state, 3, keys);
        lua_stack::fill_string_list(state, 4, argv);
        ffi::lua_pushvalue(state, 1);
        0
    } else {
        ffi::lua_pushvalue(state, 1);
        lua_stack::push_string_list(state, keys);
        lua_stack::push_string_list(state, argv);
        2
    };
    let status = {
        let _limit = MemoryLimit::enforce(&*context.lua);
        ffi::lua_pcall(state, nargs, 1, handler)
    };
    if status != 0 {
        // [..., error] → false, error
        ffi::lua_pushboolean(state, 0);
        ffi::lua_insert(state, -2);
        return 2;
    }
    let top = ffi::lua_gettop(state);
    let resp3 = (*context.resp3).get();
    let converted = std::panic::catch_unwind(AssertUnwindSafe(|| {
        lua_stack::to_frame(state, top, 0, resp3)
    }));
    *context.reply = Some(converted.unwrap_or_else(|_| {
        CmdError::err("internal error converting the script's reply").to_frame()
    }));
    ffi::lua_pushboolean(state, 1);
    1
}

/// `redis.call`: runs the command; an error reply (`{err=…}`) is raised as is (no position
/// added), as Redis does.
unsafe extern "C-unwind" fn lua_redis_call(state: *mut ffi::lua_State) -> c_int {
    if redis_call(state) {
        // Nothing of `redis_call` is left that a destructor would have to free.
        ffi::lua_error(state);
    }
    1
}

/// `redis.sha1hex`, as Redis' `luaRedisSha1hexCommand`: exactly one argument (else the error
/// table `{err='ERR wrong number of arguments'}`), read with `lua_tolstring`, so a number hashes
/// as its text and anything else that is not a string as the empty string. The digest is made
/// on the stack: a failed allocation while pushing it leaves nothing of Rust behind.
unsafe extern "C-unwind" fn lua_sha1hex(state: *mut ffi::lua_State) -> c_int {
    if ffi::lua_gettop(state) != 1 {
        ffi::lua_createtable(state, 0, 1);
        let text = b"ERR wrong number of arguments";
        ffi::lua_pushlstring(state, text.as_ptr().cast(), text.len());
        ffi::lua_setfield(state, -2, c"err".as_ptr());
        ffi::lua_error(state);
    }
    let mut len = 0;
    let text = ffi::lua_tolstring(state, 1, &mut len);
    let bytes: &[u8] = if text.is_null() {
        b""
    } else {
        std::slice::from_raw_parts(text.cast(), len)
    };
    let digest = sha1_smol::Sha1::from(bytes).digest().bytes();
    let mut hex = [0u8; 40];
    for (pair, byte) in hex.chunks_exact_mut(2).zip(digest) {
        pair[0] = b"0123456789abcdef"[usize::from(byte >> 4)];
        pair[1] = b"0123456789abcdef"[usize::from(byte & 15)];
    }
    ffi::lua_pushlstring(state, hex.as_ptr().cast(), hex.len());
    1
}

/// `redis.pcall`: runs the command; its reply, errors included (as `{err=…}`).
unsafe extern "C-unwind" fn lua_redis_pcall(state: *mut ffi::lua_State) -> c_int {
    redis_call(state);
    1
}

/// `redis.setresp(2|3)`: the protocol of the run's later `redis.call`s (see the module docs).
/// Its failures are Redis' error replies, raised as `redis.call` raises one.
unsafe extern "C-unwind" fn lua_redis_setresp(state: *mut ffi::lua_State) -> c_int {
    let Some(context) = CALL_CONTEXT.with(Cell::get) else {
        return 0;
    };
    let error: &[u8] = if ffi::lua_gettop(state) != 1 {
        b"ERR redis.setresp() requires one argument."
    } else {
        // Redis reads it with `lua_tonumber` (a numeric string too) cast to an int.
        match ffi::lua_tonumber(state, 1) as c_int {
            2 => {
                (*context.resp3).set(false);
                return 0;
            }
            3 => {
                (*context.resp3).set(true);
                return 0;
            }
            _ => b"ERR RESP version must be 2 or 3.",
        }
    };
    {
        // Under the script's memory limit: lifted while the error table is made.
        let _unlimited = MemoryLimit::lift(&*context.lua);
        ffi::lua_createtable(state, 0, 1);
        lua_stack::push_field(state, ffi::lua_gettop(state), b"err", |state| {
            ffi::lua_pushlstring(state, error.as_ptr().cast(), error.len());
        });
    }
    ffi::lua_error(state)
}

/// Runs a function of a bundled library (`bit`, `cjson`: upvalue 1 is its
/// [`lua_stack::LibraryFn`]) with the run's memory limit lifted, as `lua_stack`'s contract
/// wants, and told the limit to keep to; then raises its error, if any, once nothing of Rust
/// is left to drop. A panic in it (a bug) is an error of the script, not of the server.
unsafe extern "C-unwind" fn lua_library_call(state: *mut ffi::lua_State) -> c_int {
    let outcome = {
        let context = CALL_CONTEXT.with(Cell::get);
        let unlimited = context.map(|context| MemoryLimit::lift(&*context.lua));
        let call = lua_stack::LibraryCall {
            limit: unlimited.as_ref().map_or(0, |guard| guard.restore),
            entry: lua_library_call,
        };
        match lua_stack::library_fn(state) {
            Some(f) => std::panic::catch_unwind(AssertUnwindSafe(|| f(state, &call)))
                .unwrap_or_else(|_| {
                    Err(lua_stack::raise(state, b"internal error in a Lua library"))
                }),
            None => Err(lua_stack::raise(state, b"internal error in a Lua library")),
        }
        .inspect_err(|raise| {
            if *raise == lua_stack::Raise::Error {
                // `luaL_error`'s position: of the Lua code that called, if any.
                ffi::luaL_where(state, 1);
                ffi::lua_insert(state, -2);
                ffi::lua_concat(state, 2);
            }
        })
    };
    match outcome {
        Ok(results) => results,
        Err(lua_stack::Raise::Error | lua_stack::Raise::Memory) => ffi::lua_error(state),
        Err(lua_stack::Raise::Argument(n)) => {
            ffi::luaL_argerror(state, n, ffi::lua_tostring(state, -1))
        }
    }
}

/// Where [`Vm::new`] keeps [`lua_error_handler`] in the state's registry (one closure per state,
/// not one per run).
const ERROR_HANDLER_KEY: &std::ffi::CStr = c"gradus.error_handler";

/// The error handler a run's code is called under (Redis' `__redis__err__handler`): an error
/// that is not a table becomes `{err='ERR ' .. tostring(err)}`, and the table gets the `source`
/// and `line` of the Lua code that raised it (skipping a C function such as `redis.call` or
/// `error`), so the reply ends `script: <name>, on @user_script:<line>.` as Redis' does.
/// Regression: `test_an_error_escaping_a_script_names_the_script_and_its_line`.
unsafe extern "C-unwind" fn lua_error_handler(state: *mut ffi::lua_State) -> c_int {
    let Some(context) = CALL_CONTEXT.with(Cell::get) else {
        return 1;
    };
    // The handler runs under the run's memory limit: lifted while it builds the table.
    let _unlimited = MemoryLimit::lift(&*context.lua);
    ffi::lua_settop(state, 1);
    // The first frame up the stack that is the script's own code: not a C function (such as
    // `redis.call`, `error`) nor the prelude's (the sandbox's metamethods).
    let mut frame: ffi::lua_Debug = std::mem::zeroed();
    let mut found = false;
    for level in 1..16 {
        if ffi::lua_getstack(state, level, &mut frame) == 0
            || ffi::lua_getinfo(state, c"Sl".as_ptr(), &mut frame) == 0
        {
            break;
        }
        let is = |field: *const std::os::raw::c_char, text: &[u8]| {
            !field.is_null() && std::ffi::CStr::from_ptr(field).to_bytes() == text
        };
        if !is(frame.what, b"C") && !is(frame.source, b"=prelude") {
            found = true;
            break;
        }
    }
    if ffi::lua_type(state, 1) != ffi::LUA_TTABLE {
        let text = lua_stack::display(state, 1);
        ffi::lua_createtable(state, 0, 3);
        lua_stack::push_field(state, 2, b"err", |state| {
            ffi::lua_pushlstring(state, b"ERR ".as_ptr().cast(), 4);
            ffi::lua_pushlstring(state, text.as_ptr().cast(), text.len());
            ffi::lua_concat(state, 2);
        });
        ffi::lua_replace(state, 1);
    }
    if found && !frame.source.is_null() {
        let source = std::ffi::CStr::from_ptr(frame.source).to_bytes();
        lua_stack::push_field(state, 1, b"source", |state| {
            ffi::lua_pushlstring(state, source.as_ptr().cast(), source.len());
        });
        let line = frame.currentline;
        lua_stack::push_field(state, 1, b"line", |state| {
            ffi::lua_pushinteger(state, ffi::lua_Integer::from(line));
        });
    }
    1
}

/// `redis.call`/`redis.pcall`'s work: run the command for the script running on this thread
/// and push its reply, converted by Redis' rules; whether it is an error reply.
unsafe fn redis_call(state: *mut ffi::lua_State) -> bool {
    let Some(context) = CALL_CONTEXT.with(Cell::get) else {
        // Unreachable (Lua code runs only inside a run); nothing to allocate under a limit.
        ffi::lua_pushboolean(state, 0);
        return false;
    };
    let frame = std::panic::catch_unwind(AssertUnwindSafe(|| run_call(state, &context)))
        .unwrap_or_else(|_| CmdError::err("internal error running the command").to_frame());
    // Called from the script's Lua code, under the limit: lift it while the reply is pushed.
    let _unlimited = MemoryLimit::lift(&*context.lua);
    if (*context.resp3).get() {
        lua_stack::push_frame_resp3(state, &frame);
    } else {
        lua_stack::push_frame(state, &frame);
    }
    if frame.is_error() {
        // Counted when the command failed (`ScriptRun::call`): not again if the script
        // returns or raises it.
        lua_stack::mark_counted(state, ffi::lua_gettop(state));
    }
    frame.is_error()
}

/// `redis.acl_check_cmd(command, args…)`: whether the script's user may run that command with
/// those arguments (its ACL rules: command, keys, channels), as Redis'
/// `luaRedisAclCheckCmdPermissionsCommand`; an unknown command is the error `Invalid command
/// passed to redis.acl_check_cmd()`, bad arguments redis.call's errors.
unsafe extern "C-unwind" fn lua_redis_acl_check_cmd(state: *mut ffi::lua_State) -> c_int {
    let Some(context) = CALL_CONTEXT.with(Cell::get) else {
        ffi::lua_pushboolean(state, 0);
        return 1;
    };
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| acl_check(state, &context)))
        .unwrap_or(Err("internal error checking the command"));
    // Called from the script's Lua code, under the limit: lifted while the answer is pushed.
    let unlimited = MemoryLimit::lift(&*context.lua);
    match outcome {
        Ok(allowed) => {
            ffi::lua_pushboolean(state, c_int::from(allowed));
            1
        }
        Err(text) => {
            lua_stack::push_frame(state, &CmdError::err(text).to_frame());
            drop(unlimited);
            // Nothing of Rust is left that a destructor would have to free.
            ffi::lua_error(state)
        }
    }
}

/// [`lua_redis_acl_check_cmd`]'s answer for the arguments on the Lua stack.
unsafe fn acl_check(
    state: *mut ffi::lua_State,
    context: &CallContext,
) -> Result<bool, &'static str> {
    if context.run.is_null() {
        return Err("redis.acl_check_cmd can only be called inside a script invocation");
    }
    // SAFETY: as in `run_call`.
    let run = &*(context.run as *const RefCell<ScriptRun<'static>>);
    let args = lua_stack::command_args(state)?;
    let Some(spec) = table().get(&args[0]) else {
        return Err("Invalid command passed to redis.acl_check_cmd()");
    };
    let Ok(run) = run.try_borrow() else {
        return Err("redis.acl_check_cmd re-entered");
    };
    let row = spec.resolve(&args);
    Ok(crate::tenancy::check_perms(run.client, row).is_ok()
        && crate::tenancy::acl::check_acl(run.client, row, spec, &args).is_ok())
}

/// [`redis_call`]'s command (its arguments on the Lua stack): its reply frame.
unsafe fn run_call(state: *mut ffi::lua_State, context: &CallContext) -> Frame {
    if context.run.is_null() {
        return CmdError::err("redis.call is only available while a script runs").to_frame();
    }
    // SAFETY: a non-null `run` is a live `&RefCell<ScriptRun>` for as long as the context is
    // set (`Vm::call` keeps the borrow for the whole time; the guard is dropped before the
    // run's reference ends). The `'static` is never relied on: nothing from the run outlives
    // this call.
    let run = &*(context.run as *const RefCell<ScriptRun<'static>>);
    let (killed, slot) = (&*context.killed, &*context.slot);
    match lua_stack::command_args(state) {
        Ok(args) => {
            let Ok(mut run) = run.try_borrow_mut() else {
                return CmdError::err("redis.call re-entered").to_frame();
            };
            let resp = if (*context.resp3).get() {
                ProtocolVersion::Resp3
            } else {
                ProtocolVersion::Resp2
            };
            let frame = run.call(args, slot, resp);
            if run.abort.is_some() && !killed.swap(true, Ordering::Relaxed) {
                // pcall must not swallow it: the script stops here.
                slot.kill_reason.store(KILLED_TO_RESTART, Ordering::Relaxed);
            }
            frame
        }
        Err(text) => CmdError::err(text).to_frame(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's first write and a user's kill exclude each other, whichever comes first: a kill
    /// never stops a script that has written (UNKILLABLE), and a script a kill got to first
    /// writes nothing. (Checked then set, they raced across threads: a kill that saw no write
    /// could land after the script's first write.)
    #[test]
    fn the_first_write_and_a_kill_exclude_each_other() {
        let slot = RunSlot::new(Arc::new(AtomicBool::new(false)));
        assert!(slot.claim_write() && slot.claim_write());
        assert!(!slot.claim_kill());
        assert!(!slot.killed.load(Ordering::Relaxed));

        let slot = RunSlot::new(Arc::new(AtomicBool::new(false)));
        assert!(slot.claim_kill() && slot.claim_kill());
        assert!(slot.killed.load(Ordering::Relaxed));
        assert_eq!(slot.kill_reason.load(Ordering::Relaxed), KILLED_BY_USER);
        assert!(!slot.claim_write());
    }

    /// A command let in before an exclusive script announced itself finishes before the
    /// script goes on to take the gate (it must not wait at the gate behind the script, where
    /// no BUSY reply reaches it); one that comes after the announcement waits for the script.
    #[test]
    fn an_exclusive_script_waits_for_the_commands_admitted_before_it() {
        let (admitted, early_in) = std::sync::mpsc::channel();
        let early = std::thread::spawn(move || {
            let admission = admit().expect("no script is past the threshold");
            admitted.send(()).expect("the test waits");
            std::thread::sleep(Duration::from_millis(100));
            let done = Instant::now();
            drop(admission);
            done
        });
        early_in.recv().expect("the command was admitted");
        let _unadmitted = Unadmitted::start();
        let turn = exclusive_turn().expect("no script is past the threshold");
        let announced = ExclusiveRun::start();
        wait_for_admitted().expect("no script is past the threshold");
        let drained = Instant::now();
        assert!(drained >= early.join().expect("no panic"));

        let late = std::thread::spawn(|| {
            let _admission = admit().expect("no script is past the threshold");
            Instant::now()
        });
        std::thread::sleep(Duration::from_millis(50));
        let ended = Instant::now();
        drop(announced);
        drop(turn);
        assert!(late.join().expect("no panic") >= ended);
    }

    #[test]
    fn sha1_matches_redis() {
        // SCRIPT LOAD "return 1" in Redis.
        assert_eq!(
            sha1_hex(b"return 1"),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
    }

    #[test]
    fn numbers_format_like_redis() {
        assert_eq!(lua_stack::number_arg(5.0), "5");
        assert_eq!(lua_stack::number_arg(-3.0), "-3");
        assert_eq!(lua_stack::number_arg(1.5), "1.5");
        assert_eq!(lua_stack::number_arg(1e17), "100000000000000000");
    }

    #[test]
    fn lua_values_convert_to_replies() {
        let mut vm = Vm::new().unwrap();
        assert_eq!(
            state_reuse::eval_ok(
                &mut vm,
                "return {1, 'a', 3.9, true, false, {ok='OK'}, {err='E x'}, nil, 5}"
            ),
            Frame::Array(vec![
                Frame::Integer(1),
                Frame::Bulk("a".into()),
                Frame::Integer(3),
                Frame::Integer(1),
                Frame::Null,
                Frame::Simple("OK".into()),
                Frame::Error("E x".into()),
            ])
        );
    }

    #[test]
    fn sandbox_has_no_os_or_io() {
        let mut vm = Vm::new().unwrap();
        for name in ["os", "io", "require", "loadfile", "debug", "collectgarbage"] {
            let err = state_reuse::eval(&mut vm, &format!("return type({name})")).unwrap_err();
            let Value::Table(t) = err else {
                panic!("{name}: not an error table")
            };
            let text: String = t.get("err").unwrap();
            assert!(
                text.ends_with(&format!(
                    "Script attempted to access nonexistent global variable '{name}'"
                )),
                "{name}: {text}"
            );
        }
    }

    /// Replies of every RESP type reach a script as Redis converts them, and come back out
    /// unchanged where the conversion allows.
    #[test]
    fn replies_convert_to_lua_and_back() {
        let lua = new_state().unwrap();
        let frame = Frame::Array(vec![
            Frame::Integer(-7),
            Frame::Bulk("b".into()),
            Frame::Null,
            Frame::Simple("OK".into()),
            Frame::Error("ERR x".into()),
            Frame::Array(vec![Frame::Bulk("".into()), Frame::Boolean(true)]),
            Frame::Map(vec![(Frame::Bulk("k".into()), Frame::Integer(1))]),
        ]);
        let mut back = None;
        let mut balanced = false;
        // SAFETY: a fresh state with no memory limit; the stack is restored.
        unsafe {
            lua.exec_raw::<()>((), |state| {
                lua_stack::push_frame(state, &frame);
                let top = ffi::lua_gettop(state);
                back = Some(lua_stack::to_frame(state, top, 0, false));
                balanced = ffi::lua_gettop(state) == top;
                ffi::lua_pop(state, 1);
            })
        }
        .unwrap();
        assert!(balanced);
        assert_eq!(
            back,
            Some(Frame::Array(vec![
                Frame::Integer(-7),
                Frame::Bulk("b".into()),
                Frame::Null,
                Frame::Simple("OK".into()),
                Frame::Error("ERR x".into()),
                Frame::Array(vec![Frame::Bulk("".into()), Frame::Integer(1)]),
                Frame::Array(vec![Frame::Bulk("k".into()), Frame::Integer(1)]),
            ]))
        );
    }

    /// After `redis.setresp(3)` replies reach a script in Redis' RESP3 forms, which read back
    /// as the same RESP3 replies (booleans too, in a RESP3 run); a null is nil.
    #[test]
    fn resp3_replies_convert_to_lua_and_back() {
        let lua = new_state().unwrap();
        let mut hash = gradus_proto::BulkArray::with_capacity(2, 2);
        hash.push(b"f");
        hash.push(b"v");
        let frame = Frame::Array(vec![
            Frame::Map(vec![(Frame::Bulk("k".into()), Frame::Boolean(false))]),
            Frame::Set(vec![Frame::Bulk("m".into())]),
            Frame::Double(2.5),
            Frame::BigNumber("12345678901234567890".into()),
            Frame::Verbatim {
                format: *b"txt",
                text: "a\nb".into(),
            },
            Frame::Boolean(true),
            Frame::Bulks(hash.into_map()),
            Frame::Null,
            Frame::Integer(1),
        ]);
        let mut back = None;
        // SAFETY: a fresh state with no memory limit; the stack is restored.
        unsafe {
            lua.exec_raw::<()>((), |state| {
                lua_stack::push_frame_resp3(state, &frame);
                let top = ffi::lua_gettop(state);
                back = Some((
                    lua_stack::to_frame(state, top, 0, true),
                    lua_stack::to_frame(state, top, 0, false),
                ));
                ffi::lua_pop(state, 1);
            })
        }
        .unwrap();
        let (resp3, resp2) = back.unwrap();
        let expected = Frame::Array(vec![
            Frame::Map(vec![(Frame::Bulk("k".into()), Frame::Boolean(false))]),
            Frame::Set(vec![Frame::Bulk("m".into())]),
            Frame::Double(2.5),
            Frame::BigNumber("12345678901234567890".into()),
            Frame::Verbatim {
                format: *b"txt",
                text: "a\nb".into(),
            },
            Frame::Boolean(true),
            Frame::Map(vec![(Frame::Bulk("f".into()), Frame::Bulk("v".into()))]),
        ]);
        assert_eq!(resp3, expected);
        // A RESP2 run reads the same table with false as a null, true as 1.
        let Frame::Array(items) = resp2 else {
            panic!("an array")
        };
        assert_eq!(
            items[0],
            Frame::Map(vec![(Frame::Bulk("k".into()), Frame::Null)])
        );
        assert_eq!(items[5], Frame::Integer(1));
        assert_eq!(items.len(), 7, "the null ends the array (nil in Lua)");
    }

    /// Redis' reading of malformed RESP3 forms: the first field that fits wins, a `double`
    /// that is not a number and a `verbatim_string` without its string are plain tables, the
    /// big number's line breaks are spaces and a verbatim format is cut or padded to 3 bytes.
    #[test]
    fn resp3_forms_returned_by_a_script_read_as_redis_reads_them() {
        let mut vm = Vm::new().unwrap();
        let ok = |vm: &mut Vm, body: &str| state_reuse::eval_ok(vm, body);
        assert_eq!(
            ok(&mut vm, "return {double=2, ok='x'}"),
            Frame::Simple("x".into())
        );
        assert_eq!(ok(&mut vm, "return {double='x'}"), Frame::Array(vec![]));
        assert_eq!(
            ok(&mut vm, "return {big_number='1\\r\\n2'}"),
            Frame::BigNumber("1  2".into())
        );
        assert_eq!(
            ok(
                &mut vm,
                "return {verbatim_string={format='markdown', string='s'}}"
            ),
            Frame::Verbatim {
                format: *b"mar",
                text: "s".into()
            }
        );
        assert_eq!(
            ok(&mut vm, "return {verbatim_string={format='a', string='s'}}"),
            Frame::Verbatim {
                format: *b"a  ",
                text: "s".into()
            }
        );
        assert_eq!(
            ok(&mut vm, "return {verbatim_string={format='txt'}}"),
            Frame::Array(vec![])
        );
        assert_eq!(
            ok(&mut vm, "return {set={a=true}}"),
            Frame::Set(vec![Frame::Bulk("a".into())])
        );
        assert_eq!(ok(&mut vm, "return false"), Frame::Null);
        assert_eq!(ok(&mut vm, "return true"), Frame::Integer(1));
    }
}
#[cfg(test)]
mod state_reuse {
    use super::*;

    /// Runs `body` on `vm` as a script with no `redis.call`: its reply, or what it raised.
    pub(super) fn eval(vm: &mut Vm, body: &str) -> Result<Frame, Value> {
        let body = Bytes::copy_from_slice(body.as_bytes());
        eval_with(vm, body, &[], &[])
    }

    /// Runs `body` on `vm` as a script with these KEYS and ARGV.
    fn eval_with(vm: &mut Vm, body: Bytes, keys: &[Bytes], argv: &[Bytes]) -> Result<Frame, Value> {
        let sha = sha1_hex(&body);
        vm.compile(&sha, &body).unwrap();
        vm.size_lists(keys, argv).unwrap();
        vm.time_limit = Duration::from_millis(200);
        let _running = Running::start(&vm.slot);
        vm.call(&vm.compiled[&sha], true, keys, argv, std::ptr::null())
            .unwrap()
    }

    /// An error value's text: the `err` field of the table `lua_error_handler` makes of it.
    fn error_text(v: &Value) -> String {
        match v {
            Value::Table(t) => t.get::<String>("err").unwrap_or_default(),
            other => other.to_string().unwrap_or_default(),
        }
    }

    /// Runs `body` with these KEYS and ARGV, which must succeed; its reply.
    fn ok_with(vm: &mut Vm, body: &str, keys: &[Bytes], argv: &[Bytes]) -> Frame {
        let body = Bytes::copy_from_slice(body.as_bytes());
        eval_with(vm, body, keys, argv).unwrap_or_else(|v| panic!("{}", error_text(&v)))
    }

    /// Runs `body`, which must succeed; its reply as the client would get it.
    pub(super) fn eval_ok(vm: &mut Vm, body: &str) -> Frame {
        eval(vm, body).unwrap_or_else(|v| panic!("{body}: {}", error_text(&v)))
    }

    /// The prelude's `pcall` wrapper re-raises once the hook has killed the script, and the
    /// state runs the next script normally.
    #[test]
    fn pcall_cannot_swallow_the_kill() {
        let mut vm = Vm::new().unwrap();
        let killed = eval(
            &mut vm,
            "while true do pcall(function() while true do end end) end",
        );
        assert!(killed.is_err());
        assert!(vm.killed.load(Ordering::Relaxed));
        assert_eq!(eval_ok(&mut vm, "return 41 + 1"), Frame::Integer(42));
    }

    /// Nothing one script does is seen by the next on the same state.
    #[test]
    fn scripts_cannot_change_what_the_next_one_sees() {
        let mut vm = Vm::new().unwrap();
        for attack in [
            "x = 1",
            "_G.x = 1",
            "string.len = nil",
            "redis.call = nil",
            "math.floor = nil",
            "rawset(string, 'len', nil)",
            "rawset(table, 'insert', nil)",
            "getmetatable('').__index = {}",
            "getmetatable('').len = nil",
            "setmetatable(string, {})",
            "loadstring('y = 2')()",
        ] {
            let err = eval(&mut vm, attack).expect_err(attack);
            let text = error_text(&err);
            assert!(
                text.contains("readonly") || text.contains("protected metatable"),
                "{attack}: {text}"
            );
        }
        assert_eq!(
            eval_ok(
                &mut vm,
                "return {type(rawget(_G, 'x')), type(rawget(_G, 'y')), string.len('abc'), \
                 ('abc'):upper(), math.floor(2.5), \
                 type(redis.call), type(table.insert)}",
            ),
            Frame::Array(vec![
                Frame::Bulk("nil".into()),
                Frame::Bulk("nil".into()),
                Frame::Integer(3),
                Frame::Bulk("ABC".into()),
                Frame::Integer(2),
                Frame::Bulk("function".into()),
                Frame::Bulk("function".into()),
            ])
        );
    }

    /// The environment, KEYS and ARGV are reused from run to run: whatever a script put in them
    /// is gone for the next one.
    #[test]
    fn reused_keys_argv_and_environment_start_clean() {
        let mut vm = Vm::new().unwrap();
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        ok_with(
            &mut vm,
            "KEYS[3] = 'x' KEYS.n = 1 ARGV[1] = 'changed' table.insert(ARGV, 'more') return 1",
            &[b("k1"), b("k2")],
            &[b("a1")],
        );
        assert_eq!(
            ok_with(
                &mut vm,
                "return {#KEYS, #ARGV, KEYS[1], ARGV[1], type(rawget(_G, 'left')), type(KEYS.n), \
                 type(KEYS[3]), type(ARGV[2]), _G.KEYS == KEYS and 1 or 0}",
                &[b("only")],
                &[b("arg")],
            ),
            Frame::Array(vec![
                Frame::Integer(1),
                Frame::Integer(1),
                Frame::Bulk("only".into()),
                Frame::Bulk("arg".into()),
                Frame::Bulk("nil".into()),
                Frame::Bulk("nil".into()),
                Frame::Bulk("nil".into()),
                Frame::Bulk("nil".into()),
                Frame::Integer(1),
            ])
        );
        let long: Vec<Bytes> = (0..1025).map(|i| b(&i.to_string())).collect();
        assert_eq!(
            ok_with(&mut vm, "return #KEYS", &long, &[]),
            Frame::Integer(1025)
        );
        assert_eq!(
            ok_with(&mut vm, "return #KEYS + #ARGV", &[], &[]),
            Frame::Integer(0)
        );
    }

    /// Regression: emptying the reused tables with mlua's `Table::clear` left one value on the
    /// Lua stack per run, and after a few thousand runs every script failed with "out of Lua
    /// stack".
    #[test]
    fn many_runs_do_not_exhaust_the_lua_stack() {
        let mut vm = Vm::new().unwrap();
        let key = [Bytes::from_static(b"k")];
        for _ in 0..20_000 {
            ok_with(&mut vm, "return KEYS[1]", &key, &key);
        }
    }

    /// Locals, tables of the script's own, and chunks it loads work as usual; bytecode does not
    /// load.
    #[test]
    fn scripts_keep_their_own_tables_and_loaded_chunks() {
        let mut vm = Vm::new().unwrap();
        assert_eq!(
            eval_ok(
                &mut vm,
                "local t = {} t.a = 5 rawset(t, 'b', 6) local f = loadstring('return KEYS') \
                 return {t.a, t.b, type(f), type(loadstring(string.dump(function() end)))}",
            ),
            Frame::Array(vec![
                Frame::Integer(5),
                Frame::Integer(6),
                Frame::Bulk("function".into()),
                Frame::Bulk("nil".into()),
            ])
        );
    }

    /// A script that allocates past the memory limit — in many steps or in one — fails with
    /// Lua's memory error, the state runs the next script, and between runs the state has no
    /// limit (mlua's conversions run unprotected then: see `MemoryLimit`).
    #[test]
    fn a_script_over_the_memory_limit_fails_and_the_next_one_runs() {
        let mut vm = Vm::new().unwrap();
        for hog in [
            "local s = string.rep('x', 1024 * 1024) for i = 1, 20 do s = s .. s end return #s",
            "local s = string.rep('y', 1024 * 1024) local t = {} \
             for i = 1, 1e9 do t[i] = s .. i end return #t",
            // One step: table.concat makes the whole string in one C call.
            "local s = string.rep('z', 1024 * 1024) local t = {} \
             for i = 1, 300 do t[i] = s end return #table.concat(t)",
        ] {
            let err = eval(&mut vm, hog).expect_err(hog);
            assert_eq!(error_text(&err), LUA_MEMORY_ERROR, "{hog}");
            vm.lua.gc_collect().unwrap();
            assert!(vm.lua.used_memory() < SCRIPT_MEMORY_LIMIT / 8);
            assert_eq!(eval_ok(&mut vm, "return 41 + 1"), Frame::Integer(42));
            assert_eq!(
                vm.lua.set_memory_limit(0).unwrap(),
                0,
                "a limit between runs"
            );
        }
    }

    /// Regression: the prelude's `reset_env` (Lua code) ran before the run's deadline and kill
    /// flag were reset, so when the instruction hook fired inside it after the thread had been
    /// idle for longer than the time limit (or after a killed script), the next script failed
    /// with "Script killed: it ran longer than the script time limit" and the state was dropped.
    /// (The environment is now readied in C, but a run must still start from a fresh deadline
    /// and kill flag.)
    #[test]
    fn a_state_idle_past_the_time_limit_or_killed_runs_the_next_script() {
        let mut vm = Vm::new().unwrap();
        let many: Vec<Bytes> = (0..1000).map(|i| Bytes::from(i.to_string())).collect();
        for i in 0..6 {
            let long_ago = Instant::now().checked_sub(Duration::from_secs(10));
            vm.hook.deadline.set(long_ago.unwrap_or_else(Instant::now));
            vm.killed.store(i % 2 == 1, Ordering::Relaxed);
            // ~12,000 instructions: the hook (every 10,000) fires while it runs.
            assert_eq!(
                ok_with(
                    &mut vm,
                    "local n = 0 for i = 1, #KEYS do n = n + #KEYS[i] end return #KEYS",
                    &many,
                    &many
                ),
                Frame::Integer(1000)
            );
        }
    }

    /// Regression: `call` cleared the kill flag after `Running::start` had shown the run to
    /// SCRIPT KILL, so a kill landing between the two answered OK and the script ran on (past
    /// the threshold, for ever on a multi-threaded runtime; found as a runner that never got a
    /// reply in test_busy_scripts.py's two-script kill).
    #[test]
    fn a_kill_that_sees_the_run_started_stops_it() {
        let mut vm = Vm::new().unwrap();
        let body = Bytes::from_static(b"local a = 1 while true do a = a + 1 end");
        let sha = sha1_hex(&body);
        vm.compile(&sha, &body).unwrap();
        vm.time_limit = Duration::from_secs(5);
        vm.slot.write_or_kill.store(FRESH, Ordering::Relaxed);
        let started = Instant::now();
        let out = {
            let _running = Running::start(&vm.slot);
            assert!(vm.slot.claim_kill(), "a SCRIPT KILL that saw the run");
            vm.call(&vm.compiled[&sha], true, &[], &[], std::ptr::null())
                .unwrap()
        };
        assert!(out.is_err());
        assert_eq!(vm.slot.kill_reason.load(Ordering::Relaxed), KILLED_BY_USER);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "stopped by the kill, not the limit"
        );
    }

    /// SCRIPT FLUSH empties every state's compiled cache.
    #[test]
    fn a_flush_drops_compiled_scripts() {
        let mut vm = Vm::new().unwrap();
        eval_ok(&mut vm, "return 1");
        assert_eq!(vm.compiled.len(), 1);
        flush_scripts();
        eval_ok(&mut vm, "return 2");
        assert_eq!(vm.compiled.len(), 1, "the old script was dropped");
    }
}
