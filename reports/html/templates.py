"""The page templates (Jinja2), kept in a module so they ship inside any wheel or zip of the
package without package-data configuration."""

STYLE = """\
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1060px; color: #222; }
h1 { margin-bottom: .2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 1.6em; }
.verdict { display: inline-block; padding: .25em .8em; border-radius: 6px; color: #fff; font-weight: bold; font-size: 1.4em; }
.verdict.valid { background: #2e9d4a; } .verdict.invalid { background: #d6342c; } .verdict.unknown { background: #e69500; }
table { border-collapse: collapse; font-size: .9em; } td, th { border: 1px solid #ddd; padding: .25em .6em; text-align: left; }
code, pre { background: #f4f4f4; padding: .1em .3em; border-radius: 3px; } pre { padding: .6em; overflow-x: auto; white-space: pre-wrap; }
.error { background: #fde8e6; border: 1px solid #d6342c; padding: .6em; border-radius: 4px; }
img.plot { max-width: 100%; border: 1px solid #eee; } svg { max-width: 100%; height: auto; border: 1px solid #eee; }
.v-valid { color: #2e9d4a; font-weight: bold; } .v-invalid { color: #d6342c; font-weight: bold; } .v-unknown { color: #e69500; font-weight: bold; }
"""

REPORT = """\
<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ run }}: {{ r.verdict }}</title>
<style>{% include "style.css.j2" %}</style></head>
<body>
<header id="summary">
<h1>{{ run }}</h1>
<p><span id="verdict" class="verdict {{ r.verdict }}">{{ r.verdict | upper }}</span>
  &nbsp;checked as <b>{{ r.checker }}</b> (checker {{ r.checker_version }}, {{ r.analyzed_at }})</p>
{% if r.error %}<p class="error" id="unreadable">{{ "Unreadable history" if r.status == "unreadable" else "Not judged" }}: {{ r.error }}</p>{% endif %}
<table>
<tr><th>workload</th><td>{{ test.workload }}</td></tr>
<tr><th>nemeses</th><td>{{ (test.nemesis or []) | join(", ") or "none" }}</td></tr>
<tr><th>seed</th><td>{{ test.seed }}</td></tr>
<tr><th>duration</th><td>{{ r.duration_s }} s of history (time limit {{ test.time_limit }} s), concurrency {{ test.concurrency }}</td></tr>
<tr><th>load</th><td id="load">{{ load }}</td></tr>
<tr><th>reproduce</th><td><code id="command">{{ command }}</code></td></tr>
{% if test.command and test.command != command %}<tr><th>ran as</th><td><code id="ran-as">{{ test.command }}</code></td></tr>{% endif %}
</table>
{% for res in (r.check or {}).get("results", []) if res.checker == "faults" %}
<p id="faults"{% if res.errors or res.never_fired %} class="error"{% endif %}>Faults: {{ res.starts.verified }} start(s) seen in force on the hosts{% if res.starts.unchecked %}, {{ res.starts.unchecked }} with no check on the hosts{% endif %}{% if res.starts.skipped %}, {{ res.starts.skipped }} skipped{% endif %}{% if res.starts.unverified %}; <b>{{ res.starts.unverified }} not in force when checked</b>{% endif %}{% if res.starts.failed %}; <b>{{ res.starts.failed }} failed to start</b>{% endif %}{% if res.never_fired %}; <b>never took effect: {{ res.never_fired | join(", ") }}</b>{% endif %}.
{% for e in res.errors %}<br>{{ e.explanation }}{% endfor %}</p>
{% endfor %}
{% if files %}<p id="files">Files: {% for label, href in files %}<a href="{{ href }}">{{ label }}</a>{{ " · " if not loop.last }}{% endfor %}</p>{% endif %}
</header>

{% if r.verdict == "invalid" %}
<section id="counterexample">
<h2>Why it is invalid</h2>
{% for cx in counterexamples %}
<h3>Key {{ cx.key }}: not linearizable</h3>
<p>{{ cx.explanation }}</p>
<p>The longest partial linearization{{ "s" if cx.svgs|length > 1 }} found: blue bars are ops placed in order (#n, with the
model state after each), the red bar is the op that cannot be placed. Hover a bar for details.</p>
{% for svg in cx.svgs %}{{ svg | safe }}{% endfor %}
{% endfor %}
{% for c in cycles %}
<h3>{{ c.type }} cycle</h3>
{{ c.svg | safe }}
<p>{{ c.explanation }}</p>
<table><tr><th>txn</th><th>process</th><th>index</th><th>ops</th></tr>
{% for t in c.transactions %}<tr><td>{{ t.name }}</td><td>{{ t.process }}</td><td>{{ t.index }}</td><td><code>{{ t.value }}</code></td></tr>{% endfor %}
</table>
{% endfor %}
{% if other_anomalies %}
<h3>Other anomalies</h3>
<ul>{% for a in other_anomalies %}<li><b>{{ a.type }}</b> ({{ a.checker }}): {{ a.explanation }}</li>{% endfor %}</ul>
{% endif %}
</section>
{% endif %}

{% if (r.check or {}).get("results") %}
<section id="checkers">
<h2>Checkers</h2>
<table><tr><th>checker</th><th>verdict</th><th>what it says</th></tr>
{% for res in r.check.results %}
<tr><td>{{ res.checker }}{% if res.advisory %} (advisory: counts only when invalid){% endif %}</td>
<td class="v-{{ res.verdict }}">{{ res.verdict }}</td>
<td>{% if res.reason %}{{ res.reason }}{% endif %}
{% if res.unknown_keys %}search budget spent before deciding {{ res.unknown_keys | length }} key(s){% endif %}
{% if res.anomaly_types %}anomalies: {{ res.anomaly_types | join(", ") }}{% endif %}
{% if res.consistency_model %}; judged against {{ res.consistency_model }}{% endif %}
{% if res.not %}; rules out {{ res["not"] | join(", ") }}{% endif %}
{% if res.possible %}; still possible: {{ res.possible | join(", ") }}{% endif %}
{% if res.checker == "set" and res.reads is defined %}{{ res.reads }} reads; {{ res.stable_count }} stable,
{{ res.lost_count }} lost, {{ res.stale_count }} stale, {{ res.never_read_count }} never read,
{{ res.recovered_count }} recovered (of {{ res.attempt_count }} attempted, {{ res.acknowledged_count }} acknowledged){% endif %}
{% if res.checker == "convergence" %}{% if res.tablets is defined %}{{ res.tablets | length }} tablet(s){% else %}{{ (res.nodes or {}) | length }} node(s){% endif %} compared{% if res.unreachable %}; unreachable: {{ res.unreachable | join(", ") }}{% endif %}{% endif %}
{% if res.checker == "faults" %}fault starts: {{ res.starts.verified }} seen in force, {{ res.starts.unverified }} not in force, {{ res.starts.failed }} failed, {{ res.starts.unchecked }} unchecked, {{ res.starts.skipped }} skipped{% endif %}
{% if res.checker == "alarms" %}{{ res.errors | length }} alarm(s) raised, in the probe files of {{ (res.read or []) | length }} process(es){% endif %}
{% if res.checker == "logs" %}{{ res.errors | length }} finding(s), {{ (res.expected or []) | length }} expected from injected damage,
{{ (res.notes or []) | length }} note(s), {{ (res.watchdog_restarts or []) | length }} watchdog restart(s){% endif %}</td></tr>
{% endfor %}</table>
</section>
{% endif %}

<section id="plots">
<h2>Latency and throughput</h2>
{% if r.nemesis and r.nemesis.periods %}<p>Shaded: nemesis periods by fault kind
({% for k, n in r.nemesis.fired.items() %}{{ k }} ×{{ n }}{{ ", " if not loop.last }}{% endfor %}).</p>{% endif %}
{% for title, src in figures %}
<figure><img class="plot" src="{{ src }}" alt="{{ title }}"><figcaption>{{ title }}</figcaption></figure>
{% else %}<p>No plots: the history has no completed client ops.</p>{% endfor %}
{% if raft_tablets == 0 %}<p>No Raft leader/term lines in the node logs.</p>{% endif %}
</section>

{% if r.stats %}
<section id="statistics">
<h2>Statistics</h2>
<table><tr><th>f</th><th>ok</th><th>fail</th><th>info</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th></tr>
{% for f, c in r.stats.counts.items() %}{% set q = r.stats.latency_ns.get(f, {}) %}
<tr><td>{{ f }}</td><td>{{ c.ok }}</td><td>{{ c.fail }}</td><td>{{ c.info }}</td>
{% for k in ["0.5", "0.9", "0.99", "1.0"] %}<td>{{ "%.1f" | format(q[k] / 1e6) if k in q else "" }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% if r.nemesis %}<p>Nemesis: {% for k, s in r.nemesis.fault_seconds.items() %}{{ k }} {{ s }} s{{ ", " if not loop.last }}{% else %}no faults fired{% endfor %}
{% if r.nemesis.never_fired %}; <b>never fired: {{ r.nemesis.never_fired | join(", ") }}</b>{% endif %}.</p>{% endif %}
</section>
{% endif %}

{% if r.probes %}
<section id="probes">
<h2>Code probes</h2>
<p>{{ r.probes.hit }} of the engine's {{ r.probes.declared }} probed rare branches fired in this
run ({{ r.probes.percent }} %; <code>tessera probes</code> says what each marks).</p>
{% if r.probes.runs %}<details><summary>fired ({{ r.probes.runs | length }})</summary>
<p>{{ r.probes.runs.keys() | list | join(", ") }}</p></details>{% endif %}
{% if r.probes.never %}<details><summary>never fired ({{ r.probes.never | length }})</summary>
<p>{{ r.probes.never | join(", ") }}</p></details>{% endif %}
</section>
{% endif %}

<section id="timeline">
<h2>Op timeline per process</h2>
{% if pages %}
<p>Page 1 of {{ pages }} below (400 ops a page; grey bands are nemesis periods).
Pages: {% for i in range(1, pages + 1) %}<a href="timeline/{{ i }}.html">{{ i }}</a> {% endfor %}</p>
{{ first_page | safe }}
{% else %}<p>No client ops.</p>{% endif %}
</section>

{% if (r.check or {}).get("results") %}
<section id="check-details">
<h2>What the run-level checks found</h2>
{% for res in r.check.results if res.checker in ("convergence", "logs") and (res.errors or res.expected or res.notes or res.watchdog_restarts) %}
<div id="checker-{{ res.checker }}">
<h3>{{ res.checker }}</h3>
{% for e in res.errors %}<div class="error"><b>{{ e.type }}</b>{% if e.file %} {{ e.host }}/{{ e.file }}:{{ e.line }}{% endif %}: {{ e.explanation }}
{% if e.text %}<pre>{{ e.text }}</pre>{% endif %}</div>
{% endfor %}
{% if res.expected %}<details class="expected"><summary>{{ res.expected | length }} expected finding(s): the engine's answer to damage the disk nemesis injected</summary>
{% for e in res.expected %}<p><b>{{ e.type }}</b> {{ e.host }}/{{ e.file }}:{{ e.line }}</p><pre>{{ e.text }}</pre>
{% endfor %}</details>{% endif %}
{% if res.notes %}<p>Notes (worth a look; the verdict does not count them):</p>
{% for e in res.notes %}<p><b>{{ e.type }}</b>{% if e.file %} {{ e.host }}/{{ e.file }}:{{ e.line }}{% endif %}: {{ e.explanation }}</p>{% if e.text %}<pre>{{ e.text }}</pre>{% endif %}
{% endfor %}{% endif %}
{% if res.watchdog_restarts %}<p>Watchdog restarts (a daemon died without being killed on purpose):
{% for w in res.watchdog_restarts %}{{ w.daemon }} on {{ w.host }} at {{ w.time_s }} s{{ ", " if not loop.last }}{% endfor %}.</p>{% endif %}
</div>
{% endfor %}
{% for res in r.check.results if res.checker == "set" and res.stable_latencies is defined %}
<p>Set latencies (ms; stable: how long after an add was known until every read saw it; lost: until it vanished):</p>
<table><tr><th></th>{% for q in res.stable_latencies %}<th>q{{ q }}</th>{% endfor %}</tr>
<tr><th>stable</th>{% for q, v in res.stable_latencies.items() %}<td>{{ v }}</td>{% endfor %}</tr>
{% if res.lost_latencies %}<tr><th>lost</th>{% for q in res.stable_latencies %}<td>{{ res.lost_latencies.get(q, "") }}</td>{% endfor %}</tr>{% endif %}
</table>
{% endfor %}
</section>
{% endif %}
</body></html>
"""

