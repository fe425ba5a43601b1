"""memcached text and meta protocol on Gradus' memcached port, byte for byte.

Reply texts follow memcached 1.6's doc/protocol.txt; test_memcache_clients.py
replays a script against a real memcached to check the same forms there.
"""

import re
import time

import pytest

from memcache_raw import Closed

pytestmark = pytest.mark.gradus_only


# --- storage and retrieval -------------------------------------------------


def test_set_get_gets_reply_forms(mc):
    assert mc.cmd(b"set k 42 0 5\r\nhello\r\n") == b"STORED"
    assert mc.get(b"get k\r\n") == [(b"k", 42, b"hello", None)]
    [(key, flags, data, cas)] = mc.get(b"gets k\r\n")
    assert (key, flags, data) == (b"k", 42, b"hello") and cas > 0
    assert mc.get(b"get nope\r\n") == []
    # Several keys, misses skipped, order kept.
    mc.cmd(b"set j 0 0 1\r\nj\r\n")
    assert [i[0] for i in mc.get(b"get j nope k\r\n")] == [b"j", b"k"]


def test_flags_are_32_bit_and_data_is_binary(mc):
    payload = bytes(range(256)) + b"\r\n\0"
    assert mc.cmd(b"set bin 4294967295 0 %d\r\n" % len(payload) + payload + b"\r\n") == b"STORED"
    assert mc.get(b"get bin\r\n") == [(b"bin", 4294967295, payload, None)]
    assert mc.cmd(b"set bad 4294967296 0 1\r\nx\r\n") == b"CLIENT_ERROR bad command line format"


def test_add_replace_append_prepend(mc):
    assert mc.cmd(b"add a 1 0 1\r\nx\r\n") == b"STORED"
    assert mc.cmd(b"add a 1 0 1\r\ny\r\n") == b"NOT_STORED"
    assert mc.cmd(b"replace none 0 0 1\r\nx\r\n") == b"NOT_STORED"
    assert mc.cmd(b"replace a 7 0 1\r\nr\r\n") == b"STORED"
    assert mc.cmd(b"append a 0 0 2\r\n>>\r\n") == b"STORED"
    assert mc.cmd(b"prepend a 0 0 2\r\n<<\r\n") == b"STORED"
    # append/prepend keep the item's flags, ignoring their own.
    assert mc.get(b"get a\r\n") == [(b"a", 7, b"<<r>>", None)]
    assert mc.cmd(b"append none 0 0 1\r\nx\r\n") == b"NOT_STORED"
    assert mc.cmd(b"prepend none 0 0 1\r\nx\r\n") == b"NOT_STORED"


def test_cas_stored_exists_not_found(mc):
    mc.cmd(b"set c 0 0 1\r\n1\r\n")
    [(_, _, _, cas)] = mc.get(b"gets c\r\n")
    assert mc.cmd(b"cas c 0 0 1 %d\r\n2\r\n" % cas) == b"STORED"
    assert mc.cmd(b"cas c 0 0 1 %d\r\n3\r\n" % cas) == b"EXISTS"
    assert mc.cmd(b"cas missing 0 0 1 1\r\n3\r\n") == b"NOT_FOUND"
    assert mc.get(b"get c\r\n")[0][2] == b"2"


def test_incr_decr(mc):
    mc.cmd(b"set n 0 0 2\r\n10\r\n")
    assert mc.cmd(b"incr n 5\r\n") == b"15"
    assert mc.cmd(b"decr n 100\r\n") == b"0", "decr stops at 0"
    mc.cmd(b"set n 0 0 20\r\n18446744073709551615\r\n")
    assert mc.cmd(b"incr n 2\r\n") == b"1", "incr wraps at 2^64"
    assert mc.cmd(b"incr missing 1\r\n") == b"NOT_FOUND"
    mc.cmd(b"set t 0 0 3\r\nabc\r\n")
    assert mc.cmd(b"incr t 1\r\n") == b"CLIENT_ERROR cannot increment or decrement non-numeric value"
    assert mc.cmd(b"incr n -1\r\n") == b"CLIENT_ERROR invalid numeric delta argument"


