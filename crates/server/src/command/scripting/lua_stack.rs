//! Script values ↔ RESP frames through Lua's C API (`mlua::ffi`), for the per-call path of a
//! script run: `redis.call`'s arguments read from the Lua stack, its reply pushed onto it (by
//! Redis' RESP2 conversions, or its RESP3 ones after `redis.setresp(3)`), a script's
//! `KEYS`/`ARGV` filled (a function's `keys`/`args` pushed as fresh tables), and the value a
//! script returns read as a reply (`{map=…}`, `{set=…}`, `{double=…}`, `{big_number=…}`,
//! `{verbatim_string=…}` and booleans as Redis 7.2 reads them).
//!
//! Why not mlua's `Value`: mlua moves every string it hands to Rust onto its reference thread
//! (and back to push it), keeps a slot for it there, and wraps each call in its own error
//! handling; for a script that runs a few commands that bookkeeping was a large share of the
//! server's time per call. Here a string is read in place (`lua_tolstring`) and pushed once
//! (`lua_pushlstring`).
//!
//! Contract of every function here: it runs on a state with NO memory limit (mlua's allocator
//! then never fails: it succeeds or the process aborts, as any Rust allocation does), so none
//! of these Lua API calls can raise a Lua error and unwind (longjmp) through Rust frames; and
//! it keeps the stack balanced as documented. May import: `gradus_proto::Frame`, `bytes`,
//! `mlua::ffi`; nothing of the server.

use bytes::Bytes;
use gradus_proto::Frame;
use mlua::ffi;
use std::os::raw::c_int;

/// Why `redis.call`'s arguments cannot be a command (Redis' texts, without `ERR `).
pub(super) const NO_ARGUMENTS: &str =
    "Please specify at least one argument for this redis lib call";
pub(super) const BAD_ARGUMENT: &str = "Lua redis lib command arguments must be strings or integers";

/// The field Redis 7 sets (to true) in the error table of a command's error reply given to a
/// script: the error was counted in INFO errorstats when the command failed, so a script that
/// returns or raises that table does not count it again (`ignore_error_stats_update`).
pub(super) const COUNTED: &str = "ignore_error_stats_update";

thread_local! {
    /// The error codes of the tables marked [`COUNTED`] that [`to_frame`] made errors of on this
    /// thread since [`take_counted`] was last called.
    static COUNTED_CODES: std::cell::RefCell<Vec<String>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Note that an error reply with `text` was counted already (see [`COUNTED`]).
pub(super) fn note_counted(text: &str) {
    let code = text.split(' ').next().unwrap_or("").to_string();
    COUNTED_CODES.with(|c| c.borrow_mut().push(code));
}

/// The codes [`note_counted`] noted since the last call, taken.
pub(super) fn take_counted() -> Vec<String> {
    COUNTED_CODES.with(|c| std::mem::take(&mut *c.borrow_mut()))
}

/// Mark the error table at `idx` (absolute) as counted ([`COUNTED`] = true).
///
/// # Safety
/// As [`push_field`]; `idx` is a table.
pub(super) unsafe fn mark_counted(state: *mut ffi::lua_State, idx: c_int) {
    push_field(state, idx, COUNTED.as_bytes(), |state| {
        ffi::lua_pushboolean(state, 1)
    });
}

/// Whether the table at `idx` (absolute) is marked [`COUNTED`]. Stack balanced.
unsafe fn is_counted(state: *mut ffi::lua_State, idx: c_int) -> bool {
    push_bytes(state, COUNTED.as_bytes());
    ffi::lua_rawget(state, idx);
    let counted = ffi::lua_toboolean(state, -1) != 0;
    ffi::lua_pop(state, 1);
    counted
}

/// The bytes of the string at `idx`. The slice lives as long as the value stays on the stack.
///
/// # Safety
/// `idx` is a valid index of a string (not a number: `lua_tolstring` would convert it in place).
unsafe fn string_at<'a>(state: *mut ffi::lua_State, idx: c_int) -> &'a [u8] {
    let mut len = 0usize;
    let ptr = ffi::lua_tolstring(state, idx, &mut len);
    if ptr.is_null() {
        return &[];
    }
    std::slice::from_raw_parts(ptr as *const u8, len)
}

/// A Lua number returned as an integer reply, as redis-server makes it: C's `(long long)` cast,
/// which on x86-64 truncates toward zero and gives `i64::MIN` for NaN and for anything out of
/// range (2^63 and above included: 9223372036854775806 read into a Lua number *is* 2^63, so
/// `return redis.call('DECRBY', k, 1)` from i64::MAX answers -9223372036854775808 in Redis).
/// Rust's `as` saturates instead (regression: a differential seed answered 9223372036854775807).
pub(super) fn reply_integer(n: f64) -> i64 {
    if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&n) {
        n as i64
    } else {
        i64::MIN
    }
}

