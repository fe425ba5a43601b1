//! libFuzzer target for `rdb::restore` (and `rdb::restore_functions` on the same bytes): the first byte chooses whether the rest is a whole payload
//! (so the footer checks are fuzzed) or an object body that gets a valid footer appended (so the
//! object decoders are reached). Checks that nothing panics and that a decoded value dumps and
//! decodes again to a value of the same kind and size. Run with
//! `cargo +nightly fuzz run rdb_restore`.
#![no_main]

use gradus_proto::rdb::{crc64, dump, dump_functions, restore, restore_functions, RdbValue};
use libfuzzer_sys::fuzz_target;

fn size(v: &RdbValue) -> (u8, usize) {
    match v {
        RdbValue::Str(s) => (0, s.len()),
        RdbValue::List(l) => (1, l.len()),
        RdbValue::Set(s) => (2, s.len()),
        RdbValue::ZSet(z) => (3, z.len()),
        RdbValue::Hash(h) => (4, h.len()),
        RdbValue::Stream(s) => (5, s.nodes.len()),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let payload = if ctl & 1 == 0 {
        rest.to_vec()
    } else {
        let mut p = rest.to_vec();
        p.extend_from_slice(&u16::from(ctl >> 4).to_le_bytes());
        let crc = crc64(&p);
        p.extend_from_slice(&crc.to_le_bytes());
        p
    };
    if let Ok(value) = restore(&payload) {
        let again = restore(&dump(&value).expect("decoded values are dumpable"))
            .expect("dumped values decode");
        assert_eq!(size(&value), size(&again));
    }
    // The same bytes as a FUNCTION RESTORE payload.
    if let Ok(codes) = restore_functions(&payload) {
        let refs: Vec<&[u8]> = codes.iter().map(|c| c.as_ref()).collect();
        assert_eq!(restore_functions(&dump_functions(&refs)).unwrap(), codes);
    }
});
