//! Time-bounded random-input fuzzing on stable Rust, no extra dependencies: mutates valid and
//! invalid request/reply inputs with a small xorshift PRNG and feeds them, in random chunks, to
//! `RequestDecoder` and `parse_frame`. Asserts no panic, bounded buffered state, and that the
//! outcome does not depend on chunking. Runs for `GRADUS_FUZZ_SECS` seconds (default 5);
//! `GRADUS_FUZZ_SEED` fixes the seed. The cargo-fuzz targets in `/fuzz` cover the same ground
//! with coverage guidance on nightly.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use gradus_proto::{
    encode, parse_frame, Frame, Limits, ProtoError, ProtocolVersion, RequestDecoder,
};

/// xorshift64* PRNG.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

const TOKENS: &[&[u8]] = &[
    b"\r\n",
    b"\r",
    b"\n",
    b"*",
    b"$",
    b"*1\r\n",
    b"*3\r\n",
    b"*0\r\n",
    b"*-1\r\n",
    b"$-1\r\n",
    b"$0\r\n\r\n",
    b"$3\r\nfoo\r\n",
    b"$99999999999999999999\r\n",
    b"$4194305\r\n",
    b"$40000\r\n",
    b"*1048577\r\n",
    b"*1048576\r\n",
    b"-1",
    b"0",
    b"9",
    b"\"",
    b"'",
    b"\\",
    b"\\x",
    b"\\x4",
    b"\\xzz",
    b" ",
    b"\t",
    b"\0",
    b"%1\r\n",
    b"~2\r\n",
    b">1\r\n",
    b"|1\r\n",
    b",nan\r\n",
    b",1.5e10\r\n",
    b"#t\r\n",
    b"_\r\n",
    b"(123\r\n",
    b"=7\r\ntxt:abc\r\n",
    b"!3\r\nERR\r\n",
    b":-9223372036854775808\r\n",
    b"+OK\r\n",
    b"-ERR x\r\n",
];

fn seeds() -> Vec<Vec<u8>> {
    let mut s: Vec<Vec<u8>> = vec![
        b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n".to_vec(),
        b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".to_vec(),
        b"*2\r\n$4\r\nECHO\r\n$6\r\na\r\nb\r\n\r\n".to_vec(),
        b"PING\r\nSET \"a b\\x41\\n\" 'c\\'d' e\n".to_vec(),
        b"ECHO \"unterminated\r\n".to_vec(),
        b"*3\r\n$3\r\nSET\r\nX\r\n".to_vec(),
        b"\r\n\n*0\r\n".to_vec(),
    ];
    let frames = [
        Frame::array(vec![
            Frame::Integer(1),
            Frame::bulk_from_str("two"),
            Frame::Null,
            Frame::NullArray,
        ]),
        Frame::Map(vec![
            (Frame::simple("k"), Frame::Double(0.5)),
            (
                Frame::Boolean(true),
                Frame::Set(vec![Frame::BigNumber("-12".into())]),
            ),
        ]),
        Frame::Push(vec![Frame::Verbatim {
            format: *b"txt",
            text: Bytes::from_static(b"x\r\ny"),
        }]),
        Frame::error("WRONGTYPE Operation against a key holding the wrong kind of value"),
    ];
    for f in &frames {
        for v in [ProtocolVersion::Resp2, ProtocolVersion::Resp3] {
            let mut out = BytesMut::new();
            encode(f, v, &mut out);
            s.push(out.to_vec());
        }
    }
    s
}

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut v = seeds[rng.below(seeds.len())].clone();
    if rng.chance(4) {
        v.extend_from_slice(&seeds[rng.below(seeds.len())]);
    }
    for _ in 0..1 + rng.below(8) {
        let len = v.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                v[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                v[i] = b"*$\r\n\"'\\0-9 x"[rng.below(12)];
            }
            2 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                let i = rng.below(len + 1);
                v.splice(i..i, t.iter().copied());
            }
            3 if len > 0 => {
                let a = rng.below(len);
                let b = (a + 1 + rng.below(16)).min(len);
                v.drain(a..b);
            }
            4 if len > 0 => {
                let a = rng.below(len);
                let b = (a + 1 + rng.below(32)).min(len);
                let chunk: Vec<u8> = v[a..b].to_vec();
                let i = rng.below(len + 1);
                v.splice(i..i, chunk);
            }
            5 if len > 0 => v.truncate(rng.below(len)),
            6 => {
                for _ in 0..rng.below(16) {
                    v.push(rng.next() as u8);
                }
            }
            _ => {
                let t = TOKENS[rng.below(TOKENS.len())];
                v.extend_from_slice(t);
            }
        }
    }
    v.truncate(8192);
    v
}

