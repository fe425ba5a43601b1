"""One primary, two replicas and three real Redis Sentinels on loopback, for the failover tests.

The data nodes are the server under test: Gradus, or a real redis-server when
GRADUS_TARGET=redis (the same convention as conftest.py). The sentinels are always real
Redis Sentinels: `redis-sentinel` if it is on PATH (the Debian package), else `redis-server
FILE --sentinel` (the same program), or $REDIS_SENTINEL_BIN.

Every node is started from a config file written to the cluster's temporary directory (Sentinel
sends CONFIG REWRITE during a failover, which needs one), on free loopback ports, and every
process is stopped by `SentinelCluster.stop()` (SIGTERM, SIGKILL after a few seconds), which the
`sentinel_cluster` fixture always calls.

Sentinel timing: `down-after-milliseconds` 1000, `failover-timeout` 5000, `parallel-syncs` 2,
and SENTINEL DEBUG shortens the INFO, hello (publish) and ask periods to 250 ms, which makes
discovery and the reconfiguration of a restarted old primary quick (Sentinel waits four publish
periods before it turns a node that came back as a primary into a replica). Failover itself is
bounded by Sentinel's fixed parts: one INFO per second to the promoted replica and a random
start delay of up to a second.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from servers import ServerProcess, free_port, gradus_binary, redis_server_binary

HOST = "127.0.0.1"
MASTER_NAME = "mymaster"
QUORUM = 2
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000
# SENTINEL DEBUG parameters (milliseconds).
SENTINEL_DEBUG = {"info-period": 250, "publish-period": 250, "ask-period": 250}

Addr = Tuple[str, int]


def target_is_redis() -> bool:
    return os.environ.get("GRADUS_TARGET", "gradus").lower() == "redis"


def sentinel_argv(conf: Path) -> Optional[List[str]]:
    """The command line of a Sentinel reading `conf`, or None if none is installed."""
    env = os.environ.get("REDIS_SENTINEL_BIN")
    if env:
        return [env, str(conf)]
    found = shutil.which("redis-sentinel")
    if found:
        return [found, str(conf)]
    server = redis_server_binary()
    if server:
        return [server, str(conf), "--sentinel"]
    return None


def wait_for(what: str, check: Callable[[], object], timeout: float, interval: float = 0.05):
    """Call `check` until it returns something truthy (returned) or `timeout` passes
    (AssertionError naming `what` and the last exception, if any)."""
    deadline = time.monotonic() + timeout
    last_error: Optional[BaseException] = None
    while True:
        try:
            value = check()
            if value:
                return value
        except (redis.RedisError, OSError) as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                                 + (f" (last error: {last_error!r})" if last_error else ""))
        time.sleep(interval)


def client(addr: Addr, **kwargs) -> redis.Redis:
    """A redis-py client that fails fast and never retries behind the caller's back."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    kwargs.setdefault("socket_timeout", 2)
    kwargs.setdefault("socket_connect_timeout", 1)
    kwargs.setdefault("decode_responses", True)
    return redis.Redis(host=addr[0], port=addr[1], retry=Retry(NoBackoff(), 0), **kwargs)


class DataNode:
    """One primary or replica: a ServerProcess started from a config file of the target's kind."""

    def __init__(self, name: str, dir: Path, port: int, replica_of: Optional[int],
                 durability: Optional[str] = None, password: Optional[str] = None):
        self.name = name
        self.password = password
        self.dir = dir
        self.port = port
        self.replica_of = replica_of
        if target_is_redis():
            binary = os.environ.get("GRADUS_TARGET_REDIS_BIN") or redis_server_binary()
            if binary is None:
                raise RuntimeError("GRADUS_TARGET=redis but redis-server is not installed")
            self.config_path = dir / "redis.conf"
            lines = [f"bind {HOST}", f"port {port}", f"dir {dir}", 'save ""', "appendonly no",
                     "repl-diskless-sync yes", "repl-diskless-sync-delay 0"]
            if replica_of is not None:
                lines.append(f"replicaof {HOST} {replica_of}")
            if password is not None:
                lines += [f"requirepass {password}", f"masterauth {password}"]
            argv = [binary, str(self.config_path)]
        else:
            binary = str(gradus_binary())
            self.config_path = dir / "gradus.toml"
            lines = [f'bind = ["{HOST}"]', f"port = {port}", f'dir = "{dir}"', "memcached-port = 0"]
            if replica_of is not None:
                # The `replicaof` setting as redis.conf spells it: "host port".
                lines.append(f'replicaof = "{HOST} {replica_of}"')
            if password is not None:
                lines += [f'requirepass = "{password}"', f'masterauth = "{password}"']
            if durability is not None:
                lines += ["[durability]", f'default = "{durability}"']
            argv = [binary, "--config", str(self.config_path)]
        self.config_path.write_text("\n".join(lines) + "\n")
        self.process = ServerProcess(name, argv, HOST, port, dir, password=password)

    @property
    def addr(self) -> Addr:
        return (HOST, self.port)

    def client(self, **kwargs) -> redis.Redis:
        kwargs.setdefault("password", self.password)
        return client(self.addr, **kwargs)

    def replication(self) -> Dict[str, object]:
        c = self.client()
        try:
            return c.info("replication")
        finally:
            c.close()


