"""Replication over TLS (`tls-replication`, see README, Replication and TLS): a replica's link to
its primary's tls-port is a TLS client connection, the primary's certificate verified against
tls-ca-cert-file (its chain, not its host name, as Redis), the replica presenting
tls-client-cert-file (else tls-cert-file) to a primary that requires client certificates.

Each primary here has `tls-auth-clients yes`; its plain port serves the test's own clients only
(the harness needs one to see it is up), never the replica. The certificates are test_tls.py's,
plus a "node" certificate for both server and client authentication whose only name is
node.example (so a replica reaching it at 127.0.0.1 shows the host name is not checked).
FAILOVER and a real Redis Sentinel (`tls-replication yes` on the Sentinel: it reaches the nodes over
TLS) switch roles between nodes that replicate over TLS only."""
import shutil
import time
from pathlib import Path

import pytest
import redis

from servers import free_port, redis_client
from test_tls import Pki, tls_args

pytestmark = [
    pytest.mark.gradus_only,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed"),
]

HOST = "127.0.0.1"
LINK_TIMEOUT = 20.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    pki = Pki(tmp_path_factory.mktemp("pki"))
    (pki.root / "node.ext").write_text(
        "subjectAltName=DNS:node.example\nextendedKeyUsage=serverAuth,clientAuth\n")
    pki.signed("node", "ca", "node.ext", "node.example")
    return pki


def primary_server(gradus_factory, pki, cert="server"):
    """A primary whose replicas must come in over TLS with a certificate of `ca`."""
    tls_port = free_port()
    server = gradus_factory(*tls_args(pki, tls_port, cert=cert, auth="yes"), name="primary")
    server.tls_port = tls_port
    return server


def replica_config(tmp_path: Path, pki, primary=None, name="replica.toml", tls=True,
                   ca="ca", client_cert="client", cert=None, tls_port=None) -> str:
    """A replica's TOML file: TLS settings, and `replicaof` the primary's TLS port when given."""
    lines = [f"tls-replication = {'true' if tls else 'false'}",
             f'tls-ca-cert-file = "{pki[ca + ".crt"]}"']
    if client_cert:
        lines += [f'tls-client-cert-file = "{pki[client_cert + ".crt"]}"',
                  f'tls-client-key-file = "{pki[client_cert + ".key"]}"']
    if cert:
        lines += [f'tls-cert-file = "{pki[cert + ".crt"]}"',
                  f'tls-key-file = "{pki[cert + ".key"]}"']
    if tls_port:
        lines += [f"tls-port = {tls_port}", 'tls-auth-clients = "no"']
    if primary is not None:
        lines.append(f'replicaof = "{HOST} {primary.tls_port}"')
    lines += ["[durability]", 'default = "background"']
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def info(server, section="replication"):
    c = redis_client(server)
    c.set_response_callback("INFO", lambda r, **kw: r)
    text = c.execute_command("INFO", section)
    c.close()
    text = text.decode() if isinstance(text, bytes) else text
    return dict(l.split(":", 1) for l in text.splitlines() if ":" in l and not l.startswith("#"))


