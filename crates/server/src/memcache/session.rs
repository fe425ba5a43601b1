//! The storage semantics the text and meta commands share, and the session they run in.
//!
//! A [`Session`] is one memcached connection's view while it runs a batch of commands;
//! [`Session::execute`] hands each command to its protocol's module ([`super::text`] or
//! [`super::meta`]), which turn requests into calls of the core here and its results into
//! replies. The core is memcached 1.6's: `Session::store` (`do_store_item`: set, add, replace,
//! append, prepend, cas, and `ms` with its modes), `Session::arith` (incr/decr and `ma`),
//! `touch_locked`, `fetch` of a live string item, and [`flush_db`].
//!
//! Reads take a shared hold of the store gate and one shard lock. Writes go through
//! `Session::write`, that is the write path (`persist::write::WriteTxn`) as RESP writes do: the
//! memory quota, the degree of the keyspace, then the gate (shared) and — when the keyspace is
//! logged — the write-order lock, the change under the shard lock, and the change's effects
//! appended to the log before the locks are released (see [`super::records`]). A `strict`
//! write's reply is held back by the connection until the log is durable.
//!
//! CAS values are entry versions, so any write — over RESP too — changes an item's CAS.
//!
//! May import: `persist::write`, `state`, `client`, the sibling `records` and `stats`,
//! `gradus-store`, `gradus-memcache`'s command and reply types. Must not import `text` or `meta`
//! (it calls their handlers as `Session` methods), nor parse bytes (that is `gradus-memcache`'s
//! job).

use super::records::{del_args, expiry_args, mcstore_args};
use super::stats::{Counter, LocalCounters};
use super::Expiry;
use crate::client::ClientState;
use crate::persist::write::{effects_logged, log_effect, Scope, WriteError, WriteTxn};
use crate::state::Shared;
use bytes::{BufMut, Bytes, BytesMut};
use gradus_memcache::reply;
use gradus_memcache::{Command, MetaMode};
use gradus_store::{ItemMeta, Keyspace, Shard, Value};

/// What the connection does after a command.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Close,
}

/// One connection's view while it runs a batch of commands.
pub struct Session<'a> {
    pub shared: &'a Shared,
    pub client: &'a mut ClientState,
    pub db: usize,
    pub now_ms: u64,
    pub counters: &'a mut LocalCounters,
    /// Largest item value (append/prepend results included).
    pub max_value: usize,
}

/// The outcome of a store, in memcached's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StoreOutcome {
    /// Stored; the new CAS and value size.
    Yes {
        cas: u64,
        size: usize,
    },
    NotStored,
    Exists,
    NotFound,
}

/// A store request in one form for `set`…`cas` and `ms`. `data` still points into the read
/// buffer; it is copied when stored, so a stored value never pins a whole read buffer.
pub(super) struct StoreReq {
    pub(super) mode: MetaMode,
    pub(super) compare_cas: Option<u64>,
    /// ms `I`: a CAS lower than the item's is accepted, and the item marked stale.
    pub(super) allow_stale: bool,
    pub(super) new_cas: Option<u64>,
    pub(super) client_flags: u32,
    pub(super) expiry: Expiry,
    /// ms `N` in append/prepend mode: create on a miss with this expiry.
    pub(super) vivify: Option<Expiry>,
    pub(super) data: Bytes,
}

/// A live string item as a command sees it (copied out of the shard: a `Bytes` clone).
pub(super) struct Item {
    pub(super) value: Bytes,
    pub(super) cas: u64,
    pub(super) expires_at: Option<u64>,
    pub(super) meta: ItemMeta,
    /// Seconds since the last store or fetch, before this read (meta `l`, `la`).
    pub(super) idle_s: u64,
}

/// The live *string* entry for `key` (another type is a miss for memcached), marking it fetched
/// when `bump`. Returns the meta state from before this read.
pub(super) fn fetch(shard: &mut Shard, key: &[u8], now_ms: u64, bump: bool) -> Option<Item> {
    let (entry, before, idle_s, version) = shard.fetch(key, now_ms, bump)?;
    match &entry.value {
        Value::Str(v) => Some(Item {
            value: v.to_bytes(),
            cas: version,
            expires_at: entry.expires_at(),
            meta: before,
            idle_s,
        }),
        _ => None,
    }
}

