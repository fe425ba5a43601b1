"""Fixtures for the Gradus integration tests.

- `gradus`: a started gradus server (.host, .port, .dir, .stderr_path, .stop(), .restart());
  a fresh process per test, on a free port, in its own temporary directory.
- `gradus_factory(*args)`: start another gradus with extra command-line arguments.
- `r2` / `r3`: redis-py clients to `gradus` speaking RESP2 / RESP3 (decode_responses=False).
- `r`: a redis-py client speaking the test module's PROTOCOL (2 or 3); `protocol` is that number.
- `raw`: raw-socket RESP client to `gradus` (see resp.RawClient).
- `redis_server`: a real redis-server (no persistence) for differential tests; differential.py
  runs the same commands or scenario on `gradus` and on it and compares the results.
- `mc`: raw-socket memcached client to `gradus`'s memcached port (see memcache_raw.McRaw);
  every gradus started here listens for memcached on its own free port (`.memcached_port`).

Environment:
- GRADUS_BIN: the gradus binary (default <repo>/target/debug/gradus, built if missing).
- GRADUS_TARGET=redis: run every `gradus` test against redis-server instead, to check
  that the tests themselves describe real Redis behaviour (tests that need a
  Gradus-only feature skip themselves in that mode).
- GRADUS_TARGET_REDIS_BIN: the redis-server that stands in for gradus with GRADUS_TARGET=redis
  (default: REDIS_SERVER_BIN), e.g. a Redis 7.2 build while the reference is another version.
- REDIS_SERVER_BIN / REDIS_CLI_BIN: the real redis-server / redis-cli (default: on PATH).
- GRADUS_TEST_TIMEOUT: seconds before one test is failed as hung (default 90).

A test fails if its server exited nonzero, was killed, or printed a Rust panic.
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path
from typing import Callable, List, Optional

import pytest

# Plain asserts in these shared helper modules get pytest's detailed messages.
pytest.register_assert_rewrite("differential", "redispy_cases", "resp")

import redis  # noqa: E402

from resp import RawClient
from servers import ServerProcess, free_port, gradus_binary, redis_client, redis_server_binary

HOST = "127.0.0.1"
TARGET = os.environ.get("GRADUS_TARGET", "gradus").lower()
TEST_TIMEOUT = float(os.environ.get("GRADUS_TEST_TIMEOUT", "90"))


def target_is_redis() -> bool:
    return TARGET == "redis"


# --- per-test timeout: a hung server must fail a test, not stall CI ---------


class HungTestError(Exception):
    pass


@pytest.fixture(autouse=True)
def _per_test_timeout():
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def on_alarm(signum, frame):
        raise HungTestError(f"test took longer than {TEST_TIMEOUT}s (GRADUS_TEST_TIMEOUT)")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, TEST_TIMEOUT)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- servers ----------------------------------------------------------------


def _gradus_argv(binary: str, port: int, dir: Path, extra: List[str], memcached_port: int) -> List[str]:
    # Every gradus gets its own free memcached port too (the default, 11211, would collide).
    return [binary, "--bind", HOST, "--port", str(port), "--dir", str(dir),
            "--memcached-port", str(memcached_port)] + extra


def _redis_emulation_argv(binary: str, port: int, dir: Path, extra: List[str]) -> List[str]:
    """The redis-server command line equivalent to a gradus one (GRADUS_TARGET=redis)."""
    argv = [
        binary, "--bind", HOST, "--port", str(port), "--dir", str(dir),
        "--save", "", "--appendonly", "no",
    ]
    i = 0
    while i < len(extra):
        flag = extra[i]
        if flag in ("--requirepass", "--maxclients"):
            argv += [flag, extra[i + 1]]
            i += 2
        elif flag == "--threads":
            # Gradus' worker threads: redis-server serves from one thread whatever the number
            # (and answers BUSY while a script runs past busy-reply-threshold, as Gradus does
            # with two or more).
            i += 2
        else:
            pytest.skip(f"GRADUS_TARGET=redis: no redis-server equivalent for {flag}")
    return argv


def _password_of(extra: List[str]) -> Optional[str]:
    if "--requirepass" in extra:
        return extra[extra.index("--requirepass") + 1]
    return None


class _Servers:
    """Every server a test started, checked and stopped at teardown."""

    def __init__(self, tmp_root: Path):
        self.tmp_root = tmp_root
        self.started: List[ServerProcess] = []

    def new_dir(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.tmp_root))

    def start_gradus(self, *extra_args: str, name: str = "gradus") -> ServerProcess:
        return self._start_on_free_ports(lambda: self._gradus(extra_args, name))

    def start_redis(self, *extra_args: str, name: str = "redis") -> ServerProcess:
        binary = redis_server_binary()
        if binary is None:
            pytest.skip("redis-server is not installed (run scripts/install-deps.sh); differential test skipped")
        return self._start_on_free_ports(lambda: self._redis(binary, extra_args, name))

    def _start_on_free_ports(self, make) -> ServerProcess:
        """Start the server `make()` builds; if a port free a moment ago was taken before the
        server could bind it (another process, or a client's ephemeral port), try new ports."""
        for attempt in range(5):
            server = make()
            self.started.append(server)
            try:
                server.start()
                return server
            except RuntimeError as exc:
                if "Address already in use" in str(exc) and attempt < 4:
                    self.started.remove(server)
                    continue
                pytest.fail(str(exc), pytrace=False)
        raise AssertionError("unreachable")

    def _gradus(self, extra_args, name: str) -> ServerProcess:
        extra = [str(a) for a in extra_args]
        port = free_port(HOST)
        if "--memcached-port" in extra:
            memcached_port = int(extra[extra.index("--memcached-port") + 1])
            extra = [a for i, a in enumerate(extra)
                     if a != "--memcached-port" and (i == 0 or extra[i - 1] != "--memcached-port")]
        else:
            memcached_port = free_port(HOST)
        dir = self.new_dir(name)
        if target_is_redis():
            binary = os.environ.get("GRADUS_TARGET_REDIS_BIN") or redis_server_binary()
            if binary is None:
                pytest.skip("GRADUS_TARGET=redis but redis-server is not installed")
            argv = _redis_emulation_argv(binary, port, dir, extra)
        else:
            try:
                binary = str(gradus_binary())
            except RuntimeError as exc:
                pytest.fail(str(exc), pytrace=False)
            argv = _gradus_argv(binary, port, dir, extra, memcached_port)
        server = ServerProcess(name, argv, HOST, port, dir, password=_password_of(extra))
        server.memcached_port = memcached_port
        return server

    def _redis(self, binary: str, extra_args, name: str) -> ServerProcess:
        port = free_port(HOST)
        dir = self.new_dir(name)
        argv = [binary, "--bind", HOST, "--port", str(port), "--dir", str(dir),
                "--save", "", "--appendonly", "no"] + [str(a) for a in extra_args]
        return ServerProcess(name, argv, HOST, port, dir)

    def finish(self) -> None:
        failures = []
        for server in self.started:
            problems = server.check_problems()
            if problems:
                failures.append("; ".join(problems) + "\n" + server.stderr_tail())
        if failures:
            pytest.fail("server process problems:\n" + "\n".join(failures), pytrace=False)


@pytest.fixture
def _servers(tmp_path_factory) -> _Servers:
    servers = _Servers(tmp_path_factory.mktemp("servers"))
    yield servers
    servers.finish()


@pytest.fixture
def gradus_factory(_servers) -> Callable[..., ServerProcess]:
    """Start a gradus server with extra arguments: gradus_factory("--requirepass", "pw")."""
    return _servers.start_gradus


@pytest.fixture
def gradus(_servers) -> ServerProcess:
    return _servers.start_gradus()


@pytest.fixture
def redis_server(_servers) -> ServerProcess:
    return _servers.start_redis()


# --- clients ----------------------------------------------------------------


@pytest.fixture
def r2(gradus) -> redis.Redis:
    client = redis_client(gradus, 2)
    yield client
    client.close()


@pytest.fixture
def r3(gradus) -> redis.Redis:
    client = redis_client(gradus, 3)
    yield client
    client.close()


@pytest.fixture
def protocol(request) -> int:
    """The test module's PROTOCOL (2 unless the module sets it)."""
    return getattr(request.module, "PROTOCOL", 2)


@pytest.fixture
def r(gradus, protocol) -> redis.Redis:
    """A redis-py client to `gradus` speaking the module's PROTOCOL."""
    client = redis_client(gradus, protocol)
    yield client
    client.close()


@pytest.fixture
def raw(gradus) -> RawClient:
    client = RawClient(gradus.host, gradus.port)
    yield client
    client.close_all()


@pytest.fixture
def mc(gradus):
    from memcache_raw import McRaw

    client = McRaw(gradus.host, gradus.memcached_port)
    yield client
    client.close_all()


def pytest_runtest_setup(item):
    if target_is_redis() and item.get_closest_marker("gradus_only"):
        pytest.skip("Gradus-only behaviour (GRADUS_TARGET=redis)")
