"""`tessera test-all --self-check`: does the harness catch the engine's deliberate bugs?

For each fault flag (node.faults), a recipe: the workload, fault packages and run settings most
likely to expose that bug within a short run. Each recipe runs with its flag on (and unsafe flags
unlocked); the flag counts as caught only when the run is invalid because a checker found an
anomaly a consistency or safety check names. A run that is invalid only because some operation
never succeeded (the stats checker) or a daemon could not start says nothing about the bug, so
it counts as missed, as does a valid or unknown run.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.matrix import Cell, Outcome

UNLOCK = "unlock_unsafe_flags"
# Anomalies that do not show a consistency or safety bug: an f that never succeeded, a daemon
# that never started.
NOT_EVIDENCE = frozenset({("stats", "never-ok"), ("logs", "start-failure")})


def _cell(flag: str, workload: str, nemesis: tuple[str, ...], **overrides) -> Cell:
    return Cell(flag, workload, nemesis, {"flags": {UNLOCK: True, flag: True}, **overrides})


# flag -> the run most likely to expose it, and why. Measured on the 5-host netns cluster with
# the default 600 s budget (time limits 61-115 s): each of the first five recipes caught its flag
# at the first try; the last two (commit_prior_term_by_count, keep_conflicting_suffix) are not
# measured yet.
RECIPES: dict[str, tuple[Cell, str]] = {
    "fault_read_without_leadership": (
        _cell("fault_read_without_leadership", "register", ("leader-isolate", "partition"),
              nemesis_interval=4.0, rate=200.0),
        "an isolated old leader keeps answering its node-bound clients' reads: a stale read "
        "(cas-register linearizability)"),
    "fault_ack_before_fsync": (
        _cell("fault_ack_before_fsync", "set", ("lose-unfsynced",), nemesis_interval=4.0,
              rate=200.0),
        "power loss drops every replica's last, acknowledged but unsynced group: lost adds "
        "(set)"),
    "fault_skip_dedup": (
        _cell("fault_skip_dedup", "set", ("packet", "partition"), nemesis_interval=4.0,
              rate=200.0),
        "writes time out under packet faults and partitions and their retries apply twice: "
        "duplicated elements (set)"),
    "fault_ignore_session_owner": (
        _cell("fault_ignore_session_owner", "register", ("session-intruder",),
              nemesis_interval=3.0, rate=200.0),
        "another user writes into the workloads' sessions just ahead of their seqs: ops applied "
        "in sessions it did not open (logs: session-intrusion), and the owners' writes answered "
        "from its results (cas-register linearizability)"),
    "fault_apply_uncommitted_at_bootstrap": (
        _cell("fault_apply_uncommitted_at_bootstrap", "set",
              ("leader-isolate", "kill-after-heal", "majority-kill"), nemesis_interval=4.0,
              rate=200.0),
        "a killed replica applies its uncommitted tail at restart, which the new leader then "
        "replaces: divergent replicas (convergence) or phantom elements (set)"),
    "fault_vote_skip_log_check": (
        _cell("fault_vote_skip_log_check", "list-append", ("leader-isolate", "majority-kill"),
              nemesis_interval=4.0, rate=200.0),
        "a lagging node wins an election and overwrites committed entries: lost appends (Elle), "
        "divergence or a SAFETY line (logs)"),
    "fault_commit_prior_term_by_count": (
        _cell("fault_commit_prior_term_by_count", "list-append",
              ("kill-after-heal", "majority-kill", "leader-isolate"), nemesis_interval=4.0,
              rate=200.0),
        "leaders come and go with tails of earlier terms, which they commit by counting and a "
        "later leader overwrites: lost appends (Elle), divergence or a SAFETY line (logs)"),
    "fault_keep_conflicting_suffix": (
        _cell("fault_keep_conflicting_suffix", "set",
              ("leader-isolate", "kill-after-heal", "partition"), nemesis_interval=4.0,
              rate=200.0),
        "an isolated old leader keeps its uncommitted tail when it rejoins and applies it where "
        "its peers applied other writes: divergent replicas (convergence) or phantom or lost "
        "elements (set)"),
    "fault_count_unsynced_own_entries": (
        _cell("fault_count_unsynced_own_entries", "list-append",
              ("lose-unfsynced", "leader-isolate", "kill-after-heal"), nemesis_interval=4.0,
              rate=200.0),
        "a leader commits with one follower's answer while its own write is unsynced; power "
        "loss takes that write and a new leader is elected without the entry: lost appends "
        "(Elle) or divergence. Not caught on the netns cluster in one 184 s run (its power "
        "losses reach the hosts further apart than one WAL write lasts); both simulators "
        "catch it (a majority of voters does not store durably what the leader committed)"),
    "fault_copy_overwrite_cmeta": (
        _cell("fault_copy_overwrite_cmeta", "list-append",
              ("membership", "leader-isolate", "kill-after-heal"), nemesis_interval=4.0,
              rate=200.0),
        "a replica removed and added back is copied over its tombstone and forgets its vote in "
        "the term, then votes again: two leaders of one term, lost appends (Elle) or a SAFETY "
        "line (logs). Not measured on the cluster yet; the whole-stack simulator catches it "
        "(vote safety)"),
    "fault_vote_twice_in_term": (
        _cell("fault_vote_twice_in_term", "list-append", ("leader-isolate", "kill-after-heal"),
              nemesis_interval=4.0, rate=200.0),
        "competing candidates after each isolation and restart ask a replica that already voted "
        "in the term, which votes again and FAILs on its consensus metadata's guard: a SAFETY "
        "line (logs). Not measured on the cluster yet; the whole-stack simulator catches it "
        "(safety guard)"),
}


@dataclass(frozen=True)
class Finding:
    """What the self-check concluded about one flag over its runs."""

    flag: str
    caught: int  # attempts in which some run of the flag's cells caught it
    runs: int  # attempts made (each runs every cell of the flag once)
    evidence: list[str]  # "checker: type" that named it, over the runs
    why: str  # every run that did not catch it, and what it said instead

    @property
    def status(self) -> str:
        if self.runs == 0:
            return "not run"
        return "caught" if self.caught == self.runs else "flaky" if self.caught else "missed"


def evidence(o: Outcome) -> list[str]:
    """The checker: anomaly-type pairs of an invalid run that show the bug; [] for any other."""
    if o.verdict != "invalid":
        return []
    return sorted({f"{a['checker']}: {a['type']}" for a in o.anomalies
                   if (a["checker"], a["type"]) not in NOT_EVIDENCE})


def cells(flags: list[str]) -> list[Cell]:
    """The self-check's cells: each flag's chaos recipe; for a flag that acts in the Raft core,
    a simulation cell with the flag on in the simulated cores (harness.sim_cell); and for a
    flag the whole-stack simulator catches (SIM_FULL_RECIPES), a whole-stack simulation cell
    with the flag on in every simulated server."""
    from dataclasses import fields

    from harness.sim.runner import fault_core_options
    from harness.sim_cell import FULL_KIND, KIND
    from node.faults import Faults

    names = {f.name for f in fields(Faults)}
    out = []
    for flag in flags:
        out.append(RECIPES[flag][0])
        if flag in names and set(fault_core_options(Faults(**{flag: True}))) - SIM_BLIND:
            out.append(Cell(f"{flag}/sim", KIND, (), {"flags": {UNLOCK: True, flag: True}},
                            max_time=SIM_TIME_S, overhead=1.0))
        if flag in SIM_FULL_RECIPES:
            # seeds of 60 virtual seconds, as the mutants' catches were measured
            out.append(Cell(f"{flag}/{FULL_KIND}", FULL_KIND, (),
                            {"flags": {UNLOCK: True, flag: True}, "seconds": 60.0},
                            max_time=SIM_FULL_TIME_S, overhead=SIM_FULL_OVERHEAD_S))
    return out


def flags_of(cells: list[Cell]) -> list[str]:
    """The flags the cells check, in order, once each (a flag's cells are `flag`, `flag/sim`)."""
    return list(dict.fromkeys(c.name.split("/")[0] for c in cells))


SIM_TIME_S = 20.0
# The whole-stack simulator (tessera sim --stack full) runs seeds until its time is up, on every
# core. tests/test_sim_stack.py measures each flag below caught within MUTANT_SEED_CAP = 80 seeds
# from seed 100 (most within 4; apply-uncommitted-at-bootstrap is the rarest, 1 or 2 seeds in
# 40). A seed takes 2-5 s of one core (60 virtual seconds; a failing seed often stops early), so
# 80 seeds need about 150 s on 2 cores, less on more.
SIM_FULL_TIME_S = 150.0
SIM_FULL_OVERHEAD_S = 5.0  # spawning the worker processes
# flag -> what the whole-stack simulator sees of it
SIM_FULL_RECIPES: dict[str, str] = {
    "fault_ack_before_fsync": "a crash loses an acknowledged WAL group: state machine safety, "
                              "or a lost write (checker)",
    "fault_apply_uncommitted_at_bootstrap": "a restarted replica applies its uncommitted tail: "
                                            "applied state differs at one index",
    "fault_read_without_leadership": "an isolated old leader answers reads from stale state: "
                                     "not linearizable (register checker)",
    "fault_skip_dedup": "a retried write applies twice (checker: duplicated or lost values)",
    "fault_copy_overwrite_cmeta": "a replica copied over its tombstone forgets its term or vote: "
                                  "term monotonicity or vote safety",
    "fault_vote_twice_in_term": "a replica votes twice in a term and FAILs on its consensus "
                                "metadata's guard, often before the test table is writable: "
                                "safety guard (the FAILED replica's error quoted)",
    "fault_count_unsynced_own_entries": "a leader commits on one follower's answer while its "
                                        "own WAL write is unsynced: durable quorum (in the "
                                        "cell's swarm seeds whose mix draws a slow fsync)",
}
# Core options whose bug shows only in what reads return, which the simulator does not check.
SIM_BLIND = frozenset({"check_quorum"})  # thousands of seeds: a core bug the simulator can see shows in far fewer


def classify(flag: str, outcomes: list[Outcome]) -> Finding:
    """An attempt runs each cell of the flag once (its recipe, and its simulation cell if any)
    and catches the flag when any of them does. The flag is caught when every attempt caught
    it, flaky when some did."""
    ran = [o for o in outcomes if (o.cell == flag or o.cell.startswith(f"{flag}/"))
           and o.verdict != "not run"]
    attempts = {o.attempt for o in ran}
    caught = {o.attempt for o in ran if evidence(o)}
    named = sorted({e for o in ran for e in evidence(o)})
    missed = [o for o in ran if not evidence(o)]
    why = "; ".join(f"{o.cell}: {o.verdict}" + (f" ({o.why})" if o.why else "") for o in missed)
    return Finding(flag, len(caught), len(attempts), named, why)


def exit_code(findings: list[Finding]) -> int:
    """0 only when every flag was caught in every run."""
    return 0 if findings and all(f.status == "caught" for f in findings) else 1


def report(findings: list[Finding]) -> str:
    lines = []
    for f in findings:
        line = f"{f.flag}: {f.status} ({f.caught}/{f.runs} runs)"
        if f.evidence:
            line += f" by {', '.join(f.evidence)}"
        if f.why:
            line += f"; runs that did not catch it: {f.why}"
        lines.append(line)
    return "\n".join(lines)
