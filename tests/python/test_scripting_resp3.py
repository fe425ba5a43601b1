"""`redis.setresp` and RESP3 in scripts, against a real redis-server started the same way
(`--enable-debug-command yes`, so `DEBUG PROTOCOL <type>` gives a reply of every RESP type).

A run starts at RESP2 whatever its caller speaks; after `redis.setresp(3)` the replies of its
`redis.call`s reach it in Redis' RESP3 forms (`{map=...}`, `{set=...}`, `{double=...}`,
`{big_number=...}`, `{verbatim_string=...}`, nil, booleans), and what a script returns in those
forms (and its booleans, which then are boolean replies) is written in the caller's protocol.
Every reply is compared byte for byte, for RESP2 and RESP3 clients. (The doubles here are ones
redis-server 7.0 writes as 7.2 does: 7.0 writes 17 significant digits, `-0.10000000000000001`,
where 7.2 and Gradus write the shortest form, `-0.1`.)"""
import pytest

from resp import RawConnection

# Scripts run in order on one connection (state from one case may be used by the next).
SETUP = [
    ("DEL", "h", "s", "z", "e"),
    ("HSET", "h", "field", "value"),
    ("SADD", "s", "x"),
    ("ZADD", "z", "1.5", "a", "2", "b"),
]

SCRIPTS = [
    # Replies of real commands, returned as they are and looked into.
    "redis.setresp(3); return redis.call('hgetall', KEYS[1])",
    "redis.setresp(2); return redis.call('hgetall', KEYS[1])",
    "return redis.call('hgetall', KEYS[1])",
    "redis.setresp(3); local r = redis.call('hgetall', KEYS[1]); return {type(r.map), r.map.field}",
    "redis.setresp(3); return redis.call('smembers', 's')",
    "redis.setresp(3); local r = redis.call('smembers', 's'); return {type(r.set), tostring(r.set.x)}",
    "redis.setresp(3); return redis.call('smembers', 'e')",
    "redis.setresp(3); return redis.call('zscore', 'z', 'a')",
    "redis.setresp(3); return tostring(redis.call('zscore', 'z', 'a').double)",
    "redis.setresp(3); return redis.call('zincrby', 'z', '0', 'b')",
    # ZRANGE WITHSCORES: flat in RESP2 (whatever the caller speaks), pairs in RESP3.
    "return redis.call('zrange', 'z', 0, -1, 'withscores')",
    "redis.setresp(3); return redis.call('zrange', 'z', 0, -1, 'withscores')",
    # A null: nil in RESP3, false in RESP2.
    "redis.setresp(3); return type(redis.call('get', 'nokey'))",
    "return type(redis.call('get', 'nokey'))",
    "redis.setresp(3); redis.setresp(2); return type(redis.call('get', 'nokey'))",
    # Each run starts at RESP2 again.
    "redis.setresp(3); return 1",
    "return type(redis.call('get', 'nokey'))",
    # Numbers as Redis reads them.
    "redis.setresp('3'); return true",
    "redis.setresp(3.9); return false",
    # Errors of redis.setresp.
    "redis.setresp()",
    "redis.setresp(4)",
    "redis.setresp(1)",
    "redis.setresp(2, 3)",
    "redis.setresp('x')",
    # Booleans returned: 1 and null in RESP2 runs, boolean replies in RESP3 runs.
    "return true",
    "return false",
    "return {true, false, 1}",
    "redis.setresp(3); return {true, false, 1}",
    # RESP3 forms returned by the script.
    "return {map={a=1}}",
    "return {map={}}",
    "return {set={a=true}}",
    "return {double=3.5}",
    "return {double=3.141}",
    "return {double=-0.5}",
    "return {double=1/0}",
    "return {double=-1/0}",
    "return {double=1e20}",
    "return {double='x'}",
    "return {double=2, ok='x'}",
    "return {big_number='12345678901234567890'}",
    "return {big_number=5}",
    "return {verbatim_string={format='txt', string='hi'}}",
    "return {verbatim_string={format='markdown', string='hi'}}",
    "return {verbatim_string={format='a', string='hi'}}",
    "return {verbatim_string={format='a'}}",
    "return {verbatim_string='x'}",
    "return {1, {map={k={set={x=true}}}}, {double=0.5}}",
    "redis.setresp(3); return {1, {map={k={set={x=true}}}}, true, false}",
    "redis.setresp(3); return {map={t=true, f=false}}",
    "return {map={t=true, f=false}}",
    # DEBUG PROTOCOL from a script (allowed by DEBUG SET-DISABLE-DENY-SCRIPTS 1).
    *(f"redis.setresp({n}); return redis.call('debug', 'protocol', '{t}')"
      for n in (2, 3)
      for t in ("string", "integer", "double", "bignum", "null", "array", "set", "map",
                "attrib", "push", "verbatim", "true", "false", "nosuch")),
    "redis.setresp(3); local r = redis.call('debug', 'protocol', 'verbatim'); "
    "return {r.verbatim_string.format, r.verbatim_string.string}",
    "redis.setresp(3); return tostring(redis.call('debug', 'protocol', 'double').double)",
    "redis.setresp(3); return redis.call('debug', 'protocol', 'bignum').big_number",
    "redis.setresp(3); local r = redis.call('debug', 'protocol', 'map').map; "
    "return {tostring(r[0]), tostring(r[1]), tostring(r[2])}",
    "redis.setresp(3); local r = redis.call('debug', 'protocol', 'set').set; "
    "return {tostring(r[0]), tostring(r[1]), tostring(r[2])}",
]

