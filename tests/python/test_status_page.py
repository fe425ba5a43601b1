"""The status page at / on metrics-port: rendered in headless Chromium (screenshot and DOM),
and behind Basic auth with an admin user when authentication is on."""
import base64
import http.client
import shutil
import subprocess
from pathlib import Path

import pytest

from servers import free_port, redis_client

pytestmark = pytest.mark.gradus_only

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tenants.toml"
SECTIONS = [
    "Durability degrees and fsync latency",
    "Memory per tenant",
    "Lock contention",
    "Clients",
    "Last snapshot",
    "Recent slow commands",
]


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("chromium is not installed (Debian package chromium; scripts/install-deps.sh installs it)")


def run_chromium(binary, tmp_path, *args, timeout=90):
    profile = tmp_path / "chromium-profile"
    argv = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}", *args]
    return subprocess.run(argv, capture_output=True, timeout=timeout)


def get(port, path="/", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path, headers=headers or {})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, resp.headers, body


def test_status_page_in_headless_chromium(gradus_factory, tmp_path):
    binary = chromium()
    port = free_port()
    server = gradus_factory("--metrics-port", str(port), "--slowlog-log-slower-than", "0",
                            "--durability", "strict")
    r = redis_client(server)
    r.client_setname("status<script>")
    for i in range(50):
        r.set(f"page:{i}", "v" * 64)
    r.execute_command("LOCK", "session:42", "WAIT", "0")
    status, headers, body = get(port)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    html = body.decode()
    assert '<meta http-equiv="refresh"' in html
    assert "<script" not in html.lower(), "client text is escaped; the page has no scripts"
    assert "http://" not in html and "https://" not in html, "no external assets"
    url = f"http://127.0.0.1:{port}/"
    dom = run_chromium(binary, tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr.decode()[-2000:]
    text = dom.stdout.decode()
    for section in SECTIONS:
        assert section in text, f"section {section!r} missing from the rendered page"
    assert "page:" in text or "SET" in text, "recent slow commands are listed"
    assert "session:42" in text, "the held lock is listed"
    shot = tmp_path / "status.png"
    result = run_chromium(binary, tmp_path, f"--screenshot={shot}", "--window-size=1280,1600", url)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert shot.exists(), result.stderr.decode()[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000, f"screenshot only {len(data)} bytes: an empty page?"


def test_status_page_needs_an_admin_when_auth_is_on(gradus_factory):
    port = free_port()
    gradus_factory("--config", str(EXAMPLE), "--metrics-port", str(port))
    status, headers, _ = get(port)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")

    def auth(user, password):
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

    assert get(port, headers=auth("beta", "beta-pass"))[0] == 401
    status, _, body = get(port, headers=auth("admin", "admin-pass"))
    assert status == 200 and b"Memory per tenant" in body and b"beta" in body
