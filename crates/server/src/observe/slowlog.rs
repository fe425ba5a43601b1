//! Redis' slow log: the last `slowlog-max-len` commands that ran for at least
//! `slowlog-log-slower-than` microseconds, newest first, each with Redis 7's six fields (id, Unix
//! time, microseconds, arguments, client address, client name).
//!
//! Arguments are kept as Redis keeps them: at most 32 (the 32nd says `... (N more arguments)`),
//! each at most 128 bytes (then `... (N more bytes)`), and secrets after an `AUTH` word shown as
//! `(redacted)`. Entries also carry the client's tenant, so a tenant's user sees only its own.
//!
//! The mutex is taken only for a command that was slow (and by SLOWLOG itself).
//!
//! May import: `client`, `command` (flags, and the table's rows for where secrets are). Nothing
//! else.

use crate::client::ClientState;
use crate::command::{flags, CommandSpec};
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::VecDeque;

/// Redis' `SLOWLOG_ENTRY_MAX_ARGC`.
const MAX_ARGC: usize = 32;
/// Redis' `SLOWLOG_ENTRY_MAX_STRING`.
const MAX_STRING: usize = 128;

/// One slow command.
#[derive(Debug, Clone)]
pub struct Entry {
    pub id: u64,
    /// Unix seconds when it was logged.
    pub time: u64,
    pub micros: u64,
    pub args: Vec<Bytes>,
    pub addr: String,
    pub name: String,
    /// The tenant of the client that ran it (`usize::MAX` before AUTH).
    pub tenant: usize,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    entries: VecDeque<Entry>,
}

/// The slow log of a server.
#[derive(Default)]
pub struct SlowLog {
    inner: Mutex<Inner>,
}

impl SlowLog {
    /// Log a command that took `micros`; keep at most `max_len` entries.
    pub fn push(
        &self,
        client: &ClientState,
        row: &CommandSpec,
        args: &[Bytes],
        micros: u64,
        max_len: usize,
    ) {
        let entry_args = kept_args(args, row.has(flags::SECRET_ARGS));
        let name = client.handle.name.lock().clone().unwrap_or_default();
        let mut inner = self.inner.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        inner.entries.push_front(Entry {
            id,
            time: super::unix_seconds(),
            micros,
            args: entry_args,
            addr: client.handle.addr.to_string(),
            name,
            tenant: client.tenant,
        });
        inner.entries.truncate(max_len);
    }

    /// Up to `count` entries, newest first, that `visible` lets through.
    pub fn get(&self, count: usize, visible: impl Fn(&Entry) -> bool) -> Vec<Entry> {
        let inner = self.inner.lock();
        inner
            .entries
            .iter()
            .filter(|e| visible(e))
            .take(count)
            .cloned()
            .collect()
    }

    /// How many entries `visible` lets through.
    pub fn len(&self, visible: impl Fn(&Entry) -> bool) -> usize {
        self.inner
            .lock()
            .entries
            .iter()
            .filter(|e| visible(e))
            .count()
    }

    /// Drop the entries `visible` lets through.
    pub fn reset(&self, visible: impl Fn(&Entry) -> bool) {
        self.inner.lock().entries.retain(|e| !visible(e));
    }

    /// Keep at most `max_len` entries (after `CONFIG SET slowlog-max-len`).
    pub fn trim(&self, max_len: usize) {
        self.inner.lock().entries.truncate(max_len);
    }
}

/// The arguments as the slow log keeps them (see the module docs).
fn kept_args(args: &[Bytes], secret: bool) -> Vec<Bytes> {
    let shown = args.len().min(MAX_ARGC);
    let mut out = Vec::with_capacity(shown);
    // Secrets: everything after a leading AUTH; the two words after an AUTH option (HELLO).
    let (redact_from, redact_to) = if secret {
        secret_args(args)
    } else {
        (usize::MAX, 0)
    };
    for (i, arg) in args.iter().enumerate().take(shown) {
        if i == MAX_ARGC - 1 && args.len() > MAX_ARGC {
            out.push(Bytes::from(format!(
                "... ({} more arguments)",
                args.len() - MAX_ARGC + 1
            )));
            break;
        }
        if i >= redact_from && i < redact_to {
            out.push(Bytes::from_static(b"(redacted)"));
        } else if arg.len() > MAX_STRING {
            let mut s = arg[..MAX_STRING].to_vec();
            s.extend_from_slice(format!("... ({} more bytes)", arg.len() - MAX_STRING).as_bytes());
            out.push(Bytes::from(s));
        } else {
            out.push(arg.clone());
        }
    }
    out
}

/// The arguments of a command flagged `secret_args` that Redis shows as `(redacted)` (in the
/// slow log and to MONITOR): those its row says (MIGRATE's; see `CommandSpec::secrets`), else
/// every one after AUTH's name, or HELLO's two after its `AUTH` word; `(from, to)`, to
/// exclusive (`(usize::MAX, 0)`: none).
pub fn secret_args(args: &[Bytes]) -> (usize, usize) {
    let row = args
        .first()
        .and_then(|name| crate::command::table().get(name));
    if let Some(at) = row.and_then(|row| row.secrets) {
        return at(args);
    }
    match args.iter().position(|a| a.eq_ignore_ascii_case(b"auth")) {
        Some(0) => (1, usize::MAX),
        Some(at) => (at + 1, at + 3),
        None => (usize::MAX, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::from(s.to_string())
    }

    #[test]
    fn long_commands_are_cut_as_redis_cuts_them() {
        let mut args = vec![b("rpush"), b("l")];
        args.extend((1..=40).map(|i| b(&i.to_string())));
        let kept = kept_args(&args, false);
        assert_eq!(kept.len(), 32);
        assert_eq!(kept[30], b("29"));
        assert_eq!(kept[31], b("... (11 more arguments)"));
        let long = kept_args(&[b("set"), b("k"), b(&"x".repeat(200))], false);
        assert_eq!(
            long[2],
            b(&format!("{}... (72 more bytes)", "x".repeat(128)))
        );
    }

    #[test]
    fn secrets_are_redacted() {
        assert_eq!(
            kept_args(&[b("AUTH"), b("user"), b("pw")], true),
            vec![b("AUTH"), b("(redacted)"), b("(redacted)")]
        );
        assert_eq!(
            kept_args(
                &[
                    b("hello"),
                    b("3"),
                    b("auth"),
                    b("u"),
                    b("p"),
                    b("setname"),
                    b("n")
                ],
                true
            ),
            vec![
                b("hello"),
                b("3"),
                b("auth"),
                b("(redacted)"),
                b("(redacted)"),
                b("setname"),
                b("n")
            ]
        );
    }
}
