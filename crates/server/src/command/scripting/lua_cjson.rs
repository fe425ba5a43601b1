//! The `cjson` library every script and function sees, as Redis 7.2 bundles it (lua-cjson
//! 2.1.0): `encode`, `decode`, `null`, `new`, `_NAME`, `_VERSION` and the configuration
//! functions (`encode_sparse_array`, `encode_max_depth`, `decode_max_depth`,
//! `encode_number_precision`, `encode_keep_buffer`, `encode_invalid_numbers`,
//! `decode_invalid_numbers`), with lua-cjson's output, its error texts and its leniencies
//! (numbers read as C's `strtod` reads them: hex, `inf`, `nan`, a leading `+` or zeros; an
//! embedded NUL ends the text).
//!
//! It owns the JSON text: the encoder (a Lua value to text, walking tables with the Lua API),
//! the tokenizer and decoder (text to Lua values), number formatting (`%.14g`) and parsing, and
//! each table's configuration (a userdata upvalue of its functions; it lives as long as the
//! Lua state, as in Redis). Both walks are iterative (nesting is bounded by the configured
//! depth and by Lua's stack, as in lua-cjson, never by the thread's stack), and both keep to
//! the run's memory limit, which is lifted while they run: the encoder stops when its text
//! would take the state past it, the decoder when the values it made have; either fails with
//! Lua's "not enough memory". Its functions follow `lua_stack`'s library-call contract
//! ([`LibraryFn`]). May import: `mlua::ffi` and `lua_stack`'s library-call protocol; nothing
//! of the server.

use super::lua_stack::{self, LibraryCall, LibraryFn, Raise};
use mlua::ffi;
use std::os::raw::c_int;

/// One `cjson` table's settings (lua-cjson's defaults as Redis builds it).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Config {
    /// Encode an excessively sparse array as an object (else it is an error).
    pub sparse_convert: bool,
    /// 0: any sparse array is an array; else an array whose largest index is above
    /// `items * ratio` and above `sparse_safe` is excessively sparse.
    pub sparse_ratio: i32,
    pub sparse_safe: i32,
    pub encode_max_depth: i32,
    pub decode_max_depth: i32,
    /// NaN and ±inf: 0 an error, 1 written as `nan`/`inf`/`-inf`, 2 written as `null`.
    pub encode_invalid_numbers: i32,
    pub decode_invalid_numbers: bool,
    /// No effect here but its reply (lua-cjson keeps its buffer between calls).
    pub encode_keep_buffer: bool,
    /// Significant digits of numbers (1..=14).
    pub encode_number_precision: i32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            sparse_convert: false,
            sparse_ratio: 2,
            sparse_safe: 10,
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            encode_invalid_numbers: 0,
            decode_invalid_numbers: true,
            encode_keep_buffer: true,
            encode_number_precision: 14,
        }
    }
}

// ===== Numbers =====

/// C's `printf("%.<precision>g", x)` as glibc prints it (`nan`, `-nan`, `inf`, `-inf`).
pub(super) fn format_number(x: f64, precision: usize) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    let precision = precision.max(1);
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Rust's exponent form rounds as glibc does (exactly, ties to even).
    let e_form = format!("{:.*e}", precision - 1, x);
    let (mantissa, exponent) = e_form.split_once('e').expect("exponent form");
    let exponent: i32 = exponent.parse().expect("an exponent");
    let negative = mantissa.starts_with('-');
    let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    let mut out = String::with_capacity(precision + 8);
    if negative {
        out.push('-');
    }
    if exponent < -4 || exponent >= precision as i32 {
        out.push(digits[0] as char);
        let fraction = trim_zeros(&digits[1..]);
        if !fraction.is_empty() {
            out.push('.');
            out.extend(fraction.iter().map(|&d| d as char));
        }
        out.push('e');
        out.push(if exponent < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exponent.unsigned_abs()));
    } else if exponent >= 0 {
        let point = exponent as usize + 1;
        out.extend(digits[..point].iter().map(|&d| d as char));
        let fraction = trim_zeros(&digits[point..]);
        if !fraction.is_empty() {
            out.push('.');
            out.extend(fraction.iter().map(|&d| d as char));
        }
    } else {
        out.push_str("0.");
        for _ in 0..(-exponent - 1) {
            out.push('0');
        }
        out.extend(trim_zeros(&digits).iter().map(|&d| d as char));
    }
    out
}

fn trim_zeros(digits: &[u8]) -> &[u8] {
    let end = digits.iter().rposition(|&d| d != b'0').map_or(0, |i| i + 1);
    &digits[..end]
}

