"""A tablet server takes the master list only from a committed config newer than the one it holds:
a deposed leader master, which still claims to lead and answers with the
config it knew, must not bring back a master its successor removed.

The scenario runs the production masters and tablet server unchanged in the whole-stack
simulator (virtual time, in-memory network), because it needs partitions between masters on
one side and the tablet server on the other, which loopback cannot make. The narrow tests below
feed the real heartbeater replies made by hand, for the ordering rule alone."""

from __future__ import annotations

import asyncio
import dataclasses

from waiting import until_checked

from harness.sim.stack import CLIENT_HOST, MASTER_PORT, StackConfig, StackSim
from harness.sim.stack_checks import CATALOG
from node import probes
from node.protocol import ConfigState, Peer, RemoveMaster, TSHeartbeatResponse
from node.rpc import RpcClient
from node.tserver.heartbeater import Heartbeater

# The master that will be deposed never notices by itself in this run: its check-quorum looks
# back over 400 heartbeat periods (200 virtual seconds), and it never campaigns on its own.
SLOW_MASTER_PERIODS = 400


class _Sim(StackSim):
    """Four masters and one tablet server; the first master is slow to notice it lost its
    quorum, so once partitioned away as leader it stays a deposed leader that claims to lead."""

    def _options(self, host: str):
        opts = super()._options(host)
        if host == self.masters[0]:
            opts.replica = dataclasses.replace(
                opts.replica, leader_failure_max_missed_heartbeat_periods=SLOW_MASTER_PERIODS)
        return opts


def _catalog(sim: _Sim, host: str):
    server = sim.servers.get(host)
    if server is None or not hasattr(server, "uuid"):  # not started yet
        return None
    return server.tablets.replicas.get(CATALOG)


def _leader(sim: _Sim, hosts) -> str | None:
    """The host among `hosts` whose catalog replica leads at the highest term."""
    leaders = [(r.term, h) for h in hosts if (r := _catalog(sim, h)) is not None
               and r.role.name == "LEADER"]
    return max(leaders)[1] if leaders else None


async def _scenario(sim: _Sim) -> dict:
    for host in sim.masters + sim.tservers:
        sim._boot(host)
    a, others = sim.masters[0], sim.masters[1:]
    ts = sim.tservers[0]
    every = {(h, MASTER_PORT) for h in sim.masters}

    first = await until_checked(lambda: _leader(sim, others), "a first leader master")
    tserver = sim.servers[ts]
    await until_checked(lambda: getattr(tserver, "heartbeater", None) is not None
                 and set(tserver.heartbeater.masters) == every, "the server to hear the masters")
    # Hand the catalog's leadership to the slow master, through the real transfer path.
    await sim.loop.spawn(first, _catalog(sim, first).step_down(sim.servers[a].uuid))
    await until_checked(lambda: _leader(sim, sim.masters) == a, "the slow master to lead")
    old_term = _catalog(sim, a).term

    # Cut the leader off from the other masters (the server still reaches those): they elect
    # a successor, which removes one of them from the masters.
    sim.net.partition([[a], others + [ts]])
    new = await until_checked(lambda: (h := _leader(sim, others)) and _catalog(sim, h).term > old_term
                       and h, "a successor leader master")
    gone = next(h for h in others if h != new)
    rpc = RpcClient(connect_timeout=1.0, local_host=CLIENT_HOST)

    async def remove() -> ConfigState:
        try:
            return await rpc.call((new, MASTER_PORT), "master.remove_master",
                                  RemoveMaster(sim.servers[gone].uuid), ConfigState, to_uuid="",
                                  timeout=10.0)
        finally:
            await rpc.close()

    state = await sim.loop.spawn(CLIENT_HOST, remove())
    assert sim.servers[gone].uuid not in {m[0] for m in state.members}
    current = every - {(gone, MASTER_PORT)}
    await until_checked(lambda: set(tserver.heartbeater.masters) == current,
                 "the server to take the successor's master list")

    # Now the server reaches only the deposed leader, which still says it leads and answers
    # with the config it knew, the removed master among them.
    sim.net.partition([[a, ts], others])
    await asyncio.sleep(5.0)  # five heartbeats
    deposed = _catalog(sim, a)
    return {"deposed_role": deposed.role.name, "deposed_term": deposed.term,
            "successor_term": _catalog(sim, new).term, "config_index": state.opid_index,
            "masters": set(tserver.heartbeater.masters), "current": current,
            "gone": (gone, MASTER_PORT)}


