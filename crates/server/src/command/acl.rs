//! ACL: Redis' access-list commands (`SETUSER GETUSER DELUSER LIST USERS CAT WHOAMI LOG SAVE LOAD
//! DRYRUN GENPASS HELP`, and Gradus' `MYPERMS`) over the ACL users of `tenancy::acl_users` and
//! the configured users of `tenancy`.
//!
//! Configured users (`default` with `requirepass`, `[[users]]`, `[[tenants.users]]`) are listed and
//! reported but changed only in the configuration: `ACL SETUSER`/`DELUSER` act on ACL users, which
//! `ACL SAVE` writes to the `aclfile` and `ACL LOAD` reads back (all or nothing).
//!
//! May import: `tenancy` (users, rules, categories), `args`, `client`, `state`, the command table.

use super::{cmd, flags, sub, table, CommandSpec, Ctx, NO_KEYS};
use crate::args::{parse_i64, show};
use crate::error::{CmdError, CmdResult};
use crate::tenancy::acl::{categories, category, category_by_name};
use crate::tenancy::acl_users::{parse_file, AclUser, Denied, LogEntry};
use bytes::Bytes;
use gradus_proto::Frame;
use std::sync::Arc;

const ACL: u32 = flags::LOADING | flags::NOSCRIPT;
const ACL_ADMIN: u32 = ACL | flags::ADMIN;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("acl", -2, ACL, NO_KEYS, "server", "A container for Access List Control commands.", acl).with_subcommands(&[
        sub("acl|cat", -2, ACL, "Lists the ACL categories, or the commands inside a category."),
        sub("acl|deluser", -3, ACL_ADMIN, "Deletes ACL users, and terminates their connections."),
        sub("acl|dryrun", -4, ACL_ADMIN, "Simulates the execution of a command by a user, without executing the command."),
        sub("acl|genpass", -2, ACL, "Generates a pseudorandom, secure password that can be used to identify ACL users."),
        sub("acl|getuser", 3, ACL_ADMIN, "Lists the ACL rules of a user."),
        sub("acl|help", 2, ACL, "Returns helpful text about the different subcommands."),
        sub("acl|list", 2, ACL_ADMIN, "Dumps the effective rules in ACL file format."),
        sub("acl|load", 2, ACL_ADMIN, "Reloads the rules from the configured ACL file."),
        sub("acl|log", -2, ACL_ADMIN, "Lists recent security events generated due to commands rejected by ACL rules."),
        sub("acl|myperms", 2, ACL, "Returns the tenant-level rights of the connection's user (Gradus)."),
        sub("acl|save", 2, ACL_ADMIN, "Saves the effective ACL rules in the configured ACL file."),
        sub("acl|setuser", -3, ACL_ADMIN, "Creates and modifies an ACL user and its rules."),
        sub("acl|users", 2, ACL_ADMIN, "Lists all ACL users."),
        sub("acl|whoami", 2, ACL, "Returns the authenticated username of the current connection."),
    ]),
];

fn bulk(s: impl Into<String>) -> Frame {
    Frame::Bulk(Bytes::from(s.into()))
}

fn acl(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&args[1]).to_lowercase();
    match sub.as_str() {
        "whoami" => Ok(bulk(ctx.client.user.to_string())),
        "myperms" => Ok(Frame::Array(
            ctx.client.perms.names().into_iter().map(bulk).collect(),
        )),
        "users" => Ok(Frame::Array(
            user_names(ctx).into_iter().map(bulk).collect(),
        )),
        "cat" => cat(args),
        "genpass" => genpass(args),
        "setuser" => setuser(ctx, args),
        "getuser" => getuser(ctx, &args[2]),
        "deluser" => deluser(ctx, &args[2..]),
        "list" => Ok(Frame::Array(list(ctx).into_iter().map(bulk).collect())),
        "dryrun" => dryrun(ctx, args),
        "log" => log(ctx, args),
        "save" => save(ctx),
        "load" => load(ctx),
        "help" => Ok(Frame::Array(
            HELP.iter().map(|l| Frame::Simple((*l).into())).collect(),
        )),
        _ => Err(CmdError::UnknownSubcommand {
            cmd: "ACL".into(),
            sub: show(&args[1]),
        }),
    }
}

const HELP: &[&str] = &[
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "MYPERMS",
    "    Return the tenant-level rights of the current connection (Gradus).",
    "HELP",
    "    Print this help.",
];

/// Every user name, configured and ACL, sorted.
fn user_names(ctx: &Ctx<'_>) -> Vec<String> {
    let mut names = ctx.shared.tenancy.user_names();
    names.extend(ctx.shared.acl.names());
    names.sort();
    names.dedup();
    names
}

