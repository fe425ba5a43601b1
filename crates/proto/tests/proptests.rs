//! Property tests of the public codec API (bounded case counts, a few seconds in debug builds):
//! multibulk and quoted-inline roundtrips under random chunking, decoder robustness and bounded
//! memory on arbitrary bytes, `encode` → `parse_frame` roundtrips for random frames, and
//! `BulkArray` replies against the frames they stand for.

use bytes::{Bytes, BytesMut};
use gradus_proto::{
    encode, parse_frame, BulkArray, Frame, Limits, ProtoError, ProtocolVersion, RequestDecoder,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::RngAlgorithm;

fn multibulk(args: &[Vec<u8>]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// An inline line where every argument is double-quoted with `\xHH` / `\"` / `\\` escapes.
fn quoted_inline(args: &[Vec<u8>]) -> Vec<u8> {
    let mut v = Vec::new();
    for a in args {
        v.push(b'"');
        for &b in a {
            match b {
                b'"' => v.extend_from_slice(b"\\\""),
                b'\\' => v.extend_from_slice(b"\\\\"),
                0x20..=0x7e => v.push(b),
                _ => v.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
            }
        }
        v.extend_from_slice(b"\" ");
    }
    v.extend_from_slice(b"\r\n");
    v
}

/// Feeds `input` in chunks of the given sizes (cycled), collecting commands until an error.
/// Checks the bounded-state invariants after every call.
fn feed(input: &[u8], chunks: &[usize], limits: Limits) -> (Vec<Vec<Bytes>>, Option<ProtoError>) {
    let mut d = RequestDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut pos = 0;
    let mut i = 0;
    while pos < input.len() {
        let n = chunks[i % chunks.len()].max(1).min(input.len() - pos);
        i += 1;
        buf.extend_from_slice(&input[pos..pos + n]);
        pos += n;
        loop {
            let r = d.decode(&mut buf);
            assert!(d.pending_args() <= limits.max_array_len);
            assert!(d.pending_bytes() <= limits.max_array_len * limits.max_bulk_len);
            assert!(
                // From what arrived, never from a declared length (`payload_room`).
                buf.capacity() <= 4 * (input.len() + 2) + (128 << 10),
                "capacity {} for input of {}",
                buf.capacity(),
                input.len()
            );
            match r {
                Ok(Some(cmd)) => out.push(cmd),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

fn to_vecs(cmds: &[Vec<Bytes>]) -> Vec<Vec<Vec<u8>>> {
    cmds.iter()
        .map(|c| c.iter().map(|a| a.to_vec()).collect())
        .collect()
}

/// Building blocks that make random inputs reach deep decoder states.
fn token() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..8),
        Just(b"\r\n".to_vec()),
        Just(b"*".to_vec()),
        Just(b"$".to_vec()),
        Just(b"-1".to_vec()),
        (0u32..40).prop_map(|n| n.to_string().into_bytes()),
        Just(b"99999999999999999999".to_vec()),
        Just(b"\"".to_vec()),
        Just(b"'".to_vec()),
        Just(b"\\x4".to_vec()),
        Just(b" ".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"%2\r\n".to_vec()),
        Just(b"|1\r\n".to_vec()),
        Just(b",1.5\r\n".to_vec()),
        Just(b"=5\r\ntxt:a\r\n".to_vec()),
        Just(b"#t\r\n".to_vec()),
        Just(b"_\r\n".to_vec()),
        Just(b"(12\r\n".to_vec()),
    ]
}

fn leaf() -> impl Strategy<Value = Frame> {
    prop_oneof![
        "[a-zA-Z0-9 _.:-]{0,20}".prop_map(|s| Frame::Simple(Bytes::from(s))),
        "[A-Z]{1,9} [^\r\n]{0,30}".prop_map(Frame::Error),
        any::<i64>().prop_map(Frame::Integer),
        vec(any::<u8>(), 0..40).prop_map(|v| Frame::Bulk(v.into())),
        Just(Frame::Null),
        Just(Frame::NullArray),
        any::<f64>()
            .prop_filter("NaN != NaN", |v| !v.is_nan())
            .prop_map(Frame::Double),
        any::<bool>().prop_map(Frame::Boolean),
        (any::<[u8; 3]>(), vec(any::<u8>(), 0..40)).prop_map(|(format, t)| Frame::Verbatim {
            format,
            text: t.into()
        }),
        "-?[1-9][0-9]{0,40}".prop_map(Frame::BigNumber),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    leaf().prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..8).prop_map(Frame::Array),
            vec((inner.clone(), inner.clone()), 0..4).prop_map(Frame::Map),
            vec(inner.clone(), 0..8).prop_map(Frame::Set),
            vec(inner, 0..8).prop_map(Frame::Push),
        ]
    })
}

