//! The `cmsgpack` library Redis gives every script and every function (lua_cmsgpack 0.4.0 as
//! bundled in Redis 7.2): `pack`, `unpack`, `unpack_one`, `unpack_limit` and the `_NAME`,
//! `_VERSION`, `_COPYRIGHT`, `_DESCRIPTION` fields, with that library's encoding choices (its
//! array-or-map rule, tables nested past 16 levels packed as nil, integral numbers as ints and
//! others as float32 when exact else float64, strings as fixstr/str8/str16/str32), what it
//! decodes (no bin or ext: "Bad data format in input.") and its error texts.
//!
//! The functions are C functions (`mlua::ffi`) that use the Lua stack as the original does, so
//! a script meets the same stack limits with the same texts (`stack overflow (…)`). They run
//! under the script's memory limit, where any Lua API call that allocates may raise "not
//! enough memory" (a longjmp): no frame of this module holds anything to drop while it calls
//! Lua (integers, slices, references and `MaybeUninit` arrays only). A packed string is measured
//! first and then written into a Lua userdata, never into a Rust allocation, and a header that
//! claims more than the input holds fails with "Missing bytes in input." before anything is
//! allocated for it. May import: `mlua` and the parent's `SCRIPT_MEMORY_LIMIT` and `push_memory_error`; nothing else of
//! the server.

use super::push_memory_error;
use mlua::{ffi, Lua, Table};
use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::raw::{c_char, c_int};

/// Tables nested deeper than this are packed as nil (lua_cmsgpack's `LUACMSGPACK_MAX_NESTING`),
/// which also ends a table that contains itself.
const MAX_NESTING: usize = 16;
/// Lua's limit on the stack slots of one C function call (`LUAI_MAXCSTACK`); every container
/// `unpack` has open holds at least one, so it never has more open than this.
const MAX_OPEN: usize = 8000;
/// A packed string longer than this fails as the allocation would under the memory limit (and
/// a table referring to itself at every level cannot make `pack` count for ever).
const MAX_PACKED: usize = super::SCRIPT_MEMORY_LIMIT;

/// Add the `cmsgpack` table to `globals` (fields in lua_cmsgpack's order, so `pairs` lists them
/// in Redis' order).
pub(super) fn install(lua: &Lua, globals: &Table) -> mlua::Result<()> {
    let lib = lua.create_table()?;
    // SAFETY: each follows the module's contract (see the module docs).
    unsafe {
        lib.raw_set("pack", lua.create_c_function(pack)?)?;
        lib.raw_set("unpack", lua.create_c_function(unpack)?)?;
        lib.raw_set("unpack_one", lua.create_c_function(unpack_one)?)?;
        lib.raw_set("unpack_limit", lua.create_c_function(unpack_limit)?)?;
    }
    lib.raw_set("_NAME", "cmsgpack")?;
    lib.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    lib.raw_set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    lib.raw_set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    globals.raw_set("cmsgpack", lib)
}

// ---------------------------------------------------------------------------------------------
// Encoding (pure)

/// Where packed bytes go: `pack` first only counts them ([`Measure`]), then writes them
/// ([`Fill`]). `put` answers false when they do not fit.
trait Sink {
    fn put(&mut self, bytes: &[u8]) -> bool;
}

/// Counts bytes, up to [`MAX_PACKED`].
struct Measure(usize);

impl Sink for Measure {
    fn put(&mut self, bytes: &[u8]) -> bool {
        match self.0.checked_add(bytes.len()) {
            Some(len) if len <= MAX_PACKED => {
                self.0 = len;
                true
            }
            _ => false,
        }
    }
}

