"""Fault packages, Jepsen's way: each nemesis module registers what the harness needs to know
about its fault, so adding a fault is one new file and nothing switches on a name."""

from __future__ import annotations

import importlib
import pkgutil
import random
from collections.abc import Callable
from dataclasses import dataclass

from nemeses.base import Context, Nemesis


@dataclass(frozen=True)
class Package:
    name: str
    build: Callable[[Context], Nemesis]  # the fault, ready to run on these hosts
    draw: Callable[[random.Random, list[str]], dict]  # one start's choices: pure, from host names
    heal_rank: int = 50  # the final heal goes from low to high: networks before processes
    min_hosts: int = 1
    lazyfs: bool = False  # tablet servers' data dirs must be lazyfs mounts
    group: str = "all"  # what `--nemesis GROUP` selects: "all" (the classic faults) or "raft"
    # What the system under test must offer (harness.deployment.Deployment.offers) for this fault.
    needs: frozenset[str] = frozenset()


_PACKAGES: dict[str, Package] = {}
# What each offer means, for the message that refuses a fault a system does not support.
OFFERS = {"leaders": "a leader query", "tablets": "a tablet catalog", "masters": "a master quorum",
          "disk": "data files the disk nemesis may damage", "membership": "a membership API",
          "admin": "maintenance operations", "faketime": "daemons that run under libfaketime",
          "sessions": "client sessions another user could attack",
          "transfers": "a leader step-down an operator can ask for",
          "fsync": "a data daemon that syncs what it acknowledges (a failing disk reaches it)"}


def register(package: Package) -> Package:
    _PACKAGES[package.name] = package
    return package


def packages() -> dict[str, Package]:
    """Every registered package by name, in heal order: importing the modules of `nemeses`
    registers them."""
    import nemeses

    for m in pkgutil.iter_modules(nemeses.__path__):
        importlib.import_module(f"nemeses.{m.name}")
    return {p.name: p for p in sorted(_PACKAGES.values(), key=lambda p: (p.heal_rank, p.name))}


def select(text: str, offers: frozenset[str] | None = None) -> list[str]:
    """Package names from `--nemesis`: none, or a comma list of groups (all, raft, masters) and
    package names, in the order given, each once. With `offers` (what the system under test
    offers, harness.deployment.Deployment.offers), a group keeps the faults that apply to the system
    and a fault named alone must apply. ValueError names what is known."""
    known = packages()
    groups = sorted({p.group for p in known.values()})
    if text == "none":
        return []

    def applies(p: Package) -> bool:
        return offers is None or p.needs <= offers

    names: list[str] = []
    for item in (n.strip() for n in text.split(",") if n.strip()):
        if item in groups:
            kept = [n for n, p in known.items() if p.group == item and applies(p)]
            if not kept:  # a run would inject nothing while saying it ran the group
                raise ValueError(f"no fault of the group {item} applies to this system")
            names += kept
        elif item in known:
            if not applies(known[item]):
                missing = ", ".join(f"{n} ({OFFERS.get(n, '?')})"
                                    for n in sorted(known[item].needs - offers))
                raise ValueError(f"nemesis {item} does not apply to this system: it needs "
                                 f"{missing}, which it does not offer")
            names.append(item)
        else:
            raise ValueError(f"unknown nemesis {item!r} (known: {', '.join(known)}, "
                             f"{', '.join(groups)}, none)")
    return list(dict.fromkeys(names))
