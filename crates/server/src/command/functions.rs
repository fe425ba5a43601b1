//! FUNCTION LOAD [REPLACE] | LIST [LIBRARYNAME p] [WITHCODE] | DELETE | FLUSH [ASYNC|SYNC] |
//! DUMP | RESTORE [FLUSH|APPEND|REPLACE] | STATS | KILL | HELP, with Redis 7's replies and
//! errors. FCALL and FCALL_RO are `scripting`'s (they run Lua).
//!
//! Libraries belong to the caller's tenant (`crate::functions`). The changing subcommands (LOAD,
//! DELETE, FLUSH, RESTORE) are writes of the tenant's scope: they go through the write path as
//! themselves, logged at the strongest degree among the tenant's keyspaces, and a replay runs
//! them again (loading a library runs its code only to learn what it registers). A tenant whose
//! every keyspace is `none` keeps its libraries in memory only. Snapshots carry every tenant's
//! libraries (`persist::snapshot`).
//!
//! FUNCTION DUMP and RESTORE use Redis' payload (each library as an RDB `FUNCTION2` opcode and
//! its code, then the RDB version and a CRC-64: `gradus_proto::rdb`), so payloads move between
//! Gradus and redis-server in both directions.
//!
//! May import: the command table, `functions`, `command::scripting` (the Lua side), `args`.

use super::{cmd, flags, CommandSpec, Ctx, NO_KEYS};
use crate::error::{CmdError, CmdResult};
use crate::functions::{Collision, Libraries, Library};
use bytes::Bytes;
use gradus_proto::Frame;
use std::sync::Arc;

/// The rows that change a tenant's libraries: logged writes of the tenant's scope.
const CHANGES: u32 = flags::WRITE | flags::TENANT_WIDE | flags::NO_MULTI | flags::NOSCRIPT;
/// The rows that only read them.
const READS: u32 = flags::NO_MULTI | flags::NOSCRIPT;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("function", -2, flags::NO_MULTI | flags::NOSCRIPT, NO_KEYS, "scripting", "A container for function commands.", function).with_subcommands(&[
        // Subcommand rows here carry the container's handler: dispatch runs the changing ones
        // through the write path by their row.
        cmd("function|load", -3, CHANGES | flags::DENYOOM, NO_KEYS, "", "Creates a library.", function),
        cmd("function|delete", 3, CHANGES, NO_KEYS, "", "Deletes a library and its functions.", function),
        cmd("function|flush", -2, CHANGES | flags::FLUSHES, NO_KEYS, "", "Deletes all libraries and functions.", function),
        cmd("function|restore", -3, CHANGES | flags::DENYOOM, NO_KEYS, "", "Restores all libraries from a payload.", function),
        cmd("function|list", -2, READS, NO_KEYS, "", "Returns information about all libraries.", function),
        cmd("function|dump", 2, READS, NO_KEYS, "", "Dumps all libraries into a serialized binary payload.", function),
        // Answer while a script runs, even one that holds the gate exclusively, and while one
        // is past busy-reply-threshold.
        cmd("function|stats", 2, READS | flags::OWN_GATE | flags::ALLOW_BUSY, NO_KEYS, "", "Returns information about a function during execution.", function),
        cmd("function|kill", 2, READS | flags::OWN_GATE | flags::ALLOW_BUSY, NO_KEYS, "", "Terminates a function during execution.", function),
        cmd("function|help", 2, READS, NO_KEYS, "", "Returns helpful text about the different subcommands.", function),
    ]),
];

/// The tenant of the caller's keyspace (a replay's too: it runs in the recorded keyspace).
fn tenant(ctx: &Ctx<'_>) -> usize {
    ctx.shared.tenancy.tenant_of(ctx.client.db).unwrap_or(0)
}

fn function(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match sub.as_str() {
        "load" => load(ctx, args),
        "delete" if args.len() == 3 => delete(ctx, &args[2]),
        "flush" => flush(ctx, args),
        "restore" => restore(ctx, args),
        "list" => list(ctx, args),
        "dump" if args.len() == 2 => dump(ctx),
        "stats" if args.len() == 2 => stats(ctx),
        "kill" if args.len() == 2 => super::scripting::kill_running(true),
        "help" if args.len() == 2 => Ok(help()),
        "delete" | "dump" | "stats" | "kill" | "help" => {
            Err(CmdError::WrongArity(format!("function|{sub}")))
        }
        _ => Err(CmdError::Other(format!(
            "ERR unknown subcommand '{}'. Try FUNCTION HELP.",
            String::from_utf8_lossy(&args[1])
        ))),
    }
}

