//! libFuzzer target for the decoder of log records and snapshot items
//! (`gradus_server::persist::record::decode`), compressed items included. Checks: no panic, and a
//! payload that decodes to an item re-encodes (compressed or not) to one that decodes the same.
//! Run with `cargo +nightly fuzz run snapshot_item`; the stable, time-bounded loop with mutated
//! valid payloads is `crates/server/tests/fuzz_record.rs`.
#![no_main]

use bytes::Bytes;
use gradus_server::persist::record::{decode, reencode_item};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(record) = decode(&Bytes::copy_from_slice(data)) else {
        return;
    };
    for compress in [false, true] {
        if let [one] = &reencode_item(&record, compress)[..] {
            assert_eq!(decode(one).expect("re-encoded item decodes"), record);
        }
    }
});
