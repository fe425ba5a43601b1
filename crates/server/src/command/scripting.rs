//! Lua scripting: EVAL, EVALSHA, SCRIPT LOAD|EXISTS|FLUSH|HELP, and FUNCTION FLUSH as a no-op.
//!
//! Scripts run in an embedded Lua 5.1 (the `mlua` crate, vendored), the version Redis uses, in a
//! sandbox (no `os`, `io`, `package`/`require`, `loadfile`, `dofile`, `coroutine`, `debug`). Like
//! Redis, each thread keeps one Lua state and the compiled scripts ([`Vm`]); as in Redis 7 the
//! globals and the libraries are read-only and each script has its own environment, so no script
//! can leave anything behind for another.
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

use super::{cmd, flags, sub, table, CommandSpec, Ctx, NO_KEYS};
use crate::client::ClientState;
use crate::dispatch;
use crate::error::{CmdError, CmdResult};
use crate::persist::write::WriteTxn;
use crate::state::Shared;
use bytes::Bytes;
use gradus_proto::Frame;
use mlua::{Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState};
use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Longest a script may run before it is aborted (Redis' `busy-reply-threshold` is 5 s too,
/// but Redis only starts answering BUSY; here the script is stopped so the gate is released).
pub const SCRIPT_TIME_LIMIT: Duration = Duration::from_secs(5);
/// The hook runs every this many VM instructions.
const HOOK_EVERY: u32 = 10_000;
/// Memory a single script's Lua state may allocate.
const SCRIPT_MEMORY_LIMIT: usize = 256 * 1024 * 1024;

const SCRIPT_FLAGS: u32 = flags::OWN_GATE | flags::DENYOOM | flags::NOSCRIPT;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("eval", -3, SCRIPT_FLAGS, NO_KEYS, "scripting", "Executes a server-side Lua script.", eval),
    cmd("evalsha", -3, SCRIPT_FLAGS, NO_KEYS, "scripting", "Executes a server-side Lua script by SHA1 digest.", evalsha),
    cmd("script", -2, flags::NO_MULTI | flags::NOSCRIPT, NO_KEYS, "scripting", "A container for Lua scripts management commands.", script).with_subcommands(&[
        sub("script|load", 3, flags::NO_MULTI | flags::NOSCRIPT, "Loads a server-side Lua script to the script cache."),
        sub("script|exists", -3, flags::NO_MULTI | flags::NOSCRIPT, "Determines whether server-side Lua scripts exist in the script cache."),
        // Empties every tenant's script cache: an administrator's right.
        sub("script|flush", -2, flags::ADMIN | flags::NO_MULTI | flags::NOSCRIPT, "Removes all server-side Lua scripts from the script cache."),
        sub("script|help", 2, flags::NO_MULTI | flags::NOSCRIPT, "Returns helpful text about the different subcommands."),
    ]),
    cmd("function", -2, flags::NO_MULTI | flags::NOSCRIPT, NO_KEYS, "scripting", "A container for function commands (only FUNCTION FLUSH, which has nothing to flush).", function),
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

/// SCRIPT FLUSH: forget every script, here and in every thread's compiled cache.
fn flush_scripts() {
    cache().lock().clear();
    FLUSH_GENERATION.fetch_add(1, Ordering::AcqRel);
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

/// Whether a script may call `spec`: not one flagged `noscript` (scripts, AUTH, CLIENT, LOCK
/// and SESSION.OPEN, which may wait server-side), nor one that is itself not allowed in MULTI,
/// manages the gate itself, or is never queued.
fn allowed_in_script(spec: &CommandSpec) -> bool {
    !spec.has(flags::NO_MULTI | flags::NO_QUEUE | flags::OWN_GATE | flags::NOSCRIPT)
}

/// What `redis.call` needs while a script runs.
struct ScriptRun<'a> {
    shared: &'a Shared,
    client: &'a mut ClientState,
    now_ms: u64,
}

impl ScriptRun<'_> {
    /// Run one command for the script and return its reply (errors as error frames). A write
    /// joins the script's write transaction (or the EXEC's running the script): the script's
    /// writes are logged as one record after it has run, and one that would take that record
    /// over the log's limit is refused before it is applied (the script's earlier writes stand,
    /// as after any error in a script).
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
        if let Err(e) = crate::tenancy::check_perms(self.client, spec.resolve(&args)) {
            return e.to_frame();
        }
        if let Err(denied) =
            crate::tenancy::acl::check_acl(self.client, spec.resolve(&args), spec, &args)
        {
            return CmdError::Other(denied.error_text(&self.client.user)).to_frame();
        }
        if spec.runs_as_write() {
            dispatch::run_write(self.shared, self.client, spec, args, self.now_ms)
        } else {
            dispatch::run(self.shared, self.client, spec, &args, self.now_ms)
        }
    }
}

