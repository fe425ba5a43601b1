use super::*;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// `body` (type byte and object) with a footer of `version` and the right CRC.
fn with_footer(body: &[u8], version: u16) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend_from_slice(&version.to_le_bytes());
    let crc = crc64(&p);
    p.extend_from_slice(&crc.to_le_bytes());
    p
}

fn payload(body: &[u8]) -> Vec<u8> {
    with_footer(body, 10)
}

/// An RDB string of `blob`, raw (length-prefixed).
fn rdb_str(blob: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    put_len(&mut out, blob.len() as u64);
    out.put_slice(blob);
    out.to_vec()
}

fn object(kind: u8, blob: &[u8]) -> Vec<u8> {
    let mut body = vec![kind];
    body.extend_from_slice(&rdb_str(blob));
    payload(&body)
}

/// A ziplist built from the format description: header (bytes, tail offset, count), entries of
/// (previous entry length, encoding, data), 0xFF. `big_prevlen` writes every prevlen in 5 bytes.
fn ziplist(entries: &[ZlEntry], big_prevlen: bool) -> Vec<u8> {
    let mut zl = vec![0u8; 10];
    let mut prev = 0usize;
    let mut tail = 10usize;
    for e in entries {
        let start = zl.len();
        tail = start;
        if big_prevlen || prev >= 254 {
            zl.push(254);
            zl.extend_from_slice(&(prev as u32).to_le_bytes());
        } else {
            zl.push(prev as u8);
        }
        match e {
            ZlEntry::Str(s) if s.len() < 64 => {
                zl.push(s.len() as u8);
                zl.extend_from_slice(s);
            }
            ZlEntry::Str(s) if s.len() < 16384 => {
                zl.push(0x40 | (s.len() >> 8) as u8);
                zl.push(s.len() as u8);
                zl.extend_from_slice(s);
            }
            ZlEntry::Str(s) => {
                zl.push(0x80);
                zl.extend_from_slice(&(s.len() as u32).to_be_bytes());
                zl.extend_from_slice(s);
            }
            ZlEntry::Imm(v) => zl.push(0xF1 + *v as u8),
            ZlEntry::I8(v) => {
                zl.push(0xFE);
                zl.extend_from_slice(&v.to_le_bytes());
            }
            ZlEntry::I16(v) => {
                zl.push(0xC0);
                zl.extend_from_slice(&v.to_le_bytes());
            }
            ZlEntry::I24(v) => {
                zl.push(0xF0);
                zl.extend_from_slice(&v.to_le_bytes()[..3]);
            }
            ZlEntry::I32(v) => {
                zl.push(0xD0);
                zl.extend_from_slice(&v.to_le_bytes());
            }
            ZlEntry::I64(v) => {
                zl.push(0xE0);
                zl.extend_from_slice(&v.to_le_bytes());
            }
        }
        prev = zl.len() - start;
    }
    zl.push(0xFF);
    let total = zl.len() as u32;
    zl[0..4].copy_from_slice(&total.to_le_bytes());
    zl[4..8].copy_from_slice(&(tail as u32).to_le_bytes());
    zl[8..10].copy_from_slice(&(entries.len().min(65535) as u16).to_le_bytes());
    zl
}

enum ZlEntry {
    Str(Vec<u8>),
    Imm(i64),
    I8(i8),
    I16(i16),
    I24(i32),
    I32(i32),
    I64(i64),
}

fn zs(s: &str) -> ZlEntry {
    ZlEntry::Str(s.as_bytes().to_vec())
}

fn listpack(items: &[&[u8]]) -> Vec<u8> {
    let mut w = ListpackWriter::new();
    for i in items {
        w.push(i);
    }
    w.finish()
}

// --- footer ------------------------------------------------------------------------------

#[test]
fn crc64_is_redis_crc64() {
    // crc64.c's self-test value.
    assert_eq!(crc64(b"123456789"), 0xe9c6d914c4b8d9ca);
}

#[test]
fn footer_is_checked_first() {
    assert_eq!(restore(b""), Err(RdbError::TooShort));
    assert_eq!(restore(&[0; 9]), Err(RdbError::TooShort));
    let good = payload(&[0, 1, b'x']);
    assert_eq!(restore(&good), Ok(RdbValue::Str(b("x"))));
    for i in 0..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x20;
        let err = restore(&bad).unwrap_err();
        assert!(err.is_footer(), "flip at {i}: {err:?}");
    }
    // A newer RDB version is refused even with a right CRC; 11 (Redis 7.2) is accepted.
    assert_eq!(
        restore(&with_footer(&[0, 1, b'x'], 12)),
        Err(RdbError::Version(12))
    );
    assert_eq!(
        restore(&with_footer(&[0, 1, b'x'], 11)),
        Ok(RdbValue::Str(b("x")))
    );
    // Only the footer: no type byte.
    assert_eq!(restore(&payload(&[])), Err(RdbError::Truncated));
    assert!(!RdbError::Truncated.is_footer());
}

#[test]
fn trailing_bytes_are_refused() {
    assert_eq!(
        restore(&payload(&[0, 1, b'x', 0])),
        Err(RdbError::TrailingBytes(1))
    );
}

// --- known answers from redis-server 7.0.15 --------------------------------------------

/// DUMP replies of redis-server 7.0.15 and the values they hold.
fn redis_dumps() -> Vec<(&'static str, RdbValue)> {
    vec![
        (
            "000568656c6c6f0a006372df766534200a",
            RdbValue::Str(b("hello")),
        ),
        ("00c07b0a0048e253e1007a67b9", RdbValue::Str(b("123"))),
        (
            "00c290eefeff0a002875de7b13eb2800",
            RdbValue::Str(b("-70000")),
        ),
        (
            "1201020f0f00000003008161028162020101ff0a00e01bab4a47ce5922",
            RdbValue::List(vec![b("a"), b("b"), b("1")]),
        ),
        (
            "0b0e02000000030000000100020003000a00a5025ce26d6e4d1b",
            RdbValue::Set(vec![b("1"), b("2"), b("3")]),
        ),
        ("020101610a006296e97e44d21a6d", RdbValue::Set(vec![b("a")])),
        (
            "111414000000040081610283312e35048162020201ff0a00fa02b425af188763",
            RdbValue::ZSet(vec![(b("a"), 1.5), (b("b"), 2.0)]),
        ),
        (
            "1012120000000400816602817602816e020701ff0a00b82adea8407ffaa8",
            RdbValue::Hash(vec![(b("f"), b("v")), (b("n"), b("7"))]),
        ),
    ]
}

#[test]
fn restore_reads_redis_dumps() {
    for (h, value) in redis_dumps() {
        assert_eq!(restore(&hex(h)), Ok(value), "{h}");
    }
    // An LZF-compressed string as Redis 7.0 wrote it (30 × "x").
    assert_eq!(
        restore(&hex("00c3091e017878e011000178780a00f0673fdf2001eb95")),
        Ok(RdbValue::Str(Bytes::from(vec![b'x'; 30])))
    );
}

#[test]
fn dump_matches_redis_byte_for_byte() {
    for (h, value) in redis_dumps() {
        assert_eq!(dump(&value).unwrap().to_vec(), hex(h), "{value:?}");
    }
}

// --- strings -------------------------------------------------------------------------------

#[test]
fn string_encodings() {
    let cases: &[(&[u8], &str)] = &[
        (&[0, 0], ""),
        (&[0, 0xC0, 0xFB], "-5"),
        (&[0, 0xC0, 0x7F], "127"),
        (&[0, 0xC1, 0x39, 0x30], "12345"),
        (&[0, 0xC1, 0x00, 0x80], "-32768"),
        (&[0, 0xC2, 0x90, 0xEE, 0xFE, 0xFF], "-70000"),
        (&[0, 0xC2, 0xFF, 0xFF, 0xFF, 0x7F], "2147483647"),
    ];
    for (body, text) in cases {
        assert_eq!(
            restore(&payload(body)),
            Ok(RdbValue::Str(b(text))),
            "{text}"
        );
    }
    // 14-bit and 32-bit lengths.
    let long = vec![b'q'; 300];
    let mut body = vec![0, 0x41, 0x2C];
    body.extend_from_slice(&long);
    assert_eq!(
        restore(&payload(&body)),
        Ok(RdbValue::Str(Bytes::from(long.clone())))
    );
    let mut body = vec![0, 0x80, 0, 0, 1, 0x2C];
    body.extend_from_slice(&long);
    assert_eq!(
        restore(&payload(&body)),
        Ok(RdbValue::Str(Bytes::from(long.clone())))
    );
    let mut body = vec![0, 0x81, 0, 0, 0, 0, 0, 0, 1, 0x2C];
    body.extend_from_slice(&long);
    assert_eq!(
        restore(&payload(&body)),
        Ok(RdbValue::Str(Bytes::from(long)))
    );
    // Unknown string encoding 0xC4, unknown length prefix 0x82.
    assert!(matches!(
        restore(&payload(&[0, 0xC4])),
        Err(RdbError::Corrupt(_))
    ));
    assert!(matches!(
        restore(&payload(&[0, 0x82])),
        Err(RdbError::Corrupt(_))
    ));
}

#[test]
fn lzf_string_hand_built() {
    // Literal "a", then a back reference of 20 bytes at distance 1 (length 18 = 7 + 11).
    let body = [0, 0xC3, 5, 21, 0x00, b'a', 0xE0, 0x0B, 0x00];
    assert_eq!(
        restore(&payload(&body)),
        Ok(RdbValue::Str(Bytes::from(vec![b'a'; 21])))
    );
    // Back reference of 3 bytes (ctrl length 1) at distance 2: "ab" + "aba".
    let body = [0, 0xC3, 5, 5, 0x01, b'a', b'b', 0x20, 0x01];
    assert_eq!(restore(&payload(&body)), Ok(RdbValue::Str(b("ababa"))));
    // Declared length wrong, reference before the start, truncated reference.
    for body in [
        &[0, 0xC3, 5, 22, 0x00, b'a', 0xE0, 0x0B, 0x00][..],
        &[0, 0xC3, 4, 5, 0x00, b'a', 0x20, 0x05][..],
        &[0, 0xC3, 3, 5, 0x00, b'a', 0xE0][..],
        &[0, 0xC3, 3, 5, 0x05, b'a', b'b'][..],
    ] {
        assert!(
            matches!(restore(&payload(body)), Err(RdbError::Corrupt(_))),
            "{body:?}"
        );
    }
}