/// The number C's `strtod` reads at the start of `s` (as glibc does: decimal, hexadecimal
/// with an optional binary exponent, `inf`/`infinity`, `nan`/`nan(…)`, each with an optional
/// sign) and how many bytes it took; None when it reads nothing. A NUL byte ends the text.
pub(super) fn strtod(s: &[u8]) -> Option<(f64, usize)> {
    let at = |i: usize| s.get(i).copied().unwrap_or(0);
    let mut i = 0;
    let negative = match at(0) {
        b'-' => {
            i = 1;
            true
        }
        b'+' => {
            i = 1;
            false
        }
        _ => false,
    };
    let sign = |v: f64| if negative { -v } else { v };
    let starts = |i: usize, word: &[u8]| {
        word.iter()
            .enumerate()
            .all(|(k, &c)| at(i + k).to_ascii_lowercase() == c)
    };
    if starts(i, b"inf") {
        let len = if starts(i, b"infinity") { 8 } else { 3 };
        return Some((sign(f64::INFINITY), i + len));
    }
    if starts(i, b"nan") {
        let mut end = i + 3;
        if at(end) == b'(' {
            let mut j = end + 1;
            while at(j).is_ascii_alphanumeric() || at(j) == b'_' {
                j += 1;
            }
            if at(j) == b')' {
                end = j + 1;
            }
        }
        return Some((sign(f64::NAN), end));
    }
    if at(i) == b'0' && at(i + 1) | 0x20 == b'x' {
        if let Some((v, len)) = hex_number(&s[i + 2..]) {
            return Some((sign(v), i + 2 + len));
        }
    }
    // Decimal: digits [. digits] [e [sign] digits], at least one digit before the exponent.
    let start = i;
    let mut digits = 0;
    while at(i).is_ascii_digit() {
        i += 1;
        digits += 1;
    }
    if at(i) == b'.' {
        i += 1;
        while at(i).is_ascii_digit() {
            i += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return None;
    }
    let mantissa_end = i;
    if at(i) | 0x20 == b'e' {
        let mut j = i + 1;
        if matches!(at(j), b'+' | b'-') {
            j += 1;
        }
        if at(j).is_ascii_digit() {
            while at(j).is_ascii_digit() {
                j += 1;
            }
            i = j;
        }
    }
    // Rust reads the same grammar (correctly rounded, as glibc); "1.e5" needs its point gone.
    let mut text = String::with_capacity(i - start);
    for (k, &c) in s[start..i].iter().enumerate() {
        if c == b'.' && start + k + 1 == mantissa_end && mantissa_end != i {
            continue;
        }
        text.push(c as char);
    }
    let v: f64 = text.parse().ok()?;
    Some((sign(v), i))
}

/// A hexadecimal number after its `0x`: hex digits with an optional point (at least one digit)
/// and an optional `p` exponent. None when there is no digit (strtod then reads just the `0`).
fn hex_number(s: &[u8]) -> Option<(f64, usize)> {
    let at = |i: usize| s.get(i).copied().unwrap_or(0);
    let hex = |c: u8| (c as char).to_digit(16);
    let mut mantissa: u64 = 0;
    let mut exponent: i64 = 0;
    let mut sticky = false;
    let mut digits = 0;
    let mut i = 0;
    let mut add = |d: u32, fraction: bool, mantissa: &mut u64, exponent: &mut i64| {
        if *mantissa < 1 << 59 {
            *mantissa = *mantissa * 16 + u64::from(d);
            if fraction {
                *exponent -= 4;
            }
        } else {
            sticky |= d != 0;
            if !fraction {
                *exponent += 4;
            }
        }
    };
    while let Some(d) = hex(at(i)) {
        add(d, false, &mut mantissa, &mut exponent);
        i += 1;
        digits += 1;
    }
    if at(i) == b'.' {
        i += 1;
        while let Some(d) = hex(at(i)) {
            add(d, true, &mut mantissa, &mut exponent);
            i += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return None;
    }
    if at(i) | 0x20 == b'p' {
        let mut j = i + 1;
        let negative = at(j) == b'-';
        if matches!(at(j), b'+' | b'-') {
            j += 1;
        }
        if at(j).is_ascii_digit() {
            let mut e: i64 = 0;
            while at(j).is_ascii_digit() {
                e = (e * 10 + i64::from(at(j) - b'0')).min(1 << 20);
                j += 1;
            }
            exponent += if negative { -e } else { e };
            i = j;
        }
    }
    if sticky {
        mantissa |= 1;
    }
    let mut v = mantissa as f64;
    while exponent > 0 && v.is_finite() && v != 0.0 {
        let step = exponent.min(1000);
        v *= 2f64.powi(step as i32);
        exponent -= step;
    }
    while exponent < 0 && v != 0.0 {
        let step = (-exponent).min(1000);
        v /= 2f64.powi(step as i32);
        exponent += step;
    }
    Some((v, i))
}

// ===== Encoding =====

/// How lua-cjson writes byte `c` inside a string (None: as is).
fn escape(c: u8) -> Option<&'static [u8]> {
    const CONTROL: [&[u8]; 32] = [
        b"\\u0000", b"\\u0001", b"\\u0002", b"\\u0003", b"\\u0004", b"\\u0005", b"\\u0006",
        b"\\u0007", b"\\b", b"\\t", b"\\n", b"\\u000b", b"\\f", b"\\r", b"\\u000e", b"\\u000f",
        b"\\u0010", b"\\u0011", b"\\u0012", b"\\u0013", b"\\u0014", b"\\u0015", b"\\u0016",
        b"\\u0017", b"\\u0018", b"\\u0019", b"\\u001a", b"\\u001b", b"\\u001c", b"\\u001d",
        b"\\u001e", b"\\u001f",
    ];
    match c {
        0..=31 => Some(CONTROL[c as usize]),
        b'"' => Some(b"\\\""),
        b'\\' => Some(b"\\\\"),
        b'/' => Some(b"\\/"),
        0x7f => Some(b"\\u007f"),
        _ => None,
    }
}

/// Append `s` as a JSON string.
pub(super) fn append_string(out: &mut Vec<u8>, s: &[u8]) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    let mut plain = 0;
    for (i, &c) in s.iter().enumerate() {
        if let Some(escaped) = escape(c) {
            out.extend_from_slice(&s[plain..i]);
            out.extend_from_slice(escaped);
            plain = i + 1;
        }
    }
    out.extend_from_slice(&s[plain..]);
    out.push(b'"');
}

/// A table being written: an array (its length, the next index) or an object.
enum Open {
    Array { len: i32, next: i32 },
    Object { first: bool },
}

struct Encoder<'a> {
    cfg: &'a Config,
    out: Vec<u8>,
    /// The most the text may take (the state's headroom under the run's memory limit).
    room: usize,
}

/// The Lua type name of the value at `idx` (`lua_typename`).
unsafe fn type_name(state: *mut ffi::lua_State, idx: c_int) -> String {
    std::ffi::CStr::from_ptr(ffi::lua_typename(state, ffi::lua_type(state, idx)))
        .to_string_lossy()
        .into_owned()
}