class SentinelCluster:
    """A primary, `replicas` replicas of it and `sentinels` Sentinels monitoring it as
    MASTER_NAME with quorum QUORUM. `start()` returns once every Sentinel knows every replica
    and the other Sentinels; `stop()` stops everything."""

    def __init__(self, root: Path, replicas: int = 2, sentinels: int = 3,
                 durability: Optional[str] = None, password: Optional[str] = None):
        """`durability`: the Gradus nodes' default degree (None: Gradus' default; redis-server
        nodes always run without persistence). `password`: every node's `requirepass` and
        `masterauth`, and the Sentinels' `auth-pass` (None: no authentication)."""
        self.password = password
        self.root = Path(tempfile.mkdtemp(prefix="sentinel-cluster-", dir=root))
        self.replica_count = replicas
        self.sentinel_count = sentinels
        self.durability = durability
        self.nodes: List[DataNode] = []
        self.sentinels: List[ServerProcess] = []

    # -- lifecycle

    def start(self, discover_timeout: float = 20.0) -> "SentinelCluster":
        try:
            primary = self._start_node("primary", None)
            for i in range(self.replica_count):
                self._start_node(f"replica{i + 1}", primary.port)
            for node in self.nodes[1:]:
                wait_for(f"{node.name} in sync with the primary",
                         lambda node=node: node.replication().get("master_link_status") == "up", 15)
            for i in range(self.sentinel_count):
                self._start_sentinel(f"sentinel{i + 1}", primary.port)
            self.wait_discovered(discover_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, name: str, replica_of: Optional[int]) -> DataNode:
        for attempt in range(5):
            dir = self.root / f"{name}-{attempt}"
            dir.mkdir()
            node = DataNode(name, dir, free_port(HOST), replica_of, self.durability, self.password)
            try:
                node.process.start()
            except RuntimeError as exc:
                node.process.kill()
                if "in use" in str(exc) and attempt < 4:
                    continue
                raise
            self.nodes.append(node)
            return node
        raise AssertionError("unreachable")

    def _start_sentinel(self, name: str, primary_port: int) -> ServerProcess:
        for attempt in range(5):
            dir = self.root / f"{name}-{attempt}"
            dir.mkdir()
            port = free_port(HOST)
            conf = dir / "sentinel.conf"
            conf.write_text("\n".join([
                f"bind {HOST}",
                f"port {port}",
                f"dir {dir}",
                "sentinel resolve-hostnames no",
                f"sentinel announce-ip {HOST}",
                f"sentinel announce-port {port}",
                f"sentinel monitor {MASTER_NAME} {HOST} {primary_port} {QUORUM}",
                f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}",
                f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}",
                f"sentinel parallel-syncs {MASTER_NAME} 2",
            ] + ([f"sentinel auth-pass {MASTER_NAME} {self.password}"] if self.password else [])) + "\n")
            argv = sentinel_argv(conf)
            if argv is None:
                raise RuntimeError("neither redis-sentinel nor redis-server is installed")
            process = ServerProcess(name, argv, HOST, port, dir)
            try:
                process.start()
            except RuntimeError as exc:
                process.kill()
                if "in use" in str(exc) and attempt < 4:
                    continue
                raise
            self.sentinels.append(process)
            c = client((HOST, port))
            try:
                args: List[object] = []
                for key, value in SENTINEL_DEBUG.items():
                    args += [key, value]
                c.execute_command("SENTINEL", "DEBUG", *args)
            finally:
                c.close()
            return process
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Stop every process (bounded: SIGTERM, SIGKILL after 5 s each); never raises."""
        for process in self.sentinels + [n.process for n in self.nodes]:
            try:
                process.stop(timeout=5)
            except Exception:  # noqa: BLE001 - keep stopping the others
                process.kill()

    def problems(self) -> List[str]:
        """What went wrong with any process (exits nonzero other than planned kills, panics)."""
        out: List[str] = []
        for process in [n.process for n in self.nodes] + self.sentinels:
            for problem in process.check_problems():
                out.append(problem + "\n" + process.stderr_tail(30))
        return out

    # -- Sentinel's view

    def sentinel_addrs(self) -> List[Addr]:
        return [(HOST, s.port) for s in self.sentinels if s.is_running()]

    def sentinel_client(self, index: int = 0) -> redis.Redis:
        return client((HOST, self.sentinels[index].port))

    def ask_all(self, *command) -> List[object]:
        """The reply of every running Sentinel to `command`."""
        out = []
        for addr in self.sentinel_addrs():
            c = client(addr)
            try:
                out.append(c.execute_command(*command))
            finally:
                c.close()
        return out

    def master_addr(self) -> List[Optional[Addr]]:
        """Each Sentinel's idea of the primary's address."""
        out: List[Optional[Addr]] = []
        for reply in self.ask_all("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME):
            out.append((reply[0], int(reply[1])) if reply else None)
        return out

    def wait_discovered(self, timeout: float) -> None:
        """Every Sentinel lists every replica (up, link ok) and the other Sentinels."""
        def ready() -> bool:
            for addr in self.sentinel_addrs():
                c = client(addr)
                try:
                    replicas = c.sentinel_slaves(MASTER_NAME)
                    others = c.sentinel_sentinels(MASTER_NAME)
                finally:
                    c.close()
                up = [r for r in replicas if r["flags"] == "slave" and r.get("master-link-status") == "ok"]
                if len(up) != self.replica_count or len(others) != self.sentinel_count - 1:
                    return False
            return True
        wait_for("the Sentinels to discover the replicas and each other", ready, timeout)

    def node_at(self, addr: Addr) -> DataNode:
        for node in self.nodes:
            if node.addr == (addr[0], int(addr[1])):
                return node
        raise KeyError(addr)

    def wait_new_primary(self, old: Addr, timeout: float = 30.0) -> DataNode:
        """Wait until every running Sentinel names one primary other than `old`, and that node
        says it is a primary; return it."""
        def promoted():
            addrs = set(self.master_addr())
            if len(addrs) != 1:
                return None
            (addr,) = addrs
            if addr is None or addr == old:
                return None
            node = self.node_at(addr)
            return node if node.replication().get("role") == "master" else None
        return wait_for(f"a primary other than {old[0]}:{old[1]}", promoted, timeout)

    def wait_replica_of(self, node: DataNode, primary: DataNode, timeout: float = 30.0) -> None:
        """`node` reports itself a replica of `primary` with its link up."""
        def following() -> bool:
            info = node.replication()
            return (info.get("role") == "slave" and int(info.get("master_port", 0)) == primary.port
                    and info.get("master_link_status") == "up")
        wait_for(f"{node.name} to follow {primary.name}", following, timeout)


class Writer(threading.Thread):
    """Writes `w:<n>` = n through a Sentinel-managed redis-py client until stopped; records
    each acknowledged write's time and each error."""

    def __init__(self, cluster: SentinelCluster):
        super().__init__(daemon=True)
        self.sentinel = Sentinel(cluster.sentinel_addrs(), socket_timeout=0.5,
                                 sentinel_kwargs={"socket_timeout": 0.5})
        self.master = self.sentinel.master_for(MASTER_NAME, socket_timeout=0.5,
                                               socket_connect_timeout=0.5, password=cluster.password,
                                               retry=Retry(NoBackoff(), 0), decode_responses=True)
        self.acked: list[tuple[float, int]] = []
        self.errors: list[tuple[float, str]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.halt.is_set():
            n += 1
            try:
                self.master.set(f"w:{n}", n)
                self.acked.append((time.monotonic(), n))
                time.sleep(0.002)
            except (redis.RedisError, OSError) as exc:
                self.errors.append((time.monotonic(), type(exc).__name__))
                time.sleep(0.02)

    def first_ack_after(self, t: float):
        return next(((at, n) for at, n in self.acked if at > t), None)

    def stop(self) -> None:
        self.halt.set()
        self.join(10)
        self.master.close()


def measure_failover(cluster: SentinelCluster, settle_writes: int = 50) -> Tuple[float, int, DataNode, "Writer"]:
    """Under a Writer's load, `kill -9` the primary and time it to the first write accepted
    afterwards (which only a promoted replica can accept: the old primary is gone and replicas
    refuse writes). Returns (seconds, failed attempts in between, the new primary, the stopped
    writer). The clock starts once the killed process is reaped."""
    writer = Writer(cluster)
    writer.start()
    try:
        wait_for("writes on the first primary", lambda: len(writer.acked) >= settle_writes, 10)
        old = cluster.nodes[0]
        assert set(cluster.master_addr()) == {old.addr}
        old.process.crash()
        killed_at = time.monotonic()
        first = wait_for("a write accepted after the kill", lambda: writer.first_ack_after(killed_at), 30)
        new = cluster.wait_new_primary(old.addr)
        wait_for("more writes after the failover",
                 lambda: sum(at > first[0] for at, _ in writer.acked) >= settle_writes, 10)
    finally:
        writer.stop()
    failed = sum(killed_at < at < first[0] for at, _ in writer.errors)
    writer.first_after_kill = first
    return first[0] - killed_at, failed, new, writer
