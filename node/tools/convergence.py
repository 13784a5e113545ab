"""Replica convergence, like Kudu's `ksck --checksum_scan`: once a run is quiet, the live
replicas of each tablet must reach the same applied index and then hold the same rows.

A history cannot show this: a follower that applied an entry differently (or lost one on disk)
serves no client read until it leads, and a run can end before it ever does. Replicas are
compared only at equal applied indexes, since a state machine is only defined per index. Replicas
that are not RUNNING (failed, tombstoned, copying), are outside the committed config, or whose
server did not answer are listed but never compared.

`compare` and `first_differing_key` are pure; `converge` polls through an injected `ask`, and
`check_convergence` asks through anything with tablet servers' `ask_each`, so the harness's end of
run check (its DB adapter, TesseraDB), `tessera cluster ksck --checksum-scan` (its
`Servers`) and the loopback tests share one implementation. It is the engine's, beside ksck, as
Kudu's checksum scan is: the engine imports nothing from the harness or the checkers.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from node.protocol import ChecksumReport, ChecksumScan, TabletChecksum

Ask = Callable[[ChecksumScan], dict[str, ChecksumReport]]  # host -> reply, for hosts that answered


def _members(replicas: dict[str, TabletChecksum]) -> set[str]:
    """The committed config as the most recent replica knows it (highest term, a leader first):
    a replica removed while partitioned may still believe it is a member."""
    running = [t for t in replicas.values() if t.state == "RUNNING"]
    if not running:
        return set()
    newest = max(running, key=lambda t: (t.term, t.role == "LEADER"))
    return set(newest.members)


def _voters(replicas: dict[str, TabletChecksum]) -> set[str]:
    """The committed config's voters as the most recent replica knows them (every member when
    it does not say which vote)."""
    running = [t for t in replicas.values() if t.state == "RUNNING"]
    if not running:
        return set()
    newest = max(running, key=lambda t: (t.term, t.role == "LEADER"))
    return set(newest.voters or newest.members)


def _in_effect(replicas: dict[str, TabletChecksum]) -> tuple[set[str], str]:
    """The voters of the config in effect on the RUNNING replica with the newest log, and the
    leader that appended it if that change is pending and known (else ""): a change appended
    and not yet committed is in effect (a Raft config counts from its append), and an election
    needs the newest log's vote. Empty when no replica says (an older server)."""
    told = [t for t in replicas.values() if t.state == "RUNNING" and t.last_op and t.active_voters]
    if not told:
        return set(), ""
    newest = max(told, key=lambda t: tuple(t.last_op))
    return set(newest.active_voters), newest.pending_by


def _replica(t: TabletChecksum, uuid: str, note: str) -> dict:
    out = {"uuid": uuid, "state": t.state, "role": t.role, "term": t.term, "commit": t.commit,
           "applied": t.applied, "checksum": t.checksum, "rows": t.rows, "compared": not note}
    if note:
        out["note"] = note
    if t.error:
        out["error"] = t.error
    return out


