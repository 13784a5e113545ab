"""What a system offers and what a fault needs are one vocabulary (nemeses.registry.OFFERS), and
a system that offers something implements the typed protocol behind it (nemeses.system): a
fault that applies must not find NotImplementedError in the middle of a run."""

import inspect

import pytest

from harness.deployment import Deployment
from harness.systems import SYSTEMS, system
from nemeses.registry import OFFERS, packages
from nemeses.system import OFFERED, Processes, members


def test_every_need_is_an_offer_with_a_meaning():
    for p in packages().values():
        assert p.needs <= OFFERS.keys(), (p.name, p.needs - OFFERS.keys())


def _lacks(kind: type, protocol: type) -> list[str]:
    """The protocol's members the system's class does not implement: absent, or a method left
    as the Deployment base's stub, which raises NotImplementedError (a base method with a
    default, such as `repair`, counts). Attributes the class sets per instance (dataclass
    fields, properties) count as present."""
    fields = getattr(kind, "__dataclass_fields__", {})
    lacking = []
    for name in members(protocol):
        if name in fields:
            continue
        if not hasattr(kind, name):
            lacking.append(name)
        elif getattr(kind, name) is getattr(Deployment, name, None) and _stub(getattr(kind, name)):
            lacking.append(f"{name} (the base's stub)")
    return lacking


def _stub(fn) -> bool:
    return callable(fn) and "raise NotImplementedError" in inspect.getsource(fn)


def test_every_offer_with_methods_has_a_protocol():
    assert OFFERED.keys() <= OFFERS.keys()
    # how daemons run, nothing to call: under libfaketime
    assert set(OFFERS) - set(OFFERED) == {"faketime"}


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_a_system_implements_the_protocols_of_what_it_offers(name):
    kind = system(name)
    assert kind.offers <= OFFERS.keys(), kind.offers - OFFERS.keys()
    assert not _lacks(kind, Processes), (name, _lacks(kind, Processes))
    for offer in sorted(kind.offers & OFFERED.keys()):
        assert not _lacks(kind, OFFERED[offer]), (name, offer, _lacks(kind, OFFERED[offer]))


def test_the_protocols_each_system_implements():
    """The list a reader wants: which protocols each system implements, as its offers say."""
    implemented = {n: sorted(o for o in system(n).offers if o in OFFERED) for n in SYSTEMS}
    assert implemented == {
        "tessera": ["disk", "fsync", "leaders", "masters", "membership", "sessions", "tablets",
                    "transfers"],
        "etcd": ["admin", "disk", "leaders", "membership", "transfers"],
        "mariadb": ["leaders"],
        "pysyncobj": ["leaders"],
    }


def test_a_missing_protocol_method_is_found():
    class Half(Deployment):
        offers = frozenset({"leaders", "membership"})

        def leader_master(self):
            return None

    assert _lacks(Half, OFFERED["leaders"]) == ["tablet_leaders (the base's stub)"]
    assert _lacks(Half, OFFERED["membership"]) == ["membership (the base's stub)"]
    assert _lacks(Half, OFFERED["disk"]) == ["damaged (the base's stub)",
                                              "disk_layout (the base's stub)"]
