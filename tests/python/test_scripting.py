"""Lua scripting: EVAL/EVALSHA/SCRIPT, redis.call/pcall, the Lua <-> RESP conversion rules,
atomic effects logging (replay never re-runs Lua) and the script time limit (with one worker
thread; BUSY replies with more: test_busy_scripts.py)."""

from __future__ import annotations

import hashlib
import time

import pytest
import redis

from conftest import target_is_redis
from servers import redis_client


def test_eval_return_conversions(r2):
    assert r2.eval("return 42", 0) == 42
    assert r2.eval("return 3.99", 0) == 3
    assert r2.eval("return -2.5", 0) == -2
    assert r2.eval("return 'hello'", 0) == b"hello"
    assert r2.eval("return nil", 0) is None
    assert r2.eval("return false", 0) is None
    assert r2.eval("return true", 0) == 1
    assert r2.eval("return {1, 'two', {3, {'four'}}}", 0) == [1, b"two", [3, [b"four"]]]
    # The array part stops at the first nil.
    assert r2.eval("return {1, 2, nil, 4}", 0) == [1, 2]
    assert r2.eval("return {ok='FINE'}", 0) == b"FINE"
    assert r2.eval("return redis.status_reply('PONG')", 0) == b"PONG"
    with pytest.raises(redis.ResponseError, match="MY_ERR x"):
        r2.eval("return redis.error_reply('MY_ERR x')", 0)
    with pytest.raises(redis.ResponseError, match="boom"):
        r2.eval("return {err='ERR boom'}", 0)


def test_eval_reply_on_the_wire(raw):
    raw.send_command("EVAL", "return redis.error_reply('MY_ERR x')", "0")
    assert raw.read_raw_reply() == b"-MY_ERR x\r\n"
    raw.send_command("EVAL", "return redis.status_reply('FINE')", "0")
    assert raw.read_raw_reply() == b"+FINE\r\n"
    raw.send_command("EVAL", "return false", "0")
    assert raw.read_raw_reply() == b"$-1\r\n"


def test_resp_to_lua_conversions(r2):
    r2.set("s", "v")
    assert r2.eval("return type(redis.call('get', KEYS[1]))", 1, "s") == b"string"
    assert r2.eval("return redis.call('get', KEYS[1]) == false", 1, "missing") == 1
    assert r2.eval("return type(redis.call('incr', KEYS[1]))", 1, "n") == b"number"
    assert r2.eval("return redis.call('set', KEYS[1], 'x').ok", 1, "s") == b"OK"
    assert r2.eval("return redis.pcall('incr', KEYS[1]).err", 1, "s").startswith(b"ERR")
    r2.hset("h", mapping={"a": "1"})
    assert r2.eval("return redis.call('hgetall', KEYS[1])", 1, "h") == [b"a", b"1"]


def test_keys_and_argv(r2):
    assert r2.eval("return {KEYS[1], KEYS[2], ARGV[1], ARGV[2], #KEYS, #ARGV}", 2, "k1", "k2", "a1", "a2") == [
        b"k1", b"k2", b"a1", b"a2", 2, 2,
    ]
    assert r2.eval("return redis.call('set', KEYS[1], ARGV[1])", 1, "k", 7) == b"OK"
    assert r2.get("k") == b"7"
    # Numbers passed to redis.call are formatted as integers when integral.
    r2.eval("redis.call('set', KEYS[1], 10 / 2)", 1, "n")
    assert r2.get("n") == b"5"


def test_numkeys_errors(r2):
    with pytest.raises(redis.ResponseError, match="greater than number of args"):
        r2.eval("return 1", 2, "only-one")
    with pytest.raises(redis.ResponseError, match="can't be negative"):
        r2.eval("return 1", -1)
    with pytest.raises(redis.ResponseError, match="not an integer"):
        r2.execute_command("EVAL", "return 1", "x")


def test_call_errors_propagate_and_pcall_catches(r2):
    r2.set("str", "abc")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        r2.eval("return redis.call('incr', KEYS[1])", 1, "str")
    assert r2.eval(
        "local r = redis.pcall('incr', KEYS[1]); if r.err then return 'caught' end", 1, "str"
    ) == b"caught"
    # A Lua pcall around redis.call gets the error's text (Redis 7's pcall unwraps the table).
    assert r2.eval(
        "local ok, e = pcall(redis.call, 'incr', KEYS[1]); return {tostring(ok), type(e), e}", 1, "str"
    ) == [b"false", b"string", b"ERR value is not an integer or out of range"]
    with pytest.raises(redis.ResponseError):
        r2.eval("return redis.call('nosuchcommand')", 0)
    with pytest.raises(redis.ResponseError, match="not allowed from script"):
        r2.eval("return redis.call('multi')", 0)
    with pytest.raises(redis.ResponseError, match="[Ww]rong number of args"):
        r2.eval("return redis.call('get')", 0)
    with pytest.raises(redis.ResponseError):
        r2.eval("return error('my lua error')", 0)
    with pytest.raises(redis.ResponseError):
        r2.eval("this is not lua", 0)
    assert r2.ping()


