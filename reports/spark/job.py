"""The Spark job: check every run's history in parallel, write each run's results.json and
report.html, and the store's Parquet tables and index.html.

History lines are read into one DataFrame and parsed with an explicit schema (an unparseable
line becomes a null op, collected into its run's corrupt unit, instead of failing the job), split
into units (`units`) grouped in the JVM, and checked on the executors; reports are rendered on the executors too, one task per run. The store must be at
the same path for the driver and every executor (local mode, or a shared filesystem).
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import TextIO

from reports.spark import results as res
from reports.spark import ship
from reports.spark.runs import ANALYSIS_DIR, PER_KEY, Run, check_options, checker_version, model_for
from reports.spark.units import CORRUPT, SEPARATOR, WHOLE_RUN, check_unit, merge_run

# The op fields the JVM parses to split runs into units (explicit, never inferred); executors
# decode whole records with the project's `Op` type. Parsing fewer fields is most of the speed.
OP_FIELDS = [("index", "long"), ("type", "string"), ("process", "string"), ("key", "string")]
RUN_FIELDS = [("run", "string"), ("path", "string"), ("test", "string"), ("started", "string"),
              ("db", "string"), ("settings", "string"), ("workload", "string"), ("nemeses", "string"), ("seed", "long"), ("verdict", "string"),
              ("status", "string"), ("error", "string"), ("ops", "long"), ("ok_ops", "long"),
              ("duration_s", "double"), ("throughput", "double"), ("anomaly_types", "string"),
              ("checker_version", "string"), ("probes", "string")]
KEY_FIELDS = [("run", "string"), ("checker", "string"), ("key", "string"), ("verdict", "string"),
              ("ops", "long"), ("states", "long"), ("seconds", "double"), ("reason", "string"),
              ("anomaly_types", "string")]


def schema(fields: list[tuple[str, str]]):
    from pyspark.sql import types as T

    kinds = {"long": T.LongType(), "string": T.StringType(), "double": T.DoubleType()}
    return T.StructType([T.StructField(n, kinds[k], True) for n, k in fields])


def session(master: str | None, app: str = "tessera-analyze"):
    """A SparkSession for this box: no UI, loopback only, quiet. `master` None keeps what
    spark-submit set."""
    import os

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # never another interface
    b = (SparkSession.builder.appName(app)
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.driver.memory", "2g")
         .config("spark.sql.adaptive.coalescePartitions.enabled", "false")
         # histories are a few MB: small input splits spread them over every core
         .config("spark.sql.files.maxPartitionBytes", str(8 << 20))
         .config("spark.sql.files.openCostInBytes", str(1 << 20))
         .config("spark.python.worker.reuse", "true"))
    if master:
        b = b.master(master)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sc = spark.sparkContext
    # several units per core, so a slow unit does not leave a core idle and progress moves
    spark.conf.set("spark.sql.shuffle.partitions", str(max(4, 4 * sc.defaultParallelism)))
    if not sc.master.startswith("local"):
        # Spark serves the zip from this path to executors while the job runs: removed when the
        # analysis exits, so nightly analyses leave no zip behind in the temp dir
        where = Path(tempfile.mkdtemp(prefix="tessera-ship-"))
        atexit.register(shutil.rmtree, where, True)
        sc.addPyFile(str(ship.package_zip(where / "tessera-reports.zip")))
    return spark


def up_to_date(run: Run, version: str) -> bool:
    """Analyzed with this checker version, and the harness's record has not changed since (a
    run analyzed while it ran, or before it was marked crashed, is analyzed again)."""
    prev = run.previous_results()
    return (prev.get("checker_version") == version and prev.get("test") == run.test()
            and run.report.is_file())


class Progress:
    """One status line on the terminal, rewritten in place while Spark works."""

    def __init__(self, out: TextIO | None):
        self.out = out
        self.tty = out is not None and out.isatty()
        self.last = ""

    def show(self, text: str) -> None:
        if self.out is not None and text != self.last:
            self.last = text  # a log file gets each new state once, a terminal one updating line
            self.out.write("\r" + text.ljust(72) if self.tty else text + "\n")
            self.out.flush()

    def done(self, text: str) -> None:
        if self.out is not None:
            self.out.write(("\r" + text.ljust(72) if self.tty else text) + "\n")
            self.out.flush()
            self.last = ""


def _while_running(action, poll, progress: Progress):
    """Run a Spark action in a thread and show `poll()` until it finishes."""
    box: dict = {}

    def work() -> None:
        try:
            box["value"] = action()
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    t = threading.Thread(target=work, daemon=True)
    t.start()
    while t.is_alive():
        progress.show(poll())
        t.join(0.5)
    if "error" in box:
        raise box["error"]
    return box["value"]


def check_runs(spark, runs: list[Run], progress: Progress) -> dict[Run, dict]:
    """Each run's merged check result (see `units.merge_run`)."""
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    meta = {}
    for r in runs:
        test = r.test()
        model = model_for(test)
        meta[str(r.path)] = (model, check_options(test, model))
    readable = [r for r in runs if r.history.is_file()]
    checks: dict[Run, dict] = {r: {"model": meta[str(r.path)][0], "verdict": "unknown", "ops": 0,
                                   "results": [], "unreadable": "no history.jsonl"}
                               for r in runs if r not in readable}
    if not readable:
        return checks
    runs_df = spark.createDataFrame(
        [(r.history.as_uri(), str(r.path), meta[str(r.path)][0] in PER_KEY) for r in readable],
        "uri string, run string, per_key boolean")
    text = (spark.read.text([str(r.history) for r in readable])
            .where(F.trim("value") != "")
            .withColumn("uri", F.input_file_name())
            .join(F.broadcast(runs_df), "uri"))
    op = F.from_json("value", schema(OP_FIELDS), {"mode": "PERMISSIVE"})
    unit = (F.when(F.col("op.index").isNull() | F.col("op.type").isNull(), F.lit(CORRUPT))
            .when(F.col("op.process") == "nemesis", F.lit(None))
            .when(F.col("per_key"), F.coalesce(F.col("op.key"), F.lit("")))
            .otherwise(F.lit(WHOLE_RUN)))
    # a unit's records joined into one string: Python decodes it in one msgspec call instead of
    # building a Row per op (and puts the records back in index order)
    grouped = (text.withColumn("op", op).withColumn("unit", unit).where(F.col("unit").isNotNull())
               .groupBy("run", "unit")
               .agg(F.array_join(F.collect_list("value"), SEPARATOR).alias("lines"))
               .persist())
    total = _while_running(grouped.count, lambda: "reading histories ...", progress)
    done = sc.accumulator(0)
    invalid = sc.accumulator(0)
    shared = sc.broadcast(meta)

    def check_partition(rows):
        for row in rows:
            model, options = shared.value[row["run"]]
            result = check_unit(model, options, row["unit"], row["lines"])
            done.add(1)
            if result["verdict"] == "invalid":
                invalid.add(1)
            yield row["run"], row["unit"], result

    checked = _while_running(
        grouped.rdd.mapPartitions(check_partition).collect,
        lambda: f"checking: {done.value}/{total} units done, {invalid.value} invalid so far",
        progress)
    progress.done(f"checked {total} units of {len(readable)} runs, {invalid.value} invalid")
    grouped.unpersist()
    by_run: dict[str, dict[str, dict]] = defaultdict(dict)
    for run, unit_name, result in checked:
        by_run[run][unit_name] = result
    for r in readable:
        checks[r] = merge_run(meta[str(r.path)][0], by_run.get(str(r.path), {}))
    return checks


