//! Connection commands: PING, ECHO, HELLO, AUTH, SELECT, QUIT, RESET and the CLIENT family.
//!
//! These act on the calling connection's state (protocol version, database, name, authentication)
//! and, for CLIENT LIST/KILL, on the registry of other connections. They never touch keys.
//!
//! May import: `args`, `client`, `tenancy` (AUTH), `command::acl` (ACL users at AUTH), `blocking`
//! (CLIENT UNBLOCK), `pubsub` (RESET and AUTH drop subscriptions), `pause` (CLIENT PAUSE), `state`.

use super::{cmd, flags, sub, CommandSpec, Ctx, NO_KEYS};
use crate::args::{is, parse_i64, show};
use crate::client::ClientType;
use crate::error::{CmdError, CmdResult};
use crate::pause::{PauseMode, PausePurpose};
use bytes::Bytes;
use gradus_proto::{Frame, ProtocolVersion};
use std::sync::atomic::Ordering;

const CONN: u32 = flags::FAST | flags::LOADING;
/// HELLO, AUTH, QUIT and RESET run while a script is past `busy-reply-threshold` (Redis'
/// `allow_busy`); they touch no key, so they run without the store gate, which that script may
/// hold for as long as it runs.
const BUSY_OK: u32 = flags::ALLOW_BUSY | flags::OWN_GATE;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("ping", -1, CONN | flags::SUBSCRIBED_OK, NO_KEYS, "connection", "Returns the server's liveliness response.", ping),
    cmd("echo", 2, CONN, NO_KEYS, "connection", "Returns the given string.", echo),
    cmd("hello", -1, CONN | BUSY_OK | flags::NO_AUTH | flags::NOSCRIPT | flags::SECRET_ARGS, NO_KEYS, "connection", "Handshakes with the Redis server.", hello),
    cmd("auth", -2, CONN | BUSY_OK | flags::NO_AUTH | flags::NOSCRIPT | flags::SECRET_ARGS, NO_KEYS, "connection", "Authenticates the connection.", auth),
    cmd("select", 2, CONN, NO_KEYS, "connection", "Changes the selected database.", select),
    cmd("quit", -1, CONN | BUSY_OK | flags::SUBSCRIBED_OK | flags::NO_AUTH | flags::NO_QUEUE | flags::NOSCRIPT, NO_KEYS, "connection", "Closes the connection.", quit),
    cmd("reset", 1, CONN | BUSY_OK | flags::SUBSCRIBED_OK | flags::NO_AUTH | flags::NO_QUEUE | flags::NOSCRIPT, NO_KEYS, "connection", "Resets the connection.", reset),
    cmd("client", -2, flags::LOADING | flags::NOSCRIPT, NO_KEYS, "connection", "A container for client connection commands.", client).with_subcommands(&[
        sub("client|id", 2, flags::LOADING | flags::NOSCRIPT, "Returns the unique client ID of the connection."),
        sub("client|getname", 2, flags::LOADING | flags::NOSCRIPT, "Returns the name of the connection."),
        sub("client|setname", 3, flags::LOADING | flags::NOSCRIPT, "Sets the connection name."),
        sub("client|setinfo", 4, flags::LOADING | flags::NOSCRIPT, "Sets information specific to the client or connection."),
        sub("client|info", 2, flags::LOADING | flags::NOSCRIPT, "Returns information about the connection."),
        sub("client|list", -2, flags::LOADING | flags::NOSCRIPT, "Lists open connections."),
        sub("client|kill", -3, flags::LOADING | flags::NOSCRIPT, "Terminates open connections."),
        sub("client|no-evict", 3, flags::LOADING | flags::NOSCRIPT, "Sets the client eviction mode of the connection."),
        sub("client|no-touch", 3, flags::LOADING | flags::NOSCRIPT, "Controls whether commands sent by the client affect the LRU/LFU of accessed keys."),
        sub("client|unblock", -3, flags::LOADING | flags::NOSCRIPT, "Unblocks a client blocked by a blocking command from a different connection."),
        sub("client|tracking", -3, flags::LOADING | flags::NOSCRIPT, "Controls server-assisted client-side caching for the connection."),
        sub("client|caching", 3, flags::LOADING | flags::NOSCRIPT, "Instructs the server whether to track the keys in the next request."),
        sub("client|getredir", 2, flags::LOADING | flags::NOSCRIPT, "Returns the client ID to which the connection's tracking notifications are redirected."),
        sub("client|trackinginfo", 2, flags::LOADING | flags::NOSCRIPT, "Returns information about server-assisted client-side caching for the connection."),
        sub("client|pause", -3, flags::ADMIN | flags::LOADING | flags::NOSCRIPT, "Suspends commands processing."),
        sub("client|unpause", 2, flags::ADMIN | flags::LOADING | flags::NOSCRIPT, "Resumes processing commands from paused clients."),
        sub("client|help", 2, flags::LOADING | flags::NOSCRIPT, "Returns helpful text about the different subcommands."),
        sub("client|reply", 3, flags::LOADING | flags::NOSCRIPT, "Instructs the server whether to reply to commands."),
        sub("client|durability", -2, flags::LOADING | flags::NOSCRIPT, "Sets the connection's durability degree (none, lazy, background, strict, default) or returns it."),
    ]),
];