fn tenant_name(ctx: &Ctx<'_>, user: &AclUser) -> Option<String> {
    let tenancy = &ctx.shared.tenancy;
    tenancy
        .multi_tenant
        .then(|| tenancy.tenants[user.tenant].name.clone())
}

/// ACL CAT [category]: the category names, or the commands (and subcommands) in one.
fn cat(args: &[Bytes]) -> CmdResult {
    match args.len() {
        2 => Ok(Frame::Array(
            category::NAMES.iter().map(|(n, _)| bulk(*n)).collect(),
        )),
        3 => {
            let name = show(&args[2]);
            let bit = category_by_name(&name)
                .ok_or_else(|| CmdError::err(format!("Unknown category '{name}'")))?;
            let mut out = Vec::new();
            for spec in table().all() {
                if spec.subcommands.is_empty() {
                    if categories(spec, spec) & bit != 0 {
                        out.push(bulk(spec.name));
                    }
                } else {
                    for s in spec.subcommands {
                        if categories(s, spec) & bit != 0 {
                            out.push(bulk(s.name));
                        }
                    }
                }
            }
            Ok(Frame::Array(out))
        }
        _ => Err(CmdError::WrongArity("acl|cat".into())),
    }
}

/// ACL GENPASS [bits]: that many random bits (default 256) as lower-case hex.
fn genpass(args: &[Bytes]) -> CmdResult {
    let bits = match args.len() {
        2 => 256,
        3 => match parse_i64(&args[2]) {
            Some(n) if (1..=4096).contains(&n) => n as usize,
            _ => return Err(CmdError::err(
                "ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096",
            )),
        },
        _ => return Err(CmdError::WrongArity("acl|genpass".into())),
    };
    let chars = bits.div_ceil(4);
    let mut bytes = vec![0u8; chars.div_ceil(2)];
    rand::Rng::fill(&mut rand::thread_rng(), &mut bytes[..]);
    let mut hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    hex.truncate(chars);
    Ok(bulk(hex))
}

/// Refuse to change a configured user through ACL commands.
fn configured(ctx: &Ctx<'_>, name: &str) -> Result<(), CmdError> {
    if ctx.shared.tenancy.user(name.as_bytes()).is_some() {
        return Err(CmdError::err(format!(
            "user '{name}' is defined by the configuration (requirepass, [[users]] or [[tenants.users]]); change it there"
        )));
    }
    Ok(())
}

/// ACL SETUSER name rule…: every rule is applied to a copy; the first that fails fails the
/// command and changes nothing.
fn setuser(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let name = show(&args[2]);
    if name.contains([' ', '\0']) {
        return Err(CmdError::err(
            "Usernames can't contain spaces or null characters",
        ));
    }
    configured(ctx, &name)?;
    let tenancy = &ctx.shared.tenancy;
    let mut user = match ctx.shared.acl.get(&name) {
        Some(u) => (*u).clone(),
        None => AclUser::new(&name, ctx.client.tenant),
    };
    let tenant_of = |t: &str| {
        tenancy
            .multi_tenant
            .then(|| tenancy.tenant_named(t))
            .flatten()
    };
    for rule in &args[3..] {
        let rule = show(rule);
        user.apply(&rule, &tenant_of).map_err(|why| {
            CmdError::err(format!("Error in ACL SETUSER modifier '{rule}': {why}"))
        })?;
    }
    ctx.shared.acl.put(user);
    Ok(Frame::ok())
}

fn getuser(ctx: &Ctx<'_>, name: &Bytes) -> CmdResult {
    let name = show(name);
    let map = |flags: Vec<Frame>,
               passwords: Vec<Frame>,
               commands: String,
               keys: String,
               channels: String| {
        Frame::Map(vec![
            (bulk("flags"), Frame::Array(flags)),
            (bulk("passwords"), Frame::Array(passwords)),
            (bulk("commands"), bulk(commands)),
            (bulk("keys"), bulk(keys)),
            (bulk("channels"), bulk(channels)),
            (bulk("selectors"), Frame::Array(vec![])),
        ])
    };
    if let Some(u) = ctx.shared.acl.get(&name) {
        let mut flags = vec![bulk(if u.enabled { "on" } else { "off" })];
        if u.nopass {
            flags.push(bulk("nopass"));
        }
        return Ok(map(
            flags,
            u.passwords.iter().map(|h| bulk(h.clone())).collect(),
            u.describe_commands(),
            u.describe_keys(),
            u.describe_channels(),
        ));
    }
    match configured_description(ctx, &name) {
        Some(d) => Ok(map(
            d.flags.into_iter().map(bulk).collect(),
            d.passwords.into_iter().map(bulk).collect(),
            d.commands,
            "~*".into(),
            "&*".into(),
        )),
        None => Ok(Frame::Null),
    }
}