#[test]
fn lzf_round_trips_and_compresses() {
    let mut inputs: Vec<Vec<u8>> = vec![
        vec![b'a'; 21],
        vec![b'z'; 100_000],
        b"abcabcabcabcabcabcabcabcabcabcabc".to_vec(),
        (0..5000u32).flat_map(|i| (i % 251).to_le_bytes()).collect(),
    ];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    inputs.push(
        (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 4) as u8 + b'a'
            })
            .collect(),
    );
    for input in &inputs {
        let c = lzf_compress(input, input.len() - 4).expect("compressible");
        assert_eq!(lzf_decompress(&c, input.len()).unwrap(), *input);
    }
    // 100 000 equal bytes take about one byte in 88.
    let c = lzf_compress(&inputs[1], inputs[1].len()).unwrap();
    assert!(c.len() < 1200, "{}", c.len());
    // Incompressible data is not compressed.
    let random: Vec<u8> = (0..64u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    assert!(lzf_compress(&random, random.len() - 4).is_none());
}

#[test]
fn dump_string_encodings() {
    let body = |v: &str| {
        let p = dump(&RdbValue::Str(b(v))).unwrap();
        p[..p.len() - FOOTER_LEN].to_vec()
    };
    assert_eq!(body("7"), [0, 0xC0, 7]);
    assert_eq!(body("-300"), [0, 0xC1, 0xD4, 0xFE]);
    assert_eq!(body("2147483648"), [&[0u8, 10][..], b"2147483648"].concat());
    assert_eq!(body("007"), [0, 3, b'0', b'0', b'7']);
    assert_eq!(body("-0"), [0, 2, b'-', b'0']);
    let long = "y".repeat(1000);
    let p = body(&long);
    assert_eq!(p[1], 0xC3);
    assert!(p.len() < 40);
    assert_eq!(
        restore(&dump(&RdbValue::Str(b(&long))).unwrap()),
        Ok(RdbValue::Str(b(&long)))
    );
}

// --- lists ---------------------------------------------------------------------------------

#[test]
fn list_type_1() {
    let body = [1, 3, 1, b'a', 0xC0, 7, 0];
    assert_eq!(
        restore(&payload(&body)),
        Ok(RdbValue::List(vec![b("a"), b("7"), b("")]))
    );
    assert_eq!(restore(&payload(&[1, 0])), Err(RdbError::Empty));
    // A count far beyond the bytes present fails without allocating for it.
    assert_eq!(
        restore(&payload(&[1, 0x80, 0xFF, 0xFF, 0xFF, 0xFF, 1, b'a'])),
        Err(RdbError::Truncated)
    );
}

#[test]
fn list_ziplist_literal_bytes() {
    // "a", 5 (immediate), -2 (int16), written out byte by byte.
    let zl = [
        20, 0, 0, 0, // zlbytes
        15, 0, 0, 0, // zltail
        3, 0, // zllen
        0, 0x01, b'a', // prevlen 0, 6-bit string
        3, 0xF6, // prevlen 3, immediate 5
        2, 0xC0, 0xFE, 0xFF, // prevlen 2, int16 -2
        0xFF,
    ];
    assert_eq!(
        restore(&object(TYPE_LIST_ZIPLIST, &zl)),
        Ok(RdbValue::List(vec![b("a"), b("5"), b("-2")]))
    );
}

#[test]
fn list_ziplist_every_entry_encoding() {
    let big = vec![b'w'; 300];
    let huge = vec![b'h'; 17000];
    let entries = vec![
        zs("x"),
        ZlEntry::Str(big.clone()),
        ZlEntry::Str(huge.clone()),
        ZlEntry::Imm(0),
        ZlEntry::Imm(12),
        ZlEntry::I8(-100),
        ZlEntry::I16(-30000),
        ZlEntry::I24(-8_000_000),
        ZlEntry::I32(2_000_000_000),
        ZlEntry::I64(i64::MIN),
        zs(""),
    ];
    let expect = RdbValue::List(vec![
        b("x"),
        Bytes::from(big),
        Bytes::from(huge),
        b("0"),
        b("12"),
        b("-100"),
        b("-30000"),
        b("-8000000"),
        b("2000000000"),
        b("-9223372036854775808"),
        b(""),
    ]);
    for big_prevlen in [false, true] {
        let zl = ziplist(&entries, big_prevlen);
        assert_eq!(restore(&object(TYPE_LIST_ZIPLIST, &zl)), Ok(expect.clone()));
    }
}

#[test]
fn ziplist_corruption_is_detected() {
    let good = ziplist(&[zs("ab"), ZlEntry::I16(1000), zs("c")], false);
    assert!(restore(&object(TYPE_LIST_ZIPLIST, &good)).is_ok());
    let mut cases = Vec::new();
    let mut bad = good.clone();
    bad[0] += 1; // zlbytes
    cases.push(bad);
    let mut bad = good.clone();
    bad[4] += 1; // zltail
    cases.push(bad);
    let mut bad = good.clone();
    bad[8] = 4; // zllen
    cases.push(bad);
    let mut bad = good.clone();
    bad[14] = 3; // prevlen of the second entry
    cases.push(bad);
    let mut bad = good.clone();
    bad[15] = 0xC1; // invalid integer encoding
    cases.push(bad);
    let mut bad = good.clone();
    bad[11] = 0x3F; // string length past the end
    cases.push(bad);
    let mut bad = good.clone();
    *bad.last_mut().unwrap() = 0; // no terminator
    cases.push(bad);
    for (i, zl) in cases.iter().enumerate() {
        assert!(
            matches!(
                restore(&object(TYPE_LIST_ZIPLIST, zl)),
                Err(RdbError::Corrupt(_))
            ),
            "case {i}"
        );
    }
    // An unknown count (65535) is accepted.
    let mut unknown = good.clone();
    unknown[8] = 0xFF;
    unknown[9] = 0xFF;
    assert!(restore(&object(TYPE_LIST_ZIPLIST, &unknown)).is_ok());
    // An empty ziplist is an empty key.
    assert_eq!(
        restore(&object(TYPE_LIST_ZIPLIST, &ziplist(&[], false))),
        Err(RdbError::Empty)
    );
}

#[test]
fn list_quicklist_of_ziplists() {
    let n1 = ziplist(&[zs("a"), ZlEntry::Imm(1)], false);
    let empty = ziplist(&[], false);
    let n2 = ziplist(&[zs("b")], false);
    let mut body = vec![TYPE_LIST_QUICKLIST, 3];
    for n in [&n1, &empty, &n2] {
        body.extend_from_slice(&rdb_str(n));
    }
    assert_eq!(
        restore(&payload(&body)),
        Ok(RdbValue::List(vec![b("a"), b("1"), b("b")]))
    );
    // Only empty nodes: an empty key.
    let mut body = vec![TYPE_LIST_QUICKLIST, 1];
    body.extend_from_slice(&rdb_str(&empty));
    assert_eq!(restore(&payload(&body)), Err(RdbError::Empty));
}

#[test]
fn list_quicklist2_packed_and_plain_nodes() {
    let lp = listpack(&[b"a", b"-5000", b"123456789012"]);
    let mut body = vec![TYPE_LIST_QUICKLIST_2, 2, 2];
    body.extend_from_slice(&rdb_str(&lp));
    body.push(1);
    body.extend_from_slice(&rdb_str(b"plain element"));
    assert_eq!(
        restore(&payload(&body)),
        Ok(RdbValue::List(vec![
            b("a"),
            b("-5000"),
            b("123456789012"),
            b("plain element")
        ]))
    );
    // Unknown container 3; empty node string.
    let mut body = vec![TYPE_LIST_QUICKLIST_2, 1, 3];
    body.extend_from_slice(&rdb_str(&lp));
    assert!(matches!(
        restore(&payload(&body)),
        Err(RdbError::Corrupt(_))
    ));
    assert!(matches!(
        restore(&payload(&[TYPE_LIST_QUICKLIST_2, 1, 2, 0])),
        Err(RdbError::Corrupt(_))
    ));
}

#[test]
fn dump_list_splits_nodes_at_8k() {
    let items: Vec<Bytes> = (0..3000).map(|i| b(&format!("element-{i}"))).collect();
    let p = dump(&RdbValue::List(items.clone())).unwrap();
    assert_eq!(p[0], TYPE_LIST_QUICKLIST_2);
    let mut r = Reader {
        data: &p[1..],
        pos: 0,
    };
    let nodes = r.count().unwrap();
    assert!(nodes > 3, "{nodes}");
    let mut budget = Budget {
        left: u64::MAX,
        limit: usize::MAX,
    };
    for _ in 0..nodes {
        assert_eq!(r.count().unwrap(), QUICKLIST_PACKED);
        let blob = r.string(&mut budget).unwrap();
        assert!(blob.len() <= LIST_NODE_MAX_BYTES);
    }
    assert_eq!(restore(&p), Ok(RdbValue::List(items)));
    // An element over 8 KiB gets a node of its own.
    let items = vec![b("a"), Bytes::from(vec![b'b'; 10_000]), b("c")];
    assert_eq!(
        restore(&dump(&RdbValue::List(items.clone())).unwrap()),
        Ok(RdbValue::List(items))
    );
}

// --- listpacks -------------------------------------------------------------------------------

#[test]
fn listpack_literal_bytes() {
    // "f" -> "v" as a hash listpack, written out byte by byte.
    let lp = [13, 0, 0, 0, 2, 0, 0x81, b'f', 0x02, 0x81, b'v', 0x02, 0xFF];
    assert_eq!(
        restore(&object(TYPE_HASH_LISTPACK, &lp)),
        Ok(RdbValue::Hash(vec![(b("f"), b("v"))]))
    );
}