/// The bytes of the string (or number: converted in place) at `idx`.
unsafe fn bytes_at<'s>(state: *mut ffi::lua_State, idx: c_int) -> &'s [u8] {
    let mut len = 0usize;
    let ptr = ffi::lua_tolstring(state, idx, &mut len);
    if ptr.is_null() {
        return &[];
    }
    std::slice::from_raw_parts(ptr.cast(), len)
}

impl Encoder<'_> {
    /// lua-cjson's "Cannot serialise <type of the value at idx>: <reason>".
    unsafe fn fail(&self, state: *mut ffi::lua_State, idx: c_int, reason: &str) -> Raise {
        let message = format!("Cannot serialise {}: {reason}", type_name(state, idx));
        lua_stack::raise(state, message.as_bytes())
    }

    fn check_room(&self) -> Result<(), ()> {
        if self.out.len() > self.room {
            Err(())
        } else {
            Ok(())
        }
    }

    unsafe fn number(&mut self, state: *mut ffi::lua_State, idx: c_int) -> Result<(), Raise> {
        let x = ffi::lua_tonumber(state, idx);
        match self.cfg.encode_invalid_numbers {
            0 if !x.is_finite() => return Err(self.fail(state, idx, "must not be NaN or Inf")),
            1 if x.is_nan() => {
                self.out.extend_from_slice(b"nan");
                return Ok(());
            }
            2 if !x.is_finite() => {
                self.out.extend_from_slice(b"null");
                return Ok(());
            }
            _ => {}
        }
        let text = format_number(x, self.cfg.encode_number_precision as usize);
        self.out.extend_from_slice(text.as_bytes());
        Ok(())
    }

    /// lua-cjson's `lua_array_length` for the table on top: its largest index when every key
    /// is a positive integer (0 for an empty table), -1 for an object; an excessively sparse
    /// array is an object or an error, as configured.
    unsafe fn array_length(&self, state: *mut ffi::lua_State) -> Result<i32, Raise> {
        let mut max: i32 = 0;
        let mut items: i32 = 0;
        ffi::lua_pushnil(state);
        while ffi::lua_next(state, -2) != 0 {
            if ffi::lua_type(state, -2) == ffi::LUA_TNUMBER {
                let k = ffi::lua_tonumber(state, -2);
                if k != 0.0 && k.floor() == k && k >= 1.0 {
                    if k > f64::from(max) {
                        max = c_int_of(k);
                    }
                    items = items.wrapping_add(1);
                    ffi::lua_pop(state, 1);
                    continue;
                }
            }
            ffi::lua_pop(state, 2);
            return Ok(-1);
        }
        let ratio = self.cfg.sparse_ratio;
        if ratio > 0 && max > items.wrapping_mul(ratio) && max > self.cfg.sparse_safe {
            if !self.cfg.sparse_convert {
                return Err(self.fail(state, -1, "excessively sparse array"));
            }
            return Ok(-1);
        }
        Ok(max)
    }

    /// Write the value on top of the stack; a table is opened instead (pushed on `open`, and
    /// an object's first key, nil, pushed on the stack) for the caller to walk: then true.
    unsafe fn value(
        &mut self,
        state: *mut ffi::lua_State,
        open: &mut Vec<Open>,
    ) -> Result<bool, Raise> {
        let mut opened = false;
        match ffi::lua_type(state, -1) {
            ffi::LUA_TSTRING => {
                let s = bytes_at(state, -1);
                if self.out.len().saturating_add(s.len()) > self.room {
                    return Err(lua_stack::raise_memory(state));
                }
                append_string(&mut self.out, s);
            }
            ffi::LUA_TNUMBER => self.number(state, -1)?,
            ffi::LUA_TBOOLEAN => {
                let text: &[u8] = if ffi::lua_toboolean(state, -1) != 0 {
                    b"true"
                } else {
                    b"false"
                };
                self.out.extend_from_slice(text);
            }
            ffi::LUA_TNIL => self.out.extend_from_slice(b"null"),
            ffi::LUA_TLIGHTUSERDATA if ffi::lua_touserdata(state, -1).is_null() => {
                self.out.extend_from_slice(b"null")
            }
            ffi::LUA_TTABLE => {
                let depth = open.len() + 1;
                // The stack room lua-cjson asks for (the table's key, value and a message).
                if depth > self.cfg.encode_max_depth as usize || ffi::lua_checkstack(state, 3) == 0
                {
                    let message = format!("Cannot serialise, excessive nesting ({depth})");
                    return Err(lua_stack::raise(state, message.as_bytes()));
                }
                let len = self.array_length(state)?;
                if len > 0 {
                    self.out.push(b'[');
                    open.push(Open::Array { len, next: 1 });
                } else {
                    self.out.push(b'{');
                    open.push(Open::Object { first: true });
                    ffi::lua_pushnil(state);
                }
                opened = true;
            }
            _ => return Err(self.fail(state, -1, "type not supported")),
        }
        if self.check_room().is_err() {
            return Err(lua_stack::raise_memory(state));
        }
        Ok(opened)
    }

    /// Write the value on top of the stack (left there). The stack holds what lua-cjson's
    /// recursion holds: per open table the table, and an object's current key; then the
    /// value being written.
    unsafe fn encode(&mut self, state: *mut ffi::lua_State) -> Result<(), Raise> {
        let mut open: Vec<Open> = Vec::new();
        // Whether the top of the stack is a value just written (to pop), rather than the
        // innermost open table (or an object's key).
        let mut written = !self.value(state, &mut open)?;
        while let Some(table) = open.last_mut() {
            if written {
                ffi::lua_pop(state, 1);
            }
            match table {
                Open::Array { len, next } => {
                    if *next > *len {
                        self.out.push(b']');
                        open.pop();
                        written = true;
                        continue;
                    }
                    if *next > 1 {
                        self.out.push(b',');
                    }
                    ffi::lua_rawgeti(state, -1, (*next).into());
                    *next += 1;
                }
                Open::Object { first } => {
                    if ffi::lua_next(state, -2) == 0 {
                        self.out.push(b'}');
                        open.pop();
                        written = true;
                        continue;
                    }
                    if !*first {
                        self.out.push(b',');
                    }
                    *first = false;
                    match ffi::lua_type(state, -2) {
                        ffi::LUA_TNUMBER => {
                            self.out.push(b'"');
                            self.number(state, -2)?;
                            self.out.extend_from_slice(b"\":");
                        }
                        ffi::LUA_TSTRING => {
                            let key = bytes_at(state, -2);
                            if self.out.len().saturating_add(key.len()) > self.room {
                                return Err(lua_stack::raise_memory(state));
                            }
                            append_string(&mut self.out, key);
                            self.out.push(b':');
                        }
                        _ => {
                            return Err(self.fail(
                                state,
                                -2,
                                "table key must be a number or string",
                            ))
                        }
                    }
                }
            }
            written = !self.value(state, &mut open)?;
        }
        Ok(())
    }
}

