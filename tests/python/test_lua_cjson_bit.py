"""Differential tests of the `cjson` and `bit` libraries of Lua scripts: the same EVALs (and
FCALLs) go to Gradus and to a real redis-server, whose replies must be identical — values,
encoded texts and error texts alike.

- fixed cases: `bit` on edge values (0x7fffffff, -1, 2^32, 2^53, fractions, numeric strings,
  bad arguments), `cjson.encode` (arrays and sparse arrays, keys, number formatting, string
  escapes, nesting limits, type errors, NaN/Inf), `cjson.decode` (number forms, escapes and
  surrogate pairs, null, error texts and positions, depth limits, trailing text), the
  configuration functions, read-only library tables, and both libraries inside a FUNCTION
  library (but not while it loads);
- Laravel's queue pop script (a job pushed, popped, its attempts counted, the reserved copy in
  the sorted set);
- a seeded random generator of nested Lua values (encoded, and round-tripped) and of JSON
  texts, some of them broken (decoded and encoded again, or the error compared).

The reference is the redis-server on PATH (7.0.15, whose `cjson` and `bit` are the ones Redis
7.2 bundles). A script that changes a `cjson` setting restores the default before it ends:
settings last as long as the Lua state, in both servers.
"""

from __future__ import annotations

import random
from typing import Any, List

import pytest

from differential import assert_same, assert_same_replies
from servers import redis_client


def evals(scripts: List[str]) -> List[List[Any]]:
    return [["EVAL", s, "0"] for s in scripts]


BIT_CASES = [
    "return {bit.tobit(1), bit.tobit(-1), bit.tobit(0x7fffffff), bit.tobit(0x7fffffff + 1)}",
    "return {bit.tobit(2^32), bit.tobit(2^32 + 5), bit.tobit(2^53), bit.tobit(2^53 + 2), bit.tobit(-2^31)}",
    "return {bit.tobit(1.5), bit.tobit(2.5), bit.tobit(-0.5), bit.tobit(-1.5), bit.tobit(0.49999)}",
    "return {bit.tobit('0x10'), bit.tobit(' 12 '), bit.tobit('1e3'), bit.tobit('-7')}",
    "return tostring(bit.tobit(0/0)) .. ' ' .. tostring(bit.tobit(1/0)) .. ' ' .. tostring(bit.tobit(-1/0))",
    "return {bit.bnot(0), bit.bnot(-1), bit.bnot(0x7fffffff), bit.bnot(2^32)}",
    "return {bit.band(1), bit.band(0xff, 0x0f, 0x3c), bit.band(-1, 2^31), bit.band(-1, -1)}",
    "return {bit.bor(1, 2, 4, 8, 16, 32, 64, 128), bit.bor(2^31, 1), bit.bor(0)}",
    "return {bit.bxor(1, 2), bit.bxor(-1, 0x7fffffff), bit.bxor(5, 5, 5)}",
    "return {bit.lshift(1, 31), bit.lshift(1, 32), bit.lshift(1, 33), bit.lshift(1, -1), bit.lshift(0xff, 28)}",
    "return {bit.rshift(-1, 1), bit.rshift(-1, 0), bit.rshift(-1, 31), bit.rshift(0x80000000, 4)}",
    "return {bit.arshift(-16, 2), bit.arshift(-1, 31), bit.arshift(0x7fffffff, 30), bit.arshift(2^31, 4)}",
    "return {bit.rol(0x80000001, 1), bit.rol(1, 0), bit.rol(0x12345678, 36), bit.ror(1, 1), bit.ror(0x12345678, 8)}",
    "return {bit.bswap(0x12345678), bit.bswap(-1), bit.bswap(0xff), bit.bswap(2^31)}",
    "return {bit.tohex(1), bit.tohex(-1), bit.tohex(-1, -4), bit.tohex(0xabcdef, 9), bit.tohex(0xabcdef, 3)}",
    "return {bit.tohex(0xabcdef, 0), bit.tohex(0xabcdef, -8), bit.tohex(2^32 + 255, 2), bit.tohex(255, '2')}",
    "return bit.tohex(0xabcdef, 0x80000000)",
    "return bit.tohex(65535, -2.5)",
    "return bit.band('x')",
    "return bit.band(1, 2, 'x', 4)",
    "return bit.tobit({})",
    "return bit.tobit()",
    "return bit.lshift(1)",
    "return bit.tohex(1, nil)",
    "return {pcall(bit.band)}",
    "return {pcall(bit.tohex, 1, nil)}",
    "return bit.bor(true)",
    "local t = {} for k in pairs(bit) do t[#t + 1] = k end table.sort(t) return t",
    "assert(bit.tobit(1) == 1); assert(bit.band(1) == 1); assert(bit.bxor(1,2) == 3); "
    "assert(bit.bor(1,2,4,8,16,32,64,128) == 255)",
]


