"""The write path: what a write does to memory, to the log and to the reply, through the real binary.

Regression tests for defects of the write path, each named after the defect it guards:

- a SESSION.CLOSE queued in MULTI must be logged in the transaction's queue order (and EXEC must
  answer one reply per queued command), so a `kill -9` and a restart bring back what memory held;
- a LOCK or SESSION.OPEN with WAIT queued in MULTI on a held lock must not replace EXEC's reply
  with its own (redis-py: "Wrong number of response items from pipeline execution") nor leave a
  waiter behind in the lock's queue;
- the memcached port must obey the mapped keyspace's memory limit: an `lru` keyspace evicts, a
  `none` keyspace refuses with memcached's own `SERVER_ERROR out of memory storing object`;
- at `strict`, concurrent RESP writes, transactions, scripts, session closes and memcached writes
  must all come back after a `kill -9` exactly as they were acknowledged.

Every server runs on loopback in its own directory (fixtures in conftest.py); every test is bounded
in time and in the number of operations.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Dict, List, Optional, Tuple

import pytest
import redis

from memcache_raw import Closed, McConn
from resp import RawConnection, Simple
from servers import redis_client
from test_durability import CONNECTION_ERRORS, client, dump, write_config
from test_tenants import connect, passwd

pytestmark = pytest.mark.gradus_only

JOIN_TIMEOUT = 20.0


# --- 1: SESSION.CLOSE inside MULTI/EXEC -----------------------------------------------------


def _raw_reply_list(reply) -> list:
    assert isinstance(reply, list), f"EXEC did not answer an array: {reply!r}"
    return reply


def test_multi_session_close_survives_kill_9_in_queue_order(gradus_factory):
    """SESSION.CLOSE queued in a transaction runs in queue order in memory; the log must replay
    it in the same order (the transaction is one record), so a restart after `kill -9` brings back
    the value memory held, not the one a command queued before the close wrote. EXEC answers one
    reply per queued command, through redis-py's transaction pipeline and on a raw connection."""
    server = gradus_factory("--durability", "strict")
    r = client(server)

    # a) redis-py: MULTI; SET s x; SESSION.CLOSE s <token> DATA y; EXEC.
    token, data = r.execute_command("SESSION.OPEN", "s:pipe")
    assert data is None
    pipe = r.pipeline(transaction=True)
    pipe.set("s:pipe", "x")
    pipe.execute_command("SESSION.CLOSE", "s:pipe", token, "DATA", "y")
    replies = pipe.execute()
    assert replies == [True, b"OK"], replies
    assert r.get("s:pipe") == b"y"

    # b) The same on a raw connection: every reply as sent.
    raw = RawConnection(server.host, server.port, timeout=10)
    token, data = raw.call("SESSION.OPEN", "s:raw")
    assert data is None or not data, data
    raw.send_command("MULTI")
    raw.send_command("SET", "s:raw", "x")
    raw.send_command("SESSION.CLOSE", "s:raw", token, "DATA", "y")
    raw.send_command("EXEC")
    multi, q1, q2, exec_reply = raw.read_replies(4)
    assert (multi, q1, q2) == (Simple(b"OK"), Simple(b"QUEUED"), Simple(b"QUEUED"))
    assert _raw_reply_list(exec_reply) == [Simple(b"OK"), Simple(b"OK")], exec_reply
    assert raw.call("GET", "s:raw") == b"y"

    # c) Several keys and a script (whose SETs write the session key too) around the close.
    script = "for i, k in ipairs(KEYS) do redis.call('SET', k, ARGV[i]) end return #KEYS"
    token, _ = r.execute_command("SESSION.OPEN", "s:many")
    pipe = r.pipeline(transaction=True)
    pipe.set("a:1", "1")
    pipe.set("s:many", "x")
    pipe.eval(script, 2, "s:many", "b:1", "from-script", "2")
    pipe.execute_command("SESSION.CLOSE", "s:many", token, "DATA", "y", "TTL", 1000)
    pipe.set("a:2", "3")
    pipe.eval(script, 1, "b:2", "4")
    replies = pipe.execute()
    assert replies == [True, True, 2, b"OK", True, 1], replies
    assert r.mget("a:1", "a:2", "b:1", "b:2", "s:many") == [b"1", b"3", b"2", b"4", b"y"]

    # d) A write queued after the close wins over the close's data (queue order the other way).
    token, _ = r.execute_command("SESSION.OPEN", "s:after")
    pipe = r.pipeline(transaction=True)
    pipe.execute_command("SESSION.CLOSE", "s:after", token, "DATA", "y")
    pipe.set("s:after", "z")
    assert pipe.execute() == [b"OK", True]
    assert r.get("s:after") == b"z"

    # e) The raw case with a script inside the transaction too.
    token, _ = raw.call("SESSION.OPEN", "s:rawscript")
    for args in (("MULTI",), ("SET", "s:rawscript", "x"), ("SET", "c:1", "1"),
                 ("EVAL", script, 2, "s:rawscript", "c:2", "from-script", "2"),
                 ("SESSION.CLOSE", "s:rawscript", token, "DATA", "y"), ("EXEC",)):
        raw.send_command(*args)
    replies = raw.read_replies(6)
    assert replies[:5] == [Simple(b"OK")] + [Simple(b"QUEUED")] * 4, replies
    assert _raw_reply_list(replies[5]) == [Simple(b"OK"), Simple(b"OK"), 2, Simple(b"OK")], replies[5]
    raw.close()

    before = dump(server)
    assert before[(0, b"s:pipe")][1] == b"y"
    assert before[(0, b"s:raw")][1] == b"y"
    assert before[(0, b"s:many")] == ("string", b"y", True)
    assert before[(0, b"s:after")][1] == b"z"
    assert before[(0, b"s:rawscript")][1] == b"y"
    r.close()

    server.crash_restart()
    after = dump(server)
    differ = {k[1]: {"before kill": before.get(k), "after restart": after.get(k)}
              for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert not differ, f"kill -9 and restart changed what memory held: {differ}"


def test_exec_answers_one_reply_per_queued_command_when_a_queued_lock_would_wait(gradus_factory):
    """A SESSION.OPEN ... WAIT (or LOCK ... WAIT) queued in MULTI on a lock held elsewhere must not
    turn EXEC's reply into the lock's own reply: EXEC answers an array with one element per
    queued command, whatever the lock does (as a blocking command queued in a Redis MULTI answers
    at once), and the connection stays in step with its requests."""
    server = gradus_factory("--durability", "strict")
    holder = client(server)
    token, _ = holder.execute_command("SESSION.OPEN", "held")

    def release_soon():
        time.sleep(0.3)
        holder.execute_command("SESSION.CLOSE", "held", token, "DATA", "from-holder")

    releaser = threading.Thread(target=release_soon, daemon=True)
    releaser.start()
    r = redis_client(server, 2)
    pipe = r.pipeline(transaction=True)
    pipe.set("before-open", "1")
    pipe.execute_command("SESSION.OPEN", "held", "WAIT", 2000)
    pipe.set("after-open", "2")
    try:
        replies = pipe.execute()
    except redis.ResponseError as exc:
        pytest.fail(f"EXEC with a waiting SESSION.OPEN queued: {exc}")
    finally:
        releaser.join(10)
    assert len(replies) == 3, replies
    assert replies[0] is True and replies[2] is True, replies
    assert replies[1] is None or (isinstance(replies[1], list) and len(replies[1]) == 2), replies
    r.close()

    # On a raw connection, with the lock held for longer than the WAIT: EXEC's reply is still one
    # element per queued command, and the next request gets its own reply.
    other = client(server)
    lock_token = other.execute_command("LOCK", "held-long")
    assert isinstance(lock_token, int) and lock_token > 0
    raw = RawConnection(server.host, server.port, timeout=10)
    for args in (("MULTI",), ("SET", "k1", "1"), ("LOCK", "held-long", "WAIT", 200),
                 ("SESSION.OPEN", "held-long", "WAIT", 200), ("SET", "k2", "2"), ("EXEC",)):
        raw.send_command(*args)
    replies = raw.read_replies(6)
    assert replies[:5] == [Simple(b"OK")] + [Simple(b"QUEUED")] * 4, replies
    exec_reply = _raw_reply_list(replies[5])
    assert len(exec_reply) == 4, exec_reply
    assert exec_reply[0] == Simple(b"OK") and exec_reply[3] == Simple(b"OK"), exec_reply
    assert raw.call("PING") == Simple(b"PONG")
    # Nothing of the transaction is left waiting in the lock's queue, to be granted later to a
    # connection that no longer waits for it.
    info = other.execute_command("LOCKS.INFO", "held-long")
    if isinstance(info, list):  # RESP2: the map comes as a flat list of pairs
        info = dict(zip(info[::2], info[1::2]))
    assert info[b"waiters"] == 0, info
    assert other.execute_command("UNLOCK", "held-long", lock_token) == b"OK"
    assert other.execute_command("LOCKS.INFO", "held-long") is None
    raw.close()
    other.close()
    holder.close()


# --- 2, 3: the memcached port and keyspace memory limits ---------------------------------------

PASSWORD = "site-pass"
LIMIT = 4 << 20
VALUE_SIZE = 1024
SETS = 20_000
OUT_OF_MEMORY = b"SERVER_ERROR out of memory storing object"


def _limited_config(tmp_path, eviction: str, durability: str) -> str:
    """One tenant, `site`; its keyspace `mc` (SELECT 1) has a 4 MiB limit and is the memcached
    port's keyspace. The admin user (same password) may read INFO stats."""
    hashed = passwd(PASSWORD)
    body = f"""memcached-tenant = "site"
memcached-db = 1

[[tenants]]
name = "site"

  [[tenants.users]]
  name = "site"
  password = "{hashed}"
  permissions = ["read", "write", "flush"]

  [[tenants.keyspaces]]
  name = "other"
  select = 0
  durability = "none"
  eviction = "none"

  [[tenants.keyspaces]]
  name = "mc"
  select = 1
  durability = "{durability}"
  eviction = "{eviction}"
  memory-limit = "4mb"

[[users]]
name = "admin"
password = "{hashed}"
permissions = ["admin"]
tenant = "site"
"""
    return write_config(tmp_path, body, name="limited.toml")


def _mc_login(server) -> McConn:
    conn = McConn(server.host, server.memcached_port, timeout=15)
    login = f"site {PASSWORD}".encode()
    assert conn.cmd(b"set auth 0 0 %d\r\n%s\r\n" % (len(login), login)) == b"STORED"
    return conn


def _value(i: int) -> bytes:
    return (b"%06d:" % i).ljust(VALUE_SIZE, b"v")


def _mc_fill(conn: McConn, count: int, batch: int = 250) -> List[bytes]:
    """`set mc:<i>` of 1 KiB for i in range(count), pipelined in batches; the reply to each."""
    replies: List[bytes] = []
    for start in range(0, count, batch):
        end = min(count, start + batch)
        conn.send(b"".join(b"set mc:%d 0 0 %d\r\n%s\r\n" % (i, VALUE_SIZE, _value(i)) for i in range(start, end)))
        replies += [conn.line() for _ in range(start, end)]
    return replies


def _mc_stats(conn: McConn) -> Dict[str, str]:
    lines = conn.send(b"stats\r\n").lines_until(b"END")
    out = {}
    for line in lines[:-1]:
        _, name, value = line.decode().split(" ", 2)
        out[name] = value
    return out


def test_memcached_port_evicts_under_an_lru_keyspace_limit(gradus_factory, tmp_path):
    """20 000 memcached `set`s of 1 KiB (~20 MiB) into an `lru` keyspace limited to 4 MiB: every
    set is STORED (a cache makes room), the keyspace stays near its limit by evicting the least
    recently used keys, and the evictions are counted (INFO and memcached `stats`)."""
    server = gradus_factory("--config", _limited_config(tmp_path, "lru", "none"))
    conn = _mc_login(server)
    replies = _mc_fill(conn, SETS)
    assert set(replies) == {b"STORED"}, {r: replies.count(r) for r in set(replies)}

    site = connect(server, "site", PASSWORD, db=1)
    keys = site.dbsize()
    info = site.info("tenants")["keyspace_mc"]
    print(f"kept {keys} of {SETS} keys; keyspace: {info}")
    # 4 MiB of 1 KiB values is at most ~4096 keys; allow for accounting slack, never 20 000.
    assert keys <= (6 << 20) // VALUE_SIZE, f"{keys} keys kept: the 4 MiB limit was not enforced"
    assert keys >= 1000, f"only {keys} keys kept: far more was evicted than the limit needs"
    assert info["used_memory"] <= LIMIT + (64 << 10), info
    assert info["evicted_keys"] >= SETS - keys - 16, info
    # The most recent writes are the ones kept.
    assert conn.get(b"get mc:%d\r\n" % (SETS - 1)) == [(b"mc:%d" % (SETS - 1), 0, _value(SETS - 1), None)]
    assert site.get(f"mc:{SETS - 1}") == _value(SETS - 1)

    admin = connect(server, "admin", PASSWORD)
    assert admin.info("stats")["evicted_keys"] > 0
    stats = _mc_stats(conn)
    assert int(stats["evictions"]) > 0, {k: v for k, v in stats.items() if "evict" in k or "items" in k}
    assert int(stats["curr_items"]) == keys, stats
    conn.close()
    site.close()
    admin.close()


def test_memcached_port_refuses_over_a_none_keyspace_limit(gradus_factory, tmp_path):
    """20 000 memcached `set`s of 1 KiB into a `none` keyspace (sessions: never evicted) limited to
    4 MiB: once over the limit a set is refused with memcached's own reply (`memcached -M`), and
    every set that was answered STORED is still there, byte for byte. A delete makes room again."""
    server = gradus_factory("--config", _limited_config(tmp_path, "none", "background"))
    conn = _mc_login(server)
    replies = _mc_fill(conn, SETS)
    counts = {r: replies.count(r) for r in set(replies)}
    print(f"replies: {counts}")
    assert set(replies) <= {b"STORED", OUT_OF_MEMORY}, counts
    stored = [i for i, r in enumerate(replies) if r == b"STORED"]
    assert counts.get(OUT_OF_MEMORY, 0) > 0, f"all {SETS} sets were STORED past a 4 MiB limit"
    assert len(stored) <= (6 << 20) // VALUE_SIZE, counts
    # Once refused, nothing is freed by itself: every later set is refused too.
    first_refusal = replies.index(OUT_OF_MEMORY)
    assert stored == list(range(first_refusal)), "a set was STORED after the keyspace was full"

    # Nothing that was STORED was dropped: over memcached and over RESP.
    for start in range(0, len(stored), 100):
        chunk = stored[start:start + 100]
        got = conn.get(b"get " + b" ".join(b"mc:%d" % i for i in chunk) + b"\r\n")
        assert [(k, d) for k, _, d, _ in got] == [(b"mc:%d" % i, _value(i)) for i in chunk]
    site = connect(server, "site", PASSWORD, db=1)
    assert site.dbsize() == len(stored)
    info = site.info("tenants")["keyspace_mc"]
    assert info["evicted_keys"] == 0, info
    stats = _mc_stats(conn)
    assert int(stats["evictions"]) == 0 and int(stats["curr_items"]) == len(stored), stats

    # Deleting makes room; the set after it is stored.
    conn.send(b"".join(b"delete mc:%d\r\n" % i for i in stored[:200]))
    assert [conn.line() for _ in range(200)] == [b"DELETED"] * 200
    assert conn.cmd(b"set again 0 0 %d\r\n%s\r\n" % (VALUE_SIZE, _value(0))) == b"STORED"
    assert site.get("again") == _value(0)
    conn.close()
    site.close()


# --- 4: random interleavings at strict, kill -9, restart ---------------------------------------

SEEDS = list(range(1, 9))
THREADS = 4
MAX_OPS = 5000
STRING_KEYS, COUNTERS, HASHES, SESSIONS = 6, 3, 3, 2
SCRIPT_SET = "for i, k in ipairs(KEYS) do redis.call('SET', k, ARGV[i]) end return #KEYS"
SCRIPT_SET_EXPIRE = (
    "for i, k in ipairs(KEYS) do redis.call('SET', k, ARGV[i]) end "
    "redis.call('EXPIRE', KEYS[1], 1000) return #KEYS"
)

State = Optional[Tuple[str, object, bool]]  # (type, value, has_ttl); None = absent


class Interleaver(threading.Thread):
    """One client thread owning the keys `w<seed>:<tid>:*`, driving random writes over RESP and
    the memcached port. It keeps an exact model of its keys (no other thread touches them), checks
    every reply against it, and remembers the one write in flight when the connection broke."""

    def __init__(self, server, seed: int, tid: int, stop: threading.Event):
        super().__init__(name=f"interleaver-{seed}-{tid}", daemon=True)
        self.server = server
        self.rng = random.Random(seed * 1000 + tid)
        self.stop_event = stop
        p = f"w{seed}:{tid}:"
        self.strings = [f"{p}k{j}" for j in range(STRING_KEYS)]
        self.counters = [f"{p}c{j}" for j in range(COUNTERS)]
        self.hashes = [f"{p}h{j}" for j in range(HASHES)]
        self.sessions = [f"{p}s{j}" for j in range(SESSIONS)]
        self.universe = self.strings + self.counters + self.hashes + self.sessions
        self.model: Dict[str, State] = {}
        self.pending: Optional[Dict[str, State]] = None  # effects of the write in flight
        self.pending_what = ""
        self.ops = 0
        self.seq = 0
        self.error: Optional[BaseException] = None
        self.error_time: Optional[float] = None
        self.r: Optional[redis.Redis] = None
        self.mc: Optional[McConn] = None

    # -- model helpers

    def value(self) -> bytes:
        self.seq += 1
        return f"{self.name}:{self.seq}:".encode() + b"p" * self.rng.choice([1, 16, 200])

    @staticmethod
    def ttl_of(state: State) -> bool:
        return state is not None and state[2]

    def apply(self, view: Dict[str, State], op: tuple):
        """Apply one plain write to `view`; return the reply redis-py gives for it."""
        kind, key = op[0], op[1]
        old = view.get(key)
        if kind == "set":
            view[key] = ("string", op[2], False)
            return True
        if kind == "del":
            view[key] = None
            return int(old is not None)
        if kind == "incr":
            n = int(old[1]) + 1 if old is not None else 1
            view[key] = ("string", str(n).encode(), self.ttl_of(old))
            return n
        if kind == "hset":
            fields = dict(old[1]) if old is not None else {}
            new_field = op[2] not in fields
            fields[op[2]] = op[3]
            view[key] = ("hash", tuple(sorted(fields.items())), self.ttl_of(old))
            return int(new_field)
        if kind == "expire":
            if old is None:
                return False
            view[key] = (old[0], old[1], True)
            return True
        raise AssertionError(kind)

    def plain_op(self) -> tuple:
        choice = self.rng.random()
        if choice < 0.35:
            return ("set", self.rng.choice(self.strings), self.value())
        if choice < 0.55:
            return ("incr", self.rng.choice(self.counters))
        if choice < 0.75:
            return ("hset", self.rng.choice(self.hashes), f"f{self.rng.randrange(4)}".encode(), self.value())
        if choice < 0.88:
            return ("del", self.rng.choice(self.strings + self.counters + self.hashes))
        return ("expire", self.rng.choice(self.universe))

    def send_plain(self, target, op: tuple):
        kind, key = op[0], op[1]
        if kind == "set":
            return target.set(key, op[2])
        if kind == "del":
            return target.delete(key)
        if kind == "incr":
            return target.incr(key)
        if kind == "hset":
            return target.hset(key, op[2], op[3])
        if kind == "expire":
            return target.expire(key, 1000)
        raise AssertionError(kind)

    # -- one random step

    def step(self) -> None:
        view = dict(self.model)
        choice = self.rng.random()
        if choice < 0.30:
            op = self.plain_op()
            expected = self.apply(view, op)
            self.begin(view, op[0])
            reply = self.send_plain(self.r, op)
            self.check(reply, expected, op)
        elif choice < 0.45:
            ops = [self.plain_op() for _ in range(self.rng.randint(2, 4))]
            expected = [self.apply(view, op) for op in ops]
            self.begin(view, "multi")
            pipe = self.r.pipeline(transaction=True)
            for op in ops:
                self.send_plain(pipe, op)
            self.check(pipe.execute(), expected, ops)
        elif choice < 0.58:
            keys = self.rng.sample(self.strings, self.rng.randint(1, 3))
            values = [self.value() for _ in keys]
            script = self.rng.choice([SCRIPT_SET, SCRIPT_SET_EXPIRE])
            for k, v in zip(keys, values):
                view[k] = ("string", v, False)
            if script is SCRIPT_SET_EXPIRE:
                view[keys[0]] = ("string", values[0], True)
            self.begin(view, "eval")
            self.check(self.r.eval(script, len(keys), *keys, *values), len(keys), ("eval", keys))
        elif choice < 0.72:
            sid = self.rng.choice(self.sessions)
            old = self.model.get(sid)
            token, data = self.r.execute_command("SESSION.OPEN", sid)
            self.check(data, old[1] if old is not None else None, ("session.open", sid))
            value = self.value()
            args = ["SESSION.CLOSE", sid, token, "DATA", value]
            with_ttl = self.rng.random() < 0.3
            if with_ttl:
                args += ["TTL", 1000]
            if self.rng.random() < 0.5:
                # The close inside a transaction, after a plain write of the same key and before
                # another write: its effect joins the transaction's record in queue order.
                op = self.plain_op()
                view[sid] = ("string", value, with_ttl)
                expected = [True, b"OK", self.apply(view, op)]
                self.begin(view, "multi session.close")
                pipe = self.r.pipeline(transaction=True)
                pipe.set(sid, b"before-close")
                pipe.execute_command(*args)
                self.send_plain(pipe, op)
                self.check(pipe.execute(), expected, ("multi session.close", sid, op))
            else:
                view[sid] = ("string", value, with_ttl or self.ttl_of(old))
                self.begin(view, "session.close")
                self.check(self.r.execute_command(*args), b"OK", ("session.close", sid))
        elif choice < 0.90:
            key = self.rng.choice(self.strings)
            value = self.value()
            view[key] = ("string", value, False)
            self.begin(view, "mc set")
            reply = self.mc.cmd(b"set %s 0 0 %d\r\n%s\r\n" % (key.encode(), len(value), value))
            self.check(reply, b"STORED", ("mc set", key))
        else:
            key = self.rng.choice(self.strings)
            expected = b"DELETED" if self.model.get(key) is not None else b"NOT_FOUND"
            view[key] = None
            self.begin(view, "mc delete")
            self.check(self.mc.cmd(b"delete %s\r\n" % key.encode()), expected, ("mc delete", key))
        # Acknowledged: the model moves on.
        self.model.update(self.pending or {})
        self.pending = None
        self.ops += 1

    def begin(self, view: Dict[str, State], what: str) -> None:
        self.pending = {k: v for k, v in view.items() if self.model.get(k) != v}
        self.pending_what = what

    def check(self, got, expected, what) -> None:
        assert got == expected, f"{self.name}: reply to {what!r} was {got!r}, expected {expected!r}"

    def run(self):
        try:
            self.r = redis_client(self.server, 2, socket_timeout=15)
            self.mc = McConn(self.server.host, self.server.memcached_port, timeout=15)
            while not self.stop_event.is_set() and self.ops < MAX_OPS:
                self.step()
        except BaseException as exc:  # noqa: BLE001 - judged by the test
            self.error = exc
            self.error_time = time.monotonic()
        finally:
            for c in (self.r, self.mc):
                try:
                    if c is not None:
                        c.close()
                except Exception:
                    pass


def _normalize(entry) -> State:
    kind, value, has_ttl = entry
    if kind == "hash":
        value = tuple(sorted(value))
    return (kind, value, has_ttl)


def _judge(found: Dict[str, State], workers: List[Interleaver]) -> List[str]:
    problems = []
    owned = set()
    for w in workers:
        owned.update(w.universe)
        pending = w.pending or {}
        for key in w.universe:
            if key not in pending and found.get(key) != w.model.get(key):
                problems.append(f"{key}: found {found.get(key)!r}, acknowledged {w.model.get(key)!r}")
        if pending:
            old = all(found.get(k) == w.model.get(k) for k in pending)
            new = all(found.get(k) == v for k, v in pending.items())
            if not (old or new):
                problems.append(
                    f"{w.name}: the {w.pending_what} in flight at the kill is neither absent nor whole: "
                    f"found { {k: found.get(k) for k in pending} }, before { {k: w.model.get(k) for k in pending} }, "
                    f"after {pending}"
                )
    for key in sorted(set(found) - owned):
        problems.append(f"{key}: present after the restart but never written")
    return problems


@pytest.mark.parametrize("seed", SEEDS)
def test_random_interleavings_recover_acknowledged_state_at_strict(gradus_factory, seed):
    """Several threads mix RESP writes (SET/DEL/INCR/HSET/EXPIRE), MULTI/EXEC transactions, EVAL
    scripts, SESSION.OPEN/SESSION.CLOSE DATA pairs and memcached `set`/`delete` (the memcached port
    serves db 0 too) at `strict`; `kill -9` at a random moment; after the restart every key holds
    exactly what its last acknowledged write left (type, value, whether it has a TTL). The one
    write per thread in flight at the kill is either not there at all or there whole."""
    server = gradus_factory("--durability", "strict")
    rng = random.Random(seed)
    delay = rng.uniform(0.3, 1.8)
    stop = threading.Event()
    workers = [Interleaver(server, seed, tid, stop) for tid in range(THREADS)]
    for w in workers:
        w.start()
    time.sleep(delay)
    t_kill = time.monotonic()
    server.crash()
    stop.set()
    for w in workers:
        w.join(JOIN_TIMEOUT)
        assert not w.is_alive(), f"{w.name} still running {JOIN_TIMEOUT}s after the kill"
    for w in workers:
        # The only acceptable way for a worker to stop is losing its connection at the kill.
        if w.error is not None:
            assert isinstance(w.error, CONNECTION_ERRORS + (Closed,)) and w.error_time >= t_kill, (
                f"{w.name} failed {w.error_time - t_kill:+.3f}s from the kill: {w.error!r}"
            )
    acknowledged = sum(w.ops for w in workers)
    print(f"seed {seed}: kill after {delay:.2f}s, {acknowledged} writes acknowledged")
    assert acknowledged >= THREADS, "too few writes acknowledged before the kill"

    server.start()
    found = {key.decode(): _normalize(entry) for (db, key), entry in dump(server).items()}
    problems = _judge(found, workers)
    assert not problems, f"seed {seed}: {len(problems)} problems\n" + "\n".join(problems[:30])
