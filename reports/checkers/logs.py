"""The node-log checker: like Jepsen's scan of node logs for panics, it finds what no history can
show, such as an invariant violation a follower noticed or a daemon that never came up.

It reads `run_dir/nodes/<host>/*.log` (what the DB adapter's `collect` fetches) for Python's
`Traceback (most recent call last):` through its exception line (chained tracebacks included;
one right after a rule's line belongs to that line) and for the lines its rules match. The
rules are the system's (harness.deployment.Deployment.log_rules), recorded in test.json as
"log_rules", so every later analysis reads the logs the same way; a run recorded before that
gets Tessera's, `TESSERA_RULES`:

  safety          a line with `SAFETY:` (an invariant violation the engine detected)
  corruption      a line with `CORRUPTION:` (damaged data found on disk)
  failed-replica  a line with `FAILED:` (a replica entered FAILED)
  start-failure   a `tessera master|tserver: ...` line: what the daemon prints when it cannot
                  start (bad config, port in use, unreadable data dir), and what the DB adapter
                  appends when no daemon process appeared at all

A rule is {"type", "regex" (searched in each line), "explanation", "severity"}: an "error"
finding makes the run invalid, a "note" is listed (under "notes") and changes nothing, as an
overloaded node is worth a look but violates nothing. A rule marked "removed_only" (a known bug
of members leaving the cluster) keeps its severity only on a host whose member the membership
nemesis removed in the run; elsewhere its line is an error.

Errors make the run invalid, with one exception, the expected-corruption rule: the disk
nemesis damages a WAL segment or consensus-metadata file on purpose and records, in its
`start-disk` completion, the host, the file and the tablet it hit. The damage is permanent for
the run, so on that host every CORRUPTION or FAILED line (with its traceback) naming that tablet
or that file is the engine reacting correctly: it is reported under "expected", not as an error.
So is a traceback there whose exception line is a corruption error naming them. So is, on any
host, a leader's `SAFETY: follower U lost acknowledged entries` line for that tablet when U is
the damaged server (the completion records its uuid): a WAL truncated at a batch boundary reads
as a torn tail, the replica restarts shorter than it acknowledged, and the leader, seeing it,
replicates the entries again. On a host whose disk the failing-disk fault made fail its syncs, a
FAILED line, traceback or daemon failure whose cause is an I/O error (EIO) is expected too: the
system stopping loudly on a failing disk (never a corruption or safety line, which a failing
disk does not explain). Corruption on any other host, tablet or file, and a follower that
lost entries with no damage injected, are unexpected and invalid. Log lines are not matched by time:
hosts' clocks are skewed by the clock nemesis. A system whose daemon holds one replication group
(etcd) answers damage by refusing to start: its rules marked `after_damage` are expected in the
damaged daemon's log between the line count the nemesis recorded at the damage and the one it
recorded when a repair replaced the daemon. The other way round, damage the engine must
refuse and did not is an error too (`undetected_damage`): a flipped newest WAL batch header
whose replica came back RUNNING.

The watchdog's restarts (history ops of process "nemesis", f "watchdog-restart") are listed:
a daemon died without being killed on purpose, which is worth a look but not a violation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any


def rule(type_: str, regex: str, explanation: str, severity: str = "error",
         after_damage: bool = False, removed_only: bool = False) -> dict[str, Any]:
    """A log rule. `after_damage`: in the log of a daemon the disk nemesis damaged, a line of
    this rule after the damage is the system refusing it (a system with one replication group
    per daemon, such as etcd, whose refusal is to stop). `removed_only`: the rule's severity
    holds on a host whose member the membership nemesis removed in the run; on any other host
    its line is an error (a known bug of leaving members, met where nothing left, is another)."""
    out = {"type": type_, "regex": regex, "explanation": explanation, "severity": severity}
    return {**out, **({"after_damage": True} if after_damage else {}),
            **({"removed_only": True} if removed_only else {})}


TESSERA_RULES = (
    rule("safety", "SAFETY:",
         "an invariant check failed: the engine reached a state it must never reach"),
    rule("corruption", "CORRUPTION:", "the engine found corrupt data that no nemesis damaged"),
    rule("failed-replica", "FAILED:",
         "a replica entered FAILED without injected damage to explain it"),
    rule("start-failure", r"^tessera (master|tserver): ", "a daemon could not start"),
)
EIO_MESSAGE = "input/output error"  # strerror(EIO), as Python and most daemons print it
TRACEBACK = "Traceback (most recent call last):"
TRACEBACK_EXPLANATION = "an unhandled exception"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
MAX_LINES, MAX_CHARS = 40, 4000  # of quoted text per finding


def _get(op: Any, name: str) -> Any:
    return op.get(name) if isinstance(op, dict) else getattr(op, name, None)


def _quote(lines: list[str]) -> str:
    text = "\n".join(lines[:MAX_LINES])
    if len(lines) > MAX_LINES:
        text += f"\n... ({len(lines) - MAX_LINES} more lines)"
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + "\n... (cut)"


def _traceback_end(lines: list[str], i: int) -> int:
    """The index after the traceback starting at lines[i]: its exception line ends it, unless a
    chained traceback follows."""
    j = i + 1
    while j < len(lines):
        line = lines[j]
        if not line.strip() or line[:1] in (" ", "\t") or line.startswith((TRACEBACK, *_CHAINED)):
            j += 1
            continue
        k = j + 1
        while k < len(lines) and not lines[k].strip():
            k += 1
        if k < len(lines) and lines[k].startswith(_CHAINED):
            j = k
            continue
        return j + 1
    return j


def scan_log(text: str, rules: Iterable[dict[str, Any]] = TESSERA_RULES) -> list[dict[str, Any]]:
    """Findings in one log: {"type", "line" (1-based), "lines" (the quoted ones), "end",
    "rule" (None for a traceback)}; a line counts for its first matching rule."""
    compiled = [(re.compile(r["regex"]), r) for r in rules]
    lines = text.splitlines()
    found: list[dict[str, Any]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if TRACEBACK in line:
            end = _traceback_end(lines, i)
            block = lines[i:end]
            prev = found[-1] if found else None
            if prev is not None and prev["type"] != "traceback" and prev["end"] == i:
                prev["lines"] += block  # the marker's own stack (log.exception)
                prev["end"] = end
            else:
                found.append({"type": "traceback", "line": i + 1, "lines": block, "end": end,
                              "rule": None})
            i = end
            continue
        hit = next((r for regex, r in compiled if regex.search(line)), None)
        if hit is not None:
            found.append({"type": hit["type"], "line": i + 1, "lines": [line], "end": i + 1,
                          "rule": hit})
        i += 1
    return found


def injected_damage(ops: Iterable[Any] | None) -> dict[str, set[str]]:
    """host -> the tablet ids and file paths the disk nemesis damaged there."""
    damaged: dict[str, set[str]] = {}
    for op in ops or ():
        value = _get(op, "value")
        if (_get(op, "process") != "nemesis" or _get(op, "f") != "start-disk"
                or not isinstance(value, dict) or "file" not in value):
            continue
        names = damaged.setdefault(value["host"], set())
        names.add(value["file"])
        parts = value["file"].rstrip("/").split("/")
        names.add(value.get("group") or (value.get("replica") or {}).get("tablet")
                  or parts[-2 if "/wals/" in value["file"] else -1])
    return damaged


def damage_lines(ops: Iterable[Any] | None) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """(host, log file name) -> the spans of that daemon's log lines (after, up to) that answer
    damage: from the line count when the disk nemesis damaged its files to the count when a
    repair replaced the daemon (no repair: the end of the log)."""
    spans: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for op in ops or ():
        value = _get(op, "value")
        if _get(op, "process") != "nemesis" or not isinstance(value, dict):
            continue
        if _get(op, "f") == "start-disk" and value.get("log"):
            spans.setdefault((value["host"], value["log"]), []).append(
                (value["log_line"], float("inf")))
        if _get(op, "f") not in ("stop-disk", "heal-disk"):
            continue
        for fixed in value.get("repaired") or ():
            open_ = spans.get((fixed.get("host"), fixed.get("log")), [])
            if open_ and open_[-1][1] == float("inf"):
                open_[-1] = (open_[-1][0], fixed["log_line"])
    return spans


def undetected_damage(ops: Iterable[Any] | None) -> list[dict[str, Any]]:
    """Errors for damage the engine should have refused and did not, its replica RUNNING again:
    - a bit flipped in the newest WAL batch, header or data (the disk nemesis's newest-flip,
      on a killed process's whole batch), the batch cut as a torn tail; a flipped sector stamp
      changes no data and is not judged;
    - a bit flipped in consensus metadata, or in a WAL segment before its newest batch (a
      finished segment, or an earlier batch: no torn write reaches there; the ordinary bitflip
      judges no flip inside the newest batch: newest-flip aims there);
    - a Tessera WAL segment cut short (truncate): a crash never shrinks a preallocated
      segment, so a replica that runs again took the cut for a torn tail and dropped fsynced
      entries it may have acknowledged (node/wal/format.py). etcd repairs a cut WAL as torn by
      design (wal.Repair), so its cuts are judged by the other checkers only."""
    out = []
    for op in ops or ():
        value = _get(op, "value")
        if (_get(op, "process") != "nemesis" or _get(op, "f") != "start-disk"
                or not isinstance(value, dict)):
            continue
        replica = value.get("replica") or {}
        if replica.get("state") != "RUNNING":
            continue
        if value.get("mode") == "newest-flip" and not value.get("stamp"):
            what = (f"a bit flipped at offset {value.get('offset')} of the newest WAL batch "
                    f"(offset {value.get('batch')}) of {value['file']}, and the replica runs "
                    "again: the batch was cut as a torn tail, not refused")
        elif value.get("mode") == "truncate" and "/wals/" in value["file"]:  # Tessera's WAL
            what = (f"{value['file']} was cut from {value.get('from')} to {value.get('to')} "
                    "bytes, and the replica runs again: the cut was taken for a torn tail, "
                    "dropping fsynced entries")
        elif value.get("mode") == "bitflip" and value.get("kind") == "cmeta":
            what = (f"a bit flipped at offset {value.get('offset')} of the consensus metadata "
                    f"{value['file']}, and the replica runs again: its checksum let it through")
        elif (value.get("mode") == "bitflip" and value.get("kind") == "wal"
              and "newest_batch" in value
              and (value["newest_batch"] is None or value["offset"] < value["newest_batch"])):
            # before the newest batch (or in a finished segment): no torn write reaches there
            what = (f"a bit flipped at offset {value.get('offset')} of {value['file']}, before "
                    "its newest batch, and the replica runs again: the damage was not refused")
        else:
            continue
        out.append({"type": "undetected-damage", "host": value["host"], "file": value["file"],
                    "line": 0, "text": f"{replica.get('tablet')}: RUNNING",
                    "explanation": f"{value['host']}: {what}"})
    return out


_INTRUSION = {"poison": "the owners' writes at those seqs are answered from its results, "
                        "never run",
              "close": "the owners' sessions are gone, and their writes' outcomes unknown"}


# What else the intruder got past the servers: its count's key, the error's type, its text and
# explanation (each after the count)
_GOT_PAST = (
    ("overreached", "authorization-bypass",
     ("forbidden calls answered",
      "of a user's calls reserved to the cluster's daemons or superusers (a tablet copy "
      "session, a leader step-down) got past the servers' authorization: a user could read "
      "any replica's files or move leadership")),
    ("clock_pushed", "clock-push",
     ("far-ahead timestamps taken",
      "writes carrying a propagated timestamp hours ahead of the servers' clocks were not "
      "refused: a client could push a server's hybrid clock past every other's")),
)


def session_intrusions(ops: Iterable[Any] | None) -> list[dict[str, Any]]:
    """Errors for what the session-intruder nemesis, a user, got past the engine: ops applied
    in sessions it did not open (`foreign_applied`: a session belongs to the identity that
    opened it), and calls only the cluster's daemons or superusers may make that a server ran
    (`overreached`: a tablet copy session, a step-down), and writes whose propagated timestamp
    was hours ahead that a server did not refuse (`clock_pushed`). README "Security"."""
    out = []
    for op in ops or ():
        value = _get(op, "value")
        if not (_get(op, "process") == "nemesis" and _get(op, "f") == "start-session-intruder"
                and isinstance(value, dict)):
            continue
        if value.get("foreign_applied"):
            out.append({"type": "session-intrusion", "host": "", "file": "", "line": 0,
                        "text": f"{value['step']}: {value['foreign_applied']} applied",
                        "explanation": (f"another user's {value['step']} got "
                                        f"{value['foreign_applied']} ops applied in sessions it "
                                        "did not open: " + _INTRUSION.get(value["step"], ""))})
        for key, kind, what in _GOT_PAST:
            if value.get(key):
                answers = ", ".join(f"{n} {a}" for a, n in
                                    sorted((value.get(f"{key}_answers") or {}).items()))
                out.append({"type": kind, "host": "", "file": "", "line": 0,
                            "text": f"{value[key]} {what[0]}"
                                    + (f" (answered: {answers})" if answers else ""),
                            "explanation": f"{value[key]} {what[1]}"})
    return out


# A leader's report that a follower's storage lost entries it had acknowledged (node/replica/replica.py).
LOST_ENTRIES = re.compile(r"T (\S+) P \S+: SAFETY: follower (\S+) lost acknowledged entries")


def failing_disks(ops: Iterable[Any] | None) -> set[str]:
    """Hosts whose data disk the failing-disk fault made fail its syncs (with EIO) in this run."""
    return {value["host"] for op in ops or ()
            if _get(op, "process") == "nemesis" and _get(op, "f") == "start-failing-disk"
            and isinstance(value := _get(op, "value"), dict) and "host" in value}


def _failed_on_eio(finding: dict[str, Any]) -> bool:
    """A FAILED line, a traceback or a daemon's own failure line whose cause is an I/O error
    (EIO's message): the system stopping loudly on a disk that fails its syncs. Never a
    corruption or safety line: those a failing disk does not explain."""
    return (finding["type"] not in ("corruption", "safety")
            and EIO_MESSAGE in "\n".join(finding["lines"]).lower())


def damaged_replicas(ops: Iterable[Any] | None) -> set[tuple[str, str]]:
    """(tablet, server uuid) of every replica the disk nemesis damaged, where it recorded the
    server (older runs did not)."""
    out = set()
    for op in ops or ():
        value = _get(op, "value")
        if (_get(op, "process") == "nemesis" and _get(op, "f") == "start-disk"
                and isinstance(value, dict) and (value.get("replica") or {}).get("uuid")):
            out.add((value["replica"]["tablet"], value["replica"]["uuid"]))
    return out


def _expected(finding: dict[str, Any], names: set[str],
              replicas: AbstractSet[tuple[str, str]] = frozenset()) -> bool:
    """Whether a finding is the engine answering injected damage: on the damaged host, its
    corruption and FAILED lines naming the damaged tablet or file; on any host, a leader's
    SAFETY line that the damaged replica lost acknowledged entries (a truncated WAL tail reads
    as a torn write, so the replica restarts RUNNING, shorter than it acknowledged)."""
    text = "\n".join(finding["lines"])
    lost = LOST_ENTRIES.search(finding["lines"][0])
    if finding["type"] == "safety" and lost and (lost[1], lost[2]) in replicas:
        return True
    if not any(n in text for n in names):
        return False
    if finding["type"] in ("corruption", "failed-replica"):
        return True
    return finding["type"] == "traceback" and "corruption" in finding["lines"][-1].lower()


def removed_members(ops: Iterable[Any] | None) -> set[str]:
    """Hosts whose member the membership nemesis removed in this run."""
    return {value["removed"] for op in ops or ()
            if _get(op, "process") == "nemesis" and _get(op, "f") == "start-membership"
            and isinstance(value := _get(op, "value"), dict) and "removed" in value}


def watchdog_restarts(ops: Iterable[Any] | None) -> list[dict[str, Any]]:
    return [{"host": (_get(op, "value") or {}).get("host"),
             "daemon": (_get(op, "value") or {}).get("daemon"),
             "index": _get(op, "index"), "time_s": round((_get(op, "time") or 0) / 1e9, 3)}
            for op in ops or ()
            if _get(op, "process") == "nemesis" and _get(op, "f") == "watchdog-restart"]


def recorded_rules(run_dir: Path) -> tuple[dict[str, Any], ...]:
    """The rules test.json recorded for the run's system; Tessera's for older runs."""
    import json

    try:
        rules = json.loads((Path(run_dir) / "test.json").read_text()).get("log_rules")
    except (OSError, ValueError):
        rules = None
    return tuple(rules) if rules else TESSERA_RULES


def check_logs(run_dir: Path, ops: Sequence[Any] | None = None,
               rules: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """{"checker": "logs", "verdict", "errors", "expected", "notes", "watchdog_restarts",
    "logs"}; unknown only when no node log was collected at all. `rules`: by default those
    recorded with the run (`recorded_rules`)."""
    rules = recorded_rules(run_dir) if rules is None else rules
    damaged, replicas, failing = injected_damage(ops), damaged_replicas(ops), failing_disks(ops)
    after, removed = damage_lines(ops), removed_members(ops)
    errors: list[dict[str, Any]] = []
    expected: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    scanned: list[str] = []
    missing: list[str] = []
    for host_dir in sorted(p for p in (Path(run_dir) / "nodes").glob("*") if p.is_dir()):
        host = host_dir.name
        missing += [f"{host}/{p.name}" for p in sorted(host_dir.glob("*.log.missing"))]
        for path in sorted(host_dir.glob("*.log")):
            scanned.append(f"{host}/{path.name}")
            for f in scan_log(path.read_text(errors="replace"), rules):
                eio = host in failing and _failed_on_eio(f)
                is_expected = (eio or _expected(f, damaged.get(host, set()), replicas)
                               or ((f["rule"] or {}).get("after_damage", False) and any(
                                   a < f["line"] <= b for a, b in after.get((host, path.name), ()))))
                if f["rule"] is None:
                    explanation = f"{TRACEBACK_EXPLANATION}: {f['lines'][-1].strip()}"
                else:
                    explanation = f["rule"]["explanation"]
                if eio:
                    explanation = ("the system failed loudly on a disk the failing-disk fault "
                                   "made fail its syncs")
                elif is_expected:
                    explanation = ("a leader found the replica the disk nemesis damaged short of "
                                   "what it had acknowledged, and replicates it again"
                                   if f["type"] == "safety" else
                                   "the system refused data the disk nemesis damaged on purpose")
                r = f["rule"] or {}
                if r.get("removed_only") and host not in removed:
                    explanation += ", on a member no removal touched"
                is_note = (not is_expected and r.get("severity") == "note"
                           and (not r.get("removed_only") or host in removed))
                (expected if is_expected else notes if is_note else errors).append({
                    "type": f["type"], "host": host, "file": path.name, "line": f["line"],
                    "text": _quote(f["lines"]), "explanation": f"{host}: {explanation}"})
    errors += undetected_damage(ops) + session_intrusions(ops)
    result = {"checker": "logs", "errors": errors, "expected": expected, "notes": notes,
              "watchdog_restarts": watchdog_restarts(ops), "logs": scanned, "missing": missing}
    if not scanned:
        return {**result, "verdict": "unknown", "reason": f"no node logs under {run_dir}/nodes"}
    return {**result, "verdict": "invalid" if errors else "valid"}
