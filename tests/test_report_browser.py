"""Reports opened in a real headless Chromium over `tessera serve`: a screenshot that is not
blank, the verdict, plots that loaded (no broken image), the counterexample of an invalid run
and the Elle cycle, the store index. Results come from the checkers directly (no Spark here)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
from datetime import datetime
from pathlib import Path

import pytest

from reports.checkers.check import check_history
from reports.history import NEMESIS, Op, read_jsonl, write_jsonl
from reports.html.index import render_index
from reports.spark.job import analyze_run
from reports.spark.runs import check_options, find_runs, model_for
from reports.spark.synth import register_history, write_run

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--no-first-run", "--disable-component-update", "--disable-sync"]
RUNS = {"valid": "register/20260101T000001", "stale": "register/20260101T000002",
        "g1c": "append/20260101T000003", "clock": "register/20260101T000004", "set": "set/20260101T000005"}

PROBE = """<!doctype html><html><body><pre id="result">pending</pre><script>
const pages = %s;
function load(url) {
  return new Promise(done => {
    const f = document.createElement('iframe');
    f.style.width = '1100px'; f.style.height = '900px';
    f.onload = () => done(f); f.src = url; document.body.appendChild(f);
  });
}
(async () => {
  const out = {};
  for (const url of pages) {
    const d = (await load(url)).contentDocument;
    const imgs = [...d.images];
    await Promise.all(imgs.map(i => i.complete ? null : new Promise(r => { i.onload = i.onerror = r; })));
    const verdict = d.getElementById('verdict');
    out[url] = {
      verdict: verdict ? verdict.textContent.trim() : null,
      images: imgs.length,
      broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src')),
      counterexample: !!d.getElementById('counterexample'),
      counterexample_svgs: d.querySelectorAll('#counterexample svg.counterexample').length,
      blocked_ops: d.querySelectorAll('svg.counterexample g.blocked').length,
      cycles: d.querySelectorAll('svg.cycle').length,
      timelines: d.querySelectorAll('svg.timeline').length,
      command: (d.getElementById('command') || {}).textContent || null,
      runs: d.querySelectorAll('#runs tr').length - 1,
      checkers: [...d.querySelectorAll('#checkers tr')].slice(1).map(tr => tr.textContent.replace(/\\s+/g, ' ').trim()),
      links: [...d.querySelectorAll('#runs a')].map(a => a.getAttribute('href')),
      files: [...d.querySelectorAll('#files a')].map(a => a.getAttribute('href')),
      log_links: d.querySelectorAll('svg.timeline a[href^="logs.html?from="]').length,
    };
    const verdict_filter = d.getElementById('f-verdict');
    if (verdict_filter) {  // the store index: filter to the invalid runs, then to kill + set
      const visible = () => [...d.querySelectorAll('#runs tr.run')].filter(tr => !tr.hidden).length;
      verdict_filter.value = 'invalid';
      verdict_filter.dispatchEvent(new Event('input'));
      out[url].invalid_shown = visible();
      d.getElementById('f-workload').value = 'set';
      d.getElementById('f-workload').dispatchEvent(new Event('input'));
      out[url].invalid_set_shown = visible();
      d.getElementById('f-nemesis').value = 'partition';
      d.getElementById('f-nemesis').dispatchEvent(new Event('input'));
      out[url].none_shown = visible();
    }
  }
  document.getElementById('result').textContent = JSON.stringify(out);
})();
</script></body></html>"""


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("Debian's chromium is not installed (make setup installs it)")
    return path


def g1c_history() -> list[Op]:
    return [Op(0, "invoke", 0, "txn", [["append", "x", 1], ["r", "y", None]], time=1_000_000),
            Op(1, "invoke", 1, "txn", [["append", "y", 1], ["r", "x", None]], time=2_000_000),
            Op(2, "ok", 0, "txn", [["append", "x", 1], ["r", "y", [1]]], time=30_000_000),
            Op(3, "ok", 1, "txn", [["append", "y", 1], ["r", "x", [1]]], time=40_000_000)]


def set_history_with_a_lost_element() -> list[Op]:
    """Adds of 1 and 2 acknowledged; a read sees both, a later read only 1: 2 is lost."""
    events = [("invoke", 0, "add", 1), ("ok", 0, "add", 1), ("invoke", 1, "add", 2), ("ok", 1, "add", 2),
              ("invoke", 2, "read", None), ("ok", 2, "read", [1, 2]),
              ("invoke", 2, "read", None), ("ok", 2, "read", [1])]
    return [Op(i, t, p, f, v, time=(i + 1) * 1_000_000) for i, (t, p, f, v) in enumerate(events)]


def with_clock_skew(ops: list[Op]) -> list[Op]:
    end = ops[-1].time
    skew = [Op(0, "info", NEMESIS, "start-clock", {"offsets_ms": {"n1": 1500, "n2": -700}}, time=end // 4),
            Op(0, "info", NEMESIS, "stop-clock", {"reset": ["n1", "n2"]}, time=end // 2)]
    merged = sorted(ops + skew, key=lambda op: op.time)
    return [Op(i, op.type, op.process, op.f, op.value, time=op.time, key=op.key) for i, op in enumerate(merged)]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("store")
    # started_at: history time 0 is 10:00:00 on the nodes' clocks, where synth's logs begin
    write_run(root, "20260101T000001", register_history(3000, seed=11), seed=11,
              started_at=datetime(2026, 11, 22, 10, 0, 0).timestamp())
    write_run(root, "20260101T000002", register_history(300, seed=12, stale_read=True), seed=12)
    write_run(root, "20260101T000003", g1c_history(), seed=13, test="append", workload="list-append")
    clock = write_run(root, "20260101T000004", [], seed=14)
    write_jsonl(with_clock_skew(register_history(500, seed=14)), clock / "history.jsonl")
    write_run(root, "20260101T000005", set_history_with_a_lost_element(), seed=15, test="set", workload="set")
    valid = root / RUNS["valid"]  # what a real run leaves beside its history
    (valid / "control.log").write_text("12:00:00 ssh n1: tessera tserver ...\n")
    (valid / "nodes" / "n1").mkdir(parents=True, exist_ok=True)
    (valid / "nodes" / "n1" / "tserver.log").write_text("2026-01-01 tserver INFO started\n")
    runs = find_runs([root])
    for run in runs:
        test = run.test()
        model = model_for(test)
        analyze_run(str(run.path), check_history(read_jsonl(run.history), model, **check_options(test, model)), "test")
    render_index(root, runs)
    return root


@pytest.fixture(scope="module")
def server(store):
    from reports.serve import make_server

    srv = make_server(store, "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def browse(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp / "chromium-profile"
    return subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def probed(store, server, tmp_path_factory) -> dict:
    pages = [f"{name}/report.html" for name in RUNS.values()] + ["index.html"]
    (store / "probe.html").write_text(PROBE % json.dumps(pages))
    out = browse(tmp_path_factory.mktemp("chromium"), "--virtual-time-budget=30000", "--dump-dom",
                 f"{server}/probe.html")
    m = re.search(r'<pre id="result">(.*?)</pre>', out.stdout, re.S)
    assert m and m.group(1) != "pending", out.stderr[-2000:]
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def test_screenshot_of_an_invalid_report_is_not_blank(server, tmp_path):
    import matplotlib.image

    shot = tmp_path / "shot.png"
    out = browse(tmp_path, "--window-size=1100,1400", f"--screenshot={shot}", f"{server}/{RUNS['stale']}/report.html")
    assert shot.is_file(), out.stderr[-2000:]
    pixels = matplotlib.image.imread(str(shot))[..., :3]
    not_white = (pixels.min(axis=2) < 0.9).mean()
    assert pixels.std() > 0.05 and 0.02 < not_white < 0.95


def test_reports_show_the_verdict_and_load_every_plot(probed):
    for name, expected in (("valid", "VALID"), ("stale", "INVALID"), ("g1c", "INVALID"), ("clock", "VALID"),
                           ("set", "INVALID")):
        page = probed[f"{RUNS[name]}/report.html"]
        assert page["verdict"] == expected, name
        assert page["broken"] == [], name
        assert page["timelines"] >= 1 and page["command"].startswith("tessera test"), name
    # latency, its quantiles, throughput, raft
    assert probed[f"{RUNS['valid']}/report.html"]["images"] == 4
    assert probed[f"{RUNS['clock']}/report.html"]["images"] == 5  # and the clock offsets


def test_invalid_reports_draw_the_counterexample_and_the_cycle(probed):
    stale = probed[f"{RUNS['stale']}/report.html"]
    assert stale["counterexample"] and stale["counterexample_svgs"] >= 1 and stale["blocked_ops"] >= 1
    g1c = probed[f"{RUNS['g1c']}/report.html"]
    assert g1c["counterexample"] and g1c["cycles"] == 1
    assert not probed[f"{RUNS['valid']}/report.html"]["counterexample"]


def test_reports_say_what_each_checker_decided(probed):
    checkers = probed[f"{RUNS['set']}/report.html"]["checkers"]
    assert probed[f"{RUNS['set']}/report.html"]["verdict"] == "INVALID"
    set_full = next(row for row in checkers if row.startswith("set "))
    assert "invalid" in set_full and "1 lost" in set_full and "1 stable" in set_full, checkers
    assert any(row.startswith("linearizability (advisory") for row in checkers), checkers
    g1c = probed[f"{RUNS['g1c']}/report.html"]["checkers"]
    assert any("G1c" in row and "judged against strict-serializable" in row for row in g1c), g1c


def test_a_report_links_the_runs_files_and_logs_open_as_text(probed, server):
    """Every link resolves over `tessera serve`; logs and histories are shown, not downloaded."""
    import urllib.request

    files = probed[f"{RUNS['valid']}/report.html"]["files"]
    assert {"history.jsonl", "test.json", "results.json", "control.log",
            "nodes/n1/tserver.log"} <= set(files), files
    for href in files:
        with urllib.request.urlopen(f"{server}/{RUNS['valid']}/{href}") as resp:
            assert resp.status == 200 and resp.read(), href
            if href.endswith((".log", ".jsonl", ".edn")):
                assert resp.headers["Content-Type"].startswith("text/plain"), href


def test_index_lists_every_run_with_a_link(probed):
    index = probed["index.html"]
    assert index["runs"] == len(RUNS) and index["broken"] == [] and index["images"] == 1
    assert sorted(index["links"]) == sorted(f"{name}/report.html" for name in RUNS.values())


def test_index_filters_by_verdict_workload_and_nemesis(probed):
    index = probed["index.html"]
    assert (index["invalid_shown"], index["invalid_set_shown"], index["none_shown"]) == (3, 1, 0)


def test_the_log_viewer_shows_the_lines_of_an_ops_time_window(probed, server, tmp_path):
    """Timeline bars link to logs.html at their op's window; the viewer, served by `tessera
    serve`, keeps each node log's lines stamped inside the window (synth's Raft lines of this
    2 s run: two per host at 0.000-0.999 s, one per tablet, n2..n5; n1's log has no stamped
    line, and a window after the run shows nothing)."""
    assert probed[f"{RUNS['valid']}/report.html"]["log_links"] > 100
    out = browse(tmp_path, "--virtual-time-budget=20000", "--dump-dom",
                 f"{server}/{RUNS['valid']}/logs.html?from=0&to=0.999&margin=0")
    status = re.search(r'<span id="status">(.*?)</span>', out.stdout)
    assert status and status.group(1) == "8 lines from 5 logs", out.stdout[-3000:]
    shown = re.findall(r'<span class="t">\s*([\d.]+)\s*</span>(2026-11-22 10:00:0\d)', out.stdout)
    assert len(shown) == 8 and all(0 <= float(t) < 1 and s.endswith("00") for t, s in shown), shown
    later = browse(tmp_path, "--virtual-time-budget=20000", "--dump-dom",
                   f"{server}/{RUNS['valid']}/logs.html?from=2&to=3&margin=0")
    assert '<span id="status">0 lines from 5 logs</span>' in later.stdout, later.stdout[-3000:]


LAYOUT_PROBE = """<!doctype html><html><body><pre id="result">pending</pre><script>
const f = document.createElement('iframe');
f.style.width = '1280px'; f.style.height = '800px';
f.onload = async () => {
  const d = f.contentDocument;
  await Promise.all([...d.images].map(i => i.complete ? null : new Promise(r => { i.onload = i.onerror = r; })));
  const top = sel => { const e = d.querySelector(sel); return e ? e.getBoundingClientRect().top : null; };
  const bottom = sel => { const e = d.querySelector(sel); return e ? e.getBoundingClientRect().bottom : null; };
  document.getElementById('result').textContent = JSON.stringify({
    verdict: top('#verdict'), faults: top('#faults'), checkers: top('#checkers table'), checkers_end: bottom('#checkers table'),
    throughput: top('img[alt="Throughput"]'), details: top('#check-details'),
    timeline: top('#timeline'), expected_open: !!d.querySelector('details.expected[open]'),
  });
};
f.src = %s; document.body.appendChild(f);
</script></body></html>"""


def test_a_busy_report_leads_with_the_verdict_the_checkers_and_the_throughput(store, server,
                                                                             tmp_path):
    """In headless Chromium at 1280x800: a run with eight fault kinds and two
    dozen run-level findings still shows the verdict and the checker table on the first screen
    and starts the throughput plot within 1,600 px; the findings come after the timeline, and
    the expected ones are folded."""
    kinds = ["partition", "packet", "clock", "pause", "kill", "membership", "disk",
             "lose-unfsynced"]
    ops = register_history(2000, seed=16)
    end = max(op.time for op in ops)
    nemesis, index = [], len(ops)
    for i, kind in enumerate(kinds):  # each fault over an eighth of the run
        for f, t in ((f"start-{kind}", end * i // 8), (f"stop-{kind}", end * (i + 1) // 8)):
            # an invoke, then the completion: a start says what the hosts showed after it, and
            # the disk fault's start failed (the first screen must say so)
            done = {"n": 1, **({"observed": {"ok": True}} if f.startswith("start-") else {})}
            error = "ClusterError: n3: tc: not found" if f == "start-disk" else None
            for value, dt in ((None, 0), (None if error else done, 1)):
                nemesis.append(Op(index=index, type="info", process=NEMESIS, f=f, value=value,
                                  time=t + dt, error=error if value is None and dt else None))
                index += 1
    run = write_run(store, "20260101T000006", sorted(ops + nemesis, key=lambda o: o.time), seed=16,
                    nemesis=kinds)
    (run / "convergence.json").write_text(json.dumps({
        "checker": "convergence", "verdict": "valid", "errors": [], "tablets": [],
        "notes": [{"type": "majority-failed", "tablet": f"t{i}",
                   "explanation": f"tablet t{i} has no leader: " + "x " * 80} for i in range(24)]}))
    [found] = [r for r in find_runs([store]) if r.path == run]
    test = found.test()
    model = model_for(test)
    analyze_run(str(run), check_history(read_jsonl(found.history), model, **check_options(test, model)), "test")
    # A note that names no log line (convergence's) shows no empty host/file:line before it.
    html = (run / "report.html").read_text()
    assert "<b>majority-failed</b>: tablet t0 has no leader" in html
    assert re.search(r"Faults: 7 start\(s\) seen in force.*<b>1 failed to start</b>.*"
                     r"never took effect: disk</b>.*start-disk at .* failed: ClusterError", html, re.S)
    (store / "layout.html").write_text(LAYOUT_PROBE % json.dumps("register/20260101T000006/report.html"))
    out = browse(tmp_path, "--virtual-time-budget=30000", "--dump-dom", f"{server}/layout.html")
    m = re.search(r'<pre id="result">(.*?)</pre>', out.stdout, re.S)
    assert m and m.group(1) != "pending", out.stderr[-2000:]
    at = json.loads(m.group(1).replace("&quot;", '"'))
    assert at["verdict"] is not None and at["verdict"] < 800, at
    assert at["faults"] is not None and at["faults"] < 800, at  # the faults that did not take
    assert at["checkers"] is not None and at["checkers"] < 800, at
    assert at["throughput"] is not None and at["throughput"] < 1600, at
    assert at["details"] > at["timeline"] > at["throughput"], at  # the findings come last