/// Parse a stored value as memcached's incr/decr do: a decimal u64 (trailing spaces allowed,
/// since memcached may pad a shrunk number).
fn parse_counter(value: &[u8]) -> Option<u64> {
    let digits = value.trim_ascii_end();
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// What a write changed, for the log. Turned into command arguments only when the database is
/// logged, so a `none` database pays nothing for it.
pub(super) enum Effect {
    /// The item as it now is (`MCSTORE`).
    Store {
        key: Bytes,
        value: Bytes,
        meta: ItemMeta,
        expires_at: Option<u64>,
    },
    /// Gone (`DEL`).
    Del(Bytes),
    /// New TTL (`PEXPIREAT`/`PERSIST`).
    Expire(Bytes, Option<u64>),
}

impl Effect {
    fn into_args(self) -> Vec<Bytes> {
        match self {
            Effect::Store {
                key,
                value,
                meta,
                expires_at,
            } => mcstore_args(&key, value, meta, expires_at),
            Effect::Del(key) => del_args(&key),
            Effect::Expire(key, at) => expiry_args(&key, at),
        }
    }
}

pub(super) fn store_effect(
    key: &Bytes,
    value: Bytes,
    meta: ItemMeta,
    expires_at: Option<u64>,
) -> Effect {
    Effect::Store {
        key: key.clone(),
        value,
        meta,
        expires_at,
    }
}

pub(super) type Effects = Vec<Effect>;

impl<'a> Session<'a> {
    pub(super) fn keyspace(&self) -> &'a Keyspace {
        self.shared
            .store
            .db(self.db)
            .expect("memcached-db validated at start")
    }

    /// Run `f` as a write through the write path (`persist::write`) in the mapped keyspace; the
    /// effects it returns are logged when the keyspace is. `grows`: the write may take memory, so
    /// the keyspace's and tenant's `memory-limit`s are enforced first (an `lru` keyspace evicts, a
    /// `none` one refuses with memcached's out-of-memory error).
    pub(super) fn write<R>(
        &mut self,
        grows: bool,
        f: impl FnOnce(&Keyspace, u64) -> (R, Effects),
    ) -> Result<R, WriteError> {
        let (shared, db, now_ms) = (self.shared, self.db, self.now_ms);
        let ks = shared
            .store
            .db(db)
            .expect("memcached-db validated at start");
        let mut txn = WriteTxn::begin(shared, self.client, Scope::Keyspace(db), now_ms, grows)?;
        let result = txn.apply(|client| {
            let (result, effects) = f(ks, now_ms);
            if effects_logged(client) {
                for effect in effects {
                    log_effect(client, db, effect.into_args());
                }
            }
            result
        });
        txn.commit()?;
        Ok(result)
    }

    /// Remove `key` (delete, and a `set` refused as too large); whether it was there.
    pub fn remove(&mut self, key: &Bytes) -> Result<bool, WriteError> {
        self.write(false, |ks, now| {
            let removed = ks.lock(key).remove(key, now).is_some();
            let effects = if removed {
                vec![Effect::Del(key.clone())]
            } else {
                vec![]
            };
            (removed, effects)
        })
    }

    pub(super) fn count_lookup(&self, hit: bool) {
        let c = if hit {
            &self.client.counters.hits
        } else {
            &self.client.counters.misses
        };
        crate::client::LocalCounters::bump(c);
    }

    /// Execute one command, appending its reply (if any) to `out`.
    pub fn execute(&mut self, command: Command, out: &mut BytesMut) -> Flow {
        crate::client::LocalCounters::bump(&self.client.counters.commands);
        // memcached's noreply silences every reply of the command, errors included.
        let noreply = matches!(
            command,
            Command::Store { noreply: true, .. }
                | Command::Delete { noreply: true, .. }
                | Command::Arith { noreply: true, .. }
                | Command::Touch { noreply: true, .. }
                | Command::FlushAll { noreply: true, .. }
                | Command::Verbosity { noreply: true }
        );
        let mark = out.len();
        let flow = self.run(command, out);
        if noreply {
            out.truncate(mark);
        }
        flow
    }

    /// One command to its protocol's handlers: the meta commands are in [`super::meta`], the
    /// text ones in [`super::text`].
    fn run(&mut self, command: Command, out: &mut BytesMut) -> Flow {
        // A Lua script past busy-reply-threshold may hold the store gate for as long as it runs
        // (see `command::scripting`): a command that would wait for it is refused, as RESP
        // commands get BUSY, so no worker thread waits for that script.
        // The admission is held until the command has finished (see `scripting::admit`).
        let _admitted = if matches!(
            command,
            Command::Quit | Command::Version | Command::Verbosity { .. } | Command::MetaNoop
        ) {
            None
        } else {
            match crate::command::scripting::admit() {
                Ok(admitted) => Some(admitted),
                Err(_) => return server_error(out, "SERVER_ERROR busy running a script"),
            }
        };
        match command {
            Command::MetaNoop => self.meta_noop(out),
            Command::MetaDebug { key, base64 } => {
                self.meta_debug(&key, base64, out);
                Flow::Continue
            }
            Command::MetaGet { key, flags } => self.meta_get(&key, &flags, out),
            Command::MetaSet { key, data, flags } => self.meta_set(&key, data, &flags, out),
            Command::MetaDelete { key, flags } => self.meta_delete(&key, &flags, out),
            Command::MetaArith { key, flags } => self.meta_arith(&key, &flags, out),
            text => self.run_text(text, out),
        }
    }

    /// The storage commands' common core (memcached's `do_store_item`).
    pub(super) fn store(&mut self, key: &Bytes, req: StoreReq) -> Result<StoreOutcome, WriteError> {
        self.counters.bump(Counter::CmdSet);
        let max_value = self.max_value;
        let stored = self.write(true, |ks, now| {
            let mut shard = ks.lock(key);
            let old = fetch(&mut shard, key, now, false);
            let exists_other_type = old.is_none() && shard.contains_live(key, now);
            let upgrade_to_cas =
                req.compare_cas.is_some() && matches!(req.mode, MetaMode::Set | MetaMode::Replace);
            // (value, flags, expiry, bits) to store, or the refusal.
            let plan: Result<(Bytes, u32, Option<u64>, u8), StoreOutcome> = match &old {
                Some(old) => {
                    let cas_match = req.compare_cas.map(|c| c == old.cas);
                    let stale_ok = req.allow_stale && req.compare_cas.is_some_and(|c| c < old.cas);
                    match req.mode {
                        MetaMode::Add => Err(StoreOutcome::NotStored),
                        _ if upgrade_to_cas => {
                            if cas_match == Some(true) {
                                Ok((
                                    Bytes::copy_from_slice(&req.data),
                                    req.client_flags,
                                    req.expiry.expires_at(now),
                                    0,
                                ))
                            } else if stale_ok {
                                // A late writer: keep the TTL, mark stale, keep a handed-out lease.
                                let bits = ItemMeta::STALE | (old.meta.bits & ItemMeta::WIN_SENT);
                                Ok((
                                    Bytes::copy_from_slice(&req.data),
                                    req.client_flags,
                                    old.expires_at,
                                    bits,
                                ))
                            } else {
                                Err(StoreOutcome::Exists)
                            }
                        }
                        MetaMode::Append | MetaMode::Prepend => {
                            if cas_match == Some(false) {
                                Err(StoreOutcome::Exists)
                            } else if old.value.len() + req.data.len() > max_value {
                                Err(StoreOutcome::NotStored)
                            } else {
                                let mut v =
                                    BytesMut::with_capacity(old.value.len() + req.data.len());
                                if req.mode == MetaMode::Append {
                                    v.put_slice(&old.value);
                                    v.put_slice(&req.data);
                                } else {
                                    v.put_slice(&req.data);
                                    v.put_slice(&old.value);
                                }
                                Ok((v.freeze(), old.meta.client_flags, old.expires_at, 0))
                            }
                        }
                        _ => Ok((
                            Bytes::copy_from_slice(&req.data),
                            req.client_flags,
                            req.expiry.expires_at(now),
                            0,
                        )),
                    }
                }
                None if exists_other_type => match req.mode {
                    // A hash or sorted set under the key: only a plain set replaces it.
                    MetaMode::Set if !upgrade_to_cas => Ok((
                        Bytes::copy_from_slice(&req.data),
                        req.client_flags,
                        req.expiry.expires_at(now),
                        0,
                    )),
                    _ if upgrade_to_cas => Err(StoreOutcome::Exists),
                    _ => Err(StoreOutcome::NotStored),
                },
                None => {
                    if upgrade_to_cas {
                        Err(StoreOutcome::NotFound)
                    } else {
                        match (req.mode, req.vivify) {
                            (MetaMode::Set | MetaMode::Add, _) => Ok((
                                Bytes::copy_from_slice(&req.data),
                                req.client_flags,
                                req.expiry.expires_at(now),
                                0,
                            )),
                            (MetaMode::Append | MetaMode::Prepend, Some(viv)) => Ok((
                                Bytes::copy_from_slice(&req.data),
                                req.client_flags,
                                viv.expires_at(now),
                                0,
                            )),
                            _ => Err(StoreOutcome::NotStored),
                        }
                    }
                }
            };
            match plan {
                Err(refused) => (refused, vec![]),
                Ok((value, flags, expires_at, bits)) => {
                    let size = value.len();
                    if expires_at.is_some_and(|t| t <= now) {
                        // Stored already expired (negative exptime): the key is gone.
                        let removed = shard.remove(key, now).is_some();
                        let effects = if removed {
                            vec![Effect::Del(key.clone())]
                        } else {
                            vec![]
                        };
                        return (StoreOutcome::Yes { cas: 0, size }, effects);
                    }
                    let meta = ItemMeta {
                        client_flags: flags,
                        bits,
                    };
                    shard.set_with_meta(key, Value::string(value.clone()), expires_at, meta, now);
                    let cas = if req.new_cas.is_some() {
                        shard.renew_version(key, req.new_cas, now).unwrap_or(0)
                    } else {
                        shard.last_version()
                    };
                    (
                        StoreOutcome::Yes { cas, size },
                        vec![store_effect(key, value, meta, expires_at)],
                    )
                }
            }
        })?;
        if req.compare_cas.is_some() {
            self.counters.bump(match stored {
                StoreOutcome::Yes { .. } => Counter::CasHits,
                StoreOutcome::Exists => Counter::CasBadval,
                _ => Counter::CasMisses,
            });
        }
        Ok(stored)
    }

    /// incr/decr and ma: Err is a SERVER_ERROR text.
    pub(super) fn arith(
        &mut self,
        key: &Bytes,
        incr: bool,
        delta: u64,
        compare_cas: Option<u64>,
        vivify: Option<(Expiry, u64)>,
        new_ttl: Option<Expiry>,
    ) -> Result<ArithResult, WriteError> {
        let result = self.write(true, |ks, now| {
            let mut shard = ks.lock(key);
            let Some(item) = fetch(&mut shard, key, now, false) else {
                if shard.contains_live(key, now) {
                    return (ArithResult::NonNumeric, vec![]);
                }
                let Some((expiry, initial)) = vivify else {
                    return (ArithResult::NotFound, vec![]);
                };
                let value = Bytes::from(initial.to_string());
                let expires_at = expiry.expires_at(now);
                let meta = ItemMeta {
                    ..ItemMeta::default()
                };
                shard.set_with_meta(key, Value::string(value.clone()), expires_at, meta, now);
                let cas = shard.last_version();
                return (
                    ArithResult::Done {
                        value: initial,
                        cas,
                        expires_at,
                        created: true,
                    },
                    vec![store_effect(key, value, meta, expires_at)],
                );
            };
            if compare_cas.is_some_and(|c| c != item.cas) {
                return (ArithResult::Exists, vec![]);
            }
            let Some(current) = parse_counter(&item.value) else {
                return (ArithResult::NonNumeric, vec![]);
            };
            let value = if incr {
                current.wrapping_add(delta)
            } else {
                current.saturating_sub(delta)
            };
            let text = Bytes::from(value.to_string());
            let expires_at = match new_ttl {
                Some(e) => e.expires_at(now),
                None => item.expires_at,
            };
            let meta = ItemMeta { ..item.meta };
            shard.set_with_meta(key, Value::string(text.clone()), expires_at, meta, now);
            let cas = shard.last_version();
            (
                ArithResult::Done {
                    value,
                    cas,
                    expires_at,
                    created: false,
                },
                vec![store_effect(key, text, meta, expires_at)],
            )
        })?;
        let (hits, misses) = if incr {
            (Counter::IncrHits, Counter::IncrMisses)
        } else {
            (Counter::DecrHits, Counter::DecrMisses)
        };
        match result {
            ArithResult::Done { .. } => self.counters.bump(hits),
            ArithResult::NotFound => self.counters.bump(misses),
            _ => {}
        }
        Ok(result)
    }
}

