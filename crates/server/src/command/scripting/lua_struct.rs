//! The `struct` library Redis gives every script and every function (Roberto Ierusalimschy's
//! struct.c as bundled in Redis 7.2): `struct.pack(fmt, …)`, `struct.unpack(fmt, s [, pos])`
//! (the values, then the position after them) and `struct.size(fmt)`, with its format language
//! (`<` `>` `!n` `x` `b` `B` `h` `H` `l` `L` `T` `i[n]` `I[n]` `f` `d` `s` `c[n]` and spaces),
//! its alignment rule, its error texts and what its C conversions do on x86-64 (a `long` of 8
//! bytes, little-endian by default; sizes past 8 bytes pack zeros above the 64-bit value).
//!
//! The functions are C functions (`mlua::ffi`) that raise with Lua's own `luaL_*` checks, so
//! argument errors read as in Redis. They run under the script's memory limit, where a Lua API
//! call that allocates may raise (a longjmp): no frame of this module holds anything to drop
//! while it calls Lua. `pack` measures its result first and writes it into a Lua userdata.
//! May import: `mlua` and the parent's `SCRIPT_MEMORY_LIMIT` and `push_memory_error`; nothing else of the server.

use super::push_memory_error;
use mlua::{ffi, Lua, Table};
use std::os::raw::{c_char, c_int};

/// The largest `i`/`I` size (`MAXINTSIZE`).
const MAX_INT_SIZE: usize = 32;
/// `!` without a number: the strictest alignment of the platform (`MAXALIGN`, 8 on x86-64).
const MAX_ALIGN: i32 = 8;
/// A packed string longer than this fails as the allocation would under the memory limit.
const MAX_PACKED: usize = super::SCRIPT_MEMORY_LIMIT;

/// Add the `struct` table to `globals`.
pub(super) fn install(lua: &Lua, globals: &Table) -> mlua::Result<()> {
    let lib = lua.create_table()?;
    // SAFETY: each follows the module's contract (see the module docs).
    unsafe {
        lib.raw_set("pack", lua.create_c_function(pack)?)?;
        lib.raw_set("unpack", lua.create_c_function(unpack)?)?;
        lib.raw_set("size", lua.create_c_function(size)?)?;
    }
    globals.raw_set("struct", lib)
}

// ---------------------------------------------------------------------------------------------
// The format language (pure)

/// Byte order and maximum alignment, as the format's `<`, `>` and `!` set them.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Header {
    little: bool,
    align: usize,
}

impl Default for Header {
    /// The platform's byte order (little-endian) and no alignment.
    fn default() -> Header {
        Header {
            little: true,
            align: 1,
        }
    }
}

/// A format error, raised with struct.c's text.
#[derive(Clone, Copy, Debug, PartialEq)]
enum FormatError {
    /// "integral size overflow"
    Overflow,
    /// "integral size %d is larger than limit of 32"
    IntTooLarge(i32),
    /// "alignment %d is not a power of 2"
    NotPowerOfTwo(i32),
    /// "invalid format option '%c'" (as an error about argument #1)
    InvalidOption(u8),
}