#[test]
fn listpack_every_entry_encoding() {
    // Integers at every width boundary, and strings of 6-, 12- and 32-bit lengths.
    let ints: [i64; 16] = [
        0,
        127,
        128,
        -1,
        -4096,
        4095,
        4096,
        -4097,
        32767,
        -32768,
        8_388_607,
        -8_388_608,
        2_147_483_647,
        -2_147_483_648,
        i64::MAX,
        i64::MIN,
    ];
    let mut texts: Vec<Vec<u8>> = ints.iter().map(|v| v.to_string().into_bytes()).collect();
    texts.push(vec![b's'; 63]);
    texts.push(vec![b's'; 64]);
    texts.push(vec![b's'; 4095]);
    texts.push(vec![b's'; 4096]);
    texts.push(vec![b's'; 20_000]);
    texts.push(b"0123".to_vec());
    texts.push(Vec::new());
    let refs: Vec<&[u8]> = texts.iter().map(|t| &t[..]).collect();
    let lp = listpack(&refs);
    // Check a few encodings the writer chose.
    assert_eq!(&lp[6..8], &[0x00, 0x01]); // 0: 7-bit uint + backlen
    assert_eq!(&lp[8..10], &[0x7F, 0x01]); // 127
    assert_eq!(&lp[10..13], &[0xC0, 0x80, 0x02]); // 128: 13-bit
    let mut body = vec![TYPE_LIST_QUICKLIST_2, 1, 2];
    body.extend_from_slice(&rdb_str(&lp));
    let expect: Vec<Bytes> = texts.into_iter().map(Bytes::from).collect();
    assert_eq!(restore(&payload(&body)), Ok(RdbValue::List(expect)));
}

#[test]
fn backlen_matches_redis_thresholds() {
    assert_eq!(backlen(127), ([127, 0, 0, 0, 0], 1));
    assert_eq!(backlen(128), ([1, 128, 0, 0, 0], 2));
    assert_eq!(backlen(16382).1, 2);
    assert_eq!(backlen(16383), ([0, 255, 255, 0, 0], 3));
    assert_eq!(backlen(2_097_151).1, 4);
    assert_eq!(backlen(268_435_455).1, 5);
}

#[test]
fn listpack_corruption_is_detected() {
    let good = listpack(&[b"ab", b"1000", b"c"]);
    let mut body = vec![TYPE_LIST_QUICKLIST_2, 1, 2];
    body.extend_from_slice(&rdb_str(&good));
    assert!(restore(&payload(&body)).is_ok());
    let mut cases = Vec::new();
    let mut bad = good.clone();
    bad[0] += 1; // total bytes
    cases.push(bad);
    let mut bad = good.clone();
    bad[4] = 2; // count
    cases.push(bad);
    let mut bad = good.clone();
    bad[9] = 2; // back-length of "ab"
    cases.push(bad);
    let mut bad = good.clone();
    bad[10] = 0xF5; // unknown encoding
    cases.push(bad);
    let mut bad = good.clone();
    bad[6] = 0xBF; // 63-byte string past the end
    cases.push(bad);
    let mut bad = good.clone();
    bad[10] = 0xFF; // terminator in the middle
    cases.push(bad);
    for (i, lp) in cases.iter().enumerate() {
        let mut body = vec![TYPE_LIST_QUICKLIST_2, 1, 2];
        body.extend_from_slice(&rdb_str(lp));
        assert!(
            matches!(restore(&payload(&body)), Err(RdbError::Corrupt(_))),
            "case {i}"
        );
    }
}

// --- sets ----------------------------------------------------------------------------------

#[test]
fn set_encodings() {
    assert_eq!(
        restore(&payload(&[TYPE_SET, 2, 1, b'a', 0xC0, 9])),
        Ok(RdbValue::Set(vec![b("a"), b("9")]))
    );
    assert_eq!(
        restore(&payload(&[TYPE_SET, 2, 1, b'a', 1, b'a'])),
        Err(RdbError::Duplicate)
    );
    // Intsets of each width.
    let mut is16 = vec![2, 0, 0, 0, 3, 0, 0, 0];
    for v in [-1i16, 5, 300] {
        is16.extend_from_slice(&v.to_le_bytes());
    }
    assert_eq!(
        restore(&object(TYPE_SET_INTSET, &is16)),
        Ok(RdbValue::Set(vec![b("-1"), b("5"), b("300")]))
    );
    let mut is32 = vec![4, 0, 0, 0, 2, 0, 0, 0];
    for v in [-70000i32, 70000] {
        is32.extend_from_slice(&v.to_le_bytes());
    }
    assert_eq!(
        restore(&object(TYPE_SET_INTSET, &is32)),
        Ok(RdbValue::Set(vec![b("-70000"), b("70000")]))
    );
    let mut is64 = vec![8, 0, 0, 0, 1, 0, 0, 0];
    is64.extend_from_slice(&i64::MAX.to_le_bytes());
    assert_eq!(
        restore(&object(TYPE_SET_INTSET, &is64)),
        Ok(RdbValue::Set(vec![b("9223372036854775807")]))
    );
    // Out of order, duplicate, wrong size, bad width, empty.
    let mut unordered = vec![2, 0, 0, 0, 2, 0, 0, 0];
    unordered.extend_from_slice(&[5, 0, 1, 0]);
    let mut dup = vec![2, 0, 0, 0, 2, 0, 0, 0];
    dup.extend_from_slice(&[5, 0, 5, 0]);
    let short = vec![2, 0, 0, 0, 2, 0, 0, 0, 1, 0];
    let width3 = vec![3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0];
    for blob in [unordered, dup, short, width3] {
        assert!(matches!(
            restore(&object(TYPE_SET_INTSET, &blob)),
            Err(RdbError::Corrupt(_))
        ));
    }
    assert_eq!(
        restore(&object(TYPE_SET_INTSET, &[2, 0, 0, 0, 0, 0, 0, 0])),
        Err(RdbError::Empty)
    );
    // Redis 7.2's listpack sets.
    let lp = listpack(&[b"a", b"17", b"b"]);
    assert_eq!(
        restore(&object(TYPE_SET_LISTPACK, &lp)),
        Ok(RdbValue::Set(vec![b("a"), b("17"), b("b")]))
    );
    let lp = listpack(&[b"a", b"a"]);
    assert_eq!(
        restore(&object(TYPE_SET_LISTPACK, &lp)),
        Err(RdbError::Duplicate)
    );
}

#[test]
fn dump_set_encodings() {
    let ints: Vec<Bytes> = [5, -3, 100_000]
        .iter()
        .map(|v: &i64| b(&v.to_string()))
        .collect();
    let p = dump(&RdbValue::Set(ints)).unwrap();
    assert_eq!(p[0], TYPE_SET_INTSET);
    assert_eq!(
        restore(&p),
        Ok(RdbValue::Set(vec![b("-3"), b("5"), b("100000")]))
    );
    let p = dump(&RdbValue::Set(vec![b("5"), b("x")])).unwrap();
    assert_eq!(p[0], TYPE_SET);
    let many: Vec<Bytes> = (0..513).map(|v| b(&v.to_string())).collect();
    let p = dump(&RdbValue::Set(many.clone())).unwrap();
    assert_eq!(p[0], TYPE_SET);
    assert_eq!(restore(&p), Ok(RdbValue::Set(many)));
    assert_eq!(
        dump(&RdbValue::Set(vec![b("a"), b("a")])),
        Err(RdbError::Duplicate)
    );
    assert_eq!(dump(&RdbValue::Set(vec![])), Err(RdbError::Empty));
}

// --- sorted sets ---------------------------------------------------------------------------

#[test]
fn zset_encodings() {
    // Type 3: scores as text, 254 = +inf, 255 = -inf, 253 = NaN.
    let mut body = vec![TYPE_ZSET, 3, 1, b'a', 3];
    body.extend_from_slice(b"1.5");
    body.extend_from_slice(&[1, b'b', 254, 1, b'c', 255]);
    assert_eq!(
        restore(&payload(&body)),
        Ok(RdbValue::ZSet(vec![
            (b("a"), 1.5),
            (b("b"), f64::INFINITY),
            (b("c"), f64::NEG_INFINITY)
        ]))
    );
    assert_eq!(
        restore(&payload(&[TYPE_ZSET, 1, 1, b'a', 253])),
        Err(RdbError::NanScore)
    );
    assert!(matches!(
        restore(&payload(&[TYPE_ZSET, 1, 1, b'a', 2, b'x', b'y'])),
        Err(RdbError::Corrupt(_))
    ));
    // Type 5: binary scores.
    let mut body = vec![TYPE_ZSET_2, 2, 1, b'a'];
    body.extend_from_slice(&(-0.25f64).to_le_bytes());
    body.extend_from_slice(&[0xC0, 7]);
    body.extend_from_slice(&1e300f64.to_le_bytes());
    assert_eq!(
        restore(&payload(&body)),
        Ok(RdbValue::ZSet(vec![(b("a"), -0.25), (b("7"), 1e300)]))
    );
    let mut body = vec![TYPE_ZSET_2, 2, 1, b'a'];
    body.extend_from_slice(&1.0f64.to_le_bytes());
    body.extend_from_slice(&[1, b'a']);
    body.extend_from_slice(&2.0f64.to_le_bytes());
    assert_eq!(restore(&payload(&body)), Err(RdbError::Duplicate));
    // Ziplist (type 12) and listpack (type 17): member, score pairs; scores as text or integers.
    let zl = ziplist(
        &[
            zs("a"),
            zs("1.5"),
            zs("b"),
            ZlEntry::I16(-300),
            zs("c"),
            zs("inf"),
        ],
        false,
    );
    let expect = RdbValue::ZSet(vec![
        (b("a"), 1.5),
        (b("b"), -300.0),
        (b("c"), f64::INFINITY),
    ]);
    assert_eq!(restore(&object(TYPE_ZSET_ZIPLIST, &zl)), Ok(expect.clone()));
    let lp = listpack(&[b"a", b"1.5", b"b", b"-300", b"c", b"inf"]);
    assert_eq!(restore(&object(TYPE_ZSET_LISTPACK, &lp)), Ok(expect));
    // Odd number of entries.
    let lp = listpack(&[b"a", b"1", b"b"]);
    assert!(matches!(
        restore(&object(TYPE_ZSET_LISTPACK, &lp)),
        Err(RdbError::Corrupt(_))
    ));
}

