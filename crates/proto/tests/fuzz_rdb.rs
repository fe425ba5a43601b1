//! Time-bounded random-input fuzzing of `rdb::restore` on stable Rust, no extra dependencies:
//! mutates valid DUMP payloads (every encoding `dump` writes, plus hand-made legacy ones: ziplist,
//! zipmap, type-3 sorted sets, LZF strings) with a small xorshift PRNG, and usually repairs the
//! footer's CRC so the mutation reaches the object decoder. Asserts no panic, bounded time per
//! input, and that whatever decodes is a value `dump` accepts and that survives another round
//! trip. Runs for `GRADUS_FUZZ_SECS` seconds (default 5); `GRADUS_FUZZ_SEED` fixes the seed. The
//! cargo-fuzz target `rdb_restore` in `/fuzz` covers the same ground with coverage guidance.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gradus_proto::rdb::{crc64, dump, dump_functions, restore, restore_functions, RdbValue};

/// xorshift64* PRNG.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// Appends RDB version 10 and the CRC-64 to an object body.
fn seal(body: &[u8]) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend_from_slice(&10u16.to_le_bytes());
    let crc = crc64(&p);
    p.extend_from_slice(&crc.to_le_bytes());
    p
}

fn seeds() -> Vec<Vec<u8>> {
    let values = vec![
        RdbValue::Str(b("hello")),
        RdbValue::Str(b("-70000")),
        RdbValue::Str(Bytes::from("abcd".repeat(40))),
        RdbValue::List(vec![b("a"), b("1"), b("-5000"), b("123456789012"), b("")]),
        RdbValue::List((0..900).map(|i| b(&format!("item{i}"))).collect()),
        RdbValue::Set(vec![b("1"), b("-2"), b("70000"), b("9223372036854775807")]),
        RdbValue::Set(vec![b("a"), b("b"), b("17")]),
        RdbValue::ZSet(vec![(b("a"), 1.5), (b("b"), f64::INFINITY), (b("c"), -3.0)]),
        RdbValue::ZSet(
            (0..130)
                .map(|i| (b(&format!("m{i}")), f64::from(i) / 7.0))
                .collect(),
        ),
        RdbValue::Hash(vec![(b("f"), b("v")), (b("n"), b("12"))]),
        RdbValue::Hash(
            (0..130)
                .map(|i| (b(&format!("f{i}")), b(&i.to_string())))
                .collect(),
        ),
    ];
    let mut seeds: Vec<Vec<u8>> = values.iter().map(|v| dump(v).unwrap().to_vec()).collect();
    // Ziplist list (type 10): "a", immediate 5, int16 -2.
    let zl: &[u8] = &[
        20, 0, 0, 0, 15, 0, 0, 0, 3, 0, 0, 0x01, b'a', 3, 0xF6, 2, 0xC0, 0xFE, 0xFF, 0xFF,
    ];
    let mut body = vec![10, zl.len() as u8];
    body.extend_from_slice(zl);
    seeds.push(seal(&body));
    // Quicklist (type 14) of that ziplist, twice.
    let mut body = vec![14, 2];
    for _ in 0..2 {
        body.push(zl.len() as u8);
        body.extend_from_slice(zl);
    }
    seeds.push(seal(&body));
    // Zipmap hash (type 9).
    let zm: &[u8] = b"\x02\x03foo\x03\x00bar\x05hello\x05\x00world\xff";
    let mut body = vec![9, zm.len() as u8];
    body.extend_from_slice(zm);
    seeds.push(seal(&body));
    // Type-3 sorted set with text scores, type-1 list, type-4 hash, LZF string.
    seeds.push(seal(&[3, 2, 1, b'a', 3, b'1', b'.', b'5', 1, b'b', 254]));
    seeds.push(seal(&[1, 2, 1, b'a', 0xC0, 7]));
    seeds.push(seal(&[4, 1, 1, b'f', 0xC1, 0x39, 0x30]));
    seeds.push(seal(&[0, 0xC3, 5, 21, 0x00, b'a', 0xE0, 0x0B, 0x00]));
    seeds
}

