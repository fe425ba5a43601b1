//! Diagnostics commands: SLOWLOG, LATENCY and DEBUG, with Redis 7.2's replies.
//!
//! SLOWLOG is per tenant for users without the `admin` right: they see, count and reset only
//! the entries of their own tenant's connections. LATENCY is server-wide, so it needs `admin`.
//! The data lives in `observe`; these handlers only read it and shape replies. DEBUG is refused
//! unless `enable-debug-command` allows it (checked by `dispatch`, before authentication, as
//! Redis refuses a protected command), and has the subcommands test harnesses use: SLEEP
//! (stalls the worker, as Redis' main thread sleeps), OBJECT, LOG, ERROR, PROTOCOL (a reply of
//! each RESP type), SET-ACTIVE-EXPIRE, SET-DISABLE-DENY-SCRIPTS and HELP.
//!
//! May import: `observe` (the slow log and the latency monitor), `args`, `state`, `dump` (the
//! serialized length DEBUG OBJECT reports), `client` and `pubsub` (the connection's outbox,
//! where DEBUG PROTOCOL's attribute and push go ahead of its reply, and the push's encoding).

use super::{cmd, flags, sub, CommandSpec, Ctx, NO_KEYS};
use crate::args::{is, parse_i64, show};
use crate::error::{CmdError, CmdResult};
use crate::observe::slowlog::Entry;
use bytes::Bytes;
use gradus_proto::Frame;
use std::sync::atomic::Ordering;

const ADMIN: u32 = flags::ADMIN | flags::LOADING;
const DIAG: u32 = flags::LOADING;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("slowlog", -2, DIAG, NO_KEYS, "server", "A container for slow log commands.", slowlog).with_subcommands(&[
        sub("slowlog|get", -2, DIAG, "Returns the slow log's entries (a tenant's user: its own tenant's)."),
        sub("slowlog|len", 2, DIAG, "Returns the number of entries in the slow log."),
        sub("slowlog|reset", 2, DIAG, "Clears all entries from the slow log."),
        sub("slowlog|help", 2, DIAG, "Show helpful text about the different subcommands"),
    ]),
    cmd("latency", -2, ADMIN, NO_KEYS, "server", "A container for latency diagnostics commands.", latency).with_subcommands(&[
        sub("latency|latest", 2, ADMIN, "Returns the latest latency samples for all events."),
        sub("latency|history", 3, ADMIN, "Returns timestamp-latency samples for an event."),
        sub("latency|reset", -2, ADMIN, "Resets the latency data for one or more events."),
        sub("latency|doctor", 2, ADMIN, "Returns a human-readable latency analysis report."),
        sub("latency|histogram", -2, ADMIN, "Returns the cumulative distribution of latencies of a subset or all commands."),
        sub("latency|help", 2, flags::LOADING, "Returns helpful text about the different subcommands."),
    ]),
    cmd("debug", -2, ADMIN | flags::NOSCRIPT | flags::PROTECTED, NO_KEYS, "server", "A container for debugging commands.", debug),
];

/// Redis' refusal of DEBUG when `enable-debug-command` does not allow it.
pub const DEBUG_NOT_ALLOWED: &str = "DEBUG command not allowed. If the enable-debug-command option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server.";

/// Whether `enable-debug-command` lets this connection run DEBUG (Redis'
/// `allowProtectedAction`: `local` means a loopback peer).
pub fn debug_allowed(shared: &crate::state::Shared, client: &crate::client::ClientState) -> bool {
    match shared.config.enable_debug_command.as_str() {
        "yes" => true,
        "local" => client.handle.addr.ip().is_loopback(),
        _ => false,
    }
}

const DEBUG_HELP: &[&str] = &[
    "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ERROR <string>",
    "    Return a Redis protocol error with <string> as message. Useful for clients",
    "    unit tests to simulate Redis errors.",
    "LOG <message>",
    "    Write <message> to the server log.",
    "OBJECT <key>",
    "    Show low level info about `key` and associated value.",
    "PROTOCOL <type>",
    "    Reply with a test value of the specified type. <type> can be: string,",
    "    integer, double, bignum, null, array, set, map, attrib, push, verbatim,",
    "    true, false.",
    "SET-ACTIVE-EXPIRE <0|1>",
    "    Setting it to 0 disables expiring keys in background when they are not",
    "    accessed (otherwise the Redis behavior). Setting it to 1 reenables back the",
    "    default.",
    "SLEEP <seconds>",
    "    Stop the server for <seconds>. Decimals allowed.",
    "HELP",
    "    Print this help.",
];

