//! Redis' `long double` (x87 80-bit extended precision on x86-64) for HINCRBYFLOAT: `strtold`
//! parsing with `string2ld`'s checks, correctly rounded addition, and `%.17Lf` printing with
//! trailing zeros removed (`ld2string(..., LD_STR_HUMAN)`), so `0.1 + 0.2` gives `0.3` and
//! `1024 + 0.1` gives `1024.09999999999999998` exactly as Redis replies.
//!
//! Values are `mant × 2^exp` with a 64-bit significand; exact intermediate results use a small
//! unsigned big integer. Subnormal results are flushed to zero (Redis would keep a subnormal
//! long double; no realistic counter gets there). Pure arithmetic: no I/O, no allocation beyond
//! the big integers, which input length bounds (Redis rejects number texts of 5 KiB or more).
//!
//! May import: nothing of the server.

use std::cmp::Ordering;

/// `string2ld` rejects texts this long or longer (`MAX_LONG_DOUBLE_CHARS`).
const MAX_CHARS: usize = 5 * 1024;
/// Exponent (of the top significand bit) limits of the x87 extended format.
const MAX_TOP_EXP: i64 = 16383;
const MIN_TOP_EXP: i64 = -16382;
/// Fractional digits printed by `%.17Lf`.
const FRAC_DIGITS: u32 = 17;

/// A finite extended-precision value: `(-1)^negative × mant × 2^exp`; `mant` has its top bit
/// set, or is 0 for zero.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LongDouble {
    negative: bool,
    mant: u64,
    exp: i64,
}

/// What [`parse`] accepts: a finite value or an infinity (Redis lets `inf` through
/// `string2ld`; callers reject it with their own message).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Parsed {
    Finite(LongDouble),
    Infinite,
}

impl LongDouble {
    pub const ZERO: LongDouble = LongDouble {
        negative: false,
        mant: 0,
        exp: 0,
    };

    /// `self + other`, rounded to nearest-even; None when the sum overflows to infinity.
    pub fn checked_add(self, other: LongDouble) -> Option<LongDouble> {
        if other.mant == 0 {
            return Some(self);
        }
        if self.mant == 0 {
            return Some(other);
        }
        let base = self.exp.min(other.exp);
        let a = Big::from_u64(self.mant).shl((self.exp - base) as usize);
        let b = Big::from_u64(other.mant).shl((other.exp - base) as usize);
        let (negative, magnitude) = if self.negative == other.negative {
            (self.negative, a.add(&b))
        } else {
            match a.cmp(&b) {
                Ordering::Equal => return Some(LongDouble::ZERO),
                Ordering::Greater => (self.negative, a.sub(&b)),
                Ordering::Less => (other.negative, b.sub(&a)),
            }
        };
        round_big(negative, &magnitude, false, base)
    }

    /// The text `ld2string(LD_STR_HUMAN)` produces: `%.17Lf`, trailing zeros and a bare `.`
    /// removed, `-0` printed as `0`.
    /// The nearest `f64` (infinite past its range, zero below it).
    pub fn to_f64(self) -> f64 {
        let magnitude = if self.mant == 0 {
            0.0
        } else {
            // Split the scaling so an exponent near f64's limits neither overflows nor
            // underflows early.
            let half = (self.exp.clamp(-2200, 2200) / 2) as i32;
            let rest = (self.exp.clamp(-2200, 2200) as i32) - half;
            self.mant as f64 * 2f64.powi(half) * 2f64.powi(rest)
        };
        if self.negative {
            -magnitude
        } else {
            magnitude
        }
    }