/// The format: its bytes up to the first NUL (struct.c reads it as a C string), and where the
/// next option is.
struct Format<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Format<'a> {
    fn new(bytes: &'a [u8]) -> Format<'a> {
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        Format {
            bytes: bytes.get(..end).unwrap_or(&[]),
            at: 0,
        }
    }

    fn next_option(&mut self) -> Option<u8> {
        let opt = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(opt)
    }

    /// The number that follows, or `default` when none does (an `int`, with struct.c's
    /// overflow check).
    fn number(&mut self, default: i32) -> Result<i32, FormatError> {
        let mut n: i32 = 0;
        let mut any = false;
        while let Some(&digit @ b'0'..=b'9') = self.bytes.get(self.at) {
            let digit = i32::from(digit - b'0');
            if n > i32::MAX / 10 || n * 10 > i32::MAX - digit {
                return Err(FormatError::Overflow);
            }
            n = n * 10 + digit;
            self.at += 1;
            any = true;
        }
        Ok(if any { n } else { default })
    }

    /// The size of option `opt` (reading its number if it takes one); 0 for the options that
    /// need no alignment (`s`, `<`, `>`, `!`, space, and unknown ones).
    fn size(&mut self, opt: u8) -> Result<usize, FormatError> {
        Ok(match opt {
            b'b' | b'B' | b'x' => 1,
            b'h' | b'H' => 2,
            b'l' | b'L' | b'T' | b'd' => 8,
            b'f' => 4,
            b'c' => self.number(1)? as usize,
            b'i' | b'I' => {
                let size = self.number(4)?;
                if size as usize > MAX_INT_SIZE {
                    return Err(FormatError::IntTooLarge(size));
                }
                size as usize
            }
            _ => 0,
        })
    }

    /// Apply a control option (`<`, `>`, `!n`, space) to `header`.
    fn control(&mut self, opt: u8, header: &mut Header) -> Result<(), FormatError> {
        match opt {
            b' ' => {}
            b'>' => header.little = false,
            b'<' => header.little = true,
            b'!' => {
                let align = self.number(MAX_ALIGN)?;
                if align <= 0 || align & (align - 1) != 0 {
                    return Err(FormatError::NotPowerOfTwo(align));
                }
                header.align = align as usize;
            }
            _ => return Err(FormatError::InvalidOption(opt)),
        }
        Ok(())
    }
}

/// Padding before an item of `size` bytes at offset `len`: to a multiple of the smaller of
/// `size` and the maximum alignment (`c` and zero-sized items are never aligned). struct.c's
/// arithmetic, wrapping as C's `size_t` does (a size that is not a power of 2 gives its odd
/// results too).
fn padding(len: usize, header: Header, opt: u8, size: usize) -> usize {
    if size == 0 || opt == b'c' {
        return 0;
    }
    let size = size.min(header.align);
    let mask = size.wrapping_sub(1);
    size.wrapping_sub(len & mask) & mask
}

/// C's `(unsigned long)` conversion of a double as x86-64 code does it (values from 2^63 on
/// go through a subtraction; NaN and what overflows become 2^63 or 0).
fn to_unsigned_long(n: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    /// `cvttsd2si`: truncation, 2^63 (the "integer indefinite") when out of range or NaN.
    fn truncate(n: f64) -> u64 {
        if (-TWO_63..TWO_63).contains(&n) {
            n as i64 as u64
        } else {
            1 << 63
        }
    }
    if n.is_nan() || n < TWO_63 {
        truncate(n)
    } else {
        truncate(n - TWO_63) ^ (1 << 63)
    }
}

/// The bits struct.c packs for number `n`: negative numbers through `long`, others through
/// `unsigned long`.
fn integer_bits(n: f64) -> u64 {
    if n < 0.0 {
        if n >= -9_223_372_036_854_775_808.0 {
            n as i64 as u64
        } else {
            1 << 63
        }
    } else {
        to_unsigned_long(n)
    }
}

/// `value` as `size` bytes (up to 32: the bytes past the 8th are zero).
fn integer_bytes(value: u64, size: usize, little: bool) -> [u8; MAX_INT_SIZE] {
    let mut out = [0u8; MAX_INT_SIZE];
    let le = value.to_le_bytes();
    for (i, &b) in le.iter().enumerate().take(size.min(8)) {
        let at = if little { i } else { size - 1 - i };
        if let Some(slot) = out.get_mut(at) {
            *slot = b;
        }
    }
    out
}

/// An integer read from `bytes` as struct.c reads it: its last 8 bytes in significance order
/// count, and a signed value is sign-extended from bit `size * 8 - 1` (shift counts wrap
/// modulo 64, as on x86-64).
fn read_integer(bytes: &[u8], little: bool, signed: bool) -> f64 {
    let fold = |n: u64, &b: &u8| n << 8 | u64::from(b);
    let value = if little {
        bytes.iter().rev().fold(0, fold)
    } else {
        bytes.iter().fold(0, fold)
    };
    if !signed {
        return value as f64;
    }
    let shift = (bytes.len() as i32).wrapping_mul(8).wrapping_sub(1) as u32;
    let mask = u64::MAX.wrapping_shl(shift);
    let value = if value & mask != 0 {
        value | mask
    } else {
        value
    };
    value as i64 as f64
}