def test_delete_touch_gat(mc):
    mc.cmd(b"set d 3 0 1\r\nx\r\n")
    assert mc.cmd(b"touch d 100\r\n") == b"TOUCHED"
    assert mc.cmd(b"touch nope 100\r\n") == b"NOT_FOUND"
    assert mc.meta(b"mg d t\r\n")[0] == b"HD t100"
    assert mc.get(b"gat 200 d nope\r\n") == [(b"d", 3, b"x", None)]
    assert mc.meta(b"mg d t\r\n")[0] == b"HD t200"
    [(_, _, _, cas)] = mc.get(b"gats 0 d\r\n")
    assert cas > 0
    assert mc.meta(b"mg d t\r\n")[0] == b"HD t-1"
    assert mc.cmd(b"delete d\r\n") == b"DELETED"
    assert mc.cmd(b"delete d\r\n") == b"NOT_FOUND"
    assert mc.cmd(b"delete d 0\r\n") == b"NOT_FOUND", "legacy 'delete key 0' is accepted"
    assert mc.cmd(b"delete d 5\r\n").startswith(b"CLIENT_ERROR bad command line format")


def test_expiry_relative_absolute_negative(mc):
    assert mc.cmd(b"set e 0 1 1\r\nx\r\n") == b"STORED"
    assert mc.cmd(b"set abs 0 %d 1\r\nx\r\n" % (int(time.time()) + 100)) == b"STORED"
    ttl = int(mc.meta(b"mg abs t\r\n")[0].split(b"t")[1])
    assert 98 <= ttl <= 101
    assert mc.cmd(b"set gone 0 -1 1\r\nx\r\n") == b"STORED"
    assert mc.get(b"get gone\r\n") == []
    time.sleep(1.1)
    assert mc.get(b"get e\r\n") == []


def test_noreply_everywhere(mc):
    mc.send(b"set q 0 0 1 noreply\r\n1\r\n"
            b"add q 0 0 1 noreply\r\n2\r\n"
            b"replace q 0 0 1 noreply\r\n3\r\n"
            b"append q 0 0 1 noreply\r\n4\r\n"
            b"prepend q 0 0 1 noreply\r\n5\r\n"
            b"incr nonnum 1 noreply\r\n"
            b"set text 0 0 1 noreply\r\nx\r\n"
            b"incr text 1 noreply\r\n"
            b"touch q 10 noreply\r\n"
            b"cas q 0 0 1 1 noreply\r\n6\r\n"
            b"delete nope noreply\r\n"
            b"verbosity 1 noreply\r\n")
    assert mc.nothing_pending()
    assert mc.get(b"get q\r\n") == [(b"q", 0, b"534", None)]
    mc.send(b"flush_all noreply\r\n")
    assert mc.nothing_pending()
    assert mc.get(b"get q\r\n") == []


def test_errors_and_misc(mc):
    assert mc.cmd(b"bogus\r\n") == b"ERROR"
    assert mc.cmd(b"\r\n") == b"ERROR"
    assert mc.cmd(b"get\r\n") == b"ERROR"
    assert mc.cmd(b"set k 0 0\r\n") == b"ERROR"
    assert mc.cmd(b"set k 0 0 -1\r\n") == b"CLIENT_ERROR bad command line format"
    assert mc.cmd(b"set k abc 0 1\r\nx\r\n") == b"CLIENT_ERROR bad command line format"
    assert mc.line() == b"ERROR", "the refused command's data line is read as a command"
    # A data block not followed by CRLF.
    assert mc.cmd(b"set k 0 0 1\r\nxyz\r\n") == b"CLIENT_ERROR bad data chunk"
    # As in memcached, the block is exactly <bytes>+2 long: the rest is read as the next line.
    assert mc.line() == b"ERROR"
    assert re.fullmatch(rb"VERSION \d+\.\d+\.\d+", mc.cmd(b"version\r\n"))
    assert mc.cmd(b"verbosity 1\r\n") == b"OK"
    assert mc.cmd(b"mn\r\n") == b"MN"