/// A number given to `redis.call`, as the command sees it: an integral value as an integer,
/// anything else as Rust formats the double. (mlua's rule, which this replaces: a number
/// within `EPSILON` of its truncation is an integer.)
pub(super) fn number_arg(n: f64) -> Bytes {
    if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&n) {
        let i = n as i64;
        if (n - i as f64).abs() < f64::EPSILON {
            return Bytes::from(i.to_string());
        }
    }
    if n.fract() == 0.0 && n.abs() < 1e17 {
        Bytes::from((n as i64).to_string())
    } else {
        Bytes::from(format!("{n}"))
    }
}

/// The arguments of a `redis.call` (stack slots `1..=top`), copied: strings as they are,
/// numbers formatted ([`number_arg`]).
///
/// # Safety
/// `state` is the state of a C function call; the stack is not changed.
pub(super) unsafe fn command_args(state: *mut ffi::lua_State) -> Result<Vec<Bytes>, &'static str> {
    let top = ffi::lua_gettop(state);
    if top < 1 {
        return Err(NO_ARGUMENTS);
    }
    let mut args = Vec::with_capacity(top as usize);
    for idx in 1..=top {
        match ffi::lua_type(state, idx) {
            ffi::LUA_TSTRING => args.push(Bytes::copy_from_slice(string_at(state, idx))),
            ffi::LUA_TNUMBER => args.push(number_arg(ffi::lua_tonumber(state, idx))),
            _ => return Err(BAD_ARGUMENT),
        }
    }
    Ok(args)
}

/// Push `bytes` as a Lua string.
unsafe fn push_bytes(state: *mut ffi::lua_State, bytes: &[u8]) {
    ffi::lua_pushlstring(state, bytes.as_ptr() as *const _, bytes.len());
}

/// Push a table `{field = text}` (`{ok=…}` or `{err=…}`).
unsafe fn push_field_table(state: *mut ffi::lua_State, field: &[u8], text: &[u8]) {
    ffi::lua_createtable(state, 0, 1);
    push_bytes(state, field);
    push_bytes(state, text);
    ffi::lua_rawset(state, -3);
}

/// Push a command's reply as Redis gives it to a script (RESP2 conversions, also for RESP3
/// connections): one value more on the stack.
///
/// # Safety
/// No memory limit (see the module docs); the state has room for at least 3 more slots (a C
/// function always has: `LUA_MINSTACK`); deeper nesting asks for its own room.
pub(super) unsafe fn push_frame(state: *mut ffi::lua_State, frame: &Frame) {
    match frame {
        Frame::Integer(n) => ffi::lua_pushinteger(state, *n as ffi::lua_Integer),
        Frame::Bulk(b) => push_bytes(state, b),
        Frame::Verbatim { text, .. } => push_bytes(state, text),
        Frame::BigNumber(s) => push_bytes(state, s.as_bytes()),
        Frame::Double(d) => push_bytes(state, gradus_proto::format_double(*d).as_bytes()),
        Frame::HumanDouble(d) => push_bytes(state, gradus_proto::format_fixed17(*d).as_bytes()),
        Frame::Boolean(b) => ffi::lua_pushinteger(state, *b as ffi::lua_Integer),
        Frame::Null | Frame::NullArray => ffi::lua_pushboolean(state, 0),
        Frame::Simple(s) => push_field_table(state, b"ok", s),
        Frame::Error(e) => push_field_table(state, b"err", e.as_bytes()),
        Frame::Array(items) | Frame::Set(items) | Frame::Push(items) => {
            push_table(state, items.len(), items.iter(), |state, item| {
                push_frame(state, item)
            })
        }
        Frame::Bulks(items) => push_table(state, items.len(), items.iter(), |state, item| {
            push_bytes(state, item)
        }),
        Frame::Map(pairs) => push_table(
            state,
            pairs.len().saturating_mul(2),
            pairs.iter().flat_map(|(k, v)| [k, v]),
            |state, item| push_frame(state, item),
        ),
    }
}

