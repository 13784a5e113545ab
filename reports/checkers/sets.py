"""Set-full, after Jepsen's `jepsen.checker/set-full`: clients add unique elements and read the
whole set, during the run and once more after the heal. Every element's add is linked to the ok
reads that saw or missed it, which gives each element one outcome:

- known: the element is known to exist from the earliest of its ok add completion and the
  completion of the first read that saw it (an :info add becomes known only through a read);
- stable: the latest read (by invocation) that saw it began after the latest that missed it;
- lost: known, and the latest read that missed it began after it was known and after the latest
  read that saw it — it was there (or acknowledged) and then stayed gone;
- never-read: neither, e.g. no read began after it was known, or it was never known.

A stable element is also *stale* when some read that began after it was known missed it. Reads
racing the add (begun before it was known) may miss it without blame, as Jepsen allows. Latencies
follow Jepsen: stable latency = invocation of the last missing read minus the known time (0 when
none came after), lost latency = invocation of the last read that saw it minus the known time.

Also: *recovered* = an :info (or never completed) add whose element a read saw; *duplicated* =
an element more than once in one read; *unexpected* = an element in a read with no add invoked
before that read completed, or whose every add failed (a definite :fail did not happen).

Verdict: unknown only when there is no ok read at all; invalid on any lost, duplicated or
unexpected element, and on stale ones when `linearizable` (the default: Tessera promises
linearizable reads in both read modes — a ReadIndex round per read, or a leader lease under
bounded clock drift — so a read that begins after an add completed must see it); else valid.
Where this departs from Jepsen: a history with ok reads but no stable element is judged, not
"unknown" (a run whose adds all failed still has reads to check); stale is decided by op order
(a read invoked after the known op), not by a latency of at least 1 ms; duplicates are counted
(Jepsen's filter never fires); elements whose every add failed get no outcome; unexpected
elements are checked. Latencies use op times (ns), reported in ms; ops without times get none.

`check_history` also runs a linearizability search over the set model; it may only add "invalid"
(a real non-linearizable read set-full cannot see per element) and its "unknown" (search budget
spent) never turns this checker's decisive verdict into unknown.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from reports.checkers.registry import Model, Options, register
from reports.history import Op, client_ops

QUANTILES = (0, 0.5, 0.95, 0.99, 1)
WORST = 8  # per-element detail kept for the worst stale and for lost elements


def _freeze(v: Any) -> Any:
    return tuple(_freeze(x) for x in v) if isinstance(v, list) else v


def _thaw(v: Any) -> Any:
    return [_thaw(x) for x in v] if isinstance(v, tuple) else v


def _plain(items: Iterable[Any]) -> list[Any]:
    return sorted((_thaw(x) for x in items), key=repr)


class Element:
    """What the history says about one element: its adds and the reads that saw or missed it."""

    __slots__ = ("value", "invoked", "ok", "known", "last_present", "last_absent")

    def __init__(self, value: Any, invoke: Op):
        self.value = value
        self.invoked = invoke  # the first add invocation
        self.ok: Op | None = None  # the first ok add completion
        self.known: Op | None = None  # the earliest op proving the element exists
        self.last_present: Op | None = None  # invocation of the latest read that saw it
        self.last_absent: Op | None = None  # invocation of the latest read that missed it

    def saw(self, inv: Op, done: Op) -> None:
        self.known = self.known or done
        if self.last_present is None or self.last_present.index < inv.index:
            self.last_present = inv

    def missed(self, inv: Op) -> None:
        if self.last_absent is None or self.last_absent.index < inv.index:
            self.last_absent = inv

    def outcome(self) -> str:
        present = self.last_present.index if self.last_present else -1
        absent = self.last_absent.index if self.last_absent else -1
        if self.last_present and present > absent:
            return "stable"
        if self.known and self.last_absent and absent > present and absent > self.known.index:
            return "lost"
        return "never-read"

    def stale(self) -> bool:
        """Stable, yet missed by a read that began after the element was known."""
        return bool(self.known and self.last_absent and self.last_absent.index > self.known.index)

    def latency(self, until: Op | None) -> float | None:
        """ms from known to `until` (Jepsen: 0 when there is no such op or it came first)."""
        if self.known is None or self.known.time is None:
            return None
        if until is None:
            return 0.0
        return None if until.time is None else max(0, until.time - self.known.time) / 1e6

    def describe(self) -> dict[str, Any]:
        def index(op: Op | None) -> int | None:
            return None if op is None else op.index

        return {"element": _thaw(self.value), "add_index": self.invoked.index,
                "known_index": index(self.known), "last_present_index": index(self.last_present),
                "last_absent_index": index(self.last_absent),
                "stable_latency_ms": self.latency(self.last_absent) if self.outcome() == "stable" else None,
                "lost_latency_ms": self.latency(self.last_present) if self.outcome() == "lost" else None}


def quantiles(values: list[float]) -> dict[str, float] | None:
    """Jepsen's frequency distribution: the value at floor(n * q), for q in QUANTILES."""
    if not values:
        return None
    s = sorted(values)
    return {str(q): s[min(len(s) - 1, int(len(s) * q))] for q in QUANTILES}


