"""The one order in which a Ready is carried out: production (node.replica.replica.Replica._handle) and
both simulators (harness.sim.cluster, harness.sim.script) take their steps from `steps`, so every
transcript and simulator seed exercises the ordering production runs.

Ready's contract (types.Ready) is persist, then send, then apply. Two steps may go earlier,
and this module is where that is decided, as etcd/raft decides it in the core (its
msgsAfterAppend), not by each driver:
- A leader's AppendEntries and heartbeats may leave while it writes the same entries itself
  (Raft thesis 10.2.1): the followers' fsyncs overlap its own. Safe because the leader counts
  itself toward a commit only once its own write is durable, and because nothing such a message
  says depends on the write: so only when the Ready holds no new term or vote (a message sent
  before our vote is durable could outlive a crash that forgets it), and only when every message
  is one a leader sends (a vote or an acknowledgement reports the write, and must wait for it).
  A newly committed config does not hold them: its entry is durable here before the core hands
  it over (RaftCore._config_to_persist), so a crash before its metadata save replays it from
  the log; what they tell followers of the commit is what the log says. Held, a leader awaited
  its own write behind every write queued before it, silent through a slow disk's syncs.
- With those messages gone early, committed entries below the first entry of this write may
  be applied before it: committed means durable on a majority, and a leader's replies then
  leave while it writes the next group. Not when the soft state changes, since applying may
  depend on the role the driver has not taken yet.
- The same Readys may leave their write running in the background (`write_behind`): the driver
  advances the core without waiting, steps the followers' answers meanwhile, and reports the
  write's end with RaftCore.persisted. Until then the leader does not count itself, so two
  followers of three commit without it (etcd/raft's asynchronous storage writes; Kudu's
  local peer is one voter among the others). A lone write then waits for the fastest majority,
  not for the leader's own fsync, which on a busy machine starts last.
"""

from __future__ import annotations

from dataclasses import dataclass

from node.entry import Entry

from .messages import AppendEntries, Heartbeat, Message
from .types import HardState, RaftConfig, Ready

LEADER_MESSAGES = (AppendEntries, Heartbeat)  # what only a leader sends


@dataclass(frozen=True)
class Steps:
    """A Ready as ordered steps: send `send_early`, apply `apply_early`; write `entries`,
    `hard_state`, `committed_config`; send `send`; take the soft state; apply `apply`; serve the
    read states; advance (with `write_behind`, a driver may advance before the write ends)."""

    send_early: tuple[Message, ...]
    apply_early: tuple[Entry, ...]
    entries: tuple[Entry, ...]
    hard_state: HardState | None
    committed_config: RaftConfig | None
    send: tuple[Message, ...]
    apply: tuple[Entry, ...]
    write_behind: bool = False  # the write may finish after advance(written=False)


def steps(rd: Ready, *, unchanged_hard_state: bool = False) -> Steps:
    """`rd` as steps. A driver that finds the Ready's hard state equal to what it holds durably
    passes `unchanged_hard_state`: nothing of it needs writing, and it does not hold messages."""
    hs = None if unchanged_hard_state else rd.hard_state
    early = (bool(rd.entries_to_persist) and hs is None
             and all(type(m) in LEADER_MESSAGES for m in rd.messages))
    apply_early: tuple[Entry, ...] = ()
    if early and rd.soft_state is None:
        first = rd.entries_to_persist[0].index
        apply_early = tuple(e for e in rd.committed_entries if e.index < first)
    return Steps(
        send_early=tuple(rd.messages) if early else (),
        apply_early=apply_early,
        entries=tuple(rd.entries_to_persist),
        hard_state=hs,
        committed_config=rd.committed_config,
        send=() if early else tuple(rd.messages),
        apply=tuple(rd.committed_entries[len(apply_early):]),
        write_behind=early,
    )
