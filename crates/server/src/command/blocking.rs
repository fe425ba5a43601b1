//! The blocking pops: BLPOP BRPOP BLMOVE BRPOPLPUSH BLMPOP BZPOPMIN BZPOPMAX BZMPOP, and ZMPOP
//! (BZMPOP that never waits).
//!
//! Each first tries its keys in order; the first that exists has its non-blocking operation run
//! (LPOP, LMOVE, ZPOPMIN …) as a write that joins this command's write transaction, so what is
//! logged is the pop, never the blocking command. When no key is ready the client blocks (see
//! `crate::blocking`): it is served by the write that makes a key ready, first blocked first, or
//! answers null at its timeout (fractional seconds; 0 waits forever). Inside MULTI/EXEC or a
//! script nothing waits: the command answers as if its timeout had passed, as in Redis.
//!
//! May import: `crate::blocking`, `crate::dispatch` (to run the operation), `client`.

use super::{cmd, flags, table, CommandSpec, Ctx, NO_KEYS};
use crate::args::is;
use crate::blocking::{Op, Waiter};
use crate::client::Deferred;
use crate::error::{CmdError, CmdResult};
use bytes::Bytes;
use gradus_proto::Frame;

/// Not `noscript`: Redis 7.2 lets scripts call every blocking pop (7.0 kept BLPOP, BRPOP,
/// BLMOVE, BRPOPLPUSH, BZPOPMIN and BZPOPMAX out), and there, as inside MULTI, nothing waits.
/// Regression: `test_scripts_run_blocking_pops_without_blocking`.
const B: u32 = flags::WRITE | flags::SELF_LOGGED | flags::BLOCKING;
const KEYS_THEN_TIMEOUT: (i32, i32, i32) = (1, -2, 1);

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("blpop", -3, B, KEYS_THEN_TIMEOUT, "list", "Removes and returns the first element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.", blpop).key_flags(&["RW access delete"]),
    cmd("brpop", -3, B, KEYS_THEN_TIMEOUT, "list", "Removes and returns the last element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.", brpop).key_flags(&["RW access delete"]),
    cmd("blmove", 6, B | flags::DENYOOM, (1, 2, 1), "list", "Pops an element from a list, pushes it to another list and returns it. Blocks until an element is available otherwise. Deletes the list if the last element was moved.", blmove).key_flags(&["RW access delete", "RW insert"]),
    cmd("brpoplpush", 4, B | flags::DENYOOM, (1, 2, 1), "list", "Pops an element from a list, pushes it to another list and returns it. Block until an element is available otherwise. Deletes the list if the last element was popped.", brpoplpush).key_flags(&["RW access delete", "RW insert"]),
    cmd("blmpop", -5, B, NO_KEYS, "list", "Pops the first element from one of multiple lists. Blocks until an element is available otherwise. Deletes the list if the last element was popped.", blmpop).with_numkeys(2).key_flags(&["RW access delete"]),
    cmd("bzpopmin", -3, B | flags::FAST, KEYS_THEN_TIMEOUT, "sorted-set", "Removes and returns the member with the lowest score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.", bzpopmin).key_flags(&["RW access delete"]),
    cmd("bzpopmax", -3, B | flags::FAST, KEYS_THEN_TIMEOUT, "sorted-set", "Removes and returns the member with the highest score from one or more sorted sets. Blocks until a member available otherwise. Deletes the sorted set if the last element was popped.", bzpopmax).key_flags(&["RW access delete"]),
    cmd("zmpop", -4, flags::WRITE | flags::SELF_LOGGED, NO_KEYS, "sorted-set", "Returns the highest- or lowest-scoring members from one or more sorted sets after removing them. Deletes the sorted set if the last member was popped.", zmpop).with_numkeys(1).key_flags(&["RW access delete"]),
    cmd("bzmpop", -5, B, NO_KEYS, "sorted-set", "Removes and returns a member by score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.", bzmpop).with_numkeys(2).key_flags(&["RW access delete"]),
];

