//! Stable-Rust fuzzing of the decoder for log records and snapshot items
//! (`gradus_server::persist::record`), bounded in time (env `GRADUS_FUZZ_SECS`, default 2;
//! `GRADUS_FUZZ_SEED` picks the run). Valid payloads of every kind — commands, plain and
//! compressed items of each value kind (strings, hashes, sorted sets, lists) — are mutated (bytes flipped, cut, inserted, lengths
//! the compressed flag and the kind changed) and decoded, and added as a later part of a split
//! value to a value of each kind. Checks: neither panics, an unmutated payload decodes to what
//! was encoded, a mutated one that still decodes re-encodes to a payload that decodes to the
//! same record (no half-read state leaks out), and one that decodes as a later part adds to an
//! empty value of its kind exactly what it decodes to.
//! The same decoder is the libFuzzer target `fuzz/fuzz_targets/snapshot_item.rs`.

use bytes::Bytes;
use gradus_server::persist::record::{
    add_parts, decode, encode_commands, encode_item, later_part_added_to_empty, reencode_item,
    LoggedCommand, Record,
};
use gradus_store::{HashValue, ItemMeta, ListValue, SetValue, Shard, Value, ZSetValue};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use std::time::{Duration, Instant};

/// A value of a random kind, compressible or not.
fn value(rng: &mut StdRng) -> Value {
    let piece = |rng: &mut StdRng| -> Vec<u8> {
        let len = rng.gen_range(0..300);
        if rng.gen_bool(0.5) {
            vec![b'a' + rng.gen_range(0..3u8); len]
        } else {
            let mut b = vec![0u8; len];
            rng.fill_bytes(&mut b);
            b
        }
    };
    match rng.gen_range(0..6) {
        0 => Value::string(piece(rng)),
        5 => {
            // Entries over nodes of 3, tombstones, a group with pending entries.
            use gradus_store::stream::{NewId, NodeLimits};
            let mut st = gradus_store::StreamValue::new();
            let limits = NodeLimits {
                max_bytes: 4096,
                max_entries: 3,
            };
            let n = rng.gen_range(1..20u64);
            for i in 1..=n {
                let fields = [Bytes::from(piece(rng)), Bytes::from(piece(rng))];
                st.add(
                    NewId::Exact(gradus_store::StreamId::new(i, 0)),
                    &fields,
                    0,
                    limits,
                )
                .expect("increasing IDs");
            }
            st.delete(gradus_store::StreamId::new(rng.gen_range(1..=n), 0));
            st.create_group(b"g", gradus_store::StreamId::ZERO, -1);
            let g = st.group_mut(b"g").expect("created");
            let alice = Bytes::from_static(b"alice");
            g.consumer(&alice, 1);
            g.assign(gradus_store::StreamId::new(n, 0), &alice, 2, 1);
            Value::Stream(st)
        }
        3 => Value::List(ListValue::from_items(
            (0..rng.gen_range(1..40)).map(|_| piece(rng)),
            gradus_store::ListLimit::REDIS_DEFAULT,
        )),
        4 => {
            // Integers (an intset), short strings (a listpack) or long ones (a hashtable).
            let mut s = SetValue::new();
            let style = rng.gen_range(0..3);
            for i in 0..rng.gen_range(1..40) {
                let member = match style {
                    0 => (rng.gen_range(-100_000i64..100_000) * (i + 1)).to_string(),
                    1 => format!("m{}", rng.gen_range(0..1000)),
                    _ => format!("{i}{}", "x".repeat(rng.gen_range(0..90))),
                };
                s.insert(member.as_bytes(), gradus_store::SetLimits::REDIS_DEFAULT);
            }
            Value::set(s)
        }
        1 => {
            let mut h = HashValue::new();
            for i in 0..rng.gen_range(1..20) {
                h.insert(
                    format!("f{i}").as_bytes(),
                    &piece(rng),
                    gradus_store::HashLimits::REDIS_DEFAULT,
                );
            }
            Value::hash(h)
        }
        _ => {
            let mut z = ZSetValue::new();
            for i in 0..rng.gen_range(1..20) {
                z.insert(
                    format!("m{i}").as_bytes(),
                    f64::from(rng.gen_range(-50..50)) / 4.0,
                    gradus_store::ZSetLimits::REDIS_DEFAULT,
                );
            }
            Value::zset(z)
        }
    }
}