def test_a_deposed_leader_master_does_not_restore_a_removed_master(tmp_path):
    sim = _Sim(StackConfig(seed=5, masters=4, tservers=1), tmp_path)
    try:
        out = sim.loop.run_until_complete(asyncio.wait_for(_scenario(sim), 120.0))
    finally:
        sim.loop.close()
        sim.loop.set_exception_handler(lambda _loop, _context: None)
    # The scenario did what it claims: the server heard a leader that had been deposed.
    assert out["deposed_role"] == "LEADER" and out["deposed_term"] < out["successor_term"], out
    assert out["config_index"] > 0, out
    assert out["gone"] not in out["masters"], (
        f"the server took the deposed leader's stale master list: {sorted(out['masters'])}, "
        f"while the committed config (index {out['config_index']}) is {sorted(out['current'])}")
    assert out["masters"] == out["current"], out


# -- the ordering rule alone, on the real heartbeater -----------------------------------------

def _reply(index: int, *hosts: str, term: int = 1, leader: bool = True) -> TSHeartbeatResponse:
    return TSHeartbeatResponse(leader, [], [Peer(h, h, MASTER_PORT) for h in hosts], index, term)


def _heartbeater() -> Heartbeater:
    return Heartbeater(None, [("m1", MASTER_PORT), ("m2", MASTER_PORT)], 1.0, None, 0, None)


def test_the_newer_committed_config_wins_in_either_order():
    for replies in ([_reply(3, "m1", "m2", "m3"), _reply(0, "m1", "m2", term=2)],
                    [_reply(0, "m1", "m2", term=2), _reply(3, "m1", "m2", "m3")]):
        hb = _heartbeater()
        for r in replies:
            hb.adopt_masters(r)
        assert hb.masters == [("m1", MASTER_PORT), ("m2", MASTER_PORT), ("m3", MASTER_PORT)]
        assert hb.masters_config_index == 3


def test_a_reply_without_a_config_leaves_the_list_alone():
    hb = _heartbeater()
    assert not hb.adopt_masters(TSHeartbeatResponse(True, [], [], 7, 4))  # addresses unknown
    assert not hb.adopt_masters(TSHeartbeatResponse(True, [], [], -1, 4))
    assert hb.masters == [("m1", MASTER_PORT), ("m2", MASTER_PORT)]
    assert hb.adopt_masters(_reply(0, "m2"))  # any committed config replaces the command line's
    assert not hb.adopt_masters(_reply(0, "m1"))  # the same index is the same config
    assert hb.masters == [("m2", MASTER_PORT)]


class _Masters:
    """The heartbeater's RpcClient stand-in: each master (by host) answers with its reply."""

    def __init__(self, replies: dict[str, TSHeartbeatResponse]):
        self.replies = replies

    async def call(self, addr, _method, _req, _reply_type, **_kw) -> TSHeartbeatResponse:
        return self.replies[addr[0]]


def test_followers_alone_tell_a_server_of_a_newer_config():
    """The leader may be a master the server does not heartbeat (m3, added while it was cut
    off): the followers it does heartbeat answer with their committed config, taken by the
    same rule as the leader's."""
    rpc = _Masters({"m1": _reply(4, "m1", "m2", "m3", leader=False),
                    "m2": TSHeartbeatResponse(False)})  # one that has no address for m3 yet
    hb = Heartbeater(rpc, [("m1", MASTER_PORT), ("m2", MASTER_PORT)], 1.0, lambda: None, 0, None)
    with probes.expect("tserver.masters.adopted_without_leader"):
        asyncio.run(hb.beat())
    assert hb.masters == [("m1", MASTER_PORT), ("m2", MASTER_PORT), ("m3", MASTER_PORT)]
    assert hb.masters_config_index == 4
