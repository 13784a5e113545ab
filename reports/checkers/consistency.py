"""Elle's consistency-model lattice: which anomalies imply which, which models imply which, and
which anomalies each model proscribes directly (facts from Elle's consistency_model.clj, after
Adya, Cerone, Bailis, Daudjee and others).

From these we derive, for a set of anomaly types found in a history, the models it rules out and
the strongest models still possible; and `verdict`: a history is invalid for a chosen model only
if it shows an anomaly that model proscribes, so a G2-item history is invalid for serializable
but valid for snapshot isolation.

Tessera's transactions read and write single keys, never predicates, so every G-single and
G-nonadjacent cycle found is an item cycle; we judge them as Elle's G-single-item and
G-nonadjacent-item, which (unlike the predicate forms) also rule out repeatable read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from functools import cache

UNKNOWN_TYPES = frozenset({"empty-transaction-graph", "cycle-search-timeout",
                           # analysis could not proceed: the history breaks a checker's premise
                           "duplicate-appends", "duplicate-writes", "unexpected-txn-micro-op-types"})

# anomaly -> anomalies it implies
IMPLIED_ANOMALIES: dict[str, tuple[str, ...]] = {
    "G0": ("G1c", "G0-process"),
    "G0-process": ("G1c-process", "G0-realtime"),
    "G0-realtime": ("G1c-realtime",),
    "G1a": ("G1",),
    "G1b": ("G1",),
    "G1c": ("G1", "G1c-process"),
    "G1c-process": ("G1c-realtime", "G1-process"),
    "G1c-realtime": ("G1-realtime",),
    "G1": ("G1-process",),
    "G1-process": ("G1-realtime",),
    "G-single-item": ("G-single", "G-single-item-process", "G-nonadjacent-item"),
    "G-single-item-process": ("G-single-process", "G-single-item-realtime", "G-nonadjacent-item-process"),
    "G-single-item-realtime": ("G-single-realtime", "G-nonadjacent-item-realtime"),
    "G-single": ("G-nonadjacent", "GSIb", "G-single-process"),
    "G-single-process": ("G-nonadjacent-process", "G-single-realtime"),
    "G-single-realtime": ("G-nonadjacent-realtime",),
    "G-nonadjacent-item": ("G-nonadjacent", "G2-item", "G-nonadjacent-item-process"),
    "G-nonadjacent-item-process": ("G-nonadjacent-process", "G2-item-process", "G-nonadjacent-item-realtime"),
    "G-nonadjacent-item-realtime": ("G2-item-realtime", "G-nonadjacent-realtime"),
    "G-nonadjacent": ("G2", "G-nonadjacent-process"),
    "G-nonadjacent-process": ("G2-process", "G-nonadjacent-realtime"),
    "G-nonadjacent-realtime": ("G2-realtime",),
    "G2": ("G2-process",),
    "G2-item": ("G2", "G2-item-process"),
    "G2-item-process": ("G2-process", "G2-item-realtime"),
    "G2-item-realtime": ("G2-realtime",),
    "G2-process": ("G2-realtime",),
    "GSIa": ("GSI",),
    "GSIb": ("GSI",),
    "incompatible-order": ("G1a",),
    "future-read": ("G1c",),
    "dirty-update": ("G1a",),
    # Not in Elle's table (Elle's list-append stops on such a read): a read of an element no
    # transaction wrote cannot have come from committed state, so we rank it with aborted reads.
    "garbage-read": ("G1a",),
    "lost-update": ("write-skew", "G2-item"),
    "write-skew": ("G2",),
}

CANONICAL = {
    "consistent-view": "PL-2+",
    "conflict-serializable": "PL-3",
    "cursor-stability": "PL-CS",
    "forward-consistent-view": "PL-FCV",
    "monotonic-snapshot-read": "PL-MSR",
    "monotonic-view": "PL-2L",
    "read-committed": "PL-2",
    "read-uncommitted": "PL-1",
    "repeatable-read": "PL-2.99",
    "serializable": "PL-3",
    "snapshot-isolation": "PL-SI",
    "strict-serializable": "PL-SS",
    "strong-serializable": "PL-SS",
    "update-serializable": "PL-3U",
    "strong-session-read-uncommitted": "strong-session-PL-1",
    "strong-session-read-committed": "strong-session-PL-2",
    "strong-read-uncommitted": "strong-PL-1",
    "strong-read-committed": "strong-PL-2",
}
FRIENDLY = {c: f for f, c in CANONICAL.items() if f not in ("conflict-serializable", "strong-serializable")}

# model -> weaker models it implies (any name; canonicalised below)
_MODELS: dict[str, tuple[str, ...]] = {
    "causal-cerone": ("read-atomic",),
    "consistent-view": ("cursor-stability", "monotonic-view"),
    "conflict-serializable": ("view-serializable",),
    "cursor-stability": ("read-committed", "PL-2"),
    "forward-consistent-view": ("consistent-view",),
    "PL-2": ("PL-1",),
    "PL-3": ("repeatable-read", "update-serializable"),
    "update-serializable": ("forward-consistent-view",),
    "monotonic-atomic-view": ("read-committed",),
    "monotonic-view": ("PL-2",),
    "monotonic-snapshot-read": ("PL-2",),
    "parallel-snapshot-isolation": ("causal-cerone", "ROLA"),
    "prefix": ("causal-cerone",),
    "read-atomic": ("monotonic-atomic-view",),
    "read-committed": ("read-uncommitted",),
    "repeatable-read": ("cursor-stability", "monotonic-atomic-view"),
    "ROLA": ("read-atomic",),
    "serializable": ("repeatable-read", "snapshot-isolation", "view-serializable"),
    "session-serializable": ("1SR",),
    "snapshot-isolation": ("forward-consistent-view", "monotonic-atomic-view", "monotonic-snapshot-read",
                           "parallel-snapshot-isolation", "prefix"),
    "strict-serializable": ("PL-3", "serializable", "linearizable", "snapshot-isolation",
                            "strong-snapshot-isolation", "strong-session-serializable"),
    "strong-session-PL-1": ("PL-1",),
    "strong-session-PL-2": ("PL-2", "strong-session-PL-1"),
    "strong-PL-1": ("strong-session-PL-1",),
    "strong-PL-2": ("strong-session-PL-2", "strong-PL-1"),
    "strong-session-serializable": ("serializable", "strong-session-snapshot-isolation"),
    "strong-session-snapshot-isolation": ("snapshot-isolation", "strong-session-PL-2"),
    "strong-serializable": ("session-serializable",),
    "strong-snapshot-isolation": ("strong-session-snapshot-isolation", "strong-PL-2"),
    "linearizable": ("sequential",),
    "sequential": ("causal",),
    "causal": ("writes-follow-reads", "PRAM"),
    "PRAM": ("monotonic-reads", "monotonic-writes", "read-your-writes"),
}

# model -> anomalies it proscribes beyond those of the weaker models it implies
_PROSCRIBED: dict[str, tuple[str, ...]] = {
    "causal-cerone": ("internal", "G1a"),
    "cursor-stability": ("G1", "G-cursor", "lost-update"),
    "monotonic-view": ("G1", "G-monotonic"),
    "monotonic-snapshot-read": ("G1", "G-MSR"),
    "consistent-view": ("G1", "G-single"),
    "forward-consistent-view": ("G1", "G-SIb"),
    "parallel-snapshot-isolation": ("internal", "G1a"),
    "PL-3": ("G1", "G2", "predicate-read-miss", "PL-3-cycle-exists"),
    "PL-2": ("G1", "PL-2-cycle-exists"),
    "PL-1": ("G0", "duplicate-elements", "cyclic-versions", "PL-1-cycle-exists"),
    "prefix": ("internal", "G1a"),
    "serializable": ("internal",),
    "snapshot-isolation": ("internal", "G1", "G-SI", "G-nonadjacent", "PL-SI-cycle-exists"),
    "read-atomic": ("internal", "G1a", "future-read"),
    "repeatable-read": ("G1", "G2-item", "PL-2.99-cycle-exists", "lost-update"),
    "ROLA": ("lost-update",),
    "strict-serializable": ("G1", "G1c-realtime", "G2-realtime", "PL-SS-cycle-exists"),
    "strong-session-PL-1": ("strong-session-PL-1-cycle-exists", "G0-process"),
    "strong-session-PL-2": ("strong-session-PL-2-cycle-exists", "G1c-process"),
    "strong-PL-1": ("strong-PL-1-cycle-exists", "G0-realtime"),
    "strong-PL-2": ("strong-PL-2-cycle-exists", "G1c-realtime"),
    "strong-session-snapshot-isolation": ("internal", "G1-process", "G-nonadjacent-process",
                                          "strong-session-snapshot-isolation-cycle-exists"),
    "strong-snapshot-isolation": ("internal", "G1-realtime", "G-nonadjacent-realtime",
                                  "strong-snapshot-isolation-cycle-exists"),
    "strong-session-serializable": ("G1-process", "G2-process", "strong-session-serializable-cycle-exists"),
    "update-serializable": ("G1", "G-update"),
}

DEFAULT_MODEL = "strict-serializable"


def canonical(model: str) -> str:
    return CANONICAL.get(model, model)


def friendly(model: str) -> str:
    return FRIENDLY.get(model, model)


def _edges(table: dict[str, tuple[str, ...]], rename: Callable[[str], str] = lambda x: x
           ) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    out: dict[str, set[str]] = {}
    into: dict[str, set[str]] = {}
    for a, bs in table.items():
        for b in bs:
            out.setdefault(rename(a), set()).add(rename(b))
            into.setdefault(rename(b), set()).add(rename(a))
    return out, into


_ANOMALY_OUT, _ANOMALY_IN = _edges(IMPLIED_ANOMALIES)
_MODEL_OUT, _MODEL_IN = _edges(_MODELS, canonical)
_PROSCRIBES, _PROSCRIBED_BY = _edges(_PROSCRIBED, canonical)
MODELS = frozenset(_MODEL_OUT) | frozenset(_MODEL_IN) | frozenset(_PROSCRIBES)
# every name a user may give: friendly, canonical and aliases
MODEL_NAMES = tuple(sorted({friendly(m) for m in MODELS} | set(CANONICAL)))


def _reach(start: Iterable[str], edges: dict[str, set[str]]) -> set[str]:
    seen = set(start)
    stack = list(seen)
    while stack:
        for nxt in edges.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def _models(models: str | Iterable[str]) -> list[str]:
    names = [models] if isinstance(models, str) else list(models)
    unknown = [m for m in names if canonical(m) not in MODELS]
    if unknown:
        raise ValueError(f"unknown consistency model(s) {unknown}; known: {', '.join(MODEL_NAMES)}")
    return [canonical(m) for m in names]


def _itemized(anomaly_types: Iterable[str]) -> set[str]:
    """G-single/G-nonadjacent cycles over keys are item anomalies (see the module doc)."""
    out = set()
    for t in anomaly_types:
        for base in ("G-single", "G-nonadjacent"):
            if t == base or t.startswith(base + "-") and not t.startswith(base + "-item"):
                t = base + "-item" + t[len(base):]
        out.add(t)
    return out


@cache
def _prohibited(models: tuple[str, ...]) -> frozenset[str]:
    direct = {a for m in _reach(models, _MODEL_OUT) for a in _PROSCRIBES.get(m, ())}
    return frozenset(_reach(direct, _ANOMALY_IN))


def anomalies_prohibited_by(models: str | Iterable[str]) -> frozenset[str]:
    """Every anomaly that cannot occur if all `models` hold."""
    return _prohibited(tuple(sorted(_models(models))))


def impossible_models(anomaly_types: Iterable[str]) -> set[str]:
    """Canonical names of the models the anomalies rule out."""
    implied = _reach(_itemized(anomaly_types), _ANOMALY_OUT)
    direct = {m for a in implied for m in _PROSCRIBED_BY.get(a, ())}
    return _reach(direct, _MODEL_IN)


def _extremes(models: AbstractSet[str], edges: dict[str, set[str]]) -> set[str]:
    """Drop every model from which another remaining one is reachable along `edges`."""
    keep = set(models)
    for m in sorted(models):
        if (_reach([m], edges) - {m}) & (keep - {m}):
            keep.discard(m)
    return keep


def boundary(anomaly_types: Iterable[str]) -> dict[str, list[str]]:
    """{"not": weakest models ruled out, "also_not": the other (stronger) ruled-out models,
    "ruled_out": all of them, "possible": the strongest models still possible}, friendly names."""
    impossible = impossible_models(anomaly_types)
    weakest = _extremes(impossible, _MODEL_OUT)
    strongest = _extremes(MODELS - impossible, _MODEL_IN)

    def names(ms: Iterable[str]) -> list[str]:
        return sorted({friendly(m) for m in ms})

    return {"not": names(weakest), "also_not": names(impossible - weakest), "ruled_out": names(impossible),
            "possible": names(strongest)}


def ruled_out(anomaly_types: Iterable[str]) -> list[str]:
    return boundary(anomaly_types)["ruled_out"]


def needs_order(models: str | Iterable[str]) -> str | None:
    """Which order edges Elle adds to the graph for these models: "realtime" if they proscribe
    any realtime cycle (process cycles then show up as realtime ones), else "process" if they
    proscribe a process cycle, else None."""
    prohibited = anomalies_prohibited_by(models)
    for kind in ("realtime", "process"):
        if any(a.endswith("-" + kind) for a in prohibited):
            return kind
    return None


def reportable(anomaly_types: Iterable[str], models: str | Iterable[str] = DEFAULT_MODEL) -> set[str]:
    """The anomalies worth reporting for these models: those they proscribe, and those that
    make the analysis incomplete."""
    prohibited = anomalies_prohibited_by(models)
    return {t for t in anomaly_types if t in UNKNOWN_TYPES or _itemized([t]) & prohibited}


def verdict(anomaly_types: Iterable[str], models: str | Iterable[str] = DEFAULT_MODEL) -> str:
    """invalid if an anomaly found is proscribed by the model(s); unknown if the analysis was
    incomplete (cycle search timed out, no dependencies inferred, or the history broke a premise);
    else valid: anomalies the chosen model allows do not count against it."""
    types = set(anomaly_types)
    if _itemized(types) & anomalies_prohibited_by(models):
        return "invalid"
    return "unknown" if types & UNKNOWN_TYPES else "valid"
