//! HyperLogLog values, in Redis' representation so that the bytes a client reads with GET (and
//! writes with SET, or restores) are exchangeable with redis-server's.
//!
//! A HyperLogLog is a string: a 16-byte header (`HYLL`, the encoding byte, three zero bytes,
//! the cached cardinality as 8 little-endian bytes whose top bit set means "stale"), then 16384
//! registers of 6 bits. The *dense* encoding packs the registers (12288 bytes, least
//! significant bits first); the *sparse* encoding run-length codes them with three opcodes
//! (ZERO `00xxxxxx`: 1–64 zero registers, XZERO `01xxxxxx yyyyyyyy`: 1–16384 zero registers,
//! VAL `1vvvvvxx`: 1–4 registers of value 1–32) and is promoted to dense when a register needs
//! more than 32 or the string would grow past `hll-sparse-max-bytes`. Elements are hashed with
//! MurmurHash64A (seed `0xadc83b19`): the low 14 bits pick the register, the run of zeros above
//! them (plus one) is the value. The cardinality is Ertl's improved raw estimator, as Redis 7.
//! Every editing step follows Redis' own so the resulting bytes are the same.
//!
//! Pure functions over byte buffers; imports nothing from the server.

/// Header bytes before the registers.
pub const HDR: usize = 16;
/// Register index bits.
const P: u32 = 14;
/// Hash bits left for the zero run.
const Q: u32 = 64 - P;
/// Number of registers.
pub const REGISTERS: usize = 1 << P;
/// Bits per dense register.
const BITS: usize = 6;
const REGISTER_MAX: u8 = (1 << BITS) - 1;
/// Length of a dense HyperLogLog string.
pub const DENSE_SIZE: usize = HDR + (REGISTERS * BITS).div_ceil(8);
const DENSE: u8 = 0;
const SPARSE: u8 = 1;
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
const XZERO_MAX_LEN: usize = 16384;
/// 0.5 / ln(2).
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;
const SEED: u64 = 0xadc8_3b19;

/// A sparse HyperLogLog whose opcodes do not cover exactly the 16384 registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