def test_bit_matches_redis(gradus, redis_server):
    assert_same_replies(gradus, redis_server, evals(BIT_CASES))


ENCODE_CASES = [
    "return cjson.encode({1, 2, 3})",
    "return cjson.encode({})",
    "return cjson.encode({{}, {{}}})",
    "return cjson.encode({a = {}})",
    "return cjson.encode('plain')",
    "return cjson.encode(12)",
    "return cjson.encode(true) .. cjson.encode(false) .. cjson.encode(nil) .. cjson.encode(cjson.null)",
    "return cjson.encode('a/b\\0\\127\\1\\8\\9\\10\\11\\12\\13\\31\"\\\\é')",
    "return cjson.encode({0.1, 0.1 + 0.2, 1e100, 1e-5, 0.0001, -0, 1/3, 2^53, 2^63, 123456789012345, 5e-324})",
    "return cjson.encode({-1023.2, 3.14159265358979, 100, 1e15, 1e16, 12345678901234})",
    "return cjson.encode({[1] = 'a', [2] = 'b', [4] = 'd'})",
    "return cjson.encode({[1] = 1, [11] = 2})",
    "return cjson.encode({[1] = 1, [20] = 2})",
    "return cjson.encode({[1] = 1, [10] = 2})",
    "return cjson.encode({[3] = 'x'})",
    "return cjson.encode({[0] = 'zero'})",
    "return cjson.encode({[-1] = 'neg'})",
    "return cjson.encode({[1.5] = 1})",
    "return cjson.encode({[2^40] = 1})",
    "return cjson.encode({1, 2, x = 3})",
    "return cjson.encode({one = 'one', [1] = 'one'})",
    "return cjson.encode({[true] = 1})",
    "return cjson.encode({[cjson.null] = 1})",
    "return cjson.encode({[{}] = 1})",
    "return cjson.encode(function() end)",
    "return cjson.encode({f = print or type})",
    "return cjson.encode({1, 2, type})",
    "return cjson.encode(1/0)",
    "return cjson.encode(-1/0)",
    "return cjson.encode(0/0)",
    "return cjson.encode({[1/0] = 1})",
    "return cjson.encode()",
    "return cjson.encode(1, 2)",
    "return {pcall(cjson.encode)}",
    "local t = {} t[1] = t return cjson.encode(t)",
    "local t = {} local c = t for i = 1, 1200 do c[1] = {} c = c[1] end return cjson.encode(t)",
    "local t = {} local c = t for i = 1, 999 do c.k = {} c = c.k end return #cjson.encode(t)",
    "local t = {} local c = t for i = 1, 1000 do c.k = {} c = c.k end return cjson.encode(t)",
    # Past the configured depth, Lua's own stack (8000 slots) is the limit, as in lua-cjson.
    "cjson.encode_max_depth(100000) local t = {} local c = t for i = 1, 9000 do c[1] = {} c = c[1] end "
    "local ok, e = pcall(cjson.encode, t) cjson.encode_max_depth(1000) return e",
    "cjson.encode_max_depth(100000) local t = {} local c = t for i = 1, 9000 do c.k = {} c = c.k end "
    "local ok, e = pcall(cjson.encode, t) cjson.encode_max_depth(1000) return e",
    "return cjson.encode({a = {b = {c = {1, 2, {d = 'e'}}}}})",
    "local s = string.rep('x', 100000) return #cjson.encode({s, s, {s}})",
]


def test_encode_matches_redis(gradus, redis_server):
    assert_same_replies(gradus, redis_server, evals(ENCODE_CASES))