type Outcome = (Vec<Vec<Bytes>>, Option<ProtoError>);

/// Feeds `input` to a fresh decoder in random chunks, checking bounded state after every call.
fn run_decoder(rng: &mut Rng, input: &[u8], limits: Limits, whole: bool) -> Outcome {
    let mut d = RequestDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut pos = 0;
    // Room is reserved from what arrived, never from a declared length (`payload_room`).
    let cap_bound = 4 * (input.len() + 2) + (128 << 10);
    while pos < input.len() {
        let n = if whole {
            input.len()
        } else {
            1 + rng.below(24)
        };
        let end = (pos + n).min(input.len());
        buf.extend_from_slice(&input[pos..end]);
        pos = end;
        loop {
            let r = d.decode(&mut buf);
            assert!(d.pending_args() <= limits.max_array_len);
            assert!(d.pending_bytes() <= input.len());
            assert!(
                buf.capacity() <= cap_bound,
                "buffer grew to {}",
                buf.capacity()
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

/// Feeds `input` to `parse_frame` in random chunks.
fn run_parser(rng: &mut Rng, input: &[u8], whole: bool) -> (Vec<Frame>, Option<ProtoError>) {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < input.len() {
        let n = if whole {
            input.len()
        } else {
            1 + rng.below(24)
        };
        let end = (pos + n).min(input.len());
        buf.extend_from_slice(&input[pos..end]);
        pos = end;
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

/// Frames compared with NaN equal to itself.
fn same_frames(a: &[Frame], b: &[Frame]) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

#[test]
fn fuzz_decoder_and_parser() {
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
    let corpus = seeds();
    let small = Limits {
        max_bulk_len: 16,
        max_array_len: 4,
        max_inline_len: 32,
    };
    let deadline = Instant::now() + Duration::from_secs_f64(secs.max(0.0));
    let mut runs: u64 = 0;
    while runs == 0 || Instant::now() < deadline {
        let input = mutate(&mut rng, &corpus);
        let chunk_seed = rng.next() | 1;
        let result = catch_unwind(AssertUnwindSafe(|| {
            let mut r = Rng(chunk_seed);
            // Default limits: inputs are far below them, so chunking must not matter.
            let whole = run_decoder(&mut r, &input, Limits::default(), true);
            let chunked = run_decoder(&mut r, &input, Limits::default(), false);
            assert_eq!(whole, chunked, "decoder outcome depends on chunking");
            // Tiny limits: exercise every limit branch.
            let _ = run_decoder(&mut r, &input, small, false);
            let (fw, ew) = run_parser(&mut r, &input, true);
            let (fc, ec) = run_parser(&mut r, &input, false);
            assert!(
                same_frames(&fw, &fc) && ew == ec,
                "parser outcome depends on chunking"
            );
        }));
        if let Err(panic) = result {
            eprintln!(
                "fuzz_decoder: failure with GRADUS_FUZZ_SEED={seed} on input {:?}",
                String::from_utf8_lossy(&input)
            );
            std::panic::resume_unwind(panic);
        }
        runs += 1;
    }
    println!("fuzz_decoder: ran {runs} inputs in {secs}s (GRADUS_FUZZ_SEED={seed})");
}