fn ping(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    // A script's commands run as RESP2 by default, but on Redis' script client, which is never
    // subscribed: a subscribed RESP3 caller's script gets PONG.
    if ctx.client.resp == ProtocolVersion::Resp2
        && ctx.client.is_subscribed()
        && !ctx.client.in_script
    {
        // Redis' reply in the RESP2 pub/sub context: ["pong", message or ""].
        return match args.len() {
            1 | 2 => Ok(Frame::Array(vec![
                Frame::Bulk(Bytes::from_static(b"pong")),
                Frame::Bulk(args.get(1).cloned().unwrap_or_default()),
            ])),
            _ => Err(super::arity_error(&args[0])),
        };
    }
    match args.len() {
        1 => Ok(Frame::Simple("PONG".into())),
        2 => Ok(Frame::Bulk(args[1].clone())),
        _ => Err(super::arity_error(&args[0])),
    }
}

fn echo(_ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    Ok(Frame::Bulk(args[1].clone()))
}

/// Check `user`/`pass`; on success bind the connection to the user's tenant and rights.
/// Attempts from an address with recent failures are answered late (see `AuthThrottle`).
fn authenticate(ctx: &mut Ctx<'_>, user: &[u8], pass: &[u8]) -> Result<(), CmdError> {
    let shared = ctx.shared;
    let ip = ctx.client.handle.addr.ip();
    let delay = shared.auth_throttle.delay(ip);
    let requirepass = shared.live.requirepass.lock().clone();
    // Configured users first, then ACL users (ACL SETUSER, the aclfile).
    let found = match shared.tenancy.user(user) {
        Some(u) => u
            .verify(pass, &requirepass)
            .then(|| (u.name.clone(), u.tenant, u.perms, None)),
        None => super::acl::acl_login(shared, user, pass).map(|a| {
            let perms = a.perms(shared.tenancy.multi_tenant);
            (a.name.clone(), a.tenant, perms, Some(a))
        }),
    };
    let result = match found {
        None => {
            shared.auth_throttle.failed(ip);
            tracing::info!(client = ctx.client.id, addr = %ctx.client.handle.addr, user = %show(user), "AUTH failed");
            super::acl::log_denial(shared, ctx.client, None, Some(&show(user)), ctx.now_ms);
            Err(CmdError::WrongPass)
        }
        Some((name, tenant, perms, acl)) => {
            shared.auth_throttle.succeeded(ip);
            let client = &mut *ctx.client;
            if client.tenant != tenant {
                // Subscriptions belong to a tenant: they do not follow into another.
                if let Some(mut subs) = client.subs.take() {
                    subs.clear(&shared.pubsub, client.id);
                    client.note_subscriptions();
                }
            }
            if client.tenant != tenant || !client.authenticated {
                client.tenant = tenant;
                client.db = shared.tenancy.initial_keyspace(tenant);
                client.handle.tenant.store(tenant, Ordering::Relaxed);
                client
                    .handle
                    .db
                    .store(shared.tenancy.select_of(client.db), Ordering::Relaxed);
            }
            client.perms = perms;
            client.acl = acl;
            client.user = std::sync::Arc::from(name.as_str());
            *client.handle.user.lock() = client.user.clone();
            client.authenticated = true;
            Ok(())
        }
    };
    if !delay.is_zero() {
        // Answer late, whatever the outcome, so guessing from one address stays slow.
        let reply = match &result {
            Ok(()) => Frame::ok(),
            Err(e) => e.to_frame(),
        };
        let until = tokio::time::Instant::now() + delay;
        ctx.client.deferred = Some(crate::client::Deferred::new(
            "auth throttle",
            move |_, _| {
                Box::pin(async move {
                    tokio::time::sleep_until(until).await;
                    reply
                })
            },
        ));
    }
    result
}