    pub fn to_human_string(self) -> String {
        if self.mant == 0 {
            return "0".to_owned();
        }
        let mant = Big::from_u64(self.mant);
        let scaled_digits = if self.exp >= 0 {
            mant.shl(self.exp as usize)
                .mul_pow10(FRAC_DIGITS)
                .to_decimal()
        } else {
            // round(mant × 10^17 / 2^k), ties to even (glibc's printf in round-to-nearest).
            let k = (-self.exp) as usize;
            let (half_units, sticky) = mant.mul_pow10(FRAC_DIGITS).shr_sticky(k - 1);
            let round_bit = half_units.bit(0);
            let units = half_units.shr(1);
            let round_up = round_bit && (sticky || units.bit(0));
            let units = if round_up {
                units.add(&Big::from_u64(1))
            } else {
                units
            };
            units.to_decimal()
        };
        let digits = format!(
            "{:0>width$}",
            scaled_digits,
            width = FRAC_DIGITS as usize + 1
        );
        let (int_part, frac_part) = digits.split_at(digits.len() - FRAC_DIGITS as usize);
        let frac_part = frac_part.trim_end_matches('0');
        let mut out = String::with_capacity(digits.len() + 2);
        let is_zero = frac_part.is_empty() && int_part.bytes().all(|b| b == b'0');
        if self.negative && !is_zero {
            out.push('-');
        }
        out.push_str(int_part);
        if !frac_part.is_empty() {
            out.push('.');
            out.push_str(frac_part);
        }
        out
    }
}

/// Parse like Redis' `string2ld`: `strtold` syntax (decimal, hexadecimal `0x1.8p3`, `inf`,
/// `infinity`), the whole text consumed, no leading space, no NaN, no overflow and no
/// underflow to zero.
pub fn parse(text: &[u8]) -> Option<Parsed> {
    if text.is_empty()
        || text.len() >= MAX_CHARS
        || text[0].is_ascii_whitespace()
        || text[0] == 0x0b
    {
        return None;
    }
    let (negative, body) = match text[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = body.to_ascii_lowercase();
    if lower == b"inf" || lower == b"infinity" {
        return Some(Parsed::Infinite);
    }
    if lower.len() > 2 && lower.starts_with(b"0x") {
        return parse_hex(negative, &lower[2..]).map(Parsed::Finite);
    }
    parse_decimal(negative, &lower).map(Parsed::Finite)
}

/// Split `digits[.digits]` at the start of `s`: (all mantissa digits, digits after the point,
/// bytes consumed). None when there is no digit at all.
fn mantissa(s: &[u8], is_digit: impl Fn(u8) -> bool) -> Option<(Vec<u8>, usize, usize)> {
    let mut digits = Vec::new();
    let mut frac = 0usize;
    let mut seen_point = false;
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if is_digit(c) {
            digits.push(c);
            if seen_point {
                frac += 1;
            }
        } else if c == b'.' && !seen_point {
            seen_point = true;
        } else {
            break;
        }
        i += 1;
    }
    (!digits.is_empty()).then_some((digits, frac, i))
}

