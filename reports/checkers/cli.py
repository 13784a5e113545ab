"""`tessera check HISTORY --model M [--json]`: judge one history file; `tessera check RUN_DIR`:
judge a stored run's history.jsonl by the model and options its test.json records.

Exit codes: 0 valid, 1 invalid, 2 unknown, a malformed history, or one that does not fit the
model (the reason, with the op, goes to stderr; reports.checkers.shapes), 254 bad arguments,
including a history file that does not exist, one that holds no operations, or a bad --initial.
A history whose only ops are the nemesis's is judged, as Knossos judges it: valid, since no
client op could violate the model. (A chaos run with no ok client op is the run's stats
checker's to catch, as in Jepsen.)"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from node.exit_codes import BAD_ARGS, EXIT
from reports.checkers.consistency import DEFAULT_MODEL, MODEL_NAMES
from reports.checkers.registry import models

if TYPE_CHECKING:
    from reports.history import Op

MODELS = tuple(models())
LINEARIZABLE = tuple(name for name, m in models().items() if m.linearizable)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("history", help="history.jsonl (one JSON op a line: type, process, f, "
                                        "value; index optional, by default the line order), "
                                        "a Jepsen history.edn, or a jepsen.log; "
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
    parser.add_argument("--wfr-keys", action="store_true",
                        help="rw-register: a transaction's write of a key follows its own read of "
                             "it, so that read's version precedes the write's (Elle's wfr-keys; "
                             "Jepsen's MySQL suite sets it; recorded for the harness's own runs)")
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
    from reports.checkers.shapes import infer_f
    from reports.history import NEMESIS, HistoryError, read_history

    recorded: dict[str, Any] = {}
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
    if args.time_limit <= 0 or args.max_states < 1:
        print("tessera check: --time-limit must be > 0 and --max-states at least 1",
              file=sys.stderr)
        return BAD_ARGS
    initial = None
    if args.initial:
        try:
            initial = json.loads(args.initial)
        except ValueError as e:
            print(f"tessera check: --initial is not JSON: {e}", file=sys.stderr)
            return BAD_ARGS
        if not isinstance(initial, dict):
            print('tessera check: --initial must be a JSON object, e.g. {"x": 0, "y": 0}',
                  file=sys.stderr)
            return BAD_ARGS
    try:
        recorded_ops = read_history(path)
    except (HistoryError, OSError, UnicodeDecodeError) as e:
        print(f"tessera check: unreadable history: {e}", file=sys.stderr)
        return EXIT["unknown"]
    except RecursionError:
        print(f"tessera check: unreadable history: {path} nests values too deeply",
              file=sys.stderr)
        return EXIT["unknown"]
    if not recorded_ops:
        print(f"tessera check: {path} holds no operations (expected a history.jsonl, a Jepsen "
              "history.edn or a jepsen.log)", file=sys.stderr)
        return BAD_ARGS
    # Only the nemesis's ops: nothing a model could violate, and Knossos calls it valid.
    ops = infer_f(model, [o for o in recorded_ops if o.process != NEMESIS])
    why = _misfit(ops, model, path)
    if why:
        print(f"tessera check: {why}", file=sys.stderr)
        return EXIT["unknown"]
    options = {"time_limit": args.time_limit, "max_states": args.max_states,
               "consistency_model": args.consistency_model,
               "nil_read_unknown": args.nil_reads == "unknown", "wfr_keys": args.wfr_keys,
               **(recorded.get("options", {}) if model == recorded.get("model") else {})}
    if args.total is not None:
        options["total"] = args.total
    if initial is not None:
        options["initial"] = initial
    try:
        result = check_history(ops, model, **options)
    except (TypeError, KeyError, ValueError, AttributeError, IndexError, RecursionError) as e:
        # a shape the model's declared shapes let through: still the history's fault
        print(f"tessera check: {path} does not fit model {model}: {type(e).__name__}: {e}",
              file=sys.stderr)
        return EXIT["unknown"]
    if args.json:
        print(json.dumps(result, default=str))
    else:
        _print_summary(result)
        if model == "multi-register" and initial is None and result["verdict"] == "invalid":
            print('  (multi-register registers start at nil; Knossos\'s histories start at 0: '
                  'try --initial \'{"x": 0, "y": 0}\')')
    return EXIT[result["verdict"]]


def _misfit(ops: list[Op], model: str, path: str) -> str | None:
    """Why the history cannot be judged by `model`, or None: an op that does not fit the
    model's shapes (reports.checkers.shapes)."""
    from reports.checkers.shapes import misfit

    for op in ops:
        why = misfit(model, op)
        if why:
            return f"{path}: op {op.index} ({op.type} {op.f}): {why}"
    return None


def _print_summary(result: dict[str, Any]) -> None:
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