fn auth(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (user, pass) = match args.len() {
        2 => (&b"default"[..], &args[1]),
        3 => (args[1].as_ref(), &args[2]),
        _ => return Err(CmdError::Syntax),
    };
    if args.len() == 2 && !ctx.shared.auth_required() {
        return Err(CmdError::err(
            "AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
        ));
    }
    authenticate(ctx, user, pass)?;
    Ok(Frame::ok())
}

fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|&c| (b'!'..=b'~').contains(&c))
}

fn hello(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let mut version = ctx.client.resp;
    let mut i = 1;
    if args.len() > 1 {
        let v = parse_i64(&args[1])
            .ok_or_else(|| CmdError::err("Protocol version is not an integer or out of range"))?;
        version = match v {
            2 => ProtocolVersion::Resp2,
            3 => ProtocolVersion::Resp3,
            _ => {
                return Err(CmdError::Other(
                    "NOPROTO unsupported protocol version".into(),
                ))
            }
        };
        i = 2;
    }
    let mut credentials: Option<(&Bytes, &Bytes)> = None;
    let mut name: Option<&Bytes> = None;
    while i < args.len() {
        if is(&args[i], "auth") && i + 2 < args.len() {
            credentials = Some((&args[i + 1], &args[i + 2]));
            i += 3;
        } else if is(&args[i], "setname") && i + 1 < args.len() {
            name = Some(&args[i + 1]);
            i += 2;
        } else {
            return Err(CmdError::err(format!(
                "Syntax error in HELLO option '{}'",
                show(&args[i])
            )));
        }
    }
    if let Some((user, pass)) = credentials {
        authenticate(ctx, user, pass)?;
        // A throttled HELLO still answers at once with its map; only AUTH is delayed.
        ctx.client.deferred = None;
    }
    if !ctx.client.authenticated && ctx.shared.auth_required() {
        return Err(CmdError::Other("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time".into()));
    }
    ctx.client.authenticated = true;
    if let Some(n) = name {
        if !valid_client_name(n) {
            return Err(bad_client_name());
        }
        *ctx.client.handle.name.lock() = (!n.is_empty()).then(|| show(n));
    }
    ctx.client.resp = version;
    let proto = match version {
        ProtocolVersion::Resp2 => 2,
        ProtocolVersion::Resp3 => 3,
    };
    ctx.client.handle.resp.store(proto as u8, Ordering::Relaxed);
    let s = |v: &str| Frame::Bulk(Bytes::from(v.to_string()));
    Ok(Frame::Map(vec![
        (s("server"), s("redis")),
        (s("version"), s(crate::REDIS_COMPAT_VERSION)),
        (s("proto"), Frame::Integer(proto)),
        (s("id"), Frame::Integer(ctx.client.id as i64)),
        (s("mode"), s("standalone")),
        (s("role"), s("master")),
        (s("modules"), Frame::Array(vec![])),
    ]))
}

fn select(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let index = parse_i64(&args[1]).ok_or(CmdError::NotInteger)?;
    let global = usize::try_from(index)
        .ok()
        .and_then(|i| ctx.shared.tenancy.select(ctx.client.tenant, i))
        .ok_or(CmdError::DbIndexOutOfRange)?;
    ctx.client.db = global;
    ctx.client
        .handle
        .db
        .store(index as usize, Ordering::Relaxed);
    Ok(Frame::ok())
}

fn quit(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    ctx.client.close_after_reply = true;
    Ok(Frame::ok())
}

fn reset(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    ctx.client.clear_transaction();
    if let Some(mut subs) = ctx.client.subs.take() {
        subs.clear(&ctx.shared.pubsub, ctx.client.id);
        ctx.client.note_subscriptions();
    }
    if ctx.client.tracking.take().is_some() {
        ctx.shared.tracking.disable(ctx.client.id);
        ctx.client
            .handle
            .tracking_redirect
            .store(-1, Ordering::Relaxed);
        ctx.client
            .handle
            .tracking_prefixes
            .store(0, Ordering::Relaxed);
    }
    ctx.client.caching = None;
    ctx.shared.monitors.remove(ctx.client.id);
    ctx.client.handle.monitoring.store(false, Ordering::Relaxed);
    ctx.client.db = ctx.shared.tenancy.initial_keyspace(ctx.client.tenant);
    ctx.client.resp = ProtocolVersion::Resp2;
    if ctx.shared.auth_required() {
        // Redis: RESET de-authenticates when the default user needs a password.
        ctx.client.authenticated = false;
    }
    if !ctx.shared.tenancy.multi_tenant {
        // Redis: RESET makes the connection the default user's again (an ACL user's rules go).
        ctx.client.acl = None;
        ctx.client.perms = crate::tenancy::Perms::ALL;
        ctx.client.user = std::sync::Arc::from("default");
        *ctx.client.handle.user.lock() = ctx.client.user.clone();
    }
    ctx.client.durability = None;
    let h = &ctx.client.handle;
    h.durability.store(0, Ordering::Relaxed);
    h.db.store(
        ctx.shared.tenancy.select_of(ctx.client.db),
        Ordering::Relaxed,
    );
    h.resp.store(2, Ordering::Relaxed);
    // Redis' `clearClientConnectionState` drops NO-EVICT and NO-TOUCH too.
    h.no_evict.store(false, Ordering::Relaxed);
    h.no_touch.store(false, Ordering::Relaxed);
    *h.name.lock() = None;
    Ok(Frame::Simple("RESET".into()))
}