/// A signed decimal exponent filling all of `s` (saturating far beyond any finite value).
fn exponent(s: &[u8]) -> Option<i64> {
    let (negative, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = digits.iter().fold(0i64, |acc, &d| {
        (acc * 10 + i64::from(d - b'0')).min(1 << 40)
    });
    Some(if negative { -value } else { value })
}

fn parse_decimal(negative: bool, s: &[u8]) -> Option<LongDouble> {
    let (digits, frac, used) = mantissa(s, |c| c.is_ascii_digit())?;
    let exp10 = match &s[used..] {
        [] => 0,
        [b'e', rest @ ..] => exponent(rest)?,
        _ => return None,
    };
    let digits: &[u8] = match digits.iter().position(|&d| d != b'0') {
        None => {
            return Some(LongDouble {
                negative,
                mant: 0,
                exp: 0,
            })
        }
        Some(first) => &digits[first..],
    };
    let exp10 = exp10 - frac as i64;
    // Decimal magnitude of the leading digit; far outside the format it is over/underflow.
    let magnitude = exp10 + digits.len() as i64 - 1;
    if !(-4952..=4933).contains(&magnitude) {
        return None;
    }
    let n = Big::from_decimal(digits);
    let (num, den) = if exp10 >= 0 {
        (n.mul_pow10(exp10 as u32), Big::from_u64(1))
    } else {
        (n, Big::from_u64(1).mul_pow10((-exp10) as u32))
    };
    round_ratio(negative, &num, &den, 0)
}

fn parse_hex(negative: bool, s: &[u8]) -> Option<LongDouble> {
    let (digits, frac, used) = mantissa(s, |c| c.is_ascii_hexdigit())?;
    let exp2 = match &s[used..] {
        [] => 0,
        [b'p', rest @ ..] => exponent(rest)?,
        _ => return None,
    };
    let mut n = Big::default();
    for &d in &digits {
        let v = (d as char).to_digit(16).unwrap_or(0);
        n = n.shl(4).add(&Big::from_u64(u64::from(v)));
    }
    if n.is_zero() {
        return Some(LongDouble {
            negative,
            mant: 0,
            exp: 0,
        });
    }
    let exp2 = exp2 - 4 * frac as i64;
    if exp2 + n.bit_len() as i64 > MAX_TOP_EXP + 2 || exp2 + (n.bit_len() as i64) < MIN_TOP_EXP - 2
    {
        return None;
    }
    round_big(negative, &n, false, exp2)
}

/// Round `num / den × 2^exp2` (positive integers) to a long double.
fn round_ratio(negative: bool, num: &Big, den: &Big, exp2: i64) -> Option<LongDouble> {
    // Scale so the quotient has 66..=68 bits: 64 kept, a round bit and more for the sticky.
    let shift = num.bit_len() as i64 - den.bit_len() as i64 - 67;
    let (scaled, dropped) = if shift >= 0 {
        num.shr_sticky(shift as usize)
    } else {
        (num.shl((-shift) as usize), false)
    };
    let (quotient, remainder_nonzero) = scaled.div_small_quotient(den);
    round_big(
        negative,
        &Big::from_u128(quotient),
        dropped || remainder_nonzero,
        exp2 + shift,
    )
}

/// Round `(value + ε) × 2^exp2` to 64 significant bits, nearest-even, where `sticky` says
/// 0 < ε < 1. None on overflow; underflow flushes to zero.
fn round_big(negative: bool, value: &Big, sticky: bool, exp2: i64) -> Option<LongDouble> {
    let bits = value.bit_len();
    if bits == 0 {
        return Some(LongDouble {
            negative,
            mant: 0,
            exp: 0,
        });
    }
    let (mut mant, mut exp) = if bits <= 64 {
        (value.low_u64() << (64 - bits), exp2 - (64 - bits) as i64)
    } else {
        let drop = bits - 64;
        let (kept_with_round, rest_sticky) = value.shr_sticky(drop - 1);
        let round_bit = kept_with_round.bit(0);
        let kept = kept_with_round.shr(1).low_u64();
        let more = rest_sticky || sticky;
        let mut mant = kept;
        let mut exp = exp2 + drop as i64;
        if round_bit && (more || kept & 1 == 1) {
            mant = mant.wrapping_add(1);
            if mant == 0 {
                mant = 1 << 63;
                exp += 1;
            }
        }
        (mant, exp)
    };
    let top = exp + 63;
    if top > MAX_TOP_EXP {
        return None;
    }
    if top < MIN_TOP_EXP {
        mant = 0;
        exp = 0;
    }
    Some(LongDouble {
        negative,
        mant,
        exp,
    })
}

/// An unsigned big integer, little-endian 32-bit limbs, no high zero limbs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn from_u64(v: u64) -> Big {
        Big::from_u128(u128::from(v))
    }

    fn from_u128(mut v: u128) -> Big {
        let mut limbs = Vec::new();
        while v != 0 {
            limbs.push(v as u32);
            v >>= 32;
        }
        Big(limbs)
    }

    fn from_decimal(digits: &[u8]) -> Big {
        let mut n = Big::default();
        for chunk in digits.chunks(9) {
            let mut value = 0u32;
            for &d in chunk {
                value = value * 10 + u32::from(d - b'0');
            }
            n.mul_add_small(10u32.pow(chunk.len() as u32), value);
        }
        n
    }

    fn trim(mut self) -> Big {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
        self
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn bit_len(&self) -> usize {
        match self.0.last() {
            None => 0,
            Some(&top) => self.0.len() * 32 - top.leading_zeros() as usize,
        }
    }

    fn bit(&self, i: usize) -> bool {
        self.0
            .get(i / 32)
            .is_some_and(|limb| limb >> (i % 32) & 1 == 1)
    }

    fn low_u64(&self) -> u64 {
        let lo = u64::from(self.0.first().copied().unwrap_or(0));
        let hi = u64::from(self.0.get(1).copied().unwrap_or(0));
        lo | hi << 32
    }

    /// self = self × mul + add.
    fn mul_add_small(&mut self, mul: u32, add: u32) {
        let mut carry = u64::from(add);
        for limb in self.0.iter_mut() {
            let v = u64::from(*limb) * u64::from(mul) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
    }

    fn mul_pow10(mut self, mut power: u32) -> Big {
        while power > 0 {
            let step = power.min(9);
            self.mul_add_small(10u32.pow(step), 0);
            power -= step;
        }
        self.trim()
    }

    fn shl(&self, bits: usize) -> Big {
        if self.is_zero() {
            return Big::default();
        }
        let (limbs, rest) = (bits / 32, bits % 32);
        let mut out = vec![0u32; limbs];
        let mut carry = 0u32;
        for &limb in &self.0 {
            if rest == 0 {
                out.push(limb);
            } else {
                out.push(limb << rest | carry);
                carry = limb >> (32 - rest);
            }
        }
        if carry != 0 {
            out.push(carry);
        }
        Big(out).trim()
    }

    fn shr(&self, bits: usize) -> Big {
        self.shr_sticky(bits).0
    }

    /// `self >> bits` and whether any of the dropped bits was set.
    fn shr_sticky(&self, bits: usize) -> (Big, bool) {
        let (limbs, rest) = (bits / 32, bits % 32);
        if limbs >= self.0.len() {
            return (Big::default(), !self.is_zero());
        }
        let mut sticky = self.0[..limbs].iter().any(|&l| l != 0);
        if rest != 0 {
            sticky |= self.0[limbs] & ((1u32 << rest) - 1) != 0;
        }
        let high = &self.0[limbs..];
        let out = (0..high.len())
            .map(|i| {
                if rest == 0 {
                    high[i]
                } else {
                    high[i] >> rest | high.get(i + 1).map_or(0, |&h| h << (32 - rest))
                }
            })
            .collect();
        (Big(out).trim(), sticky)
    }

    fn add(&self, other: &Big) -> Big {
        let (long, short) = if self.0.len() >= other.0.len() {
            (self, other)
        } else {
            (other, self)
        };
        let mut out = Vec::with_capacity(long.0.len() + 1);
        let mut carry = 0u64;
        for (i, &limb) in long.0.iter().enumerate() {
            let v = u64::from(limb) + u64::from(short.0.get(i).copied().unwrap_or(0)) + carry;
            out.push(v as u32);
            carry = v >> 32;
        }
        if carry != 0 {
            out.push(carry as u32);
        }
        Big(out)
    }

    /// `self - other`; requires `self >= other`.
    fn sub(&self, other: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len());
        let mut borrow = 0i64;
        for (i, &limb) in self.0.iter().enumerate() {
            let mut v = i64::from(limb) - i64::from(other.0.get(i).copied().unwrap_or(0)) - borrow;
            borrow = i64::from(v < 0);
            if v < 0 {
                v += 1 << 32;
            }
            out.push(v as u32);
        }
        Big(out).trim()
    }

    /// `self / den` for a quotient known to fit 128 bits (shift-and-subtract, one step per
    /// quotient bit), and whether the remainder is non-zero.
    fn div_small_quotient(&self, den: &Big) -> (u128, bool) {
        let mut remainder = self.clone();
        let mut quotient: u128 = 0;
        let max_shift = self.bit_len().saturating_sub(den.bit_len()).min(127);
        for i in (0..=max_shift).rev() {
            let shifted = den.shl(i);
            if remainder >= shifted {
                remainder = remainder.sub(&shifted);
                quotient |= 1 << i;
            }
        }
        (quotient, !remainder.is_zero())
    }

    fn to_decimal(&self) -> String {
        if self.is_zero() {
            return "0".to_owned();
        }
        let mut limbs = self.0.clone();
        let mut chunks = Vec::new();
        while !limbs.is_empty() {
            let mut rem = 0u64;
            for limb in limbs.iter_mut().rev() {
                let v = rem << 32 | u64::from(*limb);
                *limb = (v / 1_000_000_000) as u32;
                rem = v % 1_000_000_000;
            }
            chunks.push(rem as u32);
            while limbs.last() == Some(&0) {
                limbs.pop();
            }
        }
        let mut out = String::new();
        for (i, chunk) in chunks.iter().rev().enumerate() {
            if i == 0 {
                out.push_str(&chunk.to_string());
            } else {
                out.push_str(&format!("{chunk:09}"));
            }
        }
        out
    }
}

