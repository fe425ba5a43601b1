//! Running memcached commands against the mapped keyspace, with memcached 1.6's semantics.
//!
//! Reads take a shared hold of the store gate and one shard lock. Writes go the way RESP writes
//! do (see `dispatch`): the degree of the database, then the gate (shared) and — when the
//! database is logged — the write-order lock, the change under the shard lock, and the change's
//! *effect* appended to the log before the locks are released (see [`super::records`]). A
//! `strict` write's reply is held back by the connection until the log is durable.
//!
//! CAS values are entry versions, so any write — over RESP too — changes an item's CAS.

use super::records::{del_args, expiry_args, mcstore_args};

use super::stats::{Counter, LocalCounters};
use super::{ttl_secs, Expiry, MEMCACHED_COMPAT_VERSION};
use crate::client::ClientState;
use crate::persist::write::{effects_logged, log_effect, Scope, WriteError, WriteTxn};
use crate::state::Shared;
use bytes::{BufMut, Bytes, BytesMut};
use gradus_memcache::reply;
use gradus_memcache::{Command, MetaFlags, MetaMode, StoreMode};
use gradus_store::{ItemMeta, Keyspace, Shard, Value};
use std::sync::atomic::Ordering;

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
enum StoreOutcome {
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
struct StoreReq {
    mode: MetaMode,
    compare_cas: Option<u64>,
    /// ms `I`: a CAS lower than the item's is accepted, and the item marked stale.
    allow_stale: bool,
    new_cas: Option<u64>,
    client_flags: u32,
    expiry: Expiry,
    /// ms `N` in append/prepend mode: create on a miss with this expiry.
    vivify: Option<Expiry>,
    data: Bytes,
}

/// A live string item as a command sees it (copied out of the shard: a `Bytes` clone).
struct Item {
    value: Bytes,
    cas: u64,
    expires_at: Option<u64>,
    meta: ItemMeta,
}

/// The live *string* entry for `key` (another type is a miss for memcached), marking it fetched
/// when `bump`. Returns the meta state from before this read.
fn fetch(shard: &mut Shard, key: &[u8], now_ms: u64, bump: bool) -> Option<Item> {
    let (entry, before) = shard.fetch(key, now_ms, bump)?;
    match &entry.value {
        Value::Str(v) => Some(Item {
            value: v.clone(),
            cas: entry.version(),
            expires_at: entry.expires_at(),
            meta: before,
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
enum Effect {
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

fn store_effect(key: &Bytes, value: Bytes, meta: ItemMeta, expires_at: Option<u64>) -> Effect {
    Effect::Store {
        key: key.clone(),
        value,
        meta,
        expires_at,
    }
}

type Effects = Vec<Effect>;

impl<'a> Session<'a> {
    fn keyspace(&self) -> &'a Keyspace {
        self.shared
            .store
            .db(self.db)
            .expect("memcached-db validated at start")
    }

    /// Run `f` as a write through the write path (`persist::write`) in the mapped keyspace; the
    /// effects it returns are logged when the keyspace is. `grows`: the write may take memory, so
    /// the keyspace's and tenant's `memory-limit`s are enforced first (an `lru` keyspace evicts, a
    /// `none` one refuses with memcached's out-of-memory error).
    fn write<R>(
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

    fn count_lookup(&self, hit: bool) {
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

    fn run(&mut self, command: Command, out: &mut BytesMut) -> Flow {
        match command {
            Command::Get {
                keys,
                with_cas,
                touch,
            } => self.get(&keys, with_cas, touch, out),
            Command::Store {
                mode,
                key,
                flags,
                exptime,
                cas,
                data,
                noreply,
            } => {
                let req = StoreReq {
                    mode: match mode {
                        StoreMode::Set | StoreMode::Cas => MetaMode::Set,
                        StoreMode::Add => MetaMode::Add,
                        StoreMode::Replace => MetaMode::Replace,
                        StoreMode::Append => MetaMode::Append,
                        StoreMode::Prepend => MetaMode::Prepend,
                    },
                    compare_cas: (mode == StoreMode::Cas).then_some(cas),
                    allow_stale: false,
                    new_cas: None,
                    client_flags: flags,
                    expiry: Expiry::from_exptime(exptime, self.now_ms),
                    vivify: None,
                    data,
                };
                let text: &[u8] = match self.store(&key, req) {
                    Ok(StoreOutcome::Yes { .. }) => b"STORED",
                    Ok(StoreOutcome::NotStored) => b"NOT_STORED",
                    Ok(StoreOutcome::Exists) => b"EXISTS",
                    Ok(StoreOutcome::NotFound) => b"NOT_FOUND",
                    Err(e) => return server_error(out, &e.memcached_line()),
                };
                if !noreply {
                    reply::line(out, text);
                }
            }
            Command::Delete { key, noreply } => {
                let r = self.write(false, |ks, now| {
                    let removed = ks.lock(&key).remove(&key, now).is_some();
                    (
                        removed,
                        if removed {
                            vec![Effect::Del(key.clone())]
                        } else {
                            vec![]
                        },
                    )
                });
                match r {
                    Ok(found) => {
                        self.counters.bump(if found {
                            Counter::DeleteHits
                        } else {
                            Counter::DeleteMisses
                        });
                        if !noreply {
                            reply::line(out, if found { &b"DELETED"[..] } else { b"NOT_FOUND" });
                        }
                    }
                    Err(e) => return server_error(out, &e.memcached_line()),
                }
            }
            Command::Arith {
                key,
                incr,
                delta,
                noreply,
            } => match self.arith(&key, incr, delta, None, None, None) {
                Ok(ArithResult::Done { value, .. }) => {
                    if !noreply {
                        reply::line(out, itoa::Buffer::new().format(value).as_bytes());
                    }
                }
                Ok(ArithResult::NotFound) => {
                    if !noreply {
                        reply::line(out, b"NOT_FOUND");
                    }
                }
                Ok(ArithResult::Exists) => reply::line(out, b"EXISTS"),
                Ok(ArithResult::NonNumeric) => reply::line(
                    out,
                    b"CLIENT_ERROR cannot increment or decrement non-numeric value",
                ),
                Err(e) => return server_error(out, &e.memcached_line()),
            },
            Command::Touch {
                key,
                exptime,
                noreply,
            } => {
                self.counters.bump(Counter::CmdTouch);
                let expiry = Expiry::from_exptime(exptime, self.now_ms);
                match self.write(false, |ks, now| {
                    touch_locked(&mut ks.lock(&key), &key, expiry, now)
                }) {
                    Ok(found) => {
                        self.counters.bump(if found {
                            Counter::TouchHits
                        } else {
                            Counter::TouchMisses
                        });
                        if !noreply {
                            reply::line(out, if found { &b"TOUCHED"[..] } else { b"NOT_FOUND" });
                        }
                    }
                    Err(e) => return server_error(out, &e.memcached_line()),
                }
            }
            Command::FlushAll { delay, noreply } => {
                self.counters.bump(Counter::CmdFlush);
                if let Err(line) = self.flush_all(delay) {
                    return server_error(out, &line);
                }
                if !noreply {
                    reply::line(out, b"OK");
                }
            }
            Command::Version => reply::line(
                out,
                format!("VERSION {MEMCACHED_COMPAT_VERSION}").as_bytes(),
            ),
            Command::Verbosity { noreply } => {
                if !noreply {
                    reply::line(out, b"OK");
                }
            }
            Command::Stats { args } => {
                self.shared.memcache.absorb(self.counters);
                if !super::stats::write_stats(self.shared, self.db, &args, self.now_ms, out) {
                    reply::line(out, b"ERROR");
                }
            }
            Command::Quit => return Flow::Close,
            Command::MetaNoop => reply::line(out, b"MN"),
            Command::MetaDebug { key, base64 } => self.meta_debug(&key, base64, out),
            Command::MetaGet { key, flags } => return self.meta_get(&key, &flags, out),
            Command::MetaSet { key, data, flags } => return self.meta_set(&key, data, &flags, out),
            Command::MetaDelete { key, flags } => return self.meta_delete(&key, &flags, out),
            Command::MetaArith { key, flags } => return self.meta_arith(&key, &flags, out),
        }
        Flow::Continue
    }

    /// get / gets / gat / gats.
    fn get(&mut self, keys: &[Bytes], with_cas: bool, touch: Option<i64>, out: &mut BytesMut) {
        let now = self.now_ms;
        match touch {
            None => {
                let shared: &'a Shared = self.shared;
                let _gate = shared.store.shared(self.client.id);
                let ks = self.keyspace();
                for key in keys {
                    self.counters.bump(Counter::CmdGet);
                    let item = fetch(&mut ks.lock(key), key, now, true);
                    self.count_lookup(item.is_some());
                    match item {
                        Some(item) => {
                            self.counters.bump(Counter::GetHits);
                            reply::value(
                                out,
                                key,
                                item.meta.client_flags,
                                &item.value,
                                with_cas.then_some(item.cas),
                            );
                        }
                        None => self.counters.bump(Counter::GetMisses),
                    }
                }
            }
            Some(exptime) => {
                let expiry = Expiry::from_exptime(exptime, now);
                let found = self.write(false, |ks, now| {
                    let mut found = Vec::with_capacity(keys.len());
                    let mut effects = Vec::new();
                    for key in keys {
                        let mut shard = ks.lock(key);
                        let Some(item) = fetch(&mut shard, key, now, true) else {
                            found.push(None);
                            continue;
                        };
                        let (_, mut e) = touch_locked(&mut shard, key, expiry, now);
                        effects.append(&mut e);
                        // Touching changes the CAS, as in memcached (unless it deleted the item).
                        let cas = if expiry == Expiry::Expired {
                            item.cas
                        } else {
                            shard.last_version()
                        };
                        found.push(Some((item, cas)));
                    }
                    (found, effects)
                });
                let found = match found {
                    Ok(f) => f,
                    Err(e) => {
                        server_error(out, &e.memcached_line());
                        return;
                    }
                };
                for (key, item) in keys.iter().zip(found) {
                    self.counters.bump(Counter::CmdTouch);
                    self.counters.bump(Counter::CmdGet);
                    self.count_lookup(item.is_some());
                    match item {
                        // An already-expired touch deletes the item: gat still returns it once.
                        Some((item, cas)) => {
                            self.counters.bump(Counter::TouchHits);
                            self.counters.bump(Counter::GetHits);
                            reply::value(
                                out,
                                key,
                                item.meta.client_flags,
                                &item.value,
                                with_cas.then_some(cas),
                            );
                        }
                        None => {
                            self.counters.bump(Counter::TouchMisses);
                            self.counters.bump(Counter::GetMisses);
                        }
                    }
                }
            }
        }
        reply::line(out, b"END");
    }

    /// The storage commands' common core (memcached's `do_store_item`).
    fn store(&mut self, key: &Bytes, req: StoreReq) -> Result<StoreOutcome, WriteError> {
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
                        last_access_s: (now / 1000) as u32,
                        bits,
                    };
                    shard.set_with_meta(key, Value::Str(value.clone()), expires_at, meta, now);
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
    fn arith(
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
                    last_access_s: (now / 1000) as u32,
                    ..ItemMeta::default()
                };
                shard.set_with_meta(key, Value::Str(value.clone()), expires_at, meta, now);
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
            let meta = ItemMeta {
                last_access_s: (now / 1000) as u32,
                ..item.meta
            };
            shard.set_with_meta(key, Value::Str(text.clone()), expires_at, meta, now);
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

    /// flush_all: now, or after `delay` seconds (memcached exptime rules for the delay).
    /// Err: the `SERVER_ERROR` line.
    fn flush_all(&mut self, delay: i64) -> Result<(), String> {
        if !self.client.perms.contains(crate::tenancy::Perms::FLUSH) {
            let refusal = crate::tenancy::no_perm(&self.client.user, "flush_all");
            return Err(format!("SERVER_ERROR {refusal}"));
        }
        match Expiry::from_exptime(delay, self.now_ms) {
            Expiry::At(due) => {
                self.shared
                    .memcache
                    .flush_due_ms
                    .store(due, Ordering::Relaxed);
                Ok(())
            }
            _ => {
                self.shared
                    .memcache
                    .flush_due_ms
                    .store(0, Ordering::Relaxed);
                flush_db(self.shared, self.client, self.db, self.now_ms)
                    .map_err(|e| e.memcached_line())
            }
        }
    }

    fn meta_get(&mut self, key: &Bytes, f: &MetaFlags, out: &mut BytesMut) -> Flow {
        let now = self.now_ms;
        self.counters.bump(Counter::CmdGet);
        let ttl = f.ttl.map(|t| Expiry::from_exptime(t, now));
        let vivify = f.vivify.map(|t| Expiry::from_exptime(t, now));
        let recache_at = f
            .recache
            .map(|t| Expiry::from_exptime(t, now).expires_at(now));
        // What happened under the shard lock: the item (with its state before this request),
        // whether it was created now, whether this request won the recache right.
        let run = |ks: &Keyspace, now: u64| -> (Option<(Item, bool, bool)>, Effects) {
            let mut shard = ks.lock(key);
            let mut effects = Vec::new();
            let mut created = false;
            let mut item = match fetch(&mut shard, key, now, !f.no_bump) {
                Some(item) => item,
                None => {
                    let Some(viv) = vivify else {
                        return (None, effects);
                    };
                    if shard.contains_live(key, now) {
                        return (None, effects); // another type: not ours to vivify
                    }
                    // A 0-byte stub; its lease is handed to this request below.
                    let expires_at = viv.expires_at(now);
                    let meta = ItemMeta {
                        last_access_s: (now / 1000) as u32,
                        bits: ItemMeta::WIN_SENT,
                        ..ItemMeta::default()
                    };
                    shard.set_with_meta(key, Value::Str(Bytes::new()), expires_at, meta, now);
                    let cas = match f.new_cas {
                        Some(_) => shard.renew_version(key, f.new_cas, now).unwrap_or(0),
                        None => shard.last_version(),
                    };
                    effects.push(store_effect(key, Bytes::new(), meta, expires_at));
                    created = true;
                    Item {
                        value: Bytes::new(),
                        cas,
                        expires_at,
                        meta: ItemMeta { bits: 0, ..meta },
                    }
                }
            };
            if let (Some(ttl), false) = (ttl, created) {
                let (_, mut e) = touch_locked(&mut shard, key, ttl, now);
                effects.append(&mut e);
                item.expires_at = ttl.expires_at(now);
            }
            let mut won = created;
            if let Some(at) = recache_at {
                if !item.meta.has(ItemMeta::WIN_SENT)
                    && !created
                    && item.expires_at.is_some_and(|e| at.is_some_and(|at| e < at))
                {
                    won = true;
                }
            }
            if item.meta.has(ItemMeta::STALE) && !item.meta.has(ItemMeta::WIN_SENT) {
                won = true;
            }
            if won && !created {
                if let Some(m) = shard.meta_mut(key, now) {
                    m.bits |= ItemMeta::WIN_SENT;
                }
            }
            (Some((item, created, won)), effects)
        };
        let found = if ttl.is_some() || vivify.is_some() {
            match self.write(vivify.is_some(), run) {
                Ok(found) => found,
                Err(e) => return server_error(out, &e.memcached_line()),
            }
        } else {
            let _gate = self.shared.store.shared(self.client.id);
            run(self.keyspace(), now).0
        };
        self.count_lookup(found.is_some());
        let Some((item, _created, won)) = found else {
            self.counters.bump(Counter::GetMisses);
            if !f.quiet {
                out.put_slice(b"EN");
                opaque_and_key(out, f, key);
                out.put_slice(b"\r\n");
            }
            return Flow::Continue;
        };
        self.counters.bump(Counter::GetHits);
        let send_value = f.value && f.compare_cas != Some(item.cas);
        if send_value {
            out.put_slice(b"VA ");
            out.put_slice(itoa::Buffer::new().format(item.value.len()).as_bytes());
        } else {
            out.put_slice(b"HD");
        }
        for &code in &f.order {
            match code {
                b's' => reply::flag_num(out, b's', item.value.len()),
                b't' => reply::flag_num(out, b't', ttl_secs(item.expires_at, now)),
                b'c' => reply::flag_num(out, b'c', item.cas),
                b'f' => reply::flag_num(out, b'f', item.meta.client_flags),
                b'l' => reply::flag_num(
                    out,
                    b'l',
                    (now / 1000).saturating_sub(u64::from(item.meta.last_access_s)),
                ),
                b'h' => reply::flag_num(out, b'h', u8::from(item.meta.has(ItemMeta::FETCHED))),
                b'O' => reply::flag_bytes(out, b'O', f.opaque.as_deref().unwrap_or_default()),
                b'k' => reply::flag_key(out, key, f.base64),
                _ => {}
            }
        }
        if item.meta.has(ItemMeta::WIN_SENT) {
            out.put_slice(b" Z");
        }
        if item.meta.has(ItemMeta::STALE) {
            out.put_slice(b" X");
        }
        if won {
            out.put_slice(b" W");
        }
        out.put_slice(b"\r\n");
        if send_value {
            out.put_slice(&item.value);
            out.put_slice(b"\r\n");
        }
        Flow::Continue
    }

    fn meta_set(&mut self, key: &Bytes, data: Bytes, f: &MetaFlags, out: &mut BytesMut) -> Flow {
        let now = self.now_ms;
        let mode = f.set_mode().unwrap_or(MetaMode::Set);
        let req = StoreReq {
            mode,
            compare_cas: f.compare_cas,
            allow_stale: f.invalidate,
            new_cas: f.new_cas,
            client_flags: f.client_flags.unwrap_or(0),
            expiry: f
                .ttl
                .map_or(Expiry::Never, |t| Expiry::from_exptime(t, now)),
            vivify: f.vivify.map(|t| Expiry::from_exptime(t, now)),
            data,
        };
        let stored = match self.store(key, req) {
            Ok(s) => s,
            Err(e) => return server_error(out, &e.memcached_line()),
        };
        let code: &[u8] = match stored {
            StoreOutcome::Yes { .. } if f.quiet => return Flow::Continue,
            StoreOutcome::Yes { .. } => b"HD",
            StoreOutcome::NotStored => b"NS",
            StoreOutcome::Exists => b"EX",
            StoreOutcome::NotFound => b"NF",
        };
        out.put_slice(code);
        for &c in &f.order {
            match c {
                b'O' => reply::flag_bytes(out, b'O', f.opaque.as_deref().unwrap_or_default()),
                b'k' => reply::flag_key(out, key, f.base64),
                b'c' => reply::flag_num(
                    out,
                    b'c',
                    match stored {
                        StoreOutcome::Yes { cas, .. } => cas,
                        _ => 0,
                    },
                ),
                b's' => {
                    if let StoreOutcome::Yes { size, .. } = stored {
                        reply::flag_num(out, b's', size)
                    }
                }
                _ => {}
            }
        }
        out.put_slice(b"\r\n");
        Flow::Continue
    }

    fn meta_delete(&mut self, key: &Bytes, f: &MetaFlags, out: &mut BytesMut) -> Flow {
        let ttl = f.ttl.map(|t| Expiry::from_exptime(t, self.now_ms));
        let result = self.write(false, |ks, now| {
            let mut shard = ks.lock(key);
            let Some(item) = fetch(&mut shard, key, now, false) else {
                if shard.contains_live(key, now) && f.compare_cas.is_none() && !f.invalidate {
                    shard.remove(key, now);
                    return (b"HD", vec![Effect::Del(key.clone())]);
                }
                return (b"NF", vec![]);
            };
            if f.compare_cas.is_some_and(|c| c != item.cas) {
                return (b"EX", vec![]);
            }
            if !f.invalidate && !f.remove_value {
                shard.remove(key, now);
                return (b"HD", vec![Effect::Del(key.clone())]);
            }
            let (value, mut meta, mut expires_at) = if f.remove_value {
                let meta = ItemMeta {
                    client_flags: f.client_flags.unwrap_or(0),
                    last_access_s: (now / 1000) as u32,
                    bits: 0,
                };
                (Bytes::new(), meta, ttl.and_then(|t| t.expires_at(now)))
            } else {
                (item.value.clone(), item.meta, item.expires_at)
            };
            if f.invalidate {
                // Mark stale and let the next reader win the recache; the CAS moves on.
                meta.bits = (meta.bits | ItemMeta::STALE) & !ItemMeta::WIN_SENT;
                if let Some(t) = ttl {
                    expires_at = t.expires_at(now);
                }
            }
            shard.set_with_meta(key, Value::Str(value.clone()), expires_at, meta, now);
            if f.new_cas.is_some() {
                shard.renew_version(key, f.new_cas, now);
            }
            (b"HD", vec![store_effect(key, value, meta, expires_at)])
        });
        let code: &[u8; 2] = match result {
            Ok(c) => c,
            Err(e) => return server_error(out, &e.memcached_line()),
        };
        self.counters.bump(if code == b"HD" {
            Counter::DeleteHits
        } else {
            Counter::DeleteMisses
        });
        if code == b"HD" && f.quiet {
            return Flow::Continue;
        }
        out.put_slice(code);
        opaque_and_key(out, f, key);
        out.put_slice(b"\r\n");
        Flow::Continue
    }

    fn meta_arith(&mut self, key: &Bytes, f: &MetaFlags, out: &mut BytesMut) -> Flow {
        let now = self.now_ms;
        let incr = match f.arith_mode() {
            Ok(MetaMode::Decr) => false,
            Ok(_) => true,
            Err(line) => {
                reply::line(out, line.as_bytes());
                return Flow::Continue;
            }
        };
        let vivify = f
            .vivify
            .map(|t| (Expiry::from_exptime(t, now), f.initial.unwrap_or(0)));
        let ttl = f.ttl.map(|t| Expiry::from_exptime(t, now));
        let result = self.arith(key, incr, f.delta.unwrap_or(1), f.compare_cas, vivify, ttl);
        match result {
            Err(e) => server_error(out, &e.memcached_line()),
            Ok(ArithResult::NonNumeric) => {
                reply::line(
                    out,
                    b"CLIENT_ERROR cannot increment or decrement non-numeric value",
                );
                Flow::Continue
            }
            Ok(ArithResult::NotFound | ArithResult::Exists) => {
                let code: &[u8] = if matches!(result, Ok(ArithResult::NotFound)) {
                    b"NF"
                } else {
                    b"EX"
                };
                out.put_slice(code);
                opaque_and_key(out, f, key);
                out.put_slice(b"\r\n");
                Flow::Continue
            }
            Ok(ArithResult::Done {
                value,
                cas,
                expires_at,
                ..
            }) => {
                if f.quiet {
                    return Flow::Continue;
                }
                let mut num = itoa::Buffer::new();
                let text = num.format(value);
                if f.value {
                    out.put_slice(b"VA ");
                    out.put_slice(itoa::Buffer::new().format(text.len()).as_bytes());
                } else {
                    out.put_slice(b"HD");
                }
                for &c in &f.order {
                    match c {
                        b'c' => reply::flag_num(out, b'c', cas),
                        b't' => reply::flag_num(out, b't', ttl_secs(expires_at, now)),
                        b'O' => {
                            reply::flag_bytes(out, b'O', f.opaque.as_deref().unwrap_or_default())
                        }
                        b'k' => reply::flag_key(out, key, f.base64),
                        _ => {}
                    }
                }
                out.put_slice(b"\r\n");
                if f.value {
                    out.put_slice(text.as_bytes());
                    out.put_slice(b"\r\n");
                }
                Flow::Continue
            }
        }
    }

    fn meta_debug(&mut self, key: &Bytes, base64: bool, out: &mut BytesMut) {
        let now = self.now_ms;
        let item = {
            let _gate = self.shared.store.shared(self.client.id);
            fetch(&mut self.keyspace().lock(key), key, now, false)
        };
        let Some(item) = item else {
            reply::line(out, b"EN");
            return;
        };
        out.put_slice(b"ME ");
        if base64 {
            let mut enc = Vec::new();
            gradus_memcache::base64::encode_into(key, &mut enc);
            out.put_slice(&enc);
        } else {
            out.put_slice(key);
        }
        let line = format!(
            " exp={} la={} cas={} fetch={} cls=1 size={}\r\n",
            ttl_secs(item.expires_at, now),
            (now / 1000).saturating_sub(u64::from(item.meta.last_access_s)),
            item.cas,
            if item.meta.has(ItemMeta::FETCHED) {
                "yes"
            } else {
                "no"
            },
            key.len() + item.value.len() + 48,
        );
        out.put_slice(line.as_bytes());
    }
}

/// What incr/decr/ma did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArithResult {
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
fn touch_locked(shard: &mut Shard, key: &Bytes, expiry: Expiry, now: u64) -> (bool, Effects) {
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

/// ` O<opaque>` and ` k<key>` in request order, for replies that carry nothing else.
fn opaque_and_key(out: &mut BytesMut, f: &MetaFlags, key: &[u8]) {
    for &c in &f.order {
        match c {
            b'O' => reply::flag_bytes(out, b'O', f.opaque.as_deref().unwrap_or_default()),
            b'k' => reply::flag_key(out, key, f.base64),
            _ => {}
        }
    }
}

/// A `SERVER_ERROR …` line (the write was refused, or applied but not logged, which the text
/// says); the connection carries on.
fn server_error(out: &mut BytesMut, line: &str) -> Flow {
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
mod tests {
    use super::*;
    use bytes::BytesMut;
    use gradus_memcache::{Decoded, Decoder, Limits};

    /// A server state with no log (every database `none`) and one memcached session on it.
    struct Fixture {
        shared: Shared,
        client: ClientState,
        counters: LocalCounters,
        now_ms: u64,
    }

    impl Fixture {
        fn new() -> Fixture {
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
        fn run(&mut self, input: &[u8]) -> String {
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
                }
            }
            String::from_utf8_lossy(&out).into_owned()
        }
    }

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

    #[test]
    fn vivify_win_then_stale_win() {
        let mut f = Fixture::new();
        assert_eq!(f.run(b"mg k v N30 t\r\n"), "VA 0 t30 W\r\n\r\n");
        assert_eq!(f.run(b"mg k v N30 t\r\n"), "VA 0 t30 Z\r\n\r\n");
        assert_eq!(
            f.run(b"ms k 2 T60\r\nhi\r\nmg k v\r\n"),
            "HD\r\nVA 2\r\nhi\r\n"
        );
        assert_eq!(
            f.run(b"md k I\r\nmg k v\r\nmg k v\r\n"),
            "HD\r\nVA 2 X W\r\nhi\r\nVA 2 Z X\r\nhi\r\n"
        );
        f.now_ms += 61_000;
        assert_eq!(f.run(b"mg k v\r\n"), "EN\r\n", "expired");
    }

    #[test]
    fn stats_count_hits_and_misses() {
        let mut f = Fixture::new();
        f.run(b"set a 0 0 1\r\n1\r\nget a b\r\n");
        f.shared.memcache.absorb(&mut f.counters);
        let stats = f.run(b"stats\r\n");
        assert!(
            stats.contains("STAT get_hits 1\r\n") && stats.contains("STAT get_misses 1\r\n"),
            "{stats}"
        );
        assert!(stats.ends_with("END\r\n"));
    }
}