def test_writes_before_an_error_stay(r2):
    with pytest.raises(redis.ResponseError):
        r2.eval("redis.call('set', 'a', '1'); redis.call('incr', 'nope-not-a-number-key-x'); error('x')", 0)
    assert r2.get("a") == b"1"


def test_scripts_cannot_leave_anything_behind(r2):
    """Scripts share a Lua state per thread: as in Redis 7, globals and the libraries are
    read-only, so no script can change what the next one sees."""
    for attack in [
        "x = 1",
        "_G.x = 1",
        "string.len = nil",
        "rawset(string, 'len', nil)",
        "redis.call = nil",
        "getmetatable('').__index = {}",
        "loadstring('y = 2')()",
    ]:
        with pytest.raises(redis.ResponseError, match="readonly table"):
            r2.eval(attack, 0)
    # Many runs, so every thread's state has seen the attacks.
    for _ in range(20):
        assert r2.eval("return {string.len('abc'), ('x'):upper(), type(redis.call), type(_G.string)}", 0) == [
            3,
            b"X",
            b"function",
            b"table",
        ]
    # KEYS and ARGV belong to one call.
    assert r2.eval("return {KEYS[1], ARGV[1]}", 1, "k", "a") == [b"k", b"a"]
    assert r2.eval("return {type(KEYS[1]), type(ARGV[1])}", 0) == [b"nil", b"nil"]
    # A script's own tables and the chunks it loads work as usual.
    assert r2.eval("local t = {} t.a = 1 rawset(t, 'b', 2) return t.a + t.b + loadstring('return 4')()", 0) == 7
    # The read-only libraries can still be walked and read raw, as in Redis 7.
    walk = """
        local n, fns = 0, 0
        for k, v in pairs(string) do n = n + 1 if type(v) == 'function' then fns = fns + 1 end end
        local k, v = next(math)
        return {n > 10 and n == fns and 1 or 0, rawget(string, 'len') == string.len and 1 or 0,
                k ~= nil and math[k] == v and 1 or 0, next({}) == nil and 1 or 0}
    """
    assert r2.eval(walk, 0) == [1, 1, 1, 1]
    with pytest.raises(redis.ResponseError, match="readonly table"):
        r2.eval("for k, v in pairs(string) do rawset(string, k, nil) end", 0)


def test_evalsha_and_script_cache(r2):
    body = "return ARGV[1] .. '!'"
    sha = r2.script_load(body)
    assert sha == hashlib.sha1(body.encode()).hexdigest()
    assert r2.evalsha(sha, 0, "hi") == b"hi!"
    assert r2.evalsha(sha.upper(), 0, "hi") == b"hi!"
    assert r2.script_exists(sha, "0" * 40) == [True, False]
    with pytest.raises(redis.exceptions.NoScriptError):
        r2.evalsha("0" * 40, 0)
    # EVAL caches its script too.
    r2.eval("return 'cached'", 0)
    assert r2.script_exists(hashlib.sha1(b"return 'cached'").hexdigest()) == [True]
    assert r2.script_flush() is True
    assert r2.script_exists(sha) == [False]
    assert r2.execute_command("SCRIPT", "FLUSH", "ASYNC")
    with pytest.raises(redis.exceptions.NoScriptError):
        r2.evalsha(sha, 0, "hi")
    assert r2.execute_command("FUNCTION", "FLUSH") in (True, b"OK")


def test_register_script_reloads_after_flush(r2):
    script = r2.register_script("return 'x'")
    assert script() == b"x"
    r2.script_flush()
    assert script() == b"x"


PHPREDIS_UNLOCK = (
    'if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end'
)


def test_phpredis_unlock_script(r2):
    unlock = r2.register_script(PHPREDIS_UNLOCK)
    r2.set("lock:sess", "token-1")
    assert unlock(keys=["lock:sess"], args=["other"]) == 0
    assert r2.get("lock:sess") == b"token-1"
    assert unlock(keys=["lock:sess"], args=["token-1"]) == 1
    assert r2.exists("lock:sess") == 0
    assert unlock(keys=["lock:sess"], args=["token-1"]) == 0


DJANGO_INCR = """
local key = KEYS[1]
local exists = redis.call('EXISTS', key)
if (exists == 1) then
    local incr = ARGV[1]
    return redis.call('INCRBY', key, incr)
else return false end
"""


def test_django_redis_incr_script(r2):
    assert r2.eval(DJANGO_INCR, 1, "counter", 5) is None
    r2.set("counter", 10)
    assert r2.eval(DJANGO_INCR, 1, "counter", 5) == 15
    assert r2.eval(DJANGO_INCR, 1, "counter", -20) == -5
    assert r2.get("counter") == b"-5"