/// Parse a library's shebang line (`#!lua name=<name>`) and run its code: the library, or
/// Redis' error text (without `ERR `).
pub fn compile_library(code: &Bytes) -> Result<Library, String> {
    let (name, end) = library_name(code)?;
    let functions = super::scripting::load_library(code, end)?;
    Ok(Library::new(name, code.clone(), functions))
}

/// A library's name from its shebang line, and the line's length; Redis' errors, in its order.
fn library_name(code: &Bytes) -> Result<(String, usize), String> {
    if !code.starts_with(b"#!") {
        return Err("Missing library metadata".into());
    }
    let Some(end) = code.iter().position(|&b| b == b'\n') else {
        return Err("Invalid library metadata".into());
    };
    // Split as Redis splits it (`sdssplitargs`: quotes and escapes; an unbalanced quote makes
    // the line invalid).
    let parts = match gradus_proto::split_inline(&code.slice(..end)) {
        Ok(parts) if !parts.is_empty() => parts,
        _ => return Err("Invalid library metadata".into()),
    };
    let parts: Vec<String> = parts
        .iter()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    let engine = parts[0].get(2..).unwrap_or("").to_string();
    let mut name: Option<String> = None;
    for part in &parts[1..] {
        if part.len() >= 5 && part.as_bytes()[..5].eq_ignore_ascii_case(b"name=") {
            if name.is_some() {
                return Err(
                    "Invalid metadata value, name argument was given multiple times".into(),
                );
            }
            name = Some(part[5..].to_string());
            continue;
        }
        return Err(format!("Invalid metadata value given: {part}"));
    }
    let Some(name) = name else {
        return Err("Library name was not given".into());
    };
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("Engine '{engine}' not found"));
    }
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(
            "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long"
                .into(),
        );
    }
    Ok((name, end))
}

fn load(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let mut replace = false;
    for option in &args[2..args.len() - 1] {
        if option.eq_ignore_ascii_case(b"replace") {
            replace = true;
        } else {
            return Err(CmdError::err(format!(
                "Unknown option given: {}",
                String::from_utf8_lossy(option)
            )));
        }
    }
    let code = &args[args.len() - 1];
    // Redis refuses a taken name before it runs the code.
    let (name, _) = library_name(code).map_err(CmdError::err)?;
    if !replace
        && ctx
            .shared
            .functions
            .get(tenant(ctx))
            .by_name
            .contains_key(&name)
    {
        return Err(CmdError::err(format!("Library '{name}' already exists")));
    }
    let library = Arc::new(compile_library(code).map_err(CmdError::err)?);
    let name = library.name.clone();
    change(ctx, |libs| {
        libs.add(library, replace)
            .map_err(|e| CmdError::err(e.to_string()))
    })?;
    Ok(Frame::Bulk(name.into()))
}

/// Apply `change` to the caller's tenant's libraries; compiled copies on every thread are
/// dropped when it succeeds (a library may have gone or been replaced).
fn change<R>(
    ctx: &Ctx<'_>,
    change: impl FnOnce(&mut Libraries) -> Result<R, CmdError>,
) -> Result<R, CmdError> {
    let result = ctx
        .shared
        .functions
        .update(tenant(ctx), change)
        .unwrap_or_else(|| Err(CmdError::err("no such tenant")));
    if result.is_ok() {
        super::scripting::libraries_changed();
    }
    result
}

fn delete(ctx: &mut Ctx<'_>, name: &Bytes) -> CmdResult {
    let name = String::from_utf8_lossy(name).into_owned();
    change(ctx, |libs| {
        if libs.remove(&name) {
            Ok(())
        } else {
            Err(CmdError::err("Library not found"))
        }
    })?;
    Ok(Frame::ok())
}

/// Redis' `addReplySubcommandSyntaxError`, which FUNCTION FLUSH and RESTORE answer for more
/// arguments than they take (their arity lets any number through).
fn subcommand_syntax(sub: &Bytes) -> CmdError {
    CmdError::err(format!(
        "unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION HELP.",
        String::from_utf8_lossy(sub)
    ))
}

fn flush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    match args.len() {
        2 => {}
        3 if args[2].eq_ignore_ascii_case(b"sync") || args[2].eq_ignore_ascii_case(b"async") => {}
        3 => {
            return Err(CmdError::err(
                "FUNCTION FLUSH only supports SYNC|ASYNC option",
            ))
        }
        _ => return Err(subcommand_syntax(&args[1])),
    }
    change(ctx, |libs| {
        *libs = Libraries::default();
        Ok(())
    })?;
    Ok(Frame::ok())
}

