"""`tessera master add` asked again after its answer was lost: the leader master committed the
add, then died or was cut off before it answered, and the client asked the next leader, which
finds the new master a member already. That answer means done: the tool goes on to wait for the
new master to be promoted. Before, it reported the add refused (ALREADY_EXISTS), and an operator
(or the chaos harness, as a CI run showed) then wiped a master the config still counted on.

The scenario runs the production masters and the operator tool's own join_master in the
whole-stack simulator (virtual time, in-memory network): a lost answer is made by asking the
leader for the add directly while the new master is cut off from the others (so it stays
empty, INITIALIZING), then running the tool as the retry does. In the second, nothing is cut:
the new master is copied the catalog before the tool runs again, which it refused ("already
has a catalog") until a member with a catalog counted as the add done."""

from __future__ import annotations

import asyncio

import pytest
from waiting import until_checked

from harness.sim.stack import CLIENT_HOST, MASTER_PORT, StackConfig, StackSim
from harness.sim.stack_masters import boot_spare, leader_master
from node import probes
from node.client import TesseraClient
from node.master.catalog import CATALOG
from node.protocol import AddMaster, ConfigState, Peer
from node.rpc import RpcClient
from node.tools.admin import join_master, member_masters, started_master


async def _scenario(sim: StackSim, copied_first: bool) -> dict:
    """The operator's first try at adding the spare master, committed by the leader and its
    answer never read, then the tool run again. Without `copied_first`, the spare is cut off
    from the others meanwhile (it stays empty, INITIALIZING); with it, nothing is cut and the
    tool runs once the leader has copied the spare the catalog."""
    for host in sim.masters:
        sim._boot(host)
    leader = await until_checked(lambda: leader_master(sim), "a leader master")
    spare = boot_spare(sim)
    others = [] if copied_first else sim.masters[:-1]
    for m in others:
        sim.net.cut(spare, m)
    client = TesseraClient([(h, MASTER_PORT) for h in sim.masters[:-1]], timeout=10.0,
                           rpc=RpcClient(connect_timeout=1.0, local_host=CLIENT_HOST))
    try:
        addr = (spare, MASTER_PORT)
        info = await started_master(client, addr, wait=30.0)
        await client.rpc.call((leader, MASTER_PORT), "master.add_master",
                              AddMaster(Peer(info.uuid, *addr)), ConfigState, to_uuid="",
                              timeout=10.0)
        asyncio.get_running_loop().call_later(3.0, lambda: [sim.net.uncut(spare, m)
                                                            for m in others])
        if copied_first:
            await until_checked(lambda: sim.servers[spare].tablets.replicas.get(CATALOG),
                                "the new master copied the catalog")
        role = (await started_master(client, addr)).role
        lines: list[str] = []
        joined = await join_master(client, addr, timeout=60.0, progress=lines.append)
        return {"uuid": info.uuid, "joined": joined.uuid, "lines": lines, "role": role,
                "members": await member_masters(client)}
    finally:
        await client.close()


@pytest.mark.parametrize("copied_first", [False, True], ids=["empty", "copied"])
def test_a_master_add_asked_again_after_its_answer_was_lost_is_done_not_refused(
        tmp_path, copied_first):
    """empty: the second leader answers ALREADY_EXISTS (the tool called that refused, once).
    copied: the tool found the new master with a catalog and refused it ("already has a
    catalog; a new master starts with an empty data dir"), inviting the operator to wipe a
    master the config counts on; a master with a catalog that is a member is the add done."""
    sim = StackSim(StackConfig(seed=3, masters=3, tservers=1), tmp_path)
    try:
        with probes.expect("tools.master_add.already_member") as hit:
            out = sim.loop.run_until_complete(sim.loop.spawn(
                CLIENT_HOST, asyncio.wait_for(_scenario(sim, copied_first), 120.0)))
    finally:
        sim.loop.close()
        sim.loop.set_exception_handler(lambda _loop, _context: None)
    assert out["joined"] == out["uuid"] and out["uuid"] in out["members"], out
    assert (out["role"] != "INITIALIZING") == copied_first and len(out["members"]) == 4, out
    assert any("a member already" in line for line in out["lines"]), out["lines"]
    assert hit["tools.master_add.already_member"] == 1