fn debug(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&args[1]).to_lowercase();
    match (sub.as_str(), args.len()) {
        ("help", 2) => Ok(help(DEBUG_HELP)),
        ("sleep", 3) => {
            // Redis reads the seconds with `strtod` and sleeps that long on its only thread: a
            // number it cannot read is 0.
            let secs = std::str::from_utf8(&args[2])
                .ok()
                .and_then(|t| t.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0)
                .unwrap_or(0.0);
            std::thread::sleep(std::time::Duration::from_secs_f64(secs.min(1e9)));
            Ok(Frame::ok())
        }
        ("object", 3) => debug_object(ctx, &args[2]),
        ("protocol", 3) => debug_protocol(ctx, &args[2]),
        ("set-disable-deny-scripts", 3) => {
            // Redis reads it with `atoi`; not in its help either.
            let on = crate::args::atoi(&args[2]) != 0;
            ctx.shared
                .live
                .disable_deny_scripts
                .store(on, std::sync::atomic::Ordering::Relaxed);
            Ok(Frame::ok())
        }
        ("set-active-expire", 3) => {
            // Redis reads the flag with `atoi`: 0 (or what does not start with a number) turns
            // the background sweep off, anything else on.
            let on = crate::args::atoi(&args[2]) != 0;
            ctx.shared
                .live
                .active_expire
                .store(on, std::sync::atomic::Ordering::Relaxed);
            Ok(Frame::ok())
        }
        ("log", 3) => {
            tracing::warn!("DEBUG LOG: {}", String::from_utf8_lossy(&args[2]));
            Ok(Frame::ok())
        }
        ("error", 3) => Ok(Frame::Error(
            String::from_utf8_lossy(&args[2]).replace(['\r', '\n'], " "),
        )),
        _ => Err(CmdError::err(format!(
            "unknown subcommand or wrong number of arguments for '{}'. Try DEBUG HELP.",
            String::from_utf8_lossy(&args[1])
        ))),
    }
}

/// `DEBUG PROTOCOL <type>`: Redis 7.2's test value of each RESP type, written for the
/// client's protocol (a map is a flat array in RESP2…). `attrib` is the reply
/// `Some real reply following the attribute`, in RESP3 after the attribute
/// `|1 key-popularity [key:123 90]`; `push` (RESP3 only) is the push `[server-cpu-usage 42]`
/// then the reply `Some real reply following the push reply` (to a script, a null: Redis'
/// script reader reads nothing of a push; in MULTI the push follows EXEC's reply). The
/// attribute goes ahead of the reply through the connection's outbox, so inside MULTI or a
/// script (whose reader skips an attribute anyway) only the reply is given.
fn debug_protocol(ctx: &mut Ctx<'_>, kind: &[u8]) -> CmdResult {
    let bulk = |s: &'static str| Frame::Bulk(Bytes::from_static(s.as_bytes()));
    let resp3 = ctx.client.resp == gradus_proto::ProtocolVersion::Resp3;
    let ahead = !ctx.client.in_script && !ctx.client.in_transaction();
    let kind = String::from_utf8_lossy(kind).to_ascii_lowercase();
    Ok(match kind.as_str() {
        "string" => bulk("Hello World"),
        "integer" => Frame::Integer(12345),
        // Redis' test value, not an approximation of pi.
        #[allow(clippy::approx_constant)]
        "double" => Frame::Double(3.141),
        "bignum" => Frame::BigNumber("1234567999999999999999999999999999999".into()),
        "null" => Frame::Null,
        "array" => Frame::Array((0..3).map(Frame::Integer).collect()),
        "set" => Frame::Set((0..3).map(Frame::Integer).collect()),
        "map" => Frame::Map(
            (0..3)
                .map(|j| (Frame::Integer(j), Frame::Boolean(j == 1)))
                .collect(),
        ),
        "attrib" => {
            let reply = bulk("Some real reply following the attribute");
            if !(resp3 && ahead) {
                return Ok(reply);
            }
            ctx.client.outbox().push_own(Bytes::from_static(
                b"|1\r\n$14\r\nkey-popularity\r\n*2\r\n$7\r\nkey:123\r\n:90\r\n",
            ));
            ctx.client.queue_reply(&reply);
            Frame::Null
        }
        "push" => {
            if !resp3 {
                return Err(CmdError::err("RESP2 is not supported by this command"));
            }
            // Redis' script reader has nothing for a push: `redis.call` gives the script
            // nil.
            if ctx.client.in_script {
                return Ok(Frame::Null);
            }
            let reply = bulk("Some real reply following the push reply");
            let push = Frame::Push(vec![bulk("server-cpu-usage"), Frame::Integer(42)]);
            if !ahead {
                // In MULTI the push goes out after EXEC's reply, as in Redis.
                let bytes = crate::pubsub::encode_for(&push, ctx.client.resp);
                ctx.client.after_reply.push(bytes);
                return Ok(reply);
            }
            ctx.client.queue_reply(&push);
            ctx.client.queue_reply(&reply);
            Frame::Null
        }
        "true" => Frame::Boolean(true),
        "false" => Frame::Boolean(false),
        "verbatim" => Frame::Verbatim {
            format: *b"txt",
            text: Bytes::from_static(b"This is a verbatim\nstring"),
        },
        _ => {
            return Err(CmdError::err(
                "Wrong protocol type name. Please use one of the following: \
                 string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false",
            ))
        }
    })
}