/// C's conversion of a double to `int` on x86-64: truncation, and `INT_MIN` when out of range.
fn c_int_of(x: f64) -> i32 {
    if x > -2_147_483_649.0 && x < 2_147_483_648.0 {
        x as i32
    } else {
        i32::MIN
    }
}

/// C's conversion of a double to `long long` on x86-64 (`lua_tointeger` in Redis' Lua).
fn c_long_of(x: f64) -> i64 {
    if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&x) {
        x as i64
    } else {
        i64::MIN
    }
}

// ===== Decoding =====

#[derive(Clone, Copy, Debug, PartialEq)]
enum TokenKind {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    String,
    Number(f64),
    Boolean(bool),
    Null,
    Colon,
    Comma,
    End,
    /// A lexical error: its text ("invalid token", "invalid number", …).
    Error(&'static str),
}

impl TokenKind {
    /// How lua-cjson names what it found.
    fn name(self) -> &'static str {
        match self {
            TokenKind::ObjBegin => "T_OBJ_BEGIN",
            TokenKind::ObjEnd => "T_OBJ_END",
            TokenKind::ArrBegin => "T_ARR_BEGIN",
            TokenKind::ArrEnd => "T_ARR_END",
            TokenKind::String => "T_STRING",
            TokenKind::Number(_) => "T_NUMBER",
            TokenKind::Boolean(_) => "T_BOOLEAN",
            TokenKind::Null => "T_NULL",
            TokenKind::Colon => "T_COLON",
            TokenKind::Comma => "T_COMMA",
            TokenKind::End => "T_END",
            TokenKind::Error(text) => text,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Token {
    kind: TokenKind,
    /// Where it starts (or where its error is), 0-based.
    at: usize,
}

/// lua-cjson's tokenizer over a text (a NUL byte, or the text's end, is the end).
pub(super) struct Lexer<'a> {
    data: &'a [u8],
    pos: usize,
    invalid_numbers: bool,
    /// The last string token's bytes.
    string: Vec<u8>,
}

fn hex4(s: &[u8]) -> Option<u32> {
    let mut v = 0;
    for i in 0..4 {
        v = v * 16 + (*s.get(i)? as char).to_digit(16)?;
    }
    Some(v)
}

impl<'a> Lexer<'a> {
    pub(super) fn new(data: &'a [u8], invalid_numbers: bool) -> Lexer<'a> {
        Lexer {
            data,
            pos: 0,
            invalid_numbers,
            string: Vec::new(),
        }
    }

    fn at(&self, i: usize) -> u8 {
        self.data.get(i).copied().unwrap_or(0)
    }

    fn error(&self, text: &'static str) -> Token {
        Token {
            kind: TokenKind::Error(text),
            at: self.pos,
        }
    }

    fn next(&mut self) -> Token {
        while matches!(self.at(self.pos), b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
        let at = self.pos;
        let c = self.at(at);
        let single = match c {
            b'{' => Some(TokenKind::ObjBegin),
            b'}' => Some(TokenKind::ObjEnd),
            b'[' => Some(TokenKind::ArrBegin),
            b']' => Some(TokenKind::ArrEnd),
            b',' => Some(TokenKind::Comma),
            b':' => Some(TokenKind::Colon),
            0 => {
                return Token {
                    kind: TokenKind::End,
                    at,
                }
            }
            _ => None,
        };
        if let Some(kind) = single {
            self.pos += 1;
            return Token { kind, at };
        }
        let starts = |word: &[u8]| (0..word.len()).all(|k| self.at(at + k) == word[k]);
        match c {
            b'"' => self.string_token(),
            b'-' | b'0'..=b'9' => {
                if !self.invalid_numbers && self.is_invalid_number() {
                    return self.error("invalid number");
                }
                self.number_token()
            }
            b'f' | b'i' | b'I' | b'n' | b'N' | b't' | b'+' => {
                let (kind, len) = if starts(b"true") {
                    (TokenKind::Boolean(true), 4)
                } else if starts(b"false") {
                    (TokenKind::Boolean(false), 5)
                } else if starts(b"null") {
                    (TokenKind::Null, 4)
                } else if self.invalid_numbers && self.is_invalid_number() {
                    return self.number_token();
                } else {
                    return self.error("invalid token");
                };
                self.pos += len;
                Token { kind, at }
            }
            _ => self.error("invalid token"),
        }
    }

    /// lua-cjson's `json_is_invalid_number`: what strtod reads but JSON does not have (a
    /// leading `+` or zero, hex, inf, nan).
    fn is_invalid_number(&self) -> bool {
        let mut p = self.pos;
        match self.at(p) {
            b'+' => return true,
            b'-' => p += 1,
            _ => {}
        }
        let c = self.at(p);
        if c == b'0' {
            let next = self.at(p + 1);
            return next | 0x20 == b'x' || next.is_ascii_digit();
        }
        // C compares a (signed) char: bytes from 0x80 are below '9' too.
        if c <= b'9' || c >= 0x80 {
            return false;
        }
        let word = |w: &[u8]| (0..3).all(|k| self.at(p + k).to_ascii_lowercase() == w[k]);
        word(b"inf") || word(b"nan")
    }

    fn number_token(&mut self) -> Token {
        let at = self.pos;
        let end = self.data[at..]
            .iter()
            .position(|&b| b == 0)
            .map_or(self.data.len(), |i| at + i);
        match strtod(&self.data[at..end]) {
            Some((v, len)) => {
                self.pos += len;
                Token {
                    kind: TokenKind::Number(v),
                    at,
                }
            }
            None => self.error("invalid number"),
        }
    }

    fn string_token(&mut self) -> Token {
        let at = self.pos;
        self.pos += 1;
        self.string.clear();
        loop {
            let c = self.at(self.pos);
            match c {
                b'"' => break,
                0 => return self.error("unexpected end of string"),
                b'\\' => {
                    let unescaped = match self.at(self.pos + 1) {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 8,
                        b't' => b'\t',
                        b'n' => b'\n',
                        b'f' => 12,
                        b'r' => b'\r',
                        b'u' => {
                            if self.unicode_escape() {
                                continue;
                            }
                            return self.error("invalid unicode escape code");
                        }
                        _ => return self.error("invalid escape code"),
                    };
                    self.string.push(unescaped);
                    self.pos += 2;
                }
                _ => {
                    self.string.push(c);
                    self.pos += 1;
                }
            }
        }
        self.pos += 1;
        Token {
            kind: TokenKind::String,
            at,
        }
    }

    /// `\uXXXX` (a surrogate pair: two of them) at `pos`, appended as UTF-8; false when it
    /// is not a valid escape (then `pos` stays on the backslash).
    fn unicode_escape(&mut self) -> bool {
        let rest = &self.data[self.pos.min(self.data.len())..];
        let unit = |i: usize| rest.get(i..).and_then(hex4);
        let Some(mut code) = unit(2) else {
            return false;
        };
        let mut len = 6;
        if code & 0xF800 == 0xD800 {
            if code & 0x400 != 0 || rest.get(6) != Some(&b'\\') || rest.get(7) != Some(&b'u') {
                return false;
            }
            let Some(low) = unit(8) else {
                return false;
            };
            if low & 0xFC00 != 0xDC00 {
                return false;
            }
            code = (((code & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000;
            len = 12;
        }
        let Some(c) = char::from_u32(code) else {
            return false;
        };
        let mut buf = [0u8; 4];
        self.string
            .extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        self.pos += len;
        true
    }
}

/// What the decoder is inside: an object (its key is on the stack above it) or an array
/// (the index of its next item).
enum Inside {
    Object,
    Array(i64),
}

/// "Expected <what> but found <token> at character <n>".
unsafe fn expected(state: *mut ffi::lua_State, what: &str, token: Token) -> Raise {
    let message = format!(
        "Expected {what} but found {} at character {}",
        token.kind.name(),
        token.at + 1
    );
    lua_stack::raise(state, message.as_bytes())
}

/// Decode `data` onto the stack (one value), as lua-cjson does: the stack holds what its
/// recursion holds (per open container its table, and an object's current key).
unsafe fn decode(
    state: *mut ffi::lua_State,
    cfg: &Config,
    call: &LibraryCall,
    data: &[u8],
) -> Result<(), Raise> {
    let mut lexer = Lexer::new(data, cfg.decode_invalid_numbers);
    let mut inside: Vec<Inside> = Vec::new();
    let mut token = lexer.next();
    'value: loop {
        // A value starts at `token`.
        let descend = |inside: &Vec<Inside>, slots: c_int, lexer: &Lexer| {
            let depth = inside.len() + 1;
            if depth > cfg.decode_max_depth as usize || ffi::lua_checkstack(state, slots) == 0 {
                let message = format!(
                    "Found too many nested data structures ({depth}) at character {}",
                    lexer.pos
                );
                return Err(lua_stack::raise(state, message.as_bytes()));
            }
            Ok(())
        };
        match token.kind {
            TokenKind::String => {
                ffi::lua_pushlstring(state, lexer.string.as_ptr().cast(), lexer.string.len());
            }
            TokenKind::Number(v) => ffi::lua_pushnumber(state, v),
            TokenKind::Boolean(b) => ffi::lua_pushboolean(state, c_int::from(b)),
            TokenKind::Null => ffi::lua_pushlightuserdata(state, std::ptr::null_mut()),
            TokenKind::ObjBegin => {
                descend(&inside, 3, &lexer)?;
                ffi::lua_createtable(state, 0, 0);
                token = lexer.next();
                if token.kind != TokenKind::ObjEnd {
                    inside.push(Inside::Object);
                    token = object_key(state, &mut lexer, token)?;
                    continue 'value;
                }
            }
            TokenKind::ArrBegin => {
                descend(&inside, 2, &lexer)?;
                ffi::lua_createtable(state, 0, 0);
                token = lexer.next();
                if token.kind != TokenKind::ArrEnd {
                    inside.push(Inside::Array(1));
                    continue 'value;
                }
            }
            _ => return Err(expected(state, "value", token)),
        }
        if call.headroom(state) == 0 {
            return Err(lua_stack::raise_memory(state));
        }
        // A value is complete on top of the stack: store it in its container, and close
        // every container that ends here.
        loop {
            match inside.last_mut() {
                None => break 'value,
                Some(Inside::Object) => {
                    ffi::lua_rawset(state, -3);
                    token = lexer.next();
                    if token.kind == TokenKind::ObjEnd {
                        inside.pop();
                        continue;
                    }
                    if token.kind != TokenKind::Comma {
                        return Err(expected(state, "comma or object end", token));
                    }
                    let key = lexer.next();
                    token = object_key(state, &mut lexer, key)?;
                    continue 'value;
                }
                Some(Inside::Array(i)) => {
                    ffi::lua_rawseti(state, -2, *i);
                    *i += 1;
                    token = lexer.next();
                    if token.kind == TokenKind::ArrEnd {
                        inside.pop();
                        continue;
                    }
                    if token.kind != TokenKind::Comma {
                        return Err(expected(state, "comma or array end", token));
                    }
                    token = lexer.next();
                    continue 'value;
                }
            }
        }
    }
    let end = lexer.next();
    if end.kind != TokenKind::End {
        return Err(expected(state, "the end", end));
    }
    Ok(())
}

/// An object's key at `token` and its colon: pushes the key, returns the token of its value.
unsafe fn object_key(
    state: *mut ffi::lua_State,
    lexer: &mut Lexer,
    token: Token,
) -> Result<Token, Raise> {
    if token.kind != TokenKind::String {
        return Err(expected(state, "object key string", token));
    }
    ffi::lua_pushlstring(state, lexer.string.as_ptr().cast(), lexer.string.len());
    let colon = lexer.next();
    if colon.kind != TokenKind::Colon {
        return Err(expected(state, "colon", colon));
    }
    Ok(lexer.next())
}

// ===== The Lua functions =====

/// The configuration of the running function's table (its upvalue 2).
unsafe fn config<'s>(state: *mut ffi::lua_State) -> Result<&'s mut Config, Raise> {
    let cfg = ffi::lua_touserdata(state, ffi::lua_upvalueindex(2)) as *mut Config;
    if cfg.is_null() {
        return Err(lua_stack::raise(
            state,
            b"BUG: Unable to fetch CJSON configuration",
        ));
    }
    Ok(&mut *cfg)
}

/// `luaL_argcheck(gettop == 1, 1, "expected 1 argument")`.
unsafe fn one_argument(state: *mut ffi::lua_State) -> Result<(), Raise> {
    if ffi::lua_gettop(state) != 1 {
        return Err(lua_stack::raise_argument(state, 1, b"expected 1 argument"));
    }
    Ok(())
}

unsafe fn encode_fn(state: *mut ffi::lua_State, call: &LibraryCall) -> Result<c_int, Raise> {
    let cfg = *config(state)?;
    one_argument(state)?;
    let room = call.headroom(state);
    let mut encoder = Encoder {
        cfg: &cfg,
        out: Vec::new(),
        room,
    };
    encoder.encode(state)?;
    ffi::lua_pushlstring(state, encoder.out.as_ptr().cast(), encoder.out.len());
    Ok(1)
}

unsafe fn decode_fn(state: *mut ffi::lua_State, call: &LibraryCall) -> Result<c_int, Raise> {
    one_argument(state)?;
    let cfg = *config(state)?;
    if !matches!(ffi::lua_type(state, 1), ffi::LUA_TSTRING | ffi::LUA_TNUMBER) {
        return Err(lua_stack::raise_type(state, 1, "string"));
    }
    let data = bytes_at(state, 1);
    if data.len() >= 2 && (data[0] == 0 || data[1] == 0) {
        return Err(lua_stack::raise(
            state,
            b"JSON parser does not support UTF-16 or UTF-32",
        ));
    }
    decode(state, &cfg, call, data)?;
    Ok(1)
}

/// `json_arg_init`: at most `n` arguments ("found too many arguments" about argument n+1),
/// padded with nils to `n`.
unsafe fn options<'s>(state: *mut ffi::lua_State, n: c_int) -> Result<&'s mut Config, Raise> {
    if ffi::lua_gettop(state) > n {
        return Err(lua_stack::raise_argument(
            state,
            n + 1,
            b"found too many arguments",
        ));
    }
    ffi::lua_settop(state, n);
    config(state)
}

/// An integer setting from argument `idx` (unless nil) within `min..=max`; pushes the setting.
unsafe fn integer_option(
    state: *mut ffi::lua_State,
    idx: c_int,
    setting: &mut i32,
    min: i32,
    max: i32,
) -> Result<(), Raise> {
    if ffi::lua_isnil(state, idx) == 0 {
        let n = ffi::lua_tonumber(state, idx);
        if n == 0.0 && ffi::lua_isnumber(state, idx) == 0 {
            return Err(lua_stack::raise_type(state, idx, "number"));
        }
        // `luaL_checkinteger` into a C `int`.
        let value = c_long_of(n) as i32;
        if value < min || value > max {
            // lua-cjson names argument 1 whichever it is.
            let message = format!("expected integer between {min} and {max}");
            return Err(lua_stack::raise_argument(state, 1, message.as_bytes()));
        }
        *setting = value;
    }
    ffi::lua_pushinteger(state, (*setting).into());
    Ok(())
}

/// An option from argument `idx` (unless nil): a boolean, or one of `names` (`luaL_checkoption`);
/// pushes the setting (a boolean when it is 0 or 1, else its name).
unsafe fn enum_option(
    state: *mut ffi::lua_State,
    idx: c_int,
    setting: &mut i32,
    names: &[&str],
) -> Result<(), Raise> {
    if ffi::lua_isnil(state, idx) == 0 {
        if ffi::lua_type(state, idx) == ffi::LUA_TBOOLEAN {
            *setting = ffi::lua_toboolean(state, idx);
        } else {
            if !matches!(
                ffi::lua_type(state, idx),
                ffi::LUA_TSTRING | ffi::LUA_TNUMBER
            ) {
                return Err(lua_stack::raise_type(state, idx, "string"));
            }
            let name = bytes_at(state, idx);
            // `%s` of a C string: up to a NUL.
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            match names.iter().position(|n| n.as_bytes() == name) {
                Some(i) => *setting = i as i32,
                None => {
                    let mut message = b"invalid option '".to_vec();
                    message.extend_from_slice(name);
                    message.push(b'\'');
                    return Err(lua_stack::raise_argument(state, idx, &message));
                }
            }
        }
    }
    if *setting == 0 || *setting == 1 {
        ffi::lua_pushboolean(state, *setting);
    } else {
        let name = names[*setting as usize];
        ffi::lua_pushlstring(state, name.as_ptr().cast(), name.len());
    }
    Ok(())
}

const ON_OFF: [&str; 2] = ["off", "on"];

unsafe fn bool_option(
    state: *mut ffi::lua_State,
    idx: c_int,
    setting: &mut bool,
) -> Result<(), Raise> {
    let mut value = i32::from(*setting);
    enum_option(state, idx, &mut value, &ON_OFF)?;
    *setting = value != 0;
    Ok(())
}

unsafe fn encode_sparse_array_fn(
    state: *mut ffi::lua_State,
    _: &LibraryCall,
) -> Result<c_int, Raise> {
    let cfg = options(state, 3)?;
    bool_option(state, 1, &mut cfg.sparse_convert)?;
    integer_option(state, 2, &mut cfg.sparse_ratio, 0, i32::MAX)?;
    integer_option(state, 3, &mut cfg.sparse_safe, 0, i32::MAX)?;
    Ok(3)
}

unsafe fn encode_max_depth_fn(state: *mut ffi::lua_State, _: &LibraryCall) -> Result<c_int, Raise> {
    let cfg = options(state, 1)?;
    integer_option(state, 1, &mut cfg.encode_max_depth, 1, i32::MAX)?;
    Ok(1)
}

unsafe fn decode_max_depth_fn(state: *mut ffi::lua_State, _: &LibraryCall) -> Result<c_int, Raise> {
    let cfg = options(state, 1)?;
    integer_option(state, 1, &mut cfg.decode_max_depth, 1, i32::MAX)?;
    Ok(1)
}

unsafe fn encode_number_precision_fn(
    state: *mut ffi::lua_State,
    _: &LibraryCall,
) -> Result<c_int, Raise> {
    let cfg = options(state, 1)?;
    integer_option(state, 1, &mut cfg.encode_number_precision, 1, 14)?;
    Ok(1)
}

unsafe fn encode_keep_buffer_fn(
    state: *mut ffi::lua_State,
    _: &LibraryCall,
) -> Result<c_int, Raise> {
    let cfg = options(state, 1)?;
    bool_option(state, 1, &mut cfg.encode_keep_buffer)?;
    Ok(1)
}

unsafe fn encode_invalid_numbers_fn(
    state: *mut ffi::lua_State,
    _: &LibraryCall,
) -> Result<c_int, Raise> {
    let cfg = options(state, 1)?;
    enum_option(
        state,
        1,
        &mut cfg.encode_invalid_numbers,
        &["off", "on", "null"],
    )?;
    Ok(1)
}

unsafe fn decode_invalid_numbers_fn(
    state: *mut ffi::lua_State,
    _: &LibraryCall,
) -> Result<c_int, Raise> {
    let cfg = options(state, 1)?;
    bool_option(state, 1, &mut cfg.decode_invalid_numbers)?;
    Ok(1)
}

/// `cjson.new()`: another `cjson` table, with its own settings (the defaults).
unsafe fn new_fn(state: *mut ffi::lua_State, call: &LibraryCall) -> Result<c_int, Raise> {
    push_table(state, call.entry);
    Ok(1)
}

/// The table's functions by name.
const FUNCTIONS: [(&std::ffi::CStr, LibraryFn); 10] = [
    (c"encode", encode_fn),
    (c"decode", decode_fn),
    (c"encode_sparse_array", encode_sparse_array_fn),
    (c"encode_max_depth", encode_max_depth_fn),
    (c"decode_max_depth", decode_max_depth_fn),
    (c"encode_number_precision", encode_number_precision_fn),
    (c"encode_keep_buffer", encode_keep_buffer_fn),
    (c"encode_invalid_numbers", encode_invalid_numbers_fn),
    (c"decode_invalid_numbers", decode_invalid_numbers_fn),
    (c"new", new_fn),
];

/// Push a `cjson` table with its own settings; `entry` runs library functions.
///
/// # Safety
/// No memory limit (see `lua_stack`); room for 4 more values on the stack.
pub(super) unsafe fn push_table(state: *mut ffi::lua_State, entry: ffi::lua_CFunction) {
    ffi::lua_createtable(state, 0, FUNCTIONS.len() as c_int + 3);
    let cfg = ffi::lua_newuserdata(state, std::mem::size_of::<Config>()) as *mut Config;
    // Lua aligns a userdata's memory for any C type.
    cfg.write(Config::default());
    for (name, f) in FUNCTIONS {
        ffi::lua_pushvalue(state, -1);
        lua_stack::push_library_function(state, entry, f, 1);
        ffi::lua_setfield(state, -3, name.as_ptr());
    }
    ffi::lua_pop(state, 1);
    ffi::lua_pushlightuserdata(state, std::ptr::null_mut());
    ffi::lua_setfield(state, -2, c"null".as_ptr());
    ffi::lua_pushstring(state, c"cjson".as_ptr());
    ffi::lua_setfield(state, -2, c"_NAME".as_ptr());
    ffi::lua_pushstring(state, c"2.1.0".as_ptr());
    ffi::lua_setfield(state, -2, c"_VERSION".as_ptr());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_percent_14g() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (-5000.0, "-5000"),
            (0.1, "0.1"),
            (0.1 + 0.2, "0.3"),
            (1e100, "1e+100"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (123456789012345.0, "1.2345678901234e+14"),
            (12345678901234.0, "12345678901234"),
            (2f64.powi(-21), "4.7683715820312e-07"),
            (1.5, "1.5"),
            (-1023.2, "-1023.2"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
            (-f64::NAN, "-nan"),
            (2f64.powi(53), "9.007199254741e+15"),
            (5e-324, "4.9406564584125e-324"),
        ];
        for &(x, text) in cases {
            assert_eq!(format_number(x, 14), text, "{x}");
        }
        assert_eq!(format_number(2.46913, 3), "2.47");
        assert_eq!(format_number(1234.0, 1), "1e+03");
        assert_eq!(format_number(0.5, 1), "0.5");
    }

    #[test]
    fn strtod_reads_what_glibc_reads() {
        let cases: &[(&str, f64, usize)] = &[
            ("0", 0.0, 1),
            ("-5e3,", -5000.0, 4),
            ("0.3e-3", 0.0003, 6),
            ("1.", 1.0, 2),
            ("1.e2x", 100.0, 4),
            ("-.5", -0.5, 3),
            ("1e", 1.0, 1),
            ("1e+", 1.0, 1),
            ("01", 1.0, 2),
            ("+5", 5.0, 2),
            ("0x1F", 31.0, 4),
            ("0X1p4", 16.0, 5),
            ("0x1.8p1", 3.0, 7),
            ("0x.8", 0.5, 4),
            ("0x", 0.0, 1),
            ("0xg", 0.0, 1),
            ("-inf", f64::NEG_INFINITY, 4),
            ("Infinity]", f64::INFINITY, 8),
            ("infinit", f64::INFINITY, 3),
            ("1e400", f64::INFINITY, 5),
            ("123456789012345678901234567890", 1.2345678901234568e29, 30),
        ];
        for &(text, v, len) in cases {
            assert_eq!(strtod(text.as_bytes()), Some((v, len)), "{text}");
        }
        let (v, len) = strtod(b"nan(abc_1)x").unwrap();
        assert!(v.is_nan() && len == 10);
        let (v, len) = strtod(b"-nan(").unwrap();
        assert!(v.is_nan() && v.is_sign_negative() && len == 4);
        assert_eq!(strtod(b"-"), None);
        assert_eq!(strtod(b"+x"), None);
        assert_eq!(strtod(b"."), None);
        assert_eq!(strtod(b"1\x002"), Some((1.0, 1)));
    }

    #[test]
    fn strings_escape_as_lua_cjson_does() {
        let mut out = Vec::new();
        append_string(
            &mut out,
            b"a/b\"\\\x00\x01\x08\t\n\x0b\x0c\r\x1f\x7f\xc3\xa9",
        );
        assert_eq!(
            out,
            b"\"a\\/b\\\"\\\\\\u0000\\u0001\\b\\t\\n\\u000b\\f\\r\\u001f\\u007f\xc3\xa9\""
        );
    }

    fn tokens(text: &str) -> Vec<(TokenKind, usize)> {
        let mut lexer = Lexer::new(text.as_bytes(), true);
        let mut out = Vec::new();
        loop {
            let t = lexer.next();
            out.push((t.kind, t.at));
            if matches!(t.kind, TokenKind::End | TokenKind::Error(_)) {
                return out;
            }
        }
    }

    #[test]
    fn the_tokenizer_finds_lua_cjson_tokens_and_errors() {
        use TokenKind::*;
        assert_eq!(
            tokens(" [1, true,null]"),
            vec![
                (ArrBegin, 1),
                (Number(1.0), 2),
                (Comma, 3),
                (Boolean(true), 5),
                (Comma, 9),
                (Null, 10),
                (ArrEnd, 14),
                (End, 15)
            ]
        );
        assert_eq!(tokens("nul"), vec![(Error("invalid token"), 0)]);
        assert_eq!(
            tokens("\"abc"),
            vec![(Error("unexpected end of string"), 4)]
        );
        assert_eq!(tokens("\"a\\qb\""), vec![(Error("invalid escape code"), 2)]);
        assert_eq!(
            tokens("\"\\ud800\""),
            vec![(Error("invalid unicode escape code"), 1)]
        );
        assert_eq!(tokens("-"), vec![(Error("invalid number"), 0)]);
        assert_eq!(tokens("tru"), vec![(Error("invalid token"), 0)]);
        assert_eq!(
            tokens("[1]\0x"),
            vec![(ArrBegin, 0), (Number(1.0), 1), (ArrEnd, 2), (End, 3)]
        );
        let mut strict = Lexer::new(b"01", false);
        assert_eq!(strict.next().kind, Error("invalid number"));
        let mut strict = Lexer::new(b"nan", false);
        assert_eq!(strict.next().kind, Error("invalid token"));
    }

    #[test]
    fn strings_decode_escapes_and_surrogate_pairs() {
        let mut lexer = Lexer::new(br#""a\u00e9\ud83d\ude00\/\n\u0041""#, true);
        assert_eq!(lexer.next().kind, TokenKind::String);
        assert_eq!(lexer.string, "aé😀/\nA".as_bytes());
        let mut lexer = Lexer::new(br#""\udc00\u0041""#, true);
        assert_eq!(
            lexer.next().kind,
            TokenKind::Error("invalid unicode escape code")
        );
        let mut lexer = Lexer::new(br#""\ud83d\u0041""#, true);
        assert_eq!(
            lexer.next().kind,
            TokenKind::Error("invalid unicode escape code")
        );
        let mut lexer = Lexer::new(br#""\u12""#, true);
        assert_eq!(
            lexer.next().kind,
            TokenKind::Error("invalid unicode escape code")
        );
    }

    #[test]
    fn c_conversions_wrap_as_on_x86_64() {
        assert_eq!(c_int_of(5.0), 5);
        assert_eq!(c_int_of(2147483648.0), i32::MIN);
        assert_eq!(c_int_of(f64::INFINITY), i32::MIN);
        assert_eq!(c_long_of(4294967297.0) as i32, 1);
        assert_eq!(c_long_of(1e30), i64::MIN);
    }
}