/// Push a command's reply as Redis 7.2 gives it to a script that called `redis.setresp(3)` (the
/// command ran with RESP3): a map as `{map={key=value, …}}`, a set as `{set={member=true, …}}`,
/// a double as `{double=number}`, a big number as `{big_number="digits"}`, a verbatim string as
/// `{verbatim_string={format="txt", string="…"}}`, a null as nil, a boolean as a Lua boolean;
/// the rest as [`push_frame`] does. A map entry or set member that would be a nil key is left
/// out (a Lua table cannot hold it). One value more on the stack.
///
/// # Safety
/// As [`push_frame`].
pub(super) unsafe fn push_frame_resp3(state: *mut ffi::lua_State, frame: &Frame) {
    match frame {
        Frame::Null | Frame::NullArray => ffi::lua_pushnil(state),
        Frame::Boolean(b) => ffi::lua_pushboolean(state, c_int::from(*b)),
        Frame::Double(d) => push_double(state, *d),
        // Redis reads the `,` text back: what GEOPOS writes (17 fractional digits) is read.
        Frame::HumanDouble(d) => push_double(
            state,
            gradus_proto::format_fixed17(*d).parse().unwrap_or(*d),
        ),
        Frame::BigNumber(s) => push_field_table(state, b"big_number", s.as_bytes()),
        Frame::Verbatim { format, text } => {
            if ffi::lua_checkstack(state, 5) == 0 {
                ffi::lua_pushboolean(state, 0);
                return;
            }
            ffi::lua_createtable(state, 0, 1);
            push_bytes(state, b"verbatim_string");
            ffi::lua_createtable(state, 0, 2);
            push_bytes(state, b"string");
            push_bytes(state, text);
            ffi::lua_rawset(state, -3);
            push_bytes(state, b"format");
            push_bytes(state, format);
            ffi::lua_rawset(state, -3);
            ffi::lua_rawset(state, -3);
        }
        Frame::Array(items) | Frame::Push(items) => {
            // Grown as Redis grows it (not sized ahead): with nil items (nulls) the table's
            // layout, so `#` and `pairs`, match Redis'.
            push_table(state, 0, items.iter(), |state, item| {
                push_frame_resp3(state, item)
            })
        }
        Frame::Set(items) => push_keyed(state, b"set", items.iter(), |state, item| {
            push_frame_resp3(state, item);
            ffi::lua_pushboolean(state, 1);
        }),
        Frame::Map(pairs) => push_keyed(state, b"map", pairs.iter(), |state, (k, v)| {
            push_frame_resp3(state, k);
            push_frame_resp3(state, v);
        }),
        Frame::Bulks(items) if items.is_set() => {
            push_keyed(state, b"set", items.iter(), |state, item| {
                push_bytes(state, item);
                ffi::lua_pushboolean(state, 1);
            })
        }
        Frame::Bulks(items) if items.is_map() => {
            let mut it = items.iter();
            let pairs = std::iter::from_fn(|| Some((it.next()?, it.next()?)));
            push_keyed(state, b"map", pairs, |state, (k, v)| {
                push_bytes(state, k);
                push_bytes(state, v);
            })
        }
        Frame::Integer(_)
        | Frame::Bulk(_)
        | Frame::Simple(_)
        | Frame::Error(_)
        | Frame::Bulks(_) => push_frame(state, frame),
    }
}

/// Push `{double=d}`.
unsafe fn push_double(state: *mut ffi::lua_State, d: f64) {
    ffi::lua_createtable(state, 0, 1);
    push_bytes(state, b"double");
    ffi::lua_pushnumber(state, d);
    ffi::lua_rawset(state, -3);
}

