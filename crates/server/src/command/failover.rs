//! FAILOVER (Redis 6.2): a planned switchover from this primary to one of its replicas.
//!
//! The arguments are read and refused exactly as Redis 7.2's `failoverCommand` does, in its order
//! (syntax, then the server's state: a failover already running, a replica refuses, replicas
//! must be connected, FORCE's requirements, the target must be an online replica). Then the
//! switchover starts and FAILOVER answers OK at once, as Redis: `repl::failover` pauses writes,
//! waits for the target to acknowledge everything, and hands over (INFO
//! `master_failover_state` follows it). ABORT cancels it. Replica connections are found by
//! their client role ([`crate::client::ClientRole`]), which the replication link sets.
//!
//! May import: `args`, `client`, `error`, `repl` (the role, `repl::failover`).

use super::{cmd, flags, CommandSpec, Ctx, NO_KEYS};
use crate::args::{is, parse_i64};
use crate::client::ClientType;
use crate::error::{CmdError, CmdResult};
use crate::repl::failover;
use bytes::Bytes;
use gradus_proto::Frame;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("failover", -1, flags::ADMIN | flags::NOSCRIPT, NO_KEYS, "server", "Starts a coordinated failover from a server to one of its replicas.", failover),
];

/// FAILOVER's arguments once read.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FailoverArgs {
    /// `TO host port`.
    pub target: Option<(Bytes, i64)>,
    pub force: bool,
    /// `TIMEOUT ms` (0: none).
    pub timeout_ms: i64,
}

/// What FAILOVER asks for: an abort, or a switchover.
#[derive(Debug, PartialEq, Eq)]
pub enum FailoverRequest {
    Abort,
    Start(FailoverArgs),
}

/// Read FAILOVER's arguments (after the command name) as Redis does: `ABORT` alone; otherwise
/// `TIMEOUT ms` (once, > 0), `TO host port` (once), `FORCE` (once), in any order.
pub fn parse(args: &[Bytes]) -> Result<FailoverRequest, CmdError> {
    if args.len() == 1 && is(&args[0], "abort") {
        return Ok(FailoverRequest::Abort);
    }
    let mut out = FailoverArgs::default();
    let mut j = 0;
    while j < args.len() {
        let a = &args[j];
        if is(a, "timeout") && j + 1 < args.len() && out.timeout_ms == 0 {
            let ms = parse_i64(&args[j + 1]).ok_or(CmdError::NotInteger)?;
            if ms <= 0 {
                return Err(CmdError::err("FAILOVER timeout must be greater than 0"));
            }
            out.timeout_ms = ms;
            j += 2;
        } else if is(a, "to") && j + 2 < args.len() && out.target.is_none() {
            let port = parse_i64(&args[j + 2]).ok_or(CmdError::NotInteger)?;
            out.target = Some((args[j + 1].clone(), port));
            j += 3;
        } else if is(a, "force") && !out.force {
            out.force = true;
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    Ok(FailoverRequest::Start(out))
}

fn failover(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let args = match parse(&args[1..])? {
        FailoverRequest::Abort => {
            return if failover::abort(ctx.shared, "Failover manually aborted") {
                Ok(Frame::ok())
            } else {
                Err(CmdError::err("No failover in progress."))
            };
        }
        FailoverRequest::Start(args) => args,
    };
    if ctx.shared.failover.phase() != failover::Phase::None {
        return Err(CmdError::err("FAILOVER already in progress."));
    }
    if ctx.shared.repl.is_replica() {
        return Err(CmdError::err(
            "FAILOVER is not valid when server is a replica.",
        ));
    }
    let replicas = ctx
        .shared
        .clients
        .all()
        .into_iter()
        .filter(|c| c.client_type() == ClientType::Replica)
        .count();
    if replicas == 0 {
        return Err(CmdError::err("FAILOVER requires connected replicas."));
    }
    if args.force && (args.timeout_ms == 0 || args.target.is_none()) {
        return Err(CmdError::err(
            "FAILOVER with force option requires both a timeout and target HOST and IP.",
        ));
    }
    let target = match &args.target {
        Some((host, port)) => {
            let host = String::from_utf8_lossy(host).into_owned();
            // A port no replica can have is not a replica's (Redis compares it as a number).
            let port = u16::try_from(*port)
                .map_err(|_| CmdError::err("FAILOVER target HOST and PORT is not a replica."))?;
            failover::check_target(ctx.shared, &host, port).map_err(CmdError::err)?;
            Some((host, port))
        }
        None => None,
    };
    let Some(shared) = ctx.shared.repl.shared.get().and_then(|w| w.upgrade()) else {
        return Err(CmdError::err(
            "replication is not available in this process",
        ));
    };
    match &target {
        Some((host, port)) => tracing::info!(host, port, "FAILOVER requested"),
        None => tracing::info!("FAILOVER requested to any replica"),
    }
    failover::start(&shared, target, args.timeout_ms as u64, args.force);
    Ok(Frame::ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words
            .iter()
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    fn err(words: &[&str]) -> String {
        parse(&args(words)).unwrap_err().to_string()
    }

    #[test]
    fn reads_every_option_in_any_order() {
        assert_eq!(parse(&args(&["abort"])).unwrap(), FailoverRequest::Abort);
        assert_eq!(
            parse(&args(&[])).unwrap(),
            FailoverRequest::Start(FailoverArgs::default())
        );
        assert_eq!(
            parse(&args(&["FORCE", "timeout", "50", "To", "h", "7"])).unwrap(),
            FailoverRequest::Start(FailoverArgs {
                target: Some((Bytes::from_static(b"h"), 7)),
                force: true,
                timeout_ms: 50
            })
        );
    }

    #[test]
    fn errors_are_redis_texts_in_redis_order() {
        assert_eq!(err(&["to"]), "ERR syntax error");
        assert_eq!(err(&["to", "h"]), "ERR syntax error");
        assert_eq!(err(&["xyz"]), "ERR syntax error");
        assert_eq!(err(&["abort", "force"]), "ERR syntax error");
        assert_eq!(err(&["force", "force"]), "ERR syntax error");
        assert_eq!(err(&["timeout", "1", "timeout", "2"]), "ERR syntax error");
        assert_eq!(err(&["to", "h", "1", "to", "h", "2"]), "ERR syntax error");
        assert_eq!(
            err(&["timeout", "0"]),
            "ERR FAILOVER timeout must be greater than 0"
        );
        assert_eq!(
            err(&["timeout", "x"]),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            err(&["to", "h", "p"]),
            "ERR value is not an integer or out of range"
        );
        // The first bad option is the error.
        assert_eq!(
            err(&["timeout", "-5", "xyz"]),
            "ERR FAILOVER timeout must be greater than 0"
        );
    }
}
