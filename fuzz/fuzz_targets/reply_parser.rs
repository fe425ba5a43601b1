//! libFuzzer target for `parse_frame`: feeds the input whole and in chunks (size from the first
//! byte), checking that nothing panics, that an incomplete frame leaves the buffer untouched, and
//! that chunking does not change the decoded frames. Run with
//! `cargo +nightly fuzz run reply_parser`.
#![no_main]

use bytes::BytesMut;
use gradus_proto::{parse_frame, Frame, ProtoError};
use libfuzzer_sys::fuzz_target;

fn run(input: &[u8], chunk: usize) -> (Vec<Frame>, Option<ProtoError>) {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in input.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            let before = buf.len();
            match parse_frame(&mut buf) {
                Ok(Some(f)) => {
                    assert!(buf.len() < before);
                    out.push(f);
                }
                Ok(None) => {
                    assert_eq!(buf.len(), before);
                    break;
                }
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
    let whole = run(input, input.len());
    let chunked = run(input, 1 + usize::from(ctl & 0x3f));
    // Debug text compares NaN doubles as equal.
    assert_eq!(format!("{whole:?}"), format!("{chunked:?}"));
});