/// How RESTORE treats the libraries there already.
#[derive(PartialEq)]
enum Policy {
    Append,
    Replace,
    Flush,
}

fn restore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let policy =
        match args.len() {
            3 => Policy::Append,
            4 => match args[3].to_ascii_lowercase().as_slice() {
                b"append" => Policy::Append,
                b"replace" => Policy::Replace,
                b"flush" => Policy::Flush,
                _ => return Err(CmdError::err(
                    "Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
                )),
            },
            _ => return Err(subcommand_syntax(&args[1])),
        };
    let codes = gradus_proto::rdb::restore_functions(&args[2]).map_err(|e| match e {
        gradus_proto::rdb::RdbError::PreGaFunctions => {
            CmdError::err("Pre-GA function format not supported")
        }
        gradus_proto::rdb::RdbError::NotAFunction => CmdError::err("given type is not a function"),
        e if e.is_footer() => CmdError::err("DUMP payload version or checksum are wrong"),
        _ => CmdError::err("can not read data type"),
    })?;
    let mut loaded = Libraries::default();
    for code in codes {
        let library = compile_library(&code).map_err(CmdError::err)?;
        // Two libraries of one name in a payload: the second is a collision, as in Redis.
        loaded
            .add(Arc::new(library), false)
            .map_err(|e| CmdError::err(e.to_string()))?;
    }
    change(ctx, |libs| {
        if policy == Policy::Flush {
            *libs = loaded;
            return Ok(());
        }
        let mut joined = libs.clone();
        for library in loaded.by_name.values() {
            joined
                .add(library.clone(), policy == Policy::Replace)
                .map_err(|e| match e {
                    // RESTORE's text has no quotes (LOAD's has).
                    Collision::Library(name) => {
                        CmdError::err(format!("Library {name} already exists"))
                    }
                    other => CmdError::err(other.to_string()),
                })?;
        }
        *libs = joined;
        Ok(())
    })?;
    Ok(Frame::ok())
}

fn list(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let mut with_code = false;
    let mut pattern: Option<&Bytes> = None;
    let mut i = 2;
    while i < args.len() {
        let arg = &args[i];
        if arg.eq_ignore_ascii_case(b"withcode") && !with_code {
            with_code = true;
        } else if arg.eq_ignore_ascii_case(b"libraryname") && pattern.is_none() {
            let Some(p) = args.get(i + 1) else {
                return Err(CmdError::err("library name argument was not given"));
            };
            pattern = Some(p);
            i += 1;
        } else {
            return Err(CmdError::err(format!(
                "Unknown argument {}",
                String::from_utf8_lossy(arg)
            )));
        }
        i += 1;
    }
    let libraries = ctx.shared.functions.get(tenant(ctx));
    let bulk = |s: &str| Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()));
    let items = libraries
        .by_name
        .values()
        .filter(|lib| {
            // Case-insensitive, as Redis matches it.
            pattern.is_none_or(|p| {
                gradus_store::glob::glob_match(
                    &p.to_ascii_lowercase(),
                    lib.name.to_ascii_lowercase().as_bytes(),
                )
            })
        })
        .map(|lib| {
            let functions = lib
                .functions
                .iter()
                .map(|f| {
                    Frame::Map(vec![
                        (bulk("name"), bulk(&f.name)),
                        (
                            bulk("description"),
                            f.description.clone().map_or(Frame::Null, Frame::Bulk),
                        ),
                        (
                            bulk("flags"),
                            Frame::Set(
                                f.flags
                                    .names()
                                    .map(|n| Frame::Simple(Bytes::from_static(n.as_bytes())))
                                    .collect(),
                            ),
                        ),
                    ])
                })
                .collect();
            let mut fields = vec![
                (bulk("library_name"), bulk(&lib.name)),
                (bulk("engine"), bulk("LUA")),
                (bulk("functions"), Frame::Array(functions)),
            ];
            if with_code {
                fields.push((bulk("library_code"), Frame::Bulk(lib.code.clone())));
            }
            Frame::Map(fields)
        })
        .collect();
    Ok(Frame::Array(items))
}

fn dump(ctx: &mut Ctx<'_>) -> CmdResult {
    let libraries = ctx.shared.functions.get(tenant(ctx));
    let codes: Vec<&[u8]> = libraries
        .by_name
        .values()
        .map(|l| l.code.as_ref())
        .collect();
    Ok(Frame::Bulk(gradus_proto::rdb::dump_functions(&codes)))
}