/// `DEBUG OBJECT key`: Redis' line (the value's address, reference count, encoding, serialized
/// length, LRU clock in seconds and idle seconds); the key is not touched.
fn debug_object(ctx: &mut Ctx<'_>, key: &Bytes) -> CmdResult {
    let now = ctx.now_ms;
    let db = ctx.db();
    let mut shard = db.lock(key);
    let clock = shard.access_clock();
    let Some(entry) = shard.peek(key, now) else {
        return Err(CmdError::err("no such key"));
    };
    // DUMP's payload less its type byte, RDB version (2 bytes) and CRC (8): Redis'
    // `rdbSavedObjectLen`.
    let serialized = gradus_proto::rdb::dump(&super::dump::to_rdb(&entry.value))
        .map_or(0, |d| d.len().saturating_sub(11));
    let idle_s = u64::from(entry.idle_ticks_by(clock, now)) / 100;
    // Redis' LRU clock: seconds, 24 bits.
    let lru = (now / 1000).wrapping_sub(idle_s) & ((1 << 24) - 1);
    Ok(Frame::Simple(Bytes::from(format!(
        "Value at:{:p} refcount:{} encoding:{} serializedlength:{serialized} lru:{lru} lru_seconds_idle:{idle_s}",
        &entry.value,
        super::databases::refcount(&entry.value),
        entry.value.encoding(),
    ))))
}

const SLOWLOG_HELP: &[&str] = &[
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Print this help.",
];

const LATENCY_HELP: &[&str] = &[
    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
    "    If no commands are specified then all histograms are replied.",
    "HELP",
    "    Print this help.",
];

