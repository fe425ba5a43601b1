//! memcached's text protocol: `get`/`gets`/`gat`/`gats`, `set`/`add`/`replace`/`append`/
//! `prepend`/`cas`, `delete`, `incr`/`decr`, `touch`, `flush_all`, `version`, `verbosity`,
//! `stats` and `quit`, with memcached 1.6's replies (`STORED`, `NOT_FOUND`, `VALUE …`, …).
//!
//! Each command turns into a call of the shared storage core in [`super::session`] and its
//! outcome into a reply line; `noreply` is applied by [`Session::execute`].
//!
//! May import: `super::session` (the core), `super::stats`, `state`, `tenancy` (the `flush`
//! right), `gradus-memcache`'s command and reply types. Must not import `super::meta` or
//! `persist` (writes go through `Session::write`).

use super::session::{
    fetch, flush_db, server_error, touch_locked, ArithResult, Flow, Session, StoreOutcome, StoreReq,
};
use super::stats::Counter;
use super::{Expiry, MEMCACHED_COMPAT_VERSION};
use crate::state::Shared;
use bytes::{Bytes, BytesMut};
use gradus_memcache::reply;
use gradus_memcache::{Command, MetaMode, StoreMode};

impl<'a> Session<'a> {
    /// Run a text-protocol command (the meta commands never come here: see [`Session::execute`]).
    pub(super) fn run_text(&mut self, command: Command, out: &mut BytesMut) -> Flow {
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
            Command::Delete { key, noreply } => match self.remove(&key) {
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
            },
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
            Command::MetaNoop
            | Command::MetaDebug { .. }
            | Command::MetaGet { .. }
            | Command::MetaSet { .. }
            | Command::MetaDelete { .. }
            | Command::MetaArith { .. } => {
                unreachable!("Session::execute runs the meta commands in memcache::meta")
            }
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
                    .lock()
                    .insert(self.db, due);
                Ok(())
            }
            _ => {
                self.shared.memcache.flush_due_ms.lock().remove(&self.db);
                flush_db(self.shared, self.client, self.db, self.now_ms)
                    .map_err(|e| e.memcached_line())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::session::fixture::Fixture;

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
