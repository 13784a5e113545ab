"""`tessera check HISTORY --model M [--json]`: judge one history file; `tessera check RUN_DIR`:
judge a stored run's history.jsonl by the model and options its test.json records.

Exit codes: 0 valid, 1 invalid, 2 unknown or a malformed history (the reason, with the line,
goes to stderr), 254 bad arguments, including a history file that does not exist."""

from __future__ import annotations

import argparse
import os
import sys

from node.exit_codes import BAD_ARGS, EXIT
from reports.checkers.consistency import DEFAULT_MODEL, MODEL_NAMES
from reports.checkers.registry import models

MODELS = tuple(models())
LINEARIZABLE = tuple(name for name, m in models().items() if m.linearizable)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("history", help="history.jsonl, a Jepsen history.edn, or a jepsen.log; "
                                        "or a run directory (store/<test>/<time>): its history, "
                                        "judged by the checker its test.json records")
    parser.add_argument("--model", choices=MODELS,
                        help="required for a history file; for a run directory, overrides the "
                             "recorded one. Linearizability models: " + ", ".join(LINEARIZABLE) +
                             "; set: Jepsen's set checker plus linearizability of a set; "
                             "list-append, rw-register: Elle-style anomaly search; bank; counter")
    parser.add_argument("--consistency-model", default=DEFAULT_MODEL, choices=MODEL_NAMES, metavar="MODEL",
                        help="list-append, rw-register: the consistency model the history must satisfy; "
                             "only anomalies it proscribes make the verdict invalid (default "
                             f"{DEFAULT_MODEL}; e.g. serializable, snapshot-isolation, repeatable-read, "
                             "read-committed; any model of Elle's lattice)")
    parser.add_argument("--nil-reads", choices=("value", "unknown"), default="value",
                        help="register, cas-register: an ok read of nil means the register holds "
                             "nil (value, Tessera's reads of an absent key; the default) or "
                             "nothing at all (unknown, as Knossos's models read Jepsen histories)")
    parser.add_argument("--json", action="store_true", help="print the full result as one JSON object")
    parser.add_argument("--time-limit", type=float, default=30.0, metavar="S",
                        help="linearizability search seconds per key before 'unknown' (default 30)")
    parser.add_argument("--max-states", type=int, default=2_000_000, metavar="N",
                        help="linearizability configurations per key before 'unknown' (default 2000000)")
    parser.add_argument("--total", type=int, default=None,
                        help="bank: the conserved total (default: the first read's)")
    parser.add_argument("--initial", default=None, metavar="JSON",
                        help='multi-register: initial values as a JSON object, e.g. {"x": 0, "y": 0}')


def run(args: argparse.Namespace) -> int:
    import json

    from reports.checkers.check import check_history
    from reports.history import NEMESIS, HistoryError, read_history

    recorded: dict = {}
    path = args.history
    if os.path.isdir(path):
        try:
            recorded = json.loads(open(os.path.join(path, "test.json")).read())["checker"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"tessera check: {path} is not a run directory with a test.json naming its "
                  f"checker: {e}", file=sys.stderr)
            return BAD_ARGS
        path = os.path.join(path, "history.jsonl")
    model = args.model or recorded.get("model")
    if model is None:
        print("tessera check: --model is required for a history file", file=sys.stderr)
        return BAD_ARGS
    if not os.path.isfile(path):
        print(f"tessera check: no such history file: {path}", file=sys.stderr)
        return BAD_ARGS
    try:
        ops = [o for o in read_history(path) if o.process != NEMESIS]
    except (HistoryError, OSError, UnicodeDecodeError) as e:
        print(f"tessera check: unreadable history: {e}", file=sys.stderr)
        return EXIT["unknown"]
    options = {"time_limit": args.time_limit, "max_states": args.max_states,
               "consistency_model": args.consistency_model,
               "nil_read_unknown": args.nil_reads == "unknown",
               **(recorded.get("options", {}) if model == recorded.get("model") else {})}
    if args.total is not None:
        options["total"] = args.total
    if args.initial:
        options["initial"] = json.loads(args.initial)
    result = check_history(ops, model, **options)
    if args.json:
        print(json.dumps(result, default=str))
    else:
        _print_summary(result)
    return EXIT[result["verdict"]]


def _print_summary(result: dict) -> None:
    print(f"{result['verdict'].upper()}  ({result['model']}, {result['ops']} ops)")
    for r in result["results"]:
        if r["checker"] == "linearizability":
            for k in r["keys"]:
                if k["verdict"] == "unknown":
                    print(f"  key {k['key']!r}: unknown ({k['reason']})")
                elif k["verdict"] == "invalid":
                    print(f"  key {k['key']!r}: not linearizable: {k['counterexample']['explanation']}")
        for a in r.get("anomalies", []) + r.get("errors", []):
            print(f"  {a['type']}: {a.get('explanation', a)}")
        if r.get("ruled_out"):
            print(f"  ruled out: {', '.join(r['ruled_out'])}")
        if r.get("possible"):
            print(f"  still possible: {', '.join(r['possible'])}")
        if r.get("consistency_model"):
            print(f"  judged against: {r['consistency_model']}")
        if r["verdict"] == "unknown" and r.get("reason"):
            print(f"  {r['checker']}: unknown ({r['reason']})")
