"""A real PHP web server for the integration tests: `php -S` with several workers
(PHP_CLI_SERVER_WORKERS), serving tests/python/php_pages, and a small HTTP client that keeps
one browser session (a PHPSESSID cookie)."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from servers import free_port

PAGES = Path(__file__).resolve().parent / "php_pages"


def php_with_redis() -> bool:
    if shutil.which("php") is None:
        return False
    out = subprocess.run(["php", "-m"], capture_output=True, text=True).stdout.lower()
    return "redis" in out.split()


class PhpServer:
    """`php -S 127.0.0.1:port -t docroot` (default php_pages) with `workers` workers; the pages
    reach the store named by `settings` (a JSON file named by GRADUS_TEST_SETTINGS)."""

    def __init__(self, tmp_path: Path, settings: dict, workers: int = 8, docroot: Path = PAGES,
                 cookie: str = "PHPSESSID"):
        self.settings_path = tmp_path / "php-settings.json"
        self.settings_path.write_text(json.dumps(settings))
        self.port = free_port()
        self.cookie = cookie
        self.log_path = tmp_path / "php-server.log"
        env = dict(os.environ)
        env["PHP_CLI_SERVER_WORKERS"] = str(workers)
        env["GRADUS_TEST_SETTINGS"] = str(self.settings_path)
        self.env = env
        self.proc = subprocess.Popen(
            ["php", "-d", "display_errors=stderr", "-S", f"127.0.0.1:{self.port}", "-t", str(docroot)],
            stdin=subprocess.DEVNULL, stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("php -S did not start:\n" + self.log())

    def get(self, page: str, sid: str, timeout: float = 60) -> tuple[int, str, float]:
        """GET /page with the session cookie; (status, body, seconds)."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/{page}",
                                     headers={"Cookie": f"{self.cookie}={sid}"})
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read().decode(), time.monotonic() - t0
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(), time.monotonic() - t0

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            # The server and its workers share a process group of their own.
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(5)