/// MurmurHash64A as Redis has it (little-endian reads on every platform).
pub fn murmur64a(data: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (data.len() as u64).wrapping_mul(M);
    let mut chunks = data.chunks_exact(8);
    for chunk in chunks.by_ref() {
        let mut k = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= u64::from(b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element falls in and the value it offers (its zero run plus one, 1..=51).
pub fn pattern(element: &[u8]) -> (usize, u8) {
    let hash = murmur64a(element, SEED);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    let rest = (hash >> P) | (1 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

/// An empty HyperLogLog: sparse, all registers zero (one XZERO), cached cardinality 0.
pub fn new_sparse() -> Vec<u8> {
    let mut h = Vec::with_capacity(HDR + 2);
    h.extend_from_slice(b"HYLL");
    h.push(SPARSE);
    h.extend_from_slice(&[0; 11]);
    let mut left = REGISTERS;
    while left > 0 {
        let run = left.min(XZERO_MAX_LEN);
        push_xzero(&mut h, run);
        left -= run;
    }
    h
}

/// Whether `bytes` is a HyperLogLog as Redis checks it (header, encoding, dense length).
pub fn is_valid(bytes: &[u8]) -> bool {
    bytes.len() >= HDR
        && &bytes[..4] == b"HYLL"
        && bytes[4] <= SPARSE
        && (bytes[4] != DENSE || bytes.len() == DENSE_SIZE)
}

/// The cached cardinality, if it is not stale.
pub fn cached(h: &[u8]) -> Option<u64> {
    let card = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
    (h[15] & 0x80 == 0).then_some(card)
}

/// Store a freshly computed cardinality.
pub fn set_cached(h: &mut [u8], card: u64) {
    h[8..16].copy_from_slice(&card.to_le_bytes());
}

/// Mark the cached cardinality stale.
pub fn invalidate(h: &mut [u8]) {
    h[15] |= 0x80;
}

/// Add an element: Ok(true) when a register grew. The cache is invalidated by the caller.
pub fn add(h: &mut Vec<u8>, element: &[u8], sparse_max: usize) -> Result<bool, Corrupt> {
    let (index, count) = pattern(element);
    set_register(h, index, count, sparse_max)
}

/// Raise register `index` to `count` if it is lower: Ok(true) when it changed.
pub fn set_register(
    h: &mut Vec<u8>,
    index: usize,
    count: u8,
    sparse_max: usize,
) -> Result<bool, Corrupt> {
    match h[4] {
        DENSE => Ok(dense_set(&mut h[HDR..], index, count)),
        SPARSE => sparse_set(h, index, count, sparse_max),
        _ => Err(Corrupt),
    }
}

fn dense_get(regs: &[u8], index: usize) -> u8 {
    let byte = index * BITS / 8;
    let fb = (index * BITS) & 7;
    let b0 = u16::from(regs[byte]);
    let b1 = u16::from(regs.get(byte + 1).copied().unwrap_or(0));
    (((b0 >> fb) | (b1 << (8 - fb))) & u16::from(REGISTER_MAX)) as u8
}

fn dense_put(regs: &mut [u8], index: usize, value: u8) {
    let byte = index * BITS / 8;
    let fb = (index * BITS) & 7;
    let v = u16::from(value);
    let max = u16::from(REGISTER_MAX);
    regs[byte] &= !((max << fb) as u8);
    regs[byte] |= (v << fb) as u8;
    if let Some(next) = regs.get_mut(byte + 1) {
        *next &= !((max >> (8 - fb)) as u8);
        *next |= (v >> (8 - fb)) as u8;
    }
}

fn dense_set(regs: &mut [u8], index: usize, count: u8) -> bool {
    if count > dense_get(regs, index) {
        dense_put(regs, index, count);
        true
    } else {
        false
    }
}

/// One sparse opcode: how many registers it covers, their value, its length in bytes.
fn opcode(h: &[u8], p: usize) -> (usize, u8, usize) {
    let b = h[p];
    if b & 0xc0 == 0 {
        (usize::from(b & 0x3f) + 1, 0, 1)
    } else if b & 0xc0 == 0x40 {
        let low = usize::from(h.get(p + 1).copied().unwrap_or(0));
        (((usize::from(b & 0x3f) << 8) | low) + 1, 0, 2)
    } else {
        (usize::from(b & 0x3) + 1, ((b >> 2) & 0x1f) + 1, 1)
    }
}

fn is_val(b: u8) -> bool {
    b & 0x80 != 0
}

fn val_byte(value: u8, len: usize) -> u8 {
    0x80 | ((value - 1) << 2) | (len as u8 - 1)
}

fn push_xzero(out: &mut Vec<u8>, len: usize) {
    let l = len - 1;
    out.push(0x40 | (l >> 8) as u8);
    out.push((l & 0xff) as u8);
}

/// A run of `len` zero registers: ZERO when it fits, else XZERO.
fn push_zeros(out: &mut Vec<u8>, len: usize) {
    if len > ZERO_MAX_LEN {
        push_xzero(out, len);
    } else {
        out.push((len - 1) as u8);
    }
}

fn sparse_set(
    h: &mut Vec<u8>,
    index: usize,
    count: u8,
    sparse_max: usize,
) -> Result<bool, Corrupt> {
    if count > VAL_MAX_VALUE {
        return promote(h, index, count);
    }
    // Find the opcode that covers `index`.
    let end = h.len();
    let (mut p, mut first, mut span, mut prev) = (HDR, 0usize, 0usize, None);
    let mut op = (0, 0, 1);
    while p < end {
        op = opcode(h, p);
        span = op.0;
        if index < first + span {
            break;
        }
        prev = Some(p);
        p += op.2;
        first += span;
    }
    if span == 0 || p >= end {
        return Err(Corrupt);
    }
    let (runlen, value, oplen) = op;
    let is_value = is_val(h[p]);
    if is_value {
        if value >= count {
            return Ok(false);
        }
        if runlen == 1 {
            h[p] = val_byte(count, 1);
            merge_values(h, prev.unwrap_or(HDR));
            return Ok(true);
        }
    } else if oplen == 1 && runlen == 1 {
        h[p] = val_byte(count, 1);
        merge_values(h, prev.unwrap_or(HDR));
        return Ok(true);
    }
    // Split the opcode into up to three: before, the register, after.
    let last = first + span - 1;
    let mut seq = Vec::with_capacity(5);
    if is_value {
        if index != first {
            seq.push(val_byte(value, index - first));
        }
        seq.push(val_byte(count, 1));
        if index != last {
            seq.push(val_byte(value, last - index));
        }
    } else {
        if index != first {
            push_zeros(&mut seq, index - first);
        }
        seq.push(val_byte(count, 1));
        if index != last {
            push_zeros(&mut seq, last - index);
        }
    }
    let grows = seq.len() > oplen;
    if grows && h.len() + seq.len() - oplen > sparse_max {
        return promote(h, index, count);
    }
    let old_end = (p + oplen).min(h.len());
    h.splice(p..old_end, seq);
    merge_values(h, prev.unwrap_or(HDR));
    Ok(true)
}

/// Merge adjacent VAL opcodes of equal value (up to 4 registers) in the few opcodes from `p`.
fn merge_values(h: &mut Vec<u8>, mut p: usize) {
    let mut scan = 5;
    while p < h.len() && scan > 0 {
        scan -= 1;
        let b = h[p];
        if b & 0xc0 == 0x40 {
            p += 2;
            continue;
        }
        if b & 0xc0 == 0 {
            p += 1;
            continue;
        }
        if p + 1 < h.len() && is_val(h[p + 1]) {
            let (l1, v1, _) = opcode(h, p);
            let (l2, v2, _) = opcode(h, p + 1);
            if v1 == v2 && l1 + l2 <= VAL_MAX_LEN {
                h[p + 1] = val_byte(v1, l1 + l2);
                h.remove(p);
                continue;
            }
        }
        p += 1;
    }
}

fn promote(h: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Corrupt> {
    to_dense(h)?;
    dense_set(&mut h[HDR..], index, count);
    Ok(true)
}

/// Convert a sparse HyperLogLog to dense (the header, cache included, is kept).
pub fn to_dense(h: &mut Vec<u8>) -> Result<(), Corrupt> {
    if h[4] == DENSE {
        return Ok(());
    }
    let mut dense = vec![0u8; DENSE_SIZE];
    dense[..HDR].copy_from_slice(&h[..HDR]);
    dense[4] = DENSE;
    let regs = &mut dense[HDR..];
    let mut idx = 0;
    let mut p = HDR;
    while p < h.len() {
        let (run, value, len) = opcode(h, p);
        if value > 0 {
            if run + idx > REGISTERS {
                break;
            }
            for i in idx..idx + run {
                dense_put(regs, i, value);
            }
        }
        idx += run;
        p += len;
    }
    if idx != REGISTERS {
        return Err(Corrupt);
    }
    *h = dense;
    Ok(())
}

/// Raise each of `max` to the matching register of `h` (a valid HyperLogLog).
pub fn merge_into(max: &mut [u8], h: &[u8]) -> Result<(), Corrupt> {
    if h[4] == DENSE {
        for (i, m) in max.iter_mut().enumerate() {
            *m = (*m).max(dense_get(&h[HDR..], i));
        }
        return Ok(());
    }
    let mut idx = 0;
    let mut p = HDR;
    while p < h.len() {
        let (run, value, len) = opcode(h, p);
        if value > 0 {
            if run + idx > REGISTERS {
                break;
            }
            for m in &mut max[idx..idx + run] {
                *m = (*m).max(value);
            }
        }
        idx += run;
        p += len;
    }
    if idx == REGISTERS {
        Ok(())
    } else {
        Err(Corrupt)
    }
}

/// The estimated cardinality of a valid HyperLogLog (the cache is not read).
pub fn count(h: &[u8]) -> Result<u64, Corrupt> {
    let mut histogram = [0u32; 64];
    if h[4] == DENSE {
        for i in 0..REGISTERS {
            histogram[usize::from(dense_get(&h[HDR..], i))] += 1;
        }
    } else {
        let mut idx = 0;
        let mut p = HDR;
        while p < h.len() {
            let (run, value, len) = opcode(h, p);
            idx += run;
            histogram[usize::from(value)] += run as u32;
            p += len;
        }
        if idx != REGISTERS {
            return Err(Corrupt);
        }
    }
    Ok(estimate(&histogram))
}

/// The estimated cardinality of plain registers, one byte each.
pub fn count_registers(registers: &[u8]) -> u64 {
    let mut histogram = [0u32; 64];
    for &r in registers {
        histogram[usize::from(r & 63)] += 1;
    }
    estimate(&histogram)
}

/// Ertl's improved raw estimator ("New cardinality estimation algorithms for HyperLogLog
/// sketches", arXiv:1702.01284) over the register histogram.
fn estimate(histogram: &[u32; 64]) -> u64 {
    let m = REGISTERS as f64;
    let q = Q as usize;
    let mut z = m * tau((m - f64::from(histogram[q + 1])) / m);
    for j in (1..=q).rev() {
        z += f64::from(histogram[j]);
        z *= 0.5;
    }
    z += m * sigma(f64::from(histogram[0]) / m);
    (ALPHA_INF * m * m / z).round() as u64
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let before = z;
        z += x * y;
        y += y;
        if before == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let before = z;
        y *= 0.5;
        z -= (1.0 - x) * (1.0 - x) * y;
        if before == z {
            return z / 3.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_land_where_redis_puts_them() {
        // redis-server 7: PFADD k a b c, then GET k (and PFCOUNT k, which caches 3).
        let mut h = new_sparse();
        for e in [&b"a"[..], b"b", b"c"] {
            assert_eq!(add(&mut h, e, 3000), Ok(true));
        }
        invalidate(&mut h);
        let redis = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80`\xf3\x80P\xb1\x84K\xfb\x80BZ";
        assert_eq!(h, redis);
        assert_eq!(cached(&h), None);
        assert_eq!(count(&h), Ok(3));
        let mut one = new_sparse();
        add(&mut one, b"hello", 3000).unwrap();
        invalidate(&mut one);
        assert_eq!(one, b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80c\xff\x80[\xfe");
    }

    #[test]
    fn an_empty_hll_is_one_xzero_with_a_valid_zero_cache() {
        let h = new_sparse();
        assert_eq!(h, b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0\x7f\xff");
        assert!(is_valid(&h));
        assert_eq!(cached(&h), Some(0));
        assert_eq!(count(&h), Ok(0));
    }

    #[test]
    fn sparse_and_dense_agree_and_promotion_happens_at_the_limit() {
        let mut sparse = new_sparse();
        let mut dense = new_sparse();
        to_dense(&mut dense).unwrap();
        assert_eq!(dense.len(), DENSE_SIZE);
        for i in 0..400 {
            let e = format!("element-{i}");
            assert_eq!(
                add(&mut sparse, e.as_bytes(), 3000),
                add(&mut dense, e.as_bytes(), 3000)
            );
            assert_eq!(sparse[4], SPARSE, "400 elements fit in 3000 bytes");
        }
        assert_eq!(count(&sparse), count(&dense));
        let mut promoted = sparse.clone();
        to_dense(&mut promoted).unwrap();
        assert_eq!(promoted, dense);
        let estimate = count(&dense).unwrap();
        assert!((390..=410).contains(&estimate), "{estimate}");
        // A tight limit promotes on the first growth.
        let mut tight = new_sparse();
        add(&mut tight, b"x", HDR + 2).unwrap();
        assert_eq!(tight[4], DENSE);
    }

    #[test]
    fn merged_registers_count_like_the_union() {
        let (mut a, mut b, mut both) = (new_sparse(), new_sparse(), new_sparse());
        for i in 0..3000 {
            let e = format!("{i}");
            let target = if i % 2 == 0 { &mut a } else { &mut b };
            add(target, e.as_bytes(), 3000).unwrap();
            add(&mut both, e.as_bytes(), 3000).unwrap();
        }
        let mut max = vec![0u8; REGISTERS];
        merge_into(&mut max, &a).unwrap();
        merge_into(&mut max, &b).unwrap();
        assert_eq!(count_registers(&max), count(&both).unwrap());
    }

    #[test]
    fn corrupt_sparse_values_are_reported() {
        let mut h = new_sparse();
        h.truncate(HDR);
        assert_eq!(add(&mut h, b"x", 3000), Err(Corrupt));
        assert_eq!(count(&h), Err(Corrupt));
        assert_eq!(to_dense(&mut h), Err(Corrupt));
        assert!(
            !is_valid(b"HYLL\0\0\0\0\0\0\0\0\0\0\0\0"),
            "dense of the wrong length"
        );
    }
}