def test_quit_closes(mc):
    mc.send(b"quit\r\n")
    assert mc.is_closed()


# --- limits ----------------------------------------------------------------


def test_key_length_and_characters(mc):
    assert mc.cmd(b"set " + b"k" * 250 + b" 0 0 1\r\nx\r\n") == b"STORED"
    assert mc.cmd(b"set " + b"k" * 251 + b" 0 0 1\r\nx\r\n") == b"CLIENT_ERROR bad command line format"
    # The rejected command's data line is then read as a command of its own.
    assert mc.line() == b"ERROR"
    assert mc.cmd(b"get " + b"k" * 251 + b"\r\n") == b"CLIENT_ERROR bad command line format"
    assert mc.cmd(b"get a\x01b\r\n") == b"CLIENT_ERROR bad command line format"
    assert mc.cmd(b"mg " + b"k" * 251 + b" v\r\n") == b"CLIENT_ERROR bad command line format"


def test_too_large_value_is_swallowed(gradus_factory):
    from memcache_raw import McRaw

    server = gradus_factory("--memcached-item-size-max", "2048")
    mc = McRaw(server.host, server.memcached_port)
    try:
        big = b"x" * 5000
        assert mc.cmd(b"set big 0 0 5000\r\n" + big + b"\r\n") == b"SERVER_ERROR object too large for cache"
        # The value was swallowed, not parsed as commands: the connection is in step.
        assert mc.cmd(b"mn\r\n") == b"MN"
        assert mc.meta(b"ms big 5000 T0\r\n" + big + b"\r\n")[0] == b"SERVER_ERROR object too large for cache"
        assert mc.cmd(b"mn\r\n") == b"MN"
        mc.send(b"set big 0 0 5000 noreply\r\n" + big + b"\r\n")
        assert mc.nothing_pending()
        assert mc.cmd(b"set ok 0 0 2048\r\n" + b"y" * 2048 + b"\r\n") == b"STORED"
        assert mc.cmd(b"append ok 0 0 1\r\nz\r\n") == b"NOT_STORED", "append past the limit"
        assert mc.get(b"get big\r\n") == []
    finally:
        mc.close_all()


def test_line_without_newline_after_2048_bytes_closes(mc):
    mc.send(b"set " + b"k" * 2100)
    assert mc.is_closed()


def test_long_line_under_the_limit_waits(mc):
    c = mc.new()
    c.send(b"x" * 2000)
    assert not c.is_closed(wait=0.3)
    assert c.cmd(b"\r\n") == b"ERROR"


def test_long_multiget_is_allowed(mc):
    mc.cmd(b"set k1 0 0 1\r\n1\r\n")
    keys = b" ".join(b"key%04d" % i for i in range(600)) + b" k1"
    assert len(keys) > 2048
    assert mc.get(b"get " + keys + b"\r\n") == [(b"k1", 0, b"1", None)]


def test_binary_protocol_bytes_get_an_error_and_a_close(mc):
    # A binary-protocol GET request header (magic 0x80, opcode 0x00).
    mc.send(b"\x80\x00\x00\x01" + b"\x00" * 20 + b"k")
    assert mc.line().startswith(b"CLIENT_ERROR")
    assert mc.is_closed()


# --- meta commands ---------------------------------------------------------


