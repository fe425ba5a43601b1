//! Number parsing and formatting shared by the codecs: Redis' strict `string2ll` rules for request
//! lengths, lenient signed integers for replies, and the Redis 7.2 `d2string` double layout.
//! `parse_strict_i64` is Redis' one rule for "this string is an integer", exported for the store
//! (encodings), the server (arguments) and the RDB codec; the rest is private to the crate. Pure functions over byte slices, no allocation on the hot paths, no I/O.

/// Parses `s` with Redis' `string2ll` rules: an optional `-`, then either a lone `0` or a digit
/// 1-9 followed by digits; no `+`, no spaces, no leading zeros, no `-0`; must fit an `i64`.
/// Returns `None` for anything else.
#[inline]
pub fn parse_strict_i64(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    match digits {
        [b'0'] if !neg => Some(0),
        [b'1'..=b'9', ..] => accumulate(digits, neg),
        _ => None,
    }
}

/// Parses a reply integer: optional `+`/`-`, then one or more ASCII digits (leading zeros
/// allowed), fitting an `i64`.
pub(crate) fn parse_lenient_i64(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, s),
    };
    if digits.is_empty() {
        return None;
    }
    accumulate(digits, neg)
}

/// Accumulates decimal `digits` negatively (so `i64::MIN` is reachable); `None` on a non-digit
/// or overflow.
#[inline]
fn accumulate(digits: &[u8], neg: bool) -> Option<i64> {
    let mut v: i64 = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_sub(i64::from(d))?;
    }
    if neg {
        Some(v)
    } else {
        v.checked_neg()
    }
}

/// A small stack buffer that formatted numbers are written into. Writes past its capacity are
/// dropped (they cannot happen for the formats below, whose longest output is 25 bytes).
pub(crate) struct NumBuf {
    buf: [u8; 48],
    len: usize,
}

impl NumBuf {
    pub(crate) fn new() -> Self {
        NumBuf {
            buf: [0; 48],
            len: 0,
        }
    }

