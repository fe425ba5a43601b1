"""A replica's link to its primary is a `master` client (Redis' master client): CLIENT LIST shows
it with `flags=M`, and `CLIENT KILL TYPE master` closes it; the replica then reconnects."""

from __future__ import annotations

import pytest

from test_replication import client, info, start_pair, wait_link_up, wait_until

pytestmark = pytest.mark.gradus_only


def test_the_link_to_the_primary_is_listed_and_killed_as_a_master_client(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    r = client(replica)
    masters = r.client_list(_type="master")
    assert len(masters) == 1, masters
    assert masters[0]["flags"] == "M"
    assert masters[0]["addr"] == f"{primary.host}:{primary.port}"
    # Ordinary clients do not include it.
    assert all(c["flags"] != "M" for c in r.client_list(_type="normal"))
    assert r.execute_command("CLIENT", "KILL", "TYPE", "master") == 1
    # The replica reconnects and keeps following.
    wait_until(lambda: len(r.client_list(_type="master")) == 1, what="the link back")
    wait_link_up(replica)
    client(primary).set("after", "kill")
    assert client(primary).execute_command("WAIT", 1, 5000) == 1
    assert r.get("after") == b"kill"
    assert int(info(primary, "stats")["sync_partial_ok"]) >= 1