DECODE_CASES = [
    "return table.concat(cjson.decode('[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]'), ' ')",
    "local d = cjson.decode('{\"keya\": \"a\", \"keyb\": \"b\"}') return {d.keya, d.keyb}",
    "return cjson.decode('[1,2')",
    "return cjson.decode('')",
    "return cjson.decode('   ')",
    "return cjson.decode('x')",
    "return cjson.decode('[1,2,3] x')",
    "return cjson.decode('[1,2,3]   ')",
    "return cjson.decode('{\"a\":1,}')",
    "return cjson.decode('[1,]')",
    "return cjson.decode('{\"a\" 1}')",
    "return cjson.decode('{1:2}')",
    "return cjson.decode('{\"a\":1 \"b\":2}')",
    "return cjson.decode('[1 2]')",
    "return cjson.decode(']')",
    "return cjson.decode('[\"\\\\ud800\"]')",
    "return cjson.decode('[\"\\\\udc00\"]')",
    "return cjson.decode('\"\\\\ud83d\\\\ude00\"')",
    "return cjson.decode('\"\\\\ud83d\\\\u0041\"')",
    "return cjson.decode('\"\\\\u00e9\\\\u0041\\\\u20ac\\\\/\\\\b\\\\f\\\\n\\\\r\\\\t\\\\\"\\\\\\\\\"')",
    "return cjson.decode('\"\\\\u12\"')",
    "return cjson.decode('\"\\\\u0000x\"')",
    "return cjson.decode('\"abc')",
    "return cjson.decode('\"a\\\\qb\"')",
    "return cjson.decode('\"a\\0b\"')",
    "return cjson.decode('[1]\\0garbage')",
    "return cjson.decode(' \\0a')",
    "return cjson.decode('\\0')",
    "return cjson.decode('\"tab\\there\"')",
    "return {cjson.decode('0x1F'), cjson.decode('+5'), cjson.decode('01'), cjson.decode('-0x10')}",
    "return {tostring(cjson.decode('0x1.8p1')), tostring(cjson.decode('1.')), tostring(cjson.decode('-.5'))}",
    "return {tostring(cjson.decode('-inf')), tostring(cjson.decode('Infinity')), tostring(cjson.decode('nan')), "
    "tostring(cjson.decode('-nan')), tostring(cjson.decode('INF')), tostring(cjson.decode('NaN'))}",
    "return tostring(cjson.decode('1e400')) .. ' ' .. tostring(cjson.decode('1e-400')) .. ' ' .. tostring(cjson.decode('1E2'))",
    "return cjson.decode('-')",
    "return cjson.decode('+')",
    "return cjson.decode('1e')",
    "return cjson.decode('0x')",
    "return cjson.decode('.5')",
    "return cjson.decode('nul')",
    "return cjson.decode('tru')",
    "return cjson.decode('True')",
    "return cjson.decode('nan(12)')",
    "return cjson.decode('infinit')",
    "return {cjson.decode('true'), cjson.decode('false')}",
    "return cjson.decode('null') == cjson.null",
    "local t = cjson.decode('[null, 1, null]') return {#t, t[1] == cjson.null, type(t[1])}",
    "return cjson.decode(5)",
    "return cjson.decode({})",
    "return cjson.decode()",
    "return cjson.decode('1', '2')",
    "return cjson.decode('[[[[1]]]]')",
    "return cjson.decode(string.rep('[', 1001) .. string.rep(']', 1001))",
    "return #cjson.decode(string.rep('[', 1000) .. string.rep(']', 1000))",
    "return cjson.decode(string.rep('{\"a\":', 1001) .. '1' .. string.rep('}', 1001))",
    "cjson.decode_max_depth(100000) local ok, e = pcall(cjson.decode, string.rep('[', 9000)) "
    "cjson.decode_max_depth(1000) return e",
    "cjson.decode_max_depth(100000) local ok, e = pcall(cjson.decode, string.rep('{\"a\":', 9000)) "
    "cjson.decode_max_depth(1000) return e",
    "local t = cjson.decode('{\"a\":1,\"a\":2}') return t.a",
    "return cjson.encode(cjson.decode('{\"1\":1,\"2\":2}'))",
    "return cjson.decode('[1, 2, 3]')[3]",
    "return cjson.decode('\"\\xff\\xfe\"')",
    "return cjson.decode('\\239\\187\\191[1]')",
]


def test_decode_matches_redis(gradus, redis_server):
    assert_same_replies(gradus, redis_server, evals(DECODE_CASES))


