"""CLIENT LIST / CLIENT INFO fields next to a real redis-server's: the field order, and the
memory fields where both servers can agree (the running command's `qbuf` and `argv-mem`, a
MULTI's `multi-mem`, empty output buffers), the tracking flags (`t`, `B`) and `redir`.
Buffer capacities (`qbuf-free`, `rbs`, `tot-mem`) differ by design and are only checked to be
real (non-zero where Redis' are).
"""

from __future__ import annotations

from resp import RawConnection

# Gradus' own field (`durability`); the reference may be 7.0, without lib-name/lib-ver.
EXTRA = {"durability", "lib-name", "lib-ver"}


def text(reply):
    """A bulk (RESP2) or verbatim string reply's bytes."""
    return getattr(reply, "value", reply)


def fields(line):
    return dict(f.split("=", 1) for f in line.decode().strip().split(" "))


def snapshot(server):
    tracker = RawConnection(server.host, server.port)
    tracker.call("HELLO", "3")
    sub = RawConnection(server.host, server.port)
    target = sub.call("CLIENT", "ID")
    assert tracker.call("CLIENT", "TRACKING", "on", "REDIRECT", str(target)).value == b"OK"
    bcast = RawConnection(server.host, server.port)
    bcast.call("HELLO", "3")
    bcast.call("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "p:")
    multi = RawConnection(server.host, server.port)
    multi.call("MULTI")
    multi.call("SET", "a", "hello")
    me = RawConnection(server.host, server.port)
    info = fields(text(me.call("CLIENT", "INFO")))
    listing = {int(f["id"]): f for f in map(fields, text(me.call("CLIENT", "LIST")).splitlines())}
    ids = {name: int(c.call("CLIENT", "ID")) for name, c in
           [("tracker", tracker), ("bcast", bcast), ("sub", sub)]}
    ids["multi"] = max(i for i in listing if i not in ids.values() and i != int(info["id"]))
    return info, {name: listing[i] for name, i in ids.items()}, target


def test_client_info_has_redis_7_2s_fields_not_7_4s_watch(gradus):
    """Regression: CLIENT LIST/INFO showed `watch=` (a Redis 7.4 field) after `multi=`."""
    line = text(RawConnection(gradus.host, gradus.port).call("CLIENT", "INFO")).decode()
    assert " watch=" not in line and " multi=-1 qbuf=" in line


def test_client_info_fields_and_memory_like_redis(gradus, redis_server):
    ours, ours_clients, ours_target = snapshot(gradus)
    theirs, theirs_clients, theirs_target = snapshot(redis_server)
    assert [k for k in ours if k not in EXTRA] == [k for k in theirs if k not in EXTRA]
    # The running command's query buffer and arguments, empty output buffers.
    for field in ("qbuf", "argv-mem", "multi-mem", "obl", "oll", "omem", "flags", "cmd"):
        assert ours[field] == theirs[field], field
    for field in ("qbuf-free", "rbs", "rbp", "tot-mem"):
        assert int(ours[field]) > 0 and int(theirs[field]) > 0, field
    # The socket's descriptor (regression: Gradus showed -1, Redis' value for fake clients).
    assert int(ours["fd"]) > 2 and int(theirs["fd"]) > 2, (ours["fd"], theirs["fd"])
    # A MULTI with one queued command: Redis' `argv_len_sums`.
    assert ours_clients["multi"]["multi-mem"] == theirs_clients["multi"]["multi-mem"] == "33"
    assert ours_clients["multi"]["flags"] == theirs_clients["multi"]["flags"] == "x"
    assert ours_clients["multi"]["cmd"] == theirs_clients["multi"]["cmd"] == "set"
    # Tracking: `t` (and `B`), `redir` the target or 0.
    assert ours_clients["tracker"]["flags"] == theirs_clients["tracker"]["flags"] == "t"
    assert ours_clients["tracker"]["redir"] == str(ours_target)
    assert theirs_clients["tracker"]["redir"] == str(theirs_target)
    assert ours_clients["bcast"]["flags"] == theirs_clients["bcast"]["flags"] == "tB"
    assert ours_clients["bcast"]["redir"] == theirs_clients["bcast"]["redir"] == "0"
    assert ours_clients["sub"]["redir"] == theirs_clients["sub"]["redir"] == "-1"


def test_read_buffer_room_is_added_only_when_little_is_left(gradus):
    """Regression: a connection whose reads fill its buffer gets more room for the next read,
    but the room was topped up before *every* read; a command that kept part of the buffer (a
    queued MULTI command, a tracked key) then made each request take a fresh 16 KiB buffer.
    200 commands queued one round trip at a time pinned ~3.2 MB; they take a few KiB."""
    conn = RawConnection(gradus.host, gradus.port)
    admin = RawConnection(gradus.host, gradus.port)

    def used():
        info = text(admin.call("INFO", "memory")).decode()
        return int(info.split("used_memory:")[1].split("\r\n")[0])

    assert conn.call("MULTI").value == b"OK"
    before = used()
    for i in range(200):
        assert conn.call("SET", f"k{i}", "v").value == b"QUEUED"
    grown = used() - before
    assert len(conn.call("EXEC")) == 200
    assert grown < 1_000_000, f"200 queued commands took {grown} bytes"
