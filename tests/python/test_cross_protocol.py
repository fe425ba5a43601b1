"""Cross-protocol scripting: a web page can make a browser POST to
http://127.0.0.1:6379/ (or :11211); the HTTP headers reach the store as
commands and the body after them as more commands.  Redis closes the connection
at the first `POST` or `Host:` command (before authentication, dropping the
batch's pending replies); memcached hangs up on an unknown command whose last
token starts with `HTTP/`.  Gradus does the same on both ports, so the body of
such a request never runs, and counts it in INFO (`cross_protocol_attacks`).

The RESP cases run against a real redis-server too (GRADUS_TARGET=redis); the
memcached cases run against Gradus' memcached port and a real memcached.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

import pytest

from resp import RawConnection, Simple
from servers import free_port

HOST = "127.0.0.1"


def exchange(port: int, data: bytes, wait: float = 3.0) -> tuple[bytes, bool]:
    """Send `data`, read until the server closes or `wait` passes: (bytes, closed)."""
    with socket.create_connection((HOST, port), timeout=wait) as s:
        s.sendall(data)
        out = b""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                return out, False
            except ConnectionResetError:
                return out, True
            if not chunk:
                return out, True
            out += chunk
        return out, False


def http_post(body: bytes, path: bytes = b"/") -> bytes:
    return (
        b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1:6379\r\n"
        b"Content-Type: text/plain\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


def test_regression_post_body_never_runs_on_the_resp_port(gradus):
    with RawConnection(gradus.host, gradus.port) as c:
        assert c.call("SET", "precious", "1") == Simple(b"OK")
    out, closed = exchange(gradus.port, http_post(b"FLUSHALL\r\nSET pwned 1\r\n"))
    assert closed and out == b"", out
    with RawConnection(gradus.host, gradus.port) as c:
        assert c.call("GET", "precious") == b"1"
        assert c.call("EXISTS", "pwned") == 0


def test_get_request_closes_at_the_host_header_with_no_reply(gradus):
    # The request line itself is an ordinary (wrong) GET; the Host: header ends the
    # connection and the reply to the line before it is dropped with it, as in Redis.
    out, closed = exchange(gradus.port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\nSET pwned 1\r\n")
    assert closed and out == b"", out
    out, closed = exchange(gradus.port, b"PING\r\nhost: x\r\nSET pwned 1\r\n")
    assert closed and out == b"", out
    with RawConnection(gradus.host, gradus.port) as c:
        assert c.call("EXISTS", "pwned") == 0


def test_multibulk_post_and_host_close_too(gradus):
    for name in (b"POST", b"post", b"HOST:", b"Host:"):
        frame = b"*1\r\n$%d\r\n%s\r\nSET pwned 1\r\n" % (len(name), name)
        out, closed = exchange(gradus.port, frame)
        assert closed and out == b"", (name, out)


def test_post_is_refused_before_authentication(gradus_factory):
    server = gradus_factory("--requirepass", "s3cret")
    out, closed = exchange(server.port, http_post(b"AUTH s3cret\r\nFLUSHALL\r\n"))
    assert closed and out == b"", out


@pytest.mark.gradus_only
def test_refusals_are_counted_in_info(gradus):
    def count() -> int:
        with RawConnection(gradus.host, gradus.port) as c:
            info = c.call("INFO", "stats").decode()
        return int(info.split("cross_protocol_attacks:")[1].split("\r\n")[0])

    before = count()
    exchange(gradus.port, http_post(b"FLUSHALL\r\n"))
    exchange(gradus.memcached_port, b"GET / HTTP/1.0\r\n\r\n")
    deadline = time.monotonic() + 2
    while count() < before + 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert count() == before + 2


# --- the memcached port ----------------------------------------------------------------------


@pytest.fixture
def memcached_ports(request):
    """Gradus' memcached port, and a real memcached's when the package is installed."""
    if os.environ.get("GRADUS_TARGET") == "redis":
        pytest.skip("memcached cases compare Gradus' memcached port with memcached itself")
    gradus = request.getfixturevalue("gradus")
    ports = [("gradus", gradus.memcached_port)]
    proc = None
    binary = shutil.which("memcached")
    if binary:
        port = free_port()
        argv = [binary, "-l", HOST, "-p", str(port), "-U", "0"]
        if os.geteuid() == 0:
            argv += ["-u", "nobody"]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                socket.create_connection((HOST, port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.02)
        ports.append(("memcached", port))
    yield ports
    if proc:
        proc.terminate()
        proc.wait(5)


def test_regression_http_request_on_the_memcached_port_hangs_up(memcached_ports):
    for who, port in memcached_ports:
        out, closed = exchange(port, b"set precious 0 0 1\r\n1\r\n")
        assert out == b"STORED\r\n", who
        attack = http_post(b"flush_all\r\nset pwned 0 0 1\r\nx\r\n")
        out, closed = exchange(port, attack)
        assert closed and out == b"", (who, out)
        out, closed = exchange(port, b"GET / HTTP/1.0\r\n\r\nflush_all\r\n")
        assert closed and out == b"", (who, out)
        # Replies before the request line are still sent; nothing after it runs.
        out, closed = exchange(port, b"get nothing\r\nDELETE /x HTTP/1.1\r\nflush_all\r\n")
        assert closed and out == b"END\r\n", (who, out)
        out, _ = exchange(port, b"get precious pwned\r\n", wait=0.5)
        assert out == b"VALUE precious 0 1\r\n1\r\nEND\r\n", (who, out)


def test_http_like_lines_that_memcached_answers(memcached_ports):
    # A known command or a one-letter one with an HTTP/ tail, and a bare header line, are
    # ordinary errors: the connection stays open.
    for who, port in memcached_ports:
        for line, reply in [
            (b"set / HTTP/1.1\r\n", b"ERROR\r\n"),
            (b"x HTTP/1.1\r\n", b"ERROR\r\n"),
            (b"Host: x\r\n", b"ERROR\r\n"),
            (b"get / HTTP/1.0\r\n", b"END\r\n"),
        ]:
            out, closed = exchange(port, line, wait=0.5)
            assert not closed and out == reply, (who, line, out)
