//! libFuzzer target for the decoder of log records and snapshot items
//! (`gradus_server::persist::record::decode`), compressed items included, and for the reader of
//! a split value's later parts (`add_parts`). Checks: no panic; a payload that decodes to an
//! item re-encodes (compressed or not) to one that decodes the same; one that decodes as a later
//! part adds to an empty value of its kind exactly what it decodes to.
//! Run with `cargo +nightly fuzz run snapshot_item`; the stable, time-bounded loop with mutated
//! valid payloads is `crates/server/tests/fuzz_record.rs`.
#![no_main]

use bytes::Bytes;
use gradus_server::persist::record::{
    add_parts, decode, later_part_added_to_empty, reencode_item, Record,
};
use gradus_store::{HashValue, ListValue, SetValue, Value, ZSetValue};
use libfuzzer_sys::fuzz_target;

fn empty_values() -> [Value; 5] {
    [
        Value::Str(Default::default()),
        Value::hash(HashValue::new()),
        Value::zset(ZSetValue::new()),
        Value::List(ListValue::new()),
        Value::set(SetValue::new()),
    ]
}

fuzz_target!(|data: &[u8]| {
    let payload = Bytes::copy_from_slice(data);
    for mut value in empty_values() {
        let _ = add_parts(&mut value, 0, b"key", std::slice::from_ref(&payload));
    }
    let Ok(record) = decode(&payload) else {
        return;
    };
    if let Some(added) = later_part_added_to_empty(&payload, &record) {
        let Record::Item { value, .. } = &record else {
            unreachable!("a later part is an item");
        };
        assert_eq!(&added.expect("it decoded"), value);
    }
    for compress in [false, true] {
        if let [one] = &reencode_item(&record, compress)[..] {
            assert_eq!(decode(one).expect("re-encoded item decodes"), record);
        }
    }
});
