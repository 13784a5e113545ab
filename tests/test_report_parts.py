"""Pure parts of the HTML report: the op timeline's pages and nemesis bands, and the latency
quantiles over time."""

from reports.history import Op
from reports.html.plots import latency_quantiles
from reports.html.timeline import pages, process_timeline_svg


def _ops(n: int) -> list[Op]:
    ops = []
    for i in range(n):
        t = i * 10_000_000  # an op every 10 ms, each 5 ms long
        ops += [Op(2 * i, "invoke", i % 7, "write", i, time=t),
                Op(2 * i + 1, "ok", i % 7, "write", i, time=t + 5_000_000)]
    return ops


def test_every_op_is_on_a_page():
    got = pages(_ops(1001) + [Op(5000, "info", "nemesis", "start-kill", {"killed": ["n1"]},
                                 time=1)], per_page=400)
    assert [len(p) for p in got] == [400, 400, 201]
    assert [inv.value for p in got for inv, _ in p] == list(range(1001))


def test_nemesis_periods_the_page_overlaps_are_drawn():
    (page,) = pages(_ops(100), per_page=400)  # 0 .. 0.995 s
    svg = process_timeline_svg(page, [{"kind": "kill", "start": 0.5, "end": 3.0, "value": {}},
                                      {"kind": "clock", "start": 2.0, "end": 3.0, "value": {}}])
    assert svg.count('class="nemesis"') == 1 and 'data-kind="kill"' in svg
    assert "clock" not in svg


def test_latency_quantiles_per_window_and_op_type():
    pairs = []
    for i in range(1, 101):  # window 0: latencies 1..100 ms; window 1: one read of 7 ms
        inv = Op(0, "invoke", 0, "write", 0, time=0)
        pairs.append((inv, Op(1, "ok", 0, "write", 0, time=i * 1_000_000)))
    pairs.append((Op(2, "invoke", 1, "read", None, time=1_500_000_000),
                  Op(3, "ok", 1, "read", 1, time=1_507_000_000)))
    pairs.append((Op(4, "invoke", 2, "read", None, time=1_600_000_000),
                  Op(5, "fail", 2, "read", None, time=1_900_000_000)))  # not ok: left out
    got = latency_quantiles(pairs, 1.0)
    assert got["write"] == [(0.5, {0.5: 50.0, 0.95: 95.0, 0.99: 99.0, 1.0: 100.0})]
    assert got["read"] == [(1.5, {0.5: 7.0, 0.95: 7.0, 0.99: 7.0, 1.0: 7.0})]


def test_the_load_line_says_the_rate_its_pacing_and_a_grouping_write_mode():
    from harness.spec import load_line

    assert load_line({"rate": 100.0, "pacing": "bursts", "writes": "shared"}) == \
        "100 ops/s, in bursts; writes shared"
    assert load_line({"rate": 100.0, "writes": "own"}) == "100 ops/s, evenly paced"
    assert load_line({"rate": 0.0}).startswith("unpaced")
    assert load_line({}) == "not recorded"
