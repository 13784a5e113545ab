"""Workloads: op generators per process, their mapping onto the client, and their checker.

Each workload module registers its classes (`workloads.base.register`), so a new workload is one
new file: importing this package imports every module of it and collects them in WORKLOADS.
"""

from __future__ import annotations

import importlib
import pkgutil

from workloads.base import _WORKLOADS, Workload

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")

WORKLOADS: dict[str, type[Workload]] = dict(sorted(_WORKLOADS.items()))


def make(name: str, **options) -> Workload:
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r} (known: {', '.join(WORKLOADS)})")
    return WORKLOADS[name](**options)


def model_judged() -> list[str]:
    """The workloads whose histories are judged against a consistency model the run may name
    (`--consistency-model`) or the system claims: the transactional ones."""
    return sorted(n for n, w in WORKLOADS.items() if "consistency_model" in w.__dataclass_fields__)
