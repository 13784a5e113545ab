"""Workloads and checker models are found, not listed: each module registers its own
(workloads.base.register, reports.checkers.registry.register), so a new one is one file. What
one names must exist in the other."""

import pytest

from reports.checkers.check import check_history
from reports.checkers.cli import LINEARIZABLE, MODELS
from reports.checkers.registry import models
from workloads import WORKLOADS, make


def test_every_workloads_checker_is_a_registered_model():
    known = models()
    for name, cls in WORKLOADS.items():
        assert cls.name == name
        assert make(name).checker.model in known, name


def test_the_cli_offers_exactly_the_registered_models():
    assert set(MODELS) == set(models()) >= {"cas-register", "set", "list-append", "bank", "watch"}
    assert set(LINEARIZABLE) == {"cas-register", "register", "mutex", "queue", "multi-register"}


def test_an_unknown_model_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown model 'nope'.*cas-register"):
        check_history([], "nope")
