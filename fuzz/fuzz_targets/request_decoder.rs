//! libFuzzer target for `RequestDecoder`: the first input byte picks chunk sizes and limits, the
//! rest is fed to the decoder in chunks. Checks that nothing panics, buffered state stays
//! bounded, and (under default limits, far above the input size) that chunking does not change
//! the outcome. Run with `cargo +nightly fuzz run request_decoder`.
#![no_main]

use bytes::{Bytes, BytesMut};
use gradus_proto::{Limits, ProtoError, RequestDecoder};
use libfuzzer_sys::fuzz_target;

type Outcome = (Vec<Vec<Bytes>>, Option<ProtoError>);

fn run(input: &[u8], chunk: usize, limits: Limits) -> Outcome {
    let mut d = RequestDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let cap_bound = 2 * (input.len() + limits.max_bulk_len + 2) + (128 << 10);
    for piece in input.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            let r = d.decode(&mut buf);
            assert!(d.pending_args() <= limits.max_array_len);
            assert!(d.pending_bytes() <= input.len());
            assert!(buf.capacity() <= cap_bound);
            match r {
                Ok(Some(cmd)) => out.push(cmd),
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
    if input.len() < 32 * 1024 {
        let whole = run(input, input.len(), Limits::default());
        let chunked = run(input, chunk, Limits::default());
        assert_eq!(whole, chunked);
    }
    let small = Limits {
        max_bulk_len: 16 + usize::from(ctl >> 5),
        max_array_len: 4,
        max_inline_len: 32,
    };
    let _ = run(input, chunk, small);
});