#[test]
fn dump_zset_encodings() {
    let small = vec![
        (b("b"), 2.0),
        (b("a"), 2.0),
        (b("z"), -0.0),
        (b("n"), f64::NEG_INFINITY),
        (b("p"), 0.1),
        (b("i"), f64::INFINITY),
        (b("big"), 1e300),
    ];
    let p = dump(&RdbValue::ZSet(small.clone())).unwrap();
    assert_eq!(p[0], TYPE_ZSET_LISTPACK);
    let RdbValue::ZSet(back) = restore(&p).unwrap() else {
        panic!("not a zset");
    };
    // Stored in score order, ties by member.
    let names: Vec<&[u8]> = back.iter().map(|(m, _)| &m[..]).collect();
    assert_eq!(names, [&b"n"[..], b"z", b"p", b"a", b"b", b"big", b"i"]);
    for (m, s) in &small {
        let got = back.iter().find(|(bm, _)| bm == m).unwrap().1;
        assert_eq!(got.to_bits(), s.to_bits(), "{m:?}");
    }
    let large: Vec<(Bytes, f64)> = (0..129)
        .map(|i| (b(&format!("m{i}")), i as f64 / 3.0))
        .collect();
    let p = dump(&RdbValue::ZSet(large.clone())).unwrap();
    assert_eq!(p[0], TYPE_ZSET_2);
    assert_eq!(restore(&p), Ok(RdbValue::ZSet(large)));
    let long_member = vec![(Bytes::from(vec![b'm'; 65]), 1.0)];
    assert_eq!(dump(&RdbValue::ZSet(long_member)).unwrap()[0], TYPE_ZSET_2);
    assert_eq!(
        dump(&RdbValue::ZSet(vec![(b("a"), f64::NAN)])),
        Err(RdbError::NanScore)
    );
}

// --- hashes --------------------------------------------------------------------------------

#[test]
fn hash_encodings() {
    assert_eq!(
        restore(&payload(&[TYPE_HASH, 1, 1, b'f', 0xC0, 1])),
        Ok(RdbValue::Hash(vec![(b("f"), b("1"))]))
    );
    assert_eq!(
        restore(&payload(&[TYPE_HASH, 2, 1, b'f', 0, 1, b'f', 0])),
        Err(RdbError::Duplicate)
    );
    let zl = ziplist(
        &[zs("f"), zs("v"), ZlEntry::Imm(3), ZlEntry::I64(1 << 40)],
        false,
    );
    assert_eq!(
        restore(&object(TYPE_HASH_ZIPLIST, &zl)),
        Ok(RdbValue::Hash(vec![
            (b("f"), b("v")),
            (b("3"), b("1099511627776"))
        ]))
    );
    // Zipmap, the example of zipmap.c's comment.
    let zm = b"\x02\x03foo\x03\x00bar\x05hello\x05\x00world\xff";
    assert_eq!(
        restore(&object(TYPE_HASH_ZIPMAP, zm)),
        Ok(RdbValue::Hash(vec![
            (b("foo"), b("bar")),
            (b("hello"), b("world"))
        ]))
    );
    // Zipmap with free bytes after a value, a 5-byte length and an unknown count (254).
    let mut zm = vec![254, 1, b'k', 254];
    zm.extend_from_slice(&300u32.to_le_bytes());
    zm.push(2);
    zm.extend_from_slice(&[b'v'; 300]);
    zm.extend_from_slice(&[0, 0, 0xFF]);
    assert_eq!(
        restore(&object(TYPE_HASH_ZIPMAP, &zm)),
        Ok(RdbValue::Hash(vec![(b("k"), Bytes::from(vec![b'v'; 300]))]))
    );
    for bad in [
        &b"\x03\x03foo\x03\x00bar\x05hello\x05\x00world\xff"[..],
        b"\x00\xff",
        b"\x01\x03fo",
    ] {
        assert!(matches!(
            restore(&object(TYPE_HASH_ZIPMAP, bad)),
            Err(RdbError::Corrupt(_))
        ));
    }
}

#[test]
fn dump_hash_encodings() {
    let small = vec![(b("f"), b("v")), (b("n"), b("-12"))];
    let p = dump(&RdbValue::Hash(small.clone())).unwrap();
    assert_eq!(p[0], TYPE_HASH_LISTPACK);
    assert_eq!(restore(&p), Ok(RdbValue::Hash(small)));
    let long_value = vec![(b("f"), Bytes::from(vec![b'v'; 65]))];
    let p = dump(&RdbValue::Hash(long_value.clone())).unwrap();
    assert_eq!(p[0], TYPE_HASH);
    assert_eq!(restore(&p), Ok(RdbValue::Hash(long_value)));
    let many: Vec<(Bytes, Bytes)> = (0..513)
        .map(|i| (b(&format!("f{i}")), b(&i.to_string())))
        .collect();
    let p = dump(&RdbValue::Hash(many.clone())).unwrap();
    assert_eq!(p[0], TYPE_HASH);
    assert_eq!(restore(&p), Ok(RdbValue::Hash(many)));
    assert_eq!(
        dump(&RdbValue::Hash(vec![(b("f"), b("1")), (b("f"), b("2"))])),
        Err(RdbError::Duplicate)
    );
}

// --- unsupported types and limits ------------------------------------------------------------

#[test]
fn unsupported_types() {
    for t in [6u8, 7, 8, 22, 23, 24, 25, 26, 200, 255] {
        assert_eq!(
            restore(&payload(&[t, 0])),
            Err(RdbError::UnsupportedType(t)),
            "type {t}"
        );
    }
}

#[test]
fn limits_bound_decoded_size() {
    // An LZF string claiming 2^40 bytes is refused before anything is allocated.
    let body = [0, 0xC3, 2, 0x81, 0, 0, 1, 0, 0, 0, 0, 0, 0x00, b'a'];
    assert_eq!(
        restore(&payload(&body)),
        Err(RdbError::TooLarge(default_restore_limit(body.len() + 10)))
    );
    // A 100 000-byte string from a ~1 KiB payload decodes by default, not under a 50 KiB limit.
    let p = dump(&RdbValue::Str(Bytes::from(vec![b'a'; 100_000]))).unwrap();
    assert!(p.len() < 1300);
    assert!(restore(&p).is_ok());
    assert_eq!(
        restore_with_limit(&p, 50_000),
        Err(RdbError::TooLarge(50_000))
    );
    // Elements count against the limit too.
    let items: Vec<Bytes> = (0..1000).map(|i| b(&i.to_string())).collect();
    let p = dump(&RdbValue::List(items)).unwrap();
    assert_eq!(restore_with_limit(&p, 1000), Err(RdbError::TooLarge(1000)));
    assert!(restore_with_limit(&p, 100_000).is_ok());
}

#[test]
fn canonical_integers() {
    for (s, v) in [
        ("0", Some(0)),
        ("-1", Some(-1)),
        ("9223372036854775807", Some(i64::MAX)),
    ] {
        assert_eq!(canonical_int(s.as_bytes()), v);
    }
    for s in [
        "",
        "-0",
        "+1",
        "01",
        " 1",
        "1 ",
        "9223372036854775808",
        "1.0",
        "-",
    ] {
        assert_eq!(canonical_int(s.as_bytes()), None, "{s:?}");
    }
}

/// FUNCTION DUMP of redis-server 7.0.15 after FUNCTION LOAD of one library.
#[test]
fn function_payloads_round_trip_and_read_redis_own() {
    let redis_payload = hex(
        "f5c34046404b1f23216c7561206e616d653d780a72656469732e72656769737465725f66756e63\
         0974696f6e28276627\
         2c20e0000d0e292072657475726e203120656e64292035400d0120350a00b24dbc6685cadc97",
    );
    let code = b"#!lua name=x\nredis.register_function('f', function() return 1 end)\nreturn 5";
    assert_eq!(
        restore_functions(&redis_payload).unwrap(),
        vec![Bytes::from_static(code)]
    );
    let ours = dump_functions(&[&code[..], b"#!lua name=y\n"]);
    assert_eq!(
        restore_functions(&ours).unwrap(),
        vec![
            Bytes::from_static(code),
            Bytes::from_static(b"#!lua name=y\n")
        ]
    );
    assert_eq!(
        restore_functions(&dump_functions(&[])).unwrap(),
        Vec::<Bytes>::new()
    );
    let mut pre_ga = dump_functions(&[b"x"]).to_vec();
    pre_ga[0] = OPCODE_FUNCTION_PRE_GA;
    let n = pre_ga.len();
    let crc = crc64(&pre_ga[..n - 8]);
    pre_ga[n - 8..].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(restore_functions(&pre_ga), Err(RdbError::PreGaFunctions));
    assert!(restore_functions(b"garbage-payload")
        .unwrap_err()
        .is_footer());
}

/// An RDB file: header, aux fields, SELECTDB only when the database changes, an expiry before
/// its key, each object as `dump` encodes it, and a checksum over the whole file however it was
/// taken in pieces.
#[test]
fn an_rdb_file_holds_each_key_after_its_database_and_expiry_with_a_whole_file_checksum() {
    let mut file = RdbFile::new("7.2.0", 1_700_000_000);
    file.key(0, b"a", None, &RdbValue::Str(b("1"))).unwrap();
    let first = file.take();
    assert!(first.starts_with(b"REDIS0010\xfa\x09redis-ver\x057.2.0"));
    file.key(0, b"s", Some(0x0102_0304_0506), &RdbValue::Str(b("xy")))
        .unwrap();
    file.key(3, b"l", None, &RdbValue::List(vec![b("e")]))
        .unwrap();
    assert_eq!(
        file.key(3, b"empty", None, &RdbValue::Set(vec![])),
        Err(RdbError::Empty),
        "a value Redis cannot hold is refused, nothing written"
    );
    let rest = file.finish();
    let whole = [&first[..], &rest[..]].concat();
    let (body, crc) = whole.split_at(whole.len() - 8);
    assert_eq!(crc, crc64(body).to_le_bytes());
    assert_eq!(body.last(), Some(&0xff));
    let db0 = body.windows(2).position(|w| w == [0xfe, 0]).unwrap();
    let db3 = body.windows(2).position(|w| w == [0xfe, 3]).unwrap();
    assert!(db0 < db3);
    assert_eq!(
        body.windows(2)
            .filter(|w| w[0] == 0xfe && w[1] <= 3)
            .count(),
        2
    );
    let expiry = body
        .windows(7)
        .position(|w| w == [0xfc, 6, 5, 4, 3, 2, 1])
        .unwrap();
    // The expiry, then the string type, the key "s" and its value "xy".
    assert_eq!(&body[expiry + 9..expiry + 9 + 6], b"\x00\x01s\x02xy");
    let list = dump(&RdbValue::List(vec![b("e")])).unwrap();
    let at = body.windows(2).position(|w| w == [list[0], 1]).unwrap();
    assert_eq!(&body[at + 2..at + 3], b"l");
    assert_eq!(
        &body[at + 3..at + 3 + list.len() - 11],
        &list[1..list.len() - 10]
    );
}

