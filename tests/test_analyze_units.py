"""The pure parts of the analysis: finding runs, units and their merge, fault periods, the Raft
leader track (no Spark)."""

from __future__ import annotations

from reports.history import NEMESIS, Op
from reports.html.raftlog import leader_tracks, raft_events
from reports.spark.results import clock_offsets, failure_line, fault_periods, incomplete
from reports.spark.runs import check_options, checker_version, find_runs
from reports.spark.synth import register_history, write_run
from reports.spark.units import CORRUPT, check_unit, decode, merge_run


def test_find_runs_in_a_store_a_test_dir_and_a_run_dir_ignoring_latest(tmp_path):
    a = write_run(tmp_path, "20260101T000002", register_history(10, seed=1), seed=1)
    b = write_run(tmp_path, "20260101T000001", register_history(10, seed=2), seed=2, test="other")
    (tmp_path / "latest").symlink_to(a.relative_to(tmp_path))
    assert [r.path for r in find_runs([tmp_path])] == [b, a]  # oldest first
    assert [r.path for r in find_runs([tmp_path / "register"])] == [a]
    assert [r.path for r in find_runs([a, a])] == [a]
    assert find_runs([tmp_path])[0].store == tmp_path


def test_checker_version_is_a_stable_digest():
    assert checker_version() == checker_version() and len(checker_version()) == 16


def test_checker_options_are_read_from_test_json():
    bank = {"workload": "bank", "checker": {"model": "bank", "options": {"total": 80}}}
    assert check_options(bank, "bank") == {"total": 80}
    assert check_options({"workload": "bank"}, "bank") == {"total": 100}  # recorded before totals were
    assert check_options({"workload": "register", "checker": {"model": "cas-register"}}, "cas-register") == {}


def test_only_a_run_the_harness_finished_can_be_judged():
    assert incomplete({"workload": "register", "status": "complete"}) is None
    assert incomplete({"workload": "register"}) is None  # recorded before runs had a status
    assert incomplete({}) == "no readable test.json"
    assert "running" in incomplete({"status": "running"})
    assert "crashed: boom" in incomplete({"status": "crashed", "error": "boom"})


def test_unit_decode_orders_by_index_and_names_a_bad_record():
    lines = '{"index":1,"type":"ok","process":0,"f":"read","value":3}\n{"index":0,"type":"invoke","process":0,"f":"read"}'
    assert [op.index for op in decode(lines)] == [0, 1]
    result = check_unit("cas-register", {}, "k", lines + '\n{"index":2,"type":"ok"}')
    assert result["verdict"] == "unknown" and "process" in result["unreadable"]


def test_unit_with_broken_pairing_is_unreadable_not_judged():
    lines = '{"index":0,"type":"ok","process":0,"f":"read","value":3}'
    assert check_unit("cas-register", {}, "k", lines)["verdict"] == "unknown"
    assert "unparseable" in check_unit("cas-register", {}, CORRUPT, '{"index":')["unreadable"]


def test_merge_run_combines_keys_and_lets_unreadable_win():
    def unit(key, verdict):
        return {"model": "cas-register", "verdict": verdict, "ops": 2, "results": [
            {"checker": "linearizability", "model": "cas-register", "verdict": verdict,
             "keys": [{"key": key, "verdict": verdict, "ops": 2}],
             "invalid_keys": [key] if verdict == "invalid" else [], "unknown_keys": []}]}

    merged = merge_run("cas-register", {"a": unit("a", "valid"), "b": unit("b", "invalid")})
    assert merged["verdict"] == "invalid" and merged["ops"] == 4
    assert merged["results"][0]["invalid_keys"] == ["b"] and len(merged["results"][0]["keys"]) == 2
    broken = merge_run("cas-register", {"a": unit("a", "valid"), CORRUPT: {"verdict": "unknown", "unreadable": "x"}})
    assert broken["verdict"] == "unknown" and "x" in broken["unreadable"]
    assert merge_run("bank", {})["verdict"] == "unknown"


def test_fault_periods_from_completed_start_to_completed_stop_or_end():
    s = 1_000_000_000
    ops = [Op(0, "info", NEMESIS, "start-kill", None, time=1 * s),
           Op(1, "info", NEMESIS, "start-kill", {"killed": ["n1"]}, time=2 * s),
           Op(2, "info", NEMESIS, "start-pause", {"paused": ["n2"]}, time=3 * s),
           Op(3, "info", NEMESIS, "stop-kill", {"restarted": ["n1"]}, time=4 * s),
           Op(4, "info", NEMESIS, "start-clock", {"offsets_ms": {"n1": 50}}, time=5 * s),
           Op(5, "invoke", 0, "read", None, time=6 * s)]
    periods = {p["kind"]: (p["start"], p["end"]) for p in fault_periods(ops)}
    assert periods == {"kill": (2.0, 4.0), "pause": (3.0, 6.0), "clock": (5.0, 6.0)}
    assert clock_offsets(ops) == [{"time": 5.0, "offsets_ms": {"n1": 50}}]


