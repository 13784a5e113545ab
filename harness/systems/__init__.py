"""The systems under test, one package each: its deployment (a harness.deployment.Deployment
subclass: install, daemons, faults it offers, end checks), its clients, its log rules and what
else is its own. Adding a system is its package and one line here.

Names map to "module:class", imported on use, so the harness loads only the system a run needs
(and no system's dependencies, say etcd's client library, are needed to test another).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.deployment import Deployment

# `--db`: the systems under test.
SYSTEMS = {
    "tessera": "harness.systems.tessera.deployment:TesseraDB",
    "pysyncobj": "harness.systems.pysyncobj.deployment:PySyncObjDB",
    "etcd": "harness.systems.etcd.deployment:EtcdDB",
    "mariadb": "harness.systems.mariadb.deployment:MariaDB",
}


def summaries() -> list[str]:
    """"name (what it is)" for each system, from the first line of its package's docstring: the
    `--db` help, written where the system is."""
    out = []
    for name, target in SYSTEMS.items():
        doc = importlib.import_module(target.split(":")[0].rsplit(".", 1)[0]).__doc__ or ""
        line = doc.strip().splitlines()[0].rstrip(".") if doc.strip() else ""
        out.append(f"{name} ({line})" if line else name)
    return out


def system(name: str) -> type[Deployment]:
    """The Deployment class `tessera test --db NAME` uses; ValueError names the known ones."""
    if name not in SYSTEMS:
        raise ValueError(f"unknown --db {name!r} (known: {', '.join(SYSTEMS)})")
    module, cls = SYSTEMS[name].split(":")
    return getattr(importlib.import_module(module), cls)