/// How a configured user reads in ACL terms.
struct Described {
    flags: Vec<String>,
    passwords: Vec<String>,
    commands: String,
}

fn configured_description(ctx: &Ctx<'_>, name: &str) -> Option<Described> {
    use crate::tenancy::Perms;
    let u = ctx.shared.tenancy.user(name.as_bytes())?;
    let mut flags = vec!["on".to_string()];
    let mut passwords = Vec::new();
    if name == "default" && !ctx.shared.tenancy.multi_tenant {
        let pass = ctx.shared.live.requirepass.lock().clone();
        if pass.is_empty() {
            flags.push("nopass".into());
        } else {
            passwords.push(crate::tenancy::acl_users::sha256_hex(pass.as_bytes()));
        }
    }
    let commands = if u.perms == Perms::ALL {
        "+@all".to_string()
    } else {
        let mut c = String::from("+@all -@admin");
        if !u.perms.contains(Perms::FLUSH) {
            c.push_str(" -@dangerous");
        }
        if !u.perms.contains(Perms::WRITE) {
            c.push_str(" -@write");
        }
        if !u.perms.contains(Perms::READ) {
            c.push_str(" -@read");
        }
        c
    };
    Some(Described {
        flags,
        passwords,
        commands,
    })
}

/// ACL LIST: one line per user, configured users first as they read in ACL terms (their
/// PBKDF2 hashes are not Redis hashes and are not shown), then the ACL users.
fn list(ctx: &Ctx<'_>) -> Vec<String> {
    let mut lines = Vec::new();
    for name in ctx.shared.tenancy.user_names() {
        if let Some(d) = configured_description(ctx, &name) {
            let mut parts = vec!["user".to_string(), name.clone()];
            parts.extend(d.flags);
            parts.extend(d.passwords.iter().map(|h| format!("#{h}")));
            parts.extend(["~*".to_string(), "&*".to_string(), d.commands]);
            lines.push(parts.join(" "));
        }
    }
    for u in ctx.shared.acl.all() {
        lines.push(u.describe(tenant_name(ctx, &u).as_deref()));
    }
    lines.sort();
    lines
}

/// ACL DELUSER name…: the number of ACL users deleted; their connections are closed.
fn deluser(ctx: &mut Ctx<'_>, names: &[Bytes]) -> CmdResult {
    for name in names {
        if name.as_ref() == b"default" {
            return Err(CmdError::err("The 'default' user cannot be removed"));
        }
    }
    let mut deleted = 0;
    for name in names {
        let name = show(name);
        if ctx.shared.acl.remove(&name) {
            deleted += 1;
            for handle in ctx.shared.clients.all() {
                if **handle.user.lock() == *name && handle.id != ctx.client.id {
                    handle.kill();
                }
            }
            if *ctx.client.user == *name {
                ctx.client.close_after_reply = true;
            }
        }
    }
    Ok(Frame::Integer(deleted))
}

/// ACL DRYRUN user command arg…: `OK`, or why the user may not run it.
fn dryrun(ctx: &Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let name = show(&args[2]);
    let command = &args[3..];
    let spec = table()
        .get(&command[0])
        .ok_or_else(|| CmdError::err(format!("Command '{}' not found", show(&command[0]))))?;
    let row = spec.resolve(command);
    if !spec.arity_ok(command.len()) || !row.arity_ok(command.len()) {
        return Err(CmdError::WrongArity(row.name.to_string()));
    }
    if let Some(u) = ctx.shared.acl.get(&name) {
        return Ok(match u.check(row, spec, command) {
            Ok(()) => Frame::ok(),
            Err(denied) => bulk(denied.dryrun_text(&name)),
        });
    }
    let Some(u) = ctx.shared.tenancy.user(name.as_bytes()) else {
        return Err(CmdError::err(format!("User '{name}' not found")));
    };
    let need = crate::tenancy::required_perms(row);
    Ok(if u.perms.contains(need) {
        Frame::ok()
    } else {
        bulk(Denied::Command(row.name.to_string()).dryrun_text(&name))
    })
}

