//! Lua scripting: EVAL, EVALSHA, SCRIPT LOAD|EXISTS|FLUSH|HELP, and FUNCTION FLUSH as a no-op.
//!
//! Scripts run in an embedded Lua 5.1 (the `mlua` crate, vendored), the version Redis uses.
//! Each call gets a fresh, sandboxed Lua state (no `os`, `io`, `package`/`require`, `loadfile`,
//! `dofile`, `coroutine`, `debug`): simple, and no script can leave globals behind for another.
//!
//! Atomicity and logging work exactly like EXEC (see `transactions.rs`): the script runs under the
//! *exclusive* hold of the store gate, `redis.call`/`redis.pcall` go through the command table and
//! [`crate::dispatch::run`] with one clock reading for the whole script, and every successful write
//! is collected as a [`LoggedCommand`]; after the script they are appended as ONE record at the
//! strongest degree seen. The log therefore holds the script's *effects*, never its text: replay
//! never runs Lua, so `TIME` or `math.random` inside a script come back with the same values.
//!
//! A script cannot hold the gate forever: an instruction-count hook aborts it after
//! [`SCRIPT_TIME_LIMIT`], and keeps aborting it if the script catches the error with `pcall`.
//!
//! This module depends on the command table and dispatch only; it must not touch the log directly
//! other than through `shared.persist`.

