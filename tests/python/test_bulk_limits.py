"""Request size limits as Redis 7.2 has them: `proto-max-bulk-len` (default 512 MB, at least 1 MiB)
bounds one bulk argument, `client-query-buffer-limit` (default 1 GB, at least 1 MiB) bounds what
one connection holds of a request still arriving. Values of 8 and 40 MiB go through redis-py (a
4 MiB default used to disconnect such clients); a client that declares a huge bulk and sends
little of it makes the server hold little (Gradus reserves a bulk's room as its bytes arrive);
the error texts, the settings' defaults and their validation are compared with redis-server.
"""

from __future__ import annotations

import socket
import time

import pytest

from resp import ConnectionClosed, Err, RawConnection, Simple
from servers import redis_client, rss

MiB = 1024 * 1024


@pytest.mark.parametrize("size_mib", [8, 40])
def test_large_values_round_trip_with_the_default_limit(gradus, size_mib):
    """Regression (proto_max_bulk_len_default_was_4_mib): an 8 MiB SET disconnected the client."""
    r = redis_client(gradus, 2, socket_timeout=60)
    value = bytes(range(256)) * (size_mib * MiB // 256)
    assert r.set("big", value)
    assert r.strlen("big") == len(value)
    assert r.get("big") == value
    assert r.append("big", b"!") == len(value) + 1


def test_limit_defaults_and_validation_match_redis(gradus, redis_server):
    cases = [
        ("CONFIG", "GET", "proto-max-bulk-len"),
        ("CONFIG", "GET", "client-query-buffer-limit"),
        ("CONFIG", "SET", "proto-max-bulk-len", "1000"),
        ("CONFIG", "SET", "proto-max-bulk-len", "1048575"),
        ("CONFIG", "SET", "proto-max-bulk-len", "-1"),
        ("CONFIG", "SET", "proto-max-bulk-len", "abc"),
        ("CONFIG", "SET", "client-query-buffer-limit", "1000"),
        ("CONFIG", "SET", "client-query-buffer-limit", "abc"),
        ("CONFIG", "SET", "proto-max-bulk-len", "1mb"),
        ("CONFIG", "GET", "proto-max-bulk-len"),
        ("CONFIG", "SET", "client-query-buffer-limit", "2mb"),
        ("CONFIG", "GET", "client-query-buffer-limit"),
        ("CONFIG", "SET", "proto-max-bulk-len", "512mb", "client-query-buffer-limit", "1gb"),
        ("CONFIG", "GET", "proto-max-bulk-len"),
    ]
    with RawConnection(gradus.host, gradus.port) as ours, \
            RawConnection(redis_server.host, redis_server.port) as theirs:
        for case in cases:
            assert ours.call(*case) == theirs.call(*case), case


def _over_limit_reply(server, header: bytes):
    with RawConnection(server.host, server.port, timeout=10) as conn:
        assert conn.call("CONFIG", "SET", "proto-max-bulk-len", "1mb") == Simple(b"OK")
        conn.send(header)
        reply = conn.read_reply(timeout=10)
        closed = False
        try:
            conn.read_reply(timeout=5)
        except (ConnectionClosed, ConnectionResetError, OSError):
            closed = True
        return reply, closed


def test_bulk_over_the_limit_is_refused_as_redis_refuses_it(gradus, redis_server):
    for header in (b"*1\r\n$1048577\r\n", b"*2\r\n$3\r\nSET\r\n$99999999999\r\n",
                   b"*1\r\n$-2\r\n"):
        ours, theirs = _over_limit_reply(gradus, header), _over_limit_reply(redis_server, header)
        assert ours == theirs, header
        assert ours == (Err(b"ERR Protocol error: invalid bulk length"), True), ours
    # At the limit exactly, the bulk is accepted.
    with RawConnection(gradus.host, gradus.port, timeout=30) as conn:
        assert conn.call("CONFIG", "SET", "proto-max-bulk-len", "1mb") == Simple(b"OK")
        assert conn.call("SET", "k", b"x" * MiB) == Simple(b"OK")
        assert conn.call("STRLEN", "k") == MiB


def _sends_until_closed(server, total: int) -> bool:
    """Declares a 64 MiB bulk and streams `total` bytes of it: True if the server closed first."""
    sock = socket.create_connection((server.host, server.port), timeout=10)
    try:
        sock.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$67108864\r\n")
        chunk = b"x" * (256 * 1024)
        sent = 0
        while sent < total:
            sock.sendall(chunk)
            sent += len(chunk)
        sock.settimeout(10)
        return sock.recv(1) == b""
    except (BrokenPipeError, ConnectionResetError):
        return True
    except socket.timeout:
        return False
    finally:
        sock.close()


def test_query_buffer_limit_closes_a_connection(gradus, redis_server):
    for server in (gradus, redis_server):
        with RawConnection(server.host, server.port) as admin:
            assert admin.call("CONFIG", "SET", "client-query-buffer-limit", "2mb") == Simple(b"OK")
            assert _sends_until_closed(server, 8 * MiB), server
            # Within the limit the connection stays (the bulk is simply not complete yet).
            assert admin.call("CONFIG", "SET", "client-query-buffer-limit", "1gb") == Simple(b"OK")
            assert not _sends_until_closed(server, 4 * MiB), server
            assert admin.call("PING") == Simple(b"PONG")


@pytest.mark.gradus_only
def test_declared_bulk_is_not_reserved_before_it_arrives(gradus):
    """Regression (declared_bulk_length_reserved_up_front): the decoder reserved a bulk's whole
    declared length as soon as it read the header, so `$536870912` and a few bytes made the server
    allocate 512 MB (now it holds room for what arrived, doubling as more comes)."""
    with RawConnection(gradus.host, gradus.port) as conn:
        assert conn.call("PING") == Simple(b"PONG")
    before = rss(gradus)
    socks = []
    try:
        for _ in range(4):
            sock = socket.create_connection((gradus.host, gradus.port), timeout=10)
            sock.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870912\r\n" + b"x" * 1000)
            socks.append(sock)
        time.sleep(0.5)
        with RawConnection(gradus.host, gradus.port) as conn:
            assert conn.call("PING") == Simple(b"PONG")
            info = conn.call("INFO", "memory")
        grown = rss(gradus) - before
        assert grown < 8 * MiB, f"RSS grew by {grown} bytes"
        # The memory the server counts for those connections' buffers is small too.
        fields = dict(line.split(":", 1) for line in info.decode().splitlines() if ":" in line)
        assert int(fields["used_memory"]) < 64 * MiB, fields["used_memory"]
    finally:
        for sock in socks:
            sock.close()


@pytest.mark.gradus_only
def test_memcached_item_size_limit_is_its_own(gradus, mc):
    """The memcached port keeps memcached's 1 MiB item limit (`memcached-item-size-max`) whatever
    proto-max-bulk-len allows the RESP port; APPEND there cannot grow an item past it either."""
    big = b"x" * (2 * MiB)
    assert mc.cmd(b"set big 0 0 %d\r\n" % len(big) + big + b"\r\n") == \
        b"SERVER_ERROR object too large for cache"
    assert mc.cmd(b"mn\r\n") == b"MN"
    near = b"y" * (MiB - 1024)
    assert mc.cmd(b"set near 0 0 %d\r\n" % len(near) + near + b"\r\n") == b"STORED"
    more = b"z" * 4096
    # memcached 1.6 answers NOT_STORED when the appended item would be too large.
    assert mc.cmd(b"append near 0 0 %d\r\n" % len(more) + more + b"\r\n") == b"NOT_STORED"
    with RawConnection(gradus.host, gradus.port, timeout=30) as conn:
        assert conn.call("CONFIG", "GET", "proto-max-bulk-len") == [b"proto-max-bulk-len", b"536870912"]
        assert conn.call("STRLEN", "near") == len(near)