// --- streams -------------------------------------------------------------------------------

/// The hex of `bytes`.
fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn stream_of(value: RdbValue) -> RdbStream {
    match value {
        RdbValue::Stream(s) => *s,
        other => panic!("not a stream: {other:?}"),
    }
}

fn entry(id: StreamId, deleted: bool, fields: &[(&str, &str)]) -> RdbStreamEntry {
    RdbStreamEntry {
        id,
        deleted,
        fields: fields.iter().map(|(f, v)| (b(f), b(v))).collect(),
    }
}

fn names(names: &[&str]) -> Vec<Bytes> {
    names.iter().map(|n| b(n)).collect()
}

fn pel(id: StreamId, delivery_time: u64, delivery_count: u64) -> RdbPending {
    RdbPending {
        id,
        delivery_time,
        delivery_count,
    }
}

fn consumer(name: &str, seen_time: u64, pending: &[StreamId]) -> RdbConsumer {
    RdbConsumer {
        name: b(name),
        seen_time,
        active_time: None,
        pending: pending.to_vec(),
    }
}

/// A stream body (type byte and object) in RDB type `kind` (15, 19 or 21), written field by
/// field from the format (strings as `put_string` writes them); for type 21 each consumer's
/// active time is its seen time plus 1. Nodes, groups and lists are written in the given order.
fn stream_body(kind: u8, s: &RdbStream) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_u8(kind);
    put_len(&mut out, s.nodes.len() as u64);
    let id = |out: &mut BytesMut, id: StreamId| {
        out.put_u64(id.0);
        out.put_u64(id.1);
    };
    for node in &s.nodes {
        let mut key = BytesMut::new();
        id(&mut key, node.master_id);
        put_string(&mut out, &key);
        put_string(&mut out, &stream::node_listpack(node));
    }
    put_len(&mut out, s.length);
    put_len(&mut out, s.last_id.0);
    put_len(&mut out, s.last_id.1);
    if kind >= 19 {
        for v in [
            s.first_id.0,
            s.first_id.1,
            s.max_deleted_id.0,
            s.max_deleted_id.1,
            s.entries_added,
        ] {
            put_len(&mut out, v);
        }
    }
    put_len(&mut out, s.groups.len() as u64);
    for g in &s.groups {
        put_string(&mut out, &g.name);
        put_len(&mut out, g.last_id.0);
        put_len(&mut out, g.last_id.1);
        if kind >= 19 {
            put_len(&mut out, g.entries_read as u64);
        }
        put_len(&mut out, g.pending.len() as u64);
        for p in &g.pending {
            id(&mut out, p.id);
            out.put_u64_le(p.delivery_time);
            put_len(&mut out, p.delivery_count);
        }
        put_len(&mut out, g.consumers.len() as u64);
        for c in &g.consumers {
            put_string(&mut out, &c.name);
            out.put_u64_le(c.seen_time);
            if kind >= 21 {
                out.put_u64_le(c.seen_time + 1);
            }
            put_len(&mut out, c.pending.len() as u64);
            for p in &c.pending {
                id(&mut out, *p);
            }
        }
    }
    out.to_vec()
}

/// redis-server 7.0.15, stream-node-max-entries 100:
/// XADD s 1-1 f v; XADD s 1-2 f 12; XADD s 2-0 a b c -300; XADD s 2-1 f 7000000000;
/// XDEL s 1-2; XGROUP CREATE s g1 0; XREADGROUP GROUP g1 alice COUNT 2 STREAMS s >;
/// XGROUP CREATECONSUMER s g1 bob; XREADGROUP GROUP g1 bob COUNT 1 STREAMS s >;
/// XGROUP CREATE s g0 $; DUMP s
const REDIS_STREAM_GROUPS: &str =
    "130110000000000000000100000000000000014050500000001d000301010101\
    01816602000102010001000181760204010301000101010c01040100010101dfff02020181610281620281630\
    2ded4020801020101010001f400863ba101000000090401ff030201010101020402026730020181ffffffffff\
    ffffff0000026731020104030000000000000001000000000000000184d0fe25a201000001000000000000000\
    2000000000000000085d0fe25a2010000010000000000000002000000000000000185d0fe25a2010000010205\
    616c69636584d0fe25a2010000020000000000000001000000000000000100000000000000020000000000000\
    00003626f6285d0fe25a201000001000000000000000200000000000000010a007b71a8bd5be4eea7";

/// redis-server 7.0.15, stream-node-max-entries 3 (three nodes, two LZF-compressed listpacks,
/// a negative sequence difference, long and 64-bit values):
/// XADD t 5-9 name alpha-alpha-alpha count 1; XADD t 6-0 name alpha-alpha-alpha count 2;
/// XADD t 6-1 name beta-beta-beta-beta count 300; XADD t 7-0 other x×100;
/// XADD t 7-1 name gamma count -1; XADD t 8-0 name y×70 count 9223372036854775807;
/// XADD t 9-0 name delta count 12345678; XDEL t 7-1; DUMP t
const REDIS_STREAM_NODES: &str = "13031000000000000000050000000000000009c34053407818780000001800\
    030100010201846e616d650585636f756e74064010000020010691616c7068612de002050312010105202d040\
    101dff702e00a1d0002c01d07f80293626574612de005040614c12c020501ff10000000000000000700000000\
    00000000c34061411007100100001c00020140000b856f74686572060001020100200102e06478e05a0001660\
    4207a00002003190201846e616d65058567616d6d610685636f756e7406dfff0208601e4095802002e04679e0\
    3c000048a06201f4ff8000047f090801ff100000000000000009000000000000000031310000000c000101000\
    10201846e616d650585636f756e740600010201000100018564656c746106f34e61bc00050501ff0609000509\
    070107000a00196c2d70b56beec9";

/// redis-server 7.0.15: XGROUP CREATE e g $ MKSTREAM; DUMP e
const REDIS_STREAM_MKSTREAM: &str =
    "13000000000000000000010167000081ffffffffffffffff00000a00a01a953dfb9cddde";

/// redis-server 7.0.15: XADD d 1-1 a 1; XDEL d 1-1; DUMP d
const REDIS_STREAM_ALL_DELETED: &str = "13000001010000010101000a00cda16212d34bf396";

/// redis-server 7.0.15, stream-node-max-entries 2: XADD r 100-0 k 1 v one;
/// XADD r 100-1 k 2 v two; XADD r 101-0 k 3 v three; XADD r 102-0 z 0;
/// XADD r 103-0 k -5 v five; XGROUP CREATE r readers 0; XGROUP CREATE r 42 100-1;
/// XREADGROUP GROUP readers c1 COUNT 3 STREAMS r >; XREADGROUP GROUP readers c2 COUNT 1 STREAMS r >;
/// XCLAIM r readers c2 0 100-1; XACK r readers 100-0; XREADGROUP GROUP 42 c1 COUNT 1 STREAMS r >;
/// XGROUP CREATECONSUMER r 42 idle; XDEL r 101-0; DUMP r
const REDIS_STREAM_CLAIMS: &str = "1303100000000000000064000000000000000033330000001200020100010\
    201816b0281760200010201000100010101836f6e6504050102010001010102018374776f040501ff10000000\
    0000000065000000000000000035350000001300010101010201816b02817602000103010001000103018574\
    687265650605010001010100010101817a0200010601ff100000000000000067000000000000000026260000\
    000c00010100010201816b028176020001020100010001dffb028466697665050501ff044067004064004065\
    000502c02a40650081ffffffffffffffff01000000000000006500000000000000002fb80226a20100000102\
    0263312fb80226a201000001000000000000006500000000000000000469646c6530b80226a2010000000772\
    6561646572734066000403000000000000006400000000000000012fb80226a2010000020000000000000065\
    00000000000000002fb80226a201000001000000000000006600000000000000002fb80226a2010000010202\
    63312fb80226a201000001000000000000006500000000000000000263322fb80226a2010000020000000000\
    0000640000000000000001000000000000006600000000000000000a00d224f6123f181abd";

/// The stream of [`REDIS_STREAM_GROUPS`], as XINFO STREAM s FULL showed it.
fn redis_stream_groups() -> RdbStream {
    let (t0, t1) = (1_795_933_786_244, 1_795_933_786_245);
    RdbStream {
        nodes: vec![RdbStreamNode {
            master_id: (1, 1),
            master_fields: names(&["f"]),
            entries: vec![
                entry((1, 1), false, &[("f", "v")]),
                entry((1, 2), true, &[("f", "12")]),
                entry((2, 0), false, &[("a", "b"), ("c", "-300")]),
                entry((2, 1), false, &[("f", "7000000000")]),
            ],
        }],
        length: 3,
        last_id: (2, 1),
        first_id: (1, 1),
        max_deleted_id: (1, 2),
        entries_added: 4,
        groups: vec![
            RdbStreamGroup {
                name: b("g0"),
                last_id: (2, 1),
                entries_read: -1,
                pending: vec![],
                consumers: vec![],
            },
            RdbStreamGroup {
                name: b("g1"),
                last_id: (2, 1),
                entries_read: 4,
                pending: vec![pel((1, 1), t0, 1), pel((2, 0), t1, 1), pel((2, 1), t1, 1)],
                consumers: vec![
                    consumer("alice", t0, &[(1, 1), (2, 0)]),
                    consumer("bob", t1, &[(2, 1)]),
                ],
            },
        ],
    }
}