def compare(replies: dict[str, ChecksumReport], asked: list[str], final: bool = False,
            replication_factor: int | None = None) -> dict:
    """The convergence result for one round of replies (host -> report) from the `asked` hosts.
    Invalid if replicas at the same applied index differ; unknown if nobody answered, some live
    replica is behind the others, or a tablet has no leader; else valid. On the `final` round
    a tablet still without a leader is invalid when a majority of its committed config's voters
    is not FAILED (and, when some host did not answer, answered not FAILED: a voter on a host
    the faults left down is not known to be live; unknown then): once faults are healed such a tablet must serve again, and one that cannot
    has lost its data's availability for good, which no history of ops on other tablets would
    show. When FAILED voters (damaged on purpose; with no live majority the master cannot
    replace them) leave no majority, the faults took more than Raft tolerates: the tablet is
    listed in `notes`, not judged. So too when a change is pending (in effect, not committed)
    on the newest log, its majority is FAILED, and the leader that appended it is among the
    FAILED: that leader was live when it appended, so a failure after the change took the
    majority, not the change. When that leader is live or not known, the change may be an
    unsafe removal (appended beside a voter already FAILED) or a safe one that a later failure
    overtook, and no replica's state orders the failure and the append: the verdict is
    unknown (`pending-majority-failed` in `notes`), never valid. A FAILED
    member the master could have replaced (some server answered that holds no replica of the
    tablet) keeps the rounds going, since the master replaces such members at once; on the
    `final` round one still there is a note (`failed-replica-not-replaced`): an availability
    gap, which the verdict does not count. So too a tablet with more committed voters than
    `replication_factor` (when given): the master removes the excess, so the rounds go on,
    and on the `final` round it is a note (`over-replicated`)."""
    uuid_of = {host: rep.uuid for host, rep in replies.items()}
    by_tablet: dict[str, dict[str, TabletChecksum]] = {}
    for host, rep in replies.items():
        for t in rep.tablets:
            by_tablet.setdefault(t.tablet_id, {})[host] = t
    tablets, errors, behind, leaderless, unavailable = [], [], {}, [], []
    undecided: list[str] = []  # leaderless tablets the end state cannot judge (see below)
    unanswered: list[str] = []  # leaderless tablets whose live majority is not known to be live
    unreachable = sorted(set(asked) - set(replies))
    repairing: list[str] = []  # tablets with a FAILED member and a server free to replace it
    excess: list[str] = []  # tablets with more voters than the replication factor
    for tid in sorted(by_tablet):
        reps = by_tablet[tid]
        if all(t.state == "TOMBSTONED" for t in reps.values()):
            continue  # a deleted tablet
        members = _members(reps)
        notes = {h: ("not RUNNING" if t.state != "RUNNING" else
                     "not in the committed config" if uuid_of[h] not in members else "")
                 for h, t in reps.items()}
        live = {h: t for h, t in reps.items() if not notes[h]}
        applied = max((t.applied for t in live.values()), default=None)
        for h, t in live.items():
            if t.applied != applied:
                notes[h] = f"behind: applied {t.applied} < {applied}"
                behind.setdefault(tid, []).append(h)
        compared = {h: t for h, t in live.items() if not notes[h]}
        unreplaced = sorted(h for h, t in reps.items()
                            if t.state == "FAILED" and uuid_of[h] in members)
        spares = sorted(set(replies) - set(reps))  # answered, and hold no replica of it
        if unreplaced and spares:
            repairing.append(tid)
            if final:
                unavailable.append({
                    "type": "failed-replica-not-replaced", "tablet": tid,
                    "replicas": unreplaced, "spares": spares,
                    "explanation": f"tablet {tid} still counts the FAILED replica(s) on "
                                   f"{', '.join(unreplaced)} among its members after the heal, "
                                   f"though {', '.join(spares)} could hold a replacement: one "
                                   f"failure less from unavailable than its replication factor "
                                   f"says"})
        voters = _voters(reps)
        if replication_factor is not None and len(voters) > replication_factor:
            excess.append(tid)
            if final:
                unavailable.append({
                    "type": "over-replicated", "tablet": tid, "voters": sorted(voters),
                    "explanation": f"tablet {tid} keeps {len(voters)} voters after the heal, "
                                   f"more than its replication factor {replication_factor}: a "
                                   f"replica's disk and a quorum's traffic more"})
        tablets.append({"tablet": tid, "applied_index": applied,
                        "replicas": {h: _replica(t, uuid_of[h], notes[h]) for h, t in sorted(reps.items())},
                        "missing": sorted(members - {uuid_of[h] for h in reps})})
        if not any(t.role == "LEADER" for t in live.values()):
            states = ", ".join(f"{h} {t.state} {t.role or '-'}" for h, t in sorted(reps.items()))
            failed_uuids = {uuid_of[h] for h, t in reps.items() if t.state == "FAILED"}
            pending, appended_by = _in_effect(reps)
            # A pending change whose own leader has since FAILED was appended before that
            # failure, when its voters answered (the safe-removal rule): the failure, not the
            # change, took its majority. One a live or unknown leader appended is judged below.
            pending_lost = pending != voters and _majority_failed(pending, failed_uuids)
            if pending_lost and appended_by in failed_uuids:
                voters = pending
                which = f"voters in the config in effect (a change {appended_by} appended, not committed)"
            else:
                which = "committed voters"
            failed = failed_uuids & voters
            if _majority_failed(voters, failed_uuids):  # the faults took the majority
                unavailable.append({
                    "type": "majority-failed", "tablet": tid,
                    "explanation": f"tablet {tid} has no leader: {len(failed)} of its "
                                   f"{len(voters)} {which} are FAILED (the logs check says "
                                   f"whether by the disk fault), so no majority is left to "
                                   f"elect one: {states}"})
            else:
                leaderless.append(tid)
                if final and pending_lost:
                    # A live (or unknown) leader appended a change whose voters are now mostly
                    # FAILED: an unsafe removal if one was FAILED already, more faults than Raft
                    # tolerates if the failure came after. Nothing reported orders the two.
                    undecided.append(tid)
                    unavailable.append({
                        "type": "pending-majority-failed", "tablet": tid, "explanation":
                            f"tablet {tid} has no leader: {len(failed_uuids & pending)} of the "
                            f"{len(pending)} voters of the config in effect on the newest log (a "
                            f"change {appended_by or 'an unknown leader'} appended, not "
                            f"committed) are FAILED. Whether a voter failed before the change "
                            f"was appended (an unsafe removal, the engine's fault) or after it "
                            f"(the faults took more than Raft tolerates) the replicas' state "
                            f"cannot say: {states}"})
                elif final and not _majority(voters, {uuid_of[h] for h, t in reps.items()
                                                      if t.state != "FAILED"}) and unreachable:
                    # Voters on hosts that did not answer are not known to be live: a tablet
                    # server the faults left down (one that died on a failing disk as it
                    # started) is the run's gap, not the engine's.
                    unanswered.append(tid)
                    unavailable.append({
                        "type": "voters-unanswered", "tablet": tid, "explanation":
                            f"tablet {tid} has no leader, and its voters that answered and are "
                            f"not FAILED are no majority; {', '.join(unreachable)} did not "
                            f"answer: {states}"})
                elif final:
                    errors.append({"type": "no-leader", "tablet": tid, "explanation":
                                   f"tablet {tid} has no leader after the heal, though most of "
                                   f"its committed voters are not FAILED: {states}"})
        if len({t.checksum for t in compared.values()}) > 1:
            sums = {h: t.checksum for h, t in sorted(compared.items())}
            errors.append({
                "type": "divergent-replicas", "tablet": tid, "applied_index": applied,
                "replicas": sorted(compared), "checksums": sums, "first_differing_key": None,
                "explanation": f"at applied index {applied} the replicas of tablet {tid} hold "
                               f"different rows: " + ", ".join(f"{h} CRC32C {c}" for h, c in sums.items())})
    result = {"checker": "convergence", "tablets": tablets, "errors": errors, "notes": unavailable,
              "unreachable": unreachable}
    if errors:
        return {**result, "verdict": "invalid"}
    if not replies:
        return {**result, "verdict": "unknown", "reason": "no tablet server answered"}
    if behind:
        lag = "; ".join(f"{tid}: {', '.join(sorted(hs))}" for tid, hs in sorted(behind.items()))
        return {**result, "verdict": "unknown",
                "reason": f"live replicas never reached the same applied index ({lag})"}
    if undecided:
        return {**result, "verdict": "unknown",
                "reason": f"no leader, and a pending change's voters mostly FAILED, in an order "
                          f"the replicas cannot tell: {', '.join(undecided)}"}
    if unanswered:
        return {**result, "verdict": "unknown",
                "reason": f"no leader, and no live majority answered ({', '.join(unreachable)} "
                          f"did not answer): {', '.join(unanswered)}"}
    if leaderless:
        return {**result, "verdict": "unknown", "reason": f"no leader: {', '.join(leaderless)}"}
    if repairing and not final:  # the master replaces FAILED members: give it the time
        return {**result, "verdict": "unknown",
                "reason": f"FAILED members not yet replaced: {', '.join(repairing)}"}
    if excess and not final:  # and removes voters beyond the replication factor
        return {**result, "verdict": "unknown",
                "reason": f"voters beyond the replication factor not yet removed: "
                          f"{', '.join(excess)}"}
    return {**result, "verdict": "valid"}