const INTERESTING: &[u8] = &[
    0x00, 0x01, 0x02, 0x3F, 0x40, 0x7F, 0x80, 0x81, 0xBF, 0xC0, 0xC1, 0xC2, 0xC3, 0xC4, 0xE0, 0xEF,
    0xF0, 0xF1, 0xF4, 0xF5, 0xFD, 0xFE, 0xFF,
];

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut input = seeds[rng.below(seeds.len())].clone();
    // Work on the body; the footer is re-attached (repaired or not) below.
    let footer = input.split_off(input.len() - 10);
    for _ in 0..1 + rng.below(4) {
        let len = input.len();
        match rng.below(7) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 => {
                let i = rng.below(len + 1);
                input.insert(i, INTERESTING[rng.below(INTERESTING.len())]);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(16));
                input.drain(i..i + n);
            }
            4 => input.truncate(rng.below(len + 1)),
            5 => {
                let other = &seeds[rng.below(seeds.len())];
                let body = &other[..other.len() - 10];
                let from = rng.below(body.len());
                let n = rng.below(body.len() - from + 1);
                let at = rng.below(len + 1);
                input.splice(at..at, body[from..from + n].iter().copied());
            }
            _ if len > 0 => {
                let i = rng.below(len);
                input[i] = rng.next() as u8;
            }
            _ => {}
        }
    }
    if rng.chance(10) {
        // Keep the old footer: the checksum (or the length) is now wrong.
        input.extend_from_slice(&footer);
        if rng.chance(3) {
            let i = rng.below(input.len());
            input.truncate(i);
        }
        input
    } else {
        seal(&input)
    }
}

fn check(input: &[u8]) {
    let start = Instant::now();
    let result = restore(input);
    assert!(start.elapsed() < Duration::from_secs(2), "slow input");
    if let Ok(value) = result {
        let payload = dump(&value).expect("a decoded value is dumpable");
        let again = restore(&payload).expect("a dumped value decodes");
        // Sets and sorted sets may come back reordered; compare sizes and kinds.
        match (&value, &again) {
            (RdbValue::Str(a), RdbValue::Str(b)) => assert_eq!(a, b),
            (RdbValue::List(a), RdbValue::List(b)) => assert_eq!(a, b),
            (RdbValue::Hash(a), RdbValue::Hash(b)) => assert_eq!(a, b),
            (RdbValue::Stream(a), RdbValue::Stream(b)) => assert_eq!(a, b),
            (RdbValue::Set(a), RdbValue::Set(b)) => assert_eq!(a.len(), b.len()),
            (RdbValue::ZSet(a), RdbValue::ZSet(b)) => assert_eq!(a.len(), b.len()),
            (a, b) => panic!("round trip changed the type: {a:?} -> {b:?}"),
        }
    }
    // The same bytes as a FUNCTION RESTORE payload: libraries' code that dumps back the same.
    if let Ok(codes) = restore_functions(input) {
        let refs: Vec<&[u8]> = codes.iter().map(|c| c.as_ref()).collect();
        assert_eq!(restore_functions(&dump_functions(&refs)).unwrap(), codes);
    }
}

#[test]
fn fuzz_restore() {
    let secs: f64 = std::env::var("GRADUS_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let seed: u64 = std::env::var("GRADUS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
        | 1;
    let mut rng = Rng(seed);
    let seeds = seeds();
    for s in &seeds {
        assert!(restore(s).is_ok(), "seed does not decode: {s:?}");
    }
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let (mut runs, mut decoded) = (0u64, 0u64);
    while Instant::now() < deadline {
        let input = mutate(&mut rng, &seeds);
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| check(&input))) {
            eprintln!("fuzz_rdb: failure with GRADUS_FUZZ_SEED={seed} on input {input:02x?}");
            std::panic::resume_unwind(panic);
        }
        decoded += u64::from(restore(&input).is_ok());
        runs += 1;
    }
    println!(
        "fuzz_rdb: ran {runs} inputs ({decoded} decoded) in {secs}s (GRADUS_FUZZ_SEED={seed})"
    );
}