def test_redis_py_lock_uses_scripts(r2):
    lock = r2.lock("resource", timeout=10)
    assert lock.acquire(blocking=False)
    assert lock.extend(5)
    lock.release()
    assert r2.exists("resource") == 0


def test_sha1hex_and_redis_helpers(r2):
    assert r2.eval("return redis.sha1hex('')", 0) == b"da39a3ee5e6b4b0d3255bfef95601890afd80709"
    assert r2.eval("redis.log(redis.LOG_WARNING, 'hi'); return 1", 0) == 1


def test_sandbox(r2):
    # A global the sandbox does not have cannot even be read (Redis 7).
    names = ["io", "loadfile", "dofile"] + ([] if target_is_redis() else ["os", "require"])
    for name in names:  # Redis 7.2 keeps a reduced `os` (os.clock)
        with pytest.raises(redis.ResponseError, match=f"nonexistent global variable '{name}'"):
            r2.eval(f"return type({name})", 0)


@pytest.mark.gradus_only
def test_script_writes_survive_a_restart_as_effects(gradus):
    client = redis_client(gradus, 2)
    client.eval("redis.call('set', KEYS[1], ARGV[1])", 1, "plain", "v")
    # The value depends on the clock and the random generator: replaying the script would
    # produce another one; replaying its effects gives the same.
    script = """
    local t = redis.call('TIME')
    local v = t[1] .. '.' .. t[2] .. ':' .. tostring(math.random(1000000000))
    redis.call('set', KEYS[1], v)
    return v
    """
    try:
        chosen = client.eval(script, 1, "chosen")
    finally:
        client.close()
    gradus.restart()
    client = redis_client(gradus, 2)
    try:
        assert client.get("plain") == b"v"
        assert client.get("chosen") == chosen
    finally:
        client.close()


@pytest.mark.gradus_only
def test_infinite_loop_is_stopped_and_server_stays_responsive(gradus_factory):
    """With one worker thread a script is stopped at the threshold (with more, it runs on and
    others get BUSY: test_busy_scripts.py)."""
    gradus = gradus_factory("--threads", "1")
    client = redis_client(gradus, 2)
    other = redis_client(gradus, 2)
    try:
        started = time.monotonic()
        with pytest.raises(redis.ResponseError, match="[Kk]illed|time limit"):
            client.eval("while true do end", 0)
        assert time.monotonic() - started < 30
        # pcall cannot swallow the kill.
        with pytest.raises(redis.ResponseError, match="[Kk]illed|time limit"):
            client.eval("while true do pcall(function() while true do end end) end", 0)
        assert other.ping()
        assert client.set("after", "1") and client.get("after") == b"1"
    finally:
        client.close()
        other.close()


@pytest.mark.gradus_only
def test_script_over_the_memory_limit_fails_and_server_stays_up(gradus):
    """A script that allocates past the Lua memory limit (256 MiB per thread's state) fails with
    an error, in many steps or in one; the server answers, the next script runs, and a script
    with a big reply from redis.call still works."""
    client = redis_client(gradus, 2)
    other = redis_client(gradus, 2)
    try:
        for hog in [
            "local s = string.rep('x', 1024 * 1024) for i = 1, 20 do s = s .. s end return #s",
            "local s = string.rep('y', 1024 * 1024) local t = {} "
            "for i = 1, 1e9 do t[i] = s .. i end return #t",
            # One step: table.concat makes the whole string in one C call.
            "local s = string.rep('z', 1024 * 1024) local t = {} "
            "for i = 1, 300 do t[i] = s end return #table.concat(t)",
        ]:
            with pytest.raises(redis.ResponseError, match="memory limit.*not enough memory"):
                client.eval(hog, 0)
            assert other.ping()
            assert client.eval("return 41 + 1", 0) == 42
        # pcall catches it like any error; the script goes on once the garbage is dropped.
        assert client.eval(
            "local ok = pcall(function() local s = string.rep('q', 1024 * 1024) "
            "for i = 1, 20 do s = s .. s end end) return ok and 1 or 0", 0) == 0
        client.set("big", b"v" * (4 * 1024 * 1024))
        assert client.eval("return #redis.call('get', KEYS[1])", 1, "big") == 4 * 1024 * 1024
    finally:
        client.close()
        other.close()


def test_eval_inside_multi_runs_in_order_with_the_transaction(r2):
    script = "redis.call('set', KEYS[1], ARGV[1]); return redis.call('incr', KEYS[2])"
    pipe = r2.pipeline(transaction=True)
    pipe.set("tx:a", "before")
    pipe.eval(script, 2, "tx:a", "tx:n", "from-script")
    pipe.append("tx:a", "+after")
    pipe.evalsha(r2.script_load(script), 2, "tx:b", "tx:n", "b")
    assert pipe.execute() == [True, 1, len("from-script+after"), 2]
    assert r2.get("tx:a") == b"from-script+after"
    assert r2.get("tx:b") == b"b"