fn bad_client_name() -> CmdError {
    CmdError::err("Client names cannot contain spaces, newlines or special characters.")
}

const CLIENT_HELP: &[&str] = &[
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ID",
    "    Return the ID of the current connection.",
    "GETNAME",
    "    Return the name of the current connection.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "SETINFO <LIB-NAME|LIB-VER> <value>",
    "    Set client library name or version.",
    "LIST [TYPE (NORMAL|MASTER|REPLICA|PUBSUB)] [ID <id> [<id> ...]]",
    "    Return information about client connections.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are: ID <client-id>, ADDR <ip:port>, LADDR <ip:port>, TYPE (NORMAL|MASTER|REPLICA|PUBSUB), USER <username>, MAXAGE <maxage>, SKIPME (YES|NO).",
    "REPLY (ON|OFF|SKIP)",
    "    Control the replies sent to the current connection.",
    "UNBLOCK <clientid> [TIMEOUT|ERROR]",
    "    Unblock the specified blocked client.",
    "UNPAUSE",
    "    Stop the current client pause, resuming traffic.",
    "PAUSE <timeout> [WRITE|ALL]",
    "    Suspend all, or just write, clients for <timeout> milliseconds.",
    "DURABILITY (NONE|LAZY|BACKGROUND|STRICT|DEFAULT)",
    "    Set the durability degree of this connection's writes (DEFAULT: the database's own).",
    "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
    "         [OPTIN] [OPTOUT] [NOLOOP]",
    "    Control server assisted client side caching.",
    "TRACKINGINFO",
    "    Report tracking status for the current connection.",
    "CACHING (YES|NO)",
    "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
    "GETREDIR",
    "    Return the client ID we are redirecting to when tracking is enabled.",
    "NO-EVICT (ON|OFF)",
    "NO-TOUCH (ON|OFF)",
    "    Accepted for compatibility; no effect.",
    "HELP",
    "    Print this help.",
];