/// Push `{field={…}}`, the inner table holding what `push` pushes for each of `items` (a key
/// and its value); a nil key is skipped. `false` instead when the stack has no room. The inner
/// table is grown as Redis grows it, not sized ahead: `pairs` then walks it in Redis' order.
///
/// # Safety
/// As [`push_frame`]; `push` pushes exactly two values.
unsafe fn push_keyed<T>(
    state: *mut ffi::lua_State,
    field: &[u8],
    items: impl Iterator<Item = T>,
    push: impl Fn(*mut ffi::lua_State, T),
) {
    if ffi::lua_checkstack(state, 6) == 0 {
        ffi::lua_pushboolean(state, 0);
        return;
    }
    ffi::lua_createtable(state, 0, 1);
    push_bytes(state, field);
    ffi::lua_createtable(state, 0, 0);
    for item in items {
        push(state, item);
        if ffi::lua_type(state, -2) == ffi::LUA_TNIL {
            ffi::lua_pop(state, 2);
        } else {
            ffi::lua_rawset(state, -3);
        }
    }
    ffi::lua_rawset(state, -3);
}

/// Push a table of the values `items` (1-based), each pushed by `push`, its array part sized
/// for `len` of them; `false` instead when the Lua stack has no room for the nesting.
///
/// # Safety
/// As [`push_frame`]; `push` pushes exactly one value.
unsafe fn push_table<T>(
    state: *mut ffi::lua_State,
    len: usize,
    items: impl Iterator<Item = T>,
    push: impl Fn(*mut ffi::lua_State, T),
) {
    if ffi::lua_checkstack(state, 3) == 0 {
        ffi::lua_pushboolean(state, 0);
        return;
    }
    ffi::lua_createtable(state, len.min(c_int::MAX as usize) as c_int, 0);
    for (i, item) in items.enumerate() {
        push(state, item);
        ffi::lua_rawseti(state, -2, i as ffi::lua_Integer + 1);
    }
}

/// Push a new table holding `items` as strings (1-based), sized for them.
///
/// # Safety
/// No memory limit (see the module docs); room for 2 more slots.
pub(super) unsafe fn push_string_list(state: *mut ffi::lua_State, items: &[Bytes]) {
    ffi::lua_createtable(state, items.len().min(c_int::MAX as usize) as c_int, 0);
    for (i, item) in items.iter().enumerate() {
        push_bytes(state, item);
        ffi::lua_rawseti(state, -2, i as ffi::lua_Integer + 1);
    }
}

/// Empty the table at `table` (an absolute index): every field set to nil (raw), walking it
/// with `lua_next` (which allows setting a field it has returned to nil).
///
/// # Safety
/// No memory limit (see the module docs); room for 3 more slots.
pub(super) unsafe fn clear_table(state: *mut ffi::lua_State, table: c_int) {
    ffi::lua_pushnil(state);
    while ffi::lua_next(state, table) != 0 {
        ffi::lua_pop(state, 1);
        ffi::lua_pushvalue(state, -1);
        ffi::lua_pushnil(state);
        ffi::lua_rawset(state, table);
    }
}

/// Set `items` as strings (1-based) in the table at `table` (an absolute index).
///
/// # Safety
/// No memory limit (see the module docs); room for 1 more slot.
pub(super) unsafe fn fill_string_list(state: *mut ffi::lua_State, table: c_int, items: &[Bytes]) {
    for (i, item) in items.iter().enumerate() {
        push_bytes(state, item);
        ffi::lua_rawseti(state, table, i as ffi::lua_Integer + 1);
    }
}

/// Deepest table nesting converted into a reply (deeper levels become nil).
pub(super) const MAX_REPLY_DEPTH: usize = 64;

/// The first line of `text`, carriage returns as spaces (how error texts reach a reply).
pub(super) fn one_line(text: &str) -> String {
    let first = text.lines().next().unwrap_or("");
    first.replace('\r', " ")
}

/// The string field `field` of the table at `idx` (raw access), if it is a string.
unsafe fn string_field<'a>(
    state: *mut ffi::lua_State,
    idx: c_int,
    field: &[u8],
) -> Option<&'a [u8]> {
    push_bytes(state, field);
    ffi::lua_rawget(state, idx);
    // A string in a table stays alive while the table does (it is on the stack below).
    let s = (ffi::lua_type(state, -1) == ffi::LUA_TSTRING).then(|| string_at(state, -1));
    ffi::lua_pop(state, 1);
    s
}

