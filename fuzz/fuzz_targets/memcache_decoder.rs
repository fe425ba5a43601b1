//! libFuzzer target for the memcached `Decoder`: the first input byte picks the read size and
//! the limits, the rest is fed in chunks. Checks that nothing panics, buffered bytes stay within
//! one line plus one data block, and (under default limits) that chunking does not change the
//! outcome. Run with `cargo +nightly fuzz run memcache_decoder`.
#![no_main]

use bytes::BytesMut;
use gradus_memcache::{Decoded, Decoder, Limits, McError};
use libfuzzer_sys::fuzz_target;

type Outcome = (Vec<Decoded>, Option<McError>);

fn run(input: &[u8], chunk: usize, limits: Limits) -> Outcome {
    let mut d = Decoder::new(limits);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in input.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            let r = d.decode(&mut buf);
            assert!(buf.len() <= limits.max_get_line + limits.max_value + 2 + chunk);
            match r {
                Ok(Some(x)) => out.push(x),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, input)) = data.split_first() else {
        return;
    };
    let chunk = 1 + usize::from(ctl & 0x1f);
    let whole = run(input, input.len().max(1), Limits::default());
    let chunked = run(input, chunk, Limits::default());
    assert_eq!(whole, chunked);
    let small = Limits {
        max_line: 16 + usize::from(ctl >> 5),
        max_get_line: 64,
        max_value: 8,
    };
    let _ = run(input, chunk, small);
});
