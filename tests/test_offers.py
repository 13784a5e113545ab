"""What a system offers and what a fault needs are one vocabulary (nemeses.registry.OFFERS), and
a system that offers something implements the methods behind it: a fault that applies must not
find NotImplementedError in the middle of a run."""

import pytest

from harness.deployment import Deployment
from harness.systems import SYSTEMS, system
from nemeses.registry import OFFERS, packages

# The protocol behind each offer: the Deployment methods a fault that needs it calls.
METHODS = {"disk": ("disk_layout", "damaged"), "membership": ("membership",),
           "admin": ("admin",), "leaders": ("leader_master", "tablet_leaders"),
           "tablets": ("replica_groups",), "sessions": ("intrude_sessions",),
           "masters": ("add_master", "remove_master")}


def test_every_need_is_an_offer_with_a_meaning():
    for p in packages().values():
        assert p.needs <= OFFERS.keys(), (p.name, p.needs - OFFERS.keys())


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_a_system_implements_what_it_offers(name):
    kind = system(name)
    assert kind.offers <= OFFERS.keys(), kind.offers - OFFERS.keys()
    for offer in kind.offers:
        for method in METHODS.get(offer, ()):
            assert getattr(kind, method) is not getattr(Deployment, method), (name, offer, method)