/// Run a script as one write transaction under the exclusive gate (inside EXEC: joined to the
/// EXEC's, with its clock), so its writes are one record: replay applies all of them or none,
/// and never runs the script again.
fn run_script(
    ctx: &mut Ctx<'_>,
    sha: &str,
    body: &Bytes,
    keys: &[Bytes],
    argv: &[Bytes],
) -> CmdResult {
    let shared = ctx.shared;
    let now = ctx.now_ms;
    // SELECT inside a script does not change the caller's database (as in Redis 7).
    let caller_db = ctx.client.db;
    let mut txn = WriteTxn::begin_exclusive(shared, ctx.client, now, true)?;
    let reply = execute(
        &RefCell::new(ScriptRun {
            shared,
            client: txn.client(),
            now_ms: now,
        }),
        sha,
        body,
        keys,
        argv,
    );
    txn.client().db = caller_db;
    txn.commit()?;
    Ok(reply)
}

/// Run the script on this thread's Lua state; the reply frame (errors included).
fn execute(
    run: &RefCell<ScriptRun<'_>>,
    sha: &str,
    body: &Bytes,
    keys: &[Bytes],
    argv: &[Bytes],
) -> Frame {
    VM.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            match Vm::new() {
                Ok(vm) => *slot = Some(vm),
                Err(e) => {
                    return CmdError::err(format!("cannot create the Lua state: {e}")).to_frame()
                }
            }
        }
        let vm = slot.as_mut().expect("just created");
        match vm.run(run, sha, body, keys, argv) {
            Ok(frame) => frame,
            Err(e) => {
                // Something failed outside the script itself (the state's own plumbing): start
                // the next script on a new state rather than trust this one.
                *slot = None;
                Frame::Error(format!(
                    "ERR Error running script: {} script: {sha}",
                    one_line(&e.to_string())
                ))
            }
        }
    })
}

thread_local! {
    /// This thread's Lua state, created by the first script that runs here.
    static VM: RefCell<Option<Vm>> = const { RefCell::new(None) };
}

/// Bumped by SCRIPT FLUSH: every thread's state drops its compiled scripts when it sees a new value.
static FLUSH_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Compiled scripts a state keeps (EVAL of ever-new bodies would grow it without bound); past
/// this many the cache is emptied and refilled as scripts run again.
const MAX_COMPILED: usize = 1000;

/// A Lua state reused by every script run on one thread.
///
/// Creating a state, opening its libraries and compiling the prelude cost far more than a small
/// script (with a fresh state per call, `EVALSHA` of phpredis' unlock script ran at a tenth of
/// Redis' rate, all of it under the exclusive gate), so like Redis each thread keeps one state and
/// each script's compiled function. Scripts stay isolated as in Redis 7: a script runs in an
/// environment of its own (`KEYS`, `ARGV`, and the sandbox's globals read through it), global
/// assignment fails with "Attempt to modify a readonly table", and the library tables (`string`,
/// `table`, `math`, `redis`) and the string metatable are read-only, so no script can leave
/// anything behind for the next one.
struct Vm {
    lua: Lua,
    /// Compiled scripts by digest (as of `generation`).
    compiled: HashMap<String, Function>,
    generation: u64,
    /// Metatable of every script's environment: reads fall through to the sandbox globals,
    /// writes fail.
    env_mt: Table,
    /// The prelude's private table: `call` is the current script's `redis.call` callback.
    hidden: Table,
    /// Lua's own `pcall`, to run a script and catch what it raises.
    pcall: Function,
    /// Set by the time-limit hook; read by the `pcall`/`xpcall` wrappers so a script cannot
    /// swallow its own kill. Reset for each script.
    killed: Arc<AtomicBool>,
    /// When the running script is killed.
    deadline: Rc<Cell<Instant>>,
}