fn client(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&args[1]).to_lowercase();
    let argc = args.len();
    let wrong = || {
        CmdError::err(format!(
            "wrong number of arguments for 'client|{sub}' command"
        ))
    };
    match sub.as_str() {
        "id" if argc == 2 => Ok(Frame::Integer(ctx.client.id as i64)),
        "getname" if argc == 2 => Ok(match ctx.client.handle.name.lock().clone() {
            Some(n) => Frame::Bulk(Bytes::from(n)),
            None => Frame::Null,
        }),
        "setname" if argc == 3 => {
            if !valid_client_name(&args[2]) {
                return Err(bad_client_name());
            }
            *ctx.client.handle.name.lock() = (!args[2].is_empty()).then(|| show(&args[2]));
            Ok(Frame::ok())
        }
        "setinfo" if argc == 4 => {
            if !valid_client_name(&args[3]) {
                return Err(CmdError::err(format!(
                    "{} cannot contain spaces, newlines or special characters.",
                    show(&args[2])
                )));
            }
            let value = (!args[3].is_empty()).then(|| show(&args[3]));
            if is(&args[2], "lib-name") {
                *ctx.client.handle.lib_name.lock() = value;
            } else if is(&args[2], "lib-ver") {
                *ctx.client.handle.lib_ver.lock() = value;
            } else {
                return Err(CmdError::err(format!(
                    "Unrecognized option '{}'",
                    show(&args[2])
                )));
            }
            Ok(Frame::ok())
        }
        "info" if argc == 2 => Ok(verbatim(ctx.client.handle.describe() + "\n")),
        "list" => client_list(ctx, &args[2..]),
        "kill" if argc >= 3 => client_kill(ctx, &args[2..]),
        "unblock" if argc == 3 || argc == 4 => {
            let id = parse_i64(&args[2]).ok_or(CmdError::NotInteger)?;
            let error = match args.get(3) {
                None => false,
                Some(a) if is(a, "timeout") => false,
                Some(a) if is(a, "error") => true,
                Some(_) => {
                    return Err(CmdError::err(
                        "CLIENT UNBLOCK reason should be TIMEOUT or ERROR",
                    ))
                }
            };
            // Only a client one may kill may be unblocked (an admin, or the same user).
            let allowed = u64::try_from(id)
                .ok()
                .and_then(|id| ctx.shared.clients.get(id))
                .is_some_and(|c| may_kill(ctx, &c));
            let unblocked = allowed && ctx.shared.blocked.unblock(id as u64, error);
            Ok(Frame::Integer(unblocked as i64))
        }
        "durability" if argc == 3 => {
            if is(&args[2], "default") {
                ctx.client.durability = None;
                ctx.client.handle.durability.store(0, Ordering::Relaxed);
                return Ok(Frame::ok());
            }
            let degree: gradus_log::Durability = show(&args[2]).parse().map_err(|_| {
                CmdError::err(
                    "durability must be none, lazy, background, strict, replicated or default",
                )
            })?;
            ctx.client.durability = Some(degree);
            let index = gradus_log::Durability::ALL
                .iter()
                .position(|d| *d == degree)
                .unwrap_or(0);
            ctx.client
                .handle
                .durability
                .store(index as u8 + 1, Ordering::Relaxed);
            Ok(Frame::ok())
        }
        "no-evict" | "no-touch" if argc == 3 => {
            let on = if is(&args[2], "on") {
                true
            } else if is(&args[2], "off") {
                false
            } else {
                return Err(CmdError::Syntax);
            };
            // NO-TOUCH takes effect from the next command (the dispatcher reads it before it
            // runs one); NO-EVICT keeps it from `maxmemory-clients` (`quota::evict_clients`).
            let h = &ctx.client.handle;
            let flag = if sub == "no-touch" {
                &h.no_touch
            } else {
                &h.no_evict
            };
            flag.store(on, Ordering::Relaxed);
            Ok(Frame::ok())
        }
        "reply" if argc == 3 => {
            // Redis' `clientCommand`: OFF and SKIP have no reply of their own; SKIP under OFF
            // changes nothing. Regression: `test_client_reply_off_on_and_skip_as_in_redis`.
            use crate::client::ReplyMode;
            if is(&args[2], "on") {
                ctx.client.reply_mode = ReplyMode::On;
            } else if is(&args[2], "off") {
                ctx.client.reply_mode = ReplyMode::Off;
            } else if is(&args[2], "skip") {
                if ctx.client.reply_mode != ReplyMode::Off {
                    ctx.client.reply_mode = ReplyMode::SkipNext;
                }
            } else {
                return Err(CmdError::Syntax);
            }
            Ok(Frame::ok())
        }
        "tracking" if argc >= 3 => client_tracking(ctx, &args[2..]),
        "caching" if argc == 3 => client_caching(ctx, &args[2]),
        "getredir" if argc == 2 => Ok(Frame::Integer(match &ctx.client.tracking {
            None => -1,
            Some(o) => o.redirect as i64,
        })),
        "trackinginfo" if argc == 2 => Ok(tracking_info(ctx)),
        "pause" if argc == 3 || argc == 4 => client_pause(ctx, &args[2..]),
        "unpause" if argc == 2 => {
            ctx.shared.unpause(PausePurpose::ClientCommand);
            Ok(Frame::ok())
        }
        "help" if argc == 2 => Ok(Frame::Array(
            CLIENT_HELP
                .iter()
                .map(|l| Frame::Simple((*l).into()))
                .collect(),
        )),
        "id" | "getname" | "setname" | "setinfo" | "info" | "kill" | "no-evict" | "no-touch"
        | "help" | "durability" | "unblock" | "tracking" | "caching" | "getredir" | "reply"
        | "trackinginfo" | "unpause" => Err(wrong()),
        _ => Err(CmdError::UnknownSubcommand {
            cmd: "CLIENT".into(),
            sub: show(&args[1]),
        }),
    }
}

