"""Code probes: named marks on the engine's rare branches, so a run can say which of them it
reached and, as important, which it never did (FoundationDB's CODE_PROBE, TigerBeetle's
coverage marks). Two reviews in a row proved bugs on paths no run had walked; a probe no run
hits is itself a finding.

A site calls `probe("name")` on the branch it marks; every name is declared once, with a
one-line description, in CATALOG (tests/test_probes.py fails on a name declared twice, placed
twice, placed but not declared, or declared and never placed; `tessera probes` lists them).

Off, a probe is one global load and one compare: `_hits` is None. A process that wants them
calls `enable()`: the simulators for each seed (then `hits()`), a daemon given
`--probes-file` (which then appends each probe's name to that file the first time it fires, so
a server killed with SIGKILL has already said where it has been), a test that asserts its
path was taken (`expect`).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import IO

# name -> what it marks, one line. Names are dotted: the area, then the branch. One literal, so
# tests/test_probes.py can read it (a key written twice would silently keep the second).
CATALOG: dict[str, str] = {
}

_hits: Counter | None = None  # None: off
_sink: IO[str] | None = None  # a daemon's --probes-file: each name on its first hit


def probe(name: str) -> None:
    """Mark that the branch `name` was taken (nothing, when probes are off)."""
    hits = _hits
    if hits is None:
        return
    if _sink is not None and name not in hits:
        _first(name)
    hits[name] += 1


def _first(name: str) -> None:
    try:
        _sink.write(name + "\n")
        _sink.flush()
    except (OSError, ValueError):  # a full disk or a closed file loses the mark, not the server
        pass


def enable(sink: IO[str] | None = None) -> None:
    """Count hits from now on, from zero; with `sink`, write each probe's name to it on its
    first hit."""
    global _hits, _sink
    _hits, _sink = Counter(), sink


def disable() -> None:
    global _hits, _sink
    _hits, _sink = None, None


def hits() -> dict[str, int]:
    """Probe name -> times hit since `enable` ({} when off)."""
    return dict(_hits) if _hits is not None else {}


@contextlib.contextmanager
def expect(*names: str) -> Iterator[Counter]:
    """A test's coverage mark: the block must hit each of `names`, or AssertionError names the
    ones it missed. Counts from zero inside the block, and restores the state it found."""
    global _hits, _sink
    unknown = [n for n in names if n not in CATALOG]
    if unknown:
        raise KeyError(f"no such probe: {', '.join(unknown)}")
    saved = (_hits, _sink)
    _hits, _sink = Counter(), None
    try:
        yield _hits
        missed = [n for n in names if not _hits[n]]
        assert not missed, f"the path was not taken: probe {', '.join(missed)} never fired"
    finally:
        _hits, _sink = saved


def summarize(runs: list[dict[str, int]]) -> dict:
    """Hits of many runs (each a `hits()`): {"declared", "hit", "percent", "never": names no
    run hit, "runs": name -> runs that hit it}. What every report of probes prints."""
    runs_hitting = {name: sum(1 for r in runs if r.get(name)) for name in CATALOG}
    hit = sorted(n for n, k in runs_hitting.items() if k)
    return {"declared": len(CATALOG), "hit": len(hit),
            "percent": round(100 * len(hit) / len(CATALOG), 1) if CATALOG else 0.0,
            "never": sorted(n for n, k in runs_hitting.items() if not k),
            "runs": {n: runs_hitting[n] for n in hit}}


def line(summary: dict, width: int = 8) -> str:
    """One line of a summary: 'probes: 71 of 85 hit (83.5 %); never: a, b, ... (+N)'."""
    never = summary["never"]
    shown = ", ".join(never[:width]) + (f", ... (+{len(never) - width})" if len(never) > width
                                        else "")
    return (f"probes: {summary['hit']} of {summary['declared']} hit ({summary['percent']:g} %)"
            + (f"; never: {shown}" if never else ""))
