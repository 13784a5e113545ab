"""The master's catalog as typed records (Kudu's CatalogManager with its TableInfo and
TabletInfo): the one place the catalog's schema is declared, read and written.

The rows live in the sys catalog tablet's replicated key-value state (`StateMachine.data`): a
table under `table/<name>`, a tablet under `tablet/<id>`, each a plain map, and a deleted one
as None, kept forever so that a master that has never seen a key knows it is behind (see
`Reconciler._deletion`). `Catalog` reads that state as records; the writes are micro-ops for one
catalog transaction (`Master._mutate`). Nothing else names a key or a field. `place` is the
placement rule, pure.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import msgspec

CATALOG = "sys.catalog"  # the system tablet the masters replicate the catalog in
TABLE, TABLET = "table/", "tablet/"
# A tablet server an operator put in maintenance (Kudu's `kudu tserver state enter_maintenance`):
# "MAINTENANCE" under its uuid, None once it left it
TSERVER_STATE = "tserver_state/"
MAINTENANCE = "MAINTENANCE"
# The token of the DropTable request that last deleted the table of that name: its retry
# (the first reply lost) is answered with success, where any other drop gets NOT_FOUND.
DROPPED = "dropped/"
# The CreateTable token of the table of that name a drop deleted last: a retry of that create
# (its first reply lost, the table dropped since) is told so, rather than making it again.
DROPPED_CREATOR = "dropped_creator/"


class TableRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    id: str
    name: str
    tablets: list[str]  # tablet ids, in bucket order
    # The token of the CreateTable request that made the table: a retry of that request (its
    # first reply lost or late) is answered with the table, where any other gets ALREADY_EXISTS.
    creator: str = ""


class TabletRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    id: str
    table: str
    bucket: list[int]  # [index, buckets]: the hash bucket the tablet serves
    replicas: list[list]  # [uuid, host, port] of each member, as the catalog last recorded them
    rf: int | None = None  # the replication factor asked for (records of old masters lack it)
    # Opid index of the committed config `replicas` came from; None while they are still the
    # creation config, whose replicas the reconciler (re)creates, where after a change the
    # leader brings new members in by tablet copy instead.
    config_index: int | None = None

    @property
    def replication_factor(self) -> int:
        return self.rf if self.rf is not None else len(self.replicas)

    @property
    def member_uuids(self) -> set[str]:
        return {p[0] for p in self.replicas}


MicroOps = list[list]


class Catalog:
    """The catalog rows in `data` (a sys catalog replica's applied state), read as records."""

    def __init__(self, data: Mapping[str, Any]):
        self.data = data

    def table(self, name: str) -> TableRecord | None:
        row = self.data.get(TABLE + name)
        return None if row is None else msgspec.convert(row, TableRecord)

    def dropped_by(self, name: str) -> str | None:
        """The token of the drop that last deleted table `name`, if one carried a token."""
        return self.data.get(DROPPED + name)

    def dropped_creator(self, name: str) -> str | None:
        """The token of the create that made the table of that name a drop deleted last."""
        return self.data.get(DROPPED_CREATOR + name)

    def tablet(self, tablet_id: str) -> TabletRecord | None:
        row = self.data.get(TABLET + tablet_id)
        return None if row is None else msgspec.convert(row, TabletRecord)

    def knows_tablet(self, tablet_id: str) -> bool:
        """Whether the tablet was ever recorded, deleted since or not."""
        return TABLET + tablet_id in self.data

    def table_names(self) -> list[str]:
        return sorted(k[len(TABLE):] for k, v in self.data.items()
                      if k.startswith(TABLE) and v is not None)

    def tablets(self) -> list[TabletRecord]:
        """Every live tablet record, in the order they were first written."""
        return [msgspec.convert(v, TabletRecord) for k, v in list(self.data.items())
                if k.startswith(TABLET) and v is not None]

    def in_maintenance(self) -> set[str]:
        """The uuids of the tablet servers in maintenance: their replicas are not replaced."""
        return {k[len(TSERVER_STATE):] for k, v in self.data.items()
                if k.startswith(TSERVER_STATE) and v == MAINTENANCE}

    def config_indexes(self) -> dict[str, int]:
        """tablet id -> the committed config index the catalog follows (0: the creation one)."""
        return {t.id: t.config_index or 0 for t in self.tablets()}


def write_table(table: TableRecord, tablets: list[TabletRecord]) -> MicroOps:
    return ([["w", TABLE + table.name, msgspec.to_builtins(table)]]
            + [write_tablet(t)[0] for t in tablets])


def write_tablet(tablet: TabletRecord) -> MicroOps:
    return [["w", TABLET + tablet.id, msgspec.to_builtins(tablet)]]


def write_tserver_state(uuid: str, maintenance: bool) -> MicroOps:
    return [["w", TSERVER_STATE + uuid, MAINTENANCE if maintenance else None]]


def delete_table(table: TableRecord, token: str = "") -> MicroOps:
    """The table and its tablets as deleted records (None): the reconciler deletes replicas.
    With the drop's `token`, it is kept for the drop's retry, and the table's creator for its
    create's."""
    return ([["w", TABLE + table.name, None]] + [["w", TABLET + t, None] for t in table.tablets]
            + ([["w", DROPPED + table.name, token]] if token else [])
            + ([["w", DROPPED_CREATOR + table.name, table.creator]] if table.creator else []))


def place(load: dict[str, int], num_tablets: int, rf: int, rng: random.Random) -> list[list[str]]:
    """The servers of each new tablet: the `rf` least loaded, counting the replicas placed so
    far, ties broken at random. `load`: server uuid -> replicas it holds now, of the live
    servers; needs at least `rf` of them."""
    load = dict(load)
    out = []
    for _ in range(num_tablets):
        chosen = sorted(load, key=lambda u: (load[u], rng.random()))[:rf]
        for u in chosen:
            load[u] += 1
        out.append(chosen)
    return out
