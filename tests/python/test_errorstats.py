"""INFO errorstats and the error counters of INFO stats, against a real redis-server."""
import socket
import time

import redis

from servers import redis_client


def test_info_errorstats_counts_error_replies_as_redis(gradus, redis_server):
    """INFO errorstats (`errorstat_<CODE>:count=<n>`, a default section in Redis 7.2) and INFO
    stats `total_error_replies` / `unexpected_error_replies` count every error reply by its
    code as Redis does: unknown command, arity, WRONGTYPE, a command's own error, EXECABORT
    and the error queued in MULTI, a reply withheld by CLIENT REPLY OFF, errors a blocked
    client is unblocked with (NOGROUP, UNBLOCKED), a script's error; CONFIG RESETSTAT clears
    them. (Missing; found by Redis' own stream-cgroups.tcl.)"""
    def scenario(server):
        r = redis_client(server, 2, single_connection_client=True)
        r.flushall()
        r.config_resetstat()

        def q(*a):
            try:
                r.execute_command(*a)
            except redis.ResponseError:
                pass
        q("NOSUCH")
        q("GET")
        r.set("s", "x")
        q("LPUSH", "s", "a")
        q("INCR", "s")
        q("XADD", "st", "0-0", "f", "v")
        q("EVAL", "return {err='MYCODE custom'}", 0)
        q("EVAL", "error('boom')", 0)
        q("EVAL", "return redis.call('incr', KEYS[1])", 1, "s")
        with socket.create_connection((server.host, server.port), timeout=5) as raw:
            raw.sendall(b"MULTI\r\nNOSUCH\r\nEXEC\r\nCLIENT REPLY OFF\r\nNOSUCH2\r\nCLIENT REPLY ON\r\n")
            seen = b""
            while seen.count(b"\r\n") < 4:
                seen += raw.recv(1000)
        r.xgroup_create("g", "grp", "$", mkstream=True)
        with socket.create_connection((server.host, server.port), timeout=5) as blocked:
            blocked.sendall(b"CLIENT ID\r\n")
            client_id = int(blocked.recv(100)[1:-2])
            blocked.sendall(b"XREADGROUP GROUP grp c BLOCK 0 STREAMS g >\r\n")
            deadline = time.monotonic() + 5
            while r.info("clients")["blocked_clients"] != 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            r.xgroup_destroy("g", "grp")
            assert blocked.recv(200).startswith(b"-NOGROUP")
            blocked.sendall(b"BLPOP l 0\r\n")
            while r.info("clients")["blocked_clients"] != 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            r.client_unblock(client_id, error=True)
            assert blocked.recv(200).startswith(b"-UNBLOCKED")
        stats = r.info("stats")
        counts = (r.info("errorstats"), stats["total_error_replies"], stats["unexpected_error_replies"])
        r.config_resetstat()
        cleared = (r.info("errorstats"), r.info("stats")["total_error_replies"])
        return counts, cleared

    ours, theirs = scenario(gradus), scenario(redis_server)
    assert ours == theirs
    assert ours[0][0]["errorstat_ERR"] == {"count": 8}, ours
    assert ours[1] == ({}, 0)



def test_info_default_sections_are_redis_sections_in_redis_order(gradus, redis_server):
    """A plain INFO shows Redis' default sections in Redis' order, Modules and Cluster included
    (`cluster_enabled:0`: redis-py's own test suite reads it from a plain INFO and stopped with
    a KeyError); Gradus' own Tenants section comes last."""
    from resp import RawConnection

    headers = {}
    for server in (gradus, redis_server):
        conn = RawConnection(server.host, server.port)
        text = conn.call("INFO").decode()
        conn.close()
        headers[server.name] = [line for line in text.splitlines() if line.startswith("# ")]
        assert "cluster_enabled:0" in text
    assert headers[gradus.name][:len(headers[redis_server.name])] == headers[redis_server.name]
    assert all(h.startswith("# Tenant") for h in headers[gradus.name][len(headers[redis_server.name]):])


def test_lolwut_answers_the_version_line_as_redis(gradus, redis_server):
    """LOLWUT (redis-py's `lolwut()`; its own test suite calls it) replies `Redis ver. <v>`,
    with the version INFO reports; `VERSION x` must be an integer. It was an unknown command."""
    for server in (gradus, redis_server):
        r = redis_client(server, 2)
        version = r.info("server")["redis_version"]
        assert r.lolwut() == f"Redis ver. {version}\n".encode()
        assert r.execute_command("LOLWUT", "VERSION", "1") == f"Redis ver. {version}\n".encode()
        try:
            r.execute_command("LOLWUT", "VERSION", "x")
            raise AssertionError("VERSION x accepted")
        except redis.ResponseError as e:
            assert "not an integer" in str(e)
