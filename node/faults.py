"""Fault-injection flags: deliberate consensus bugs, so a chaos run can prove the harness catches
them (Kudu's `--fault_*` flags). Like Kudu's, they are unsafe and refused unless
`unlock_unsafe_flags` is set too.

This module is the one source of every fault flag's name, default (off) and help text, and of
the unlock rule; the daemon config, the components and the tests all read them from here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields

UNLOCK = "unlock_unsafe_flags"
UNLOCK_HELP = "allow the fault_* flags below, which break Raft on purpose (harness self-tests)"


def _fault(help_: str):
    return field(default=False, metadata={"help": help_})


@dataclass(frozen=True)
class Faults:
    """Which deliberate bugs are on. Every field is a flag named after it, off by default."""

    fault_ack_before_fsync: bool = _fault(
        "WAL: acknowledge each group before its fsync (it is synced only when the next group "
        "is written), so a crash that loses unsynced writes loses acknowledged entries")
    fault_read_without_leadership: bool = _fault(
        "reads: a leader answers from local state without a ReadIndex round or a lease, and "
        "never steps down for lack of a quorum, so a partitioned old leader serves stale reads")
    fault_vote_skip_log_check: bool = _fault(
        "Raft: grant votes and pre-votes without checking that the candidate's log is at least "
        "as up to date as ours, so a stale candidate can win and commit its own entries where "
        "others were already committed")
    fault_commit_prior_term_by_count: bool = _fault(
        "Raft: a leader commits an entry of an earlier term as soon as a majority stores it, "
        "without an entry of its own term (Raft figure 8), so a node that never had it can "
        "still win an election and overwrite a committed, acknowledged entry: lost or changed "
        "writes, divergent replicas")
    fault_keep_conflicting_suffix: bool = _fault(
        "Raft: a follower whose uncommitted entries conflict with the leader's keeps its own "
        "instead of truncating them, and acknowledges the leader's as stored, so once they "
        "commit it applies different writes than its peers: divergent replicas, lost or "
        "phantom writes")
    fault_apply_uncommitted_at_bootstrap: bool = _fault(
        "start-up: apply every entry in the local WAL, including the uncommitted tail that a new "
        "leader may later replace, so the replica diverges from its peers")
    fault_copy_overwrite_cmeta: bool = _fault(
        "tablet copy: take the source's term with no vote instead of merging with the local "
        "consensus metadata, so a replica copied over its tombstone can go back in term or "
        "forget its vote and vote twice in one term")
    fault_vote_twice_in_term: bool = _fault(
        "Raft: grant a vote to a second candidate of a term after voting for another; the "
        "consensus metadata refuses to save the second vote, so the replica goes FAILED on "
        "that guard (SAFETY) instead of electing two leaders")
    fault_count_unsynced_own_entries: bool = _fault(
        "Raft: a leader counts its own new entries toward a commit as soon as it hands them "
        "to its WAL, not once they are durable, so one follower's answer commits an entry "
        "that a power loss of the leader leaves on that follower alone: a new leader elected "
        "without it overwrites a committed, acknowledged write")
    fault_skip_dedup: bool = _fault(
        "tablet: ignore the (session, seq) retry deduplication, so a retried write applies twice")
    fault_ignore_session_owner: bool = _fault(
        "tablet: let any identity use any session (no owner check, no per-identity bound), so "
        "another user's writes into a session leave results the owner's writes are answered "
        "from, never applied")

    def enabled(self) -> list[str]:
        """Names of the flags that are on."""
        return [f.name for f in fields(self) if getattr(self, f.name) != f.default]


def flags() -> dict[str, tuple[bool, str]]:
    """name -> (default, help) of the unlock flag and every fault flag."""
    out = {UNLOCK: (False, UNLOCK_HELP)}
    out.update({f.name: (f.default, f.metadata["help"]) for f in fields(Faults)})
    return out


def from_config(values: dict[str, object]) -> Faults:
    """The Faults of a daemon config holding every key of flags(); raises UnsafeFlagsLocked."""
    faults = Faults(**{f.name: values[f.name] for f in fields(Faults)})
    check_unlocked(faults, bool(values[UNLOCK]))
    return faults


NO_FAULTS = Faults()


class UnsafeFlagsLocked(ValueError):
    """A fault flag was set without `unlock_unsafe_flags`."""


def check_unlocked(faults: Faults, unlocked: bool) -> None:
    """Refuse any fault flag unless unsafe flags are unlocked: one line naming the flag."""
    if faults.enabled() and not unlocked:
        name = faults.enabled()[0]
        raise UnsafeFlagsLocked(f"{name} is an unsafe flag: it also needs {UNLOCK} = true "
                                f"(--{UNLOCK.replace('_', '-')})")


def warn_enabled(faults: Faults, logger: logging.Logger) -> None:
    """One loud line per fault flag that is on, at start-up."""
    for name in faults.enabled():
        logger.warning("UNSAFE FAULT FLAG ON: %s = true: %s", name, flags()[name][1])