fn redis_stream_nodes() -> RdbStream {
    let x = "x".repeat(100);
    let y = "y".repeat(70);
    let nf = names(&["name", "count"]);
    RdbStream {
        nodes: vec![
            RdbStreamNode {
                master_id: (5, 9),
                master_fields: nf.clone(),
                entries: vec![
                    entry(
                        (5, 9),
                        false,
                        &[("name", "alpha-alpha-alpha"), ("count", "1")],
                    ),
                    entry(
                        (6, 0),
                        false,
                        &[("name", "alpha-alpha-alpha"), ("count", "2")],
                    ),
                    entry(
                        (6, 1),
                        false,
                        &[("name", "beta-beta-beta-beta"), ("count", "300")],
                    ),
                ],
            },
            RdbStreamNode {
                master_id: (7, 0),
                master_fields: names(&["other"]),
                entries: vec![
                    entry((7, 0), false, &[("other", &x)]),
                    entry((7, 1), true, &[("name", "gamma"), ("count", "-1")]),
                    entry(
                        (8, 0),
                        false,
                        &[("name", &y), ("count", "9223372036854775807")],
                    ),
                ],
            },
            RdbStreamNode {
                master_id: (9, 0),
                master_fields: nf,
                entries: vec![entry(
                    (9, 0),
                    false,
                    &[("name", "delta"), ("count", "12345678")],
                )],
            },
        ],
        length: 6,
        last_id: (9, 0),
        first_id: (5, 9),
        max_deleted_id: (7, 1),
        entries_added: 7,
        groups: vec![],
    }
}

fn redis_stream_claims() -> RdbStream {
    let t = 1_795_934_042_159;
    RdbStream {
        nodes: vec![
            RdbStreamNode {
                master_id: (100, 0),
                master_fields: names(&["k", "v"]),
                entries: vec![
                    entry((100, 0), false, &[("k", "1"), ("v", "one")]),
                    entry((100, 1), false, &[("k", "2"), ("v", "two")]),
                ],
            },
            RdbStreamNode {
                master_id: (101, 0),
                master_fields: names(&["k", "v"]),
                entries: vec![
                    entry((101, 0), true, &[("k", "3"), ("v", "three")]),
                    entry((102, 0), false, &[("z", "0")]),
                ],
            },
            RdbStreamNode {
                master_id: (103, 0),
                master_fields: names(&["k", "v"]),
                entries: vec![entry((103, 0), false, &[("k", "-5"), ("v", "five")])],
            },
        ],
        length: 4,
        last_id: (103, 0),
        first_id: (100, 0),
        max_deleted_id: (101, 0),
        entries_added: 5,
        groups: vec![
            RdbStreamGroup {
                name: b("42"),
                last_id: (101, 0),
                entries_read: -1,
                pending: vec![pel((101, 0), t, 1)],
                consumers: vec![consumer("c1", t, &[(101, 0)]), consumer("idle", t + 1, &[])],
            },
            RdbStreamGroup {
                name: b("readers"),
                last_id: (102, 0),
                entries_read: 4,
                pending: vec![
                    pel((100, 1), t, 2),
                    pel((101, 0), t, 1),
                    pel((102, 0), t, 1),
                ],
                consumers: vec![
                    consumer("c1", t, &[(101, 0)]),
                    consumer("c2", t, &[(100, 1), (102, 0)]),
                ],
            },
        ],
    }
}

/// Empty streams as Redis 7.0 writes them.
fn redis_stream_mkstream() -> RdbStream {
    RdbStream {
        groups: vec![RdbStreamGroup {
            name: b("g"),
            last_id: (0, 0),
            entries_read: -1,
            pending: vec![],
            consumers: vec![],
        }],
        ..RdbStream::default()
    }
}

fn redis_stream_all_deleted() -> RdbStream {
    RdbStream {
        last_id: (1, 1),
        max_deleted_id: (1, 1),
        entries_added: 1,
        ..RdbStream::default()
    }
}

fn redis_streams() -> Vec<(&'static str, RdbStream)> {
    vec![
        (REDIS_STREAM_GROUPS, redis_stream_groups()),
        (REDIS_STREAM_NODES, redis_stream_nodes()),
        (REDIS_STREAM_CLAIMS, redis_stream_claims()),
        (REDIS_STREAM_MKSTREAM, redis_stream_mkstream()),
        (REDIS_STREAM_ALL_DELETED, redis_stream_all_deleted()),
    ]
}

#[test]
fn streams_decode_and_dump_as_redis_7_0() {
    for (h, expected) in redis_streams() {
        let p = hex(h);
        let decoded = stream_of(restore(&p).unwrap());
        assert_eq!(decoded, expected);
        let again = dump(&RdbValue::Stream(Box::new(decoded))).unwrap();
        assert_eq!(to_hex(&again), h, "dump gives Redis' bytes back");
        // The test encoder agrees with Redis on type 19 too.
        assert_eq!(payload(&stream_body(19, &expected)), p);
    }
}

#[test]
fn stream_listpack_sizes_are_redis_lp_bytes() {
    // The listpacks' lengths in the payloads above (raw, or the uncompressed length of LZF).
    assert_eq!(stream_node_lp_bytes(&redis_stream_groups().nodes[0]), 80);
    let sizes: Vec<usize> = redis_stream_nodes()
        .nodes
        .iter()
        .map(stream_node_lp_bytes)
        .collect();
    assert_eq!(sizes, [0x78, 0x110, 0x31]);
    let sizes: Vec<usize> = redis_stream_claims()
        .nodes
        .iter()
        .map(stream_node_lp_bytes)
        .collect();
    assert_eq!(sizes, [0x33, 0x35, 0x26]);

    // Entry by entry, for the first node of REDIS_STREAM_GROUPS: master (1-1, [f]).
    let master = names(&["f"]);
    let size = |id: StreamId, fields: &[(&str, &str)]| {
        stream_entry_lp_bytes(id, (1, 1), &master, &entry(id, false, fields).fields)
    };
    // flags 2, ms 0, seq 0, "v", lp-count 4: five elements of 2, 2, 2, 3, 2 bytes.
    assert_eq!(size((1, 1), &[("f", "v")]), 11);
    assert_eq!(size((1, 2), &[("f", "12")]), 10);
    // flags, ms 1, seq -1 (13-bit), 2 fields, a, b, c, -300 (13-bit), lp-count 8.
    assert_eq!(size((2, 0), &[("a", "b"), ("c", "-300")]), 23);
    // A 64-bit value: 9 bytes and its back-length.
    assert_eq!(size((2, 1), &[("f", "7000000000")]), 18);
    // Master entry: 3 live, 1 deleted, 1 field, "f", 0.
    assert_eq!(stream_master_entry_lp_bytes(3, 1, &master), 11);
    assert_eq!(6 + 11 + (11 + 10 + 23 + 18) + 1, 80);
    // An ID below the master's is a negative difference (wrapping, as in Redis); a large
    // difference takes 9 bytes.
    assert_eq!(size((0, 1), &[("f", "v")]), 11 + 1);
    assert_eq!(size((1 << 40, 1), &[("f", "v")]), 11 - 2 + 10);
    assert_eq!(
        stream_entry_lp_bytes((0, 0), (u64::MAX, u64::MAX), &master, &[(b("f"), b("v"))]),
        11
    );
    // Long field names and values: 12-bit and 32-bit string headers and back-lengths.
    let long = "z".repeat(5000);
    assert_eq!(
        stream_entry_lp_bytes((1, 1), (1, 1), &[], &[(b("q"), b(&"w".repeat(200)))]),
        2 + 2 + 2 + 2 + 3 + (2 + 200 + 2) + 2
    );
    assert_eq!(
        stream_entry_lp_bytes((1, 1), (1, 1), &[b("q")], &[(b("q"), b(&long))]),
        2 + 2 + 2 + (5 + 5000 + 2) + 2
    );
}

fn sample_streams() -> Vec<RdbStream> {
    let big = "v".repeat(300);
    let huge = "h".repeat(70_000);
    vec![
        RdbStream::default(),
        // Entries with the master's fields, other fields, no fields; deleted entries; values
        // that look like integers (stored as listpack integers) and ones that do not.
        RdbStream {
            nodes: vec![
                RdbStreamNode {
                    master_id: (1_700_000_000_000, 0),
                    master_fields: names(&["temp", "unit"]),
                    entries: vec![
                        entry(
                            (1_700_000_000_000, 0),
                            false,
                            &[("temp", "21"), ("unit", "C")],
                        ),
                        entry(
                            (1_700_000_000_000, 1),
                            true,
                            &[("temp", "-0"), ("unit", "01")],
                        ),
                        entry(
                            (1_700_000_000_005, 0),
                            false,
                            &[("unit", "C"), ("temp", "1")],
                        ),
                        entry(
                            (1_700_000_000_006, 0),
                            false,
                            &[("temp", "9223372036854775807")],
                        ),
                        entry((1_700_000_000_007, 0), false, &[]),
                        entry(
                            (1_700_000_000_008, 3),
                            false,
                            &[("1", "2"), ("1", "-8388608")],
                        ),
                    ],
                },
                RdbStreamNode {
                    master_id: (1_800_000_000_000, 7),
                    master_fields: names(&["", "x"]),
                    entries: vec![
                        entry((1_800_000_000_000, 7), false, &[("", ""), ("x", &big)]),
                        entry((u64::MAX, u64::MAX), false, &[("", "-9223372036854775808")]),
                    ],
                },
                RdbStreamNode {
                    master_id: (u64::MAX, u64::MAX),
                    master_fields: names(&["h"]),
                    entries: vec![entry((u64::MAX, u64::MAX), true, &[("h", &huge)])],
                },
            ],
            length: 6,
            last_id: (u64::MAX, u64::MAX),
            first_id: (1_700_000_000_000, 0),
            max_deleted_id: (u64::MAX, u64::MAX),
            entries_added: u64::MAX,
            groups: vec![
                RdbStreamGroup {
                    name: b(""),
                    last_id: (0, 0),
                    entries_read: 0,
                    pending: vec![],
                    consumers: vec![consumer("only", 0, &[])],
                },
                RdbStreamGroup {
                    name: b("12345"),
                    last_id: (1_800_000_000_000, 7),
                    entries_read: i64::MAX,
                    pending: vec![
                        pel((1_700_000_000_000, 0), 1, 1),
                        pel((1_700_000_000_000, 1), u64::MAX, u64::MAX),
                        pel((1_800_000_000_000, 7), 3, 70_000),
                    ],
                    consumers: vec![
                        consumer("a", 5, &[(1_700_000_000_000, 1)]),
                        consumer(&"long consumer name ".repeat(5), u64::MAX, &[]),
                        consumer("z", 6, &[(1_700_000_000_000, 0), (1_800_000_000_000, 7)]),
                    ],
                },
                RdbStreamGroup {
                    name: b(&"g".repeat(100)),
                    last_id: (5, 5),
                    entries_read: -1,
                    pending: vec![],
                    consumers: vec![],
                },
            ],
        },
    ]
}

