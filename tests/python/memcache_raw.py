"""A raw-socket memcached text-protocol client for byte-level tests.

It sends exactly the bytes a test gives it and reads replies by line or by byte
count, so tests can assert exactly what a server sent.  Every read has a
timeout: a server that never answers fails the test instead of hanging it.
"""

from __future__ import annotations

import socket
import time
from typing import List, Optional

DEFAULT_TIMEOUT = 5.0


class Closed(Exception):
    """The server closed the connection."""


class McConn:
    def __init__(self, host: str, port: int, timeout: float = DEFAULT_TIMEOUT):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = b""

    def send(self, data: bytes) -> "McConn":
        self.sock.sendall(data)
        return self

    def _fill(self) -> None:
        self.sock.settimeout(self.timeout)
        chunk = self.sock.recv(65536)
        if not chunk:
            raise Closed(f"closed by peer (buffered: {self.buf[:200]!r})")
        self.buf += chunk

    def line(self) -> bytes:
        """One reply line, without its CRLF."""
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def data_block(self, n: int) -> bytes:
        block = self.exact(n + 2)
        assert block.endswith(b"\r\n"), block
        return block[:-2]

    def cmd(self, data: bytes) -> bytes:
        """Send and return the first reply line."""
        return self.send(data).line()

    def lines_until(self, last: bytes) -> List[bytes]:
        out = []
        while True:
            line = self.line()
            out.append(line)
            if line == last:
                return out

    def get(self, command: bytes) -> List[tuple]:
        """Run a get/gets/gat/gats; return [(key, flags, data, cas-or-None)]."""
        self.send(command)
        items = []
        while True:
            line = self.line()
            if line == b"END":
                return items
            parts = line.split(b" ")
            assert parts[0] == b"VALUE", line
            data = self.data_block(int(parts[3]))
            cas = int(parts[4]) if len(parts) > 4 else None
            items.append((parts[1], int(parts[2]), data, cas))

    def meta(self, command: bytes) -> tuple:
        """Run one meta command; return (status line, value or None)."""
        line = self.cmd(command)
        if line.startswith(b"VA "):
            return line, self.data_block(int(line.split(b" ")[1]))
        return line, None

    def nothing_pending(self, wait: float = 0.2) -> bool:
        """True when nothing more arrives within `wait` seconds (for noreply/quiet checks)."""
        if self.buf:
            return False
        self.sock.settimeout(wait)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            return True
        if chunk:
            self.buf += chunk
            return False
        raise Closed("closed by peer")

    def is_closed(self, wait: float = 2.0) -> bool:
        """True once the server has closed the connection (data before the close is kept)."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return False
            except ConnectionResetError:
                return True
            if not chunk:
                return True
            self.buf += chunk
        return False

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class McRaw:
    """A default connection (its methods are forwarded) plus `new()` for more."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.conns: List[McConn] = []
        self.default = self.new()

    def new(self, timeout: float = DEFAULT_TIMEOUT) -> McConn:
        conn = McConn(self.host, self.port, timeout)
        self.conns.append(conn)
        return conn

    def __getattr__(self, name):
        return getattr(self.default, name)

    def close_all(self) -> None:
        for c in self.conns:
            c.close()