/// The value at `idx` (an absolute index) as a reply, Redis 7.2's rules: a string is a bulk
/// string, a number an integer (truncated toward zero), nil a null; a boolean, when the run's
/// protocol is RESP2 (`resp3` false: the default), 1 for true and a null for false, else a
/// boolean reply. A table, by the first of its fields that fits: a string `err` an error, a
/// string `ok` a status, a number `double` a double, a string `big_number` a big number (CR
/// and LF as spaces), a table `verbatim_string` with string `format` and `string` a verbatim
/// string (the format's first 3 bytes, padded with spaces), a table `map` a map of its pairs,
/// a table `set` a set of its keys; otherwise an array of its items from 1 to the first nil.
/// Anything else is a null; a table nested past [`MAX_REPLY_DEPTH`] is Redis' `reached lua
/// stack limit` error (Redis' own depth is where its Lua stack runs out: deeper). How each is written
/// depends on the client's protocol (a map is a flat array in RESP2…). The stack is left as
/// it was.
///
/// # Safety
/// No memory limit (see the module docs); `idx` is a valid absolute index.
pub(super) unsafe fn to_frame(
    state: *mut ffi::lua_State,
    idx: c_int,
    depth: usize,
    resp3: bool,
) -> Frame {
    match ffi::lua_type(state, idx) {
        ffi::LUA_TSTRING => Frame::Bulk(Bytes::copy_from_slice(string_at(state, idx))),
        ffi::LUA_TNUMBER => Frame::Integer(reply_integer(ffi::lua_tonumber(state, idx))),
        ffi::LUA_TBOOLEAN if resp3 => Frame::Boolean(ffi::lua_toboolean(state, idx) != 0),
        ffi::LUA_TBOOLEAN if ffi::lua_toboolean(state, idx) != 0 => Frame::Integer(1),
        ffi::LUA_TTABLE if depth < MAX_REPLY_DEPTH => {
            if ffi::lua_checkstack(state, 4) == 0 {
                return stack_limit();
            }
            if let Some(e) = string_field(state, idx, b"err") {
                let text = one_line(&String::from_utf8_lossy(e));
                if is_counted(state, idx) {
                    note_counted(&text);
                }
                return Frame::Error(text);
            }
            if let Some(s) = string_field(state, idx, b"ok") {
                return Frame::Simple(Bytes::copy_from_slice(s));
            }
            if let Some(frame) = typed_table(state, idx, depth, resp3) {
                return frame;
            }
            let mut items = Vec::new();
            for i in 1.. {
                ffi::lua_rawgeti(state, idx, i);
                if ffi::lua_type(state, -1) == ffi::LUA_TNIL {
                    ffi::lua_pop(state, 1);
                    break;
                }
                let top = ffi::lua_gettop(state);
                items.push(to_frame(state, top, depth + 1, resp3));
                ffi::lua_pop(state, 1);
            }
            Frame::Array(items)
        }
        // Nested past the depth a reply may have (a table that holds itself): Redis' error
        // where its Lua stack runs out, so the reply ends instead of going on for ever.
        ffi::LUA_TTABLE => stack_limit(),
        _ => Frame::Null,
    }
}

/// Redis' reply for a table nested deeper than its Lua stack lets it convert.
fn stack_limit() -> Frame {
    Frame::Error("ERR reached lua stack limit".into())
}