CONFIG_CASES = [
    "return {cjson._NAME, cjson._VERSION, type(cjson.new), type(cjson.null), tostring(cjson.null == nil)}",
    "local t = {} for k in pairs(cjson) do t[#t + 1] = k end table.sort(t) return t",
    "return {cjson.encode_sparse_array()}",
    "return {cjson.encode_max_depth(), cjson.decode_max_depth(), cjson.encode_number_precision()}",
    "return {cjson.encode_keep_buffer(), cjson.encode_invalid_numbers(), cjson.decode_invalid_numbers()}",
    "local r = {cjson.encode_sparse_array(true, 3, 5)} local e = cjson.encode({[1] = 1, [20] = 2}) "
    "cjson.encode_sparse_array(false, 2, 10) return {r[1], r[2], r[3], e}",
    "cjson.encode_sparse_array(nil, 0) local e = cjson.encode({[1] = 1, [50] = 2}) "
    "cjson.encode_sparse_array(nil, 2) return #e",
    "return cjson.encode_sparse_array(nil, -1)",
    "return cjson.encode_sparse_array(nil, nil, 'x')",
    "return cjson.encode_sparse_array('maybe')",
    "return cjson.encode_sparse_array(1, 2, 3, 4)",
    "return cjson.encode_max_depth('x')",
    "return cjson.encode_max_depth(0)",
    "return cjson.encode_max_depth(2^32 + 5)",
    "local r = cjson.encode_max_depth(2.9) local ok, e = pcall(cjson.encode, {{{1}}}) cjson.encode_max_depth(1000) return {r, e}",
    "local r = cjson.decode_max_depth('2') local ok, e = pcall(cjson.decode, '[[[1]]]') cjson.decode_max_depth(1000) return {r, e}",
    "local r = cjson.encode_number_precision(3) local e = cjson.encode({3.14159, 1234.5, 0.000123456}) "
    "cjson.encode_number_precision(14) return {r, e}",
    "return cjson.encode_number_precision(15)",
    "return cjson.encode_number_precision(0)",
    "return {cjson.encode_keep_buffer(false), cjson.encode({1}), cjson.encode_keep_buffer('on'), cjson.encode({2})}",
    "return cjson.encode_keep_buffer('yes')",
    "return cjson.encode_invalid_numbers('bad')",
    "return cjson.encode_invalid_numbers(1)",
    "return cjson.encode_invalid_numbers(1, 2)",
    "return cjson.encode_invalid_numbers({})",
    "local r = cjson.encode_invalid_numbers('null') local e = cjson.encode({1/0, -1/0, 0/0, {[1] = 1}}) "
    "cjson.encode_invalid_numbers(false) return {r, e}",
    "local r = cjson.encode_invalid_numbers(true) local e = cjson.encode({1/0, -1/0, 0/0}) "
    "local k = cjson.encode({[1/0] = 1}) cjson.encode_invalid_numbers('off') return {tostring(r), e, k}",
    "local r = cjson.decode_invalid_numbers(false) local out = {} "
    "for _, s in ipairs({'0x10', '01', '+1', 'nan', 'inf', '-inf', '-01', '1'}) do "
    "local ok, v = pcall(cjson.decode, s) out[#out + 1] = tostring(v) end "
    "cjson.decode_invalid_numbers(true) return {tostring(r), out}",
    "local c = cjson.new() c.encode_max_depth(1) c.x = 1 local ok, e = pcall(c.encode, {{}}) "
    "return {cjson.encode({{}}), e, c.x, cjson.encode_max_depth(), c._NAME, c.null == cjson.null}",
    "local c = cjson.new() local d = c.new() return d.encode({1, {a = 'b'}})",
]


def test_config_functions_match_redis(gradus, redis_server):
    assert_same_replies(gradus, redis_server, evals(CONFIG_CASES))


SANDBOX_CASES = [
    "cjson.encode = 1",
    "cjson.encode = function() return 1 end",
    "bit.lshift = function() return 1 end",
    "cjson.null = 1",
    "rawset(cjson, 'x', 1)",
    "rawset(bit, 'x', 1)",
    "cjson.newfield = 1",
    "return cjson.nonexistent",
    "return type(cjson.encode) .. type(bit.band)",
    "local t = getmetatable(cjson) return type(t)",
    "cjson = nil",
    "bit = 1",
]


def test_libraries_are_read_only(gradus, redis_server):
    assert_same_replies(gradus, redis_server, evals(SANDBOX_CASES))


def test_libraries_in_functions(gradus, redis_server):
    library = (
        "#!lua name=jsonlib\n"
        "redis.register_function('roundtrip', function(keys, args) "
        "return cjson.encode(cjson.decode(args[1])) end)\n"
        "redis.register_function('mask', function(keys, args) "
        "return bit.tohex(bit.band(tonumber(args[1]), 0xff00), -4) end)\n"
    )
    at_load_json = "#!lua name=atload\nlocal x = cjson.encode({})\nredis.register_function('f', function() return 1 end)\n"
    at_load_bit = "#!lua name=atloadbit\nlocal x = bit.band(1, 1)\nredis.register_function('f', function() return 1 end)\n"
    assert_same_replies(gradus, redis_server, [
        ["FUNCTION", "LOAD", library],
        ["FCALL", "roundtrip", "0", '{"a":[1,2,{"b":null}],"c":"x/y"}'],
        ["FCALL", "roundtrip", "0", '[1,'],
        ["FCALL", "mask", "0", "48879"],
        ["FUNCTION", "LOAD", at_load_json],
        ["FUNCTION", "LOAD", at_load_bit],
        ["FUNCTION", "FLUSH"],
    ])


