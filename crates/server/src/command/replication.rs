//! Replication commands: REPLICAOF / SLAVEOF, ROLE, and what a replica sends its primary
//! (REPLCONF, PSYNC, SYNC). The state they read and change is `repl`'s.
//!
//! May import: `repl`, `client`, `error`, `args`, `state`.

use super::{cmd, flags, CommandSpec, Ctx, NO_KEYS};
use crate::args::is;
use crate::error::{CmdError, CmdResult};
use crate::repl::{LinkState, Role};
use crate::tenancy::acl::category;
use bytes::Bytes;
use gradus_proto::Frame;
use std::sync::atomic::Ordering;

const ADMIN: u32 = flags::ADMIN | flags::NOSCRIPT;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("replicaof", 3, ADMIN | flags::LOADING, NO_KEYS, "server", "Configures a server as replica of another, or promotes it to a master.", replicaof).with_acl(category::DANGEROUS),
    cmd("slaveof", 3, ADMIN | flags::LOADING, NO_KEYS, "server", "Sets a Redis server as a replica of another, or promotes it to being a master.", replicaof).with_acl(category::DANGEROUS),
    cmd("role", 1, flags::NOSCRIPT | flags::LOADING | flags::FAST, NO_KEYS, "server", "Returns the replication role.", role).with_acl(category::DANGEROUS),
    // Runs while a script is past busy-reply-threshold (Redis' allow_busy); touches no key.
    cmd("replconf", -1, ADMIN | flags::NO_MULTI | flags::LOADING | flags::ALLOW_BUSY | flags::OWN_GATE, NO_KEYS, "server", "An internal command for configuring the replication stream.", replconf).with_acl(category::DANGEROUS),
    cmd("psync", -3, ADMIN | flags::NO_MULTI, NO_KEYS, "server", "An internal command used in replication.", psync).with_acl(category::DANGEROUS),
    cmd("sync", 1, ADMIN | flags::NO_MULTI, NO_KEYS, "server", "An internal command used in replication.", sync).with_acl(category::DANGEROUS),
];

/// REPLICAOF host port | REPLICAOF NO ONE (Redis 7.2's replies).
fn replicaof(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let repl = &ctx.shared.repl;
    if ctx.shared.failover.phase() != crate::repl::failover::Phase::None {
        return Err(CmdError::err("REPLICAOF not allowed while failing over."));
    }
    if is(&args[1], "no") && is(&args[2], "one") {
        if repl.is_replica() {
            crate::repl::replica::promote(ctx.shared);
            tracing::info!("MASTER MODE enabled (REPLICAOF NO ONE)");
        }
        return Ok(Frame::ok());
    }
    let host = String::from_utf8_lossy(&args[1]).into_owned();
    let port = std::str::from_utf8(&args[2])
        .ok()
        .and_then(|p| p.parse::<i64>().ok())
        .filter(|p| (0..=65535).contains(p))
        .ok_or_else(|| CmdError::err("Invalid master port"))? as u16;
    if *repl.role.lock()
        == (Role::Replica {
            host: host.clone(),
            port,
        })
    {
        return Ok(Frame::Simple(
            "OK Already connected to specified master".into(),
        ));
    }
    let Some(shared) = repl.shared.get().and_then(|w| w.upgrade()) else {
        return Err(CmdError::err(
            "replication is not available in this process",
        ));
    };
    tracing::info!(host, port, "REPLICAOF: following a new primary");
    crate::repl::replica::follow(&shared, host, port);
    Ok(Frame::ok())
}