/// RESP3 sends NullArray as `_`, which parses back as Null.
fn resp3_view(f: &Frame) -> Frame {
    match f {
        Frame::NullArray => Frame::Null,
        Frame::Array(v) => Frame::Array(v.iter().map(resp3_view).collect()),
        Frame::Set(v) => Frame::Set(v.iter().map(resp3_view).collect()),
        Frame::Push(v) => Frame::Push(v.iter().map(resp3_view).collect()),
        Frame::Map(v) => Frame::Map(
            v.iter()
                .map(|(k, v)| (resp3_view(k), resp3_view(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

proptest! {
    // XorShift: the default ChaCha generator dominates run time in unoptimised test builds.
    #![proptest_config(ProptestConfig {
        cases: 2000,
        rng_algorithm: RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    })]

    /// (1) Random argument vectors, encoded as multibulk (and as quoted inline lines), decode
    /// to the original under random chunking.
    #[test]
    fn multibulk_roundtrip_in_chunks(
        cmds in vec(vec(vec(any::<u8>(), 0..48), 1..8), 1..6),
        chunks in vec(1usize..64, 1..16),
    ) {
        let mut input = Vec::new();
        for c in &cmds {
            input.extend(multibulk(c));
        }
        let (got, err) = feed(&input, &chunks, Limits::default());
        prop_assert_eq!(err, None);
        prop_assert_eq!(to_vecs(&got), cmds.clone());

        let mut inline = Vec::new();
        for c in &cmds {
            inline.extend(quoted_inline(c));
        }
        let (got, err) = feed(&inline, &chunks, Limits::default());
        prop_assert_eq!(err, None);
        prop_assert_eq!(to_vecs(&got), cmds);
    }

    /// (2) Arbitrary bytes never panic, memory stays bounded (checked inside `feed`), and the
    /// outcome does not depend on how the bytes were chunked.
    #[test]
    fn decoder_total_on_arbitrary_bytes(
        parts in vec(token(), 0..64),
        chunks in vec(1usize..32, 1..8),
    ) {
        let input: Vec<u8> = parts.concat();
        let small = Limits { max_bulk_len: 16, max_array_len: 4, max_inline_len: 32 };
        let _ = feed(&input, &chunks, small);
        let whole = feed(&input, &[input.len().max(1)], Limits::default());
        let chunked = feed(&input, &chunks, Limits::default());
        prop_assert_eq!(whole, chunked);
        // The reply parser is total too.
        let mut buf = BytesMut::from(&input[..]);
        while let Ok(Some(_)) = parse_frame(&mut buf) {}
    }

    /// (3) encode(frame, Resp3) → parse_frame gives the frame back (NaN excluded), also when
    /// several frames arrive in random chunks.
    #[test]
    fn frame_roundtrip_resp3(
        frames in vec(frame(), 1..4),
        chunks in vec(1usize..64, 1..8),
    ) {
        let mut wire = BytesMut::new();
        for f in &frames {
            encode(f, ProtocolVersion::Resp3, &mut wire);
        }
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut pos = 0;
        let mut i = 0;
        while pos < wire.len() {
            let n = chunks[i % chunks.len()].min(wire.len() - pos);
            i += 1;
            buf.extend_from_slice(&wire[pos..pos + n]);
            pos += n;
            while let Some(f) = parse_frame(&mut buf).expect("valid encoding") {
                got.push(f);
            }
        }
        prop_assert!(buf.is_empty());
        let want: Vec<Frame> = frames.iter().map(resp3_view).collect();
        prop_assert_eq!(got, want);
    }

    /// (4) A `BulkArray` gives back what was pushed, and in each of its three shapes encodes
    /// exactly as the `Frame::Array`, `Frame::Set` or `Frame::Map` of the same bulks, in both
    /// protocol versions, and compares equal to it.
    #[test]
    fn bulk_array_is_its_frames(items in vec(vec(any::<u8>(), 0..300), 0..40)) {
        let bulks: BulkArray = items.iter().map(|i| &i[..]).collect();
        prop_assert_eq!(bulks.iter().map(<[u8]>::to_vec).collect::<Vec<_>>(), items.clone());
        let each = || items.iter().map(|i| Frame::Bulk(Bytes::copy_from_slice(i)));
        let even = items.len() / 2 * 2;
        let pairs: Vec<(Frame, Frame)> = items[..even]
            .chunks(2)
            .map(|p| (Frame::Bulk(Bytes::copy_from_slice(&p[0])), Frame::Bulk(Bytes::copy_from_slice(&p[1]))))
            .collect();
        let map_bulks: BulkArray = items[..even].iter().map(|i| &i[..]).collect();
        let cases = [
            (Frame::Bulks(bulks.clone()), Frame::Array(each().collect())),
            (Frame::Bulks(bulks.into_set()), Frame::Set(each().collect())),
            (Frame::Bulks(map_bulks.into_map()), Frame::Map(pairs)),
        ];
        for (fast, plain) in &cases {
            for version in [ProtocolVersion::Resp2, ProtocolVersion::Resp3] {
                prop_assert_eq!(fast.to_bytes(version), plain.to_bytes(version));
            }
            prop_assert_eq!(fast, plain);
            prop_assert_eq!(plain, fast);
        }
    }
}
