"""Tenants: authentication, isolation of every read/scan/count/flush/lock/script path, rights,
restart, memory limits (LRU eviction for caches, OOM for sessions), safe defaults.

Most tests start Gradus with examples/tenants.toml itself (tenants alpha and beta, users alpha,
beta and admin), as the README tells users to.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
import redis

from conftest import target_is_redis
from servers import free_port, gradus_binary, redis_client

pytestmark = pytest.mark.skipif(target_is_redis(), reason="tenants are a Gradus feature")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tenants.toml"
PASSWORDS = {"alpha": "alpha-pass", "beta": "beta-pass", "admin": "admin-pass"}


def connect(server, user: str, password: str = None, protocol: int = 2, db: int = 0) -> redis.Redis:
    return redis_client(
        server,
        protocol,
        username=user,
        password=password if password is not None else PASSWORDS[user],
        db=db,
        single_connection_client=True,
    )


def passwd(password: str) -> str:
    out = subprocess.run(
        [str(gradus_binary()), "passwd"], input=password + "\n", capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def config_with(tmp_path: Path, extra: str = "", base: str = None) -> str:
    path = tmp_path / "tenants.toml"
    path.write_text((base if base is not None else EXAMPLE.read_text()) + "\n" + extra)
    return str(path)


@pytest.fixture
def tenants(gradus_factory):
    return gradus_factory("--config", str(EXAMPLE))


@pytest.fixture
def alpha(tenants):
    c = connect(tenants, "alpha")
    yield c
    c.close()


@pytest.fixture
def beta(tenants):
    c = connect(tenants, "beta")
    yield c
    c.close()


def test_example_config_starts_and_requires_auth(tenants):
    with pytest.raises(redis.AuthenticationError):
        redis_client(tenants, 2, single_connection_client=True).get("k")
    with pytest.raises(redis.AuthenticationError):
        connect(tenants, "alpha", "wrong").ping()
    with pytest.raises(redis.AuthenticationError):
        connect(tenants, "nobody", "alpha-pass").ping()
    # The default user does not exist when tenants are configured.
    anon = redis_client(tenants, 2)
    with pytest.raises(redis.AuthenticationError):
        anon.execute_command("AUTH", "alpha-pass")
    assert connect(tenants, "alpha").execute_command("ACL", "WHOAMI") == b"alpha"


def test_reads_scans_and_counts_are_isolated(alpha, beta):
    alpha.set("shared-name", "alpha-value")
    alpha.hset("h", "f", "v")
    for i in range(50):
        alpha.set(f"a:{i}", i)
    beta.set("shared-name", "beta-value")

    assert alpha.get("shared-name") == b"alpha-value"
    assert beta.get("shared-name") == b"beta-value"
    assert beta.get("a:1") is None
    assert beta.exists("a:1", "a:2", "h") == 0
    assert beta.hgetall("h") == {}
    assert beta.keys("*") == [b"shared-name"]
    assert sorted(beta.scan_iter("*")) == [b"shared-name"]
    assert beta.dbsize() == 1
    assert alpha.dbsize() == 52
    for _ in range(20):
        assert beta.randomkey() == b"shared-name"
    assert beta.info("keyspace") == {"db0": {"keys": 1, "expires": 0, "avg_ttl": 0}}
    with pytest.raises(redis.ResponseError, match="no such key"):
        beta.rename("a:1", "stolen")
    assert alpha.get("a:1") == b"1"
    # The same SELECT index is a different keyspace per tenant.
    alpha.execute_command("SELECT", 1)
    beta.execute_command("SELECT", 1)
    alpha.set("c", "alpha-cache")
    assert beta.get("c") is None
    with pytest.raises(redis.ResponseError, match="DB index is out of range"):
        beta.execute_command("SELECT", 2)


def test_transactions_and_scripts_are_isolated(alpha, beta):
    alpha.set("k", "alpha")
    pipe = beta.pipeline(transaction=True)
    pipe.get("k")
    pipe.set("k", "beta")
    pipe.get("k")
    assert pipe.execute() == [None, True, b"beta"]
    assert alpha.get("k") == b"alpha"
    script = "return {redis.call('GET', KEYS[1]), redis.call('DBSIZE')}"
    assert beta.eval(script, 1, "k") == [b"beta", 1]
    assert alpha.eval(script, 1, "k") == [b"alpha", 1]
    # SELECT inside a script stays within the tenant.
    with pytest.raises(redis.ResponseError, match="out of range"):
        beta.eval("return redis.call('SELECT', 5)", 0)


def test_locks_are_isolated(tenants, alpha, beta):
    ta = alpha.execute_command("LOCK", "course-42", "LEASE", 10000)
    tb = beta.execute_command("LOCK", "course-42", "LEASE", 10000)
    assert ta > 0 and tb > 0, "same lock name in two tenants: both granted at once"
    with pytest.raises(redis.ResponseError):
        beta.execute_command("UNLOCK", "course-42", ta if ta != tb else ta + 1000)
    assert [e[b"tenant"] for e in map(to_dict, beta.execute_command("LOCKS.LIST"))] == [b"beta"]
    admin = connect(tenants, "admin")
    assert sorted(e[b"tenant"] for e in map(to_dict, admin.execute_command("LOCKS.LIST"))) == [b"alpha", b"beta"]
    token, data = beta.execute_command("SESSION.OPEN", "sid1")
    assert data is None
    alpha.set("sid1", "alpha's session")
    assert beta.execute_command("SESSION.CLOSE", "sid1", token, "DATA", "beta's session", "TTL", 60) is not None
    assert alpha.get("sid1") == b"alpha's session"
    assert beta.get("sid1") == b"beta's session"


def to_dict(reply) -> dict:
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2]))


def test_flushall_is_tenant_scoped_and_flushdb_keyspace_scoped(alpha, beta):
    for c in (alpha, beta):
        c.set("s", "session")
        c.execute_command("SELECT", 1)
        c.set("c", "cache")
        c.execute_command("SELECT", 0)
    alpha.execute_command("SELECT", 1)
    alpha.flushdb()
    assert alpha.dbsize() == 0
    alpha.execute_command("SELECT", 0)
    assert alpha.get("s") == b"session", "FLUSHDB emptied only the selected keyspace"
    alpha.flushall()
    assert alpha.dbsize() == 0
    assert beta.get("s") == b"session"
    beta.execute_command("SELECT", 1)
    assert beta.get("c") == b"cache"


def test_purge_removes_one_prefix(alpha, beta):
    for i in range(30):
        alpha.set(f"cachedef:mod_forum:{i}", i)
        alpha.set(f"cachedef:core:{i}", i)
        beta.set(f"cachedef:mod_forum:{i}", i)
    assert alpha.execute_command("PURGE", "cachedef:mod_forum:") == 30
    assert alpha.dbsize() == 30
    assert all(k.startswith(b"cachedef:core:") for k in alpha.keys("*"))
    assert beta.dbsize() == 30


def test_rights_are_enforced(gradus_factory, tmp_path):
    extra = f"""