fn help(lines: &[&'static str]) -> Frame {
    Frame::Array(lines.iter().map(|l| Frame::Simple((*l).into())).collect())
}

/// Which slow log entries the caller may see: all for an admin, else its tenant's.
fn visible(ctx: &Ctx<'_>) -> impl Fn(&Entry) -> bool {
    let admin = ctx.client.perms.contains(crate::tenancy::Perms::ADMIN);
    let tenant = ctx.client.tenant;
    move |e: &Entry| admin || e.tenant == tenant
}

fn slowlog(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let argc = args.len();
    let slow = &ctx.shared.observer.slowlog;
    match String::from_utf8_lossy(&args[1]).to_lowercase().as_str() {
        "help" if argc == 2 => Ok(help(SLOWLOG_HELP)),
        "reset" if argc == 2 => {
            slow.reset(visible(ctx));
            Ok(Frame::ok())
        }
        "len" if argc == 2 => Ok(Frame::Integer(slow.len(visible(ctx)) as i64)),
        "get" if argc == 2 || argc == 3 => {
            let count = match args.get(2) {
                None => 10,
                Some(a) => match parse_i64(a) {
                    None => return Err(CmdError::NotInteger),
                    Some(-1) => usize::MAX,
                    Some(n) if n >= 0 => n as usize,
                    Some(_) => {
                        return Err(CmdError::err("count should be greater than or equal to -1"))
                    }
                },
            };
            let entries = slow.get(count, visible(ctx));
            Ok(Frame::Array(entries.into_iter().map(entry_frame).collect()))
        }
        _ => Err(CmdError::UnknownSubcommand {
            cmd: "SLOWLOG".into(),
            sub: show(&args[1]),
        }),
    }
}

fn entry_frame(e: Entry) -> Frame {
    Frame::Array(vec![
        Frame::Integer(e.id as i64),
        Frame::Integer(e.time as i64),
        Frame::Integer(e.micros as i64),
        Frame::Array(e.args.into_iter().map(Frame::Bulk).collect()),
        Frame::Bulk(Bytes::from(e.addr)),
        Frame::Bulk(Bytes::from(e.name)),
    ])
}

fn latency(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let argc = args.len();
    let monitor = &ctx.shared.observer.latency;
    let sub = &args[1];
    if is(sub, "help") && argc == 2 {
        Ok(help(LATENCY_HELP))
    } else if is(sub, "latest") && argc == 2 {
        Ok(Frame::Array(
            monitor
                .latest()
                .into_iter()
                .map(|(name, last, max)| {
                    Frame::Array(vec![
                        Frame::Bulk(Bytes::from_static(name.as_bytes())),
                        Frame::Integer(last.time as i64),
                        Frame::Integer(last.millis as i64),
                        Frame::Integer(max as i64),
                    ])
                })
                .collect(),
        ))
    } else if is(sub, "history") && argc == 3 {
        Ok(Frame::Array(
            monitor
                .history(&args[2])
                .into_iter()
                .map(|s| {
                    Frame::Array(vec![
                        Frame::Integer(s.time as i64),
                        Frame::Integer(s.millis as i64),
                    ])
                })
                .collect(),
        ))
    } else if is(sub, "reset") {
        let names: Vec<&[u8]> = args[2..].iter().map(|a| &a[..]).collect();
        Ok(Frame::Integer(monitor.reset(&names) as i64))
    } else if is(sub, "histogram") {
        Ok(latency_histogram(ctx, &args[2..]))
    } else if is(sub, "doctor") && argc == 2 {
        let threshold = ctx
            .shared
            .live
            .latency_monitor_threshold
            .load(Ordering::Relaxed);
        Ok(Frame::Verbatim {
            format: *b"txt",
            text: Bytes::from(monitor.doctor(threshold)),
        })
    } else {
        Err(CmdError::UnknownSubcommand {
            cmd: "LATENCY".into(),
            sub: show(sub),
        })
    }
}

/// LATENCY HISTOGRAM [command …]: each command row's latency histogram since the last
/// RESETSTAT (`observe::cmdstats`), as Redis 7 shapes it: a map of full names (`client|id`) to
/// `calls` and `histogram_usec` (see `cmdstats::cumulative_buckets_usec`). No names: every
/// row with data, in table order. A command name covers its subcommands; unknown names are
/// skipped.
fn latency_histogram(ctx: &Ctx<'_>, names: &[Bytes]) -> Frame {
    let t = super::table();
    let rows = t.rows();
    let wanted: Vec<usize> = if names.is_empty() {
        (0..rows.len()).collect()
    } else {
        let mut wanted = Vec::new();
        for name in names {
            for (i, (row, _)) in rows.iter().enumerate() {
                let container = row.name.split('|').next().unwrap_or(row.name);
                // `client` covers `client` and `client|…`; `client|id` only itself.
                if row.name.as_bytes().eq_ignore_ascii_case(name)
                    || (!name.contains(&b'|') && container.as_bytes().eq_ignore_ascii_case(name))
                {
                    wanted.push(i);
                }
            }
        }
        wanted
    };
    let cells = ctx.shared.observer.commands.since_reset();
    let s = |v: &str| Frame::Bulk(Bytes::from(v.to_string()));
    let entries = wanted
        .into_iter()
        .filter_map(|i| {
            let hist = cells.get(i)?.hist.as_ref().filter(|h| !h.is_empty())?;
            let buckets = crate::observe::cmdstats::cumulative_buckets_usec(hist)
                .into_iter()
                .map(|(usec, count)| (Frame::Integer(usec as i64), Frame::Integer(count as i64)))
                .collect();
            let entry = Frame::Map(vec![
                (s("calls"), Frame::Integer(hist.len() as i64)),
                (s("histogram_usec"), Frame::Map(buckets)),
            ]);
            Some((s(rows[i].0.name), entry))
        })
        .collect();
    Frame::Map(entries)
}