def analyze_run(path: str, check: dict, version: str) -> str:
    """Executor side: a run's results.json and report.html from its check result."""
    from reports.history import HistoryError, read_jsonl
    from reports.html.report import render_report

    run = Run(Path(path))
    ops, error = None, None
    try:
        ops = read_jsonl(run.history)
    except (HistoryError, OSError) as e:
        error = f"unreadable history: {e}"
    results = res.build(run, check, ops, error, version)
    res.write(run.results, results)
    render_report(run, results, ops)
    return results["verdict"]


def report_runs(spark, checks: dict[Run, dict], version: str, progress: Progress) -> None:
    sc = spark.sparkContext
    done = sc.accumulator(0)
    items = [(str(r.path), c) for r, c in checks.items()]

    def render(item):
        verdict = analyze_run(item[0], item[1], version)
        done.add(1)
        return verdict

    slices = max(1, min(len(items), 4 * sc.defaultParallelism))
    _while_running(sc.parallelize(items, slices).map(render).collect,
                   lambda: f"reports: {done.value}/{len(items)} runs", progress)
    progress.done(f"wrote {len(items)} reports")


def write_tables(spark, store: Path, runs: list[Run]) -> Path:
    """The store's Parquet tables `analysis/runs.parquet` and `analysis/keys.parquet`, over every
    analyzed run in it (fresh or skipped)."""
    run_rows, key_rows = [], []
    for r in runs:
        results = r.previous_results()
        if results.get("checker_version"):
            run_rows.append(res.run_row(r, results))
            key_rows.extend(res.key_rows(r, results))
    out = store / ANALYSIS_DIR
    for name, rows, fields in (("runs", run_rows, RUN_FIELDS), ("keys", key_rows, KEY_FIELDS)):
        tuples = [tuple(row[n] for n, _ in fields) for row in rows]
        (spark.createDataFrame(tuples, schema(fields)).coalesce(1)
         .write.mode("overwrite").parquet(str(out / f"{name}.parquet")))
    return out


