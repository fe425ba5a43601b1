"""Redis ACL compatibility: ACL SETUSER rules (key patterns, %R~/%W~, categories, +cmd/-cmd,
on/off, >pass, #hash, nopass, allkeys/resetkeys, allcommands/nocommands), GETUSER, DELUSER, LIST,
USERS, CAT, WHOAMI, LOG, DRYRUN, GENPASS, SAVE/LOAD with an aclfile, and ACL users layered on tenants.

Most tests run against a real redis-server too (GRADUS_TARGET=redis): the texts compared are those
Redis 7.0 (installed here) and 7.2 (which Gradus follows) share; where they differ, the test
accepts both wordings and says so."""
import hashlib
import re
from pathlib import Path

import pytest
import redis

from conftest import target_is_redis
from servers import redis_client


def user_client(server, user, password):
    return redis_client(server, username=user, password=password, single_connection_client=True)


def getuser(r, name):
    reply = r.execute_command("ACL", "GETUSER", name)
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2]))
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in reply.items()}


def test_setuser_getuser_and_list(r2):
    assert r2.execute_command("ACL", "SETUSER", "alice") == b"OK"
    u = getuser(r2, "alice")
    assert u["flags"] == [b"off"]
    assert u["passwords"] == []
    assert u["commands"] == b"-@all"
    assert u["keys"] == b""
    assert u["channels"] == b""
    r2.execute_command("ACL", "SETUSER", "alice", "on", ">p1", "~app:*", "%R~ro:*", "+get", "&news")
    u = getuser(r2, "alice")
    assert u["flags"] == [b"on"]
    assert u["passwords"] == [hashlib.sha256(b"p1").hexdigest().encode()]
    assert u["commands"] == b"-@all +get"
    assert u["keys"] == b"~app:* %R~ro:*"
    assert u["channels"] == b"&news"
    lines = r2.execute_command("ACL", "LIST")
    assert (f"user alice on #{hashlib.sha256(b'p1').hexdigest()} ~app:* %R~ro:* resetchannels &news "
            f"-@all +get").encode() in lines
    assert any(line.startswith(b"user default on") for line in lines)
    assert set(r2.execute_command("ACL", "USERS")) >= {b"alice", b"default"}
    assert r2.execute_command("ACL", "GETUSER", "nobody") is None
    # allkeys / resetkeys / allcommands / nocommands / nopass / resetpass
    r2.execute_command("ACL", "SETUSER", "alice", "allkeys", "allcommands", "nopass")
    u = getuser(r2, "alice")
    assert u["keys"] == b"~*" and u["commands"] == b"+@all" and b"nopass" in u["flags"]
    assert u["passwords"] == []
    r2.execute_command("ACL", "SETUSER", "alice", "resetkeys", "~x", "nocommands", "resetpass")
    u = getuser(r2, "alice")
    assert u["keys"] == b"~x" and u["commands"] == b"-@all" and b"nopass" not in u["flags"]


def test_setuser_errors_are_redis(r2):
    cases = {
        "bogus": "Syntax error",
        "#abc": "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
        "+nosuchcommand": "Unknown command or category name in ACL",
        "+@nosuchcategory": "Unknown command or category name in ACL",
    }
    for rule, why in cases.items():
        with pytest.raises(redis.ResponseError) as e:
            r2.execute_command("ACL", "SETUSER", "bob", "on", rule)
        assert str(e.value) == f"Error in ACL SETUSER modifier '{rule}': {why}"
    # A failing rule changes nothing: bob was never created.
    assert r2.execute_command("ACL", "GETUSER", "bob") is None


def test_auth_on_off_nopass_and_hash(gradus, r2):
    r2.execute_command("ACL", "SETUSER", "carol", "on", ">secret", "allkeys", "+@all")
    c = user_client(gradus, "carol", "secret")
    assert c.execute_command("ACL", "WHOAMI") == b"carol"
    with pytest.raises(redis.AuthenticationError):
        user_client(gradus, "carol", "wrong").ping()
    r2.execute_command("ACL", "SETUSER", "carol", "off")
    with pytest.raises(redis.AuthenticationError):
        user_client(gradus, "carol", "secret").ping()
    r2.execute_command("ACL", "SETUSER", "dave", "on", "nopass", "+ping")
    assert user_client(gradus, "dave", "anything").ping()
    digest = hashlib.sha256(b"hashed-pw").hexdigest()
    r2.execute_command("ACL", "SETUSER", "erin", "on", f"#{digest}", "+ping")
    assert user_client(gradus, "erin", "hashed-pw").ping()
    r2.execute_command("ACL", "SETUSER", "erin", f"!{digest}")
    with pytest.raises(redis.AuthenticationError):
        user_client(gradus, "erin", "hashed-pw").ping()