use super::{cmd, flags, table, CommandSpec, Ctx, NO_KEYS};
use crate::client::ClientState;
use crate::dispatch;
use crate::error::{CmdError, CmdResult};
use crate::persist::record::LoggedCommand;
use crate::state::Shared;
use bytes::Bytes;
use gradus_log::Durability;
use gradus_proto::Frame;
use mlua::{HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Longest a script may run before it is aborted (Redis' `busy-reply-threshold` is 5 s too,
/// but Redis only starts answering BUSY; here the script is stopped so the gate is released).
pub const SCRIPT_TIME_LIMIT: Duration = Duration::from_secs(5);
/// The hook runs every this many VM instructions.
const HOOK_EVERY: u32 = 10_000;
/// Memory a single script's Lua state may allocate.
const SCRIPT_MEMORY_LIMIT: usize = 256 * 1024 * 1024;

const SCRIPT_FLAGS: u32 = flags::OWN_GATE | flags::DENYOOM;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("eval", -3, SCRIPT_FLAGS, NO_KEYS, "scripting", "Executes a server-side Lua script.", eval),
    cmd("evalsha", -3, SCRIPT_FLAGS, NO_KEYS, "scripting", "Executes a server-side Lua script by SHA1 digest.", evalsha),
    cmd("script", -2, flags::NO_MULTI, NO_KEYS, "scripting", "A container for Lua scripts management commands.", script),
    cmd("function", -2, flags::NO_MULTI, NO_KEYS, "scripting", "A container for function commands (only FUNCTION FLUSH, which has nothing to flush).", function),
];

/// The script cache: lower-case hex SHA1 → script body.
///
/// Process-wide (a static, not a field of `Shared`): one server per process in production; in
/// unit tests several servers would share it, which is harmless because a body's key is its own
/// digest. Held only for a lookup or an insert, never while a script runs.
fn cache() -> &'static Mutex<HashMap<String, Bytes>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Bytes>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Lower-case hex SHA1 of `body`.
pub fn sha1_hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

/// Store `body` in the cache and return its digest.
fn cache_script(body: &Bytes) -> String {
    let sha = sha1_hex(body);
    cache()
        .lock()
        .entry(sha.clone())
        .or_insert_with(|| body.clone());
    sha
}

fn eval(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (keys, argv) = split_keys(args)?;
    let body = args[1].clone();
    let sha = cache_script(&body);
    run_script(ctx, &sha, &body, keys, argv)
}

fn evalsha(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (keys, argv) = split_keys(args)?;
    let sha = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    let body = cache().lock().get(&sha).cloned();
    let Some(body) = body else {
        return Err(CmdError::Other(
            "NOSCRIPT No matching script. Please use EVAL.".into(),
        ));
    };
    run_script(ctx, &sha, &body, keys, argv)
}

/// `args` = [EVAL, script, numkeys, key..., arg...] → (keys, args), with Redis' errors.
fn split_keys(args: &[Bytes]) -> Result<(&[Bytes], &[Bytes]), CmdError> {
    let numkeys: i64 = std::str::from_utf8(&args[2])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(CmdError::NotInteger)?;
    if numkeys < 0 {
        return Err(CmdError::err("Number of keys can't be negative"));
    }
    let rest = &args[3..];
    if numkeys as u64 > rest.len() as u64 {
        return Err(CmdError::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    Ok(rest.split_at(numkeys as usize))
}

fn script(_ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match (sub.as_str(), args.len()) {
        ("load", 3) => Ok(Frame::Bulk(cache_script(&args[2]).into())),
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
            cache().lock().clear();
            Ok(Frame::ok())
        }
        ("flush", 3)
            if args[2].eq_ignore_ascii_case(b"async") || args[2].eq_ignore_ascii_case(b"sync") =>
        {
            cache().lock().clear();
            Ok(Frame::ok())
        }
        ("flush", _) => Err(CmdError::Syntax),
        ("help", 2) => Ok(Frame::Array(
            [
                "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "EXISTS <sha1> [<sha1> ...]",
                "    Return information about the existence of the scripts in the script cache.",
                "FLUSH [ASYNC|SYNC]",
                "    Flush the Lua scripts cache.",
                "LOAD <script>",
                "    Load a script into the scripts cache without executing it.",
                "HELP",
                "    Print this help.",
            ]
            .iter()
            .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
            .collect(),
        )),
        ("load" | "exists" | "help", _) => Err(CmdError::Other(format!(
            "ERR unknown subcommand or wrong number of arguments for '{sub}'. Try SCRIPT HELP."
        ))),
        _ => Err(CmdError::UnknownSubcommand {
            cmd: "SCRIPT".into(),
            sub: String::from_utf8_lossy(&args[1]).into_owned(),
        }),
    }
}

/// Gradus has no Redis Functions; FUNCTION FLUSH succeeds because there is nothing to flush
/// (test suites and frameworks call it on setup).
fn function(_ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args[1].eq_ignore_ascii_case(b"flush") && args.len() <= 3 {
        return Ok(Frame::ok());
    }
    Err(CmdError::err(
        "Redis Functions are not supported by Gradus (only FUNCTION FLUSH, a no-op)",
    ))
}

/// Commands a script may not call (Redis flags them `noscript`), besides every command that is
/// itself not allowed in MULTI, manages the gate itself, or is never queued.
const NOT_IN_SCRIPTS: &[&str] = &[
    "eval",
    "evalsha",
    "script",
    "function",
    "subscribe",
    "psubscribe",
    "unsubscribe",
    "punsubscribe",
    "ssubscribe",
    "sunsubscribe",
    "monitor",
    "auth",
    "hello",
    "reset",
    "quit",
    "client",
    "config",
    "sync",
    "psync",
    "debug",
];

fn allowed_in_script(spec: &CommandSpec) -> bool {
    !(spec.has(flags::NO_MULTI | flags::NO_QUEUE | flags::OWN_GATE)
        || NOT_IN_SCRIPTS.contains(&spec.name)
        // Locks wait server-side and log themselves: neither fits under the exclusive gate.
        || spec.group == "locks"
        || spec.has(flags::SELF_LOGGED))
}

/// What `redis.call` needs while a script runs.
struct ScriptRun<'a> {
    shared: &'a Shared,
    client: &'a mut ClientState,
    now_ms: u64,
    logged: Vec<LoggedCommand>,
    degree: Durability,
}

impl ScriptRun<'_> {
    /// Run one command for the script and return its reply (errors as error frames).
    fn call(&mut self, args: Vec<Bytes>) -> Frame {
        let Some(spec) = table().get(&args[0]) else {
            return CmdError::err("Unknown Redis command called from script").to_frame();
        };
        if !spec.arity_ok(args.len()) {
            return CmdError::err("Wrong number of args calling Redis command from script")
                .to_frame();
        }
        if !allowed_in_script(spec) {
            return CmdError::err("This Redis command is not allowed from script").to_frame();
        }
        if let Err(e) = crate::tenancy::check_perms(self.client, spec, &args) {
            return e.to_frame();
        }
        if !spec.has(flags::WRITE) {
            return dispatch::run(self.shared, self.client, spec, &args, self.now_ms);
        }
        let persist = &self.shared.persist;
        let checked = persist
            .degree_for(self.client, spec)
            .and_then(|d| persist.check_writable(d).map(|_| d));
        let degree = match checked {
            Ok(d) => d,
            Err(e) => return e.to_frame(),
        };
        let db = self.client.db;
        let reply = dispatch::run(self.shared, self.client, spec, &args, self.now_ms);
        if degree.is_logged() && !reply.is_error() {
            self.logged.push(LoggedCommand { db, args });
            self.degree = self.degree.max(degree);
        }
        reply
    }
}