@pytest.mark.gradus_only
def test_scripts_inside_multi_replay_in_order_after_restart(gradus):
    c = redis.Redis(host=gradus.host, port=gradus.port, protocol=2)
    pipe = c.pipeline(transaction=True)
    pipe.set("r:a", "1")
    pipe.eval("redis.call('append', KEYS[1], ARGV[1]); return 1", 1, "r:a", "-script")
    pipe.append("r:a", "-last")
    pipe.execute()
    assert c.get("r:a") == b"1-script-last"
    c.close()
    gradus.restart()
    c = redis.Redis(host=gradus.host, port=gradus.port, protocol=2)
    assert c.get("r:a") == b"1-script-last"
    c.close()


DIFFERENTIAL = [
    ("return 42", 0),
    ("return 3.99", 0),
    ("return 'x'", 0),
    ("return nil", 0),
    ("return true", 0),
    ("return false", 0),
    ("return {1, 'a', {2, {'b'}}, false, 9}", 0),
    ("return {1, 2, nil, 4}", 0),
    ("return redis.status_reply('FINE')", 0),
    ("return redis.call('set', KEYS[1], ARGV[1])", 1, "k", "v"),
    ("return redis.call('get', KEYS[1])", 1, "k"),
    ("return redis.call('get', KEYS[1])", 1, "missing"),
    ("return redis.call('incrby', KEYS[1], ARGV[1])", 1, "n", "5"),
    ("return redis.pcall('incr', KEYS[1])['err'] ~= nil", 1, "k"),
    ("return {KEYS[1], ARGV[1], #ARGV}", 1, "a", "b", "c"),
    (PHPREDIS_UNLOCK, 1, "k", "v"),
]


def test_differential_eval_replies(gradus, redis_server):
    ours = redis_client(gradus, 2)
    theirs = redis_client(redis_server, 2)
    try:
        for case in DIFFERENTIAL:
            assert ours.eval(*case) == theirs.eval(*case), case
        body = "return 'diff'"
        assert ours.script_load(body) == theirs.script_load(body)
    finally:
        ours.close()
        theirs.close()


PHP_EVALSHA_UNLOCK = r"""<?php
$r = new Redis();
$r->connect('127.0.0.1', (int)$argv[1]);
$script = 'if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end';
$sha = $r->script('load', $script);
$r->set('PHPREDIS_SESSION:abc_LOCK', 'token-1');
$out = [];
$out[] = $r->evalSha($sha, ['PHPREDIS_SESSION:abc_LOCK', 'other'], 1);
$out[] = $r->get('PHPREDIS_SESSION:abc_LOCK');
$out[] = $r->evalSha($sha, ['PHPREDIS_SESSION:abc_LOCK', 'token-1'], 1);
$out[] = $r->exists('PHPREDIS_SESSION:abc_LOCK');
$out[] = $r->evalSha(str_repeat('0', 40), ['k'], 1);
$out[] = $r->getLastError();
echo json_encode($out);
"""