def test_key_patterns_and_read_write_access(gradus, r2):
    r2.execute_command("ACL", "SETUSER", "app", "on", ">pw", "~app:*", "%R~ro:*", "%W~wo:*", "+@all")
    r2.set("ro:1", "shared")
    c = user_client(gradus, "app", "pw")
    c.set("app:1", "v")
    assert c.get("app:1") == b"v"
    assert c.get("ro:1") == b"shared"
    c.set("wo:1", "w")
    key_denied = re.compile(r"(no permissions to access one of the keys|No permissions to access a key)")
    for call in (lambda: c.get("other"), lambda: c.set("ro:1", "x"), lambda: c.get("wo:1")):
        with pytest.raises(redis.exceptions.NoPermissionError, match=key_denied):
            call()
    assert r2.get("ro:1") == b"shared"


def test_categories_and_commands(gradus, r2):
    r2.execute_command("ACL", "SETUSER", "reader", "on", ">pw", "allkeys", "+@read", "-@dangerous", "+set", "-hgetall")
    c = user_client(gradus, "reader", "pw")
    c.set("k", "v")
    assert c.get("k") == b"v"
    assert c.strlen("k") == 1
    # Redis 7.0 says "this user", 7.2 (and Gradus) "User reader".
    for command, call in (("hset", lambda: c.hset("h", "f", "v")), ("keys", lambda: c.keys("*")),
                          ("hgetall", lambda: c.hgetall("h")), ("flushall", lambda: c.flushall())):
        with pytest.raises(redis.exceptions.NoPermissionError,
                           match=rf"(this user|User reader) has no permissions to run the '{command}' command"):
            call()
    r2.execute_command("ACL", "SETUSER", "configreader", "on", ">pw", "+config|get")
    cr = user_client(gradus, "configreader", "pw")
    assert cr.config_get("maxclients")
    with pytest.raises(redis.exceptions.NoPermissionError, match="config|set"):
        cr.config_set("maxclients", "100")


def test_cat_lists_redis_categories(r2):
    cats = r2.execute_command("ACL", "CAT")
    assert cats == [c.encode() for c in (
        "keyspace read write set sortedset list hash string bitmap hyperloglog geo stream pubsub "
        "admin fast slow blocking dangerous connection transaction scripting").split()]
    read = set(r2.execute_command("ACL", "CAT", "read"))
    assert {b"get", b"hgetall", b"zrange", b"lrange", b"smembers", b"exists"} <= read
    assert b"set" not in read
    write = set(r2.execute_command("ACL", "CAT", "write"))
    assert {b"set", b"del", b"hset", b"lpush", b"flushall"} <= write
    dangerous = set(r2.execute_command("ACL", "CAT", "dangerous"))
    assert {b"flushall", b"flushdb", b"keys", b"config|set", b"shutdown"} <= dangerous
    assert b"get" not in dangerous
    with pytest.raises(redis.ResponseError, match="Unknown category 'nosuch'"):
        r2.execute_command("ACL", "CAT", "nosuch")


def test_dryrun_genpass_deluser_whoami(r2):
    r2.execute_command("ACL", "SETUSER", "frank", "on", ">pw", "~k*", "+get")
    assert r2.execute_command("ACL", "DRYRUN", "frank", "get", "k1") == b"OK"
    assert re.fullmatch(rb"(This user|User frank) has no permissions to run the 'set' command",
                        r2.execute_command("ACL", "DRYRUN", "frank", "set", "k1", "v"))
    assert re.fullmatch(rb"(This user|User frank) has no permissions to access the 'other' key",
                        r2.execute_command("ACL", "DRYRUN", "frank", "get", "other"))
    with pytest.raises(redis.ResponseError, match="User 'nobody' not found"):
        r2.execute_command("ACL", "DRYRUN", "nobody", "get", "k")
    with pytest.raises(redis.ResponseError, match="Command 'nosuch' not found"):
        r2.execute_command("ACL", "DRYRUN", "frank", "nosuch")
    assert re.fullmatch(rb"[0-9a-f]{64}", r2.execute_command("ACL", "GENPASS"))
    assert re.fullmatch(rb"[0-9a-f]{8}", r2.execute_command("ACL", "GENPASS", "32"))
    assert len(r2.execute_command("ACL", "GENPASS", "5")) == 2
    with pytest.raises(redis.ResponseError, match="ACL GENPASS argument must be the number of bits"):
        r2.execute_command("ACL", "GENPASS", "0")
    assert r2.execute_command("ACL", "WHOAMI") == b"default"
    assert r2.execute_command("ACL", "DELUSER", "frank", "nobody") == 1
    with pytest.raises(redis.ResponseError, match="The 'default' user cannot be removed"):
        r2.execute_command("ACL", "DELUSER", "default")


