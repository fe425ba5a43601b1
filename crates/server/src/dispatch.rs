//! Dispatch: one decoded request in, one reply frame out.
//!
//! Order of checks, as in Redis' `processCommand`: look the command up in the table, check arity,
//! check authentication, queue it if the connection is inside MULTI, otherwise run it under a shared
//! hold of the store gate (EXEC takes the exclusive hold itself). Every failure here is a reply,
//! never a dropped connection.

use crate::client::ClientState;
use crate::command::{arity_error, flags, table, CommandSpec, Ctx};
use crate::error::CmdError;
use crate::persist::record;
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
        return reject(client, arity_error(&args[0]));
    }
    if !client.authenticated && !spec.has(flags::NO_AUTH) {
        if shared.auth_required() {
            return reject(client, CmdError::NoAuth);
        }
        // requirepass was cleared at run time: everyone is in.
        client.authenticated = true;
    }
    if let Err(e) = crate::tenancy::check_perms(client, spec, &args) {
        return reject(client, e);
    }
    if let Some(multi) = client.multi.as_mut() {
        if !spec.has(flags::NO_QUEUE) {
            if spec.has(flags::NO_MULTI) {
                multi.dirty = true;
                return CmdError::err("Command not allowed inside a transaction").to_frame();
            }
            multi.queued.push((spec, args));
            client
                .handle
                .multi_len
                .store(multi.queued.len() as i64, Ordering::Relaxed);
            return Frame::Simple("QUEUED".into());
        }
    }
    crate::client::LocalCounters::bump(&client.counters.commands);
    client.handle.touch(full_name(spec, &args), now_ms);
    if shared.tenancy.tenants[client.tenant].limited && crate::quota::may_grow(spec, client) {
        if let Err(e) = crate::quota::make_room(shared, client, now_ms) {
            if spec.name == "exec" {
                client.clear_transaction();
            }
            return e.to_frame();
        }
    }
    if spec.has(flags::OWN_GATE) {
        return run(shared, client, spec, &args, now_ms);
    }
    if !spec.has(flags::WRITE) || spec.has(flags::SELF_LOGGED) {
        let _gate = shared.store.shared(client.id);
        return run(shared, client, spec, &args, now_ms);
    }
    let degree = match shared.persist.degree_for(client, spec) {
        Ok(d) => d,
        Err(e) => return e.to_frame(),
    };
    if let Err(e) = shared.persist.check_writable(degree) {
        return e.to_frame();
    }
    // Encode the record first (it depends only on the arguments and the clock), so the
    // write-order lock below covers just the in-memory apply and the queue push.
    let db = client.db;
    let payload = degree
        .is_logged()
        .then(|| record::encode_command(now_ms, db, &args));
    // Over the log's record limit the append could only fail after the write was applied.
    if let Some(len) = payload.as_ref().map(bytes::Bytes::len) {
        if len > gradus_log::format::MAX_RECORD_LEN {
            return CmdError::err(format!(
                "the write's log record would be {len} bytes, over the {}-byte limit; not applied",
                gradus_log::format::MAX_RECORD_LEN
            ))
            .to_frame();
        }
    }
    // Apply and append while holding the gate (shared), so a snapshot — armed under the exclusive
    // hold — sees a write either applied *and* appended or not at all; and under `write_order`, so
    // the log order is exactly the order in which writes were applied to memory.
    let _gate = shared.store.shared(client.id);
    // Writes that are not logged need no global order.
    let _order = degree.is_logged().then(|| shared.write_order.lock());
    let reply = run(shared, client, spec, &args, now_ms);
    if let Some(payload) = payload.filter(|_| !reply.is_error()) {
        if let Err(e) = shared.persist.append_encoded(client, payload, degree) {
            tracing::error!(error = %e, "log append failed");
            return CmdError::Other(format!(
                "MISCONF write applied in memory but not logged: {e}"
            ))
            .to_frame();
        }
    }
    reply
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
    let mut ctx = Ctx {
        shared,
        client,
        now_ms,
    };
    match (spec.handler)(&mut ctx, args) {
        Ok(frame) => frame,
        Err(e) => e.to_frame(),
    }
}

/// Container commands' subcommands as CLIENT LIST reports them (`client|info`).
const SUBCOMMANDS: &[&str] = &[
    "client|id",
    "client|getname",
    "client|setname",
    "client|setinfo",
    "client|info",
    "client|list",
    "client|kill",
    "client|no-evict",
    "client|no-touch",
    "client|help",
    "client|durability",
    "config|get",
    "config|set",
    "config|resetstat",
    "config|rewrite",
    "command|count",
    "command|list",
    "command|info",
    "command|docs",
    "command|getkeys",
    "command|help",
];

/// The name CLIENT LIST shows for a command: `name|sub` for a known subcommand.
fn full_name(spec: &CommandSpec, args: &[Bytes]) -> &'static str {
    if args.len() > 1 && matches!(spec.name, "client" | "config" | "command") {
        let sub = &args[1];
        for full in SUBCOMMANDS {
            if let Some(rest) = full.strip_prefix(spec.name) {
                if rest.as_bytes()[1..].eq_ignore_ascii_case(sub) {
                    return full;
                }
            }
        }
    }
    spec.name
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