/// Run a script under the exclusive gate and log its writes as one record.
fn run_script(
    ctx: &mut Ctx<'_>,
    sha: &str,
    body: &Bytes,
    keys: &[Bytes],
    argv: &[Bytes],
) -> CmdResult {
    let shared = ctx.shared;
    // Inside EXEC the transaction already holds the gate exclusively (and its clock is used).
    let in_exec = ctx.client.exec_effects.is_some();
    let _exclusive = (!in_exec).then(|| shared.store.exclusive());
    let now = ctx.now_ms;
    // SELECT inside a script does not change the caller's database (as in Redis 7).
    let caller_db = ctx.client.db;
    let run = RefCell::new(ScriptRun {
        shared,
        client: &mut *ctx.client,
        now_ms: now,
        logged: Vec::new(),
        degree: Durability::None,
    });
    let reply = execute(&run, sha, body, keys, argv);
    let run = run.into_inner();
    let (logged, degree) = (run.logged, run.degree);
    ctx.client.db = caller_db;
    // All writes of the script go into one record: replay applies all of them or none, and
    // never runs the script again.
    if let Some((exec_logged, exec_degree)) = ctx.client.exec_effects.as_mut() {
        exec_logged.extend(logged);
        *exec_degree = (*exec_degree).max(degree);
        return Ok(reply);
    }
    if !logged.is_empty() {
        if let Err(e) = shared.persist.append(ctx.client, now, &logged, degree) {
            tracing::error!(error = %e, "log append failed");
            return Err(CmdError::Other(format!(
                "MISCONF script applied in memory but not logged: {e}"
            )));
        }
    }
    Ok(reply)
}

/// Compile and run the script in a fresh sandboxed state; the reply frame (errors included).
fn execute(
    run: &RefCell<ScriptRun<'_>>,
    sha: &str,
    body: &Bytes,
    keys: &[Bytes],
    argv: &[Bytes],
) -> Frame {
    let lua = match new_state() {
        Ok(lua) => lua,
        Err(e) => return CmdError::err(format!("cannot create the Lua state: {e}")).to_frame(),
    };
    // Set by the time-limit hook; read by the `pcall`/`xpcall` wrappers so a script cannot
    // swallow its own kill.
    let killed = Arc::new(AtomicBool::new(false));
    let result = lua.scope(|scope| {
        let globals = lua.globals();
        globals.set("KEYS", string_list(&lua, keys)?)?;
        globals.set("ARGV", string_list(&lua, argv)?)?;
        let redis: Table = globals.get("redis")?;
        // Both return the reply converted to Lua; `redis.call` raises error replies in the
        // Lua prelude below.
        let call = scope.create_function(|lua, args: MultiValue| {
            let frame = match command_args(&args) {
                Ok(args) => run.borrow_mut().call(args),
                Err(e) => e.to_frame(),
            };
            frame_to_lua(lua, &frame)
        })?;
        redis.set("__call", call)?;
        let flag = killed.clone();
        redis.set(
            "__killed",
            lua.create_function(move |_, ()| Ok(flag.load(Ordering::Relaxed)))?,
        )?;
        lua.load(PRELUDE).set_name("=prelude").exec()?;

        let deadline = Instant::now() + SCRIPT_TIME_LIMIT;
        let hook_flag = killed.clone();
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            move |_, _| {
                if hook_flag.load(Ordering::Relaxed) || Instant::now() > deadline {
                    hook_flag.store(true, Ordering::Relaxed);
                    return Err(mlua::Error::runtime(
                        "ERR Script killed: it ran longer than the script time limit",
                    ));
                }
                Ok(VmState::Continue)
            },
        );
        let func = match lua
            .load(body.as_ref())
            .set_name("@user_script")
            .into_function()
        {
            Ok(f) => f,
            Err(e) => {
                return Ok(Frame::Error(format!(
                    "ERR Error compiling script (new function): {}",
                    one_line(&e.to_string())
                )))
            }
        };
        let pcall: mlua::Function = redis.get("__pcall")?;
        let out: MultiValue = pcall.call(func)?;
        let mut out = out.into_iter();
        let ok = matches!(out.next(), Some(Value::Boolean(true)));
        let value = out.next().unwrap_or(Value::Nil);
        if ok {
            return Ok(lua_to_frame(&value, 0));
        }
        if killed.load(Ordering::Relaxed) {
            return Ok(Frame::Error(
                "ERR Script killed: it ran longer than the script time limit".into(),
            ));
        }
        Ok(script_error(&value, sha))
    });
    lua.remove_hook();
    match result {
        Ok(frame) => frame,
        Err(e) => Frame::Error(format!(
            "ERR Error running script: {} script: {sha}",
            one_line(&e.to_string())
        )),
    }
}

