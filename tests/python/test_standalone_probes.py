"""What clients and tools probe a server with to learn what it is: cluster commands (a
cluster-aware client sends CLUSTER SLOTS/INFO and falls back to one node on Redis' "cluster
support disabled" error), READONLY/READWRITE/ASKING, MODULE LIST/HELP/LOAD, and COMMAND DOCS/INFO
of those commands. Each reply is compared with a real redis-server's, in RESP2 and RESP3."""

from __future__ import annotations

import pytest

from conftest import target_is_redis
from differential import assert_same, assert_same_replies, run_script

pytestmark = pytest.mark.skipif(target_is_redis(), reason="compares Gradus with redis-server")

PROBES = [
    ("CLUSTER", "INFO"), ("CLUSTER", "SLOTS"), ("CLUSTER", "SHARDS"), ("CLUSTER", "NODES"),
    ("CLUSTER", "MYID"), ("CLUSTER", "HELP"), ("CLUSTER", "KEYSLOT", "k"),
    ("CLUSTER", "COUNTKEYSINSLOT", "1"), ("CLUSTER", "GETKEYSINSLOT", "1", "10"),
    ("CLUSTER", "RESET", "HARD"), ("CLUSTER", "ADDSLOTS", "1", "2"), ("CLUSTER", "SETSLOT", "1", "STABLE"),
    ("cluster", "info"), ("CLUSTER", "FOO"), ("CLUSTER", "INFO", "x"), ("CLUSTER", "KEYSLOT"),
    ("CLUSTER",),
    ("READONLY",), ("READWRITE",), ("ASKING",), ("READONLY", "x"),
    ("MODULE", "LIST"), ("MODULE", "HELP"), ("MODULE", "LOAD", "/nonexistent.so"),
    ("MODULE", "LOADEX", "/nonexistent.so"), ("MODULE", "UNLOAD", "m"), ("MODULE", "FOO"),
    ("MODULE", "LIST", "x"), ("MODULE",),
    ("COMMAND", "GETKEYS", "CLUSTER", "INFO"),
    ("PING",),
]


@pytest.mark.parametrize("protocol", [2, 3])
def test_cluster_and_module_probes_answer_as_a_standalone_redis(gradus, redis_server, protocol):
    assert_same_replies(gradus, redis_server, PROBES, protocol)


def test_command_list_names_the_cluster_and_module_commands_and_their_categories(gradus, redis_server):
    def names(server):
        lists = [("COMMAND", "LIST", "FILTERBY", "PATTERN", "*cluster*"),
                 ("COMMAND", "LIST", "FILTERBY", "PATTERN", "module*"),
                 ("COMMAND", "LIST", "FILTERBY", "ACLCAT", "connection")]
        found = [sorted(names) for names in run_script(server, lists)]
        # Gradus has connection commands of its own (CLIENT DURABILITY …): compare Redis' only.
        found[2] = [n for n in found[2] if n in (b"readonly", b"readwrite", b"asking")]
        return found
    assert_same(gradus, redis_server, names)