// ---------------------------------------------------------------------------------------------
// The functions (Lua stack)

/// Raise `error` as struct.c does.
unsafe fn raise_format_error(state: *mut ffi::lua_State, error: FormatError) -> c_int {
    match error {
        FormatError::Overflow => {
            ffi::luaL_error(state, c"%s".as_ptr(), c"integral size overflow".as_ptr())
        }
        FormatError::IntTooLarge(size) => ffi::luaL_error(
            state,
            c"integral size %d is larger than limit of %d".as_ptr(),
            size as c_int,
            MAX_INT_SIZE as c_int,
        ),
        FormatError::NotPowerOfTwo(align) => ffi::luaL_error(
            state,
            c"alignment %d is not a power of 2".as_ptr(),
            align as c_int,
        ),
        FormatError::InvalidOption(opt) => {
            let text = ffi::lua_pushfstring(
                state,
                c"invalid format option '%c'".as_ptr(),
                c_int::from(opt),
            );
            ffi::luaL_argerror(state, 1, text)
        }
    }
}

/// Unwrap a format step, raising its error.
macro_rules! format_step {
    ($state:expr, $step:expr) => {
        match $step {
            Ok(value) => value,
            Err(error) => return raise_format_error($state, error),
        }
    };
}

/// The format string (argument 1). The slice lives while the argument stays on the stack.
unsafe fn format_arg<'a>(state: *mut ffi::lua_State) -> &'a [u8] {
    let mut len = 0usize;
    let ptr = ffi::luaL_checklstring(state, 1, &mut len);
    std::slice::from_raw_parts(ptr.cast::<u8>(), len)
}

/// Where `pack` puts its bytes: counted only (`buffer` None), then written into the buffer
/// counted for.
struct Out<'a> {
    buffer: Option<&'a mut [u8]>,
    len: usize,
}

impl Out<'_> {
    /// False when the result would pass [`MAX_PACKED`].
    fn put(&mut self, bytes: &[u8]) -> bool {
        let Some(end) = self
            .len
            .checked_add(bytes.len())
            .filter(|&end| end <= MAX_PACKED)
        else {
            return false;
        };
        if let Some(to) = self
            .buffer
            .as_deref_mut()
            .and_then(|b| b.get_mut(self.len..end))
        {
            to.copy_from_slice(bytes);
        }
        self.len = end;
        true
    }
}

/// One pass of `struct.pack` over the format and the arguments: raises on the first error, in
/// struct.c's order; returns 0, or 1 after raising.
unsafe fn pack_into(state: *mut ffi::lua_State, fmt: &[u8], out: &mut Out<'_>) -> c_int {
    let mut format = Format::new(fmt);
    let mut header = Header::default();
    let mut arg: c_int = 2;
    let mut total = 0usize;
    macro_rules! put {
        ($bytes:expr) => {
            if !out.put($bytes) {
                push_memory_error(state);
                ffi::lua_error(state);
            }
        };
    }
    while let Some(opt) = format.next_option() {
        let mut size = format_step!(state, format.size(opt));
        let pad = padding(total, header, opt, size);
        total = total.wrapping_add(pad);
        for _ in 0..pad {
            put!(&[0]);
        }
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = ffi::luaL_checknumber(state, arg);
                arg += 1;
                let bytes = integer_bytes(integer_bits(n), size, header.little);
                put!(bytes.get(..size).unwrap_or(&[]));
            }
            b'x' => put!(&[0]),
            b'f' => {
                let n = ffi::luaL_checknumber(state, arg) as f32;
                arg += 1;
                put!(&if header.little {
                    n.to_le_bytes()
                } else {
                    n.to_be_bytes()
                });
            }
            b'd' => {
                let n = ffi::luaL_checknumber(state, arg);
                arg += 1;
                put!(&if header.little {
                    n.to_le_bytes()
                } else {
                    n.to_be_bytes()
                });
            }
            b'c' | b's' => {
                let mut len = 0usize;
                let ptr = ffi::luaL_checklstring(state, arg, &mut len);
                arg += 1;
                let s = std::slice::from_raw_parts(ptr.cast::<u8>(), len);
                if size == 0 {
                    size = len;
                }
                if len < size {
                    // (struct.c names the argument after the string.)
                    return ffi::luaL_argerror(state, arg, c"string too short".as_ptr());
                }
                put!(s.get(..size).unwrap_or(&[]));
                if opt == b's' {
                    put!(&[0]);
                    size += 1;
                }
            }
            _ => format_step!(state, format.control(opt, &mut header)),
        }
        total = total.wrapping_add(size);
    }
    0
}

