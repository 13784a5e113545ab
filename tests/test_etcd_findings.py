"""The etcd findings the README reports, checked again from their archived histories
(docs/findings/etcd: each run's test.json and schedule.json, which `tessera replay` takes, its
results.json and its history). A finding stands only if the project's checkers still find it in
the history the run recorded."""

import gzip
import json
from pathlib import Path

import pytest

from reports.checkers.check import check_history
from reports.history import read_jsonl

FINDINGS = Path(__file__).resolve().parent.parent / "docs" / "findings" / "etcd"


def checked(run: str, model: str, tmp_path) -> dict:
    src = FINDINGS / run
    history = tmp_path / "history.jsonl"
    history.write_bytes(gzip.decompress((src / "history.jsonl.gz").read_bytes()))
    assert json.loads((src / "test.json").read_text())["db"] == "etcd"
    return {r["checker"]: r for r in check_history(read_jsonl(history), model)["results"]}


def test_serializable_reads_under_partitions_are_stale(tmp_path):
    lin = checked("register/20261127T034427", "cas-register", tmp_path)["linearizability"]
    assert lin["verdict"] == "invalid" and lin["invalid_keys"], lin


@pytest.mark.parametrize("run", ["lock-set/20261127T035018",  # pauses
                                 "lock-set/20261127T062926"])  # pauses and partitions
def test_lock_set_loses_acknowledged_adds(run, tmp_path):
    sets = checked(run, "set", tmp_path)["set"]
    assert sets["verdict"] == "invalid" and sets["lost_count"] > 0, sets


@pytest.mark.parametrize("run", sorted(str(p.parent.relative_to(FINDINGS))
                                       for p in FINDINGS.glob("*/*/schedule.json")))
def test_every_finding_can_be_replayed(run):
    from harness.replay import load

    spec, _ = load(FINDINGS / run)
    assert spec.db == "etcd" and spec.store == str(FINDINGS)


@pytest.mark.parametrize("run", ["register/20261127T061316", "set/20261127T063637"])
def test_a_bit_flipped_in_bbolts_db_went_unnoticed_and_the_member_diverged(run, tmp_path):
    """The member's state is known only from the hashes the run recorded: the convergence rule
    judges them again, and the history must show that member's db damaged and running on."""
    from harness.systems.etcd.deployment import compare_members

    src = FINDINGS / run
    recorded = next(r for r in json.loads((src / "results.json").read_text())["check"]["results"]
                    if r["checker"] == "convergence")
    again = compare_members(recorded["members"], sorted(recorded["members"]))
    assert again["verdict"] == "invalid"
    (odd,) = [hosts for hosts in again["errors"][0]["groups"].values() if len(hosts) == 1]
    history = tmp_path / "history.jsonl"
    history.write_bytes(gzip.decompress((src / "history.jsonl.gz").read_bytes()))
    damage = [o.value for o in read_jsonl(history) if o.process == "nemesis"
              and o.f == "start-disk" and o.type != "invoke" and "file" in (o.value or {})]
    assert [(d["host"], d["file"].rsplit("/", 1)[-1], d["mode"], d["replica"]["state"])
            for d in damage][0] == (odd[0], "db", "bitflip", "RUNNING")