def wait_until(predicate, timeout=LINK_TIMEOUT, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except redis.ConnectionError:
            # Sentinel's reconfiguration ends with CLIENT KILL TYPE normal on the node it
            # points at a new primary: a probe connected at that moment is closed. Try again.
            value = None
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def wait_link_up(replica):
    wait_until(lambda: info(replica).get("master_link_status") == "up", what="the replication link")


def link_error(replica):
    """The replica's last link error, once its link failed at least once (stays down)."""
    return wait_until(lambda: info(replica).get("master_sync_last_error"), what="a link error")


def assert_never_links(replica, seconds=3.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert info(replica)["master_link_status"] == "down"
        time.sleep(0.2)


def linked_tls_nodes(gradus_factory, pki, tmp_path):
    """Two nodes that replicate over TLS only (each with `tls-replication yes` and a certificate
    good for both ends), `b` a replica of `a` at `a`'s TLS port, its link up."""
    nodes = []
    for name in ("a", "b"):
        tls_port = free_port()
        path = tmp_path / f"{name}.toml"
        path.write_text(
            f'tls-replication = true\ntls-port = {tls_port}\ntls-auth-clients = "yes"\n'
            f'tls-ca-cert-file = "{pki["ca.crt"]}"\n'
            f'tls-cert-file = "{pki["node.crt"]}"\ntls-key-file = "{pki["node.key"]}"\n')
        node = gradus_factory("--config", str(path), name=name)
        node.tls_port = tls_port
        nodes.append(node)
    a, b = nodes
    assert redis_client(b).execute_command("REPLICAOF", HOST, a.tls_port) == b"OK"
    wait_link_up(b)
    return a, b


def test_writes_replicate_over_tls_and_a_restarted_replica_resyncs(gradus_factory, pki, tmp_path):
    primary = primary_server(gradus_factory, pki)
    replica = gradus_factory("--config", replica_config(tmp_path, pki, primary), name="replica")
    wait_link_up(replica)
    p = redis_client(primary)
    p.set("greeting", "over tls")
    p.hset("session:1", mapping={"user": "ada", "course": "42"})
    p.rpush("queue", *[f"job{i}" for i in range(100)])
    assert p.execute_command("WAIT", 1, 5000) == 1
    r = redis_client(replica)
    assert r.get("greeting") == b"over tls"
    assert r.hgetall("session:1") == {b"user": b"ada", b"course": b"42"}
    assert r.llen("queue") == 100
    # The primary lists it as a connected replica, at its (plain) listening port.
    slave0 = info(primary)["slave0"]
    assert f"port={replica.port}," in slave0 and "state=online" in slave0, slave0
    assert info(primary, "stats")["sync_full"] == "1"

    # A restarted replica comes back through a new TLS handshake and a full resync, and gets
    # what was written meanwhile; a value larger than a TLS record crosses intact.
    replica.stop()
    big = "x" * 200_000
    p.set("while-down", big)
    p.set("greeting", "again")
    replica.start()
    wait_link_up(replica)
    assert p.execute_command("WAIT", 1, 5000) == 1
    r = redis_client(replica)
    assert r.get("while-down") == big.encode()
    assert r.get("greeting") == b"again"
    assert info(primary, "stats")["sync_full"] == "2"
    # Streaming after the resync goes over the same link.
    p.incrby("counter", 7)
    assert p.execute_command("WAIT", 1, 5000) == 1
    assert r.get("counter") == b"7"


def test_the_replica_presents_tls_cert_file_and_announces_its_tls_port(gradus_factory, pki, tmp_path):
    # The primary's certificate names node.example only: reached at 127.0.0.1 it is still
    # accepted (Redis verifies the chain, not the host name).
    primary = primary_server(gradus_factory, pki, cert="node")
    replica_tls_port = free_port()
    replica = gradus_factory(
        "--config",
        replica_config(tmp_path, pki, primary, client_cert=None, cert="node", tls_port=replica_tls_port),
        name="replica")
    wait_link_up(replica)
    p = redis_client(primary)
    p.set("k", "v")
    assert p.execute_command("WAIT", 1, 5000) == 1
    assert redis_client(replica).get("k") == b"v"
    # As Redis: over a TLS link the replica announces its tls-port.
    assert f"port={replica_tls_port}," in info(primary)["slave0"]


def test_failover_between_tls_nodes_links_the_old_primary_over_tls(gradus_factory, pki, tmp_path):
    # Both nodes replicate over TLS only: each announces its tls-port, so FAILOVER's old primary
    # follows the promoted replica at its TLS port.
    a, b = linked_tls_nodes(gradus_factory, pki, tmp_path)
    assert f"port={b.tls_port}," in info(a)["slave0"]
    pa = redis_client(a)
    pa.set("before", "1")
    assert pa.execute_command("WAIT", 1, 5000) == 1
    assert pa.execute_command("FAILOVER") == b"OK"
    wait_until(lambda: info(b).get("role") == "master", what="the replica promoted")
    wait_until(lambda: info(a).get("master_port") == str(b.tls_port)
               and info(a).get("master_link_status") == "up", what="the old primary's TLS link")
    pb = redis_client(b)
    pb.set("after", "2")
    assert pb.execute_command("WAIT", 1, 5000) == 1
    assert redis_client(a).get("after") == b"2"
    assert redis_client(a).get("before") == b"1"


def test_a_replica_with_the_wrong_ca_never_links_and_says_why(gradus_factory, pki, tmp_path):
    primary = primary_server(gradus_factory, pki)
    replica = gradus_factory("--config", replica_config(tmp_path, pki, primary, ca="otherca"),
                             name="replica")
    error = link_error(replica)
    assert "TLS handshake" in error and "invalid peer certificate" in error, error
    assert_never_links(replica)
    assert "invalid peer certificate" in replica.stderr_text()
    assert "slave0" not in info(primary)
    # It keeps retrying like any broken link: the right CA (CONFIG SET, for the next attempt)
    # links it.
    assert redis_client(replica).config_set("tls-ca-cert-file", pki["ca.crt"])
    wait_link_up(replica)
    assert "master_sync_last_error" not in info(replica)


def test_a_primary_requiring_client_certificates_refuses_an_untrusted_one(gradus_factory, pki, tmp_path):
    primary = primary_server(gradus_factory, pki)
    replica = gradus_factory(
        "--config", replica_config(tmp_path, pki, primary, client_cert="stranger"), name="replica")
    error = link_error(replica)
    assert "the primary refused this replica's TLS certificate (alert UnknownCA" in error, error
    assert_never_links(replica)
    assert "slave0" not in info(primary)


def test_tls_replication_no_against_a_tls_port_fails_until_config_set_yes(gradus_factory, pki, tmp_path):
    primary = primary_server(gradus_factory, pki)
    replica = gradus_factory("--config", replica_config(tmp_path, pki, primary, tls=False),
                             name="replica")
    assert link_error(replica)
    assert_never_links(replica)
    c = redis_client(replica)
    assert c.config_get("tls-replication") == {"tls-replication": "no"}
    # Live: the next attempt is a TLS connection.
    assert c.config_set("tls-replication", "yes")
    assert c.config_get("tls-replication") == {"tls-replication": "yes"}
    wait_link_up(replica)
    p = redis_client(primary)
    p.set("k", "v")
    assert p.execute_command("WAIT", 1, 5000) == 1
    assert c.get("k") == b"v"


def test_config_set_tls_replication_refuses_settings_no_link_could_use(gradus_factory, pki):
    server = gradus_factory()
    c = redis_client(server)
    with pytest.raises(Exception) as refused:
        c.config_set("tls-replication", "yes")
    assert "tls-ca-cert-file must be set when tls-replication is yes" in str(refused.value)
    assert c.config_get("tls-replication") == {"tls-replication": "no"}
    c.config_set("tls-ca-cert-file", pki["ca.crt"])
    with pytest.raises(Exception) as refused:
        c.config_set("tls-replication", "yes")
    assert "needs a certificate to present" in str(refused.value)
    c.config_set("tls-client-cert-file", pki["client.crt"])
    c.config_set("tls-client-key-file", pki["client.key"])
    assert c.config_set("tls-replication", "yes")
    # With tls-replication on, a client certificate that cannot be read is refused at once.
    with pytest.raises(Exception) as refused:
        c.config_set("tls-client-key-file", "/nonexistent/client.key")
    assert "tls-client-key-file /nonexistent/client.key: cannot read it" in str(refused.value)
    assert c.config_get("tls-client-key-file") == {"tls-client-key-file": pki["client.key"]}


def test_tls_replication_without_a_ca_refuses_to_start(gradus_factory, pki, tmp_path):
    server = gradus_factory()
    server.stop()
    path = tmp_path / "bad.toml"
    path.write_text(f'tls-replication = true\ntls-cert-file = "{pki["node.crt"]}"\n'
                    f'tls-key-file = "{pki["node.key"]}"\n')
    code, err = server.run_to_exit(["--config", str(path)])
    assert code not in (0, None), err
    assert "tls-ca-cert-file must be set when tls-replication is yes" in err, err


def test_a_sentinel_over_tls_fails_over_tls_replicating_nodes(gradus_factory, pki, tmp_path):
    """One real Redis Sentinel with `tls-replication yes` (Sentinel then reaches every node over
    TLS) monitors a primary by its tls-port; it finds the replica by the TLS port the replica
    announces, and SENTINEL FAILOVER promotes it and points the old primary at its TLS port."""
    from sentinel_harness import sentinel_argv
    from servers import ServerProcess

    a, b = linked_tls_nodes(gradus_factory, pki, tmp_path)

    sentinel_dir = tmp_path / "sentinel"
    sentinel_dir.mkdir()
    port = free_port()
    conf = sentinel_dir / "sentinel.conf"
    conf.write_text("\n".join([
        f"bind {HOST}", f"port {port}", f"dir {sentinel_dir}",
        "tls-replication yes", f"tls-ca-cert-file {pki['ca.crt']}",
        f"tls-cert-file {pki['node.crt']}", f"tls-key-file {pki['node.key']}",
        "sentinel resolve-hostnames no",
        f"sentinel monitor mymaster {HOST} {a.tls_port} 1",
        "sentinel down-after-milliseconds mymaster 1000",
        "sentinel failover-timeout mymaster 5000",
    ]) + "\n")
    argv = sentinel_argv(conf)
    if argv is None:
        pytest.skip("redis-sentinel is not installed")
    sentinel = ServerProcess("sentinel", argv, HOST, port, sentinel_dir)
    try:
        sentinel.start()
        s = redis_client(sentinel)
        # The harness' short periods (so the replica's INFO is fresh enough to promote it).
        s.execute_command("SENTINEL", "DEBUG", "info-period", 250, "publish-period", 250,
                          "ask-period", 250)
        wait_until(lambda: any(int(r["port"]) == b.tls_port and r["flags"] == "slave"
                               and r.get("master-link-status") == "ok"
                               for r in s.sentinel_slaves("mymaster")),
                   what="the sentinel finding the replica at its TLS port")

        def failover_started():
            try:
                return s.execute_command("SENTINEL", "FAILOVER", "mymaster")
            except redis.ResponseError as e:
                assert "NOGOODSLAVE" in str(e), e
                return False
        wait_until(failover_started, what="SENTINEL FAILOVER accepted")
        wait_until(lambda: (s.sentinel_get_master_addr_by_name("mymaster") or (0, 0))[1] == b.tls_port,
                   what="the sentinel switching to the replica")
        wait_until(lambda: info(b).get("role") == "master", what="the replica promoted")
        wait_until(lambda: info(a).get("master_port") == str(b.tls_port)
                   and info(a).get("master_link_status") == "up",
                   what="the old primary following the new one over TLS")
        pb = redis_client(b)
        pb.set("after-failover", "1")
        assert pb.execute_command("WAIT", 1, 5000) == 1
        assert redis_client(a).get("after-failover") == b"1"
    finally:
        sentinel.stop()
