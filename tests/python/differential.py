"""Differential checks: the same work done on Gradus and on a real redis-server, results compared.

- `run_script(server, script, protocol=2, setup=())`: on a fresh raw connection (after HELLO 3
  when `protocol` is 3), FLUSHALL, send the `setup` commands (their replies ignored), then every
  command of `script`; returns the script's replies, parsed (resp.RawConnection).
- `assert_same_replies(gradus, redis_server, script, protocol=2, setup=(), normalise=None)`:
  `run_script` on Gradus, then on redis-server; reply i of one must equal reply i of the other,
  each first passed through `normalise(command, reply)` when given (for what legitimately
  differs between the servers). A mismatch names the command and both replies. Returns Gradus'
  replies.
- `assert_same(gradus, redis_server, scenario)`: `scenario(server)` on Gradus, then on
  redis-server; the two results must be equal. Returns Gradus' result (equal to Redis').
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

from resp import RawConnection, Simple

Command = Sequence[Any]


HELP_FOOTER_7_0 = Simple(b"    Prints this help.")
HELP_FOOTER_7_2 = Simple(b"    Print this help.")


def help_footer_7_2(reply: Any) -> Any:
    """A HELP reply as Redis 7.2 words its last line ("Print this help."; 7.0, the reference
    installed here, says "Prints"): Gradus answers as 7.2 does. Also inside an EXEC reply."""
    if isinstance(reply, list) and reply and reply[-1] == HELP_FOOTER_7_0:
        return reply[:-1] + [HELP_FOOTER_7_2]
    if isinstance(reply, list):
        # An EXEC reply holds a queued HELP's reply as one of its elements.
        return [help_footer_7_2(item) if isinstance(item, list) else item for item in reply]
    return reply


def run_script(server, script: Sequence[Command], protocol: int = 2,
               setup: Sequence[Command] = ()) -> List[Any]:
    with RawConnection(server.host, server.port, timeout=10) as conn:
        if protocol == 3:
            conn.call("HELLO", "3")
        conn.call("FLUSHALL")
        for cmd in setup:
            conn.call(*cmd)
        return [help_footer_7_2(conn.call(*cmd)) for cmd in script]


def assert_same_replies(gradus, redis_server, script: Sequence[Command], protocol: int = 2,
                        setup: Sequence[Command] = (),
                        normalise: Optional[Callable[[Command, Any], Any]] = None) -> List[Any]:
    ours = run_script(gradus, script, protocol, setup)
    theirs = run_script(redis_server, script, protocol, setup)
    for cmd, a, b in zip(script, ours, theirs):
        if normalise is not None:
            a, b = normalise(cmd, a), normalise(cmd, b)
        assert a == b, f"{cmd}: gradus {a!r}, redis {b!r}"
    return ours


def assert_same(gradus, redis_server, scenario: Callable[[Any], Any]) -> Any:
    ours, theirs = scenario(gradus), scenario(redis_server)
    assert ours == theirs, f"\ngradus: {ours!r}\nredis:  {theirs!r}"
    return ours