def test_a_strobe_is_plotted_back_at_zero_when_it_ends_unless_a_stop_came_first():
    def op(i, f, t, value):
        return Op(index=i, type="info", process="nemesis", f=f, time=int(t * 1e9), value=value)
    strobe = {"fault": "strobe", "targets": ["n2"], "seconds": 3, "offsets_ms": {"n1": 0, "n2": 80}}
    assert clock_offsets([op(0, "start-clock", 1, strobe), op(1, "stop-clock", 9, {})]) == [
        {"time": 1.0, "offsets_ms": {"n1": 0, "n2": 80}},
        {"time": 4.0, "offsets_ms": {"n1": 0, "n2": 0}},
        {"time": 9.0, "offsets_ms": {"n1": 0, "n2": 0}}]
    assert clock_offsets([op(0, "start-clock", 1, strobe), op(1, "stop-clock", 2, {})]) == [
        {"time": 1.0, "offsets_ms": {"n1": 0, "n2": 80}},
        {"time": 2.0, "offsets_ms": {"n1": 0, "n2": 0}}]


def test_leader_track_from_node_logs(tmp_path):
    for host, lines in {"n1": ["10:00:01,000 raft tablet=T term=1 role=LEADER leader=u1",
                               "10:00:05,000 raft tablet=T term=2 role=FOLLOWER leader=None"],
                        "n2": ["10:00:06,000 raft tablet=T term=2 role=LEADER leader=u2",
                               "10:00:09,000 raft tablet=T term=2 role=LEADER leader=u2"]}.items():
        (tmp_path / "nodes" / host).mkdir(parents=True)
        (tmp_path / "nodes" / host / "tserver.log").write_text(
            "noise\n" + "".join(f"2026-11-22 {ln.split(' ', 1)[0]} tserver INFO node.replica.replica: {ln.split(' ', 1)[1]}\n" for ln in lines))
    events = raft_events(tmp_path)
    assert len(events) == 4
    track = [(s["host"], s["term"], s["end"] - s["start"]) for s in leader_tracks(events)["T"]]
    assert track == [("n1", 1, 4.0), ("n2", 2, 3.0)]


def test_failure_line_is_one_bounded_line():
    line = failure_line([{"checker": "logs", "type": "safety", "explanation": "x" * 500}], 80)
    assert len(line) == 80 and "\n" not in line and line.startswith("logs: safety — ")


def test_a_log_findings_failure_line_quotes_the_line_the_node_wrote():
    """CI printed "n2: etcd logged a fatal or panic line" for an etcd run and its run dir was
    gone: the line itself (what etcd said) belongs in the one line a user or a CI log sees."""
    from reports.spark.results import anomalies

    said = '{"level":"panic","msg":"tocommit(52) is out of range [lastIndex(0)]"}'
    check = {"results": [{"checker": "logs", "verdict": "invalid", "errors": [
        {"type": "fatal", "text": f"{said}\nmore", "explanation": "n2: etcd logged a fatal line"}]}]}
    line = failure_line(anomalies(check, None), 600)
    assert line == f"logs: fatal — n2: etcd logged a fatal line: {said}"
    assert failure_line([{"checker": "c", "type": "t", "explanation": "e"}]) == "c: t — e"


def test_a_check_invalid_in_a_sentence_of_its_own_is_named_in_the_failure_line():
    """The end check that compares the servers' tables says "the servers' tables differ" and
    nothing else: a MariaDB run whose binlog replicas diverged after power losses printed
    "no checker was sure" in its matrix row. It is an anomaly of its own now, named by its
    checker; a valid or unknown check adds none."""
    from reports.spark.results import anomalies

    check = {"results": [
        {"checker": "bank", "verdict": "valid", "errors": []},
        {"checker": "convergence", "verdict": "invalid", "error": "the servers' tables differ",
         "checksums": {"n1": "1 0 3", "n2": "1 0 4"}},
        {"checker": "logs", "verdict": "unknown", "error": "no logs"},
        {"checker": "elle", "verdict": "invalid", "anomalies": [{"type": "G0"}]}]}
    found = anomalies(check, None)
    assert [(a["checker"], a["type"]) for a in found] == [("convergence", "invalid"),
                                                           ("elle", "G0")]
    assert failure_line(found).startswith(
        "convergence: invalid; elle: G0 — the servers' tables differ")


def test_a_runs_row_names_its_system_and_the_settings_it_was_judged_with(tmp_path):
    """The store's runs table groups by setting: a MariaDB matrix draws topology and isolation
    per run, and each run's anomalies mean something only beside the model it claimed."""
    from reports.spark.results import run_row, settings

    test = {"db": "mariadb", "workload": "list-append",
            "flags": {"topology": "galera", "isolation": "repeatable-read"},
            "workload_options": {"consistency_model": "snapshot-isolation"}}
    assert settings(test) == ("isolation=repeatable-read,topology=galera,"
                              "model=snapshot-isolation")
    assert settings({"workload": "register"}) == ""
    write_run(tmp_path / "store", "20261203T060000", register_history(3, 1), 1, **test)
    [found] = find_runs([tmp_path / "store"])
    row = run_row(found, {"verdict": "invalid", "anomalies": [{"type": "lost-update"}]})
    assert (row["db"], row["settings"], row["anomaly_types"]) == (
        "mariadb", "isolation=repeatable-read,topology=galera,model=snapshot-isolation",
        "lost-update")
