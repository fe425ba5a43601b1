//! memcached's meta protocol: `mg`, `ms`, `md`, `ma`, `mn` and `me`, with their flags (CAS
//! compare and set, vivify-on-miss, stale items and the recache win that stampede protection
//! rests on, opaque tokens, base64 keys) and two-letter replies (`VA`, `HD`, `EN`, `NS`, …).
//!
//! Each command turns into a call of the shared storage core in [`super::session`] (store, arith,
//! fetch, touch, or a `Session::write` of its own for `mg` and `md`) and its outcome into a
//! reply with the flags the request asked for, in the order it asked.
//!
//! May import: `super::session` (the core), `super::stats`, `gradus-memcache`'s flag and reply
//! types, `gradus-store`'s entry types. Must not import `super::text` or `persist` (writes go
//! through `Session::write`).

use super::session::{
    fetch, server_error, store_effect, touch_locked, ArithResult, Effect, Effects, Flow, Item,
    Session, StoreOutcome, StoreReq,
};
use super::stats::Counter;
use super::{ttl_secs, Expiry};
use bytes::{BufMut, Bytes, BytesMut};
use gradus_memcache::reply;
use gradus_memcache::{MetaFlags, MetaMode};
use gradus_store::{ItemMeta, Keyspace, Value};

impl<'a> Session<'a> {
    pub(super) fn meta_noop(&mut self, out: &mut BytesMut) -> Flow {
        reply::line(out, b"MN");
        Flow::Continue
    }

    pub(super) fn meta_get(&mut self, key: &Bytes, f: &MetaFlags, out: &mut BytesMut) -> Flow {
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
                        bits: ItemMeta::WIN_SENT,
                        ..ItemMeta::default()
                    };
                    shard.set_with_meta(key, Value::string(Bytes::new()), expires_at, meta, now);
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
                        idle_s: 0,
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
                shard.update_meta(key, now, |m| m.bits |= ItemMeta::WIN_SENT);
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
                b'l' => reply::flag_num(out, b'l', item.idle_s),
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

    pub(super) fn meta_set(
        &mut self,
        key: &Bytes,
        data: Bytes,
        f: &MetaFlags,
        out: &mut BytesMut,
    ) -> Flow {
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

    pub(super) fn meta_delete(&mut self, key: &Bytes, f: &MetaFlags, out: &mut BytesMut) -> Flow {
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
            shard.set_with_meta(key, Value::string(value.clone()), expires_at, meta, now);
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

    pub(super) fn meta_arith(&mut self, key: &Bytes, f: &MetaFlags, out: &mut BytesMut) -> Flow {
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

    pub(super) fn meta_debug(&mut self, key: &Bytes, base64: bool, out: &mut BytesMut) {
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
            item.idle_s,
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

#[cfg(test)]
mod tests {
    use super::super::session::fixture::Fixture;

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
}