LARAVEL_POP = """
local job = redis.call('lpop', KEYS[1])
local reserved = false
if(job ~= false) then
    reserved = cjson.decode(job)
    reserved['attempts'] = reserved['attempts'] + 1
    reserved = cjson.encode(reserved)
    redis.call('zadd', KEYS[2], ARGV[1], reserved)
    redis.call('lpop', KEYS[3])
end
return {job, reserved}
"""


def test_laravel_queue_pop(gradus, redis_server):
    job = ('{"uuid":"5c6a0f7e-1b7b-4a53-9f5e-2f0c1c6f3e01","displayName":"App\\\\Jobs\\\\SendMail",'
           '"job":"Illuminate\\\\Queue\\\\CallQueuedHandler@call","maxTries":null,"maxExceptions":null,'
           '"failOnTimeout":false,"backoff":null,"timeout":null,"retryUntil":null,'
           '"data":{"commandName":"App\\\\Jobs\\\\SendMail","command":"O:17:\\"App\\\\Jobs\\\\SendMail\\":1:{s:2:\\"to\\";s:13:\\"a@example.com\\";}"},'
           '"id":"Xb3kQ9","attempts":0,"url":"https://example.com/a/b"}')
    keys = ["queues:default", "queues:default:reserved", "queues:default:notify"]

    def scenario(server):
        client = redis_client(server, 2)
        client.flushall()
        client.rpush(keys[0], job)
        client.rpush(keys[2], 1)
        first = client.eval(LARAVEL_POP, 3, *keys, 1700000090)
        empty = client.eval(LARAVEL_POP, 3, *keys, 1700000091)
        reserved = client.zrange(keys[1], 0, -1, withscores=True)
        left = (client.llen(keys[0]), client.llen(keys[2]))
        # What Laravel does with the reserved copy: decode it back.
        attempts = client.eval("return cjson.decode(ARGV[1]).attempts", 0, first[1])
        client.close()
        return first, empty, reserved, left, attempts

    first, empty, reserved, left, attempts = assert_same(gradus, redis_server, scenario)
    assert first[0] == job.encode()
    assert empty == [None, None]
    assert len(reserved) == 1 and reserved[0][1] == 1700000090
    assert left == (0, 0) and attempts == 1


# --- random values and texts -------------------------------------------------


def lua_string(rng: random.Random) -> str:
    alphabet = ["a", "b", "z", "0", " ", "/", "\\", '"', "\n", "\t", "\x00", "\x01", "\x1f", "\x7f",
                "é", "€", "😀", "\xff", "{", "[", ":", ","]
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
    data = text.encode("utf-8", "surrogatepass")
    return '"' + "".join(f"\\{b}" for b in data) + '"'


def lua_number(rng: random.Random) -> str:
    kind = rng.randint(0, 7)
    if kind == 0:
        return str(rng.randint(-1000, 1000))
    if kind == 1:
        return str(rng.choice([0, 1, -1, 2**31 - 1, 2**31, 2**32, 2**53, 2**53 + 1, 2**63, 10**15, 10**17]))
    if kind == 2:
        return repr(rng.uniform(-1e6, 1e6))
    if kind == 3:
        return repr(rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300))
    if kind == 4:
        return f"{rng.randint(1, 999)}/{rng.randint(1, 999)}"
    if kind == 5:
        return repr(rng.randint(-10**6, 10**6) / 1000)
    if kind == 6:
        return rng.choice(["0.1", "0.5", "1e-7", "123456789012345", "1234567890123456789", "-0.0", "2^-1074"])
    return f"{rng.random()!r}"