/// What incr/decr/ma did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ArithResult {
    Done {
        value: u64,
        cas: u64,
        expires_at: Option<u64>,
        created: bool,
    },
    NotFound,
    Exists,
    NonNumeric,
}

/// Change a live item's TTL under its shard lock; an already-due expiry deletes it.
/// Returns (found, effects).
pub(super) fn touch_locked(
    shard: &mut Shard,
    key: &Bytes,
    expiry: Expiry,
    now: u64,
) -> (bool, Effects) {
    if expiry == Expiry::Expired {
        let found = shard.remove(key, now).is_some();
        return (
            found,
            if found {
                vec![Effect::Del(key.clone())]
            } else {
                vec![]
            },
        );
    }
    let expires_at = expiry.expires_at(now);
    let found = shard.set_expiry(key, expires_at, now);
    (
        found,
        if found {
            vec![Effect::Expire(key.clone(), expires_at)]
        } else {
            vec![]
        },
    )
}

/// A `SERVER_ERROR …` line (the write was refused, or applied but not logged, which the text
/// says); the connection carries on.
pub(super) fn server_error(out: &mut BytesMut, line: &str) -> Flow {
    reply::line(out, line.as_bytes());
    Flow::Continue
}

/// Empty database `db` and log it as `FLUSHDB` (memcached's `flush_all`, scoped to the mapped
/// database only), through the write path.
pub fn flush_db(
    shared: &Shared,
    client: &mut ClientState,
    db: usize,
    now_ms: u64,
) -> Result<(), WriteError> {
    let mut txn = WriteTxn::begin(shared, client, Scope::Keyspace(db), now_ms, false)?;
    let old = txn.apply(|client| {
        let old = shared
            .store
            .db(db)
            .expect("memcached-db validated at start")
            .flush();
        log_effect(client, db, vec![Bytes::from_static(b"FLUSHDB")]);
        old
    });
    txn.commit()?;
    // Freed off the request path, as FLUSHDB frees.
    crate::command::server::dispose(old);
    Ok(())
}

