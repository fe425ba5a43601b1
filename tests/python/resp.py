"""A small, strict RESP2/RESP3 client over a raw socket, for byte-level tests.

Unlike redis-py it keeps every distinction that the wire makes (simple string
vs bulk string, RESP2 null bulk vs null array vs RESP3 null, map vs array), so
tests can assert exactly what a server sent and the differential test can
compare two servers reply for reply.  Every read has a timeout: a server that
never answers makes a test fail, never hang.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

DEFAULT_TIMEOUT = 5.0


class Incomplete(Exception):
    """The buffer does not yet hold one whole reply."""


class ConnectionClosed(Exception):
    """The peer closed the connection before a whole reply arrived."""

    def __init__(self, partial: bytes = b""):
        super().__init__(f"connection closed by peer (partial data: {partial[:200]!r})")
        self.partial = partial


class ProtocolViolation(Exception):
    """The server sent bytes that are not valid RESP."""


# --- reply values -----------------------------------------------------------


@dataclass(frozen=True)
class Simple:
    """A RESP simple string (`+OK`)."""

    value: bytes

    def __repr__(self) -> str:
        return f"+{self.value.decode('latin-1')}"


@dataclass(frozen=True)
class Err:
    """A RESP error (`-ERR ...`) or RESP3 blob error (`!`)."""

    message: bytes

    @property
    def text(self) -> str:
        return self.message.decode("utf-8", "replace")

    def __repr__(self) -> str:
        return f"-{self.text}"


@dataclass(frozen=True)
class Double:
    """A RESP3 double (`,1.5`); `raw` keeps the exact text the server sent."""

    value: float
    raw: bytes

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Double):
            return NotImplemented
        if self.value != self.value and other.value != other.value:  # both NaN
            return True
        return self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f",{self.raw.decode('latin-1')}"


@dataclass(frozen=True)
class BigNumber:
    value: int


@dataclass(frozen=True)
class Verbatim:
    format: bytes
    data: bytes


@dataclass
class Map:
    """A RESP3 map, kept as an ordered list of (key, value) pairs."""

    items: List[Tuple[Any, Any]]

    def to_dict(self) -> dict:
        return dict(self.items)


@dataclass
class Set:
    """A RESP3 set, kept in wire order."""

    items: List[Any]


@dataclass
class Push:
    """A RESP3 out-of-band push message (`>`)."""

    items: List[Any]


class _Null:
    def __init__(self, name: str):
        self._name = name

    def __repr__(self) -> str:
        return self._name

    def __bool__(self) -> bool:
        return False


NULL_BULK = _Null("NULL_BULK")  # RESP2 `$-1`
NULL_ARRAY = _Null("NULL_ARRAY")  # RESP2 `*-1`
NULL = _Null("NULL")  # RESP3 `_`


def is_null(value: Any) -> bool:
    return value is NULL_BULK or value is NULL_ARRAY or value is NULL or value is None


# --- encoding ---------------------------------------------------------------


def _as_bytes(arg: Any) -> bytes:
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, str):
        return arg.encode()
    if isinstance(arg, (int, float)):
        return str(arg).encode()
    raise TypeError(f"cannot encode {arg!r}")


def encode_command(*args: Any) -> bytes:
    """Encode one command as a RESP array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = _as_bytes(arg)
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


# --- decoding ---------------------------------------------------------------


def _line(buf: bytes, pos: int) -> Tuple[bytes, int]:
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise Incomplete()
    return buf[pos:end], end + 2


def parse_reply(buf: bytes, pos: int = 0) -> Tuple[Any, int]:
    """Parse one reply from buf[pos:]; return (value, next position).

    Raises Incomplete if more bytes are needed.  Attributes (`|`) are read and
    dropped, as clients do.
    """
    if pos >= len(buf):
        raise Incomplete()
    kind = buf[pos : pos + 1]
    line, nxt = _line(buf, pos + 1)
    if kind == b"+":
        return Simple(line), nxt
    if kind == b"-":
        return Err(line), nxt
    if kind == b":":
        return int(line), nxt
    if kind in (b"$", b"!", b"="):
        length = int(line)
        if length < 0:
            if kind != b"$" or length != -1:
                raise ProtocolViolation(f"bad length {line!r} for {kind!r}")
            return NULL_BULK, nxt
        if len(buf) < nxt + length + 2:
            raise Incomplete()
        data = buf[nxt : nxt + length]
        if buf[nxt + length : nxt + length + 2] != b"\r\n":
            raise ProtocolViolation(f"bulk of length {length} not followed by CRLF")
        end = nxt + length + 2
        if kind == b"$":
            return data, end
        if kind == b"!":
            return Err(data), end
        return Verbatim(data[:3], data[4:]), end
    if kind in (b"*", b"~", b">"):
        count = int(line)
        if count < 0:
            if kind != b"*" or count != -1:
                raise ProtocolViolation(f"bad count {line!r} for {kind!r}")
            return NULL_ARRAY, nxt
        items = []
        for _ in range(count):
            item, nxt = parse_reply(buf, nxt)
            items.append(item)
        if kind == b"*":
            return items, nxt
        if kind == b"~":
            return Set(items), nxt
        return Push(items), nxt
    if kind in (b"%", b"|"):
        count = int(line)
        pairs = []
        for _ in range(count):
            key, nxt = parse_reply(buf, nxt)
            value, nxt = parse_reply(buf, nxt)
            pairs.append((key, value))
        if kind == b"|":
            # An attribute precedes the real reply; skip it.
            return parse_reply(buf, nxt)
        return Map(pairs), nxt
    if kind == b"_":
        if line != b"":
            raise ProtocolViolation(f"bad null {line!r}")
        return NULL, nxt
    if kind == b"#":
        if line not in (b"t", b"f"):
            raise ProtocolViolation(f"bad boolean {line!r}")
        return line == b"t", nxt
    if kind == b",":
        text = line.decode("ascii")
        low = text.lower()
        if low in ("inf", "+inf"):
            value = float("inf")
        elif low == "-inf":
            value = float("-inf")
        elif low == "nan":
            value = float("nan")
        else:
            value = float(text)
        return Double(value, line), nxt
    if kind == b"(":
        return BigNumber(int(line)), nxt
    raise ProtocolViolation(f"unknown reply type byte {kind!r} at offset {pos}: {buf[pos:pos+60]!r}")


