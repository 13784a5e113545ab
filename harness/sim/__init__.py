"""Deterministic simulators: the pure Raft core (node.consensus), and the whole engine.

The Raft core (`tessera sim`, the default `--stack core`):

- cluster.py: one seeded run. N cores on a virtual clock (ms); a scheduler delivers messages
  with delays (some long enough to reorder), drops and duplicates them, partitions and heals,
  crashes and restarts nodes (a crash keeps only the node's "disk": what node.replica.replica persists,
  i.e. term, vote, committed config, log and snapshot, but not the commit index, so a restarted
  core re-learns what is committed; a power loss also loses its messages still in flight), proposes writes, ReadIndex
  reads, config changes (add learner, promote, remove voter or leader; right and wrong CAS
  index), leadership transfers and step-downs. Targeted faults hit right after an election, a
  commit or a vote. After the fault phase everything heals and the run measures how long until
  a leader commits a fresh proposal (liveness).
- invariants.py: safety checked after every step (one step = one scheduler event): election
  safety, log matching, leader completeness, state-machine safety, commit monotonicity, commit
  durability (no committed entry can be overwritten by an electable replica), one config change
  at a time, no learner counted in a quorum, ReadIndex freshness, term monotonicity.
- runner.py / cli.py: `tessera sim` over many seeds; a failing seed is replayed with its trace.
- script.py: a hand-driven cluster for scenario tests.

The whole engine (`tessera sim --stack full`):
- loop.py / network.py: an asyncio event loop on virtual time whose connections are in-memory
  TCP (latency, partitions, resets) and whose hosts can crash without running any cleanup.
- stack.py: one seed = the production masters, tablet servers and client (node.master,
  node.tserver, node.client) on that loop with SimDisks (harness.sim.disk), a workload through the
  harness runner, a nemesis, the project's checker, and Raft invariants on the live replicas.

The same seed replays the same run bit for bit: all randomness comes from seeded
random.Random instances and events are ordered by (virtual time, sequence number).
"""