class _Scan:
    """One pass over the history in order, as Jepsen's reduce: a read updates every element
    whose add was invoked before the read completed."""

    def __init__(self) -> None:
        self.elements: dict[Any, Element] = {}
        self.failed: Counter[Any] = Counter()  # element -> failed adds
        self.adds: Counter[Any] = Counter()  # element -> completed or pending adds
        self.duplicated: dict[Any, int] = {}  # element -> its largest multiplicity in one read
        self.unattempted: dict[Any, int] = {}  # element -> first read seeing it before any add
        self.reads = 0
        self.last_read: Op | None = None

    def run(self, ops: Iterable[Op]) -> None:
        invokes: dict[Any, Op] = {}
        for op in client_ops(ops):
            if op.type == "invoke":
                invokes[op.process] = op
                if op.f == "add":
                    self.adds[_freeze(op.value)] += 1
                    self.elements.setdefault(_freeze(op.value), Element(_freeze(op.value), op))
                continue
            inv = invokes.pop(op.process, None)
            if op.f == "add" and inv is not None:
                self.complete_add(inv, op)
            elif op.f == "read" and op.type == "ok" and inv is not None:
                self.read(inv, op)

    def complete_add(self, inv: Op, op: Op) -> None:
        e = self.elements[_freeze(inv.value)]
        if op.type == "ok":
            e.ok = e.ok or op
            e.known = e.known or op
        elif op.type == "fail":
            self.failed[e.value] += 1

    def read(self, inv: Op, op: Op) -> None:
        self.reads += 1
        self.last_read = op
        counts = Counter(_freeze(x) for x in (op.value or ()))
        for x, n in counts.items():
            if n > 1:
                self.duplicated[x] = max(n, self.duplicated.get(x, 0))
            if x not in self.elements:
                self.unattempted.setdefault(x, op.index)
        for x, e in self.elements.items():
            if x in counts:
                e.saw(inv, op)
            else:
                e.missed(inv)


