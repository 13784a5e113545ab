"""One-by-one membership change rules (Raft thesis §4.1, Kudu's ChangeConfig), without joint
consensus: each change adds, promotes or removes one member, so the old and new voter sets
differ by at most one voter and any majority of one intersects any majority of the other.
That argument holds only if changes never overlap, hence the gate in `check_allowed`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from node.probes import probe

from .types import (
    CasMismatch,
    ChangeOp,
    ChangePending,
    ConfigChange,
    InvalidChange,
    Member,
    MemberType,
    RaftConfig,
    UnsafeChange,
)

# The refusals a caller's retry must recognise as its own change: the config already is as asked
# (an add of a member, a removal of a non-member), or the change is still uncommitted. Only the
# message crosses the wire, so the client (TesseraClient.change_already_made) and the
# simulator's change-retry fault match these texts, kept here beside the rules that raise them.
ALREADY_MEMBER = "is already a member"
NOT_MEMBER = "is not a member"
CHANGE_PENDING = "a config change is not committed yet"


def check_cas(cas_config_index: int, committed_index: int) -> None:
    """The caller names the committed config it based its change on (Kudu's cas_config_opid
    index), so two administrators cannot each apply a change to a config the other replaced."""
    if cas_config_index != committed_index:
        probe("raft.config_change.cas_mismatch")
        raise CasMismatch(cas_config_index, committed_index)


def check_allowed(pending: bool, commit_term: int | None, term: int) -> None:
    """Refuse a change while another is uncommitted (`pending`), or before the leader has
    committed an entry of its own `term` (`commit_term`: the term of its commit index). Without
    the second rule a new leader could still hold a deposed leader's uncommitted change and
    overlap two changes anyway (Ongaro's one-by-one bug)."""
    if pending:
        probe("raft.config_change.refused_pending")
        raise ChangePending(CHANGE_PENDING)
    if commit_term != term:
        probe("raft.config_change.refused_no_commit_in_term")
        raise ChangePending("leader has not committed an entry in its term yet")


def apply(config: RaftConfig, change: ConfigChange) -> tuple[Member, ...]:
    """The members after `change`, or InvalidChange. A new member joins as a NON_VOTER (it
    catches up without counting in any quorum); only a NON_VOTER can be promoted; the last voter
    can never be removed, as no quorum would remain."""
    current = config.member(change.uuid)
    if change.op == ChangeOp.ADD_NON_VOTER:
        if current is not None:
            raise InvalidChange(f"{change.uuid} {ALREADY_MEMBER}")
        return config.members + (Member(change.uuid, MemberType.NON_VOTER, change.promote),)
    if current is None:
        raise InvalidChange(f"{change.uuid} {NOT_MEMBER}")
    if change.op == ChangeOp.PROMOTE:
        if current.member_type != MemberType.NON_VOTER:
            raise InvalidChange(f"{change.uuid} is already a voter")
        return tuple(
            Member(m.uuid, MemberType.VOTER) if m.uuid == change.uuid else m for m in config.members
        )
    remaining = tuple(m for m in config.members if m.uuid != change.uuid)
    if not any(m.member_type == MemberType.VOTER for m in remaining):
        raise InvalidChange("cannot remove the last voter")
    return remaining


def check_safe_removal(remaining_voters: Sequence[str], viable: Callable[[str], bool]) -> None:
    """Kudu's SafeToEvict for every removal, asked for or automatic: refuse one whose remaining
    voters would not hold a majority that answers now (`viable`: the leader itself, or a peer
    heard from lately). The new config needs a majority of its own voters to commit, so a
    removal that leaves a failed or silent voter beside too few live ones is never committed:
    the tablet is stuck behind it for good, since every later change and election needs that
    majority too."""
    live = sum(1 for v in remaining_voters if viable(v))
    if live < len(remaining_voters) // 2 + 1:
        probe("raft.config_change.refused_unsafe_removal")
        raise UnsafeChange(f"only {live} of the {len(remaining_voters)} remaining voters answered "
                           f"lately: the new config could not commit")


def successor(voters: Sequence[str], leader: str, match: Callable[[str], int]) -> str | None:
    """Who takes over when the leader is asked to remove itself: the voter with the highest
    match (the first such in config order), as it needs the fewest entries before TimeoutNow.
    None if the leader is the only voter."""
    best = None
    for uuid in voters:
        if uuid != leader and (best is None or match(uuid) > match(best)):
            best = uuid
    return best


def promotion_candidate(config: RaftConfig, match: Callable[[str], int], commit: int) -> str | None:
    """The first NON_VOTER marked `promote` that holds every committed entry: what it still
    lacks is the tail being replicated now, so making it a voter cannot stall commits for long."""
    for m in config.members:
        if m.member_type == MemberType.NON_VOTER and m.promote and match(m.uuid) >= commit:
            return m.uuid
    return None
