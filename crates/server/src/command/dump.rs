//! DUMP and RESTORE in Redis' own serialization format (`gradus_proto::rdb`), so migration tools
//! can move keys between Redis and Gradus.
//!
//! DUMP writes what Redis 7.0 loads (RDB version 10); RESTORE takes what Redis 7.0 and 7.2 DUMP.
//! RESTORE is deterministic given its arguments (a relative TTL is counted from the clock the
//! write path logs with the command), so it is logged as itself.
//!
//! May import: `gradus_proto::rdb` (the codec), `gradus_store` (values), `args`.

use super::{cmd, flags, CommandSpec, Ctx, KEY1};
use crate::args::{is, parse_i64};
use crate::error::{CmdError, CmdResult};
use bytes::Bytes;
use gradus_proto::rdb::{self, RdbValue};
use gradus_proto::Frame;
use gradus_store::stream::{Consumer, Group, Nack};
use gradus_store::StreamValue;
use gradus_store::{
    HashLimits, HashValue, ListLimit, ListValue, SetLimits, SetValue, Value, ValueView, ZSetLimits,
    ZSetValue,
};

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("dump", 2, flags::READONLY, KEY1, "generic", "Returns a serialized representation of the value stored at a key.", dump),
    cmd("restore", -4, flags::WRITE | flags::DENYOOM, KEY1, "generic", "Creates a key from the serialized representation of a value.", restore).key_flags(&["OW update"]),
];

/// The value in the codec's terms (MIGRATE's payloads are made from it too).
pub(super) fn to_rdb(value: &Value) -> RdbValue {
    view_to_rdb(value.view())
}

/// [`to_rdb`] of a borrowed value (a snapshot's items: see `repl::primary::send_rdb`).
pub(crate) fn view_to_rdb(value: ValueView<'_>) -> RdbValue {
    match value {
        ValueView::Str(b) => RdbValue::Str(Bytes::copy_from_slice(b)),
        ValueView::Hash(h) => RdbValue::Hash(
            h.iter()
                .map(|(f, v)| (Bytes::copy_from_slice(f), Bytes::copy_from_slice(v)))
                .collect(),
        ),
        ValueView::ZSet(z) => RdbValue::ZSet(z.iter().map(|(m, s)| (m.to_bytes(), s)).collect()),
        ValueView::List(l) => RdbValue::List(l.iter().map(Bytes::copy_from_slice).collect()),
        ValueView::Set(s) => RdbValue::Set(s.iter().map(|m| m.to_bytes()).collect()),
        ValueView::Stream(st) => RdbValue::Stream(Box::new(stream_to_rdb(st))),
    }
}

fn pair(id: gradus_store::StreamId) -> rdb::StreamId {
    (id.ms, id.seq)
}

fn unpair((ms, seq): rdb::StreamId) -> gradus_store::StreamId {
    gradus_store::StreamId::new(ms, seq)
}

