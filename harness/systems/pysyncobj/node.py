"""A PySyncObj node as the harness deploys it to a host: a replicated key-value store (one
`SyncObj` subclass) with a small TCP front end for the workloads' clients.

    python -m harness.systems.pysyncobj.node --config node.json

node.json: {"self": "ADDR:PORT", "partners": [...], "client_port": N, "data_dir": DIR,
"reads": "log" | "local", "conf": {SyncObjConf keyword: value}}. The store runs on PySyncObj's
own persistence (journalFile and fullDumpFile in data_dir), which never fsyncs: that is the
system under test, configured as its users would, so nothing here adds durability it lacks.

Clients speak JSON lines: a request {"f": "read"|"write"|"cas"|"add"|"status", "key", "value"}
gets one reply, {"ok": result} or {"error": reason, "definite": bool}. `definite` is true only
when PySyncObj refused the command before it reached any log (its queue was full, or no leader
was known): every other failure may still commit, so the harness records it as unknown.

Reads go through the replicated log by default (`reads: log`), the only linearizable read
PySyncObj offers; `reads: local` answers from this node's state, as a plain `ReplDict.get` does.

Overload is logged, rate-limited, as `WARNING overloaded: ...` so the log checker can note it;
PySyncObj itself only reports it to the caller.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import socketserver
import sys
import threading
import time

DEFINITE = {"QUEUE_FULL", "MISSING_LEADER"}  # refused before any log saw the command
REPLY_TIMEOUT_S = 10.0

log = logging.getLogger("pysyncobj_node")


def build_store(config: dict):
    """The replicated store for `config`; imported late so `--help` works without pysyncobj."""
    from pysyncobj import SyncObj, SyncObjConf, replicated

    class Store(SyncObj):
        def __init__(self):
            conf = SyncObjConf(journalFile=f"{config['data_dir']}/journal",
                               fullDumpFile=f"{config['data_dir']}/dump",
                               dynamicMembershipChange=False, bindAddress=config["self"],
                               **config.get("conf", {}))
            super().__init__(config["self"], config["partners"], conf)
            self._data: dict = {}

        @replicated
        def write(self, key, value):
            self._data[key] = value

        @replicated
        def cas(self, key, expected, new):
            if self._data.get(key) != expected:
                return False
            self._data[key] = new
            return True

        @replicated
        def add(self, key, element):
            self._data.setdefault(key, []).append(element)

        @replicated
        def read(self, key):
            return self._data.get(key)

        def local(self, key):
            return self._data.get(key)

        def digest(self) -> str:
            """Of the applied state, read while the tick thread may change it: retried."""
            for _ in range(100):
                try:
                    text = json.dumps(sorted(self._data.items()), default=str)
                    return hashlib.sha256(text.encode()).hexdigest()[:16]
                except RuntimeError:  # changed size while iterating
                    time.sleep(0.001)
            return "busy"

    return Store()


class Overload:
    """One warning a second at most, with how many refusals it covers."""

    def __init__(self, queue_size: int):
        self.queue_size, self.count, self.last = queue_size, 0, 0.0
        self.lock = threading.Lock()

    def refused(self) -> None:
        with self.lock:
            self.count += 1
            now = time.monotonic()
            if now - self.last < 1.0:
                return
            n, self.count, self.last = self.count, 0, now
        log.warning("overloaded: PySyncObj's command queue is full (commandsQueueSize=%d); "
                    "%d command(s) refused", self.queue_size, n)


def serve(config: dict) -> None:
    from pysyncobj import FAIL_REASON

    store = build_store(config)
    reasons = {v: k for k, v in vars(FAIL_REASON).items() if not k.startswith("_")}
    overload = Overload(int(config.get("conf", {}).get("commandsQueueSize", 100000)))
    local_reads = config.get("reads", "log") == "local"

    def call(method, *args) -> dict:
        done, out = threading.Event(), {}

        def callback(result, err):
            if err == FAIL_REASON.SUCCESS:
                out["ok"] = result
            else:
                reason = reasons.get(err, str(err))
                out.update(error=reason, definite=reason in DEFINITE)
                if reason == "QUEUE_FULL":
                    overload.refused()
            done.set()

        method(*args, callback=callback)
        if not done.wait(REPLY_TIMEOUT_S):
            return {"error": "timeout", "definite": False}
        return out

    def answer(req: dict) -> dict:
        f, key = req.get("f"), req.get("key")
        if f == "status":
            st = store.getStatus()
            leader = st.get("leader")
            return {"ok": {"self": str(st.get("self")), "leader": leader and str(leader),
                           "state": st.get("state"), "term": st.get("raft_term"),
                           "commit_index": st.get("commit_idx"),
                           "last_applied": st.get("last_applied"), "digest": store.digest()}}
        if f == "read":
            return {"ok": store.local(key)} if local_reads else call(store.read, key)
        if f == "write":
            return call(store.write, key, req["value"])
        if f == "cas":
            expected, new = req["value"]
            return call(store.cas, key, expected, new)
        if f == "add":
            return call(store.add, key, req["value"])
        return {"error": f"unknown f {f!r}", "definite": True}

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            for line in self.rfile:
                try:
                    reply = answer(json.loads(line))
                except (ValueError, KeyError, TypeError) as e:
                    reply = {"error": f"bad request: {e}", "definite": True}
                self.wfile.write(json.dumps(reply).encode() + b"\n")
                self.wfile.flush()

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = allow_reuse_address = True

    host = config["self"].rsplit(":", 1)[0]
    with Server((host, int(config["client_port"])), Handler) as server:
        log.info("serving clients on %s:%s, raft on %s, reads through %s", host,
                 config["client_port"], config["self"], "local state" if local_reads else "the log")
        server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.systems.pysyncobj.node",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="the node's JSON config (see the module doc)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        with open(args.config) as f:
            config = json.load(f)
        serve(config)
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as e:
        # the line the log checker knows as a start failure
        print(f"pysyncobj node: cannot start: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