# --- the connection ---------------------------------------------------------


class RawConnection:
    """One TCP connection speaking raw bytes, with a reply reader.

    send() writes bytes as they are; read_reply() returns one parsed reply;
    read_raw_reply() returns its exact bytes; call() encodes a command, sends it
    and returns the reply.  All reads time out (default 5 s).
    """

    def __init__(self, host: str, port: int, timeout: float = DEFAULT_TIMEOUT):
        self.host = host
        self.port = port
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.closed_by_peer = False

    # -- writing

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_command(self, *args: Any) -> None:
        self.send(encode_command(*args))

    def send_slowly(self, data: bytes, chunk: int = 1, pause: float = 0.001) -> None:
        """Send data in small pieces with a pause between them (partial frames)."""
        for i in range(0, len(data), chunk):
            self.sock.sendall(data[i : i + chunk])
            if pause:
                time.sleep(pause)

    # -- reading

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout(f"no complete reply within the timeout; buffered: {self.buf[:200]!r}")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(1 << 16)
        except socket.timeout:
            raise socket.timeout(f"no complete reply within the timeout; buffered: {self.buf[:200]!r}") from None
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.closed_by_peer = True
            raise ConnectionClosed(self.buf)
        self.buf += chunk

    def _read(self, timeout: Optional[float]) -> Tuple[Any, bytes]:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            try:
                value, end = parse_reply(self.buf, 0)
            except Incomplete:
                self._fill(deadline)
                continue
            raw, self.buf = self.buf[:end], self.buf[end:]
            return value, raw

    def read_reply(self, timeout: Optional[float] = None) -> Any:
        return self._read(timeout)[0]

    def read_raw_reply(self, timeout: Optional[float] = None) -> bytes:
        return self._read(timeout)[1]

    def read_replies(self, count: int, timeout: Optional[float] = None) -> List[Any]:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        return [self._read(max(0.001, deadline - time.monotonic()))[0] for _ in range(count)]

    def read_exactly(self, n: int, timeout: Optional[float] = None) -> bytes:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while len(self.buf) < n:
            self._fill(deadline)
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_available(self, wait: float = 0.2) -> bytes:
        """Return whatever arrives within `wait` seconds (possibly b'')."""
        deadline = time.monotonic() + wait
        try:
            while True:
                self._fill(deadline)
        except (socket.timeout, ConnectionClosed):
            pass
        data, self.buf = self.buf, b""
        return data

    def call(self, *args: Any, timeout: Optional[float] = None) -> Any:
        self.send_command(*args)
        return self.read_reply(timeout)

    def wait_closed(self, timeout: float = 3.0) -> bytes:
        """Wait until the peer closes; return any bytes received before EOF.

        Raises AssertionError if the connection is still open after `timeout`.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._fill(deadline)
            except ConnectionClosed:
                data, self.buf = self.buf, b""
                return data
            except socket.timeout:
                raise AssertionError(
                    f"server did not close the connection within {timeout}s; received {self.buf[:300]!r}"
                ) from None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class RawClient:
    """The `raw` fixture: a default connection plus a factory for more.

    Attribute access is forwarded to the default connection, so tests can write
    raw.send(b"PING\\r\\n"); raw.read_raw_reply().
    """

    def __init__(self, host: str, port: int):
        self.host = host
        self.port = port
        self._conns: List[RawConnection] = []
        self.conn = self.connect()

    def connect(self, timeout: float = DEFAULT_TIMEOUT) -> RawConnection:
        conn = RawConnection(self.host, self.port, timeout)
        self._conns.append(conn)
        return conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    def close_all(self) -> None:
        for conn in self._conns:
            conn.close()
