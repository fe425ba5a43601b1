//! The `bit` library every script and function sees, as Redis bundles it (LuaBitOp 1.0.2):
//! `tobit`, `tohex`, `bnot`, `band`, `bor`, `bxor`, `lshift`, `rshift`, `arshift`, `rol`,
//! `ror`, `bswap`. Arguments are read as LuaBitOp reads them on a Lua 5.1 with double numbers
//! (numbers and numeric strings, taken modulo 2^32 after rounding to the nearest integer, ties
//! to even; anything else is "number expected"), and every result is a signed 32-bit number.
//!
//! It owns the bit arithmetic (pure functions, unit-tested here) and the library table
//! ([`push_library`]). Its functions follow `lua_stack`'s library-call contract
//! ([`LibraryFn`]). May import: `mlua::ffi` and `lua_stack`'s library-call protocol; nothing
//! of the server.

use super::lua_stack::{self, LibraryCall, LibraryFn, Raise};
use mlua::ffi;
use std::os::raw::c_int;

/// LuaBitOp's conversion of a number: add 2^52 + 2^51 and keep the low 32 bits of the
/// double's representation (the number rounded to an integer, ties to even, modulo 2^32;
/// beyond ±2^51 what the addition leaves of it).
pub(super) fn to_bits(n: f64) -> u32 {
    (n + 6_755_399_441_055_744.0).to_bits() as u32
}

/// A result as a Lua number: the 32 bits read as a signed integer.
pub(super) fn to_number(b: u32) -> f64 {
    f64::from(b as i32)
}

pub(super) fn rol(b: u32, n: u32) -> u32 {
    b.rotate_left(n & 31)
}

pub(super) fn ror(b: u32, n: u32) -> u32 {
    b.rotate_right(n & 31)
}

pub(super) fn lshift(b: u32, n: u32) -> u32 {
    b << (n & 31)
}

pub(super) fn rshift(b: u32, n: u32) -> u32 {
    b >> (n & 31)
}

pub(super) fn arshift(b: u32, n: u32) -> u32 {
    ((b as i32) >> (n & 31)) as u32
}

/// `bit.tohex(b, n)`: `n` hex digits (the low ones; at most 8), upper case when `n` is
/// negative. i32::MIN (whose negation overflows in LuaBitOp's C) gives 8 upper-case digits,
/// as the redis-server builds of Debian answer.
pub(super) fn tohex(b: u32, n: i32) -> Vec<u8> {
    let (digits, n): (&[u8; 16], i32) = if n < 0 {
        (b"0123456789ABCDEF", n.checked_neg().unwrap_or(8))
    } else {
        (b"0123456789abcdef", n)
    };
    let n = n.min(8) as u32;
    (0..n)
        .rev()
        .map(|i| digits[((b >> (4 * i)) & 15) as usize])
        .collect()
}

/// Argument `idx` as LuaBitOp reads it (`barg`): `lua_tonumber`, and "number expected" when
/// that gives 0 for something that is not a number (nor a numeric string).
///
/// # Safety
/// `state` is the state of a C function call.
unsafe fn arg(state: *mut ffi::lua_State, idx: c_int) -> Result<u32, Raise> {
    let b = to_bits(ffi::lua_tonumber(state, idx));
    if b == 0 && ffi::lua_isnumber(state, idx) == 0 {
        return Err(lua_stack::raise_type(state, idx, "number"));
    }
    Ok(b)
}

/// Push one result.
unsafe fn ret(state: *mut ffi::lua_State, b: u32) -> Result<c_int, Raise> {
    ffi::lua_pushnumber(state, to_number(b));
    Ok(1)
}

unsafe fn tobit_fn(state: *mut ffi::lua_State, _: &LibraryCall) -> Result<c_int, Raise> {
    let b = arg(state, 1)?;
    ret(state, b)
}

unsafe fn bnot_fn(state: *mut ffi::lua_State, _: &LibraryCall) -> Result<c_int, Raise> {
    let b = arg(state, 1)?;
    ret(state, !b)
}

/// `band`/`bor`/`bxor`: the first argument, then the others from the last one down (the
/// order LuaBitOp reads them in, which decides which bad argument it names).
unsafe fn fold(state: *mut ffi::lua_State, op: fn(u32, u32) -> u32) -> Result<c_int, Raise> {
    let mut b = arg(state, 1)?;
    let mut i = ffi::lua_gettop(state);
    while i > 1 {
        b = op(b, arg(state, i)?);
        i -= 1;
    }
    ret(state, b)
}

unsafe fn band_fn(state: *mut ffi::lua_State, _: &LibraryCall) -> Result<c_int, Raise> {
    fold(state, |a, b| a & b)
}

unsafe fn bor_fn(state: *mut ffi::lua_State, _: &LibraryCall) -> Result<c_int, Raise> {
    fold(state, |a, b| a | b)
}

unsafe fn bxor_fn(state: *mut ffi::lua_State, _: &LibraryCall) -> Result<c_int, Raise> {
    fold(state, |a, b| a ^ b)
}