/// A blocking command's timeout: `None` waits forever (0). Redis 7.2's rules and texts
/// (`getTimeoutFromObjectOrReply`): seconds parsed as `strtold` does (decimal, hexadecimal,
/// `inf`), milliseconds rounded up; too large for milliseconds, or for the deadline, is "out of
/// range", below zero "negative".
fn timeout(arg: &[u8]) -> Result<Option<std::time::Duration>, CmdError> {
    use crate::long_double::{parse, Parsed};
    let secs = match parse(arg) {
        None => return Err(CmdError::err("timeout is not a float or out of range")),
        Some(Parsed::Infinite) if arg.starts_with(b"-") => f64::NEG_INFINITY,
        Some(Parsed::Infinite) => f64::INFINITY,
        Some(Parsed::Finite(v)) => v.to_f64(),
    };
    let millis = secs * 1000.0;
    if millis > i64::MAX as f64 {
        return Err(CmdError::err("timeout is out of range"));
    }
    let millis = millis.ceil();
    if millis < 0.0 {
        return Err(CmdError::err("timeout is negative"));
    }
    let millis = millis as u64;
    if millis > (i64::MAX as u64).saturating_sub(gradus_store::now_ms()) {
        return Err(CmdError::err("timeout is out of range"));
    }
    Ok((millis > 0).then(|| std::time::Duration::from_millis(millis)))
}

/// Run `op` on the first of `keys` that holds something: its reply, or None when none does.
fn try_keys(ctx: &mut Ctx<'_>, keys: &[Bytes], op: &Op) -> Result<Option<Frame>, CmdError> {
    for key in keys {
        let now = ctx.now_ms;
        if !op.ready(&mut ctx.db().lock(key), key, now) {
            continue;
        }
        let args = op.command(key);
        let spec = table().get(&args[0]).ok_or_else(|| {
            CmdError::err(format!(
                "{} is not available",
                String::from_utf8_lossy(&args[0])
            ))
        })?;
        let resp = ctx.client.resp;
        ctx.client.resp = op.run_as(resp);
        let done = crate::blocking::run_op(ctx.shared, ctx.client, spec, args, ctx.now_ms, true);
        ctx.client.resp = resp;
        if let Frame::Error(e) = &done {
            return Err(CmdError::Other(e.clone()));
        }
        if let Some(reply) = op.reply(key, done) {
            return Ok(Some(reply));
        }
    }
    Ok(None)
}

/// Run `op` on the first of `keys` that holds something, or block on them all.
pub(super) fn block_on(
    ctx: &mut Ctx<'_>,
    keys: Vec<Bytes>,
    wait: Option<std::time::Duration>,
    op: Op,
) -> CmdResult {
    loop {
        if let Some(reply) = try_keys(ctx, &keys, &op)? {
            return Ok(reply);
        }
        if ctx.client.in_transaction() {
            return Ok(match op {
                Op::Move { .. } => Frame::Null,
                _ => Frame::NullArray,
            });
        }
        // Register while holding every key's shard and having seen them all empty: a write that
        // fills one afterwards finds this waiter (see `crate::blocking`).
        let registered = {
            let ks = ctx.db();
            let mut locked = ks.lock_keys(keys.iter().map(|k| &k[..]));
            let now = ctx.now_ms;
            if keys.iter().any(|k| op.ready(locked.shard(k), k, now)) {
                None
            } else {
                let waiter = Waiter::new(ctx.client, keys.clone(), op.clone(), wait.is_some());
                ctx.shared.blocked.register(waiter.clone());
                Some(waiter)
            }
        };
        let Some(waiter) = registered else {
            // Filled in between: try again.
            continue;
        };
        let deadline = wait.map(|w| tokio::time::Instant::now() + w);
        ctx.client.deferred = Some(Deferred::new("blocked on keys", move |shared, client| {
            Box::pin(crate::blocking::wait(shared, client, waiter, deadline))
        }));
        return Ok(Frame::Null);
    }
}

