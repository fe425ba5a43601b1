"""Start, check and stop server processes for the integration tests.

A ServerProcess owns one child process (the gradus binary, or a real
redis-server for differential tests), its temporary directory and the files
its stdout/stderr go to.  It waits for readiness with TCP connect + PING,
stops with SIGTERM (SIGKILL after 5 s), and records every exit so the fixture
can fail a test whose server crashed, panicked or exited nonzero.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import List, Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0

_build_lock = threading.Lock()
_build_result: Optional[tuple] = None


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (bind to port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def target_dir() -> Path:
    env = os.environ.get("CARGO_TARGET_DIR")
    if env:
        path = Path(env)
        return path if path.is_absolute() else REPO_ROOT / path
    return REPO_ROOT / "target"


def gradus_binary() -> Path:
    """Path of the gradus binary: $GRADUS_BIN, else target/debug/gradus (built if missing).

    Raises RuntimeError with the build output if it cannot be had.
    """
    global _build_result
    env = os.environ.get("GRADUS_BIN")
    if env:
        path = Path(env)
        if not path.is_file():
            raise RuntimeError(f"GRADUS_BIN={env} does not exist")
        return path
    path = target_dir() / "debug" / "gradus"
    if path.is_file():
        return path
    with _build_lock:
        if _build_result is None:
            cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
            proc = subprocess.run(
                [cargo, "build", "-p", "gradus-server"],
                cwd=REPO_ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            _build_result = (proc.returncode, proc.stdout)
        code, output = _build_result
    if code != 0 or not path.is_file():
        tail = "\n".join(output.splitlines()[-40:])
        raise RuntimeError(f"`cargo build -p gradus-server` failed (exit {code}); no {path}:\n{tail}")
    return path


def redis_server_binary() -> Optional[str]:
    """The real redis-server: $REDIS_SERVER_BIN, else redis-server on PATH, else None."""
    env = os.environ.get("REDIS_SERVER_BIN")
    if env:
        return env if Path(env).is_file() else None
    return shutil.which("redis-server")


def _ping(host: str, port: int, timeout: float) -> Optional[bytes]:
    """Connect and send PING; return the first reply line, or None if not ready."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            data = b""
            while b"\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    return None
                data += chunk
            return data.split(b"\r\n", 1)[0]
    except OSError:
        return None