/// [`to_frame`]'s RESP3 forms of the table at `idx` (`double`, `big_number`,
/// `verbatim_string`, `map`, `set`, in Redis' order), if it is one. Stack balanced; room for 4
/// more slots.
unsafe fn typed_table(
    state: *mut ffi::lua_State,
    idx: c_int,
    depth: usize,
    resp3: bool,
) -> Option<Frame> {
    push_bytes(state, b"double");
    ffi::lua_rawget(state, idx);
    if ffi::lua_type(state, -1) == ffi::LUA_TNUMBER {
        let d = ffi::lua_tonumber(state, -1);
        ffi::lua_pop(state, 1);
        return Some(Frame::Double(d));
    }
    ffi::lua_pop(state, 1);
    if let Some(digits) = string_field(state, idx, b"big_number") {
        let text = String::from_utf8_lossy(digits).replace(['\r', '\n'], " ");
        return Some(Frame::BigNumber(text));
    }
    push_bytes(state, b"verbatim_string");
    ffi::lua_rawget(state, idx);
    if ffi::lua_type(state, -1) == ffi::LUA_TTABLE {
        let inner = ffi::lua_gettop(state);
        if let Some(format) = string_field(state, inner, b"format") {
            if let Some(text) = string_field(state, inner, b"string") {
                // Redis copies the format up to 3 bytes, stopping at a NUL, padding with spaces.
                let mut tag = [b' '; 3];
                for (slot, &b) in tag.iter_mut().zip(format.iter().take_while(|&&b| b != 0)) {
                    *slot = b;
                }
                let frame = Frame::Verbatim {
                    format: tag,
                    text: Bytes::copy_from_slice(text),
                };
                ffi::lua_pop(state, 1);
                return Some(frame);
            }
        }
    }
    ffi::lua_pop(state, 1);
    for map in [true, false] {
        push_bytes(state, if map { b"map".as_slice() } else { b"set" });
        ffi::lua_rawget(state, idx);
        if ffi::lua_type(state, -1) != ffi::LUA_TTABLE {
            ffi::lua_pop(state, 1);
            continue;
        }
        let inner = ffi::lua_gettop(state);
        let mut pairs = Vec::new();
        let mut members = Vec::new();
        ffi::lua_pushnil(state);
        while ffi::lua_next(state, inner) != 0 {
            // [… inner, key, value]
            let top = ffi::lua_gettop(state);
            let key = to_frame(state, top - 1, depth + 1, resp3);
            if map {
                pairs.push((key, to_frame(state, top, depth + 1, resp3)));
            } else {
                members.push(key);
            }
            ffi::lua_pop(state, 1);
        }
        ffi::lua_pop(state, 1);
        return Some(if map {
            Frame::Map(pairs)
        } else {
            Frame::Set(members)
        });
    }
    None
}

/// Set the field `name` of the table at `table` (an absolute index) to the value `push`
/// pushes (raw: no metamethod).
///
/// # Safety
/// No memory limit (see the module docs); room for 2 more slots besides what `push` needs.
pub(super) unsafe fn push_field(
    state: *mut ffi::lua_State,
    table: c_int,
    name: &[u8],
    push: impl FnOnce(*mut ffi::lua_State),
) {
    push_bytes(state, name);
    push(state);
    ffi::lua_rawset(state, table);
}

/// The value at `idx` as Lua's `tostring` shows it (a string or number as is; anything else
/// through the global `tostring`, so an error object's `__tostring` is used). Stack balanced.
///
/// # Safety
/// `idx` is a valid absolute index; no memory limit (see the module docs).
pub(super) unsafe fn display(state: *mut ffi::lua_State, idx: c_int) -> Vec<u8> {
    ffi::lua_pushvalue(state, idx);
    if !matches!(
        ffi::lua_type(state, -1),
        ffi::LUA_TSTRING | ffi::LUA_TNUMBER
    ) {
        ffi::lua_getglobal(state, c"tostring".as_ptr());
        ffi::lua_insert(state, -2);
        if ffi::lua_pcall(state, 1, 1, 0) != 0 || ffi::lua_type(state, -1) != ffi::LUA_TSTRING {
            ffi::lua_pop(state, 1);
            return b"?".to_vec();
        }
    }
    let text = string_at(state, -1).to_vec();
    ffi::lua_pop(state, 1);
    text
}

/// A function of a bundled library (`bit.*`, `cjson.*`: see `lua_bit`, `lua_cjson`), run by
/// the parent's `lua_library_call` under this module's contract: no memory limit, so none of
/// its Lua API calls raises. It returns how many results it left on top of the stack, or how
/// it fails: the error is raised only once it has returned, so no Rust value of its own is
/// live when Lua unwinds the call (no destructor skipped).
pub(super) type LibraryFn = unsafe fn(*mut ffi::lua_State, &LibraryCall) -> Result<c_int, Raise>;

/// What a [`LibraryFn`] learns of the run calling it.
pub(super) struct LibraryCall {
    /// The run's memory limit in bytes (0: none), which the function must keep to itself
    /// (the limit is lifted while it runs): see [`LibraryCall::headroom`].
    pub limit: usize,
    /// The C function that runs library functions (upvalue 1: the [`LibraryFn`]), to make
    /// more of them at run time (`cjson.new`).
    pub entry: ffi::lua_CFunction,
}