    #[inline]
    fn push(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    #[inline]
    fn extend(&mut self, s: &[u8]) {
        for &b in s {
            self.push(b);
        }
    }

    fn zeros(&mut self, n: i32) {
        for _ in 0..n {
            self.push(b'0');
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

/// Largest magnitude Redis prints as an integer: `(double)(LLONG_MAX / 2)`, i.e. 2^62.
const INT_PRINT_LIMIT: f64 = 4_611_686_018_427_387_904.0;

/// Shortest round-trip decimal digits of a finite, positive, non-zero `v`: returns the digit
/// buffer, the number of significant digits `n` (no leading/trailing zeros) and the decimal
/// exponent `e` of the first digit, so that `v == 0.d1d2..dn * 10^(e+1)`.
fn shortest_digits(v: f64) -> ([u8; 24], usize, i32) {
    let mut ryu_buf = ryu::Buffer::new();
    let text = ryu_buf.format_finite(v).as_bytes();
    let mut digits = [0u8; 24];
    let mut n = 0usize;
    let mut int_count: i32 = 0; // significant digits seen before the point
    let mut frac_zeros: i32 = 0; // zeros after the point before the first significant digit
    let mut seen_point = false;
    let mut seen_sig = false;
    let mut exp: i32 = 0;
    let mut iter = text.iter();
    for &c in iter.by_ref() {
        match c {
            b'.' => seen_point = true,
            b'e' | b'E' => break,
            b'0'..=b'9' => {
                if c == b'0' && !seen_sig {
                    if seen_point {
                        frac_zeros += 1;
                    }
                    continue;
                }
                seen_sig = true;
                if let Some(slot) = digits.get_mut(n) {
                    *slot = c;
                    n += 1;
                }
                if !seen_point {
                    int_count += 1;
                }
            }
            _ => {}
        }
    }
    if let Some(x) = parse_lenient_i64(iter.as_slice()) {
        exp = i32::try_from(x).unwrap_or(0);
    }
    while n > 1 && digits.get(n - 1) == Some(&b'0') {
        n -= 1;
    }
    let e = if int_count > 0 {
        int_count - 1 + exp
    } else {
        -(frac_zeros + 1) + exp
    };
    (digits, n, e)
}

/// Writes `v` the way Redis 7.2's `d2string` does (used by its `addReplyDouble`): `nan`, `inf`,
/// `-inf`, `0`/`-0`; integral values with |v| <= 2^62 as plain integers; otherwise the shortest
/// round-trip digits laid out like Redis' fpconv: plain when the exponent is small, else
/// `d.ddde+N` / `d.ddde-N` (exponent without zero padding).
pub(crate) fn write_double(v: f64, out: &mut NumBuf) {
    if v.is_nan() {
        return out.extend(b"nan");
    }
    if v.is_infinite() {
        return out.extend(if v < 0.0 { b"-inf" } else { b"inf" });
    }
    if v == 0.0 {
        return out.extend(if v.is_sign_negative() { b"-0" } else { b"0" });
    }
    if (-INT_PRINT_LIMIT..=INT_PRINT_LIMIT).contains(&v) && v.trunc() == v {
        // In range and integral, so the cast is exact.
        return out.extend(itoa::Buffer::new().format(v as i64).as_bytes());
    }
    if v < 0.0 {
        out.push(b'-');
    }
    let (digits, n, e) = shortest_digits(v.abs());
    let digits = digits.get(..n).unwrap_or(&[]);
    let n = n as i32;
    let k = e - (n - 1); // v == digits * 10^k
    let abs_e = e.abs();
    if k >= 0 && abs_e < n + 7 {
        out.extend(digits);
        out.zeros(k);
    } else if k < 0 && (k > -7 || abs_e < 4) {
        let offset = n + k;
        if offset <= 0 {
            out.extend(b"0.");
            out.zeros(-offset);
            out.extend(digits);
        } else {
            let (int_part, frac_part) = digits.split_at((offset as usize).min(digits.len()));
            out.extend(int_part);
            out.push(b'.');
            out.extend(frac_part);
        }
    } else {
        let (first, rest) = digits.split_at(1.min(digits.len()));
        out.extend(first);
        if !rest.is_empty() {
            out.push(b'.');
            out.extend(rest);
        }
        out.push(b'e');
        out.push(if e < 0 { b'-' } else { b'+' });
        out.extend(itoa::Buffer::new().format(abs_e).as_bytes());
    }
}

/// Formats `v` like Redis' "human friendly" long-double output used by INCRBYFLOAT and
/// HINCRBYFLOAT (`%.17Lf` with trailing zeros trimmed): never an exponent, at most 17 fractional
/// digits, `-0` printed as `0`. Built from the shortest round-trip digits of the `f64`, so 0.1
/// prints as `0.1` (Redis computes in long double and gets the same text for such inputs).
pub(crate) fn format_human(v: f64) -> String {
    if v.is_nan() {
        return "nan".to_owned();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.to_owned();
    }
    if v == 0.0 {
        return "0".to_owned();
    }
    let (digits, n, e) = shortest_digits(v.abs());
    let digits = digits.get(..n).unwrap_or(&[]);
    // Split into integer and fractional digit strings.
    let mut int_part: Vec<u8> = Vec::new();
    let mut frac: Vec<u8> = Vec::new();
    if e >= 0 {
        let int_len = (e as usize) + 1;
        for i in 0..int_len {
            int_part.push(digits.get(i).copied().unwrap_or(b'0'));
        }
        frac.extend_from_slice(digits.get(int_len..).unwrap_or(&[]));
    } else {
        int_part.push(b'0');
        frac.resize((-e - 1) as usize, b'0');
        frac.extend_from_slice(digits);
    }
    const MAX_FRAC: usize = 17;
    if frac.len() > MAX_FRAC {
        let round_up = frac.get(MAX_FRAC).is_some_and(|&d| d >= b'5');
        frac.truncate(MAX_FRAC);
        if round_up {
            let mut carry = true;
            for d in frac.iter_mut().rev().chain(int_part.iter_mut().rev()) {
                if *d == b'9' {
                    *d = b'0';
                } else {
                    *d += 1;
                    carry = false;
                    break;
                }
            }
            if carry {
                int_part.insert(0, b'1');
            }
        }
    }
    while frac.last() == Some(&b'0') {
        frac.pop();
    }
    let is_zero = int_part.iter().all(|&d| d == b'0') && frac.is_empty();
    let mut s = String::with_capacity(int_part.len() + frac.len() + 2);
    if v < 0.0 && !is_zero {
        s.push('-');
    }
    s.extend(int_part.iter().map(|&d| char::from(d)));
    if !frac.is_empty() {
        s.push('.');
        s.extend(frac.iter().map(|&d| char::from(d)));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(v: f64) -> String {
        let mut b = NumBuf::new();
        write_double(v, &mut b);
        String::from_utf8_lossy(b.as_bytes()).into_owned()
    }

    #[test]
    fn strict_i64() {
        assert_eq!(parse_strict_i64(b"0"), Some(0));
        assert_eq!(parse_strict_i64(b"123"), Some(123));
        assert_eq!(parse_strict_i64(b"-1"), Some(-1));
        assert_eq!(parse_strict_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_strict_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"1a",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"99999999999999999999999",
        ] {
            assert_eq!(parse_strict_i64(bad), None, "{:?}", bad);
        }
    }

    #[test]
    fn lenient_i64() {
        assert_eq!(parse_lenient_i64(b"+5"), Some(5));
        assert_eq!(parse_lenient_i64(b"007"), Some(7));
        assert_eq!(parse_lenient_i64(b"-0"), Some(0));
        assert_eq!(parse_lenient_i64(b"-"), None);
        assert_eq!(parse_lenient_i64(b""), None);
    }

    #[test]
    fn doubles_like_redis_72() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (-3.0, "-3"),
            (1.5, "1.5"),
            (0.5, "0.5"),
            (0.1, "0.1"),
            (0.1 + 0.2, "0.30000000000000004"),
            (0.0001, "0.0001"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (3.14159e-5, "3.14159e-5"),
            (123456.789, "123456.789"),
            (1234567890123.5, "1234567890123.5"),
            (1e8, "100000000"),
            (1e17, "100000000000000000"),
            (4611686018427387904.0, "4611686018427387904"),
            (1e19, "1e+19"),
            (1e20, "1e+20"),
            (-1e20, "-1e+20"),
            (1.2345678901234567e19, "12345678901234567000"),
            (1e300, "1e+300"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
            (3.5e-3, "0.0035"),
            (1.23456789, "1.23456789"),
        ];
        for &(v, want) in cases {
            assert_eq!(d(v), want, "formatting {v:e}");
        }
    }

    #[test]
    fn doubles_round_trip() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = f64::from_bits(x);
            if !v.is_finite() {
                continue;
            }
            let s = d(v);
            assert_eq!(s.parse::<f64>().ok(), Some(v), "{s}");
        }
    }

    #[test]
    fn human_doubles() {
        let cases: &[(f64, &str)] = &[
            (0.1, "0.1"),
            (10.5, "10.5"),
            (3.0e3, "3000"),
            (1e20, "100000000000000000000"),
            (-0.0, "0"),
            (-2.5, "-2.5"),
            (1.5e-20, "0"),
            (1.5e-17, "0.00000000000000002"),
            (0.30000000000000004, "0.30000000000000004"),
            (5.0e-18, "0.00000000000000001"),
            (0.99999999999999999999, "1"),
            (f64::INFINITY, "inf"),
        ];
        for &(v, want) in cases {
            assert_eq!(format_human(v), want, "formatting {v:e}");
        }
    }
}
