"""The overtake fault (harness.sim.stack_overtake) ends only the flow delays it gave: its end once
cleared both of R's flows to F unconditionally, so a fault that had slowed one of them since
was undone by another's end while it was still in force."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from harness.sim import stack_overtake
from node.consensus import VoteRequest


class Net:
    def __init__(self):
        self.flows: dict = {}
        self.cut = True

    def is_cut(self, a, b):
        return self.cut

    def uncut(self, a, b):
        self.cut = False

    def delay_flow(self, src, dst, opener, seconds):
        if seconds > 0:
            self.flows[(src, dst, opener)] = seconds
        else:
            self.flows.pop((src, dst, opener), None)

    def flow_delayed(self, src, dst, opener):
        return self.flows.get((src, dst, opener), 0.0)


def _run(meanwhile) -> dict:
    """One overtake on tablet t (L, F, R) whose watch sees R's vote request, then `meanwhile(net)`
    before its end; the flows' delays after the end."""
    async def main():
        loop = asyncio.get_running_loop()
        sim = SimpleNamespace(net=Net(), loop=loop, send_hooks=[], _cut=lambda a, b, s: None,
                              servers={"F": SimpleNamespace(uuid="uf", replicas={}),
                                       "R": SimpleNamespace(uuid="ur", replicas={})})
        fault = asyncio.ensure_future(stack_overtake.overtake(
            sim, ["t", "L", "F", "R", 1.2, 0.05, 0.05, 0.5]))
        await asyncio.sleep(0)
        sim.send_hooks[0]("R", "t", "uf", [VoteRequest(2, "ur", "uf", 5, 1)])
        assert sim.net.flows == {("R", "F", "R"): 1.2}
        meanwhile(sim.net)
        await fault
        await asyncio.sleep(0.1)  # past cut_s + more_s: the end has run
        return sim.net.flows
    return asyncio.run(main())


def test_its_end_clears_the_delay_it_gave():
    assert _run(lambda net: None) == {}


def test_its_end_leaves_a_delay_another_fault_gave_since():
    assert _run(lambda net: net.delay_flow("R", "F", "R", 2.0)) == {("R", "F", "R"): 2.0}
    assert _run(lambda net: net.delay_flow("R", "F", "F", 0.7)) == {("R", "F", "F"): 0.7}
