//! Property tests for the memcached decoder: arbitrary bytes never panic, buffered state stays
//! bounded by the limits, and how the input is split into reads never changes the outcome.

use bytes::BytesMut;
use gradus_memcache::{Decoded, Decoder, Limits, McError};
use proptest::prelude::*;

type Outcome = (Vec<Decoded>, Option<McError>);

fn run(input: &[u8], chunk: usize, limits: Limits) -> Outcome {
    let mut d = Decoder::new(limits);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in input.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            let r = d.decode(&mut buf);
            // Never more buffered than one line plus one permitted data block.
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

/// Inputs built from protocol fragments, so most runs get deep into the parser.
fn fragments() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"get ".to_vec()),
        Just(b"gets a b\r\n".to_vec()),
        Just(b"gat 10 k\r\n".to_vec()),
        Just(b"set k 0 0 3\r\n".to_vec()),
        Just(b"cas k 1 2 3 99 noreply\r\n".to_vec()),
        Just(b"abc\r\n".to_vec()),
        Just(b"ms k 2 T5 F1 I q\r\n".to_vec()),
        Just(b"mg Zm9v b v k O1 N30 R5 t c f s h l\r\n".to_vec()),
        Just(b"md k I T3 q\r\n".to_vec()),
        Just(b"ma k N0 J5 D2 MD v\r\n".to_vec()),
        Just(b"incr k 18446744073709551615\r\n".to_vec()),
        Just(b"flush_all 10 noreply\r\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\x80".to_vec()),
        prop::collection::vec(any::<u8>(), 0..40),
    ];
    prop::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(input in prop::collection::vec(any::<u8>(), 0..4096), chunk in 1usize..64) {
        let small = Limits { max_line: 64, max_get_line: 256, max_value: 32 };
        let _ = run(&input, chunk, small);
        let _ = run(&input, chunk, Limits::default());
    }

    #[test]
    fn chunking_does_not_change_the_outcome(input in fragments(), chunk in 1usize..17) {
        let whole = run(&input, input.len().max(1), Limits::default());
        let chunked = run(&input, chunk, Limits::default());
        prop_assert_eq!(whole, chunked);
    }
}