#[test]
fn streams_round_trip() {
    let mut streams = sample_streams();
    streams.extend(redis_streams().into_iter().map(|(_, s)| s));
    // Many nodes of many entries (count and lp-count beyond one-byte integers).
    let mut many = RdbStream::default();
    for n in 0..40u64 {
        let master_id = (n * 1000, 0);
        let entries = (0..150u64)
            .map(|i| {
                let fields = if i % 3 == 0 {
                    vec![(b("f"), b(&i.to_string())), (b("g"), b("same"))]
                } else {
                    vec![(b(&format!("k{i}")), b(&format!("value {i}")))]
                };
                RdbStreamEntry {
                    id: (n * 1000 + i, i % 4),
                    deleted: i % 7 == 0,
                    fields,
                }
            })
            .collect();
        many.nodes.push(RdbStreamNode {
            master_id,
            master_fields: names(&["f", "g"]),
            entries,
        });
    }
    many.length = 40 * 128;
    many.last_id = (39_149, 1);
    many.entries_added = 40 * 150;
    streams.push(many);
    for s in streams {
        let p = dump(&RdbValue::Stream(Box::new(s.clone()))).unwrap();
        assert_eq!(restore(&p), Ok(RdbValue::Stream(Box::new(s.clone()))));
        for node in &s.nodes {
            let lp = stream::node_listpack(node);
            assert_eq!(stream_node_lp_bytes(node), lp.len());
            let deleted = node.entries.iter().filter(|e| e.deleted).count() as u64;
            let parts =
                6 + stream_master_entry_lp_bytes(
                    node.entries.len() as u64 - deleted,
                    deleted,
                    &node.master_fields,
                ) + node
                    .entries
                    .iter()
                    .map(|e| {
                        stream_entry_lp_bytes(e.id, node.master_id, &node.master_fields, &e.fields)
                    })
                    .sum::<usize>()
                    + 1;
            assert_eq!(parts, lp.len());
        }
        // An RDB file holds the same object after the key.
        let mut file = RdbFile::new("7.0.15", 0);
        file.key(0, b"st", None, &RdbValue::Stream(Box::new(s.clone())))
            .unwrap();
        let body = [&file.take()[..], &file.finish()[..]].concat();
        let object = [&[p[0], 2, b's', b't'][..], &p[1..p.len() - FOOTER_LEN]].concat();
        assert!(body.windows(object.len()).any(|w| w == object));
    }
}

#[test]
fn stream_dump_orders_and_checks_what_redis_keys() {
    // Out of order, as a store might hold them: written in rax order.
    let sorted = redis_stream_claims();
    let mut shuffled = sorted.clone();
    shuffled.nodes.reverse();
    shuffled.groups.reverse();
    for g in &mut shuffled.groups {
        g.pending.reverse();
        g.consumers.reverse();
        for c in &mut g.consumers {
            c.pending.reverse();
        }
    }
    assert_eq!(
        dump(&RdbValue::Stream(Box::new(shuffled))).unwrap(),
        Bytes::from(hex(REDIS_STREAM_CLAIMS))
    );
    let refuses = |edit: &dyn Fn(&mut RdbStream), err: RdbError| {
        let mut s = redis_stream_claims();
        edit(&mut s);
        assert_eq!(dump(&RdbValue::Stream(Box::new(s))), Err(err));
    };
    refuses(&|s| s.nodes[1].master_id = (100, 0), RdbError::Duplicate);
    refuses(&|s| s.groups[1].name = b("42"), RdbError::Duplicate);
    refuses(
        &|s| s.groups[1].consumers[1].name = b("c1"),
        RdbError::Duplicate,
    );
    refuses(
        &|s| s.groups[1].pending[1].id = (100, 1),
        RdbError::Duplicate,
    );
    refuses(
        &|s| s.groups[1].consumers[1].pending = vec![(100, 1), (100, 1)],
        RdbError::Duplicate,
    );
    refuses(
        &|s| s.groups[1].consumers[1].pending.push((99, 0)),
        RdbError::Corrupt("consumer PEL entry not in the group PEL"),
    );
    refuses(
        &|s| s.groups[1].consumers[1].pending.push((101, 0)),
        RdbError::Corrupt("PEL entry owned by two consumers"),
    );
    refuses(
        &|s| {
            s.groups[1].consumers[1]
                .pending
                .pop()
                .map(drop)
                .unwrap_or(())
        },
        RdbError::Corrupt("group PEL entry without a consumer"),
    );
    // Redis 7.2's active time has no place in type 19.
    let mut s = redis_stream_claims();
    s.groups[0].consumers[0].active_time = Some(1);
    assert_eq!(
        to_hex(&dump(&RdbValue::Stream(Box::new(s))).unwrap()),
        REDIS_STREAM_CLAIMS
    );
}

#[test]
fn stream_type_21_has_active_times() {
    // REDIS_STREAM_GROUPS as Redis 7.2 writes it: type 21, each consumer's active time after
    // its seen time, RDB version 11.
    let h = REDIS_STREAM_GROUPS;
    let body = &h[..h.len() - 20];
    let alice = "05616c69636584d0fe25a2010000";
    let bob = "03626f6285d0fe25a2010000";
    assert_eq!(body.matches(alice).count(), 1);
    assert_eq!(body.matches(bob).count(), 1);
    let body = format!("15{}", &body[2..])
        .replace(alice, &format!("{alice}0100000000000000"))
        .replace(bob, &format!("{bob}ffffffffffffffff"));
    let decoded = stream_of(restore(&with_footer(&hex(&body), 11)).unwrap());
    let mut expected = redis_stream_groups();
    expected.groups[1].consumers[0].active_time = Some(1);
    expected.groups[1].consumers[1].active_time = Some(u64::MAX);
    assert_eq!(decoded, expected);
    // Dumped again as type 19, without them: Redis 7.0's bytes.
    let mut again = to_hex(&dump(&RdbValue::Stream(Box::new(decoded))).unwrap());
    assert_eq!(again, h);
    // The test encoder's type 21 decodes too, and a type 21 payload cut inside an active time
    // is truncated.
    let s = redis_stream_claims();
    let decoded = stream_of(restore(&with_footer(&stream_body(21, &s), 11)).unwrap());
    for (g, group) in decoded.groups.iter().zip(&s.groups) {
        for (c, original) in g.consumers.iter().zip(&group.consumers) {
            assert_eq!(c.active_time, Some(original.seen_time + 1));
        }
    }
    again = body;
    let cut = again.find(&format!("{bob}ffff")).unwrap() + bob.len() + 4;
    assert_eq!(
        restore(&with_footer(&hex(&again[..cut]), 11)),
        Err(RdbError::Truncated)
    );
}

#[test]
fn stream_type_15_gets_metadata_as_redis_7_2_loads_it() {
    // REDIS_STREAM_GROUPS as Redis 6.2 writes it: no first ID, greatest deleted ID, entries
    // added or entries read.
    let h = REDIS_STREAM_GROUPS;
    let from = "ff030201010101020402026730020181ffffffffffffffff0000026731020104";
    let to = "ff030201020267300201000002673102010";
    assert_eq!(h.matches(from).count(), 1);
    let body = format!("0f{}", &h[2..h.len() - 20]).replace(from, &to[..to.len() - 1]);
    let decoded = stream_of(restore(&payload(&hex(&body))).unwrap());
    let mut expected = redis_stream_groups();
    // Redis 7.2 takes the first live entry's ID, the length as entries added, and estimates
    // each group's entries read (both groups are at the last ID: entries added).
    expected.max_deleted_id = (0, 0);
    expected.entries_added = 3;
    expected.groups[0].entries_read = 3;
    expected.groups[1].entries_read = 3;
    assert_eq!(decoded, expected);

    // Estimates for other last IDs: before the first entry, at it, between, after the last.
    let mut s = redis_stream_groups();
    s.nodes[0].entries[0].deleted = true;
    s.nodes[0].entries[1].deleted = false;
    s.groups = [
        ((0, 5), 0),
        ((1, 2), 1),
        ((1, 9), -1),
        ((2, 1), 3),
        ((3, 0), -1),
    ]
    .iter()
    .enumerate()
    .map(|(i, &(last_id, _))| RdbStreamGroup {
        name: b(&format!("g{i}")),
        last_id,
        entries_read: 0,
        pending: vec![],
        consumers: vec![],
    })
    .collect();
    let decoded = stream_of(restore(&payload(&stream_body(15, &s))).unwrap());
    assert_eq!(decoded.first_id, (1, 2), "the first entry is deleted");
    let read: Vec<i64> = decoded.groups.iter().map(|g| g.entries_read).collect();
    assert_eq!(read, [0, 1, -1, 3, -1]);

    // A type 15 stream without live entries: Redis 7.2's edge ID search finds none.
    let empty = RdbStream {
        last_id: (4, 4),
        groups: vec![RdbStreamGroup {
            name: b("g"),
            last_id: (1, 0),
            ..RdbStreamGroup::default()
        }],
        ..RdbStream::default()
    };
    let decoded = stream_of(restore(&payload(&stream_body(15, &empty))).unwrap());
    assert_eq!(decoded.first_id, (u64::MAX, u64::MAX));
    assert_eq!(decoded.entries_added, 0);
    assert_eq!(decoded.groups[0].entries_read, 0);
}