LIBRARY = """#!lua name=resp3lib
redis.register_function('as3', function(keys, args)
  redis.setresp(3)
  return redis.call('hgetall', keys[1])
end)
redis.register_function('as2', function(keys, args)
  return {redis.call('hgetall', keys[1]), true}
end)
redis.register_function{function_name='as3ro', callback=function(keys, args)
  redis.setresp(3)
  return {redis.call('zscore', keys[1], 'a'), false}
end, flags={'no-writes'}}
"""


def transcript(server, protocol):
    """Every case's raw reply, on one connection speaking `protocol`."""
    c = RawConnection(server.host, server.port)
    c.send_command("HELLO", str(protocol))
    c.read_raw_reply()
    out = []

    def run(*cmd):
        c.send_command(*cmd)
        out.append((cmd, c.read_raw_reply()))

    for cmd in SETUP:
        c.send_command(*cmd)
        c.read_raw_reply()
    run("DEBUG", "SET-DISABLE-DENY-SCRIPTS", "1")
    for body in SCRIPTS:
        run("EVAL", body, "1", "h")
    for body in SCRIPTS[:4]:
        c.send_command("SCRIPT", "LOAD", body)
        sha = c.read_reply()
        run("EVALSHA", sha, "1", "h")
        run("EVAL_RO", body, "1", "h")
    run("FUNCTION", "LOAD", "REPLACE", LIBRARY)
    run("FCALL", "as3", "1", "h")
    run("FCALL", "as2", "1", "h")
    run("FCALL_RO", "as3ro", "1", "z")
    run("FUNCTION", "LOAD", "REPLACE", "#!lua name=bad\nredis.setresp(3)")
    run("FUNCTION", "DELETE", "resp3lib")
    run("DEBUG", "SET-DISABLE-DENY-SCRIPTS", "0")
    run("EVAL", "return redis.call('debug', 'protocol', 'string')", "0")
    return out


@pytest.mark.parametrize("protocol", [2, 3])
def test_scripts_convert_resp3_replies_as_redis(gradus_factory, _servers, protocol):
    gradus = gradus_factory("--enable-debug-command", "yes")
    peer = _servers.start_redis("--enable-debug-command", "yes")
    ours = transcript(gradus, protocol)
    theirs = transcript(peer, protocol)
    assert len(ours) == len(theirs)
    diffs = [(cmd, a, b) for (cmd, a), (_, b) in zip(ours, theirs) if a != b]
    assert diffs == [], "\n".join(f"{cmd!r}\n  gradus: {a!r}\n  redis:  {b!r}" for cmd, a, b in diffs)


@pytest.mark.parametrize("protocol", [2, 3])
def test_debug_protocol_replies_as_redis(gradus_factory, _servers, protocol):
    """Each type, as its own command: in RESP3 the attribute comes before its reply and the push
    before the reply that follows it; RESP2 has neither (push is an error)."""
    gradus = gradus_factory("--enable-debug-command", "yes")
    peer = _servers.start_redis("--enable-debug-command", "yes")
    seen = {}
    for server in (gradus, peer):
        c = RawConnection(server.host, server.port)
        c.send_command("HELLO", str(protocol))
        c.read_raw_reply()
        replies = []
        for kind in ("string", "integer", "double", "bignum", "null", "array", "set", "map",
                     "attrib", "push", "verbatim", "true", "false", "nosuch", "STRING"):
            c.send_command("DEBUG", "PROTOCOL", kind)
            replies.append(c.read_raw_reply())
            if protocol == 3 and kind == "push":
                # The push came first: the reply follows. (An attribute is read with its reply:
                # the raw bytes hold both.)
                replies.append(c.read_raw_reply())
        c.send_command("DEBUG", "PROTOCOL")
        replies.append(c.read_raw_reply())
        c.send_command("PING")
        replies.append(c.read_raw_reply())
        seen[server.name] = replies
    assert seen[gradus.name] == seen[peer.name]
