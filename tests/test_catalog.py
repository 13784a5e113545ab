"""The master's typed catalog (node/master/catalog.py): rows read as records and written as
micro-ops, the records of older masters still read, and placement as a pure rule."""

import random

import msgspec
import pytest

from node.master.catalog import (
    Catalog,
    TableRecord,
    TabletRecord,
    delete_table,
    place,
    write_table,
    write_tablet,
)
from node.tablet.ops import MicroOp


def _apply(data: dict, ops: list[list]) -> dict:
    for op, key, value in ops:
        assert op == "w"
        data[key] = value
    return data


T1 = TabletRecord("abc-0000", "t", [0, 2], [["u1", "h1", 7050], ["u2", "h2", 7050]], rf=3)
T2 = TabletRecord("abc-0001", "t", [1, 2], [["u2", "h2", 7050]], rf=3)
TABLE = TableRecord("abc", "t", ["abc-0000", "abc-0001"])


def test_records_round_trip_through_the_rows_and_deletions_are_remembered():
    data = _apply({}, write_table(TABLE, [T1, T2]))
    c = Catalog(data)
    assert c.table("t") == TABLE and c.tablet("abc-0000") == T1 and c.table_names() == ["t"]
    assert [t.id for t in c.tablets()] == ["abc-0000", "abc-0001"]
    assert "config_index" not in data["tablet/abc-0000"]  # the creation config: no index
    followed = msgspec.structs.replace(T1, config_index=9, replicas=[["u3", "h3", 7050]])
    _apply(data, write_tablet(followed))
    assert c.tablet("abc-0000").config_index == 9 and c.config_indexes() == {"abc-0000": 9,
                                                                            "abc-0001": 0}
    _apply(data, delete_table(TABLE))
    assert c.table("t") is None and c.tablet("abc-0000") is None and c.tablets() == []
    assert c.knows_tablet("abc-0000") and not c.knows_tablet("never")  # kept as deleted


def test_the_rows_are_what_a_catalog_transaction_carries():
    for op in write_table(TABLE, [T1]):
        msgspec.convert(op, MicroOp)  # each is a micro-op the state machine takes


def test_an_old_masters_record_without_rf_reads_with_its_replica_count():
    data = {"tablet/x": {"id": "x", "table": "t", "bucket": [0, 1],
                         "replicas": [["u1", "h", 1], ["u2", "h", 1], ["u3", "h", 1]]}}
    assert Catalog(data).tablet("x").replication_factor == 3


@pytest.mark.parametrize("load,tablets,rf,want", [
    ({"a": 0, "b": 0, "c": 0}, 1, 3, [{"a", "b", "c"}]),
    ({"a": 5, "b": 0, "c": 1, "d": 9}, 1, 2, [{"b", "c"}]),  # the least loaded
    ({"a": 0, "b": 0, "c": 0, "d": 0}, 4, 3, None),  # each server gets 3 of the 12 replicas
    ({"a": 2, "b": 0, "c": 0}, 2, 1, [{"b"}, {"c"}]),  # counts what it placed already
])
def test_placement_picks_the_least_loaded_counting_its_own_picks(load, tablets, rf, want):
    before = dict(load)
    out = place(load, tablets, rf, random.Random(1))
    assert len(out) == tablets and all(len(set(c)) == rf for c in out)
    if want is not None:
        assert sorted(map(sorted, out)) == sorted(map(sorted, want))  # ties go either way
    else:
        assert {u: sum(u in c for c in out) for u in load} == {u: 3 for u in load}
    assert load == before  # the caller's counts are not changed
