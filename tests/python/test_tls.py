"""TLS on both ports (tls-port, memcached-tls-port) with real clients: redis-cli --tls with and
without a client certificate, redis-py ssl=True (RESP2 and RESP3), phpredis over tls://, pymemcache
with an SSL context; client certificates verified against tls-ca-cert-file (a wrong CA or an expired
certificate is refused, and the server says why); a bad certificate or key refuses to start, naming
the file; CONFIG SET tls-cert-file/tls-key-file puts a new certificate in force for new connections.

Every certificate is made here with the openssl CLI (EC P-256 keys; an expired one with `openssl ca`,
which can back-date a certificate)."""
import os
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest
import redis

from servers import free_port, redis_client

pytestmark = [
    pytest.mark.gradus_only,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed"),
]

HOST = "127.0.0.1"


def openssl(*args, cwd):
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


class Pki:
    """A directory of PEM files: two CAs, server and client certificates (one each expired)."""

    def __init__(self, root: Path):
        self.root = root
        (root / "server.ext").write_text(
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        (root / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
        for ca in ("ca", "otherca"):
            self.key(ca)
            openssl("req", "-x509", "-new", "-key", f"{ca}.key", "-out", f"{ca}.crt", "-days", "3",
                    "-subj", f"/CN=Gradus test {ca}", cwd=root)
        self.signed("server", "ca", "server.ext", "localhost")
        self.signed("server2", "ca", "server.ext", "localhost")
        self.signed("client", "ca", "client.ext", "client")
        self.signed("stranger", "otherca", "client.ext", "stranger")
        self.expired("expired-server", "server.ext", "localhost")
        self.expired("expired-client", "client.ext", "client")

    def key(self, name):
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-out", f"{name}.key", cwd=self.root)

    def signed(self, name, ca, ext, cn):
        self.key(name)
        openssl("req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}",
                cwd=self.root)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", ext, cwd=self.root)

    def expired(self, name, ext, cn):
        """Signed by `ca`, valid only on 1 January 2020."""
        self.key(name)
        openssl("req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}",
                cwd=self.root)
        (self.root / "index.txt").touch()
        serial = self.root / "serial"
        if not serial.exists():
            serial.write_text("1000\n")
        (self.root / "ca.cnf").write_text(
            "[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\n"
            "default_md = sha256\npolicy = p\nunique_subject = no\n[p]\ncommonName = supplied\n")
        openssl("ca", "-batch", "-config", "ca.cnf", "-cert", "ca.crt", "-keyfile", "ca.key",
                "-in", f"{name}.csr", "-out", f"{name}.crt", "-notext", "-startdate", "20200101000000Z",
                "-enddate", "20200102000000Z", "-extfile", ext, cwd=self.root)

    def __getitem__(self, name) -> str:
        return str(self.root / name)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


def tls_args(pki, port, *extra, cert="server", auth="yes", mc_port=None):
    args = ["--tls-port", str(port), "--tls-cert-file", pki[f"{cert}.crt"],
            "--tls-key-file", pki[f"{cert}.key"], "--tls-ca-cert-file", pki["ca.crt"],
            "--tls-auth-clients", auth]
    if mc_port is not None:
        args += ["--memcached-tls-port", str(mc_port)]
    return args + list(extra)


@pytest.fixture
def tls_server(gradus_factory, pki):
    """A server with client certificates required on its TLS ports."""
    port, mc_port = free_port(), free_port()
    server = gradus_factory(*tls_args(pki, port, mc_port=mc_port))
    server.tls_port, server.memcached_tls_port = port, mc_port
    return server


def tls_client(server, pki, cert="client", protocol=2, **kw):
    kw.setdefault("ssl_ca_certs", pki["ca.crt"])
    if cert is not None:
        kw.setdefault("ssl_certfile", pki[f"{cert}.crt"])
        kw.setdefault("ssl_keyfile", pki[f"{cert}.key"])
    return redis.Redis(host=HOST, port=server.tls_port, ssl=True, protocol=protocol,
                       socket_timeout=10, socket_connect_timeout=5, **kw)


def redis_cli(server, pki, *args, cert="client", ca="ca"):
    argv = ["redis-cli", "-h", HOST, "-p", str(server.tls_port), "--tls", "--cacert", pki[f"{ca}.crt"]]
    if cert is not None:
        argv += ["--cert", pki[f"{cert}.crt"], "--key", pki[f"{cert}.key"]]
    return subprocess.run(argv + list(args), capture_output=True, text=True, timeout=30)


def wait_for_log(server, text, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in server.stderr_text():
            return True
        time.sleep(0.05)
    return False


def test_redis_cli_tls_with_client_certificate_and_plain_port_beside_it(tls_server, pki):
    assert redis_cli(tls_server, pki, "SET", "greeting", "over tls").stdout.strip() == "OK"
    assert redis_cli(tls_server, pki, "GET", "greeting").stdout.strip() == "over tls"
    # The plain port serves the same keyspace at the same time.
    plain = redis_client(tls_server)
    assert plain.get("greeting") == b"over tls"
    plain.set("greeting", "plain")
    assert redis_cli(tls_server, pki, "GET", "greeting").stdout.strip() == "plain"


def test_redis_cli_without_client_certificate_is_refused_when_required(tls_server, pki):
    out = redis_cli(tls_server, pki, "PING", cert=None)
    assert "PONG" not in out.stdout
    assert wait_for_log(tls_server, "peer sent no certificates")


@pytest.mark.parametrize("auth", ["no", "optional"])
def test_redis_cli_without_client_certificate_when_not_required(gradus_factory, pki, auth):
    port = free_port()
    server = gradus_factory(*tls_args(pki, port, auth=auth))
    server.tls_port = port
    assert redis_cli(server, pki, "PING", cert=None).stdout.strip() == "PONG"
    # With optional a certificate that is given is still verified.
    out = redis_cli(server, pki, "PING", cert="stranger")
    if auth == "optional":
        assert "PONG" not in out.stdout
    else:
        assert out.stdout.strip() == "PONG"


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py_ssl(tls_server, pki, protocol):
    r = tls_client(tls_server, pki, protocol=protocol)
    assert r.ping()
    big = b"x" * (3 << 20)  # several TLS records each way, pipelined
    with r.pipeline(transaction=False) as p:
        for i in range(50):
            p.set(f"k{i}", f"v{i}")
        p.set("big", big)
        p.get("big")
        p.mget([f"k{i}" for i in range(50)])
        replies = p.execute()
    assert replies[-2] == big
    assert replies[-1] == [f"v{i}".encode() for i in range(50)]
    r.hset("h", mapping={"a": "1"})
    assert r.hgetall("h") == {b"a": b"1"}
    assert r.connection_pool.get_connection().port == tls_server.tls_port


def test_wrong_ca_client_certificate_is_refused(tls_server, pki):
    with pytest.raises(redis.ConnectionError):
        tls_client(tls_server, pki, cert="stranger").ping()
    assert wait_for_log(tls_server, "UnknownIssuer")
    # And the server's certificate does not verify against the other CA: the client says why.
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        tls_client(tls_server, pki, ssl_ca_certs=pki["otherca.crt"]).ping()


def test_expired_client_certificate_is_refused(tls_server, pki):
    with pytest.raises(redis.ConnectionError):
        tls_client(tls_server, pki, cert="expired-client").ping()
    assert wait_for_log(tls_server, "certificate expired")


def test_expired_server_certificate_is_refused_by_clients(gradus_factory, pki):
    port = free_port()
    server = gradus_factory(*tls_args(pki, port, cert="expired-server"))
    server.tls_port = port
    with pytest.raises(redis.ConnectionError, match="certificate has expired"):
        tls_client(server, pki).ping()
    out = redis_cli(server, pki, "PING")
    assert "PONG" not in out.stdout
    assert "certificate verify failed" in out.stderr


def test_bad_certificate_or_key_refuses_to_start_naming_the_file(gradus_factory, pki, tmp_path):
    server = gradus_factory()
    server.stop()
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n")
    empty = tmp_path / "empty.pem"
    empty.write_text("hello\n")
    port = str(free_port())
    cases = [
        (["--tls-cert-file", str(tmp_path / "missing.crt")], "missing.crt", "cannot read it"),
        (["--tls-cert-file", str(garbage)], "garbage.pem", "not a valid PEM"),
        (["--tls-cert-file", str(empty)], "empty.pem", "no certificate found"),
        (["--tls-key-file", str(empty)], "empty.pem", "no usable private key"),
        # The key of another certificate.
        (["--tls-key-file", pki["client.key"]], "client.key", "public key"),
        (["--tls-ca-cert-file", str(empty)], "empty.pem", "no certificate found"),
        (["--tls-protocols", "TLSv1.1"], "tls-protocols", "not supported"),
    ]
    for override, named, why in cases:
        args = dict(zip(*[iter(tls_args(pki, port))] * 2))
        args.update(dict(zip(*[iter(override)] * 2)))
        code, err = server.run_to_exit([a for kv in args.items() for a in kv])
        assert code not in (0, None), (override, err)
        assert named in err and why in err, (override, err)
    code, err = server.run_to_exit(["--tls-port", port, "--tls-cert-file", pki["server.crt"],
                                    "--tls-key-file", pki["server.key"]])
    assert code not in (0, None)
    assert "tls-ca-cert-file must be set when tls-auth-clients is yes" in err


def peer_serial(port, pki):
    ctx = ssl.create_default_context(cafile=pki["ca.crt"])
    ctx.load_cert_chain(pki["client.crt"], pki["client.key"])
    with socket.create_connection((HOST, port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            return s.getpeercert()["serialNumber"]


def serial_of(pki, name):
    out = openssl("x509", "-in", pki[f"{name}.crt"], "-noout", "-serial", cwd=pki.root)
    return out.strip().split("=", 1)[1].upper()


def test_config_set_cert_reloads_for_new_connections(tls_server, pki):
    assert peer_serial(tls_server.tls_port, pki) == serial_of(pki, "server")
    before = tls_client(tls_server, pki)
    before.set("k", "v")
    admin = redis_client(tls_server)
    assert admin.config_set("tls-cert-file", pki["server2.crt"], "tls-key-file", pki["server2.key"])
    assert admin.config_get("tls-cert-file") == {"tls-cert-file": pki["server2.crt"]}
    assert peer_serial(tls_server.tls_port, pki) == serial_of(pki, "server2")
    # The connection made before the reload goes on.
    assert before.get("k") == b"v"
    # A certificate and a key that do not belong together are refused; nothing changes.
    with pytest.raises(redis.ResponseError, match="Unable to update TLS configuration"):
        admin.config_set("tls-key-file", pki["server.key"])
    assert admin.config_get("tls-key-file") == {"tls-key-file": pki["server2.key"]}
    assert peer_serial(tls_server.tls_port, pki) == serial_of(pki, "server2")


def test_pymemcache_over_tls(tls_server, pki):
    from pymemcache.client.base import Client

    ctx = ssl.create_default_context(cafile=pki["ca.crt"])
    ctx.load_cert_chain(pki["client.crt"], pki["client.key"])
    mc = Client((HOST, tls_server.memcached_tls_port), tls_context=ctx, connect_timeout=5, timeout=5)
    assert mc.set("page", b"<html>", expire=60)
    assert mc.get("page") == b"<html>"
    mc.set_many({f"k{i}": str(i).encode() for i in range(100)})
    assert len(mc.get_many([f"k{i}" for i in range(100)])) == 100
    assert mc.version()
    mc.close()
    # The same item over the plain memcached port.
    plain = Client((HOST, tls_server.memcached_port), connect_timeout=5, timeout=5)
    assert plain.get("page") == b"<html>"
    # Without a client certificate the TLS port refuses.
    bare = Client((HOST, tls_server.memcached_tls_port),
                  tls_context=ssl.create_default_context(cafile=pki["ca.crt"]),
                  connect_timeout=5, timeout=5)
    with pytest.raises(Exception):
        bare.get("page")


PHP_TLS = r"""<?php
$r = new Redis();
$r->connect('tls://127.0.0.1', (int)$argv[1], 5, NULL, 0, 5, ['stream' => [
    'cafile' => $argv[2], 'local_cert' => $argv[3], 'local_pk' => $argv[4],
    'peer_name' => 'localhost', 'verify_peer' => true]]);
$r->set('php', 'over tls');
echo $r->get('php'), "\n";
echo $r->incr('n'), "\n";
"""


def php_available() -> bool:
    if shutil.which("php") is None:
        return False
    out = subprocess.run(["php", "-m"], capture_output=True, text=True).stdout.lower()
    return "redis" in out.split()


@pytest.mark.skipif(not php_available(), reason="php-cli with php-redis not installed")
def test_phpredis_tls(tls_server, pki, tmp_path):
    script = tmp_path / "tls.php"
    script.write_text(PHP_TLS)
    proc = subprocess.run(["php", str(script), str(tls_server.tls_port), pki["ca.crt"],
                           pki["client.crt"], pki["client.key"]],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert proc.stdout.split() == ["over", "tls", "1"]
    assert redis_client(tls_server).get("php") == b"over tls"


def test_tls_protocols_limits_the_versions_offered(gradus_factory, pki):
    port = free_port()
    server = gradus_factory(*tls_args(pki, port, "--tls-protocols", "TLSv1.3"))
    server.tls_port = port

    def handshake(max_version):
        ctx = ssl.create_default_context(cafile=pki["ca.crt"])
        ctx.load_cert_chain(pki["client.crt"], pki["client.key"])
        ctx.maximum_version = max_version
        with socket.create_connection((HOST, port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                return s.version()

    assert handshake(ssl.TLSVersion.TLSv1_3) == "TLSv1.3"
    with pytest.raises(ssl.SSLError):
        handshake(ssl.TLSVersion.TLSv1_2)
    assert redis_client(server).config_get("tls-protocols") == {"tls-protocols": "TLSv1.3"}


def listening_ports(pid: int) -> set:
    """The TCP ports process `pid` listens on (its socket inodes matched in /proc/net/tcp{,6})."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.gradus_only
def test_port_0_beside_a_tls_port_is_tls_only(pki, tmp_path):
    """Redis' TLS-only setup (`port 0` + `tls-port`) opens no plain RESP listener; before, port 0
    asked the OS for a port, so such a config also served plaintext on a random port."""
    from servers import gradus_binary

    tls_port = free_port()
    proc = subprocess.Popen(
        [str(gradus_binary()), "--bind", HOST, "--port", "0", "--memcached-port", "0",
         "--dir", str(tmp_path / "data"), *tls_args(pki, tls_port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            out = redis_cli(type("S", (), {"tls_port": tls_port}), pki, "PING")
            if out.stdout.strip() == "PONG":
                break
            assert time.monotonic() < deadline, out.stderr
            time.sleep(0.1)
        assert listening_ports(proc.pid) == {tls_port}
        assert redis_cli(type("S", (), {"tls_port": tls_port}), pki,
                         "CONFIG", "GET", "port").stdout.split() == ["port", "0"]
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.gradus_only
def test_port_0_without_a_tls_port_refuses_to_start(tmp_path):
    """As redis-server: with `port 0` and no TLS port nothing would be reachable, so the server
    exits saying so. Before, port 0 asked the OS for a port: a server nobody knew the port of."""
    from servers import gradus_binary

    proc = subprocess.run(
        [str(gradus_binary()), "--bind", HOST, "--port", "0", "--dir", str(tmp_path / "data")],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
    assert proc.returncode != 0
    assert b"Configured to not listen anywhere, exiting." in proc.stderr, proc.stderr