def test_meta_get_flags(mc):
    mc.cmd(b"set m 9 0 3\r\nabc\r\n")
    line, value = mc.meta(b"mg m s v f t k Oxyz q\r\n")
    assert (line, value) == (b"VA 3 s3 f9 t-1 km Oxyz", b"abc")
    line, _ = mc.meta(b"mg m c\r\n")
    cas = int(line.split(b"c")[1])
    [(_, _, _, gets_cas)] = mc.get(b"gets m\r\n")
    assert cas == gets_cas
    # C: the value is left out when the CAS matches.
    assert mc.meta(b"mg m v C%d\r\n" % cas) == (b"HD", None)
    assert mc.meta(b"mg m v C%d\r\n" % (cas + 1))[1] == b"abc"
    # h / l report the state before this fetch.
    c2 = mc.new()
    c2.cmd(b"set fresh 0 0 1\r\nx\r\n")
    assert c2.meta(b"mg fresh h l\r\n")[0] == b"HD h0 l0"
    assert c2.meta(b"mg fresh h\r\n")[0] == b"HD h1"
    # l counts whole seconds since the last store or fetch (kept in the key's access clock).
    c2.cmd(b"set idle 0 0 1\r\nx\r\n")
    time.sleep(1.2)
    assert c2.meta(b"mg idle l\r\n")[0] in (b"HD l1", b"HD l2")
    assert c2.meta(b"mg idle l\r\n")[0] == b"HD l0"
    # T touches, like gat.
    assert mc.meta(b"mg m T30 t\r\n")[0] == b"HD t30"


def test_meta_get_miss_and_quiet_pipeline(mc):
    assert mc.meta(b"mg nope v\r\n") == (b"EN", None)
    assert mc.meta(b"mg nope v Oab k\r\n") == (b"EN Oab knope", None)
    mc.cmd(b"set hit 0 0 2\r\nhi\r\n")
    # Quiet misses say nothing; hits still answer; mn marks the end.
    mc.send(b"mg a1 v q\r\nmg hit v q k\r\nmg a2 v q\r\nmn\r\n")
    assert mc.line() == b"VA 2 khit"
    assert mc.data_block(2) == b"hi"
    assert mc.line() == b"MN"


def test_meta_base64_keys(mc):
    # "foo bar" cannot be a text key; base64 lets it in.
    assert mc.meta(b"ms Zm9vIGJhcg== 1 b\r\nx\r\n") == (b"HD", None)
    assert mc.meta(b"mg Zm9vIGJhcg== b v k\r\n") == (b"VA 1 kZm9vIGJhcg== b", b"x")
    assert mc.meta(b"mg !!!! b v\r\n")[0] == b"CLIENT_ERROR error decoding key"


def test_meta_set_modes_and_flags(mc):
    assert mc.meta(b"ms s 2 F5 T100 c k s\r\nhi\r\n")[0].startswith(b"HD c")
    assert mc.meta(b"mg s f t v\r\n") == (b"VA 2 f5 t100", b"hi")
    assert mc.meta(b"ms s 1 ME\r\nx\r\n")[0] == b"NS"
    assert mc.meta(b"ms new 1 ME\r\nx\r\n")[0] == b"HD"
    assert mc.meta(b"ms nope 1 MR\r\nx\r\n")[0] == b"NS"
    assert mc.meta(b"ms s 2 MA s\r\n!!\r\n")[0] == b"HD s4"
    assert mc.meta(b"ms s 2 MP\r\n<<\r\n")[0] == b"HD"
    assert mc.meta(b"mg s v f\r\n") == (b"VA 6 f5", b"<<hi!!")
    assert mc.meta(b"ms nope 1 MA\r\nx\r\n")[0] == b"NS"
    assert mc.meta(b"ms viv 1 MA N30\r\nx\r\n")[0] == b"HD", "append with N vivifies"
    assert mc.meta(b"ms s 1 Mz\r\nx\r\n")[0] == b"CLIENT_ERROR invalid mode for ms M token"
    # q hides HD only.
    mc.send(b"ms s 1 q\r\nx\r\nms s 1 ME q\r\nx\r\nmn\r\n")
    assert mc.line() == b"NS"
    assert mc.line() == b"MN"


def test_meta_set_cas_and_explicit_cas(mc):
    line, _ = mc.meta(b"ms c 1 c\r\n1\r\n")
    cas = int(line.split(b"c")[1])
    assert mc.meta(b"ms c 1 C%d\r\n2\r\n" % (cas + 1))[0] == b"EX"
    assert mc.meta(b"ms c 1 C%d\r\n2\r\n" % cas)[0] == b"HD"
    assert mc.meta(b"ms nope 1 C5\r\n2\r\n")[0] == b"NF"
    assert mc.meta(b"ms e 1 E987654 c\r\nx\r\n")[0] == b"HD c987654"
    assert mc.meta(b"mg e c\r\n")[0] == b"HD c987654"