/// The reply for a script that raised `value`.
fn script_error(value: &Value, sha: &str) -> Frame {
    match value {
        // An error reply raised by redis.call (or returned by error_reply and raised): as is.
        Value::Table(t) => match t.get::<Value>("err") {
            Ok(Value::String(s)) => Frame::Error(one_line(&s.to_string_lossy())),
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

fn one_line(s: &str) -> String {
    let first = s.lines().next().unwrap_or("");
    first.replace('\r', " ")
}

/// Lua code run before the script: `redis.call`/`pcall` over the Rust `__call`, and `pcall` /
/// `xpcall` wrappers that re-raise once the time limit has killed the script.
const PRELUDE: &str = r#"
local call, killed = redis.__call, redis.__killed
local raw_pcall, raw_xpcall, raw_error, unpack_ = pcall, xpcall, error, unpack
redis.__call, redis.__killed = nil, nil
redis.__pcall = raw_pcall
redis.call = function(...)
  local reply = call(...)
  if type(reply) == 'table' and reply.err ~= nil then raw_error(reply, 0) end
  return reply
end
redis.pcall = function(...) return call(...) end
redis.error_reply = function(msg)
  if type(msg) ~= 'string' then raw_error('wrong number or type of arguments', 2) end
  return {err = msg}
end
redis.status_reply = function(msg)
  if type(msg) ~= 'string' then raw_error('wrong number or type of arguments', 2) end
  return {ok = msg}
end
redis.log = function() end
redis.replicate_commands = function() return true end
redis.set_repl = function() end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
local function recheck(...)
  if killed() then raw_error('ERR Script killed: it ran longer than the script time limit', 0) end
  return ...
end
pcall = function(...) return recheck(raw_pcall(...)) end
xpcall = function(...) return recheck(raw_xpcall(...)) end
"#;

/// A fresh Lua 5.1 state with only the safe libraries.
fn new_state() -> mlua::Result<Lua> {
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH,
        LuaOptions::default(),
    )?;
    let _ = lua.set_memory_limit(SCRIPT_MEMORY_LIMIT);
    let globals = lua.globals();
    for name in [
        "loadfile",
        "dofile",
        "load",
        "require",
        "module",
        "package",
        "coroutine",
        "getfenv",
        "setfenv",
        "newproxy",
        "collectgarbage",
        "gcinfo",
    ] {
        globals.raw_remove(name)?;
    }
    let redis = lua.create_table()?;
    redis.set(
        "sha1hex",
        lua.create_function(|_, s: mlua::String| Ok(sha1_hex(&s.as_bytes())))?,
    )?;
    globals.set("redis", redis)?;
    Ok(lua)
}

fn string_list(lua: &Lua, items: &[Bytes]) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        t.raw_set(i + 1, lua.create_string(item.as_ref())?)?;
    }
    Ok(t)
}

/// `redis.call` arguments → command arguments: strings, or numbers formatted like Redis (`%.17g`).
fn command_args(args: &MultiValue) -> Result<Vec<Bytes>, CmdError> {
    if args.is_empty() {
        return Err(CmdError::err(
            "Please specify at least one argument for this redis lib call",
        ));
    }
    args.iter()
        .map(|v| match v {
            Value::String(s) => Ok(Bytes::copy_from_slice(&s.as_bytes())),
            Value::Integer(n) => Ok(Bytes::from(n.to_string())),
            Value::Number(n) => Ok(Bytes::from(format_number(*n))),
            _ => Err(CmdError::err(
                "Lua redis lib command arguments must be strings or integers",
            )),
        })
        .collect()
}