def test_log_records_denials(gradus, r2):
    r2.execute_command("ACL", "LOG", "RESET")
    r2.execute_command("ACL", "SETUSER", "gina", "on", "nopass", "~k*", "+get")
    c = user_client(gradus, "gina", "x")
    for call in (lambda: c.get("zz"), lambda: c.set("k1", "v")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            call()
    with pytest.raises(redis.AuthenticationError):
        user_client(gradus, "gina-typo", "x").ping()
    entries = r2.execute_command("ACL", "LOG")
    entries = [dict(zip(e[::2], e[1::2])) if isinstance(e, list) else e for e in entries]
    # redis-py sends CLIENT SETINFO after AUTH and ignores its error: a 7.2 server (Gradus) refuses
    # it to this user and logs that; Redis 7.0 does not know the subcommand.
    entries = [e for e in entries if e[b"object"] != b"client|setinfo"]
    got = [(e[b"reason"], e[b"object"], e[b"username"]) for e in entries]
    assert got == [(b"auth", b"AUTH", b"gina-typo"), (b"command", b"set", b"gina"), (b"key", b"zz", b"gina")]
    assert all(e[b"context"] == b"toplevel" and e[b"count"] == 1 for e in entries)
    assert len(r2.execute_command("ACL", "LOG", "1")) == 1
    assert r2.execute_command("ACL", "LOG", "RESET") == b"OK"
    assert r2.execute_command("ACL", "LOG") == []


def test_reset_returns_to_the_default_user(gradus, r2):
    r2.execute_command("ACL", "SETUSER", "lee", "on", ">pw", "+@all", "-get", "allkeys")
    c = user_client(gradus, "lee", "pw")
    with pytest.raises(redis.exceptions.NoPermissionError):
        c.get("k")
    assert c.execute_command("RESET") in (b"RESET", "RESET")
    assert c.execute_command("ACL", "WHOAMI") == b"default"
    assert c.get("k") is None


def test_save_and_load_the_aclfile(gradus_factory, tmp_path):
    aclfile = tmp_path / "users.acl"
    digest = hashlib.sha256(b"from-file").hexdigest()
    aclfile.write_text(f"# Redis ACL file\nuser henry on #{digest} ~h:* +@read\n")
    if target_is_redis():
        pytest.skip("GRADUS_TARGET=redis: redis-server needs the aclfile in its config file")
    server = gradus_factory("--aclfile", str(aclfile))
    admin = redis_client(server)
    henry = user_client(server, "henry", "from-file")
    assert henry.get("h:1") is None
    with pytest.raises(redis.exceptions.NoPermissionError):
        henry.set("h:1", "v")
    admin.execute_command("ACL", "SETUSER", "ivy", "on", ">ivy-pw", "allkeys", "+@all")
    assert admin.execute_command("ACL", "SAVE") == b"OK"
    text = aclfile.read_text()
    assert f"user henry on #{digest} ~h:* resetchannels -@all +@read" in text
    assert f"user ivy on #{hashlib.sha256(b'ivy-pw').hexdigest()} ~* resetchannels +@all" in text
    assert "ivy-pw" not in text, "only the SHA-256 of a password is written"
    # LOAD replaces the ACL users with the file's; a bad file changes nothing.
    aclfile.write_text(text + "user jack on nopass +get\n")
    admin.execute_command("ACL", "SETUSER", "kim", "on")
    assert admin.execute_command("ACL", "LOAD") == b"OK"
    users = set(admin.execute_command("ACL", "USERS"))
    assert {b"henry", b"ivy", b"jack"} <= users and b"kim" not in users
    aclfile.write_text("user bad on +nosuch\n")
    with pytest.raises(redis.ResponseError, match=r"users.acl:1: .*nosuch"):
        admin.execute_command("ACL", "LOAD")
    assert b"jack" in admin.execute_command("ACL", "USERS")
    # A server restarted on the file has the saved users; a bad file refuses to start, naming the line.
    server.stop()
    code, err = server.run_to_exit()
    assert code not in (0, None) and "users.acl:1:" in err


@pytest.mark.gradus_only
def test_configured_users_are_changed_in_the_configuration(r2):
    with pytest.raises(redis.ResponseError, match="defined by the configuration"):
        r2.execute_command("ACL", "SETUSER", "default", "off")


@pytest.mark.gradus_only
def test_acl_users_are_layered_on_tenants(gradus_factory):
    """An ACL user made by the admin works inside its tenant (tenant=<name>), and its key patterns
    apply to that tenant's key names only."""
    example = Path(__file__).resolve().parents[2] / "examples" / "tenants.toml"
    server = gradus_factory("--config", str(example))
    admin = user_client(server, "admin", "admin-pass")
    beta = user_client(server, "beta", "beta-pass")
    alpha = user_client(server, "alpha", "alpha-pass")
    beta.set("page:1", "beta page")
    beta.set("secret", "beta secret")
    alpha.set("page:1", "alpha page")
    admin.execute_command("ACL", "SETUSER", "beta-web", "on", ">web-pw", "tenant=beta", "~page:*", "+@read")
    assert b"tenant=beta" in b" ".join(admin.execute_command("ACL", "LIST"))
    web = user_client(server, "beta-web", "web-pw")
    assert web.get("page:1") == b"beta page"
    with pytest.raises(redis.exceptions.NoPermissionError):
        web.get("secret")
    with pytest.raises(redis.exceptions.NoPermissionError):
        web.set("page:1", "x")
    # Tenant users may not manage ACL users.
    with pytest.raises(redis.exceptions.NoPermissionError):
        beta.execute_command("ACL", "SETUSER", "x", "on")
    with pytest.raises(redis.ResponseError, match="No tenant named 'nope'"):
        admin.execute_command("ACL", "SETUSER", "y", "tenant=nope")


# Redis 7.2's text; 7.0 (installed here) says "this user has no permissions to access one of the
# channels used as arguments".
NO_CHANNEL = "No permissions to access a channel|no permissions to access one of the channels"


def test_regression_channel_rules_are_enforced(r2, gradus):
    # A user's `&pattern` rules decide which channels it may publish and subscribe to; a
    # PSUBSCRIBE pattern must be one of its patterns literally (Redis' rule).
    r2.execute_command("ACL", "SETUSER", "chan", "on", ">pw", "+@all", "~*", "resetchannels", "&news.*")
    c = user_client(gradus, "chan", "pw")
    try:
        assert c.publish("news.sport", "x") == 0
        with pytest.raises(redis.exceptions.ResponseError, match=NO_CHANNEL):
            c.publish("private", "x")
        with pytest.raises(redis.exceptions.ResponseError, match=NO_CHANNEL):
            c.execute_command("SPUBLISH", "private", "x")
        for command in (["SUBSCRIBE", "news.a", "private"], ["PSUBSCRIBE", "news.a*"]):
            with pytest.raises(redis.exceptions.ResponseError, match=NO_CHANNEL):
                c.execute_command(*command)
        assert c.execute_command("ACL", "DRYRUN", "chan", "PUBLISH", "private", "x") is not None
    finally:
        c.close()
    entries = r2.execute_command("ACL", "LOG")
    reasons = [dict(zip(e[::2], e[1::2])).get(b"reason") for e in entries]
    assert b"channel" in reasons
    # Allowed subscriptions work, and allchannels lifts the rule.
    p = user_client(gradus, "chan", "pw").pubsub()
    p.psubscribe("news.*")
    assert p.get_message(timeout=2)["type"] == "psubscribe"
    p.close()
    r2.execute_command("ACL", "SETUSER", "chan", "allchannels")
    c = user_client(gradus, "chan", "pw")
    assert c.publish("private", "x") == 0
    c.close()


def test_a_user_without_auth_permission_can_log_in_again(gradus, r2):
    """AUTH, HELLO, RESET and QUIT need no ACL permission (Redis skips the command check for
    `no_auth` commands): a user allowed only `+acl` may AUTH again on its connection, while
    PING is refused. Gradus answered its AUTH with NOPERM (redis-py's own test_auth)."""
    r2.acl_setuser("only-acl", enabled=True, passwords=["+pw"], commands=["+acl"])
    try:
        c = user_client(gradus, "only-acl", "pw")
        assert c.execute_command("AUTH", "only-acl", "pw") in (True, b"OK", "OK")
        assert c.execute_command("HELLO", "2")[0] in (b"server", "server")
        with pytest.raises(redis.exceptions.NoPermissionError):
            c.ping()
        assert r2.acl_dryrun("only-acl", "AUTH", "x") in (b"OK", "OK")
        assert c.execute_command("RESET") in (b"RESET", "RESET")
        c.close()
    finally:
        r2.acl_deluser("only-acl")