/// `struct.pack(fmt, …)`: the arguments packed as `fmt` says.
unsafe extern "C-unwind" fn pack(state: *mut ffi::lua_State) -> c_int {
    let fmt = format_arg(state);
    // struct.c's mark between the arguments and its buffer: a missing argument reads as nil.
    ffi::lua_pushnil(state);
    let mut measure = Out {
        buffer: None,
        len: 0,
    };
    pack_into(state, fmt, &mut measure);
    let buffer = ffi::lua_newuserdata(state, measure.len).cast::<u8>();
    let mut fill = Out {
        buffer: Some(std::slice::from_raw_parts_mut(buffer, measure.len)),
        len: 0,
    };
    pack_into(state, fmt, &mut fill);
    ffi::lua_pushlstring(state, buffer as *const c_char, fill.len);
    1
}

/// `struct.unpack(fmt, s [, pos])`: the values read from `s` at `pos` (1-based), then the
/// position after them.
unsafe extern "C-unwind" fn unpack(state: *mut ffi::lua_State) -> c_int {
    let fmt = format_arg(state);
    let mut len = 0usize;
    let ptr = ffi::luaL_checklstring(state, 2, &mut len);
    let data = std::slice::from_raw_parts(ptr.cast::<u8>(), len);
    // A negative position is a huge `size_t` to struct.c.
    let mut pos = ffi::luaL_optinteger(state, 3, 1) as usize;
    if pos == 0 {
        return ffi::luaL_argerror(state, 3, c"offset must be 1 or greater".as_ptr());
    }
    pos -= 1;
    let mut results: c_int = 0;
    let mut format = Format::new(fmt);
    let mut header = Header::default();
    while let Some(opt) = format.next_option() {
        let mut size = format_step!(state, format.size(opt));
        pos = pos.wrapping_add(padding(pos, header, opt, size));
        let fits = |size: usize, pos: usize| size <= len && pos <= len - size;
        if !fits(size, pos) {
            return ffi::luaL_argerror(state, 2, c"data string too short".as_ptr());
        }
        if ffi::lua_checkstack(state, 2) == 0 {
            return ffi::luaL_error(
                state,
                c"stack overflow (%s)".as_ptr(),
                c"too many results".as_ptr(),
            );
        }
        let item = data.get(pos..pos + size).unwrap_or(&[]);
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let signed = opt.is_ascii_lowercase();
                ffi::lua_pushnumber(state, read_integer(item, header.little, signed));
                results += 1;
            }
            b'x' => {}
            b'f' => {
                let bytes: [u8; 4] = item.try_into().unwrap_or_default();
                let n = if header.little {
                    f32::from_le_bytes(bytes)
                } else {
                    f32::from_be_bytes(bytes)
                };
                ffi::lua_pushnumber(state, f64::from(n));
                results += 1;
            }
            b'd' => {
                let bytes: [u8; 8] = item.try_into().unwrap_or_default();
                let n = if header.little {
                    f64::from_le_bytes(bytes)
                } else {
                    f64::from_be_bytes(bytes)
                };
                ffi::lua_pushnumber(state, n);
                results += 1;
            }
            b'c' => {
                if size == 0 {
                    // `c0`: the length is the value read just before.
                    if results == 0 || ffi::lua_isnumber(state, -1) == 0 {
                        return ffi::luaL_error(
                            state,
                            c"%s".as_ptr(),
                            c"format 'c0' needs a previous size".as_ptr(),
                        );
                    }
                    size = to_unsigned_long(ffi::lua_tonumber(state, -1)) as usize;
                    ffi::lua_pop(state, 1);
                    results -= 1;
                    if !fits(size, pos) {
                        return ffi::luaL_argerror(state, 2, c"data string too short".as_ptr());
                    }
                }
                let bytes = data.get(pos..pos + size).unwrap_or(&[]);
                ffi::lua_pushlstring(state, bytes.as_ptr().cast(), bytes.len());
                results += 1;
            }
            b's' => {
                let rest = data.get(pos..).unwrap_or(&[]);
                let Some(end) = rest.iter().position(|&b| b == 0) else {
                    return ffi::luaL_error(
                        state,
                        c"%s".as_ptr(),
                        c"unfinished string in data".as_ptr(),
                    );
                };
                ffi::lua_pushlstring(state, rest.as_ptr().cast(), end);
                results += 1;
                size = end + 1;
            }
            _ => format_step!(state, format.control(opt, &mut header)),
        }
        pos = pos.wrapping_add(size);
    }
    ffi::lua_pushinteger(state, pos.wrapping_add(1) as ffi::lua_Integer);
    results + 1
}