def test_meta_set_stale_cas_with_invalidate(mc):
    line, _ = mc.meta(b"ms s 3 c T100\r\nold\r\n")
    old_cas = int(line.split(b"c")[1])
    mc.meta(b"ms s 3\r\nnew\r\n")
    # A late writer with an older CAS and I: stored, but marked stale.
    assert mc.meta(b"ms s 4 I C%d\r\nlate\r\n" % old_cas)[0] == b"HD"
    line, value = mc.meta(b"mg s v\r\n")
    assert value == b"late" and line.endswith(b" X W")


def test_meta_delete(mc):
    mc.cmd(b"set d 0 0 1\r\nx\r\n")
    assert mc.meta(b"md d Oq k\r\n")[0] == b"HD Oq kd"
    assert mc.meta(b"md d\r\n")[0] == b"NF"
    line, _ = mc.meta(b"ms d 1 c\r\nx\r\n")
    cas = int(line.split(b"c")[1])
    assert mc.meta(b"md d C%d\r\n" % (cas + 1))[0] == b"EX"
    mc.send(b"md d q\r\nmd d q\r\nmn\r\n")
    assert mc.line() == b"NF"
    assert mc.line() == b"MN"
    # x: keep the item, drop its value.
    mc.cmd(b"set x 5 0 3\r\nabc\r\n")
    assert mc.meta(b"md x x\r\n")[0] == b"HD"
    assert mc.meta(b"mg x v f\r\n") == (b"VA 0 f0", b"")


def test_meta_delete_invalidate_marks_stale_and_bumps_cas(mc):
    line, _ = mc.meta(b"ms v 3 c T100\r\nold\r\n")
    cas = int(line.split(b"c")[1])
    assert mc.meta(b"md v I T30\r\n")[0] == b"HD"
    line, value = mc.meta(b"mg v v c t\r\n")
    new_cas = int(line.split(b" ")[2][1:])
    assert value == b"old" and new_cas != cas
    assert line.endswith(b" t30 X W"), "the first reader of a stale item wins the recache"
    assert mc.meta(b"mg v v\r\n")[0].endswith(b" Z X")
    # The winner's write with the CAS it saw clears the stale state.
    assert mc.meta(b"ms v 3 C%d T100\r\nnew\r\n" % new_cas)[0] == b"HD"
    assert mc.meta(b"mg v v\r\n") == (b"VA 3", b"new")


def test_meta_vivify_and_recache(mc):
    assert mc.meta(b"mg viv v N30 t\r\n") == (b"VA 0 t30 W", b"")
    assert mc.meta(b"mg viv v N30 t\r\n") == (b"VA 0 t30 Z", b"")
    assert mc.meta(b"ms viv 3 T60\r\nval\r\n")[0] == b"HD"
    assert mc.meta(b"mg viv v N30\r\n") == (b"VA 3", b"val")
    # R: win when the remaining TTL is below the token, once.
    assert mc.meta(b"mg viv R30 t\r\n")[0] == b"HD t60"
    assert mc.meta(b"mg viv R90\r\n")[0] == b"HD W"
    assert mc.meta(b"mg viv R90\r\n")[0] == b"HD Z"


def test_meta_arithmetic(mc):
    assert mc.meta(b"ma n\r\n")[0] == b"NF"
    assert mc.meta(b"ma n N0 J10 v\r\n") == (b"VA 2", b"10")
    assert mc.meta(b"ma n v\r\n") == (b"VA 2", b"11")
    assert mc.meta(b"ma n D5 MD v t\r\n") == (b"VA 1 t-1", b"6")
    assert mc.meta(b"ma n MI D4 T100 t\r\n")[0] == b"HD t100"
    line, _ = mc.meta(b"ma n c\r\n")
    cas = int(line.split(b"c")[1])
    assert mc.meta(b"ma n C%d\r\n" % (cas + 1))[0] == b"EX"
    assert mc.meta(b"ma n q\r\nmn\r\n")[0] == b"MN"
    assert mc.get(b"get n\r\n")[0][2] == b"12"
    assert mc.meta(b"ma n Mx\r\n")[0] == b"CLIENT_ERROR invalid mode for ma M token"
    assert mc.meta(b"ma n v v\r\n")[0] == b"CLIENT_ERROR invalid or duplicate flag"


