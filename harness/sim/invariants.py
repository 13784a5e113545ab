"""Raft's safety properties, checked incrementally as the simulated cluster runs.

Each check looks only at what one step changed, so checking after every step stays cheap:
entries are checked when persisted, commits when they advance, leaders when elected.
"""

from __future__ import annotations

from node.consensus import RaftConfig, Role
from node.entry import Entry, EntryType


class Violation(Exception):
    """A safety property failed; the message says which and where."""


class Invariants:
    def __init__(self) -> None:
        self.leader_of_term: dict[int, str] = {}
        self.committed_term: dict[int, int] = {}  # index -> term, from every node's commit index
        self.committed_in: dict[int, int] = {}  # index -> earliest term in which it was committed
        self.max_commit = 0
        self.applied: dict[int, Entry] = {}
        self.entry_prev: dict[tuple[int, int], tuple[int, EntryType, bytes]] = {}

    def on_persist(self, uuid: str, log: list[Entry], first: int) -> None:
        """Log matching: an (index, term) pair names one entry and one predecessor, everywhere."""
        for e in log[first - 1 :]:
            prev_term = log[e.index - 2].term if e.index > 1 else 0
            key = (e.index, e.term)
            seen = self.entry_prev.get(key)
            mine = (prev_term, e.type, e.payload)
            if seen is None:
                self.entry_prev[key] = mine
            elif seen != mine:
                raise Violation(
                    f"log matching: {uuid} holds entry (index {e.index}, term {e.term}) with "
                    f"previous term {prev_term} / {e.type.name} {e.payload!r}, another replica "
                    f"has previous term {seen[0]} / {seen[1].name} {seen[2]!r}"
                )

    def on_role(self, uuid: str, role: Role, term: int, term_at, first_index: int) -> None:
        """`first_index`: below it the leader's log is compacted (a snapshot of applied entries).
        Leader completeness binds leaders of later terms only: a candidate of an older term may
        still win (its votes were cast before the voters moved on) while lacking an entry a newer
        leader has since committed; its appends are then refused for their stale term."""
        if role != Role.LEADER:
            return
        holder = self.leader_of_term.setdefault(term, uuid)
        if holder != uuid:
            raise Violation(f"election safety: {holder} and {uuid} both leader in term {term}")
        for index in range(max(1, first_index - 1), self.max_commit + 1):
            if self.committed_in[index] < term and term_at(index) != self.committed_term[index]:
                raise Violation(
                    f"leader completeness: {uuid} leader of term {term} has term "
                    f"{term_at(index)} at index {index}, committed entry there has term "
                    f"{self.committed_term[index]}"
                )

    def on_commit(self, uuid: str, old: int, new: int, term_at, term: int) -> None:
        """`old` is what this incarnation of the node knew committed: the commit index is not
        durable, so a restart begins again at its snapshot and re-learns (and here re-checks)
        what lies above. Durability across restarts is about entries any node ever committed
        (`committed_term`, `max_commit`): leader completeness and commit durability check those.
        `term` is the node's current term: a node learns of a commit only from a leader of its
        own term, so the smallest term seen is the term in which the entry was committed."""
        if new < old:
            raise Violation(f"commit monotonicity: {uuid} commit went from {old} back to {new}")
        for index in range(old + 1, new + 1):
            t = term_at(index)
            seen = self.committed_term.setdefault(index, t)
            self.committed_in[index] = min(self.committed_in.get(index, term), term)
            if seen != t:
                raise Violation(
                    f"state machine safety: {uuid} committed term {t} at index {index}, "
                    f"another replica committed term {seen} there"
                )
        self.max_commit = max(self.max_commit, new)

    def on_snapshot(self, uuid: str, index: int, term: int, previous: int) -> None:
        """A snapshot (what a restart starts from) covers only committed entries, never goes back."""
        if index < previous:
            raise Violation(f"snapshot: {uuid} snapshot went from index {previous} back to {index}")
        if index > self.max_commit or self.committed_term.get(index) != term:
            raise Violation(
                f"snapshot: {uuid} snapshotted index {index} (term {term}), but what is committed "
                f"there is {self.committed_term.get(index)} (highest commit {self.max_commit})"
            )

    def on_apply(self, uuid: str, entry: Entry) -> None:
        seen = self.applied.setdefault(entry.index, entry)
        if seen != entry:
            raise Violation(
                f"state machine safety: {uuid} applied {entry} at index {entry.index}, "
                f"another replica applied {seen}"
            )

    def on_leader_commit(
        self, uuid: str, index: int, term: int, configs: tuple[RaftConfig, ...], holds
    ) -> None:
        """No learner counted: a majority of voters really stores what the leader commits."""
        for config in configs:
            voters = config.voters()
            if sum(1 for v in voters if holds(v, index, term)) >= len(voters) // 2 + 1:
                return
        raise Violation(
            f"quorum: leader {uuid} committed index {index} (term {term}) but no voter majority "
            f"of its config {[c.voters() for c in configs]} stores it"
        )

    def on_commit_electable(
        self, uuid: str, index: int, term: int, configs: tuple[RaftConfig, ...], logs: dict
    ) -> None:
        """Commit durability: when a leader commits (index, term), any replica lacking that entry
        must be less up to date than a voter majority, so it can never win an election and
        overwrite the entry (the figure-8 hazard). `logs` maps uuid -> disk log."""
        for other, log in logs.items():
            if len(log) >= index and log[index - 1].term == term:
                continue
            mine = (log[-1].term, len(log)) if log else (0, 0)
            if not any(_refused_by_majority(mine, config, logs) for config in configs):
                raise Violation(
                    f"commit durability: leader {uuid} committed index {index} (term {term}) but "
                    f"{other}, which lacks it (last term/index {mine[0]}/{mine[1]}), could still "
                    "collect a voter majority and overwrite it"
                )

    def on_leader_configs(self, uuid: str, config_indexes: list[int]) -> None:
        """One change at a time: a leader's log never holds two config entries above the
        highest index anyone has committed."""
        pending = [i for i in config_indexes if i > self.max_commit]
        if len(pending) > 1:
            raise Violation(
                f"one change at a time: leader {uuid} has config entries {pending} above "
                f"commit index {self.max_commit}"
            )

    def on_loss_claim(self, leader: str, peer: str, acknowledged: int, term_at,
                      peer_log: list[Entry] | None) -> None:
        """A leader says `peer` lost entries it acknowledged (FollowerLostEntries): an error
        an operator must chase (a disk that lost synced writes). The simulated disks never lose
        a synced write, so the peer's log must really lack entry `acknowledged`; if it holds the
        leader's entry there, the leader misread an answer (a duplicate, a reordered refusal).
        `peer_log`: that peer's persisted log from index 1, None if no such replica."""
        if peer_log is None or len(peer_log) < acknowledged:
            return
        theirs, ours = peer_log[acknowledged - 1].term, term_at(acknowledged)
        if ours is None or theirs == ours:
            raise Violation(
                f"false loss: leader {leader} says {peer} lost entries it acknowledged "
                f"(through index {acknowledged}), but its disk holds entry {acknowledged} of "
                f"term {theirs}"
            )

    def on_read(self, uuid: str, ctx: bytes, index: int, anchor: int) -> None:
        if index < anchor:
            raise Violation(
                f"read index: {uuid} answered read {ctx!r} at index {index}, but index {anchor} "
                "was already committed when the read was requested"
            )


def _refused_by_majority(candidate: tuple[int, int], config: RaftConfig, logs: dict) -> bool:
    voters = config.voters()
    refusing = 0
    for v in voters:
        log = logs.get(v)
        if log and (log[-1].term, len(log)) > candidate:
            refusing += 1
    return refusing >= len(voters) // 2 + 1
