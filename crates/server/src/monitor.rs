//! MONITOR: connections that see every command the server runs, as Redis' lines
//! (`+1700000000.123456 [0 127.0.0.1:50000] "set" "k" "v"`).
//!
//! Only an admin may monitor, and a monitor sees the commands of its own tenant (in a
//! single-tenant server: everything). What is shown is Redis' choice (`dispatch::feed_monitors`):
//! not the admin commands, and credentials (AUTH, HELLO … AUTH) as `(redacted)`. A line goes through the monitor's outbox, bounded
//! like any pushed output; with no monitor the cost is one atomic load per command.
//!
//! May import: `pubsub` (outboxes), `client`; no command handlers.

use crate::pubsub::Outbox;
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

struct Monitor {
    tenant: usize,
    outbox: Arc<Outbox>,
}

/// The monitoring connections.
#[derive(Default)]
pub struct Monitors {
    list: Mutex<Vec<Monitor>>,
    count: AtomicUsize,
}

impl Monitors {
    /// True while any connection monitors.
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    pub fn add(&self, tenant: usize, outbox: Arc<Outbox>) {
        let mut list = self.list.lock();
        if list.iter().any(|m| Arc::ptr_eq(&m.outbox, &outbox)) {
            return;
        }
        list.push(Monitor { tenant, outbox });
        self.count.store(list.len(), Ordering::Relaxed);
    }

    /// Forget connection `id` (it closed or was reset).
    pub fn remove(&self, id: u64) {
        let mut list = self.list.lock();
        list.retain(|m| m.outbox.handle.id != id);
        self.count.store(list.len(), Ordering::Relaxed);
    }

    /// Show `args`, run by a connection of `tenant` from `addr` in SELECT `db`, to the monitors
    /// of that tenant.
    pub fn feed(
        &self,
        tenant: usize,
        db: usize,
        addr: &str,
        args: &[Bytes],
        limits: &crate::pubsub::OutputLimits,
    ) {
        let targets: Vec<Arc<Outbox>> = self
            .list
            .lock()
            .iter()
            .filter(|m| m.tenant == tenant)
            .map(|m| m.outbox.clone())
            .collect();
        if targets.is_empty() {
            return;
        }
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let line = line(now_us, db, addr, args);
        for outbox in targets {
            outbox.push(line.clone(), limits);
        }
    }
}

/// One MONITOR line, as Redis writes it (a status reply).
pub fn line(now_us: u64, db: usize, addr: &str, args: &[Bytes]) -> Bytes {
    let mut out = BytesMut::with_capacity(64 + args.iter().map(|a| a.len() + 3).sum::<usize>());
    out.extend_from_slice(
        format!(
            "+{}.{:06} [{} {}]",
            now_us / 1_000_000,
            now_us % 1_000_000,
            db,
            addr
        )
        .as_bytes(),
    );
    for arg in args {
        out.extend_from_slice(b" ");
        repr(arg, &mut out);
    }
    out.extend_from_slice(b"\r\n");
    out.freeze()
}

/// Redis' `sdscatrepr`: a quoted string with C-style escapes.
fn repr(arg: &[u8], out: &mut BytesMut) {
    out.extend_from_slice(b"\"");
    for &b in arg {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            7 => out.extend_from_slice(b"\\a"),
            8 => out.extend_from_slice(b"\\b"),
            b if b.is_ascii_graphic() || b == b' ' => out.extend_from_slice(&[b]),
            b => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
        }
    }
    out.extend_from_slice(b"\"");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_quote_like_redis() {
        let args = [
            Bytes::from_static(b"set"),
            Bytes::from_static(b"k\"\n\x01 v"),
        ];
        assert_eq!(
            &line(1_700_000_000_000_042, 3, "127.0.0.1:5000", &args)[..],
            b"+1700000000.000042 [3 127.0.0.1:5000] \"set\" \"k\\\"\\n\\x01 v\"\r\n"
        );
    }
}
