//! libFuzzer target for the decoder of log records and snapshot items
//! (`gradus_server::persist::record::decode`), compressed items included. Checks: no panic, and a
//! payload that decodes to an item re-encodes (compressed or not) to one that decodes the same.
//! Run with `cargo +nightly fuzz run snapshot_item`; the stable, time-bounded loop with mutated
//! valid payloads is `crates/server/tests/fuzz_record.rs`.
#![no_main]

use bytes::Bytes;
use gradus_server::persist::record::{decode, encode_item, Record};
use gradus_store::Shard;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(record) = decode(&Bytes::copy_from_slice(data)) else {
        return;
    };
    if let Record::Item {
        db,
        key,
        expires_at,
        value,
        meta,
        more: false,
    } = &record
    {
        let mut shard = Shard::new();
        shard.set_with_meta(key, value.clone(), *expires_at, *meta, 0);
        let Some(entry) = shard.get(key, 0) else {
            return;
        };
        for compress in [false, true] {
            let mut items = Vec::new();
            encode_item(*db, key, entry, compress, |i| items.push(i));
            if let [one] = &items[..] {
                assert_eq!(decode(one).expect("re-encoded item decodes"), record);
            }
        }
    }
});