def test_phpredis_evalsha_unlock(gradus, tmp_path):
    """phpredis' own EVALSHA of its session unlock script (a key-locked script on Gradus)."""
    import json
    import shutil
    import subprocess

    if shutil.which("php") is None or "redis" not in subprocess.run(
            ["php", "-m"], capture_output=True, text=True).stdout.lower().split():
        pytest.skip("php-cli with php-redis not installed")
    script = tmp_path / "unlock.php"
    script.write_text(PHP_EVALSHA_UNLOCK)
    proc = subprocess.run(["php", str(script), str(gradus.port)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert json.loads(proc.stdout) == [0, "token-1", 1, 0, False, "NOSCRIPT No matching script. Please use EVAL."]


def test_eval_ro_and_script_kill_errors(r2):
    assert r2.eval_ro("return redis.call('get', KEYS[1])", 1, "nothing") is None
    with pytest.raises(redis.ResponseError, match="^Write commands are not allowed from read-only scripts"):
        r2.evalsha_ro(r2.script_load("return redis.call('del', KEYS[1])"), 1, "k")
    with pytest.raises(redis.ResponseError, match="No scripts in execution right now."):
        r2.script_kill()


def test_a_read_only_script_may_not_publish(r2):
    """PUBLISH (and every may-replicate command) is a write for a read-only script, EVAL_RO or a
    `no-writes` shebang: refused, so such a script can run under CLIENT PAUSE WRITE (Redis'
    pause.tcl "may-replicate commands are rejected in RO scripts"); a plain script may publish."""
    ro_error = "^Write commands are not allowed from read-only scripts"
    with pytest.raises(redis.ResponseError, match=ro_error):
        r2.execute_command("EVAL_RO", "return redis.call('publish','ch','msg')", 0)
    with pytest.raises(redis.ResponseError, match=ro_error):
        r2.execute_command("EVAL", "#!lua flags=no-writes\nreturn redis.call('publish','ch','msg')", 0)
    assert r2.execute_command("EVAL", "return redis.call('publish','ch','msg')", 0) == 0


def test_an_error_escaping_a_script_names_the_script_and_its_line(gradus, redis_server):
    """An error that leaves a script (raised by redis.call, by error() with a string or an
    error table, or by Lua itself) ends with `script: <sha>, on @user_script:<line>.`, as Redis
    7's error handler adds; redis.pcall and error_reply return it unchanged. Gradus left the
    position off. Compared with redis-server reply for reply."""
    from differential import assert_same_replies

    scripts = [
        "return redis.call('incr','a')",
        "\n\nreturn redis.call('incr','a')",
        "return redis.call('nosuch')",
        "return redis.call('get')",
        "error({err='MYCODE my message'})",
        "error('boom')",
        "local x = nil; return x.y",
        "error()",
        "return redis.error_reply('MY err')",
        "return redis.pcall('nosuch')",
        "local t = redis.pcall('incr','a'); return {t['err'], t['line'] or 'no line'}",
        # A missing global is an error in a script too (it was nil); fields of tables are not.
        "return nosuch",
        "local a = 1\nreturn _G.x",
        "return redis.nosuch",
        "return rawget(_G, 'x')",
        "return type(tonumber)",
    ]

    assert_same_replies(gradus, redis_server, [["EVAL", body, "0"] for body in scripts],
                        setup=[["SET", "a", "not a number"]])


@pytest.mark.gradus_only
def test_busy_reply_threshold_sets_the_script_time_limit(gradus_factory):
    """`busy-reply-threshold` (alias `lua-time-limit`, which harnesses set) is the time after
    which a script is stopped with one worker thread (with more, others are answered BUSY:
    test_busy_scripts.py); CONFIG SET of either was refused as unknown."""
    gradus = gradus_factory("--threads", "1")
    client = redis_client(gradus, 2)
    try:
        assert client.config_get("busy-reply-threshold") == {"busy-reply-threshold": "5000"}
        assert client.config_set("lua-time-limit", 100)
        assert client.config_get("lua-time-limit") == {"lua-time-limit": "100"}
        assert client.config_get("busy-reply-threshold") == {"busy-reply-threshold": "100"}
        started = time.monotonic()
        with pytest.raises(redis.ResponseError, match="time limit"):
            client.eval("while true do end", 0)
        assert time.monotonic() - started < 2, "stopped at 100 ms, not at the 5 s default"
        with pytest.raises(redis.ResponseError, match="argument couldn't be parsed into an integer"):
            client.config_set("busy-reply-threshold", "soon")
    finally:
        client.config_set("busy-reply-threshold", 5000)
        client.close()


def test_a_lua_number_out_of_integer_range_is_returned_as_redis_does(gradus, redis_server):
    """Regression (found by a differential seed): a script returning a number at or past 2^63 —
    `redis.call('DECRBY', k, 1)` from i64::MAX gives 9223372036854775806, which a Lua number holds
    as 2^63 — answered 9223372036854775807 (Rust's saturating cast) where redis-server answers
    -9223372036854775808 (C's cast on x86-64: NaN and anything out of range become the minimum)."""
    scripts = [
        ("return redis.call('DECRBY', KEYS[1], 1)", 1, "k"),
        ("return 2^63", 0), ("return -2^63", 0), ("return 2^64", 0), ("return -2^64", 0),
        ("return 0/0", 0), ("return 1/0", 0), ("return -1/0", 0), ("return 1e300", 0),
        ("return 3.99", 0), ("return -3.99", 0), ("return 2^53 + 1", 0),
    ]
    replies = {}
    for server in (gradus, redis_server):
        r = redis_client(server, 2)
        r.set("k", "9223372036854775807")
        replies[server.name] = [r.eval(*s) for s in scripts]
    assert replies[gradus.name] == replies[redis_server.name]
    assert replies[redis_server.name][:3] == [-9223372036854775808] * 3


def eval_each(r, scripts, numkeys=0, *keys_and_args):
    """Each script's EVAL reply (with these keys and arguments; none by default), or its error
    as `error: <text>`."""
    out = []
    for script in scripts:
        try:
            out.append(r.eval(script, numkeys, *keys_and_args))
        except redis.ResponseError as e:
            out.append(f"error: {e}")
    return out


def test_pcall_sha1hex_and_noscript_subcommands_answer_as_redis(gradus, redis_server):
    """Redis 7's `pcall` gives an error table's `err` text in its place, so
    `local ok, e = pcall(redis.call, ...)` sees a string, as scripts written for Redis 6 expect
    (`redis.error_reply(e)`, `string.find(e, ...)`); Gradus gave the table, and such a script
    failed. `redis.sha1hex` takes exactly one argument (else Redis' error table) and hashes what
    `lua_tolstring` gives (a number's text, the empty string for a table); a `noscript`
    subcommand under a parent that is not (CLUSTER RESET) is refused as Redis refuses it.
    (Found by Redis' own scripting.tcl.)"""
    scripts = [
        "local ok, e = pcall(redis.call, 'nosuch') return {type(e), tostring(ok), e}",
        "local ok, e = pcall(redis.call, 'set', 'k') return redis.error_reply(e)",
        "local ok, e = pcall(function() error({err='x'}) end) return {type(e), e}",
        "local ok, e = pcall(function() error({err=5}) end) return {type(e), e}",
        "local ok, e = pcall(function() error({foo='x'}) end) return {type(e)}",
        "local ok, e = pcall(function() error('plain') end) return {type(e)}",
        "return {pcall(function() return 1, 2, 3 end)}",
        "local ok, e = xpcall(function() error({err='x'}) end, function(m) return m end) "
        "return {type(e)}",
        "return redis.sha1hex()",
        "return redis.sha1hex('a', 'b')",
        "local x = redis.sha1hex() return x",
        "return {pcall(redis.sha1hex)}",
        "return redis.sha1hex(1)",
        "return redis.sha1hex(1e300)",
        "return redis.sha1hex({})",
        "return redis.sha1hex('abc')",
        "return redis.pcall('cluster', 'reset', 'hard')",
        "return redis.call('cluster', 'reset')",
    ]
    replies = {server.name: eval_each(redis_client(server, 2), scripts)
               for server in (gradus, redis_server)}
    assert replies[gradus.name] == replies[redis_server.name]
    assert replies[gradus.name][0] == [b"string", b"false", b"ERR Unknown Redis command called from script"]


def test_a_table_that_holds_itself_ends_with_redis_stack_limit_error(gradus, redis_server):
    """A script returning a table that holds itself: nested arrays down to Redis' `reached lua
    stack limit` error, then the connection goes on (Gradus ended the nesting with a null, so
    a client reading to the error never got there). The depths differ (Redis stops where its
    Lua stack runs out, Gradus at its reply depth limit); the shape is the same. (Found by
    Redis' own scripting.tcl.)"""
    import socket

    script = b"local a = {}; local b = {a}; a[1] = b; return a"
    for server in (gradus, redis_server):
        with socket.create_connection((server.host, server.port), timeout=10) as conn:
            conn.sendall(b"*3\r\n$4\r\nEVAL\r\n$%d\r\n%s\r\n$1\r\n0\r\n" % (len(script), script))
            lines = conn.makefile("rb")
            depth = 0
            line = lines.readline()
            while line == b"*1\r\n":
                depth += 1
                line = lines.readline()
            assert line == b"-ERR reached lua stack limit\r\n", (server.name, line)
            assert depth >= 32, (server.name, depth)
            conn.sendall(b"PING\r\n")
            assert lines.readline() == b"+PONG\r\n"


def test_acl_check_cmd_answers_as_redis(gradus, redis_server):
    """`redis.acl_check_cmd(command, args…)` tells whether the script's user may run that
    command on those keys, with Redis' errors for an unknown command and bad arguments (it did
    not exist: "attempt to call field 'acl_check_cmd' (a nil value)"; found by Redis' own
    scripting.tcl)."""
    scripts = [
        "return {redis.acl_check_cmd('set','xx',1), redis.acl_check_cmd('hset','xx','f',1), "
        "redis.acl_check_cmd('set','yy',1), redis.acl_check_cmd('get','xx')}",
        "return redis.acl_check_cmd('invalid-cmd','arg')",
        "return redis.acl_check_cmd()",
        "return redis.acl_check_cmd({})",
        "return {pcall(redis.acl_check_cmd, 'nosuch')}",
    ]
    replies = {}
    for server in (gradus, redis_server):
        admin = redis_client(server, 2)
        admin.acl_setuser("scripter", enabled=True, passwords=["+123"], commands=["+set", "+eval"],
                          keys=["xx*"])
        try:
            r = redis_client(server, 2, username="scripter", password="123")
            replies[server.name] = eval_each(r, scripts)
        finally:
            admin.acl_deluser("scripter")
    assert replies[gradus.name] == replies[redis_server.name]
    assert replies[gradus.name][0] == [1, None, None, None]


def test_the_globals_metatable_is_read_only_as_in_redis(gradus, redis_server):
    """`setmetatable(_G, …)` and changing `getmetatable(_G)` fail with Redis 7's `Attempt to
    modify a readonly table` (Gradus said "cannot change a protected metatable" and gave
    `false` for the metatable); the library tables too; a script's own tables keep their
    metatables. (Found by Redis' own scripting.tcl, "Try trick global protection".)"""
    scripts = [
        "setmetatable(_G, {})",
        "local g = getmetatable(_G) g.__index = {}",
        "return type(getmetatable(_G))",
        "return type(getmetatable(string))",
        "setmetatable(string, {})",
        "setmetatable(redis, {})",
        "local t = setmetatable({}, {__index = function() return 5 end}) return t.x",
        "local t = setmetatable({}, {__metatable = 'locked'}) return getmetatable(t)",
        "return type(getmetatable(''))",
    ]
    replies = {server.name: eval_each(redis_client(server, 2), scripts)
               for server in (gradus, redis_server)}
    assert replies[gradus.name] == replies[redis_server.name]
    assert replies[gradus.name][0].startswith("error: Attempt to modify a readonly table")


def test_script_and_function_counts_in_info_memory_and_sort_by_nothing_in_scripts(gradus, redis_server):
    """INFO memory's `number_of_cached_scripts`, `number_of_functions` and
    `number_of_libraries` follow SCRIPT LOAD / SCRIPT FLUSH ASYNC and FUNCTION LOAD / DELETE as
    in Redis (they were missing; `used_memory_scripts_eval` is there too, in bytes of its own
    reckoning). A set sorted BY a constant inside a script comes back sorted as strings, as
    Redis sorts it there for determinism (it came in the set's order). (Found by Redis' own
    scripting.tcl.)"""
    fields = ("number_of_cached_scripts", "number_of_functions", "number_of_libraries")
    library = ("#!lua name=countlib\n"
               "redis.register_function('c1', function() return 1 end)\n"
               "redis.register_function('c2', function() return 2 end)")
    seen = {}
    for server in (gradus, redis_server):
        r = redis_client(server, 2)
        r.script_flush()
        r.function_flush()

        def counts():
            info = r.info("memory")
            return tuple(info[f] for f in fields)
        steps = [counts()]
        for i in range(100):
            r.script_load(f"return {i}")
        steps.append(counts())
        r.function_load(library)
        steps.append(counts())
        r.execute_command("SCRIPT", "FLUSH", "ASYNC")
        r.function_delete("countlib")
        steps.append(counts())
        r.delete("myset")
        r.sadd("myset", *"a b c d e f g h i l m n o p q r s t u v z aa aaa azz".split())
        steps.append(r.eval("return redis.call('sort', KEYS[1], 'by', '_')", 1, "myset"))
        steps.append(r.eval("return redis.call('sort', KEYS[1], 'by', '_', 'get', '#')", 1, "myset"))
        seen[server.name] = steps
    assert seen[gradus.name] == seen[redis_server.name]
    assert seen[gradus.name][:4] == [(0, 0, 0), (100, 0, 0), (100, 2, 1), (0, 0, 0)]
    assert seen[gradus.name][4][:4] == [b"a", b"aa", b"aaa", b"azz"]


def test_a_script_without_a_shebang_runs_over_maxmemory_until_its_first_write(gradus, redis_server):
    """Over maxmemory (noeviction), Redis still runs an EVAL script without a shebang line (its
    compatibility mode) and refuses only its first denyoom command, with the OOM error, counted as
    a rejected call of that command; a write after a first write goes through (a script is not
    stopped halfway). A script with a shebang that may write, and FCALL, are refused at once.
    Gradus refused every such EVAL up front, so a read-only script failed with OOM on a full
    cache. (Found by Redis' own scripting.tcl, "Consistent eval error reporting".)"""
    scripts = [
        "return redis.call('get', KEYS[1])",
        "return redis.call('set', KEYS[1], 'y')",
        "local t = redis.pcall('set', KEYS[1], 'y') return t['err']",
        "redis.call('del', KEYS[1]) return redis.call('set', KEYS[1], 'z')",
        "return redis.call('get', KEYS[1])",
        "#!lua\nreturn redis.call('get', KEYS[1])",
        "#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])",
        "#!lua flags=allow-oom\nreturn redis.call('set', KEYS[1], 'w')",
    ]
    seen = {}
    for server in (gradus, redis_server):
        r = redis_client(server, 2)
        r.config_set("maxmemory-policy", "noeviction")
        r.set("oomkey", "x")
        r.config_resetstat()
        r.config_set("maxmemory", 1)
        try:
            out = eval_each(r, scripts, 1, "oomkey")
            stats = r.info("commandstats")
        finally:
            r.config_set("maxmemory", 0)
        out.append({k: stats["cmdstat_set"][k] for k in ("calls", "rejected_calls", "failed_calls")})
        seen[server.name] = out
    assert seen[gradus.name] == seen[redis_server.name]
    assert seen[gradus.name][0] == b"x"
    assert seen[gradus.name][2] == b"OOM command not allowed when used memory > 'maxmemory'."
    assert seen[gradus.name][-1] == {"calls": 2, "rejected_calls": 2, "failed_calls": 0}


def test_scripts_and_functions_see_the_server_version(r2):
    """`redis.REDIS_VERSION` and `redis.REDIS_VERSION_NUM` (0x00MMmmpp) are the version INFO
    reports, in scripts and in a library's loading code (Redis 7; Gradus had neither, and a
    library reading them failed to load). (Found by Redis' own functions.tcl.)"""
    version = r2.info("server")["redis_version"]
    major, minor, patch = (int(p) for p in version.split("."))
    num = (major << 16) | (minor << 8) | patch
    assert r2.eval("return {redis.REDIS_VERSION, redis.REDIS_VERSION_NUM}", 0) == [version.encode(), num]
    r2.function_load("#!lua name=versionlib\nlocal v = redis.REDIS_VERSION_NUM\n"
                     "redis.register_function('version_of', function() return {v, redis.REDIS_VERSION} end)",
                     replace=True)
    try:
        assert r2.fcall("version_of", 0) == [num, version.encode()]
    finally:
        r2.function_delete("versionlib")


def test_a_script_that_may_write_is_refused_at_once_without_good_replicas(gradus, redis_server):
    """With `min-replicas-to-write 1` and no replica, Redis refuses a script whose shebang does
    not say `no-writes` before it runs (NOREPLICAS), runs a `no-writes` one and one without a
    shebang, and refuses the latter's write. Gradus ran the shebang script. (Found by Redis'
    own scripting.tcl, "not enough good replicas".)"""
    scripts = [
        "#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])",
        "return redis.call('get', KEYS[1])",
        "#!lua\nreturn redis.call('get', KEYS[1])",
        "return redis.call('set', KEYS[1], 1)",
    ]
    seen = {}
    for server in (gradus, redis_server):
        r = redis_client(server, 2)
        r.set("replkey", "v")
        r.config_set("min-replicas-to-write", 1)
        try:
            out = eval_each(r, scripts, 1, "replkey")
        finally:
            r.config_set("min-replicas-to-write", 0)
        seen[server.name] = out
    assert seen[gradus.name] == seen[redis_server.name]
    assert seen[gradus.name][:3] == [b"v", b"v", "error: NOREPLICAS Not enough good replicas to write."]


def test_error_reply_gives_a_code_as_redis_does(gradus, redis_server):
    """`redis.error_reply(text)` drops a leading '-' and gives a text without a space the code
    ERR, as Redis' `luaPushErrorBuff` does: `error_reply('')` replies `-ERR `, not an empty
    error line (which clients cannot parse as an error with a code). A table `{err=...}` made
    by the script itself is sent as it is. (Found by Redis' own scripting.tcl.)"""
    scripts = [
        "return redis.error_reply('')",
        "return redis.error_reply('abc')",
        "return redis.error_reply('-abc')",
        "return redis.error_reply('-')",
        "return redis.error_reply('-ab c')",
        "return redis.error_reply('My Error')",
        "return {err='abc'}",
        "local t = redis.error_reply('abc') return t.err",
        "local t = redis.error_reply('-X y') return t.err",
    ]
    seen = {server.name: eval_each(redis_client(server, 2), scripts) for server in (gradus, redis_server)}
    assert seen[gradus.name] == seen[redis_server.name]
    assert seen[gradus.name][7] == b"ERR abc"


def test_keys_argv_and_g_cannot_be_assigned_in_a_script(gradus, redis_server):
    """A script's globals are a read-only table in Redis 7: `_G = {}`, `KEYS = {}`, `ARGV = nil`
    and `rawset(_G, k, v)` fail with `Attempt to modify a readonly table`, as any other global
    assignment does; `KEYS`, `ARGV` and `_G` still read (also through `_G` and `rawget`).
    Gradus kept the three as plain fields of the environment, so assigning them went through.
    (Found by Redis' own scripting.tcl, "Try trick global protection 4".)"""
    scripts = [
        "_G = {}",
        "KEYS = {}",
        "ARGV = nil",
        "rawset(_G, 'x', 1)",
        "rawset(_G, 'KEYS', {})",
        "return KEYS[1] .. ARGV[1]",
        "return _G.KEYS[1] .. _G.ARGV[1]",
        "return rawget(_G, 'KEYS')",
        "return {type(_G), type(_G._G), tostring(_G == _G._G)}",
        "return loadstring('return KEYS[1]')()",
        "return getmetatable(_G) ~= nil",
    ]
    seen = {}
    for server in (gradus, redis_server):
        r = redis_client(server, 2)
        seen[server.name] = eval_each(r, scripts, 1, "k", "a")
    assert seen[gradus.name] == seen[redis_server.name]
    assert all(e.startswith("error: ") and "Attempt to modify a readonly table" in e
               for e in seen[gradus.name][:5])
    assert seen[gradus.name][5] == b"ka"