/// FUNCTION STATS; refused while an EVAL script is past busy-reply-threshold, as in Redis.
fn stats(ctx: &mut Ctx<'_>) -> CmdResult {
    if let Some(busy) = super::scripting::busy_eval_error() {
        return Err(busy);
    }
    let libraries = ctx.shared.functions.get(tenant(ctx));
    let bulk = |s: &str| Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()));
    let running = match super::scripting::running_function() {
        Some((name, command, millis)) => Frame::Map(vec![
            (bulk("name"), bulk(&name)),
            (
                bulk("command"),
                Frame::Array(command.into_iter().map(Frame::Bulk).collect()),
            ),
            (bulk("duration_ms"), Frame::Integer(millis as i64)),
        ]),
        None => Frame::Null,
    };
    Ok(Frame::Map(vec![
        (bulk("running_script"), running),
        (
            bulk("engines"),
            Frame::Map(vec![(
                bulk("LUA"),
                Frame::Map(vec![
                    (
                        bulk("libraries_count"),
                        Frame::Integer(libraries.by_name.len() as i64),
                    ),
                    (
                        bulk("functions_count"),
                        Frame::Integer(libraries.function_count() as i64),
                    ),
                ]),
            )]),
        ),
    ]))
}

fn help() -> Frame {
    const LINES: &[&str] = &[
        "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "LOAD [REPLACE] <FUNCTION CODE>",
        "    Create a new library with the given library name and code.",
        "DELETE <LIBRARY NAME>",
        "    Delete the given library.",
        "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
        "    Return general information on all the libraries:",
        "    * Library name",
        "    * The engine used to run the Library",
        "    * Library description",
        "    * Functions list",
        "    * Library code (if WITHCODE is given)",
        "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
        "STATS",
        "    Return information about the current function running:",
        "    * Function name",
        "    * Command used to run the function",
        "    * Duration in MS that the function is running",
        "    If no function is running, return nil",
        "    In addition, returns a list of available engines.",
        "KILL",
        "    Kill the current running function.",
        "FLUSH [ASYNC|SYNC]",
        "    Delete all the libraries.",
        "    When called without the optional mode argument, the behavior is determined by the",
        "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
        "    * ASYNC: Asynchronously flush the libraries.",
        "    * SYNC: Synchronously flush the libraries.",
        "DUMP",
        "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
        "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
        "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
        "    control how to handle existing libraries (default APPEND):",
        "    * FLUSH: delete all existing libraries.",
        "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
        "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
        "      libraries with the new libraries (notice that even on this option there is a chance of failure",
        "      in case of functions name collision with another library).",
        "HELP",
        "    Print this help.",
    ];
    Frame::Array(
        LINES
            .iter()
            .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
            .collect(),
    )
}

/// Every tenant's libraries' code, for a snapshot: (a keyspace of the tenant, codes).
pub fn snapshot_libraries(shared: &crate::state::Shared) -> Vec<(usize, Vec<Bytes>)> {
    shared
        .functions
        .all()
        .iter()
        .enumerate()
        .filter(|(_, libs)| !libs.by_name.is_empty())
        .filter_map(|(t, libs)| {
            // Named by a logged keyspace of the tenant: that index is stable across restarts
            // (the LAYOUT file), the tenant's position in the config is not.
            let db = shared
                .tenancy
                .tenants
                .get(t)?
                .keyspaces
                .iter()
                .copied()
                .find(|&k| shared.persist.db_logged(k))?;
            Some((db, libs.by_name.values().map(|l| l.code.clone()).collect()))
        })
        .collect()
}

/// Load a snapshot's libraries for the tenant of keyspace `db`.
pub fn load_snapshot_libraries(
    shared: &crate::state::Shared,
    db: usize,
    codes: &[Bytes],
) -> Result<(), String> {
    let Some(tenant) = shared.tenancy.tenant_of(db) else {
        return Ok(());
    };
    let mut loaded = Vec::with_capacity(codes.len());
    for code in codes {
        loaded.push(Arc::new(
            compile_library(code).map_err(|e| format!("snapshot function library: {e}"))?,
        ));
    }
    shared
        .functions
        .update(tenant, |libs| {
            for library in loaded {
                libs.add(library, true)?;
            }
            Ok::<_, crate::functions::Collision>(())
        })
        .unwrap_or(Ok(()))
        .map_err(|e| format!("snapshot function library: {e}"))?;
    super::scripting::libraries_changed();
    Ok(())
}
