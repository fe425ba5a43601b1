//! Property tests of the DUMP/RESTORE codec: for random strings, lists, sets, sorted sets and
//! hashes on both sides of every compact-encoding threshold (integers of every width, long and
//! compressible strings, 0–600 elements), `restore(dump(v))` gives back `v` (sets and sorted sets
//! compared as sets, since their compact encodings are ordered), and a dumped payload with any
//! single byte changed is refused.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use gradus_proto::rdb::{dump, restore, RdbValue};
use proptest::prelude::*;
use proptest::test_runner::RngAlgorithm;

/// xorshift64*: generating hundreds of elements with nested proptest strategies is far slower in
/// debug builds than the codec itself, so proptest draws the kind, size and a seed, and the
/// elements come from this generator.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Element text: integers of every listpack/intset width, near-integers, short and long
    /// strings, binary data, and long runs that LZF compresses.
    fn element(&mut self) -> Bytes {
        let text = match self.below(12) {
            0..=2 => (self.below(400) as i64 - 200).to_string().into_bytes(),
            3 | 4 => (self.next() as i64 >> self.below(64))
                .to_string()
                .into_bytes(),
            5 => ["-0", "007", "+1", "1.0", " 1", "9223372036854775808"][self.below(6) as usize]
                .as_bytes()
                .to_vec(),
            6..=8 => {
                let n = self.below(13);
                (0..n).map(|_| b'a' + self.below(26) as u8).collect()
            }
            9 | 10 => {
                let n = self.below(80);
                (0..n).map(|_| self.next() as u8).collect()
            }
            _ => {
                let unit = self.below(60) as usize + 1;
                let reps = self.below(200) as usize + 1;
                "ab".repeat(unit).repeat(reps).into_bytes()
            }
        };
        Bytes::from(text)
    }

    fn score(&mut self) -> f64 {
        match self.below(7) {
            0..=2 => (self.below(2000) as i64 - 1000) as f64,
            3 | 4 => {
                let s = f64::from_bits(self.next());
                if s.is_nan() {
                    0.5
                } else {
                    s
                }
            }
            _ => [
                f64::INFINITY,
                f64::NEG_INFINITY,
                -0.0,
                0.1,
                1e300,
                f64::MIN_POSITIVE,
                9.0e15,
                -9.007_199_254_740_993e15,
            ][self.below(8) as usize],
        }
    }

    /// `n` distinct elements (fewer if the generator keeps repeating itself).
    fn distinct(&mut self, n: usize, mut make: impl FnMut(&mut Self) -> Bytes) -> Vec<Bytes> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(n);
        for _ in 0..n * 4 {
            if out.len() == n {
                break;
            }
            let e = make(self);
            if seen.insert(e.clone()) {
                out.push(e);
            }
        }
        out
    }
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![6 => 1usize..20, 2 => 120usize..140, 1 => 500usize..600]
}

fn value() -> impl Strategy<Value = RdbValue> {
    (0u8..7, size(), any::<u64>()).prop_map(|(kind, n, seed)| {
        let mut g = Gen(seed | 1);
        match kind {
            0 => RdbValue::Str(g.element()),
            1 => RdbValue::List((0..n).map(|_| g.element()).collect()),
            2 => RdbValue::List(vec![Bytes::from(
                (0..4000 + g.below(6000))
                    .map(|_| g.next() as u8)
                    .collect::<Vec<u8>>(),
            )]),
            3 => RdbValue::Set(g.distinct(n, Gen::element)),
            4 => RdbValue::Set(g.distinct(n, |g| {
                Bytes::from((g.below(140_000) as i64 - 70_000).to_string())
            })),
            5 => {
                let members = g.distinct(n, Gen::element);
                RdbValue::ZSet(members.into_iter().map(|m| (m, g.score())).collect())
            }
            _ => {
                let fields = g.distinct(n, Gen::element);
                RdbValue::Hash(fields.into_iter().map(|f| (f, g.element())).collect())
            }
        }
    })
}

/// Sets as sets, sorted sets as member → score bits; lists, hashes and strings as they are.
#[derive(Debug, PartialEq)]
enum Normal {
    Str(Bytes),
    List(Vec<Bytes>),
    Set(BTreeSet<Bytes>),
    ZSet(BTreeMap<Bytes, u64>),
    Hash(Vec<(Bytes, Bytes)>),
}

fn normal(v: &RdbValue) -> Normal {
    match v {
        RdbValue::Str(s) => Normal::Str(s.clone()),
        RdbValue::List(l) => Normal::List(l.clone()),
        RdbValue::Set(s) => Normal::Set(s.iter().cloned().collect()),
        RdbValue::ZSet(z) => {
            Normal::ZSet(z.iter().map(|(m, s)| (m.clone(), s.to_bits())).collect())
        }
        RdbValue::Hash(h) => Normal::Hash(h.clone()),
        RdbValue::Stream(_) => unreachable!("the generator makes no streams"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        rng_algorithm: RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    })]

    #[test]
    fn dump_restore_round_trip(v in value()) {
        let payload = dump(&v).unwrap();
        let back = restore(&payload).unwrap();
        prop_assert_eq!(normal(&back), normal(&v));
        // Dumping the decoded value gives a payload that decodes to the same value again.
        let again = restore(&dump(&back).unwrap()).unwrap();
        prop_assert_eq!(normal(&again), normal(&v));
    }

    #[test]
    fn any_changed_byte_is_refused(v in value(), at in any::<prop::sample::Index>(), x in 1u8..=255) {
        let mut payload = dump(&v).unwrap().to_vec();
        let i = at.index(payload.len());
        payload[i] ^= x;
        prop_assert!(restore(&payload).is_err());
    }
}
