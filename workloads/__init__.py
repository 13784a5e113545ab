"""Workloads: op generators per process, their mapping onto the client, and their checker."""

from __future__ import annotations

from workloads.bank import Bank
from workloads.base import Workload
from workloads.list_append import ListAppend
from workloads.lock_set import LockEtcdSet, LockSet
from workloads.register import Register
from workloads.set import SetWorkload
from workloads.watch import Watch

WORKLOADS: dict[str, type[Workload]] = {
    "register": Register,
    "list-append": ListAppend,
    "bank": Bank,
    "set": SetWorkload,
    "lock-set": LockSet,
    "lock-etcd-set": LockEtcdSet,
    "watch": Watch,
}


def make(name: str, **options) -> Workload:
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r} (known: {', '.join(WORKLOADS)})")
    return WORKLOADS[name](**options)