impl PartialOrd for Big {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Big {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ld(text: &str) -> LongDouble {
        match parse(text.as_bytes()) {
            Some(Parsed::Finite(v)) => v,
            other => panic!("{text}: {other:?}"),
        }
    }

    fn sum(a: &str, b: &str) -> String {
        ld(a)
            .checked_add(ld(b))
            .map(|v| v.to_human_string())
            .unwrap_or_default()
    }

    #[test]
    fn matches_redis_on_x86_64() {
        // Expected texts taken from redis-server 7 (x86-64, 80-bit long double).
        assert_eq!(sum("0.1", "0.2"), "0.3");
        assert_eq!(sum("1024", "0.1"), "1024.09999999999999998");
        assert_eq!(
            sum("1024.09999999999999998", "0.1"),
            "1024.19999999999999996"
        );
        assert_eq!(sum("100", "0.1"), "100.1");
        assert_eq!(sum("100.1", "0.7"), "100.8");
        assert_eq!(sum("1.1", "17179869184"), "17179869185.09999999962747097");
        assert_eq!(sum("0", "1e20"), "100000000000000000000");
        assert_eq!(sum("100000000000000000000", "1.5"), "100000000000000000000");
        assert_eq!(sum("0", "3.0e3"), "3000");
        assert_eq!(sum("0x10", "1"), "17");
        assert_eq!(sum("0", "1e-20"), "0");
        assert_eq!(
            sum("0", "123456789.123456789"),
            "123456789.12345678899873747"
        );
        assert_eq!(sum("0", "-0.0"), "0");
        assert_eq!(sum("10.50", "0.1"), "10.6");
        assert_eq!(sum("10.6", "-5"), "5.6");
        assert_eq!(sum("5.0e3", "2.0e2"), "5200");
    }

    #[test]
    fn rejects_what_string2ld_rejects() {
        for bad in [
            "", " 1", "1 ", "nan", "-nan", "abc", "1e", "0x", "1e99999", "1e-99999", ".",
        ] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(parse(b"inf"), Some(Parsed::Infinite));
        assert_eq!(parse(b"-Infinity"), Some(Parsed::Infinite));
        assert_eq!(ld("1e4000").checked_add(ld("1e4932")).map(|_| ()), Some(()));
        assert_eq!(ld("1.1e4932").checked_add(ld("1.1e4932")), None);
    }
}