[[users]]
name = "reader"
password = "{passwd('reader-pass')}"
permissions = ["read"]
tenant = "beta"
"""
    server = gradus_factory("--config", config_with(tmp_path, extra))
    beta = connect(server, "beta")
    reader = connect(server, "reader", "reader-pass")
    beta.set("k", "v")
    assert reader.get("k") == b"v"
    assert reader.execute_command("ACL", "WHOAMI") == b"reader"
    assert reader.execute_command("ACL", "MYPERMS") == [b"read"]
    for call in (lambda: reader.set("k", "x"), lambda: reader.flushdb(),
                 lambda: reader.execute_command("LOCK", "x")):
        with pytest.raises(redis.ResponseError, match=r"^User reader has no permissions to run the '\w+' command"):
            call()
    with pytest.raises(redis.exceptions.NoPermissionError):
        reader.set("k", "x")
    with pytest.raises(redis.ResponseError, match="no permissions"):
        reader.eval("return redis.call('SET', 'k', 'x')", 0)
    assert beta.get("k") == b"v"
    # Admin-only operations.
    for call in (lambda: beta.config_get("*"), lambda: beta.config_set("maxclients", 10),
                 lambda: beta.execute_command("SHUTDOWN"), lambda: beta.execute_command("ACL", "USERS")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            call()
    info = beta.info()
    assert "connected_clients" not in info and "used_memory" in info, "tenant INFO: only its own figures"
    assert info["tenant"] == "beta"
    admin = connect(server, "admin")
    assert admin.config_get("maxclients")["maxclients"] == "10000"
    assert b"reader" in admin.execute_command("ACL", "USERS")
    assert "connected_clients" in admin.info()
    tenants = admin.info("tenants")
    assert tenants["tenant"] in ("alpha", "beta")
    assert "# Tenant_alpha" in info_text(server, "admin") and "# Tenant_beta" in info_text(server, "admin")
    beta_text = info_text(server, "beta")
    assert "# Tenant_beta" in beta_text and "Tenant_alpha" not in beta_text


def info_text(server, user: str) -> str:
    """INFO tenants as text (redis-py would merge the per-tenant sections into one dict)."""
    from resp import RawClient, Simple

    with RawClient(server.host, server.port).connect() as conn:
        assert conn.call("AUTH", user, PASSWORDS[user]) == Simple(b"OK")
        text = conn.call("INFO", "tenants")
    assert isinstance(text, bytes), text
    return text.decode()


def test_client_list_and_kill_are_scoped(tenants, alpha, beta):
    alpha.ping()
    beta.ping()
    beta_id = beta.client_id()
    listed = alpha.client_list()
    assert all(c["user"] == "alpha" for c in listed), listed
    # Another tenant's connections are invisible: nothing matches.
    assert alpha.client_kill_filter(_id=beta_id) == 0
    assert beta.ping()
    # The admin works in tenant alpha: alpha sees its connection but may not kill it.
    admin = connect(tenants, "admin")
    with pytest.raises(redis.exceptions.NoPermissionError):
        alpha.client_kill_filter(_id=admin.client_id())
    assert {c["user"] for c in admin.client_list()} >= {"alpha", "beta", "admin"}
    assert admin.client_kill_filter(_id=beta_id) == 1


def test_hello_auth_binds_the_tenant(tenants, alpha):
    alpha.set("k", "alpha")
    with pytest.raises(redis.AuthenticationError, match="HELLO must be called"):
        redis_client(tenants, 3, single_connection_client=True).ping()
    r3 = redis_client(tenants, 3, username="beta", password="beta-pass", single_connection_client=True)
    assert r3.get("k") is None
    assert r3.execute_command("ACL", "WHOAMI") == b"beta"


def test_restart_keeps_each_tenants_data_apart(gradus_factory, tmp_path):
    server = gradus_factory("--config", str(EXAMPLE))
    alpha, beta = connect(server, "alpha"), connect(server, "beta")
    alpha.set("session_1", "alpha session")
    beta.set("session_1", "beta session")
    beta.execute_command("SELECT", 1)
    beta.set("cached", "gone after restart: the cache keyspace is not logged")
    alpha.close()
    beta.close()
    server.restart()
    alpha, beta = connect(server, "alpha"), connect(server, "beta")
    assert alpha.get("session_1") == b"alpha session"
    assert beta.get("session_1") == b"beta session"
    beta.execute_command("SELECT", 1)
    assert beta.get("cached") is None
    # FLUSHALL replays as it ran: alpha's keyspaces only.
    alpha.flushall()
    alpha.close()
    beta.close()
    server.restart()
    alpha, beta = connect(server, "alpha"), connect(server, "beta")
    assert alpha.dbsize() == 0
    assert beta.get("session_1") == b"beta session"
    alpha.set("session_1", "alpha session")
    alpha.close()
    beta.close()
    # A configuration that lists the tenants in the other order keeps each tenant's data:
    # keyspaces keep the index the data directory gave them.
    text = EXAMPLE.read_text()
    alpha_part = text[text.index("[[tenants]]\nname = \"alpha\""):text.index("[[tenants]]\nname = \"beta\"")]
    swapped = text.replace(alpha_part, "")
    swapped = swapped.replace("# The global admin", alpha_part + "\n# The global admin")
    assert swapped.index('name = "beta"') < swapped.index('name = "alpha"')
    server.stop()
    server.argv[server.argv.index("--config") + 1] = config_with(tmp_path, "", base=swapped)
    server.start()
    alpha, beta = connect(server, "alpha"), connect(server, "beta")
    assert alpha.get("session_1") == b"alpha session"
    assert beta.get("session_1") == b"beta session"


LIMITS = """
[[tenants]]
name = "small"
memory-limit = "{tenant_limit}"

  [[tenants.users]]
  name = "small"
  password = "{hash}"
  permissions = ["read", "write", "flush"]

  [[tenants.keyspaces]]
  name = "session"
  select = 0
  durability = "background"
  eviction = "none"
  memory-limit = "{session_limit}"

  [[tenants.keyspaces]]
  name = "cache"
  select = 1
  durability = "{cache_degree}"
  eviction = "lru"
  memory-limit = "1mb"