def analyze(paths: list[Path], master: str | None, force: bool, out: TextIO | None = sys.stderr,
            spark=None) -> dict:
    """Analyze the runs under `paths`; returns {"runs": [...], "stores": [...], "checked": n}.
    A given `spark` session is used and left running (tests share one); otherwise one is started
    for `master` when there is work, and stopped."""
    from reports.html.index import render_index
    from reports.spark.runs import find_runs

    progress = Progress(out)
    runs = find_runs(paths)
    version = checker_version()
    todo = [r for r in runs if force or not up_to_date(r, version)]
    stores = sorted({r.store for r in runs})
    store_runs = {s: find_runs([s]) for s in stores}
    started = time.monotonic()
    own = spark is None
    phases: dict[str, float] = {}

    def lap(name: str) -> None:  # seconds since the previous lap, added up per phase
        phases[name] = round(phases.get(name, 0.0) + time.monotonic() - started - sum(phases.values()), 3)

    try:
        if own and (todo or any(not (s / ANALYSIS_DIR / "runs.parquet").exists() for s in stores)):
            spark = session(master)
        lap("start")
        if todo:
            progress.done(f"analyzing {len(todo)} of {len(runs)} runs "
                          f"({len(runs) - len(todo)} already analyzed with checker {version})")
            checks = check_runs(spark, todo, progress)
            lap("check")
            report_runs(spark, checks, version, progress)
            lap("reports")
        for s in stores:
            if todo or spark is not None:
                write_tables(spark, s, store_runs[s])
            lap("tables")
            render_index(s, store_runs[s])
            lap("index")
    finally:
        if own and spark is not None:
            spark.stop()
    summary = []
    for r in runs:
        results = r.previous_results()
        summary.append({"run": str(r.path), "verdict": results.get("verdict", "unknown"),
                        "status": results.get("status"), "error": results.get("error"),
                        "report": str(r.report), "skipped": r not in todo})
    return {"runs": summary, "stores": [str(s / "index.html") for s in stores],
            "checked": len(todo), "checker_version": version, "phases": phases,
            "seconds": round(time.monotonic() - started, 3)}