/// `struct.size(fmt)`: the bytes `fmt` packs to (no `s` or `c0` in it). Letters it does not
/// know are skipped here (struct.c passes only non-alphanumeric options on as control options).
unsafe extern "C-unwind" fn size(state: *mut ffi::lua_State) -> c_int {
    let fmt = format_arg(state);
    let mut format = Format::new(fmt);
    let mut header = Header::default();
    let mut pos = 0usize;
    while let Some(opt) = format.next_option() {
        let size = format_step!(state, format.size(opt));
        pos = pos.wrapping_add(padding(pos, header, opt, size));
        if opt == b's' {
            return ffi::luaL_argerror(state, 1, c"option 's' has no fixed size".as_ptr());
        }
        if opt == b'c' && size == 0 {
            return ffi::luaL_argerror(state, 1, c"option 'c0' has no fixed size".as_ptr());
        }
        if !opt.is_ascii_alphanumeric() {
            format_step!(state, format.control(opt, &mut header));
        }
        pos = pos.wrapping_add(size);
    }
    ffi::lua_pushinteger(state, pos as ffi::lua_Integer);
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_numbers_of_options() {
        let mut f = Format::new(b"i12c");
        assert_eq!(f.next_option(), Some(b'i'));
        assert_eq!(f.size(b'i'), Ok(12));
        assert_eq!(f.next_option(), Some(b'c'));
        assert_eq!(f.size(b'c'), Ok(1));
        assert_eq!(
            Format::new(b"33").size(b'i'),
            Err(FormatError::IntTooLarge(33))
        );
        assert_eq!(
            Format::new(b"99999999999").size(b'c'),
            Err(FormatError::Overflow)
        );
        assert_eq!(Format::new(b"2147483647").number(0), Ok(i32::MAX));
        assert_eq!(Format::new(b"a\0b").bytes, b"a");
    }

    #[test]
    fn control_options() {
        let mut header = Header::default();
        assert_eq!(Format::new(b"").control(b'!', &mut header), Ok(()));
        assert_eq!(header.align, 8);
        assert_eq!(
            Format::new(b"3").control(b'!', &mut header),
            Err(FormatError::NotPowerOfTwo(3))
        );
        assert_eq!(
            Format::new(b"0").control(b'!', &mut header),
            Err(FormatError::NotPowerOfTwo(0))
        );
        assert_eq!(Format::new(b"").control(b'>', &mut header), Ok(()));
        assert!(!header.little);
        assert_eq!(
            Format::new(b"").control(b'z', &mut header),
            Err(FormatError::InvalidOption(b'z'))
        );
    }

    #[test]
    fn padding_follows_the_maximum_alignment() {
        let aligned = Header {
            little: true,
            align: 8,
        };
        assert_eq!(padding(1, aligned, b'i', 4), 3);
        assert_eq!(padding(1, aligned, b'd', 8), 7);
        assert_eq!(
            padding(
                3,
                Header {
                    little: true,
                    align: 2
                },
                b'd',
                8
            ),
            1
        );
        assert_eq!(padding(1, Header::default(), b'i', 4), 0);
        assert_eq!(padding(1, aligned, b'c', 4), 0);
        assert_eq!(padding(1, aligned, b's', 0), 0);
    }

    #[test]
    fn integers_pack_as_x86_64_c_converts_them() {
        assert_eq!(integer_bits(-1.0), u64::MAX);
        assert_eq!(integer_bits(-0.5), 0);
        assert_eq!(integer_bits(2f64.powi(63)), 1 << 63);
        assert_eq!(integer_bits(2f64.powi(64)), 0);
        assert_eq!(integer_bits(f64::INFINITY), 0);
        assert_eq!(integer_bits(f64::NEG_INFINITY), 1 << 63);
        assert_eq!(integer_bits(f64::NAN), 1 << 63);
        assert_eq!(&integer_bytes(0x0102, 4, false)[..4], &[0, 0, 1, 2]);
        assert_eq!(
            &integer_bytes(u64::MAX, 10, true)[..10],
            &[255, 255, 255, 255, 255, 255, 255, 255, 0, 0]
        );
    }

    #[test]
    fn integers_unpack_with_struct_c_sign_extension() {
        assert_eq!(read_integer(&[0xff, 0xfe], true, true), -257.0);
        assert_eq!(read_integer(&[0xff, 0xfe], false, false), 65534.0);
        assert_eq!(read_integer(&[0x80], true, true), -128.0);
        assert_eq!(read_integer(&[], true, true), 0.0);
        let nine = [1u8, 0, 0, 0, 0, 0, 0, 0, 0];
        // 9 bytes: the mask is !0 << 7 (71 mod 64), so bit 0 alone is not negative...
        assert_eq!(read_integer(&nine, true, true), 1.0);
        // ...but bit 7 is.
        assert_eq!(
            read_integer(&[0x80, 0, 0, 0, 0, 0, 0, 0, 0], true, true),
            -128.0
        );
    }

    fn eval<T: mlua::FromLuaMulti>(script: &str) -> mlua::Result<T> {
        let lua = Lua::new();
        install(&lua, &lua.globals())?;
        lua.load(script).eval()
    }

    #[test]
    fn pack_unpack_and_size_in_a_state() {
        let (h, i, s, next): (i64, i64, String, i64) =
            eval("return struct.unpack('>!4 h i s', struct.pack('>!4 h i s', -2, 7, 'hi'))")
                .unwrap();
        assert_eq!((h, i, s.as_str(), next), (-2, 7, "hi", 12));
        let size: i64 = eval("return struct.size('!8 b d')").unwrap();
        assert_eq!(size, 16);
        let len: i64 = eval("return #struct.pack('<i3 c0', 1, 'abc')").unwrap();
        assert_eq!(len, 6);
    }

    #[test]
    fn errors_carry_struct_c_texts() {
        let text = |script: &str| eval::<()>(script).unwrap_err().to_string();
        assert!(text("struct.pack('i')")
            .contains("bad argument #2 to 'pack' (number expected, got nil)"));
        assert!(text("struct.pack('c5', 'ab')")
            .contains("bad argument #3 to 'pack' (string too short)"));
        assert!(text("struct.pack('z')")
            .contains("bad argument #1 to 'pack' (invalid format option 'z')"));
        assert!(text("struct.unpack('i', 'ab')").contains("data string too short"));
        assert!(text("struct.unpack('c0', 'ab')").contains("format 'c0' needs a previous size"));
        assert!(text("struct.unpack('s', 'ab')").contains("unfinished string in data"));
        assert!(text("struct.size('s')").contains("option 's' has no fixed size"));
        assert!(text("struct.size('!3')").contains("alignment 3 is not a power of 2"));
        assert!(text("struct.size('i40')").contains("integral size 40 is larger than limit of 32"));
    }
}
