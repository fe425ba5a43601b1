//! libFuzzer target for what a replica reads from its primary: the replication stream's frames
//! (`gradus_server::repl::stream::decode`) and the PSYNC reply line (`parse_psync_reply`).
//! Checks: no panic; decoding consumes exactly the bytes of each frame it returns (its reported
//! length), never more than it was given; a decoded frame re-encodes to the bytes it came from;
//! a split anywhere decodes to the same frames.
//! Run with `cargo +nightly fuzz run repl_stream`.
#![no_main]

use bytes::BytesMut;
use gradus_server::repl::stream::{self, Frame};
use libfuzzer_sys::fuzz_target;

fn reencode(frame: &Frame) -> bytes::Bytes {
    match frame {
        Frame::Record(body) => stream::encode(stream::KIND_RECORD, body),
        Frame::Item(body) => stream::encode(stream::KIND_ITEM, body),
        Frame::End { items } => stream::end(*items),
        Frame::Ping => stream::encode(stream::KIND_PING, b""),
        Frame::Lock(event) => stream::encode_lock(event),
    }
}

fn frames(mut buf: BytesMut) -> Vec<Frame> {
    let mut out = Vec::new();
    loop {
        let before = buf.len();
        match stream::decode(&mut buf) {
            Ok(Some((frame, len))) => {
                assert_eq!(before - buf.len(), len);
                out.push(frame);
            }
            Ok(None) | Err(_) => return out,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = stream::parse_psync_reply(&String::from_utf8_lossy(data));
    let whole = frames(BytesMut::from(data));
    let mut start = 0;
    for frame in &whole {
        let bytes = reencode(frame);
        assert_eq!(&data[start..start + bytes.len()], &bytes[..]);
        start += bytes.len();
    }
    // Fed in two parts, the same frames come out.
    let cut = data.first().map_or(0, |b| *b as usize % (data.len() + 1));
    let mut buf = BytesMut::from(&data[..cut]);
    let mut split = Vec::new();
    loop {
        match stream::decode(&mut buf) {
            Ok(Some((frame, _))) => split.push(frame),
            Ok(None) => break,
            Err(_) => return,
        }
    }
    buf.extend_from_slice(&data[cut..]);
    split.extend(frames(buf));
    assert_eq!(split[..whole.len().min(split.len())], whole[..whole.len().min(split.len())]);
});