fn format_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e17 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// RESP → Lua, Redis' rules (RESP2 conversions, also for RESP3 connections).
fn frame_to_lua(lua: &Lua, frame: &Frame) -> mlua::Result<Value> {
    Ok(match frame {
        Frame::Integer(n) => Value::Integer(*n),
        Frame::Bulk(b) => Value::String(lua.create_string(b.as_ref())?),
        Frame::Verbatim { text, .. } => Value::String(lua.create_string(text.as_ref())?),
        Frame::BigNumber(s) => Value::String(lua.create_string(s)?),
        Frame::Double(d) => Value::String(lua.create_string(gradus_proto::format_double(*d))?),
        Frame::Boolean(b) => Value::Integer(*b as i64),
        Frame::Null | Frame::NullArray => Value::Boolean(false),
        Frame::Simple(s) => {
            let t = lua.create_table()?;
            t.raw_set("ok", lua.create_string(s.as_ref())?)?;
            Value::Table(t)
        }
        Frame::Error(e) => {
            let t = lua.create_table()?;
            t.raw_set("err", lua.create_string(e)?)?;
            Value::Table(t)
        }
        Frame::Array(items) | Frame::Set(items) | Frame::Push(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, frame_to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
        Frame::Map(pairs) => {
            let t = lua.create_table_with_capacity(pairs.len() * 2, 0)?;
            for (i, (k, v)) in pairs.iter().enumerate() {
                t.raw_set(2 * i + 1, frame_to_lua(lua, k)?)?;
                t.raw_set(2 * i + 2, frame_to_lua(lua, v)?)?;
            }
            Value::Table(t)
        }
    })
}

/// Deepest table nesting converted into a reply (deeper levels become nil).
const MAX_REPLY_DEPTH: usize = 64;

/// Lua → RESP, Redis' rules.
fn lua_to_frame(value: &Value, depth: usize) -> Frame {
    match value {
        Value::String(s) => Frame::Bulk(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Integer(n) => Frame::Integer(*n),
        Value::Number(n) => Frame::Integer(truncate(*n)),
        Value::Boolean(true) => Frame::Integer(1),
        Value::Boolean(false) | Value::Nil => Frame::Null,
        Value::Table(t) if depth < MAX_REPLY_DEPTH => {
            if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
                return Frame::Error(one_line(&e.to_string_lossy()));
            }
            if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
                return Frame::Simple(Bytes::copy_from_slice(&s.as_bytes()));
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(v) => items.push(lua_to_frame(&v, depth + 1)),
                }
            }
            Frame::Array(items)
        }
        _ => Frame::Null,
    }
}

/// Lua number → integer reply, truncated toward zero (saturating, NaN → 0).
fn truncate(n: f64) -> i64 {
    n as i64
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(format_number(5.0), "5");
        assert_eq!(format_number(-3.0), "-3");
        assert_eq!(format_number(1.5), "1.5");
    }

    #[test]
    fn lua_values_convert_to_replies() {
        let lua = new_state().unwrap();
        let v: Value = lua
            .load("return {1, 'a', 3.9, true, false, {ok='OK'}, {err='E x'}, nil, 5}")
            .eval()
            .unwrap();
        assert_eq!(
            lua_to_frame(&v, 0),
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
        let lua = new_state().unwrap();
        let v: Value = lua
            .load("return type(os) .. type(io) .. type(require) .. type(loadfile)")
            .eval()
            .unwrap();
        assert_eq!(lua_to_frame(&v, 0), Frame::Bulk("nilnilnilnil".into()));
    }
}
#[cfg(test)]
mod time_limit {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// The prelude's `pcall` wrapper re-raises once the hook has killed the script.
    #[test]
    fn pcall_cannot_swallow_the_kill() {
        let lua = super::new_state().unwrap();
        let killed = Arc::new(AtomicBool::new(false));
        let redis: mlua::Table = lua.globals().get("redis").unwrap();
        redis
            .set("__call", lua.create_function(|_, ()| Ok(1)).unwrap())
            .unwrap();
        let flag = killed.clone();
        let read = lua.create_function(move |_, ()| Ok(flag.load(Ordering::Relaxed)));
        redis.set("__killed", read.unwrap()).unwrap();
        lua.load(super::PRELUDE).exec().unwrap();
        let start = std::time::Instant::now();
        let hook_flag = killed.clone();
        let triggers = mlua::HookTriggers::new().every_nth_instruction(10_000);
        lua.set_hook(triggers, move |_, _| {
            if hook_flag.load(Ordering::Relaxed)
                || start.elapsed() > std::time::Duration::from_millis(100)
            {
                hook_flag.store(true, Ordering::Relaxed);
                return Err(mlua::Error::runtime("killed"));
            }
            Ok(mlua::VmState::Continue)
        });
        let body = "while true do pcall(function() while true do end end) end";
        let f = lua.load(body).into_function().unwrap();
        let pcall: mlua::Function = redis.get("__pcall").unwrap();
        let r: mlua::MultiValue = pcall.call(f).unwrap();
        assert!(matches!(r.front(), Some(mlua::Value::Boolean(false))));
        assert!(killed.load(Ordering::Relaxed));
    }
}