#[cfg(test)]
pub(super) mod fixture {
    use super::*;
    use bytes::BytesMut;
    use gradus_memcache::{Decoded, Decoder, Limits};

    /// A server state with no log (every database `none`) and one memcached session on it.
    pub(crate) struct Fixture {
        pub(crate) shared: Shared,
        pub(crate) client: ClientState,
        pub(crate) counters: LocalCounters,
        pub(crate) now_ms: u64,
    }

    impl Fixture {
        pub(crate) fn new() -> Fixture {
            let mut config = crate::Config::embedded();
            config.durability.default = "none".into();
            let tenancy = crate::tenancy::Tenancy::build(&config, &[]).expect("default tenancy");
            let unspecified = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            let handle = std::sync::Arc::new(crate::client::ClientHandle::new(
                1,
                unspecified,
                unspecified,
            ));
            Fixture {
                shared: Shared::new(config, None, tenancy),
                client: ClientState::new(handle, true),
                counters: LocalCounters::default(),
                now_ms: 1_800_000_000_000,
            }
        }

        /// Run every request in `input`; return everything the session replied.
        pub(crate) fn run(&mut self, input: &[u8]) -> String {
            let mut decoder = Decoder::new(Limits::default());
            let mut buf = BytesMut::from(input);
            let mut out = BytesMut::new();
            while let Some(decoded) = decoder.decode(&mut buf).expect("valid input") {
                match decoded {
                    Decoded::Command(command) => {
                        let mut session = Session {
                            shared: &self.shared,
                            client: &mut self.client,
                            db: 0,
                            now_ms: self.now_ms,
                            counters: &mut self.counters,
                            max_value: 1024,
                        };
                        session.execute(command, &mut out);
                    }
                    Decoded::Reply { line, .. } => {
                        gradus_memcache::reply::line(&mut out, line.as_bytes())
                    }
                    Decoded::TooLarge { .. } => gradus_memcache::reply::line(
                        &mut out,
                        b"SERVER_ERROR object too large for cache",
                    ),
                }
            }
            String::from_utf8_lossy(&out).into_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::Fixture;

    #[test]
    fn storage_command_matrix() {
        let mut f = Fixture::new();
        assert_eq!(
            f.run(b"add k 1 0 1\r\na\r\nadd k 1 0 1\r\nb\r\n"),
            "STORED\r\nNOT_STORED\r\n"
        );
        assert_eq!(
            f.run(b"replace x 0 0 1\r\na\r\nappend x 0 0 1\r\na\r\n"),
            "NOT_STORED\r\nNOT_STORED\r\n"
        );
        assert_eq!(
            f.run(b"append k 9 0 2\r\n>>\r\nprepend k 9 0 2\r\n<<\r\n"),
            "STORED\r\nSTORED\r\n"
        );
        assert_eq!(f.run(b"get k\r\n"), "VALUE k 1 5\r\n<<a>>\r\nEND\r\n");
        assert_eq!(f.run(b"cas nope 0 0 1 7\r\na\r\n"), "NOT_FOUND\r\n");
        let cas = f
            .shared
            .store
            .db(0)
            .unwrap()
            .lock(b"k")
            .version_of(b"k", f.now_ms);
        let stale = format!("cas k 0 0 1 {}\r\nz\r\n", cas + 1);
        assert_eq!(f.run(stale.as_bytes()), "EXISTS\r\n");
        let fresh = format!("cas k 0 0 1 {cas}\r\nz\r\n");
        assert_eq!(f.run(fresh.as_bytes()), "STORED\r\n");
        // Append past the item size limit is refused; a negative exptime deletes.
        assert_eq!(
            f.run(&[&b"append k 0 0 1024\r\n"[..], &[b'x'; 1024], b"\r\n"].concat()),
            "NOT_STORED\r\n"
        );
        assert_eq!(
            f.run(b"set k 0 -1 1\r\nq\r\nget k\r\n"),
            "STORED\r\nEND\r\n"
        );
    }

    #[test]
    fn arithmetic_wraps_and_floors() {
        let mut f = Fixture::new();
        f.run(b"set n 3 0 20\r\n18446744073709551615\r\n");
        assert_eq!(f.run(b"incr n 2\r\ndecr n 5\r\n"), "1\r\n0\r\n");
        assert_eq!(
            f.run(b"get n\r\n"),
            "VALUE n 3 1\r\n0\r\nEND\r\n",
            "flags are kept"
        );
        assert_eq!(
            f.run(b"ma m N0 J7 v\r\nma m MD D10 v\r\n"),
            "VA 1\r\n7\r\nVA 1\r\n0\r\n"
        );
    }
}
