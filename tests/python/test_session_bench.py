"""The session benchmark (crates/server/examples/session_bench.rs) runs end to end.

A small run against a Gradus and a redis-server started here: every store row is printed with
a page rate, the ratio line is there, and the contended part saw every hand-over. The figures
themselves are not judged (docs/benchmarks/sessions.md holds measured ones); this only keeps
the tool that produces them working.
"""
import re
import subprocess

import pytest

from servers import redis_client, target_dir


@pytest.mark.gradus_only
def test_session_bench_runs_every_store_and_slice(gradus, redis_server):
    binary = target_dir() / "debug" / "examples" / "session_bench"
    if not binary.is_file():
        pytest.skip("session_bench is built by `cargo test --workspace` (scripts/test.sh)")
    out = subprocess.run(
        [str(binary), "--gradus", f"127.0.0.1:{gradus.port}", "--redis", f"127.0.0.1:{redis_server.port}",
         "--users", "3", "--pages", "12", "--slices", "3", "--size", "512"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    rates = {}
    for label in ("Gradus SESSION.OPEN", "redis-server, phpredis", "Gradus, the same phpredis"):
        row = next(line for line in out.splitlines() if line.startswith(f"| {label}"))
        rates[label] = float(row.split("|")[2])
    assert all(rate > 0 for rate in rates.values()), out
    assert "The pages run in 3 slices" in out
    assert re.search(r"^Page P90 ratio Gradus / Redis: \d+\.\d\d$", out, re.M), out
    # 8 contenders x 40 rounds on one session: 319 hand-overs per store.
    handovers = re.findall(r"^\| (?:Gradus \(server-side|redis-server \(SET NX)[^|]*\| (\d+) \|", out, re.M)
    assert handovers == ["319", "319"], out
    assert re.search(r"^Ramp pages left out: Gradus \d+ %, redis-server \d+ %\.$", out, re.M), out
    # The sessions were written: one per user, of the size asked for.
    r = redis_client(gradus)
    assert [len(r.get(f"sess:{u}") or b"") for u in range(3)] == [512] * 3