impl Vm {
    fn new() -> mlua::Result<Vm> {
        let lua = new_state()?;
        let killed = Arc::new(AtomicBool::new(false));
        let flag = killed.clone();
        let read_killed = lua.create_function(move |_, ()| Ok(flag.load(Ordering::Relaxed)))?;
        let hidden = lua.create_table()?;
        let (env_mt, pcall): (Table, Function) = lua
            .load(PRELUDE)
            .set_name("=prelude")
            .call((hidden.clone(), read_killed))?;
        let deadline = Rc::new(Cell::new(Instant::now()));
        let (hook_flag, hook_deadline) = (killed.clone(), deadline.clone());
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            move |_, _| {
                if hook_flag.load(Ordering::Relaxed) || Instant::now() > hook_deadline.get() {
                    hook_flag.store(true, Ordering::Relaxed);
                    return Err(mlua::Error::runtime(
                        "ERR Script killed: it ran longer than the script time limit",
                    ));
                }
                Ok(VmState::Continue)
            },
        );
        Ok(Vm {
            lua,
            compiled: HashMap::new(),
            generation: FLUSH_GENERATION.load(Ordering::Acquire),
            env_mt,
            hidden,
            pcall,
            killed,
            deadline,
        })
    }

    /// The compiled function for `body` (digest `sha`), or the compile error's reply.
    fn compiled(&mut self, sha: &str, body: &Bytes) -> Result<Function, Frame> {
        let generation = FLUSH_GENERATION.load(Ordering::Acquire);
        if generation != self.generation || self.compiled.len() >= MAX_COMPILED {
            self.compiled.clear();
            self.generation = generation;
        }
        if let Some(f) = self.compiled.get(sha) {
            return Ok(f.clone());
        }
        let f = self
            .lua
            .load(body.as_ref())
            .set_name("@user_script")
            .into_function()
            .map_err(|e| {
                Frame::Error(format!(
                    "ERR Error compiling script (new function): {}",
                    one_line(&e.to_string())
                ))
            })?;
        self.compiled.insert(sha.to_string(), f.clone());
        Ok(f)
    }

    /// A script's own environment: `KEYS`, `ARGV`, `_G` (itself), the sandbox behind it.
    fn new_env(&self, keys: &[Bytes], argv: &[Bytes]) -> mlua::Result<Table> {
        let env = self.lua.create_table_with_capacity(0, 3)?;
        env.raw_set("KEYS", string_list(&self.lua, keys)?)?;
        env.raw_set("ARGV", string_list(&self.lua, argv)?)?;
        env.raw_set("_G", env.clone())?;
        env.set_metatable(Some(self.env_mt.clone()));
        Ok(env)
    }

    /// Runs one script. `Err` only for failures of the state itself; whatever the script does
    /// (errors, kills, compile errors) comes back as the reply frame.
    fn run(
        &mut self,
        run: &RefCell<ScriptRun<'_>>,
        sha: &str,
        body: &Bytes,
        keys: &[Bytes],
        argv: &[Bytes],
    ) -> mlua::Result<Frame> {
        let func = match self.compiled(sha, body) {
            Ok(f) => f,
            Err(reply) => return Ok(reply),
        };
        let lua = &self.lua;
        func.set_environment(self.new_env(keys, argv)?)?;
        self.killed.store(false, Ordering::Relaxed);
        self.deadline.set(Instant::now() + SCRIPT_TIME_LIMIT);
        let result = lua.scope(|scope| {
            // `redis.call`/`redis.pcall` reach this through the prelude's private table; it
            // dies with the scope.
            let call = scope.create_function(|lua, args: MultiValue| {
                let frame = match command_args(&args) {
                    Ok(args) => run.borrow_mut().call(args),
                    Err(e) => e.to_frame(),
                };
                frame_to_lua(lua, &frame)
            })?;
            self.hidden.raw_set("call", call)?;
            self.pcall.call::<MultiValue>(func)
        });
        // The callback is dead with the scope either way; drop the table's reference to it.
        let _ = self.hidden.raw_set("call", Value::Nil);
        let mut out = result?.into_iter();
        let ok = matches!(out.next(), Some(Value::Boolean(true)));
        let value = out.next().unwrap_or(Value::Nil);
        let frame = if ok {
            lua_to_frame(&value, 0)
        } else if self.killed.load(Ordering::Relaxed) {
            Frame::Error("ERR Script killed: it ran longer than the script time limit".into())
        } else {
            script_error(&value, sha)
        };
        if !ok {
            // A script that failed may have failed for memory: give it back now.
            let _ = lua.gc_collect();
        }
        Ok(frame)
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
redis.call = function(...)
  local reply = hidden.call(...)
  if raw_type(reply) == 'table' and reply.err ~= nil then raw_error(reply, 0) end
  return reply
end
redis.pcall = function(...) return hidden.call(...) end
redis.error_reply = function(msg)
  if raw_type(msg) ~= 'string' then raw_error('wrong number or type of arguments', 2) end
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
local function recheck(...)
  if killed() then raw_error('ERR Script killed: it ran longer than the script time limit', 0) end
  return ...
end
local base = {}
for k, v in raw_pairs(G) do
  if k ~= '_G' and k ~= 'setfenv' and k ~= 'getfenv' then base[k] = v end
end
base.pcall = function(...) return recheck(raw_pcall(...)) end
base.xpcall = function(...) return recheck(raw_xpcall(...)) end
base.rawset = function(t, k, v)
  if readonly_tables[t] then raw_error('Attempt to modify a readonly table', 2) end
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
return {__index = base, __newindex = readonly_error, __metatable = false}, raw_pcall
"#;

/// A Lua 5.1 state with only the safe libraries (the prelude then makes them read-only).
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
        "newproxy",
        "collectgarbage",
        "gcinfo",
        "print",
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
mod state_reuse {
    use super::*;

    /// Runs `body` on `vm` as a script with no `redis.call` (pcall's first result, then the value).
    fn eval(vm: &mut Vm, body: &str) -> (bool, Value) {
        let body = Bytes::copy_from_slice(body.as_bytes());
        let f = vm.compiled(&sha1_hex(&body), &body).unwrap();
        f.set_environment(vm.new_env(&[], &[]).unwrap()).unwrap();
        vm.killed.store(false, Ordering::Relaxed);
        vm.deadline.set(Instant::now() + Duration::from_millis(200));
        let out: MultiValue = vm.pcall.call(f).unwrap();
        let mut out = out.into_iter();
        let ok = matches!(out.next(), Some(Value::Boolean(true)));
        (ok, out.next().unwrap_or(Value::Nil))
    }

    fn error_text(v: &Value) -> String {
        v.to_string().unwrap_or_default()
    }

    /// Runs `body`, which must succeed; its reply as the client would get it.
    fn eval_ok(vm: &mut Vm, body: &str) -> Frame {
        let (ok, v) = eval(vm, body);
        assert!(ok, "{body}: {}", error_text(&v));
        lua_to_frame(&v, 0)
    }

    /// The prelude's `pcall` wrapper re-raises once the hook has killed the script, and the
    /// state runs the next script normally.
    #[test]
    fn pcall_cannot_swallow_the_kill() {
        let mut vm = Vm::new().unwrap();
        let (ok, _) = eval(
            &mut vm,
            "while true do pcall(function() while true do end end) end",
        );
        assert!(!ok);
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
            let (ok, err) = eval(&mut vm, attack);
            assert!(!ok, "{attack} succeeded");
            let text = error_text(&err);
            assert!(
                text.contains("readonly") || text.contains("protected metatable"),
                "{attack}: {text}"
            );
        }
        assert_eq!(
            eval_ok(
                &mut vm,
                "return {type(x), type(y), string.len('abc'), ('abc'):upper(), math.floor(2.5), \
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

    /// SCRIPT FLUSH empties every state's compiled cache.
    #[test]
    fn a_flush_drops_compiled_scripts() {
        let mut vm = Vm::new().unwrap();
        eval(&mut vm, "return 1");
        assert_eq!(vm.compiled.len(), 1);
        flush_scripts();
        eval(&mut vm, "return 2");
        assert_eq!(vm.compiled.len(), 1, "the old script was dropped");
    }
}