/// A valid payload and the record it holds: a command record, or the one item of a key
/// (compressed or not; the values are far below the size that splits an item).
fn payload(rng: &mut StdRng) -> (Bytes, Record) {
    if rng.gen_bool(0.2) {
        let now_ms = rng.gen();
        let commands = vec![LoggedCommand {
            db: rng.gen_range(0..16),
            args: vec![
                Bytes::from("SET"),
                Bytes::from("k"),
                Bytes::from(vec![7u8; 40]),
            ],
        }];
        let record = Record::Commands {
            now_ms,
            commands: commands.clone(),
        };
        return (encode_commands(now_ms, &commands), record);
    }
    let mut shard = Shard::new();
    let meta = ItemMeta {
        client_flags: rng.gen_range(0..3),
        bits: if rng.gen_bool(0.2) {
            ItemMeta::STALE
        } else {
            0
        },
    };
    let ttl = rng.gen_bool(0.3).then(|| rng.gen_range(1..1u64 << 40));
    let value = value(rng);
    shard.set_with_meta(b"key", value.clone(), ttl, meta, 0);
    let entry = shard.get(b"key", 0).expect("just set");
    let db = rng.gen_range(0..16);
    let mut items = Vec::new();
    encode_item(db, b"key", entry.view(), rng.gen_bool(0.7), |i| {
        items.push(i)
    });
    assert_eq!(items.len(), 1);
    // Only strings carry memcached state.
    let meta = match value {
        Value::Str(_) => meta,
        _ => ItemMeta::default(),
    };
    let record = Record::Item {
        db,
        key: Bytes::from_static(b"key"),
        expires_at: ttl,
        value,
        meta,
        more: false,
    };
    (items.pop().expect("one item"), record)
}

/// An empty string, hash, sorted set, list and set: what later parts are added to.
fn empty_values() -> [Value; 6] {
    [
        Value::Stream(gradus_store::StreamValue::new()),
        Value::string(Bytes::new()),
        Value::hash(HashValue::new()),
        Value::zset(ZSetValue::new()),
        Value::List(ListValue::new()),
        Value::set(SetValue::new()),
    ]
}

/// The kind of a later part of a value of `kind` (string 0/3 → 4, hash 1 → 5, zset 2 → 6,
/// set 9 → 10), the compression bit kept.
fn later_part_kind(kind: u8) -> u8 {
    let more = match kind & 0x7f {
        7 => 8,
        9 => 10,
        11 => 12,
        k => 4 + k % 3,
    };
    (kind & 0x80) | more
}

fn mutate(rng: &mut StdRng, payload: &mut Vec<u8>) {
    for _ in 0..rng.gen_range(1..4) {
        if payload.is_empty() {
            payload.push(rng.gen());
            continue;
        }
        let at = rng.gen_range(0..payload.len());
        match rng.gen_range(0..7) {
            0 => payload[at] ^= 1 << rng.gen_range(0..8),
            1 => payload[at] = rng.gen(),
            2 => payload.truncate(at),
            3 => payload.insert(at, rng.gen()),
            // A length or count field set to something large or small.
            4 if at + 4 <= payload.len() => {
                let v: u32 = *[0, 1, 255, 1 << 16, u32::MAX]
                    .get(rng.gen_range(0..5))
                    .unwrap();
                payload[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
            // An item's kind byte (key "key": at 1+2+4+3+8) made a later part's, kind 4-6 or 10.
            5 if payload.len() > 18 => payload[18] = later_part_kind(payload[18]),
            // The compressed flag, on an item's kind byte.
            _ if payload.len() > 18 => payload[18] ^= 0x80,
            _ => payload[at] = !payload[at],
        }
    }
}

#[test]
fn mutated_records_and_items_never_panic_the_decoder() {
    let secs: f64 = std::env::var("GRADUS_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let seed: u64 = std::env::var("GRADUS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x7265_636f);
    let mut rng = StdRng::seed_from_u64(seed);
    let started = Instant::now();
    let (mut cases, mut still_valid, mut later_parts) = (0u64, 0u64, 0u64);
    while started.elapsed() < Duration::from_secs_f64(secs) || cases < 200 {
        cases += 1;
        let (payload, expected) = payload(&mut rng);
        assert_eq!(decode(&payload).expect("valid"), expected, "seed {seed}");
        let mut bytes = payload.to_vec();
        mutate(&mut rng, &mut bytes);
        let bytes = Bytes::from(bytes);
        // Read as a later part of a value of each kind: refused or added, never a panic.
        for mut value in empty_values() {
            let _ = add_parts(&mut value, 0, b"key", std::slice::from_ref(&bytes));
        }
        let Ok(record) = decode(&bytes) else {
            continue;
        };
        still_valid += 1;
        // A later part adds to an empty value of its kind exactly what it decodes to.
        if let Some(added) = later_part_added_to_empty(&bytes, &record) {
            later_parts += 1;
            let Record::Item { value, .. } = &record else {
                unreachable!("a later part is an item");
            };
            assert_eq!(&added.expect("it decoded"), value, "seed {seed}");
        }
        // What still decodes is a whole record: encoding it again gives the same record.
        if let [one] = &reencode_item(&record, true)[..] {
            assert_eq!(decode(one).expect("re-encoded"), record, "seed {seed}");
        }
    }
    eprintln!(
        "{cases} cases, {still_valid} mutated payloads still decoded, {later_parts} as later parts (seed {seed})"
    );
    assert!(
        later_parts > 0,
        "no mutated payload was a later part (seed {seed})"
    );
}