/// A stream in the codec's terms: its nodes as they are (tombstones included), metadata and
/// groups.
fn stream_to_rdb(st: &StreamValue) -> rdb::RdbStream {
    let own = Bytes::copy_from_slice;
    let meta = st.meta();
    rdb::RdbStream {
        nodes: st
            .nodes()
            .map(|n| rdb::RdbStreamNode {
                master_id: pair(n.master_id),
                master_fields: n.master_fields.iter().map(|f| own(f)).collect(),
                entries: n
                    .entries
                    .into_iter()
                    .map(|(id, deleted, fields)| rdb::RdbStreamEntry {
                        id: pair(id),
                        deleted,
                        fields: fields.into_iter().map(|(f, v)| (own(f), own(v))).collect(),
                    })
                    .collect(),
            })
            .collect(),
        length: meta.length,
        last_id: pair(meta.last_id),
        first_id: pair(meta.first_id),
        max_deleted_id: pair(meta.max_deleted_id),
        entries_added: meta.entries_added,
        groups: st
            .groups()
            .iter()
            .map(|(name, g)| rdb::RdbStreamGroup {
                name: name.clone(),
                last_id: pair(g.last_id),
                entries_read: g.entries_read,
                pending: g
                    .pel
                    .iter()
                    .map(|(id, n)| rdb::RdbPending {
                        id: pair(*id),
                        delivery_time: n.delivery_time,
                        delivery_count: n.delivery_count,
                    })
                    .collect(),
                consumers: g
                    .consumers
                    .iter()
                    .map(|(cname, c)| rdb::RdbConsumer {
                        name: cname.clone(),
                        seen_time: c.seen_time,
                        active_time: u64::try_from(c.active_time).ok(),
                        pending: c.pending.iter().map(|id| pair(*id)).collect(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// A stream from the codec's terms (the codec checked that every consumer's pending entry is
/// in its group's list).
fn stream_from_rdb(r: rdb::RdbStream) -> StreamValue {
    let own = |b: &Bytes| Bytes::copy_from_slice(b);
    let mut st = StreamValue::new();
    for node in &r.nodes {
        for (i, e) in node.entries.iter().enumerate() {
            let mut fields = Vec::with_capacity(e.fields.len() * 2);
            for (f, v) in &e.fields {
                fields.push(own(f));
                fields.push(own(v));
            }
            st.load_entry(i == 0, unpair(e.id), e.deleted, &fields);
        }
    }
    st.set_meta(
        unpair(r.last_id),
        unpair(r.first_id),
        unpair(r.max_deleted_id),
        r.entries_added,
    );
    for g in &r.groups {
        let mut group = Group::new(unpair(g.last_id), g.entries_read);
        // A payload from Redis before 7.2 (and Gradus' own DUMP, in that format) has no
        // active time: its seen time stands in, Redis 7.2's "best estimate" on load.
        for c in &g.consumers {
            let mut consumer = Consumer::new(c.seen_time);
            consumer.active_time = c.active_time.unwrap_or(c.seen_time) as i64;
            group.consumers.insert(own(&c.name), consumer);
        }
        for p in &g.pending {
            let owner = g
                .consumers
                .iter()
                .find(|c| c.pending.contains(&p.id))
                .map(|c| own(&c.name));
            if let Some(owner) = owner {
                group.pel.insert(
                    unpair(p.id),
                    Nack {
                        consumer: owner.clone(),
                        delivery_time: p.delivery_time,
                        delivery_count: p.delivery_count,
                    },
                );
                if let Some(c) = group.consumers.get_mut(&owner) {
                    c.pending.insert(unpair(p.id));
                }
            }
        }
        st.load_group(own(&g.name), group);
    }
    st
}

/// The live encoding limits a restored value is built within: whichever encoding the payload
/// had, a restored value is encoded as a fresh key written now would be (as Redis converts a
/// restored or loaded value by the current `*-max-listpack-*` settings).
#[derive(Debug, Clone, Copy)]
struct Limits {
    hash: HashLimits,
    set: SetLimits,
    zset: ZSetLimits,
    list: ListLimit,
}

impl Limits {
    fn live(ctx: &Ctx<'_>) -> Limits {
        Limits {
            hash: super::hashes::hash_limits(ctx),
            set: super::sets::set_limits(ctx),
            zset: super::zsets::zset_limits(ctx),
            list: super::lists::list_limit(ctx),
        }
    }
}

/// A stored value from the codec's (its bytes copied, so nothing pins the request buffer).
fn from_rdb(value: RdbValue, limits: Limits) -> Value {
    let own = |b: &Bytes| Bytes::copy_from_slice(b);
    match value {
        RdbValue::Str(b) => Value::string(own(&b)),
        RdbValue::List(items) => Value::List(ListValue::from_items(items.iter(), limits.list)),
        RdbValue::Set(members) => {
            let mut s = match members.first() {
                Some(first) => SetValue::sized_for(first, members.len(), limits.set),
                None => SetValue::new(),
            };
            for m in &members {
                s.insert(m, limits.set);
            }
            Value::set(s)
        }
        RdbValue::ZSet(pairs) => {
            // Packed if it fits the live limits, whichever encoding the payload had (Redis
            // converts a restored skiplist that fits, as it does a loaded one).
            let mut z = ZSetValue::sized_for(pairs.len(), 0, limits.zset);
            z.extend(pairs.iter().map(|(m, s)| (&m[..], *s)), limits.zset);
            Value::zset(z)
        }
        RdbValue::Hash(pairs) => {
            let mut h = HashValue::new();
            h.expect(pairs.len(), limits.hash);
            for (f, v) in &pairs {
                h.insert(f, v, limits.hash);
            }
            Value::hash(h)
        }
        RdbValue::Stream(st) => Value::Stream(stream_from_rdb(*st)),
    }
}

fn dump(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let now = ctx.now_ms;
    let value = {
        let mut shard = ctx.db().lock(&args[1]);
        shard.get(&args[1], now).map(|e| to_rdb(&e.value))
    };
    ctx.lookup(value.is_some());
    match value {
        None => Ok(Frame::Null),
        Some(v) => rdb::dump(&v)
            .map(Frame::Bulk)
            .map_err(|e| CmdError::err(format!("cannot serialize this value: {e}"))),
    }
}

/// RESTORE key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency].
fn restore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (mut replace, mut absttl, mut idle, mut freq) = (false, false, None, None);
    let mut i = 4;
    while i < args.len() {
        let more = args.get(i + 1);
        if is(&args[i], "replace") {
            replace = true;
        } else if is(&args[i], "absttl") {
            absttl = true;
        } else if is(&args[i], "idletime") && more.is_some() && freq.is_none() {
            match more.and_then(|m| parse_i64(m)) {
                Some(n) if n >= 0 => idle = Some(n as u64),
                Some(_) => return Err(CmdError::err("Invalid IDLETIME value, must be >= 0")),
                None => return Err(CmdError::NotInteger),
            }
            i += 1;
        } else if is(&args[i], "freq") && more.is_some() && idle.is_none() {
            match more.and_then(|m| parse_i64(m)) {
                Some(n) if (0..=255).contains(&n) => freq = Some(n as u8),
                Some(_) => {
                    return Err(CmdError::err("Invalid FREQ value, must be >= 0 and <= 255"))
                }
                None => return Err(CmdError::NotInteger),
            }
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    let ttl = parse_i64(&args[2]).ok_or(CmdError::NotInteger)?;
    if ttl < 0 {
        return Err(CmdError::err("Invalid TTL value, must be >= 0"));
    }
    let key = &args[1];
    let now = ctx.now_ms;
    if !replace && ctx.db().lock(key).contains_live(key, now) {
        return Err(CmdError::Other(
            "BUSYKEY Target key name already exists.".into(),
        ));
    }
    let value = rdb::restore(&args[3]).map_err(|e| {
        CmdError::err(if e.is_footer() {
            "DUMP payload version or checksum are wrong"
        } else {
            "Bad data format"
        })
    })?;
    let expires_at = match (ttl, absttl) {
        (0, _) => None,
        (t, true) => Some(t as u64),
        (t, false) => Some(now.saturating_add(t as u64)),
    };
    let limits = Limits::live(ctx);
    let mut shard = ctx.db().lock(key);
    if expires_at.is_some_and(|at| at <= now) {
        // Already expired: Redis deletes the key (with REPLACE) and creates nothing.
        let deleted = shard.remove(key, now).is_some();
        drop(shard);
        if deleted {
            ctx.notify(crate::notify::GENERIC, "del", key);
        }
        return Ok(Frame::ok());
    }
    // Redis deletes a replaced key and adds the value anew: fresh LRU/LFU data, then IDLETIME
    // under an LRU policy or FREQ under an LFU one (the other is ignored: `objectSetLRUOrLFU`).
    shard.remove(key, now);
    shard.set(key, from_rdb(value, limits), expires_at, now);
    if let Some(seconds) = idle {
        shard.set_idle(key, seconds.saturating_mul(1000), now);
    }
    if let Some(freq) = freq {
        shard.set_frequency(key, freq, now);
    }
    drop(shard);
    // Redis deletes a replaced key and adds it anew: `new` either way.
    let db = ctx.client.db;
    ctx.notify_new_in(db, key);
    ctx.notify(crate::notify::GENERIC, "restore", key);
    Ok(Frame::ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: Limits = Limits {
        hash: HashLimits::REDIS_DEFAULT,
        set: SetLimits::REDIS_DEFAULT,
        zset: ZSetLimits::REDIS_DEFAULT,
        list: ListLimit::REDIS_DEFAULT,
    };

    #[test]
    fn every_type_goes_through_the_codec_and_back() {
        let mut h = HashValue::new();
        h.insert(b"f", b"v", HashLimits::REDIS_DEFAULT);
        let mut z = ZSetValue::new();
        z.insert(b"m", 1.5, ZSetLimits::REDIS_DEFAULT);
        let mut s = SetValue::new();
        s.insert(b"7", SetLimits::REDIS_DEFAULT);
        s.insert(b"x", SetLimits::REDIS_DEFAULT);
        let values = [
            Value::string(Bytes::from_static(b"12345")),
            Value::hash(h),
            Value::zset(z),
            Value::List(ListValue::from_items(
                ["a", "b", ""],
                ListLimit::REDIS_DEFAULT,
            )),
            Value::set(s),
        ];
        for value in values {
            let payload = rdb::dump(&to_rdb(&value)).unwrap();
            let back = from_rdb(rdb::restore(&payload).unwrap(), DEFAULT);
            assert_eq!(back, value);
        }
    }

    /// Redis' test "Hash ziplist of various encodings": with `hash-max-listpack-entries 2`, a
    /// 9-field hash that was a listpack when dumped is restored as a hashtable.
    #[test]
    fn restore_encodes_by_the_live_limits() {
        let pairs = (0..9)
            .map(|i| (Bytes::from(format!("f{i}")), Bytes::from_static(b"v")))
            .collect();
        let payload = rdb::dump(&RdbValue::Hash(pairs)).unwrap();
        let two = Limits {
            hash: HashLimits {
                entries: 2,
                value: 64,
            },
            ..DEFAULT
        };
        let packed = from_rdb(rdb::restore(&payload).unwrap(), DEFAULT);
        assert_eq!(packed.encoding(), "listpack");
        let restored = from_rdb(rdb::restore(&payload).unwrap(), two);
        assert_eq!(restored.encoding(), "hashtable");
        assert_eq!(restored, packed);
        let list = RdbValue::List((0..5).map(|i| Bytes::from(format!("{i}"))).collect());
        let payload = rdb::dump(&list).unwrap();
        let four = Limits {
            list: ListLimit::from_fill(4),
            ..DEFAULT
        };
        let restored = from_rdb(rdb::restore(&payload).unwrap(), four);
        assert_eq!(restored.encoding(), "quicklist");
    }
}
