"""The simulator restarts a node the way node.replica.replica does: from term, vote, committed config, log
and snapshot only. The commit index is not durable, so a restarted core knows nothing committed
beyond its snapshot until a leader tells it (and a leader-to-be must first commit an entry of its
own term)."""

from __future__ import annotations

import pytest

from harness.sim.cluster import Simulation
from harness.sim.invariants import Invariants, Violation
from node.consensus import Role


def _quiet(seed: int, nodes: int = 3) -> Simulation:
    """No nemesis, no network faults: only client writes, reads and compactions."""
    sim = Simulation(seed, nodes=nodes, steps=0)
    sim.faults = False
    return sim


def _run_until(sim: Simulation, done, limit: int = 200_000) -> None:
    for _ in range(limit):
        if done():
            return
        sim._step()
    raise AssertionError("condition not reached")


def _forgetful_moment(sim: Simulation, slot: int):
    """True once `slot` knows entries committed beyond what its snapshot covers."""
    node = sim.nodes[slot]
    return lambda: node.core is not None and node.core.commit >= node.core.log.offset + 3


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("who", ["follower", "leader"])
def test_restarted_node_forgets_its_commit_index_and_relearns_it(seed, who):
    sim = _quiet(seed)
    _run_until(sim, lambda: len(sim._leaders()) == 1 and sim._leaders()[0].core.commit >= 5)
    leader = sim._leaders()[0]
    node = leader if who == "leader" else next(n for n in sim.nodes if n is not leader)
    _run_until(sim, _forgetful_moment(sim, node.slot))
    before = node.core.commit
    sim._crash(node.slot, node.uuid)
    sim._restart(node.slot)
    core = node.core
    snapshot = core.log.offset
    assert before > snapshot
    # only the snapshot survives as "known committed": the commit index was never on disk
    assert core.commit == snapshot, f"restarted with commit {core.commit}, snapshot {snapshot}"
    assert core.applied == snapshot and node.applied == snapshot and node.commit == snapshot
    assert core.log.last_index() >= before  # the log itself was durable
    assert core.role == Role.FOLLOWER
    # hearing from a leader brings it back to (at least) what it knew before the crash
    _run_until(sim, lambda: node.core.commit >= before)
    assert sim.inv.max_commit >= before


def test_whole_cluster_restart_commits_again_only_through_a_new_term_entry():
    sim = _quiet(5)
    _run_until(sim, lambda: all(n.core.commit >= n.core.log.offset + 3 for n in sim.nodes))
    before = {n.uuid: n.core.commit for n in sim.nodes}
    old_term = max(n.core.term for n in sim.nodes)
    for n in sim.nodes:
        sim._crash(n.slot, n.uuid)
        n.power_cycles += 1  # a power loss everywhere: no message of the old terms still arrives
    for n in sim.nodes:
        sim._restart(n.slot)
    for n in sim.nodes:
        assert n.core.commit == n.core.log.offset < before[n.uuid]

    # until a leader of a new term has an entry of its own term stored on a majority, nothing
    # above the snapshots may be known committed anywhere
    def first_commit_above_snapshot():
        return any(n.core.commit > n.core.log.offset for n in sim.nodes)

    _run_until(sim, first_commit_above_snapshot)
    [leader] = [n for n in sim.nodes if n.core.commit > n.core.log.offset]
    assert leader.core.role == Role.LEADER
    assert leader.core.log.term_at(leader.core.commit) == leader.core.term
    assert leader.core.term > old_term
    _run_until(sim, lambda: all(n.core.commit >= before[n.uuid] for n in sim.nodes))


def test_restarts_from_snapshots_happen_and_stay_safe(monkeypatch):
    """Across seeds with every fault kind, some restarts begin from a snapshot with log entries
    after it that the restarted core does not know to be committed, and no run violates an
    invariant."""
    starts = {"from_snapshot": 0, "uncommitted_suffix": 0}
    original = Simulation._start

    def counting(self, node):
        original(self, node)
        starts["from_snapshot"] += node.core.log.offset > 0
        starts["uncommitted_suffix"] += node.core.log.last_index() > node.core.commit

    monkeypatch.setattr(Simulation, "_start", counting)
    for seed in range(20):
        result = Simulation(seed, steps=3000).run()
        assert result.violation is None, (seed, result.violation)
        assert result.commit_ms is not None, seed
    assert starts["from_snapshot"] > 0 and starts["uncommitted_suffix"] > 0


def test_snapshot_invariant_refuses_uncommitted_or_regressing_snapshots():
    inv = Invariants()
    inv.on_commit("n1", 0, 3, lambda i: 1, 1)
    inv.on_snapshot("n1", 3, 1, 0)
    with pytest.raises(Violation, match="snapshot"):
        inv.on_snapshot("n1", 4, 1, 3)  # not committed
    with pytest.raises(Violation, match="snapshot"):
        inv.on_snapshot("n1", 3, 2, 0)  # a different entry than the committed one
    with pytest.raises(Violation, match="snapshot"):
        inv.on_snapshot("n1", 2, 1, 3)  # backwards