/// A type 19 stream object of one node with listpack `lp` and no groups.
fn one_node_stream(lp: &[u8], length: u64) -> Vec<u8> {
    let mut body = vec![19, 1];
    body.extend_from_slice(&rdb_str(&[0u8; 16]));
    body.extend_from_slice(&rdb_str(lp));
    body.extend_from_slice(&[length as u8, 0, 0, 0, 0, 0, 0, 0, 0]);
    payload(&body)
}

#[test]
fn stream_listpacks_are_checked_as_redis_deep_sanitisation() {
    let good: &[&[u8]] = &[b"1", b"0", b"1", b"f", b"0", b"2", b"0", b"0", b"v", b"4"];
    assert_eq!(
        stream_of(restore(&one_node_stream(&listpack(good), 1)).unwrap()).nodes[0].entries,
        [entry((0, 0), false, &[("f", "v")])]
    );
    // Counts as strings are integers to Redis too; the header's element count is not checked.
    let mut lp = listpack(good);
    lp[4] = 3;
    assert!(restore(&one_node_stream(&lp, 1)).is_ok());
    let mut w = ListpackWriter::new();
    for item in good {
        if *item == b"4" {
            listpack_put_str(&mut w.buf, b"4");
            let (back, n) = backlen(2);
            w.buf.extend_from_slice(&back[..n]);
            w.count += 1;
        } else {
            w.push(item);
        }
    }
    assert!(restore(&one_node_stream(&w.finish(), 1)).is_ok());
    // Each of these is corrupt.
    let bad: &[&[&[u8]]] = &[
        &[],                                                           // empty listpack
        &[b"1", b"0", b"1", b"f", b"0", b"2", b"0", b"0", b"v"],       // no lp-count
        &[b"1", b"0", b"1", b"f", b"0", b"2", b"0", b"0", b"v", b"5"], // wrong lp-count
        &[
            b"1", b"0", b"1", b"f", b"0", b"2", b"0", b"0", b"v", b"4", b"x",
        ], // trailing
        &[b"1", b"0", b"1", b"f", b"1", b"2", b"0", b"0", b"v", b"4"], // no master terminator
        &[b"2", b"0", b"1", b"f", b"0", b"2", b"0", b"0", b"v", b"4"], // count beyond entries
        &[b"1", b"0", b"-1", b"0", b"2", b"0", b"0", b"2"],            // negative field count
        &[b"1", b"0", b"1", b"f", b"0", b"0", b"0", b"0", b"-1", b"2"], // negative fields
        &[b"x", b"0", b"1", b"f", b"0", b"2", b"0", b"0", b"v", b"4"], // count not a number
        &[b"1", b"0", b"1", b"f", b"0", b"2", b"a", b"0", b"v", b"4"], // ms-diff not a number
        &[b"1", b"0", b"3", b"f"],                                     // fields beyond the end
    ];
    for items in bad {
        let err = restore(&one_node_stream(&listpack(items), 1)).unwrap_err();
        assert!(matches!(err, RdbError::Corrupt(_)), "{items:?}: {err:?}");
    }
    // A listpack whose own framing is broken.
    let mut lp = listpack(good);
    lp[7] = 0x7F;
    assert!(matches!(
        restore(&one_node_stream(&lp, 1)),
        Err(RdbError::Corrupt(_))
    ));
    let mut lp = listpack(good);
    lp.truncate(lp.len() - 1);
    assert!(matches!(
        restore(&one_node_stream(&lp, 1)),
        Err(RdbError::Corrupt(_))
    ));
    // A node key that is not 16 bytes.
    let mut body = vec![19, 1];
    body.extend_from_slice(&rdb_str(&[0u8; 15]));
    body.extend_from_slice(&rdb_str(&listpack(good)));
    body.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        restore(&payload(&body)),
        Err(RdbError::Corrupt("stream node key is not a stream ID"))
    );
    // Two nodes with the same key.
    let mut body = vec![19, 2];
    for _ in 0..2 {
        body.extend_from_slice(&rdb_str(&[0u8; 16]));
        body.extend_from_slice(&rdb_str(&listpack(good)));
    }
    body.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(restore(&payload(&body)), Err(RdbError::Duplicate));
    // A length with no nodes.
    assert_eq!(
        restore(&payload(&[19, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0])),
        Err(RdbError::Corrupt(
            "stream length inconsistent with rax entries"
        ))
    );
    // Flags beyond deleted and same-fields are ignored, as by Redis.
    let odd: &[&[u8]] = &[b"1", b"0", b"1", b"f", b"0", b"6", b"0", b"0", b"v", b"4"];
    assert_eq!(
        stream_of(restore(&one_node_stream(&listpack(odd), 1)).unwrap()).nodes[0].entries,
        [entry((0, 0), false, &[("f", "v")])]
    );
}

#[test]
fn stream_groups_are_checked_as_redis_loads_them() {
    let base = redis_stream_claims();
    let check = |edit: &dyn Fn(&mut RdbStream), err: RdbError| {
        let mut s = base.clone();
        edit(&mut s);
        assert_eq!(
            restore(&payload(&stream_body(19, &s))),
            Err(err.clone()),
            "{err:?}"
        );
    };
    check(
        &|s| s.groups[1].consumers[1].pending.push((99, 0)),
        RdbError::Corrupt("consumer PEL entry not in the group PEL"),
    );
    check(
        &|s| s.groups[1].consumers[1].pending.push((101, 0)),
        RdbError::Corrupt("PEL entry owned by two consumers"),
    );
    check(
        &|s| {
            s.groups[1].consumers[1].pending.pop();
        },
        RdbError::Corrupt("group PEL entry without a consumer"),
    );
    check(&|s| s.groups[1].name = b("42"), RdbError::Duplicate);
    check(
        &|s| s.groups[0].consumers[1].name = b("c1"),
        RdbError::Duplicate,
    );
    check(
        &|s| s.groups[1].pending[2].id = (101, 0),
        RdbError::Duplicate,
    );
    check(
        &|s| s.groups[1].consumers[1].pending = vec![(100, 1), (100, 1), (102, 0)],
        RdbError::Duplicate,
    );
    // Written out of order, read back in rax order.
    let mut shuffled = base.clone();
    shuffled.nodes.swap(0, 2);
    shuffled.groups.swap(0, 1);
    shuffled.groups[0].pending.reverse();
    shuffled.groups[0].consumers.reverse();
    shuffled.groups[0].consumers[0].pending.reverse();
    assert_eq!(
        restore(&payload(&stream_body(19, &shuffled))),
        Ok(RdbValue::Stream(Box::new(base)))
    );
}

#[test]
fn malformed_streams_are_errors_not_panics() {
    for (h, _) in redis_streams() {
        let p = hex(h);
        let body = &p[..p.len() - FOOTER_LEN];
        // Every truncation.
        for cut in 0..body.len() {
            assert!(restore(&payload(&body[..cut])).is_err(), "{h} cut at {cut}");
        }
        // Every byte changed to a few values; whatever decodes dumps and decodes again.
        for i in 0..body.len() {
            for v in [
                0u8,
                1,
                0x3F,
                0x40,
                0x7F,
                0x80,
                0xC3,
                0xF0,
                0xFE,
                0xFF,
                body[i] ^ 1,
            ] {
                let mut bad = body.to_vec();
                bad[i] = v;
                if let Ok(value) = restore(&payload(&bad)) {
                    let again = dump(&value).expect("a decoded stream dumps");
                    assert_eq!(restore(&again), Ok(value));
                }
            }
        }
    }
    // Random bytes after a stream type byte.
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 64) as usize;
        let mut body = vec![[15u8, 19, 21][(x >> 8) as usize % 3]];
        for k in 0..len {
            let byte = (x.rotate_left(k as u32 * 7) >> 3) as u16 % [2, 4, 17, 256][k % 4];
            body.push(byte as u8);
        }
        let _ = restore(&payload(&body));
    }
    // A huge node count, PEL size or consumer count with nothing behind it.
    for body in [
        &[19u8, 0x81, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE][..],
        &[
            19, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, b'g', 0, 0, 0, 0x80, 0xFF, 0xFF, 0xFF, 0xFF,
        ][..],
        &[
            19, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, b'g', 0, 0, 0, 0, 0x80, 0xFF, 0xFF, 0xFF, 0xFF,
        ][..],
    ] {
        assert_eq!(restore(&payload(body)), Err(RdbError::Truncated));
    }
}

#[test]
fn stream_restore_is_held_to_the_limit() {
    // Same-fields entries share the master's field names, but each value and entry is charged.
    let p = dump(&RdbValue::Stream(Box::new(redis_stream_claims()))).unwrap();
    assert!(restore_with_limit(&p, 10_000).is_ok());
    assert_eq!(restore_with_limit(&p, 500), Err(RdbError::TooLarge(500)));
}

#[test]
fn lzf_is_redis_lzf() {
    // redis-server 7.0.15: SET k <value>; DUMP k (LZF-compressed strings).
    let cases = [
        (
            "abcabcabcabcabcabcabcabcabcabcabc".to_string(),
            "00c30b210361626361e012020162630a008d69cc0c04a4eb30",
        ),
        (
            "a".repeat(80),
            "00c3094050016161e043000161610a0028eeac7291dbc22b",
        ),
        (
            "hello world, hello world, hello world!!".to_string(),
            "00c315270d68656c6c6f20776f726c642c2068e00e0c0121210a0003a1c621c8845189",
        ),
    ];
    for (value, h) in cases {
        let value = value.as_str();
        let p = dump(&RdbValue::Str(b(value))).unwrap();
        assert_eq!(to_hex(&p), h, "{value}");
        assert_eq!(restore(&p), Ok(RdbValue::Str(b(value))));
    }
}