def _majority(voters: set[str], uuids: set[str]) -> bool:
    """Whether `uuids` hold more than half of `voters`."""
    return len(voters & uuids) > len(voters) // 2


def _majority_failed(voters: set[str], failed: set[str]) -> bool:
    """Whether FAILED replicas hold half of `voters` or more: no election can be won."""
    return bool(voters) and len(voters - failed) <= len(voters) // 2


def first_differing_key(keys: dict[str, list[tuple[str, int]]]) -> str | None:
    """The smallest key whose row is missing on, or hashes differently on, some replica."""
    rows = {host: dict(pairs) for host, pairs in keys.items()}
    for key in sorted(set().union(*rows.values()) if rows else ()):
        if len({r.get(key) for r in rows.values()}) > 1:
            return key
    return None


def converge(ask: Ask, asked: list[str], timeout: float, interval: float = 0.5,
             replication_factor: int | None = None) -> dict:
    """Poll until the result is decided (valid or invalid) or `timeout` passes; then name the
    first differing key of each divergent tablet, from a second scan with row hashes."""
    deadline = time.monotonic() + timeout
    while True:
        final = time.monotonic() >= deadline
        result = compare(ask(ChecksumScan()), asked, final, replication_factor)
        if result["verdict"] != "unknown":
            break
        if final:
            result["reason"] += f" within {timeout:g} s"
            break
        time.sleep(interval)
    for err in (e for e in result["errors"] if e["type"] == "divergent-replicas"):
        replies = ask(ChecksumScan(err["tablet"], with_keys=True))
        scans = {h: replies[h].tablets[0] for h in err["replicas"]
                 if h in replies and replies[h].tablets and replies[h].tablets[0].keys is not None}
        if len(scans) >= 2 and len({t.applied for t in scans.values()}) == 1:
            err["first_differing_key"] = first_differing_key({h: t.keys or [] for h, t in scans.items()})
            err["explanation"] += f"; first differing key: {err['first_differing_key']!r}"
    return result


def check_convergence(db, timeout: float = 30.0, replication_factor: int | None = None) -> dict:
    """`db`: anything with `hosts` (each with `.name`) and `ask_each(hosts, daemon, method, reply,
    request)`, like the harness's TesseraDB or ksck's `Servers`. Asks for the replicas' checksums
    (`ts.checksum`) until the live replicas of each tablet agree on an applied index, then compares
    their rows. Returns the checker result (see `compare`)."""
    hosts = list(db.hosts)

    def ask(req):
        return db.ask_each(hosts, "tserver", "ts.checksum", ChecksumReport, req)

    return converge(ask, [h.name for h in hosts], timeout,
                    replication_factor=replication_factor)
