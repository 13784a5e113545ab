"""Recorded seeds of the whole-stack simulator under the swarm's catalog-churn bundle, a mix heavy
in leader transfers of the masters' catalog, where the leadership often moves to a master just
added or to one that has not learned the address of a master just added, beside DDL.

- A tablet server cut off while the spare master was added kept the master list it had; once
  back, the spare led the catalog, and the masters it heartbeats were all followers. Followers
  answered nothing of the masters, so it never heard of the spare. Followers now answer with
  their committed config too (tserver.masters.adopted_without_leader).
- The spare was added, leadership moved to a master that had not learned the spare's address
  yet, and the spare's removal read membership from that leader's `master.info`, which listed
  only the members whose address it knew: "not a member", so the spare was stopped and wiped
  while still a voter (master.info.member_address_unknown).
- The spare was started and its add proposed while the masters had no majority: the leader
  appended the config that adds it, which never committed before the spare, once it reached
  the others, found itself in every config they held. It took itself for one of the first
  masters and created a catalog of its own, a second config at index 0. A master without a
  catalog now creates one only if the masters hold the initial config still; otherwise it
  waits to be copied the catalog (master.bootstrap.member_awaits_copy).
- A table dropped 3 s after it was made, while a tablet server copied one of its tablets from a
  peer: the source's files were gone, and its next fetch read them by path and failed with
  FileNotFoundError, an error no handler guarded (REMOTE_ERROR). The source now ends the
  session and refuses with TABLET_NOT_RUNNING, which ends the copy (copy.source.replica_gone)."""

from __future__ import annotations

import asyncio

import pytest

from harness.sim.stack import StackConfig, StackSim
from harness.sim.swarm import LATE_BUNDLES, parse_mix
from node.protocol import MasterInfo, Peer
from node.tools.admin import member_masters

TRANSFERS = LATE_BUNDLES["catalog-churn"]


# (seed, the probe on the path it reached, what the seed shows), one per finding above
SEEDS = [
    (41, "tserver.masters.adopted_without_leader",
     "a tablet server learns a master added while it was cut off"),
    (96, "master.info.member_address_unknown",
     "a master is not wiped while a leader that lacks its address counts on it"),
    (218, "master.bootstrap.member_awaits_copy",
     "a master listed in a config past the initial one waits for the copy"),
    (158, "copy.source.replica_gone",
     "a copy source whose table is dropped mid-copy ends the session and says so"),
]


@pytest.mark.parametrize("seed,probe,_shows", SEEDS, ids=[s[2] for s in SEEDS])
def test_each_recorded_seed_is_valid_and_reaches_its_path(seed, probe, _shows, tmp_path):
    workload = "register" if seed % 2 == 0 else "list-append"
    result = StackSim(StackConfig(seed=seed, workload=workload, seconds=20.0,
                                  mix=parse_mix(TRANSFERS)), tmp_path).run()
    assert result.ok(), (result.violation, result.verdict)
    assert result.probes.get(probe, 0) >= 1, probe


class _Rpc:
    """The admin tool's RpcClient stand-in: each master (by host) answers master.info."""

    def __init__(self, infos: dict[str, MasterInfo]):
        self.infos = infos

    async def call(self, addr, _method, _req, _reply_type, **_kw) -> MasterInfo:
        return self.infos[addr[0]]


class _Client:
    def __init__(self, infos: dict[str, MasterInfo]):
        self.rpc, self.masters, self.timeout = _Rpc(infos), [(h, 7051) for h in infos], 1.0


def test_membership_counts_a_member_the_leader_has_no_address_for():
    """A leader just handed the catalog may not have learned the address of a master just
    added: `masters` leaves it out, `members` does not, and the tool reads `members`."""
    known = [Peer(u, f"h{u}", 7051) for u in "abc"]
    infos = {"ha": MasterInfo("a", "LEADER", "a", 2, known, [], list("abcd"), 5),
             "hb": MasterInfo("b", "FOLLOWER", "a", 2, known, [], list("abcd"), 5)}
    assert asyncio.run(member_masters(_Client(infos))) == set("abcd")