/// CLIENT PAUSE timeout [WRITE|ALL], with Redis' checks in its order (the mode, then the
/// timeout): commands of ordinary clients wait until `timeout` ms from now, or CLIENT UNPAUSE
/// (see `pause`). A pause already in force is extended: the stricter mode, the later end.
fn client_pause(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let mode = match args.get(1) {
        None => PauseMode::All,
        Some(a) if is(a, "write") => PauseMode::Write,
        Some(a) if is(a, "all") => PauseMode::All,
        Some(_) => return Err(CmdError::err("CLIENT PAUSE mode must be WRITE or ALL")),
    };
    let timeout = parse_i64(&args[0])
        .ok_or_else(|| CmdError::err("timeout is not an integer or out of range"))?;
    if timeout < 0 {
        return Err(CmdError::err("timeout is negative"));
    }
    let now = gradus_store::now_ms();
    // Redis: a zero timeout is an end time of 0, already past.
    let end = if timeout == 0 {
        0
    } else {
        now.saturating_add(timeout as u64)
    };
    ctx.shared
        .pause(PausePurpose::ClientCommand, mode, end, now);
    Ok(Frame::ok())
}

/// CLIENT TRACKING on|off [REDIRECT id] [PREFIX p]... [BCAST] [OPTIN] [OPTOUT] [NOLOOP], with
/// Redis' checks and texts.
fn client_tracking(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let on = if is(&args[0], "on") {
        true
    } else if is(&args[0], "off") {
        false
    } else {
        return Err(CmdError::Syntax);
    };
    let mut o = crate::tracking::Options::default();
    let mut i = 1;
    while i < args.len() {
        let more = i + 1 < args.len();
        if is(&args[i], "redirect") && more {
            if o.redirect != 0 {
                return Err(CmdError::err(
                    "A client can only redirect to a single other client",
                ));
            }
            let id = parse_i64(&args[i + 1]).ok_or(CmdError::NotInteger)?;
            let exists = u64::try_from(id)
                .ok()
                .and_then(|id| ctx.shared.clients.get(id))
                .is_some();
            if !exists {
                return Err(CmdError::err(
                    "The client ID you want redirect to does not exist",
                ));
            }
            o.redirect = id as u64;
            i += 2;
        } else if is(&args[i], "prefix") && more {
            o.prefixes.push(args[i + 1].clone());
            i += 2;
        } else if is(&args[i], "bcast") {
            o.bcast = true;
            i += 1;
        } else if is(&args[i], "optin") {
            o.optin = true;
            i += 1;
        } else if is(&args[i], "optout") {
            o.optout = true;
            i += 1;
        } else if is(&args[i], "noloop") {
            o.noloop = true;
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    if !on {
        if ctx.client.tracking.take().is_some() {
            ctx.shared.tracking.disable(ctx.client.id);
            ctx.client
                .handle
                .tracking_redirect
                .store(-1, Ordering::Relaxed);
            ctx.client
                .handle
                .tracking_prefixes
                .store(0, Ordering::Relaxed);
        }
        ctx.client.caching = None;
        return Ok(Frame::ok());
    }
    if !o.bcast && !o.prefixes.is_empty() {
        return Err(CmdError::err(
            "PREFIX option requires BCAST mode to be enabled",
        ));
    }
    if let Some(current) = &ctx.client.tracking {
        if current.bcast != o.bcast {
            return Err(CmdError::err("You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode."));
        }
    }
    if o.optin && o.optout {
        return Err(CmdError::err(
            "You can't specify both OPTIN mode and OPTOUT mode",
        ));
    }
    if o.bcast && (o.optin || o.optout) {
        return Err(CmdError::err(
            "OPTIN and OPTOUT are not compatible with BCAST",
        ));
    }
    // Redis' checkPrefixCollisionsOrReply: each new prefix in the order given, against the
    // prefixes already on (BCAST stays on), then against the new ones after it.
    let existing = ctx
        .client
        .tracking
        .as_ref()
        .filter(|_| o.bcast)
        .map_or(&[][..], |t| &t.prefixes[..]);
    for (a, p) in o.prefixes.iter().enumerate() {
        let overlaps = |q: &Bytes| p.starts_with(q) || q.starts_with(p);
        if let Some(q) = existing.iter().find(|q| overlaps(q)) {
            return Err(CmdError::err(format!(
                "Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                show(p),
                show(q)
            )));
        }
        if let Some(q) = o.prefixes[a + 1..].iter().find(|q| overlaps(q)) {
            return Err(CmdError::err(format!(
                "Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                show(p),
                show(q)
            )));
        }
    }
    // Re-enabling keeps earlier prefixes (Redis adds to them).
    if let Some(current) = &ctx.client.tracking {
        for p in &current.prefixes {
            if !o.prefixes.contains(p) {
                o.prefixes.push(p.clone());
            }
        }
    }
    let target = match o.redirect {
        0 => Some(ctx.client.outbox()),
        id => ctx.shared.clients.get(id).and_then(|h| h.outbox()),
    }
    .ok_or_else(|| CmdError::err("The client ID you want redirect to does not exist"))?;
    ctx.shared.tracking.enable(
        ctx.client.id,
        ctx.client.tenant,
        target,
        ctx.client.outbox(),
        o.clone(),
    );
    ctx.client
        .handle
        .tracking_redirect
        .store(o.redirect as i64, Ordering::Relaxed);
    ctx.client
        .handle
        .tracking_bcast
        .store(o.bcast, Ordering::Relaxed);
    ctx.client
        .handle
        .tracking_prefixes
        .store(o.prefixes.len(), Ordering::Relaxed);
    ctx.client.tracking = Some(o);
    Ok(Frame::ok())
}

/// CLIENT CACHING yes|no: whether the next command's keys are tracked (OPTIN / OPTOUT).
fn client_caching(ctx: &mut Ctx<'_>, arg: &Bytes) -> CmdResult {
    let Some(o) = ctx.client.tracking.as_ref().filter(|o| o.optin || o.optout) else {
        return Err(CmdError::err("CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"));
    };
    let yes = if is(arg, "yes") {
        if !o.optin {
            return Err(CmdError::err(
                "CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
            ));
        }
        true
    } else if is(arg, "no") {
        if !o.optout {
            return Err(CmdError::err(
                "CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
            ));
        }
        false
    } else {
        return Err(CmdError::Syntax);
    };
    // This command and the next (dispatch counts down after each).
    ctx.client.caching = Some((yes, 2));
    Ok(Frame::ok())
}

/// CLIENT TRACKINGINFO: flags, redirect and prefixes, as Redis shows them.
fn tracking_info(ctx: &Ctx<'_>) -> Frame {
    let s = |v: &str| Frame::Bulk(Bytes::from(v.to_string()));
    let (flags, redirect, prefixes) = match &ctx.client.tracking {
        None => (vec![s("off")], -1, Vec::new()),
        Some(o) => {
            let broken = ctx
                .shared
                .tracking
                .options(ctx.client.id)
                .is_some_and(|(_, broken)| broken);
            let mut flags = vec![s("on")];
            for (set, name) in [
                (o.bcast, "bcast"),
                (o.optin, "optin"),
                (o.optout, "optout"),
                (ctx.client.caching == Some((true, 1)), "caching-yes"),
                (ctx.client.caching == Some((false, 1)), "caching-no"),
                (o.noloop, "noloop"),
                (broken, "broken_redirect"),
            ] {
                if set {
                    flags.push(s(name));
                }
            }
            // BCAST without PREFIX covers every key: Redis lists its empty prefix.
            let prefixes = if o.bcast && o.prefixes.is_empty() {
                vec![Frame::Bulk(Bytes::new())]
            } else {
                o.prefixes.iter().cloned().map(Frame::Bulk).collect()
            };
            (flags, o.redirect as i64, prefixes)
        }
    };
    Frame::Map(vec![
        (s("flags"), Frame::Set(flags)),
        (s("redirect"), Frame::Integer(redirect)),
        (s("prefixes"), Frame::Array(prefixes)),
    ])
}

fn verbatim(text: String) -> Frame {
    Frame::Verbatim {
        format: *b"txt",
        text: Bytes::from(text),
    }
}

fn client_list(ctx: &mut Ctx<'_>, opts: &[Bytes]) -> CmdResult {
    let mut ids: Option<Vec<u64>> = None;
    let mut of_type: Option<ClientType> = None;
    let mut i = 0;
    while i < opts.len() {
        if is(&opts[i], "type") && i + 1 < opts.len() {
            of_type = Some(client_type(&opts[i + 1])?);
            i += 2;
        } else if is(&opts[i], "id") && i + 1 < opts.len() {
            let mut list = Vec::new();
            for a in &opts[i + 1..] {
                match parse_i64(a) {
                    Some(id) if id > 0 => list.push(id as u64),
                    _ => return Err(CmdError::err("Invalid client ID")),
                }
            }
            ids = Some(list);
            i = opts.len();
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let mut out = String::new();
    for c in ctx.shared.clients.all() {
        if ids.as_ref().is_some_and(|ids| !ids.contains(&c.id))
            || of_type.is_some_and(|t| t != c.client_type())
            || !same_tenant(ctx, &c)
        {
            continue;
        }
        out.push_str(&c.describe());
        out.push('\n');
    }
    Ok(verbatim(out))
}

fn client_kill(ctx: &mut Ctx<'_>, opts: &[Bytes]) -> CmdResult {
    // Old form: CLIENT KILL ip:port → +OK or error.
    if opts.len() == 1 {
        let addr = show(&opts[0]);
        let victim = ctx
            .shared
            .clients
            .all()
            .into_iter()
            .find(|c| c.addr.to_string() == addr && same_tenant(ctx, c));
        return match victim {
            Some(c) if may_kill(ctx, &c) => {
                kill(ctx, &c);
                Ok(Frame::ok())
            }
            Some(_) => Err(crate::tenancy::no_perm(&ctx.client.user, "client|kill")),
            None => Err(CmdError::err("No such client")),
        };
    }
    let mut id: Option<u64> = None;
    let mut addr: Option<String> = None;
    let mut laddr: Option<String> = None;
    let mut of_type: Option<ClientType> = None;
    let mut user: Option<String> = None;
    let mut max_age: Option<u64> = None;
    let mut skipme = true;
    // Option by option, as Redis reads them: the first bad one is the error (a last option
    // without its value is a syntax error when reached).
    for pair in opts.chunks(2) {
        let [k, v] = pair else {
            return Err(CmdError::Syntax);
        };
        if is(k, "id") {
            id = Some(
                parse_i64(v)
                    .filter(|&n| n > 0)
                    .ok_or_else(|| CmdError::err("client-id should be greater than 0"))?
                    as u64,
            );
        } else if is(k, "addr") {
            addr = Some(show(v));
        } else if is(k, "laddr") {
            laddr = Some(show(v));
        } else if is(k, "skipme") {
            skipme = if is(v, "yes") {
                true
            } else if is(v, "no") {
                false
            } else {
                return Err(CmdError::Syntax);
            };
        } else if is(k, "maxage") {
            let age = parse_i64(v)
                .ok_or_else(|| CmdError::err("maxage is not an integer or out of range"))?;
            if age <= 0 {
                return Err(CmdError::err("maxage should be greater than 0"));
            }
            max_age = Some(age as u64);
        } else if is(k, "type") {
            of_type = Some(client_type(v)?);
        } else if is(k, "user") {
            let exists = ctx.shared.tenancy.user(v).is_some()
                || std::str::from_utf8(v).is_ok_and(|n| ctx.shared.acl.get(n).is_some());
            if !exists {
                return Err(CmdError::err(format!("No such user '{}'", show(v))));
            }
            user = Some(show(v));
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let mut killed = 0;
    let mut forbidden = 0;
    for c in ctx.shared.clients.all() {
        if id.is_some_and(|id| id != c.id)
            || addr.as_ref().is_some_and(|a| *a != c.addr.to_string())
            || laddr.as_ref().is_some_and(|a| *a != c.laddr.to_string())
            || of_type.is_some_and(|t| t != c.client_type())
            || user.as_ref().is_some_and(|u| **u != **c.user.lock())
            || (skipme && c.id == ctx.client.id)
            || max_age.is_some_and(|age| c.created.elapsed().as_secs() < age)
            || !same_tenant(ctx, &c)
        {
            continue;
        }
        if !may_kill(ctx, &c) {
            forbidden += 1;
            continue;
        }
        kill(ctx, &c);
        killed += 1;
    }
    if killed == 0 && forbidden > 0 {
        return Err(crate::tenancy::no_perm(&ctx.client.user, "client|kill"));
    }
    Ok(Frame::Integer(killed))
}

/// A CLIENT LIST/KILL `TYPE` argument, or Redis' error.
fn client_type(name: &[u8]) -> Result<ClientType, CmdError> {
    ClientType::by_name(name)
        .ok_or_else(|| CmdError::err(format!("Unknown client type '{}'", show(name))))
}

/// Admins see every connection; other users only those of their own tenant.
fn same_tenant(ctx: &Ctx<'_>, c: &crate::client::ClientHandle) -> bool {
    ctx.client.perms.contains(crate::tenancy::Perms::ADMIN)
        || c.tenant.load(Ordering::Relaxed) == ctx.client.tenant
}

/// Admins may kill any connection; other users only their own user's connections.
fn may_kill(ctx: &Ctx<'_>, c: &crate::client::ClientHandle) -> bool {
    ctx.client.perms.contains(crate::tenancy::Perms::ADMIN) || *c.user.lock() == ctx.client.user
}

fn kill(ctx: &mut Ctx<'_>, victim: &std::sync::Arc<crate::client::ClientHandle>) {
    if victim.id == ctx.client.id {
        // Reply first, then close (Redis closes the caller after the reply too).
        ctx.client.close_after_reply = true;
    } else {
        victim.kill();
    }
}