/// ACL LOG [count | RESET].
fn log(ctx: &Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let count = match args.get(2) {
        None => 10,
        Some(a) if a.eq_ignore_ascii_case(b"reset") => {
            ctx.shared.acl.log_reset();
            return Ok(Frame::ok());
        }
        Some(a) => match parse_i64(a) {
            Some(n) if n >= 0 => n as usize,
            _ => return Err(CmdError::NotInteger),
        },
    };
    if args.len() > 3 {
        return Err(CmdError::Syntax);
    }
    let now = ctx.now_ms;
    Ok(Frame::Array(
        ctx.shared
            .acl
            .log_entries(count)
            .into_iter()
            .map(|e| {
                Frame::Map(vec![
                    (bulk("count"), Frame::Integer(e.count as i64)),
                    (bulk("reason"), bulk(e.reason)),
                    (bulk("context"), bulk(e.context)),
                    (bulk("object"), bulk(e.object)),
                    (bulk("username"), bulk(e.username)),
                    (
                        bulk("age-seconds"),
                        Frame::Double(now.saturating_sub(e.created_ms) as f64 / 1000.0),
                    ),
                    (bulk("client-info"), bulk(e.client_info)),
                    (bulk("entry-id"), Frame::Integer(e.entry_id as i64)),
                    (
                        bulk("timestamp-created"),
                        Frame::Integer(e.created_ms as i64),
                    ),
                    (
                        bulk("timestamp-last-updated"),
                        Frame::Integer(e.updated_ms as i64),
                    ),
                ])
            })
            .collect(),
    ))
}

const NO_ACLFILE: &str = "This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.";

/// ACL SAVE: every ACL user to the aclfile (written to a temporary file, then renamed).
fn save(ctx: &Ctx<'_>) -> CmdResult {
    let path = &ctx.shared.config.aclfile;
    if path.is_empty() {
        return Err(CmdError::err(NO_ACLFILE));
    }
    let mut text = String::new();
    for u in ctx.shared.acl.all() {
        text.push_str(&u.describe(tenant_name(ctx, &u).as_deref()));
        text.push('\n');
    }
    let tmp = format!("{path}.tmp-{}", std::process::id());
    let written = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!(file = %path, error = %e, "ACL SAVE failed");
        return Err(CmdError::err("There was an error trying to save the ACLs. Please check the server logs for more information"));
    }
    Ok(Frame::ok())
}

/// ACL LOAD: replace every ACL user with the aclfile's (nothing changes when the file is bad).
fn load(ctx: &Ctx<'_>) -> CmdResult {
    if ctx.shared.config.aclfile.is_empty() {
        return Err(CmdError::err(NO_ACLFILE));
    }
    let users = read_aclfile(ctx.shared).map_err(CmdError::err)?;
    ctx.shared.acl.replace(users);
    Ok(Frame::ok())
}

/// Read the aclfile (a missing file is no users).
pub fn read_aclfile(shared: &crate::state::Shared) -> Result<Vec<AclUser>, String> {
    let path = &shared.config.aclfile;
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("{path}: {e}")),
    };
    let tenancy = &shared.tenancy;
    let tenant_of = |t: &str| {
        tenancy
            .multi_tenant
            .then(|| tenancy.tenant_named(t))
            .flatten()
    };
    let reserved = |n: &str| tenancy.user(n.as_bytes()).is_some();
    parse_file(&text, path, 0, &tenant_of, &reserved)
}

/// Note a refused command or AUTH in the ACL LOG.
pub fn log_denial(
    ctx_shared: &crate::state::Shared,
    client: &crate::client::ClientState,
    denied: Option<&Denied>,
    auth_user: Option<&str>,
    now_ms: u64,
) {
    let context = if client.multi.is_some() {
        "multi"
    } else {
        "toplevel"
    };
    let (reason, object, username) = match (denied, auth_user) {
        (Some(Denied::Command(c)), _) => ("command", c.clone(), client.user.to_string()),
        (Some(Denied::Key(k)), _) => ("key", k.clone(), client.user.to_string()),
        (Some(Denied::Channel(c)), _) => ("channel", c.clone(), client.user.to_string()),
        (None, Some(u)) => ("auth", "AUTH".to_string(), u.to_string()),
        (None, None) => return,
    };
    ctx_shared.acl.log(LogEntry {
        count: 1,
        reason,
        context,
        object,
        username,
        client_info: format!(
            "id={} addr={} laddr={} user={}",
            client.id, client.handle.addr, client.handle.laddr, client.user
        ),
        entry_id: 0,
        created_ms: now_ms,
        updated_ms: now_ms,
    });
}

/// The ACL user `name`, enabled, whose password is `pass` (AUTH falls back to it after the
/// configured users).
pub fn acl_login(shared: &crate::state::Shared, name: &[u8], pass: &[u8]) -> Option<Arc<AclUser>> {
    let name = std::str::from_utf8(name).ok()?;
    shared.acl.get(name).filter(|u| u.verify(pass))
}