/// Writes bytes into a buffer measured beforehand.
struct Fill<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl Sink for Fill<'_> {
    fn put(&mut self, bytes: &[u8]) -> bool {
        let Some(end) = self.at.checked_add(bytes.len()) else {
            return false;
        };
        match self.out.get_mut(self.at..end) {
            Some(to) => {
                to.copy_from_slice(bytes);
                self.at = end;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) -> bool {
        self.extend_from_slice(bytes);
        true
    }
}

/// A header byte followed by `n` as a big-endian number of `width` bytes.
fn put_sized(sink: &mut impl Sink, code: u8, n: u64, width: usize) -> bool {
    let be = n.to_be_bytes();
    sink.put(&[code]) && sink.put(&be[8 - width..])
}

/// The smallest msgpack int for `n`, as lua_cmsgpack chooses it (unsigned forms for n >= 0).
fn put_int(sink: &mut impl Sink, n: i64) -> bool {
    if n >= 0 {
        match n {
            0..=127 => sink.put(&[n as u8]),
            128..=0xff => put_sized(sink, 0xcc, n as u64, 1),
            0x100..=0xffff => put_sized(sink, 0xcd, n as u64, 2),
            0x1_0000..=0xffff_ffff => put_sized(sink, 0xce, n as u64, 4),
            _ => put_sized(sink, 0xcf, n as u64, 8),
        }
    } else {
        match n {
            -32..=-1 => sink.put(&[n as u8]),
            -128..=-33 => put_sized(sink, 0xd0, n as u64, 1),
            -32768..=-129 => put_sized(sink, 0xd1, n as u64, 2),
            -2_147_483_648..=-32769 => put_sized(sink, 0xd2, n as u64, 4),
            _ => put_sized(sink, 0xd3, n as u64, 8),
        }
    }
}

/// A number that is an integer (finite, integral, in i64's range: lua_cmsgpack's
/// `IS_INT64_EQUIVALENT`) is packed as one.
fn as_int(n: f64) -> Option<i64> {
    let in_range = (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&n);
    (in_range && n.trunc() == n).then_some(n as i64)
}

/// Any other number: float32 when that holds it exactly (infinities too), else float64 (NaN
/// too, its bits as they are).
fn put_float(sink: &mut impl Sink, n: f64) -> bool {
    let single = n as f32;
    if f64::from(single) == n {
        sink.put(&[0xca]) && sink.put(&single.to_be_bytes())
    } else {
        sink.put(&[0xcb]) && sink.put(&n.to_be_bytes())
    }
}

fn put_number(sink: &mut impl Sink, n: f64) -> bool {
    match as_int(n) {
        Some(i) => put_int(sink, i),
        None => put_float(sink, n),
    }
}

/// A string's header: fixstr below 32 bytes, then str8 (lua_cmsgpack uses it), str16, str32.
fn put_str_header(sink: &mut impl Sink, len: usize) -> bool {
    match len {
        0..=31 => sink.put(&[0xa0 | len as u8]),
        32..=0xff => put_sized(sink, 0xd9, len as u64, 1),
        0x100..=0xffff => put_sized(sink, 0xda, len as u64, 2),
        _ => put_sized(sink, 0xdb, len as u64 & 0xffff_ffff, 4),
    }
}

/// An array's or a map's header (`fix` is 0x90 for arrays, 0x80 for maps).
fn put_container_header(sink: &mut impl Sink, fix: u8, len: usize) -> bool {
    let (code16, code32) = if fix == 0x90 {
        (0xdc, 0xdd)
    } else {
        (0xde, 0xdf)
    };
    match len {
        0..=15 => sink.put(&[fix | len as u8]),
        16..=0xffff => put_sized(sink, code16, len as u64, 2),
        _ => put_sized(sink, code32, len as u64 & 0xffff_ffff, 4),
    }
}

/// A table key that may be an array index: a positive integral number that C's `(int)` cast
/// keeps (lua_cmsgpack's test; larger keys make the table a map).
fn array_index(key: f64) -> Option<i32> {
    (key > 0.0 && key <= f64::from(i32::MAX) && key.trunc() == key).then_some(key as i32)
}

// ---------------------------------------------------------------------------------------------
// Encoding (Lua stack)

/// Why `pack` stopped: a Lua stack check failed (lua_cmsgpack's text for it), or the packed
/// string would pass [`MAX_PACKED`].
#[derive(Clone, Copy, Debug)]
enum PackError {
    Stack(&'static CStr),
    TooLong,
}

unsafe fn check_stack(
    state: *mut ffi::lua_State,
    slots: c_int,
    what: &'static CStr,
) -> Result<(), PackError> {
    if ffi::lua_checkstack(state, slots) == 0 {
        return Err(PackError::Stack(what));
    }
    Ok(())
}

fn fits(ok: bool) -> Result<(), PackError> {
    if ok {
        Ok(())
    } else {
        Err(PackError::TooLong)
    }
}

/// The bytes of the string at `idx` (a string, not a number: no conversion in place).
unsafe fn string_at<'a>(state: *mut ffi::lua_State, idx: c_int) -> &'a [u8] {
    let mut len = 0usize;
    let ptr = ffi::lua_tolstring(state, idx, &mut len);
    if ptr.is_null() {
        return &[];
    }
    std::slice::from_raw_parts(ptr.cast::<u8>(), len)
}

/// Pack the value at the absolute index `idx`, `level` tables deep. Leaves the stack as it
/// found it (unless it fails: the caller then raises).
unsafe fn encode(
    state: *mut ffi::lua_State,
    idx: c_int,
    sink: &mut impl Sink,
    level: usize,
) -> Result<(), PackError> {
    match ffi::lua_type(state, idx) {
        ffi::LUA_TSTRING => {
            let bytes = string_at(state, idx);
            fits(put_str_header(sink, bytes.len()) && sink.put(bytes))
        }
        ffi::LUA_TBOOLEAN => {
            let code = if ffi::lua_toboolean(state, idx) != 0 {
                0xc3
            } else {
                0xc2
            };
            fits(sink.put(&[code]))
        }
        ffi::LUA_TNUMBER => fits(put_number(sink, ffi::lua_tonumber(state, idx))),
        ffi::LUA_TTABLE if level < MAX_NESTING => {
            if is_array(state, idx)? {
                encode_array(state, idx, sink, level)
            } else {
                encode_map(state, idx, sink, level)
            }
        }
        // nil, functions, userdata, threads, and tables past the nesting limit.
        _ => fits(sink.put(&[0xc0])),
    }
}

/// lua_cmsgpack's rule: a table is an array when its keys are exactly 1..n (an empty table
/// too), else a map.
unsafe fn is_array(state: *mut ffi::lua_State, idx: c_int) -> Result<bool, PackError> {
    check_stack(state, 2, c"in function table_is_an_array")?;
    let top = ffi::lua_gettop(state);
    let (mut count, mut max) = (0i32, 0i32);
    ffi::lua_pushnil(state);
    while ffi::lua_next(state, idx) != 0 {
        ffi::lua_pop(state, 1);
        let index = if ffi::lua_type(state, -1) == ffi::LUA_TNUMBER {
            array_index(ffi::lua_tonumber(state, -1))
        } else {
            None
        };
        let Some(index) = index else {
            ffi::lua_settop(state, top);
            return Ok(false);
        };
        max = max.max(index);
        count = count.wrapping_add(1);
    }
    Ok(max == count)
}

unsafe fn encode_array(
    state: *mut ffi::lua_State,
    idx: c_int,
    sink: &mut impl Sink,
    level: usize,
) -> Result<(), PackError> {
    let len = ffi::lua_objlen(state, idx);
    fits(put_container_header(sink, 0x90, len))?;
    check_stack(state, 1, c"in function mp_encode_lua_table_as_array")?;
    for index in 1..=len {
        ffi::lua_rawgeti_(state, idx, index as c_int);
        encode(state, ffi::lua_gettop(state), sink, level + 1)?;
        ffi::lua_pop(state, 1);
    }
    Ok(())
}

unsafe fn encode_map(
    state: *mut ffi::lua_State,
    idx: c_int,
    sink: &mut impl Sink,
    level: usize,
) -> Result<(), PackError> {
    check_stack(state, 3, c"in function mp_encode_lua_table_as_map")?;
    let mut len = 0usize;
    ffi::lua_pushnil(state);
    while ffi::lua_next(state, idx) != 0 {
        ffi::lua_pop(state, 1);
        len += 1;
    }
    fits(put_container_header(sink, 0x80, len))?;
    ffi::lua_pushnil(state);
    while ffi::lua_next(state, idx) != 0 {
        // [… key value]: the key is packed from a copy on top, as lua_cmsgpack does.
        ffi::lua_pushvalue(state, -2);
        let top = ffi::lua_gettop(state);
        encode(state, top, sink, level + 1)?;
        ffi::lua_pop(state, 1);
        encode(state, top - 1, sink, level + 1)?;
        ffi::lua_pop(state, 1);
    }
    Ok(())
}

unsafe fn raise_pack_error(state: *mut ffi::lua_State, error: PackError) -> c_int {
    match error {
        PackError::Stack(what) => {
            ffi::luaL_error(state, c"stack overflow (%s)".as_ptr(), what.as_ptr())
        }
        PackError::TooLong => {
            push_memory_error(state);
            ffi::lua_error(state)
        }
    }
}

/// `cmsgpack.pack(v1, v2, …)`: the values packed one after the other, as one string.
unsafe extern "C-unwind" fn pack(state: *mut ffi::lua_State) -> c_int {
    let nargs = ffi::lua_gettop(state);
    if nargs == 0 {
        return ffi::luaL_argerror(state, 0, c"MessagePack pack needs input.".as_ptr());
    }
    if ffi::lua_checkstack(state, nargs) == 0 {
        return ffi::luaL_argerror(
            state,
            0,
            c"Too many arguments for MessagePack pack.".as_ptr(),
        );
    }
    for arg in 1..=nargs {
        // Measure, with the value copied on top as lua_cmsgpack packs it (same stack use).
        if let Err(error) = check_stack(state, 1, c"in function mp_check") {
            return raise_pack_error(state, error);
        }
        ffi::lua_pushvalue(state, arg);
        let copy = ffi::lua_gettop(state);
        let mut measure = Measure(0);
        let measured = encode(state, copy, &mut measure, 0);
        ffi::lua_settop(state, copy - 1);
        if let Err(error) = measured {
            return raise_pack_error(state, error);
        }
        // Write into a userdata in the slot the copy had (so the stack use is the same again).
        let buffer = ffi::lua_newuserdata(state, measure.0).cast::<u8>();
        let mut fill = Fill {
            out: std::slice::from_raw_parts_mut(buffer, measure.0),
            at: 0,
        };
        if let Err(error) = encode(state, arg, &mut fill, 0) {
            return raise_pack_error(state, error);
        }
        let written = fill.at;
        // The argument is not read again: its slot keeps the buffer while the string is made.
        ffi::lua_replace(state, arg);
        ffi::lua_pushlstring(state, buffer as *const c_char, written);
    }
    ffi::lua_concat(state, nargs);
    1
}

// ---------------------------------------------------------------------------------------------
// Decoding (pure)

/// One msgpack item as its head gives it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Head<'a> {
    Nil,
    Bool(bool),
    Number(f64),
    Str(&'a [u8]),
    Array(u32),
    Map(u32),
}

/// Why decoding stopped (lua_cmsgpack's cursor errors).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// "Missing bytes in input."
    Eof,
    /// "Bad data format in input." (bin, ext, 0xc1)
    BadFormat,
}

/// The item at the start of `input` and the bytes it takes: its head, and a string's bytes
/// (an array's or map's items follow). Numbers come out as lua_cmsgpack pushes them: uint 64
/// through a signed 64-bit integer (2^63 and above wrap negative), int 64 rounded to a double.
fn head(input: &[u8]) -> Result<(Head<'_>, usize), Fault> {
    let first = *input.first().ok_or(Fault::Eof)?;
    let uint = |width: usize| -> Result<u64, Fault> {
        let bytes = input.get(1..1 + width).ok_or(Fault::Eof)?;
        Ok(bytes.iter().fold(0u64, |n, &b| n << 8 | u64::from(b)))
    };
    let string = |width: usize| -> Result<(Head<'_>, usize), Fault> {
        let len = uint(width)? as usize;
        let start = 1 + width;
        let end = start.checked_add(len).ok_or(Fault::Eof)?;
        Ok((Head::Str(input.get(start..end).ok_or(Fault::Eof)?), end))
    };
    use Head::{Array, Bool, Map, Nil, Number};
    Ok(match first {
        0xc0 => (Nil, 1),
        0xc2 => (Bool(false), 1),
        0xc3 => (Bool(true), 1),
        0xcc => (Number(uint(1)? as f64), 2),
        0xcd => (Number(uint(2)? as f64), 3),
        0xce => (Number(uint(4)? as f64), 5),
        0xcf => (Number(uint(8)? as i64 as f64), 9),
        0xd0 => (Number(f64::from(uint(1)? as u8 as i8)), 2),
        0xd1 => (Number(f64::from(uint(2)? as u16 as i16)), 3),
        0xd2 => (Number(f64::from(uint(4)? as u32 as i32)), 5),
        0xd3 => (Number(uint(8)? as i64 as f64), 9),
        0xca => (Number(f64::from(f32::from_bits(uint(4)? as u32))), 5),
        0xcb => (Number(f64::from_bits(uint(8)?)), 9),
        0xd9 => string(1)?,
        0xda => string(2)?,
        0xdb => string(4)?,
        0xdc => (Array(uint(2)? as u32), 3),
        0xdd => (Array(uint(4)? as u32), 5),
        0xde => (Map(uint(2)? as u32), 3),
        0xdf => (Map(uint(4)? as u32), 5),
        0x00..=0x7f => (Number(f64::from(first)), 1),
        0xe0..=0xff => (Number(f64::from(first as i8)), 1),
        0xa0..=0xbf => {
            let end = 1 + usize::from(first & 0x1f);
            (Head::Str(input.get(1..end).ok_or(Fault::Eof)?), end)
        }
        0x90..=0x9f => (Array(u32::from(first & 0x0f)), 1),
        0x80..=0x8f => (Map(u32::from(first & 0x0f)), 1),
        _ => return Err(Fault::BadFormat),
    })
}

// ---------------------------------------------------------------------------------------------
// Decoding (Lua stack)

/// Why `unpack` stopped: a cursor fault, or a Lua stack check that failed (its text).
#[derive(Clone, Copy, Debug)]
enum UnpackError {
    Fault(Fault),
    Stack(&'static CStr),
}

const TOO_MANY_VALUES: &CStr =
    c"too many return values at once; use unpack_one or unpack_limit instead.";

/// A container being filled: an array's items left and the index of the one being decoded
/// (pushed, under it), or a map's pairs left and whether its key is on the stack.
#[derive(Clone, Copy)]
enum Open {
    Array { left: u32, index: u32 },
    Map { left: u32, has_key: bool },
}

/// Decode one value from the start of `rest` onto the stack (consuming it), building tables
/// as lua_cmsgpack does (empty tables filled item by item, an array's nil items assigned too),
/// so they come out laid out, and iterated, as in Redis. `open` is scratch space.
unsafe fn decode(
    state: *mut ffi::lua_State,
    rest: &mut &[u8],
    open: &mut [MaybeUninit<Open>],
) -> Result<(), UnpackError> {
    let mut depth = 0usize;
    loop {
        let input = *rest;
        if input.is_empty() {
            return Err(UnpackError::Fault(Fault::Eof));
        }
        if ffi::lua_checkstack(state, 1) == 0 {
            return Err(UnpackError::Stack(TOO_MANY_VALUES));
        }
        let (item, used) = head(input).map_err(UnpackError::Fault)?;
        *rest = input.get(used..).unwrap_or(&[]);
        let opened = match item {
            Head::Nil => {
                ffi::lua_pushnil(state);
                None
            }
            Head::Bool(b) => {
                ffi::lua_pushboolean(state, c_int::from(b));
                None
            }
            Head::Number(n) => {
                ffi::lua_pushnumber(state, n);
                None
            }
            Head::Str(bytes) => {
                ffi::lua_pushlstring(state, bytes.as_ptr().cast(), bytes.len());
                None
            }
            Head::Array(len) => {
                ffi::lua_createtable(state, 0, 0);
                if ffi::lua_checkstack(state, 1) == 0 {
                    return Err(UnpackError::Stack(c"in function mp_decode_to_lua_array"));
                }
                (len > 0).then_some(Open::Array {
                    left: len,
                    index: 1,
                })
            }
            Head::Map(len) => {
                ffi::lua_createtable(state, 0, 0);
                (len > 0).then_some(Open::Map {
                    left: len,
                    has_key: false,
                })
            }
        };
        if let Some(container) = opened {
            let Some(slot) = open.get_mut(depth) else {
                return Err(UnpackError::Stack(TOO_MANY_VALUES));
            };
            slot.write(container);
            depth += 1;
            if let Open::Array { index, .. } = container {
                ffi::lua_pushnumber(state, f64::from(index));
            }
            continue;
        }
        // A whole value is on top: store it in the containers it completes.
        loop {
            let Some(last) = depth.checked_sub(1) else {
                return Ok(());
            };
            let Some(slot) = open.get_mut(last) else {
                return Ok(());
            };
            // SAFETY: slots below `depth` were written when their container was opened.
            let container = slot.assume_init_mut();
            match container {
                Open::Array { left, index } => {
                    // [… table index value]
                    ffi::lua_settable(state, -3);
                    *left -= 1;
                    if *left > 0 {
                        *index = index.wrapping_add(1);
                        ffi::lua_pushnumber(state, f64::from(*index));
                        break;
                    }
                }
                Open::Map { left, has_key } => {
                    if !*has_key {
                        *has_key = true;
                        break;
                    }
                    // [… table key value]: a nil or NaN key raises Lua's own error here.
                    ffi::lua_settable(state, -3);
                    *has_key = false;
                    *left -= 1;
                    if *left > 0 {
                        break;
                    }
                }
            }
            depth = last;
        }
    }
}

/// lua_cmsgpack's `mp_unpack_full`: decode up to `limit` values from `offset` (both 0: every
/// value, and no offset returned); otherwise the next offset (-1 at the end) comes first.
unsafe fn unpack_values(state: *mut ffi::lua_State, limit: i64, offset: i64) -> c_int {
    let mut len = 0usize;
    let ptr = ffi::luaL_checklstring(state, 1, &mut len);
    let input = std::slice::from_raw_parts(ptr.cast::<u8>(), len);
    let decode_all = limit == 0 && offset == 0;
    if offset < 0 || limit < 0 {
        // (lua_cmsgpack prints the input's length as the limit.)
        return ffi::luaL_error(
            state,
            c"Invalid request to unpack with offset of %d and limit of %d.".as_ptr(),
            offset as c_int,
            len as c_int,
        );
    }
    if offset as u64 > len as u64 {
        return ffi::luaL_error(
            state,
            c"Start offset %d greater than input length %d.".as_ptr(),
            offset as c_int,
            len as c_int,
        );
    }
    let limit = if decode_all {
        i64::from(i32::MAX)
    } else {
        limit
    };
    let mut rest = input.get(offset as usize..).unwrap_or(&[]);
    let mut open = [const { MaybeUninit::<Open>::uninit() }; MAX_OPEN];
    let mut count: c_int = 0;
    while !rest.is_empty() && i64::from(count) < limit {
        match decode(state, &mut rest, &mut open) {
            Ok(()) => count += 1,
            Err(UnpackError::Fault(Fault::Eof)) => {
                return ffi::luaL_error(state, c"%s".as_ptr(), c"Missing bytes in input.".as_ptr())
            }
            Err(UnpackError::Fault(Fault::BadFormat)) => {
                return ffi::luaL_error(
                    state,
                    c"%s".as_ptr(),
                    c"Bad data format in input.".as_ptr(),
                )
            }
            Err(UnpackError::Stack(what)) => {
                return ffi::luaL_error(state, c"stack overflow (%s)".as_ptr(), what.as_ptr())
            }
        }
    }
    if !decode_all {
        if ffi::lua_checkstack(state, 1) == 0 {
            return ffi::luaL_error(
                state,
                c"stack overflow (%s)".as_ptr(),
                c"in function mp_unpack_full".as_ptr(),
            );
        }
        let next = if rest.is_empty() {
            -1
        } else {
            (len - rest.len()) as i64
        };
        ffi::lua_pushinteger(state, next as ffi::lua_Integer);
        ffi::lua_insert(state, 2);
        count += 1;
    }
    count
}

/// `cmsgpack.unpack(s)`: every value packed in `s`.
unsafe extern "C-unwind" fn unpack(state: *mut ffi::lua_State) -> c_int {
    unpack_values(state, 0, 0)
}

/// `cmsgpack.unpack_one(s [, offset])`: the next offset (-1 at the end), then one value.
unsafe extern "C-unwind" fn unpack_one(state: *mut ffi::lua_State) -> c_int {
    let offset = ffi::luaL_optinteger(state, 2, 0);
    ffi::lua_pop(state, ffi::lua_gettop(state) - 1);
    unpack_values(state, 1, offset as i64)
}

/// `cmsgpack.unpack_limit(s, limit [, offset])`: the next offset, then up to `limit` values.
unsafe extern "C-unwind" fn unpack_limit(state: *mut ffi::lua_State) -> c_int {
    let limit = ffi::luaL_checkinteger(state, 2);
    let offset = ffi::luaL_optinteger(state, 3, 0);
    ffi::lua_pop(state, ffi::lua_gettop(state) - 1);
    unpack_values(state, limit as i64, offset as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(f: impl FnOnce(&mut Vec<u8>) -> bool) -> Vec<u8> {
        let mut out = Vec::new();
        assert!(f(&mut out));
        out
    }

    #[test]
    fn integers_take_the_smallest_form_lua_cmsgpack_picks() {
        let cases: &[(i64, &[u8])] = &[
            (0, &[0x00]),
            (127, &[0x7f]),
            (128, &[0xcc, 0x80]),
            (255, &[0xcc, 0xff]),
            (256, &[0xcd, 0x01, 0x00]),
            (65535, &[0xcd, 0xff, 0xff]),
            (65536, &[0xce, 0, 1, 0, 0]),
            (4_294_967_295, &[0xce, 0xff, 0xff, 0xff, 0xff]),
            (4_294_967_296, &[0xcf, 0, 0, 0, 1, 0, 0, 0, 0]),
            (-1, &[0xff]),
            (-32, &[0xe0]),
            (-33, &[0xd0, 0xdf]),
            (-128, &[0xd0, 0x80]),
            (-129, &[0xd1, 0xff, 0x7f]),
            (-32768, &[0xd1, 0x80, 0x00]),
            (-32769, &[0xd2, 0xff, 0xff, 0x7f, 0xff]),
            (
                -2_147_483_649,
                &[0xd3, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff],
            ),
            (-1_099_511_627_776, &[0xd3, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0]),
        ];
        for (n, bytes) in cases {
            assert_eq!(packed(|s| put_number(s, *n as f64)), *bytes, "{n}");
        }
    }

    #[test]
    fn numbers_that_are_not_int64s_are_float32_when_exact() {
        assert_eq!(
            packed(|s| put_number(s, 0.5)),
            [0xca, 0x3f, 0x00, 0x00, 0x00]
        );
        assert_eq!(
            packed(|s| put_number(s, 0.1)),
            [0xcb, 0x3f, 0xb9, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a]
        );
        assert_eq!(
            packed(|s| put_number(s, f64::INFINITY)),
            [0xca, 0x7f, 0x80, 0, 0]
        );
        assert_eq!(
            packed(|s| put_number(s, 2f64.powi(63))),
            [0xca, 0x5f, 0, 0, 0]
        );
        assert_eq!(packed(|s| put_number(s, -0.0)), [0x00]);
        assert_eq!(packed(|s| put_number(s, -(2f64.powi(63))))[0], 0xd3);
        assert_eq!(packed(|s| put_number(s, f64::NAN))[0], 0xcb);
    }

    #[test]
    fn string_and_container_headers() {
        assert_eq!(packed(|s| put_str_header(s, 31)), [0xbf]);
        assert_eq!(packed(|s| put_str_header(s, 32)), [0xd9, 32]);
        assert_eq!(packed(|s| put_str_header(s, 255)), [0xd9, 255]);
        assert_eq!(packed(|s| put_str_header(s, 256)), [0xda, 1, 0]);
        assert_eq!(packed(|s| put_str_header(s, 65536)), [0xdb, 0, 1, 0, 0]);
        assert_eq!(packed(|s| put_container_header(s, 0x90, 15)), [0x9f]);
        assert_eq!(packed(|s| put_container_header(s, 0x90, 16)), [0xdc, 0, 16]);
        assert_eq!(
            packed(|s| put_container_header(s, 0x80, 65536)),
            [0xdf, 0, 1, 0, 0]
        );
    }

    #[test]
    fn array_keys_are_positive_ints() {
        assert_eq!(array_index(1.0), Some(1));
        assert_eq!(array_index(2_147_483_647.0), Some(i32::MAX));
        assert_eq!(array_index(2_147_483_648.0), None);
        assert_eq!(array_index(0.0), None);
        assert_eq!(array_index(1.5), None);
        assert_eq!(array_index(f64::NAN), None);
    }

    #[test]
    fn heads_decode_as_lua_cmsgpack_pushes_them() {
        assert_eq!(
            head(&[0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            Ok((Head::Number(-1.0), 9))
        );
        assert_eq!(head(&[0xd1, 0xff, 0x7f]), Ok((Head::Number(-129.0), 3)));
        assert_eq!(head(&[0xe0]), Ok((Head::Number(-32.0), 1)));
        assert_eq!(head(&[0xa2, b'h', b'i', 0]), Ok((Head::Str(b"hi"), 3)));
        assert_eq!(head(&[0xdd, 0, 0, 0, 3]), Ok((Head::Array(3), 5)));
        assert_eq!(head(&[0x83]), Ok((Head::Map(3), 1)));
        assert_eq!(head(&[0xca, 0x3f, 0, 0, 0]), Ok((Head::Number(0.5), 5)));
    }

    #[test]
    fn short_or_unknown_input_fails_without_allocating() {
        assert_eq!(head(&[]), Err(Fault::Eof));
        assert_eq!(head(&[0xd9]), Err(Fault::Eof));
        assert_eq!(head(&[0xa3, b'a']), Err(Fault::Eof));
        // A str32 claiming 4 GiB in a 5-byte input.
        assert_eq!(head(&[0xdb, 0xff, 0xff, 0xff, 0xff]), Err(Fault::Eof));
        assert_eq!(head(&[0xcd, 1]), Err(Fault::Eof));
        for code in [
            0xc1, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8,
        ] {
            assert_eq!(
                head(&[code, 0, 0, 0, 0, 0]),
                Err(Fault::BadFormat),
                "{code:#x}"
            );
        }
    }

    #[test]
    fn measure_stops_past_the_limit_and_fill_never_overruns() {
        let mut measure = Measure(MAX_PACKED - 1);
        assert!(measure.put(b"x"));
        assert!(!measure.put(b"x"));
        let mut buffer = [0u8; 2];
        let mut fill = Fill {
            out: &mut buffer,
            at: 0,
        };
        assert!(fill.put(b"ab"));
        assert!(!fill.put(b"c"));
    }

    /// Runs `script` in a state with the library installed (no sandbox, no memory limit).
    fn eval<T: mlua::FromLuaMulti>(script: &str) -> mlua::Result<T> {
        let lua = Lua::new();
        install(&lua, &lua.globals())?;
        lua.load(script).eval()
    }

    #[test]
    fn pack_and_unpack_round_trip_in_a_state() {
        let hex: String = eval(
            "local s = cmsgpack.pack({1, 2, {a = true}}, 'x', nil, 1.5)
             return (s:gsub('.', function(c) return string.format('%02x', c:byte()) end))",
        )
        .unwrap();
        assert_eq!(hex, "93010281a161c3a178c0ca3fc00000");
        let (offset, value): (i64, i64) =
            eval("return cmsgpack.unpack_one(cmsgpack.pack(7, 8))").unwrap();
        assert_eq!((offset, value), (1, 7));
        let n: i64 = eval("return select('#', cmsgpack.unpack(cmsgpack.pack(1, 2, 3)))").unwrap();
        assert_eq!(n, 3);
        let deep: i64 = eval(
            "local t = {} t.x = t
             local u = cmsgpack.unpack(cmsgpack.pack(t))
             local n = 0 while type(u) == 'table' do u = u.x n = n + 1 end return n",
        )
        .unwrap();
        assert_eq!(deep, 16);
    }

    #[test]
    fn errors_carry_lua_cmsgpack_texts() {
        let text = |script: &str| eval::<()>(script).unwrap_err().to_string();
        assert!(text("cmsgpack.unpack('\\217')").contains("Missing bytes in input."));
        assert!(text("cmsgpack.unpack('\\196\\0')").contains("Bad data format in input."));
        assert!(text("cmsgpack.pack()")
            .contains("bad argument #0 to 'pack' (MessagePack pack needs input.)"));
        assert!(text("cmsgpack.unpack('\\129\\192\\1')").contains("table index is nil"));
        assert!(text("cmsgpack.unpack('\\221\\255\\255\\255\\255')")
            .contains("Missing bytes in input."));
        assert!(text("cmsgpack.unpack_limit('\\1', -1)")
            .contains("Invalid request to unpack with offset of 0 and limit of 1."));
        let nested = format!("cmsgpack.unpack('{}')", "\\145".repeat(5000));
        assert!(text(&nested).contains("stack overflow"));
    }
}