fn last_is_timeout(args: &[Bytes]) -> Result<(Vec<Bytes>, Option<std::time::Duration>), CmdError> {
    let (last, keys) = args[1..].split_last().ok_or(CmdError::Syntax)?;
    Ok((keys.to_vec(), timeout(last)?))
}

fn blpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (keys, wait) = last_is_timeout(args)?;
    block_on(ctx, keys, wait, Op::Pop { left: true })
}

fn brpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (keys, wait) = last_is_timeout(args)?;
    block_on(ctx, keys, wait, Op::Pop { left: false })
}

fn bzpopmin(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (keys, wait) = last_is_timeout(args)?;
    block_on(ctx, keys, wait, Op::ZPop { max: false })
}

fn bzpopmax(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (keys, wait) = last_is_timeout(args)?;
    block_on(ctx, keys, wait, Op::ZPop { max: true })
}

/// LEFT or RIGHT: true for LEFT.
fn end(arg: &[u8]) -> Result<bool, CmdError> {
    if is(arg, "left") {
        Ok(true)
    } else if is(arg, "right") {
        Ok(false)
    } else {
        Err(CmdError::Syntax)
    }
}

fn blmove(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let op = Op::Move {
        dest: args[2].clone(),
        from_left: end(&args[3])?,
        to_left: end(&args[4])?,
    };
    let wait = timeout(&args[5])?;
    block_on(ctx, vec![args[1].clone()], wait, op)
}

fn brpoplpush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let op = Op::Move {
        dest: args[2].clone(),
        from_left: false,
        to_left: true,
    };
    let wait = timeout(&args[3])?;
    block_on(ctx, vec![args[1].clone()], wait, op)
}

/// `timeout numkeys key… WHERE [COUNT n]` of BLMPOP/BZMPOP: keys, timeout, `where(arg)` of the
/// word after the keys, and the count (1 by default).
fn mpop_args<T>(
    args: &[Bytes],
    which: impl Fn(&[u8]) -> Option<T>,
) -> Result<(Vec<Bytes>, Option<std::time::Duration>, T, usize), CmdError> {
    let wait = timeout(&args[1])?;
    let (keys, where_, count) = mpop_keys(args, 2, which)?;
    Ok((keys, wait, where_, count))
}

/// `numkeys key… WHERE [COUNT n]` from `args[at]` on (ZMPOP's, BZMPOP's after its timeout).
fn mpop_keys<T>(
    args: &[Bytes],
    at: usize,
    which: impl Fn(&[u8]) -> Option<T>,
) -> Result<(Vec<Bytes>, T, usize), CmdError> {
    // Redis checks numkeys as a range (1 and up), one text for a non-number too.
    let numkeys = match crate::args::parse_i64(&args[at]) {
        Some(n) if n > 0 => n as usize,
        _ => return Err(CmdError::err("numkeys should be greater than 0")),
    };
    let rest = args.get(at + 1..).unwrap_or_default();
    if rest.len() <= numkeys {
        return Err(CmdError::Syntax);
    }
    let (keys, rest) = rest.split_at(numkeys);
    let where_ = which(&rest[0]).ok_or(CmdError::Syntax)?;
    let count = match &rest[1..] {
        [] => 1,
        [word, n] if is(word, "count") => match crate::args::parse_i64(n) {
            Some(c) if c > 0 => c as usize,
            _ => return Err(CmdError::err("count should be greater than 0")),
        },
        _ => return Err(CmdError::Syntax),
    };
    Ok((keys.to_vec(), where_, count))
}

fn blmpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (keys, wait, left, count) = mpop_args(args, |a| end(a).ok())?;
    block_on(ctx, keys, wait, Op::MPop { left, count })
}

