"""Checkers by model name, the way nemesis packages are found (nemeses.registry): each checker
module registers the models it judges, so a new model is one new file and nothing switches on
a model's name. `check_history` (reports.checkers.check), `tessera check --model` and the Spark
job all take the models from here."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reports.history import Op


@dataclass(frozen=True)
class Options:
    """What a check may be told beside the history (`tessera check`'s flags, test.json's
    recorded checker options)."""

    time_limit: float
    max_states: int
    total: int | None = None  # bank: the sum every read must see
    initial: dict[str, Any] | None = None  # multi-register: the registers' initial values
    consistency_model: str = "strict-serializable"  # list-append, rw-register
    nil_read_unknown: bool = False  # register, cas-register: an ok read of nil is unknown
    wfr_keys: bool = False  # rw-register: a txn's write of a key follows its read of it


@dataclass(frozen=True)
class Model:
    name: str
    check: Callable[[list[Op], Options], list[dict[str, Any]]]  # the history -> one result per checker
    linearizable: bool = False  # judged by the linearizability search alone


_MODELS: dict[str, Model] = {}


def register(model: Model) -> Model:
    _MODELS[model.name] = model
    return model


def checker_modules() -> list[str]:
    """The modules of reports.checkers that register models (all but the command line and
    the dispatch): what models() imports, and what a process that will check many histories
    imports once before it forks (harness.sim.stack.SEED_IMPORTS)."""
    import reports.checkers

    return [f"reports.checkers.{m.name}" for m in pkgutil.iter_modules(reports.checkers.__path__)
            if m.name not in ("cli", "check", "registry")]


def models() -> dict[str, Model]:
    """Every registered model by name: importing the modules of reports.checkers registers
    them."""
    for name in checker_modules():
        importlib.import_module(name)
    return dict(sorted(_MODELS.items()))