def check_set(ops: Iterable[Op], linearizable: bool = True) -> dict[str, Any]:
    """Set-full (see the module docstring); `linearizable=False` reports stale elements without
    failing on them, for stores that only promise eventually visible adds."""
    scan = _Scan()
    scan.run(ops)
    # An element all of whose adds failed is not an attempt that may exist: reading it is an error.
    failed = {x for x, n in scan.failed.items() if n == scan.adds[x]}
    live = [e for x, e in scan.elements.items() if x not in failed]
    by_outcome: dict[str, list[Element]] = {"stable": [], "lost": [], "never-read": []}
    for e in live:
        by_outcome[e.outcome()].append(e)
    stale = [e for e in by_outcome["stable"] if e.stale()]
    lost = by_outcome["lost"]
    recovered = [e for e in live if e.ok is None and e.last_present is not None]
    unexpected = {x: "no add was invoked before the read" for x in scan.unattempted}
    unexpected.update((x, "every add of them failed") for x in failed if scan.elements[x].last_present)
    stable_latencies = [v for e in by_outcome["stable"] if (v := e.latency(e.last_absent)) is not None]
    lost_latencies = [v for e in lost if (v := e.latency(e.last_present)) is not None]
    worst_stale = sorted(stale, key=lambda e: (-(e.latency(e.last_absent) or 0), e.invoked.index))
    result = {
        "checker": "set",
        "linearizable": linearizable,
        "reads": scan.reads,
        "attempt_count": len(scan.elements),
        "acknowledged_count": sum(e.ok is not None for e in scan.elements.values()),
        "stable_count": len(by_outcome["stable"]),
        "lost_count": len(lost),
        "never_read_count": len(by_outcome["never-read"]),
        "stale_count": len(stale),
        "recovered_count": len(recovered),
        "duplicated_count": len(scan.duplicated),
        "unexpected_count": len(unexpected),
        "lost": _plain(e.value for e in lost),
        "never_read": _plain(e.value for e in by_outcome["never-read"]),
        "stale": _plain(e.value for e in stale),
        "recovered": _plain(e.value for e in recovered),
        "duplicated": sorted(([_thaw(x), n] for x, n in scan.duplicated.items()), key=repr),
        "unexpected": _plain(unexpected),
        "worst_stale": [e.describe() for e in worst_stale[:WORST]],
        "stable_latencies": quantiles(stable_latencies),
        "lost_latencies": quantiles(lost_latencies),
    }
    if scan.last_read is None:
        return {**result, "verdict": "unknown", "reason": "no ok read of the set", "errors": []}
    errors = _errors(lost, stale if linearizable else [], scan.duplicated, unexpected)
    return {**result, "verdict": "invalid" if errors else "valid",
            "final_read_index": scan.last_read.index, "errors": errors}


def _errors(lost: list[Element], stale: list[Element], duplicated: dict[Any, int],
            unexpected: dict[Any, str]) -> list[dict[str, Any]]:
    errors = []
    if lost:
        errors.append({"type": "lost", "elements": _plain(e.value for e in lost),
                       "examples": [e.describe() for e in lost[:WORST]],
                       "explanation": f"{len(lost)} element(s) known to exist (acknowledged or read) "
                                      "were missing from every read that began after the last one "
                                      "that saw them"})
    if stale:
        worst = max(stale, key=lambda e: e.latency(e.last_absent) or 0)
        assert worst.last_absent is not None  # stale: a read missed it (Element.stale)
        errors.append({"type": "stale", "elements": _plain(e.value for e in stale),
                       "explanation": f"{len(stale)} element(s) were missing from a read that began "
                                      "after they were known to exist, then appeared again "
                                      "(reads are promised linearizable); worst: "
                                      f"{_thaw(worst.value)!r}, read at index "
                                      f"{worst.last_absent.index}"})
    if duplicated:
        errors.append({"type": "duplicated", "elements": sorted(map(_thaw, duplicated), key=repr),
                       "explanation": f"{len(duplicated)} element(s) appeared more than once in a "
                                      "single read"})
    for reason in sorted(set(unexpected.values())):
        found = _plain(x for x, r in unexpected.items() if r == reason)
        errors.append({"type": "unexpected", "elements": found,
                       "explanation": f"{len(found)} element(s) were read though {reason}"})
    return errors


ADVISORY_TIME_LIMIT = 5.0  # seconds per key for the set's linearizability search


def _set_checks(ops: list[Op], opts: Options) -> list[dict[str, Any]]:
    """set-full decides; the linearizability search may only add a real violation. A set's
    search space explodes with its size, so the advisory search mostly spends its whole budget
    to say unknown: it gets a few seconds per key, not the decisive budget."""
    from reports.checkers import linearizability
    from reports.checkers.models import MODELS

    lin = linearizability.check(ops, MODELS["set"](), max_states=opts.max_states,
                                time_limit=min(opts.time_limit, ADVISORY_TIME_LIMIT))
    return [check_set(ops), {**lin, "advisory": True}]


register(Model("set", _set_checks))