/// MIN or MAX of ZMPOP and BZMPOP: whether the highest scores are popped.
fn min_or_max(a: &[u8]) -> Option<bool> {
    if is(a, "min") {
        Some(false)
    } else if is(a, "max") {
        Some(true)
    } else {
        None
    }
}

fn bzmpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (keys, wait, max, count) = mpop_args(args, min_or_max)?;
    block_on(ctx, keys, wait, Op::ZMPop { max, count })
}

/// ZMPOP numkeys key… MIN|MAX [COUNT n]: BZMPOP that never waits (null when every set is
/// empty).
fn zmpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (keys, max, count) = mpop_keys(args, 1, min_or_max)?;
    let op = Op::ZMPop { max, count };
    Ok(try_keys(ctx, &keys, &op)?.unwrap_or(Frame::NullArray))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_follow_redis_rules() {
        assert_eq!(timeout(b"0").unwrap(), None, "0 waits forever");
        assert_eq!(
            timeout(b"0.25").unwrap(),
            Some(std::time::Duration::from_millis(250))
        );
        let text = |arg: &[u8]| timeout(arg).unwrap_err().to_string();
        assert_eq!(text(b"-1"), "ERR timeout is negative");
        assert_eq!(text(b"abc"), "ERR timeout is not a float or out of range");
        // Redis 7.2 (7.0 reported an overflow as negative); Redis' own list.tcl sends the hex.
        assert_eq!(text(b"1e20"), "ERR timeout is out of range");
        assert_eq!(text(b"0x7FFFFFFFFFFFFF"), "ERR timeout is out of range");
        assert_eq!(text(b"inf"), "ERR timeout is out of range");
        assert_eq!(text(b"-inf"), "ERR timeout is negative");
        assert_eq!(text(b"nan"), "ERR timeout is not a float or out of range");
        assert_eq!(text(b" 1"), "ERR timeout is not a float or out of range");
        assert_eq!(
            timeout(b"0x1p-1").unwrap(),
            Some(std::time::Duration::from_millis(500))
        );
        // Milliseconds are rounded up, as Redis' ceill.
        assert_eq!(
            timeout(b"0.0001").unwrap(),
            Some(std::time::Duration::from_millis(1))
        );
    }

    #[test]
    fn mpop_numkeys_not_a_number_is_a_numkeys_error() {
        let args: Vec<Bytes> = ["bzmpop", "0", "x", "a", "MIN"]
            .iter()
            .map(|w| Bytes::from(w.to_string()))
            .collect();
        let err = mpop_args(&args, min_or_max).unwrap_err().to_string();
        assert_eq!(err, "ERR numkeys should be greater than 0");
    }

    #[test]
    fn mpop_arguments_are_checked_as_redis_does() {
        let args = |words: &str| -> Vec<Bytes> {
            words
                .split(' ')
                .map(|w| Bytes::from(w.to_string()))
                .collect()
        };
        let left = |a: &[u8]| end(a).ok();
        let text = |words: &str| mpop_args(&args(words), left).unwrap_err().to_string();
        assert_eq!(
            text("blmpop 0 0 a LEFT"),
            "ERR numkeys should be greater than 0"
        );
        assert_eq!(text("blmpop 0 2 a LEFT"), "ERR syntax error");
        assert_eq!(
            text("blmpop 0 1 a LEFT COUNT 0"),
            "ERR count should be greater than 0"
        );
        assert_eq!(text("blmpop 0 1 a MIDDLE"), "ERR syntax error");
        assert_eq!(
            text("blmpop 0 1 a LEFT COUNT 2 COUNT 3"),
            "ERR syntax error"
        );
        let (keys, wait, left, count) =
            mpop_args(&args("blmpop 1.5 2 a b RIGHT COUNT 3"), left).unwrap();
        assert_eq!((keys.len(), left, count), (2, false, 3));
        assert_eq!(wait, Some(std::time::Duration::from_millis(1500)));
    }
}
