"""Differential test of MONITOR: the lines Gradus and a real redis-server show for the same
commands (timestamps and client ports aside): credentials `(redacted)` in AUTH and HELLO,
admin commands (CONFIG …) never shown, a transaction's commands shown as EXEC runs them, a
script's commands as `[0 lua]`.
"""

from __future__ import annotations

import re
import time

from differential import assert_same
from resp import RawConnection, Simple

END = "monitor-diff-end"


def monitor_lines(server, commands):
    mon = RawConnection(server.host, server.port)
    assert mon.call("MONITOR") == Simple(b"OK")
    c = RawConnection(server.host, server.port)
    for command in commands:
        c.call(*command)  # errors are part of the script
    c.call("ECHO", END)
    lines = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        line = mon.read_reply().value.decode()
        if END in line:
            break
        # Timestamps and client ports differ between runs: keep the db and lua.
        lines.append(re.sub(r"^\d+\.\d{6} \[(\d+) (lua|[0-9.]+:\d+)\]",
                            lambda m: f"[{m.group(1)} {'lua' if m.group(2) == 'lua' else 'client'}]",
                            line))
    return lines


COMMANDS = [
    ("SET", "k", "v"),
    ("AUTH", "not-the-password"),
    ("AUTH", "someone", "secret"),
    ("HELLO", "2", "AUTH", "default", "whatever"),
    ("HELLO", "2"),
    ("CONFIG", "SET", "notify-keyspace-events", ""),
    ("CONFIG", "GET", "maxmemory"),
    ("GET", "k"),
    ("EVAL", "redis.call('set', KEYS[1], 'x'); return redis.call('get', KEYS[1])", "1", "sk"),
    ("PING",),
]


def test_monitor_lines_match_redis(gradus, redis_server):
    assert_same(gradus, redis_server, lambda server: monitor_lines(server, COMMANDS))


def test_monitor_shows_a_transactions_commands_as_exec_runs_them(gradus, redis_server):
    def scenario(server):
        mon = RawConnection(server.host, server.port)
        assert mon.call("MONITOR") == Simple(b"OK")
        c = RawConnection(server.host, server.port)
        for command in [("MULTI",), ("SET", "a", "1"), ("INCR", "a"), ("EXEC",), ("ECHO", END)]:
            c.call(*command)
        lines = []
        while True:
            line = mon.read_reply().value.decode()
            if END in line:
                return lines
            lines.append(line.split("] ", 1)[1])

    assert_same(gradus, redis_server, scenario)