unsafe fn shift(state: *mut ffi::lua_State, op: fn(u32, u32) -> u32) -> Result<c_int, Raise> {
    let b = arg(state, 1)?;
    let n = arg(state, 2)?;
    ret(state, op(b, n))
}

unsafe fn lshift_fn(state: *mut ffi::lua_State, _: &LibraryCall) -> Result<c_int, Raise> {
    shift(state, lshift)
}

unsafe fn rshift_fn(state: *mut ffi::lua_State, _: &LibraryCall) -> Result<c_int, Raise> {
    shift(state, rshift)
}

unsafe fn arshift_fn(state: *mut ffi::lua_State, _: &LibraryCall) -> Result<c_int, Raise> {
    shift(state, arshift)
}

unsafe fn rol_fn(state: *mut ffi::lua_State, _: &LibraryCall) -> Result<c_int, Raise> {
    shift(state, rol)
}

unsafe fn ror_fn(state: *mut ffi::lua_State, _: &LibraryCall) -> Result<c_int, Raise> {
    shift(state, ror)
}

unsafe fn bswap_fn(state: *mut ffi::lua_State, _: &LibraryCall) -> Result<c_int, Raise> {
    let b = arg(state, 1)?;
    ret(state, b.swap_bytes())
}

unsafe fn tohex_fn(state: *mut ffi::lua_State, _: &LibraryCall) -> Result<c_int, Raise> {
    let b = arg(state, 1)?;
    let n = if ffi::lua_isnone(state, 2) != 0 {
        8
    } else {
        arg(state, 2)? as i32
    };
    let text = tohex(b, n);
    ffi::lua_pushlstring(state, text.as_ptr().cast(), text.len());
    Ok(1)
}

/// The library's functions by name.
const FUNCTIONS: [(&std::ffi::CStr, LibraryFn); 12] = [
    (c"tobit", tobit_fn),
    (c"bnot", bnot_fn),
    (c"band", band_fn),
    (c"bor", bor_fn),
    (c"bxor", bxor_fn),
    (c"lshift", lshift_fn),
    (c"rshift", rshift_fn),
    (c"arshift", arshift_fn),
    (c"rol", rol_fn),
    (c"ror", ror_fn),
    (c"bswap", bswap_fn),
    (c"tohex", tohex_fn),
];

/// Push the `bit` table; `entry` runs library functions (see [`LibraryFn`]).
///
/// # Safety
/// No memory limit (see `lua_stack`); room for 3 more values on the stack.
pub(super) unsafe fn push_library(state: *mut ffi::lua_State, entry: ffi::lua_CFunction) {
    ffi::lua_createtable(state, 0, FUNCTIONS.len() as c_int);
    for (name, f) in FUNCTIONS {
        lua_stack::push_library_function(state, entry, f, 0);
        ffi::lua_setfield(state, -2, name.as_ptr());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(x: f64) -> f64 {
        to_number(to_bits(x))
    }

    #[test]
    fn numbers_are_rounded_to_even_and_wrapped_to_32_bits() {
        assert_eq!(n(1.0), 1.0);
        assert_eq!(n(-1.0), -1.0);
        assert_eq!(n(1.5), 2.0);
        assert_eq!(n(2.5), 2.0);
        assert_eq!(n(-0.5), 0.0);
        assert_eq!(n(2147483647.0), 2147483647.0);
        assert_eq!(n(2147483648.0), -2147483648.0);
        assert_eq!(n(4294967296.0 + 5.0), 5.0);
        assert_eq!(n(4294967295.0), -1.0);
        // 2^53: the addition cannot hold its low bits.
        assert_eq!(n(9007199254740992.0), 0.0);
        assert_eq!(n(f64::NAN), 0.0);
    }

    #[test]
    fn shifts_and_rotations_use_the_low_5_bits_of_the_count() {
        assert_eq!(to_number(lshift(1, 31)), -2147483648.0);
        assert_eq!(lshift(1, 32), 1);
        assert_eq!(to_number(rshift(u32::MAX, 1)), 2147483647.0);
        assert_eq!(to_number(arshift(-16i32 as u32, 2)), -4.0);
        assert_eq!(rol(0x8000_0001, 1), 3);
        assert_eq!(to_number(ror(1, 1)), -2147483648.0);
        assert_eq!(to_number(0x1234_5678u32.swap_bytes()), 2018915346.0);
    }

    #[test]
    fn tohex_digits_and_case() {
        assert_eq!(tohex(1, 8), b"00000001");
        assert_eq!(tohex(u32::MAX, -4), b"FFFF");
        assert_eq!(tohex(0xabcdef, 9), b"00abcdef");
        assert_eq!(tohex(0xabcdef, 0), b"");
        assert_eq!(tohex(0xabcdef, i32::MIN), b"00ABCDEF");
        assert_eq!(tohex(0x1234_5678, 2), b"78");
    }
}
