//! Argument parsing helpers shared by command handlers: integers, floats and score bounds with
//! Redis' exact acceptance rules and error texts.
//!
//! Pure functions over byte slices; no keyspace, no connection state.
//!
//! May import: `error` only.

use crate::error::CmdError;
use gradus_store::ScoreBound;

/// C's `atoi`, as Redis reads a few arguments (MIGRATE's port, DEBUG SET-ACTIVE-EXPIRE's flag):
/// leading blanks, a sign, digits; 0 when there are none.
pub fn atoi(text: &[u8]) -> i64 {
    let text = text.trim_ascii_start();
    let (negative, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let mut n: i64 = 0;
    for d in digits.iter().take_while(|d| d.is_ascii_digit()) {
        n = n.saturating_mul(10).saturating_add(i64::from(d - b'0'));
    }
    if negative {
        -n
    } else {
        n
    }
}

/// Parse a signed 64-bit integer the way Redis' `string2ll` does: optional `-`, digits, no `+`,
/// no leading zeros (except "0"), no spaces.
pub fn parse_i64(arg: &[u8]) -> Option<i64> {
    gradus_proto::parse_strict_i64(arg)
}

/// `parse_i64` with Redis' error for a bad integer argument.
pub fn int_arg(arg: &[u8]) -> Result<i64, CmdError> {
    parse_i64(arg).ok_or(CmdError::NotInteger)
}

/// A non-negative integer argument that fits in usize.
pub fn usize_arg(arg: &[u8]) -> Result<usize, CmdError> {
    match parse_i64(arg) {
        Some(v) if v >= 0 => Ok(v as usize),
        _ => Err(CmdError::NotInteger),
    }
}

/// Parse a double the way Redis' `string2ld`/`strtod` does for INCRBYFLOAT and scores: decimal or
/// exponent notation, `inf`/`-inf`/`+inf` (case-insensitive); no NaN, no spaces, not empty.
pub fn parse_f64(arg: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(arg).ok()?;
    if s.is_empty() || s.trim() != s {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    let v = match lower.as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ => {
            // Rust accepts forms Redis rejects ("nan", "infinity" handled above); reject letters other
            // than an exponent marker.
            if lower
                .bytes()
                .any(|c| !(c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'-' | b'+')))
            {
                return None;
            }
            s.parse::<f64>().ok()?
        }
    };
    if v.is_nan() {
        None
    } else {
        Some(v)
    }
}

/// A float argument with Redis' generic error text.
pub fn float_arg(arg: &[u8]) -> Result<f64, CmdError> {
    parse_f64(arg).ok_or(CmdError::NotFloat)
}

/// Parse a sorted-set score bound: `1.5`, `(1.5` (exclusive), `-inf`, `+inf`.
pub fn score_bound(arg: &[u8]) -> Result<ScoreBound, CmdError> {
    let (exclusive, rest) = match arg.first() {
        Some(b'(') => (true, &arg[1..]),
        _ => (false, arg),
    };
    let value = parse_f64(rest).ok_or_else(|| CmdError::err("min or max is not a float"))?;
    Ok(ScoreBound { value, exclusive })
}

/// Case-insensitive ASCII comparison of an argument with an option name.
pub fn is(arg: &[u8], name: &str) -> bool {
    arg.eq_ignore_ascii_case(name.as_bytes())
}

/// Lossy UTF-8 view of an argument for error messages.
pub fn show(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_follow_string2ll() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-1"), Some(-1));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        assert_eq!(parse_i64(b"+1"), None);
        assert_eq!(parse_i64(b"01"), None);
        assert_eq!(parse_i64(b"-0"), None);
        assert_eq!(parse_i64(b" 1"), None);
        assert_eq!(parse_i64(b""), None);
        assert_eq!(parse_i64(b"1.0"), None);
    }

    #[test]
    fn floats() {
        assert_eq!(parse_f64(b"1.5"), Some(1.5));
        assert_eq!(parse_f64(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_f64(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse_f64(b"1e3"), Some(1000.0));
        assert_eq!(parse_f64(b"nan"), None);
        assert_eq!(parse_f64(b"abc"), None);
        assert_eq!(parse_f64(b""), None);
        assert_eq!(parse_f64(b" 1"), None);
    }

    #[test]
    fn bounds() {
        let b = score_bound(b"(2").unwrap();
        assert!(b.exclusive && b.value == 2.0);
        assert!(score_bound(b"x").is_err());
    }
}

/// Units of a relative or absolute expiry argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpireUnit {
    Seconds,
    Millis,
}

/// Turn an expiry argument into an absolute Unix-ms time, as EXPIRE/SET EX/PXAT do.
/// `absolute` means the value is already a Unix time (EXAT/PXAT/EXPIREAT). Returns None on
/// overflow; callers decide whether non-positive values are allowed.
pub fn expire_at_ms(now_ms: u64, value: i64, unit: ExpireUnit, absolute: bool) -> Option<i64> {
    let ms = match unit {
        ExpireUnit::Seconds => value.checked_mul(1000)?,
        ExpireUnit::Millis => value,
    };
    if absolute {
        Some(ms)
    } else {
        ms.checked_add(i64::try_from(now_ms).ok()?)
    }
}