/// ROLE: `master offset [[ip port offset] …]` or `slave host port state offset`.
fn role(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    let repl = &ctx.shared.repl;
    let role = repl.role.lock().clone();
    Ok(match role {
        Role::Primary => {
            let view = repl.view();
            let replicas = view
                .replicas
                .iter()
                .filter(|r| r.state() == LinkState::Online)
                .map(|r| {
                    Frame::Array(vec![
                        Frame::bulk(r.ip.lock().clone()),
                        Frame::bulk(r.port.load(Ordering::Relaxed).to_string()),
                        Frame::bulk(r.ack_offset.load(Ordering::Relaxed).to_string()),
                    ])
                })
                .collect();
            Frame::Array(vec![
                Frame::bulk("master"),
                Frame::Integer(view.offset as i64),
                Frame::Array(replicas),
            ])
        }
        Role::Replica { host, port } => {
            let state = repl.link.lock().state;
            let offset = if state == "connected" {
                repl.applied_offset.load(Ordering::Relaxed) as i64
            } else {
                -1
            };
            Frame::Array(vec![
                Frame::bulk("slave"),
                Frame::bulk(host),
                Frame::Integer(port as i64),
                Frame::bulk(state),
                Frame::Integer(offset),
            ])
        }
    })
}

/// REPLCONF option value …: what a replica tells its primary before PSYNC (listening-port,
/// ip-address, capa, gradus-layout), and ACK/GETACK (answered on the replica's link itself,
/// see `repl::primary`; here they need no reply).
fn replconf(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args.len().is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    for pair in args[1..].chunks(2) {
        let (option, value) = (&pair[0], &pair[1]);
        if is(option, "listening-port") {
            ctx.client.repl_listening_port = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse().ok())
                .ok_or(CmdError::NotInteger)?;
        } else if is(option, "ip-address") {
            ctx.client.repl_announced_ip = Some(String::from_utf8_lossy(value).into_owned());
        } else if is(option, "rdb-only") {
            ctx.client.rdb_only = &value[..] == b"1";
        } else if is(option, "capa") || is(option, "rdb-filter-only") {
        } else if is(option, "ack") || is(option, "getack") {
            // No reply, as Redis (a replica's ACK on an ordinary connection).
            ctx.client.reply_queued = true;
            return Ok(Frame::Null);
        } else if is(option, "gradus-layout") {
            let theirs = String::from_utf8_lossy(value);
            if theirs != ctx.shared.repl.fingerprint {
                tracing::error!(
                    replica = %ctx.client.handle.addr,
                    "a replica's keyspace layout differs from this server's (tenants, keyspaces and users must match); refusing it"
                );
                return Err(CmdError::err(format!(
                    "keyspace layout mismatch: this primary's fingerprint is {}, the replica's {theirs} (tenants, keyspaces and users must match)",
                    ctx.shared.repl.fingerprint
                )));
            }
        } else {
            return Err(CmdError::err(format!(
                "Unrecognized REPLCONF option: {}",
                String::from_utf8_lossy(option)
            )));
        }
    }
    Ok(Frame::ok())
}

/// PSYNC replid offset: the connection becomes the replica's link (see `repl::primary`).
fn psync(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    crate::repl::failover::on_psync(ctx.shared, &ctx.client.handle.addr.to_string(), args)?;
    if ctx.shared.repl.is_replica() && ctx.shared.repl.link.lock().state != "connected" {
        return Err(CmdError::Other(
            "NOMASTERLINK Can't SYNC while not connected with my master".into(),
        ));
    }
    let replid = String::from_utf8_lossy(&args[1]).into_owned();
    let offset = std::str::from_utf8(&args[2])
        .ok()
        .and_then(|o| o.parse::<i64>().ok())
        .ok_or(CmdError::NotInteger)?;
    ctx.client.repl_takeover = Some(crate::repl::primary::PsyncRequest {
        from: Some((replid, offset.max(0) as u64)),
        rdb_only: ctx.client.rdb_only,
    });
    ctx.client.reply_queued = true;
    Ok(Frame::Null)
}

/// SYNC: a full resync, always.
fn sync(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    ctx.client.repl_takeover = Some(crate::repl::primary::PsyncRequest {
        from: None,
        rdb_only: ctx.client.rdb_only,
    });
    ctx.client.reply_queued = true;
    Ok(Frame::Null)
}