class ServerProcess:
    """One server child process on a fixed host/port with its own directory."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        host: str,
        port: int,
        dir: Path,
        password: Optional[str] = None,
        env: Optional[dict] = None,
    ):
        self.name = name
        self.argv = list(argv)
        self.host = host
        self.port = port
        self.dir = Path(dir)
        self.password = password
        self.env = env
        self.proc: Optional[subprocess.Popen] = None
        self.starts = 0
        self.problems: List[str] = []
        self.exit_codes: List[int] = []
        self.stderr_path = self.dir / f"{name}.stderr.log"
        self.stdout_path = self.dir / f"{name}.stdout.log"

    # -- lifecycle

    def start(self, extra_args: Sequence[str] = ()) -> "ServerProcess":
        """Start the process (again: same port, same directory); `extra_args` are added to
        the command line of this start only (e.g. `--repair`)."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.starts += 1
        argv = self.argv + [str(a) for a in extra_args]
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        if self.env:
            env.update(self.env)
        # Append, so the output of earlier runs (before a restart) is kept.
        out = open(self.stdout_path, "ab")
        err = open(self.stderr_path, "ab")
        banner = f"----- start #{self.starts}: {' '.join(argv)}\n".encode()
        err.write(banner)
        err.flush()
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
            )
        finally:
            out.close()
            err.close()
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._record_exit(self.proc.returncode, expected=False)
                raise RuntimeError(
                    f"{self.name} exited with status {self.proc.returncode} before becoming ready\n"
                    + self.stderr_tail()
                )
            line = _ping(self.host, self.port, timeout=1.0)
            if line is not None and not line.startswith(b"-LOADING"):
                return
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"{self.name} not ready on {self.host}:{self.port} after {timeout}s\n" + self.stderr_tail())

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.is_running():
            self.proc.send_signal(sig)

    def wait(self, timeout: float = STOP_TIMEOUT) -> Optional[int]:
        """Wait for the process to exit on its own; return its status or None on timeout."""
        if self.proc is None:
            return None
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return code

    def stop(self, timeout: float = STOP_TIMEOUT) -> Optional[int]:
        """SIGTERM, wait up to `timeout`, SIGKILL if still alive; return the exit status.

        An exit status other than 0, a kill, or a panic message is recorded as a
        problem, which makes the owning fixture fail the test.
        """
        if self.proc is None:
            return None
        if self.proc.returncode is not None and self._exit_recorded():
            return self.proc.returncode
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.problems.append(f"{self.name} did not exit within {timeout}s of SIGTERM; killed")
                self.proc.kill()
                self.proc.wait(10)
        self._record_exit(self.proc.returncode, expected=True)
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL without complaint (for tests that crash the server on purpose)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
            self.exit_codes.append(self.proc.returncode)
            self._recorded_pid = self.proc.pid

    def restart(self) -> "ServerProcess":
        """Stop (SIGTERM) and start again on the same port and directory."""
        self.stop()
        return self.start()

    def crash(self) -> None:
        """SIGKILL on purpose (a process crash: no shutdown code runs). If the process had
        already exited by itself, that is recorded as a problem (it is not the planned crash)."""
        if self.proc is not None and self.proc.poll() is not None and not self._exit_recorded():
            self._record_exit(self.proc.returncode, expected=False)
            self.problems.append(f"{self.name} exited by itself (status {self.proc.returncode}) before the planned SIGKILL")
        self.kill()

    def crash_restart(self) -> "ServerProcess":
        """crash(), then start again on the same port and directory."""
        self.crash()
        return self.start()

    def run_to_exit(self, extra_args: Sequence[str] = (), timeout: float = 15.0):
        """Run the server once on the same port and directory, expecting it to exit by
        itself (e.g. refusing to start); return (exit status, what it wrote to stderr).

        The status is None if it was still running after `timeout` (it is killed then).
        An expected failure is not recorded as a problem of this ServerProcess.
        """
        assert not self.is_running(), "already running"
        argv = self.argv + [str(a) for a in extra_args]
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        proc = subprocess.Popen(
            argv, cwd=self.dir, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
        )
        try:
            _, err = proc.communicate(timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate(timeout=10)
            code = None
        text = err.decode(errors="replace")
        with open(self.stderr_path, "a") as log:
            log.write(f"----- run_to_exit: {' '.join(argv)} -> {code}\n{text}")
        return code, text

    # -- bookkeeping

    def _exit_recorded(self) -> bool:
        return getattr(self, "_recorded_pid", None) == self.proc.pid

    def _record_exit(self, code: int, expected: bool) -> None:
        if self._exit_recorded():
            return
        self._recorded_pid = self.proc.pid
        self.exit_codes.append(code)
        if code != 0:
            if code < 0:
                self.problems.append(f"{self.name} was killed by signal {-code}")
            else:
                self.problems.append(f"{self.name} exited with status {code}")

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def stderr_tail(self, lines: int = 60) -> str:
        text = self.stderr_text()
        tail = "\n".join(text.splitlines()[-lines:])
        return f"--- {self.name} stderr ({self.stderr_path}), last {lines} lines ---\n{tail}\n--- end ---"

    def check_problems(self) -> List[str]:
        """Stop if needed and return everything that went wrong with this process."""
        self.stop()
        problems = list(self.problems)
        if "panicked at" in self.stderr_text():
            problems.append(f"{self.name} panicked")
        return problems

    def __repr__(self) -> str:
        return f"<{self.name} {self.host}:{self.port} dir={self.dir}>"


def redis_client(server: "ServerProcess", protocol: int = 2, **kwargs):
    """A redis-py client for `server` that never retries behind the test's back.

    (redis-py >= 6 retries failed commands with backoff by default, which would
    hide a dropped connection and slow down expected failures.)
    """
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    kwargs.setdefault("socket_timeout", 10)
    kwargs.setdefault("socket_connect_timeout", 5)
    kwargs.setdefault("decode_responses", False)
    kwargs.setdefault("retry", Retry(NoBackoff(), 0))
    return redis.Redis(host=server.host, port=server.port, protocol=protocol, **kwargs)


def rss(server) -> int:
    """Resident set size of a started server's process, in bytes (VmRSS)."""
    with open(f"/proc/{server.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")