def test_meta_flag_errors(mc):
    assert mc.meta(b"mg k v v\r\n")[0] == b"CLIENT_ERROR duplicate flag"
    assert mc.meta(b"mg k Y\r\n")[0] == b"CLIENT_ERROR invalid flag"
    assert mc.meta(b"mg k Tx\r\n")[0] == b"CLIENT_ERROR bad token in command line format"
    assert mc.meta(b"mg k O" + b"o" * 33 + b"\r\n")[0] == b"CLIENT_ERROR opaque token too long"
    assert mc.meta(b"ms k x\r\n")[0] == b"CLIENT_ERROR bad command line format"
    # Proxy hints are ignored.
    assert mc.meta(b"mg k v P/path L1\r\n")[0] == b"EN"


def test_meta_debug(mc):
    mc.cmd(b"set dbg 0 100 3\r\nabc\r\n")
    line = mc.cmd(b"me dbg\r\n")
    assert re.fullmatch(rb"ME dbg exp=100 la=\d+ cas=\d+ fetch=no cls=1 size=\d+", line), line
    assert mc.cmd(b"me nope\r\n") == b"EN"


# --- one store, two protocols ----------------------------------------------


def test_values_shared_with_resp(gradus, mc, r2):
    mc.cmd(b"set shared 3 0 5\r\nhello\r\n")
    assert r2.get("shared") == b"hello"
    r2.set("fromresp", b"\x00bin")
    assert mc.get(b"get fromresp\r\n") == [(b"fromresp", 0, b"\x00bin", None)]
    assert mc.get(b"get shared\r\n") == [(b"shared", 3, b"hello", None)]
    # A RESP write replaces the whole item: its client flags go back to 0 (documented).
    r2.append("shared", b"!")
    assert mc.get(b"get shared\r\n") == [(b"shared", 0, b"hello!", None)]
    r2.hset("h", "f", "v")
    assert mc.get(b"get h\r\n") == [], "a hash is not a memcached item"
    assert mc.cmd(b"set h 0 0 1\r\nx\r\n") == b"STORED"
    assert r2.type("h") == b"string"


def test_flush_all_is_scoped_to_the_mapped_database(gradus, mc, r2):
    import redis

    other = redis.Redis(host=gradus.host, port=gradus.port, db=1)
    other.set("keep", "1")
    r2.set("zap", "1")
    assert mc.cmd(b"flush_all\r\n") == b"OK"
    assert r2.get("zap") is None
    assert other.get("keep") == b"1"
    other.close()


def test_flush_all_with_delay(mc):
    mc.cmd(b"set f 0 0 1\r\nx\r\n")
    assert mc.cmd(b"flush_all 1\r\n") == b"OK"
    assert len(mc.get(b"get f\r\n")) == 1
    deadline = time.time() + 5
    while mc.get(b"get f\r\n") and time.time() < deadline:
        time.sleep(0.1)
    assert mc.get(b"get f\r\n") == []


def test_memcached_db_setting(gradus_factory):
    import redis
    from memcache_raw import McRaw

    server = gradus_factory("--memcached-db", "3")
    mc = McRaw(server.host, server.memcached_port)
    db3 = redis.Redis(host=server.host, port=server.port, db=3)
    try:
        mc.cmd(b"set k 0 0 1\r\nx\r\n")
        assert db3.get("k") == b"x"
        assert redis.Redis(host=server.host, port=server.port).get("k") is None
    finally:
        mc.close_all()
        db3.close()