TIMELINE = """\
<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ run }}: ops, page {{ page }}</title>
<style>{% include "style.css.j2" %}</style></head>
<body><h1>{{ run }}: op timeline, page {{ page }} of {{ pages }}</h1>
<p><a href="../report.html">report</a>
{% if page > 1 %} · <a href="{{ page - 1 }}.html">previous</a>{% endif %}
{% if page < pages %} · <a href="{{ page + 1 }}.html">next</a>{% endif %}
{% if pages > 1 %} · <a href="1.html">first</a> · <a href="{{ pages }}.html">last</a>{% endif %}</p>
{{ svg | safe }}
</body></html>
"""

LOGS = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ run }}: node logs</title>
<style>{% include "style.css.j2" %}
pre.log { font-size: 11px; white-space: pre-wrap; margin: 0 0 1em; }
pre.log span.t { color: #888; }</style></head>
<body><h1>{{ run }}: node logs in a time window</h1>
<p><a href="report.html">report</a> · times are seconds since the run began (the history's
axis), placed by each node's own wall clock: a host the clock nemesis skewed is off by its
offset.</p>
<form id="window">from <input id="from" size="8"> to <input id="to" size="8"> s, with a margin
of <input id="margin" size="4"> s <button>show</button> <span id="status"></span></form>
<div id="logs"></div>
<script>
const START = {{ start | tojson }};  // history time 0 on the nodes' wall clock, as they log it
const FILES = {{ files | tojson }};
// Both stamps are read as UTC on purpose: only their difference matters, whatever this
// browser's zone.
function stamp(s) {
  const m = /^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d),(\d{3})/.exec(s);
  return m ? Date.UTC(+m[1], m[2] - 1, +m[3], +m[4], +m[5], +m[6], +m[7]) / 1000 : null;
}
const q = new URLSearchParams(location.search);
const get = id => document.getElementById(id);
get("from").value = q.get("from") || "0";
get("to").value = q.get("to") || "10";
get("margin").value = q.get("margin") || "1";
(async () => {
  const t0 = START && stamp(START);
  if (t0 === null || t0 === undefined) { get("status").textContent = "this run recorded no start time"; return; }
  const lo = +get("from").value - +get("margin").value, hi = +get("to").value + +get("margin").value;
  let shown = 0;
  for (const f of FILES) {
    let text;
    try {
      const r = await fetch(f);
      if (!r.ok) throw new Error(r.status);
      text = await r.text();
    } catch (e) {
      get("status").textContent = "cannot read the logs here (" + e.message + "): open this page " +
        "through `tessera serve`, which a browser lets fetch them";
      return;
    }
    const kept = [];
    let t = null;  // a line without a stamp (a traceback) belongs to the line before it
    for (const line of text.split("\n")) {
      const s = stamp(line);
      if (s !== null) t = s - t0;
      if (t !== null && t >= lo && t <= hi && line) kept.push([t, line]);
    }
    const h = document.createElement("h2");
    h.textContent = f.replace(/^nodes\//, "") + ": " + kept.length + " lines";
    const pre = document.createElement("pre");
    pre.className = "log";
    for (const [tt, line] of kept) {
      const span = document.createElement("span");
      span.className = "t";
      span.textContent = tt.toFixed(3).padStart(9) + "  ";
      pre.append(span, line + "\n");
    }
    get("logs").append(h, pre);
    shown += kept.length;
  }
  get("status").textContent = shown + " lines from " + FILES.length + " logs";
})();
</script>
</body></html>
"""

INDEX = """\
<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Tessera store</title>
<style>{% include "style.css.j2" %}</style></head>
<body><h1>Tessera runs</h1>
<p>{{ store }}: {{ rows|length }} runs — <span class="v-valid">{{ counts.valid }} valid</span>,
<span class="v-invalid">{{ counts.invalid }} invalid</span>, <span class="v-unknown">{{ counts.unknown }} unknown</span>.
Parquet tables: <code>analysis/runs.parquet</code>, <code>analysis/keys.parquet</code>.</p>
{% if trend %}<img class="plot" id="trend" src="{{ trend }}" alt="verdicts and throughput over runs">{% endif %}
<form id="filters" onsubmit="return false">Show runs of workload
<select id="f-workload"><option value="">any</option>{% for w in rows | map(attribute="workload") | unique | sort %}<option>{{ w }}</option>{% endfor %}</select>
with nemesis <input id="f-nemesis" size="14" placeholder="e.g. kill">
and verdict <select id="f-verdict"><option value="">any</option><option>valid</option><option>invalid</option><option>unknown</option></select>
<span id="f-count">{{ rows|length }}</span> shown.</form>
<table id="runs"><tr><th>date</th><th>system</th><th>workload</th><th>nemeses</th><th>verdict</th><th>anomalies</th><th>ops</th><th>ok ops/s</th><th>report</th></tr>
{% for row in rows %}
<tr class="run" data-workload="{{ row.workload }}" data-nemeses="{{ row.nemeses or "none" }}" data-verdict="{{ row.verdict }}"><td>{{ row.started }}</td><td>{{ row.db }}{% if row.settings %} <small>{{ row.settings }}</small>{% endif %}</td><td>{{ row.workload }}</td><td>{{ row.nemeses or "none" }}</td>
<td class="v-{{ row.verdict }}">{{ row.verdict }}{% if row.status == "unreadable" %} (unreadable){% endif %}</td><td>{{ row.anomaly_types }}</td>
<td>{{ row.ops }}</td><td>{{ row.throughput }}</td>
<td>{% if row.link %}<a href="{{ row.link }}">{{ row.run }}</a>{% else %}{{ row.run }} ({{ row.status }}){% endif %}</td></tr>
{% endfor %}</table>
<script>
(function () {
  const get = id => document.getElementById(id);
  function apply() {
    const w = get("f-workload").value, n = get("f-nemesis").value.trim().toLowerCase(),
          v = get("f-verdict").value;
    let shown = 0;
    for (const tr of document.querySelectorAll("#runs tr.run")) {
      const ok = (!w || tr.dataset.workload === w) && (!v || tr.dataset.verdict === v) &&
                 (!n || tr.dataset.nemeses.toLowerCase().includes(n));
      tr.hidden = !ok;
      shown += ok;
    }
    get("f-count").textContent = shown;
  }
  for (const id of ["f-workload", "f-nemesis", "f-verdict"]) get(id).addEventListener("input", apply);
})();
</script>
{% if probes %}<h2>Code probes</h2>
<p id="probes">The daemons of {{ probes.runs_with_probes }} runs fired {{ probes.hit }} of the engine's
{{ probes.declared }} code probes ({{ probes.percent }} %).{% if probes.never %} Never fired, paths no run here
has walked: {{ probes.never | join(", ") }}.{% endif %}</p>{% endif %}
{% if matrices %}<h2>Test matrices (tessera test-all)</h2>
<table id="matrices"><tr><th>date</th><th>mode</th><th>valid</th><th>invalid</th><th>unknown</th><th>not run</th><th>exit</th><th>seconds / budget</th><th>summary</th></tr>
{% for m in matrices %}
<tr><td>{{ m.started }}</td><td>{{ m.mode }}</td><td>{{ m.counts.valid }}</td><td>{{ m.counts.invalid }}</td>
<td>{{ m.counts.unknown }}</td><td>{{ m.counts["not run"] }}</td><td>{{ m.exit }}</td><td>{{ m.seconds }} / {{ m.budget }}</td>
<td><a href="{{ m.link }}">summary.json</a>{% if m.findings %} — {{ m.findings }}{% endif %}</td></tr>
{% endfor %}</table>{% endif %}
</body></html>
"""

TEMPLATES = {
    "style.css.j2": STYLE,
    "report.html.j2": REPORT,
    "timeline.html.j2": TIMELINE,
    "index.html.j2": INDEX,
    "logs.html.j2": LOGS,
}