"""


def limits_server(gradus_factory, tmp_path, session_limit="512kb", tenant_limit="64mb", cache_degree="none"):
    body = LIMITS.format(hash=passwd("small-pass"), session_limit=session_limit,
                         tenant_limit=tenant_limit, cache_degree=cache_degree)
    return gradus_factory("--config", config_with(tmp_path, "", base=body))


def test_cache_evicts_while_sessions_lose_nothing_and_refuse_when_full(gradus_factory, tmp_path):
    server = limits_server(gradus_factory, tmp_path)
    s = connect(server, "small", "small-pass")
    cache = connect(server, "small", "small-pass", db=1)
    value = b"x" * 1000
    written_sessions = []
    for i in range(200):
        s.set(f"sess:{i}", value)
        written_sessions.append(f"sess:{i}")
    # 3 MiB through a 1 MiB cache: it evicts, and never touches the session keyspace.
    pipe = cache.pipeline(transaction=False)
    for i in range(3000):
        pipe.set(f"cache:{i}", value)
    assert all(r is True for r in pipe.execute())
    info = s.info("tenants")
    assert info["keyspace_cache"]["evicted_keys"] > 1000
    assert info["keyspace_cache"]["used_memory"] <= 1024 * 1024 + 2048
    assert info["keyspace_session"]["evicted_keys"] == 0
    # The most recently written cache keys survive (LRU), the oldest are mostly gone.
    assert cache.get("cache:2999") == value
    assert sum(cache.exists(f"cache:{i}") for i in range(100)) < 50
    # Sessions: fill past 512 KiB; once over, writes are refused with OOM and nothing is lost.
    refused = 0
    for i in range(200, 1000):
        try:
            s.set(f"sess:{i}", value)
            written_sessions.append(f"sess:{i}")
        except redis.exceptions.OutOfMemoryError as e:
            assert "memory-limit" in str(e)
            refused += 1
    assert refused > 0
    assert len(written_sessions) < 1000
    assert all(s.get(k) == value for k in written_sessions), "a session key was lost"
    # Deleting makes room again; reads and deletes are never refused.
    s.delete(*written_sessions[:100])
    s.set("sess:after-delete", value)


def test_tenant_limit_takes_room_from_the_cache_only(gradus_factory, tmp_path):
    server = limits_server(gradus_factory, tmp_path, session_limit="64mb", tenant_limit="1536kb")
    s = connect(server, "small", "small-pass")
    cache = connect(server, "small", "small-pass", db=1)
    value = b"y" * 1000
    for i in range(900):
        cache.set(f"cache:{i}", value)
    for i in range(1000):
        s.set(f"sess:{i}", value)
    info = s.info("tenants")
    assert info["keyspace_cache"]["evicted_keys"] > 0, "session writes made room by evicting cache keys"
    assert info["keyspace_session"]["keys"] == 1000
    assert info["used_memory"] <= 1536 * 1024 + 2048


def test_evictions_of_a_logged_cache_are_logged(gradus_factory, tmp_path):
    server = limits_server(gradus_factory, tmp_path, cache_degree="background")
    cache = connect(server, "small", "small-pass", db=1)
    value = b"z" * 1000
    for i in range(2500):
        cache.set(f"k:{i}", value)
    before = set(cache.keys("*"))
    assert 500 < len(before) < 2500
    cache.close()
    server.restart()
    cache = connect(server, "small", "small-pass", db=1)
    assert set(cache.keys("*")) == before, "replay agrees with memory: evicted keys stay evicted"


def test_failed_auth_is_counted_and_slowed(tenants):
    for _ in range(5):
        with pytest.raises(redis.AuthenticationError):
            connect(tenants, "alpha", "guess").ping()
    started = time.monotonic()
    with pytest.raises(redis.AuthenticationError):
        connect(tenants, "alpha", "guess").ping()
    assert time.monotonic() - started >= 0.15, "the sixth failure from one address waits 160 ms"
    admin_started = time.monotonic()
    # A correct password from the same address is answered late too, then clears the count.
    connect(tenants, "alpha").ping()
    assert time.monotonic() - admin_started >= 0.15
    started = time.monotonic()
    connect(tenants, "alpha").ping()
    assert time.monotonic() - started < 5
    admin = connect(tenants, "admin")
    assert admin.info("stats")["total_auth_failures"] >= 6


def test_refuses_public_bind_without_auth(tmp_path):
    proc = subprocess.run(
        [str(gradus_binary()), "--bind", "0.0.0.0", "--port", str(free_port()), "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode != 0
    assert "refusing to listen on 0.0.0.0" in proc.stderr
    assert "no authentication" in proc.stderr


def test_passwd_helper_never_prints_the_password():
    out = passwd("s3cret-pass")
    assert re.fullmatch(r"pbkdf2-sha256\$\d+\$[0-9a-f]{32}\$[0-9a-f]{64}", out)
    assert "s3cret" not in out
    assert passwd("s3cret-pass") != out, "salted: two hashes of one password differ"


def test_config_rejects_clear_text_passwords(tmp_path):
    body = EXAMPLE.read_text().replace(
        EXAMPLE.read_text().split('password = "')[1].split('"')[0], "alpha-pass", 1)
    path = config_with(tmp_path, "", base=body)
    proc = subprocess.run([str(gradus_binary()), "--config", path, "--port", str(free_port()),
                           "--dir", str(tmp_path / "d")], capture_output=True, text=True, timeout=20,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode != 0
    assert "never stored in clear" in proc.stderr


def test_memcached_port_serves_one_tenants_keyspace(gradus_factory, tmp_path):
    """The memcached port maps to alpha's cache keyspace; its `-Y` logins are alpha's users."""
    from memcache_raw import McRaw

    # Top-level settings go before the first table in TOML: put them at the top of the file.
    body = 'memcached-tenant = "alpha"\nmemcached-db = 1\n' + EXAMPLE.read_text()
    server = gradus_factory("--config", config_with(tmp_path, "", base=body))
    mc = McRaw(server.host, server.memcached_port)
    anon = mc.new()
    assert anon.cmd(b"get k\r\n").startswith(b"CLIENT_ERROR unauthenticated")
    intruder = mc.new()
    assert intruder.cmd(b"set auth 0 0 14\r\nbeta beta-pass\r\n") == b"CLIENT_ERROR authentication failure"
    conn = mc.new()
    assert conn.cmd(b"set auth 0 0 16\r\nalpha alpha-pass\r\n") == b"STORED"
    assert conn.cmd(b"set page:1 5 0 4\r\nhtml\r\n") == b"STORED"
    alpha = connect(server, "alpha", db=1)
    assert alpha.get("page:1") == b"html"
    beta = connect(server, "beta", db=1)
    assert beta.get("page:1") is None
    beta.set("page:1", "beta")
    assert conn.cmd(b"flush_all\r\n") == b"OK"
    assert alpha.get("page:1") is None
    assert beta.get("page:1") == b"beta", "flush_all empties the mapped keyspace only"
    mc.close_all()


def test_memcached_port_serves_each_tenant_its_own_keyspace(gradus_factory, tmp_path):
    """Two tenants on one memcached port: each `-Y` login lands in its own tenant's
    `memcached-keyspace`, sees only its own items and `flush_all` empties only its own."""
    from memcache_raw import McRaw
    from pymemcache.client.base import Client

    body = EXAMPLE.read_text()
    for name in ("alpha", "beta"):
        body = body.replace(f'[[tenants]]\nname = "{name}"\n',
                            f'[[tenants]]\nname = "{name}"\nmemcached-keyspace = "cache"\n', 1)
    assert body.count('\nmemcached-keyspace = "cache"\n') == 2
    server = gradus_factory("--config", config_with(tmp_path, "", base=body))
    mc = McRaw(server.host, server.memcached_port)
    sites = {}
    for user in ("alpha", "beta"):
        conn = mc.new()
        token = f"{user} {PASSWORDS[user]}".encode()
        assert conn.cmd(b"set auth 0 0 %d\r\n%s\r\n" % (len(token), token)) == b"STORED"
        sites[user] = conn
    alpha, beta = sites["alpha"], sites["beta"]
    assert alpha.cmd(b"set course:1 0 0 5\r\nalpha\r\n") == b"STORED"
    assert beta.get(b"get course:1\r\n") == [], "beta must not see alpha's item"
    assert beta.cmd(b"add course:1 0 0 4\r\nbeta\r\n") == b"STORED", "same name, another keyspace"
    assert alpha.get(b"get course:1\r\n") == [(b"course:1", 0, b"alpha", None)]
    assert beta.cmd(b"set only-beta 0 0 1\r\nb\r\n") == b"STORED"
    # Over RESP, each tenant finds its memcached items in its cache keyspace (SELECT 1).
    assert connect(server, "alpha", db=1).get("course:1") == b"alpha"
    assert connect(server, "beta", db=1).get("course:1") == b"beta"
    assert connect(server, "alpha", db=0).get("course:1") is None
    # flush_all empties the logged-in tenant's keyspace only.
    assert alpha.cmd(b"flush_all\r\n") == b"OK"
    assert alpha.get(b"get course:1\r\n") == []
    assert [i[:3] for i in beta.get(b"get course:1 only-beta\r\n")] == [(b"course:1", 0, b"beta"), (b"only-beta", 0, b"b")]
    assert connect(server, "beta", db=1).dbsize() == 2
    # A delayed flush_all is per keyspace too: beta's, due in 1 s, leaves alpha's new item.
    assert alpha.cmd(b"set later 0 0 1\r\na\r\n") == b"STORED"
    assert beta.cmd(b"flush_all 1\r\n") == b"OK"
    time.sleep(1.6)
    assert beta.get(b"get only-beta\r\n") == []
    assert alpha.get(b"get later\r\n") == [(b"later", 0, b"a", None)]
    # stats curr_items counts the connection's own keyspace.
    assert b"STAT curr_items 1" in alpha.send(b"stats\r\n").lines_until(b"END")
    mc.close_all()
    # A real client (pymemcache) logs in the same way: a `set` whose value is "user password".
    client = Client((server.host, server.memcached_port), connect_timeout=5, timeout=5)
    # noreply=False: memcached answers a login STORED even with noreply, and so does Gradus.
    assert client.set("auth", b"beta beta-pass", noreply=False)
    assert client.get("later") is None
    client.set("from-pymemcache", b"1")
    assert connect(server, "beta", db=1).get("from-pymemcache") == b"1"
    assert connect(server, "alpha", db=1).get("from-pymemcache") is None
    client.close()


def test_memcached_keyspace_must_be_the_tenants_own(gradus_factory, tmp_path):
    body = EXAMPLE.read_text().replace('[[tenants]]\nname = "alpha"\n',
                                       '[[tenants]]\nname = "alpha"\nmemcached-keyspace = "nope"\n', 1)
    server = gradus_factory()
    server.stop()
    code, err = server.run_to_exit(["--config", config_with(tmp_path, "", base=body)])
    assert code not in (0, None)
    assert 'tenant "alpha": memcached-keyspace "nope" is not one of its keyspaces' in err