impl LibraryCall {
    /// The bytes the state may still allocate before it is past the run's limit.
    ///
    /// # Safety
    /// `state` is the running state.
    pub unsafe fn headroom(&self, state: *mut ffi::lua_State) -> usize {
        if self.limit == 0 {
            return usize::MAX;
        }
        let used = (ffi::lua_gc(state, ffi::LUA_GCCOUNT, 0).max(0) as usize) * 1024
            + ffi::lua_gc(state, ffi::LUA_GCCOUNTB, 0).max(0) as usize;
        self.limit.saturating_sub(used)
    }
}

/// Push a library function: a closure of `entry` (the parent's `lua_library_call`) over `f`
/// and the `upvalues` values on top of the stack (popped).
///
/// # Safety
/// No memory limit; `upvalues` values are on the stack.
pub(super) unsafe fn push_library_function(
    state: *mut ffi::lua_State,
    entry: ffi::lua_CFunction,
    f: LibraryFn,
    upvalues: c_int,
) {
    ffi::lua_pushlightuserdata(state, f as usize as *mut std::ffi::c_void);
    ffi::lua_insert(state, -1 - upvalues);
    ffi::lua_pushcclosure(state, entry, upvalues + 1);
}

/// The [`LibraryFn`] that `lua_library_call`'s upvalue 1 holds.
///
/// # Safety
/// `state` runs a closure made by [`push_library_function`].
pub(super) unsafe fn library_fn(state: *mut ffi::lua_State) -> Option<LibraryFn> {
    let p = ffi::lua_touserdata(state, ffi::lua_upvalueindex(1));
    if p.is_null() {
        return None;
    }
    // SAFETY: the pointer was made from a `LibraryFn` by `push_library_function`, and a
    // script cannot reach a C closure's upvalues (no `debug` library).
    Some(std::mem::transmute::<*mut std::ffi::c_void, LibraryFn>(p))
}

/// How a [`LibraryFn`] fails; the caller raises it after the function has returned.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Raise {
    /// The message on top of the stack, raised as `luaL_error` raises it: after the
    /// position of the calling Lua code, if a Lua function called (`user_script:1: `).
    Error,
    /// The error value on top of the stack, raised as is (`lua_error`): Lua's own failed
    /// allocation, which has no position.
    Memory,
    /// The message on top of the stack is about argument `n` (`luaL_argerror`: "bad argument
    /// #n to 'name' (message)").
    Argument(c_int),
}

/// Room on the stack for an error message and its position: when a walk has used the whole
/// stack (its error is that it cannot go deeper), what it left there is dropped (it is of no
/// use once the function fails).
unsafe fn room_for_error(state: *mut ffi::lua_State) {
    if ffi::lua_checkstack(state, 4) == 0 {
        ffi::lua_settop(state, 0);
    }
}

/// Push `message` and fail with it (`luaL_error`).
///
/// # Safety
/// No memory limit.
pub(super) unsafe fn raise(state: *mut ffi::lua_State, message: &[u8]) -> Raise {
    room_for_error(state);
    ffi::lua_pushlstring(state, message.as_ptr().cast(), message.len());
    Raise::Error
}

/// Fail as a failed allocation does ("not enough memory", no position).
///
/// # Safety
/// No memory limit.
pub(super) unsafe fn raise_memory(state: *mut ffi::lua_State) -> Raise {
    room_for_error(state);
    ffi::lua_pushlstring(state, c"not enough memory".as_ptr(), 17);
    Raise::Memory
}

/// Fail with "bad argument #`n` to '<name>' (`message`)".
///
/// # Safety
/// No memory limit.
pub(super) unsafe fn raise_argument(state: *mut ffi::lua_State, n: c_int, message: &[u8]) -> Raise {
    room_for_error(state);
    ffi::lua_pushlstring(state, message.as_ptr().cast(), message.len());
    Raise::Argument(n)
}

/// `luaL_typerror`'s failure: "bad argument #`n` to '<name>' (`expected` expected, got <type
/// of argument n>)".
///
/// # Safety
/// No memory limit.
pub(super) unsafe fn raise_type(state: *mut ffi::lua_State, n: c_int, expected: &str) -> Raise {
    let got = std::ffi::CStr::from_ptr(ffi::lua_typename(state, ffi::lua_type(state, n)));
    let message = format!("{expected} expected, got {}", got.to_string_lossy());
    raise_argument(state, n, message.as_bytes())
}
