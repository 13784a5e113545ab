"""`tessera master leader-step-down` on real processes: the leader master hands the catalog's
leadership to a named master (a later term, no election timeout waited out) or gives it up, the
masters go on serving DDL, and a master that is not a member is refused before any call."""

import pytest
from test_master_membership_e2e import _info, _use, tessera
from waiting import until

from node.tools.local_cluster import LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
MASTERS = ("m1", "m2", "m3")


def _leader(cluster):
    infos = [i for n in MASTERS if (i := _info(cluster, n)) is not None and i.role == "LEADER"]
    return max(infos, key=lambda i: i.term) if infos else None


def test_the_leader_master_hands_over_to_a_named_master_or_steps_down(tmp_path):
    c = LocalCluster(tmp_path / "lc", masters=3, tservers=3)
    c.up(timeout=90)
    try:
        masters = [c.daemons[n].addr for n in MASTERS]
        _use(masters, create="before")
        old = until(lambda: _leader(c), "a leader master")
        new = next(p.uuid for p in old.masters if p.uuid != old.uuid)

        out = tessera(masters, "master", "leader-step-down", "--new-leader", "no-such-master")
        assert out.returncode == 1 and "is not a member of the masters" in out.stderr, out
        assert _leader(c).uuid == old.uuid  # refused before any call

        out = tessera(masters, "master", "leader-step-down", "--new-leader", new)
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"leader master {old.uuid} (term {old.term}) stepped down" in out.stdout
        moved = until(lambda: (i := _leader(c)) is not None and i.uuid == new and i, f"{new} to lead")
        assert moved.term > old.term
        assert _use(masters, create="after-transfer", read_from=["before"]) == ["before"]

        out = tessera(masters, "master", "leader-step-down")
        assert out.returncode == 0, out.stdout + out.stderr
        later = until(lambda: (i := _leader(c)) is not None and i.term > moved.term and i,
                      "a leader master of a later term", timeout=60)
        assert later is not None
        assert _use(masters, create="after-step-down",
                    read_from=["before", "after-transfer"]) == ["before", "after-transfer"]
    finally:
        c.down()