def lua_value(rng: random.Random, depth: int) -> str:
    kind = rng.randint(0, 9 if depth < 4 else 5)
    if kind == 0:
        return lua_string(rng)
    if kind in (1, 2):
        return lua_number(rng)
    if kind == 3:
        return rng.choice(["true", "false"])
    if kind == 4:
        return "cjson.null"
    if kind == 5:
        return lua_string(rng)
    if kind in (6, 7):  # an array
        return "{" + ", ".join(lua_value(rng, depth + 1) for _ in range(rng.randint(0, 5))) + "}"
    if kind == 8:  # an object with string keys
        items = []
        for _ in range(rng.randint(0, 5)):
            items.append(f"[{lua_string(rng)}] = {lua_value(rng, depth + 1)}")
        return "{" + ", ".join(items) + "}"
    # numeric keys: sparse arrays, fractions, negative, mixed with strings
    items = []
    for _ in range(rng.randint(1, 5)):
        key = rng.choice([str(rng.randint(1, 30)), str(rng.randint(-3, 3)), repr(rng.uniform(0, 5)),
                          lua_string(rng)])
        items.append(f"[{key}] = {lua_value(rng, depth + 1)}")
    return "{" + ", ".join(items) + "}"


def json_string(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(0, 6)):
        parts.append(rng.choice(["a", "Z", " ", "é", "😀", "\\n", "\\/", "\\\\", '\\"', "\\u0041", "\\u00e9",
                                 "\\ud83d\\ude00", "\\u20AC", "\\b", "\\f", "\\r", "\\t", "\t", "/"]))
    return '"' + "".join(parts) + '"'


def json_number(rng: random.Random) -> str:
    return rng.choice([
        str(rng.randint(-10**6, 10**6)),
        repr(rng.uniform(-1e3, 1e3)),
        f"{rng.randint(0, 99)}.{rng.randint(0, 999)}e{rng.randint(-30, 30)}",
        f"{rng.randint(1, 9)}E+{rng.randint(0, 20)}",
        "-0", "0", "1e308", "123456789012345678", "0.1",
    ])


def json_value(rng: random.Random, depth: int) -> str:
    ws = lambda: rng.choice(["", "", " ", "\n ", "\t"])  # noqa: E731
    kind = rng.randint(0, 7 if depth < 4 else 4)
    if kind == 0:
        return json_string(rng)
    if kind == 1:
        return json_number(rng)
    if kind == 2:
        return rng.choice(["true", "false", "null"])
    if kind in (3, 4):
        return json_number(rng) if kind == 3 else json_string(rng)
    if kind in (5, 6):
        return "[" + ",".join(ws() + json_value(rng, depth + 1) + ws()
                              for _ in range(rng.randint(0, 4))) + "]"
    return "{" + ",".join(ws() + json_string(rng) + ws() + ":" + ws() + json_value(rng, depth + 1)
                          for _ in range(rng.randint(0, 4))) + "}"


def mutate(rng: random.Random, text: str) -> str:
    if not text or rng.random() < 0.6:
        return text
    i = rng.randrange(len(text))
    junk = rng.choice(["", "x", ",", "]", "}", "{", "[", '"', ":", "\\", "\\u12", "0x1", "+", "-", " ", "nan", "01"])
    return text[:i] + junk + text[i + 1:]


DECODE_TEXT = ("local ok, v = pcall(cjson.decode, ARGV[1]) if not ok then return 'error: ' .. v end "
               "local ok2, e = pcall(cjson.encode, v) return {type(v), tostring(ok2), e}")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_values_and_texts(gradus, redis_server, seed):
    rng = random.Random(seed)
    commands = []
    for _ in range(120):
        value = lua_value(rng, 0)
        commands.append(["EVAL", f"local ok, e = pcall(cjson.encode, {value}) return e", "0"])
        commands.append(["EVAL", ("local ok, v = pcall(function() return {value} end) "
                                  "local ok1, e = pcall(cjson.encode, v) if not ok1 then return e end "
                                  "return {{e, cjson.encode(cjson.decode(e))}}").format(value=value), "0"])
    for _ in range(200):
        text = mutate(rng, json_value(rng, 0))
        commands.append(["EVAL", DECODE_TEXT, "0", text.encode("utf-8", "surrogatepass")])
    assert_same_replies(gradus, redis_server, commands)


@pytest.mark.gradus_only
def test_encoding_past_the_memory_limit_fails_cleanly(r2):
    # 300 references to one 1 MB string: the text would be 300 MB, past the scripts' limit.
    with pytest.raises(Exception, match="not enough memory"):
        r2.eval("local s = string.rep('x', 1024 * 1024) local t = {} "
                "for i = 1, 300 do t[i] = s end return #cjson.encode(t)", 0)
    assert r2.eval("return cjson.encode({1, 'two'})", 0) == b'[1,"two"]'