def test_config_get_shows_the_memcached_settings(gradus, r2):
    got = r2.config_get("memcached-*")
    assert got == {"memcached-port": str(gradus.memcached_port), "memcached-db": "0",
                   "memcached-tenant": "", "memcached-item-size-max": "1048576",
                   "memcached-tls-port": "0"}


def test_memcached_port_zero_disables(gradus_factory):
    import socket

    server = gradus_factory("--memcached-port", "0")
    assert server.memcached_port == 0
    assert "--memcached-port" in server.argv and "0" in server.argv
    # Nothing listens for memcached next to the RESP port's neighbours either: probe a
    # freshly freed port would prove nothing, so check the process's own listening sockets.
    import subprocess
    out = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout
    pid = str(server.proc.pid)
    listening = [l for l in out.splitlines() if f"pid={pid}," in l]
    assert len(listening) == 1, listening


# --- stats -----------------------------------------------------------------


def stats(mc, sub=b""):
    lines = mc.send(b"stats" + (b" " + sub if sub else b"") + b"\r\n").lines_until(b"END")
    return dict(l.split(b" ", 2)[1:] for l in lines[:-1])


def test_stats_counts(mc):
    mc.cmd(b"set s 0 0 1\r\nx\r\n")
    mc.get(b"get s nope\r\n")
    st = stats(mc)
    for name in (b"pid", b"uptime", b"version", b"curr_connections", b"curr_items", b"bytes"):
        assert name in st
    assert int(st[b"cmd_set"]) == 1 and int(st[b"get_hits"]) == 1 and int(st[b"get_misses"]) == 1
    assert mc.cmd(b"stats reset\r\n") == b"RESET"
    assert int(stats(mc)[b"cmd_set"]) == 0
    assert mc.cmd(b"stats nonsense\r\n") == b"ERROR"


def test_stats_cachedump_lists_keys(mc):
    for k in (b"a", b"b", b"c"):
        mc.cmd(b"set " + k + b" 0 0 1\r\nx\r\n")
    lines = mc.send(b"stats cachedump 1 0\r\n").lines_until(b"END")
    keys = sorted(re.match(rb"ITEM (\S+) \[1 b; 0 s\]", l).group(1) for l in lines[:-1])
    assert keys == [b"a", b"b", b"c"]
    assert mc.send(b"stats cachedump 2 0\r\n").lines_until(b"END") == [b"END"]
    assert mc.cmd(b"stats cachedump 250 0\r\n") == b"CLIENT_ERROR Illegal slab id"
    assert len(mc.send(b"stats cachedump 1 2\r\n").lines_until(b"END")) == 3


def test_visible_in_client_list(gradus, mc, r2):
    mc.cmd(b"mn\r\n")
    assert any(c.get("cmd") == "memcached" for c in r2.client_list())


# --- authentication (memcached -Y style, with requirepass) -----------------


def test_requirepass_needs_a_text_protocol_login(gradus_factory):
    from memcache_raw import McRaw

    server = gradus_factory("--requirepass", "s3cret")
    mc = McRaw(server.host, server.memcached_port)
    try:
        assert mc.cmd(b"get k\r\n") == b"CLIENT_ERROR unauthenticated"
        assert mc.cmd(b"set auth 0 0 12\r\ndefault nope\r\n") == b"CLIENT_ERROR authentication failure"
        assert mc.cmd(b"set auth 0 0 7\r\nnospace\r\n") == b"CLIENT_ERROR bad authentication token format"
        assert mc.cmd(b"set auth 0 0 9000\r\n" + b"x" * 9000 + b"\r\n").startswith(b"SERVER_ERROR")
        assert mc.cmd(b"set auth 0 0 14\r\ndefault s3cret\r\n") == b"STORED"
        assert mc.cmd(b"set k 0 0 1\r\nv\r\n") == b"STORED"
        assert mc.get(b"get k auth\r\n") == [(b"k", 0, b"v", None)], "the login stored nothing"
        other = mc.new()
        assert other.cmd(b"mg k v\r\n") == b"CLIENT_ERROR unauthenticated"
    finally:
        mc.close_all()
