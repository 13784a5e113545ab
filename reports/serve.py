"""`tessera serve [STORE] [--port 8080] [--bind 127.0.0.1]`: browse a store's reports.

Static files only (index.html, each run's report.html, plots and timeline pages, and what a
report links: histories, logs, JSON), from the standard library's threading HTTP server; logs and
histories are served as text, so a browser shows them rather than downloading them. Loopback by
default because a store holds node logs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from node.exit_codes import BAD_ARGS


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", nargs="?", default="store", help="the store directory (default: store)")
    parser.add_argument("--port", type=int, default=8080, help="TCP port (default 8080; 0 picks a free one)")
    parser.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")


def make_server(store: Path, bind: str, port: int):
    import functools
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Handler(SimpleHTTPRequestHandler):
        extensions_map = {**SimpleHTTPRequestHandler.extensions_map,
                          **dict.fromkeys((".log", ".jsonl", ".edn", ".txt"),
                                          "text/plain; charset=utf-8")}

        def log_message(self, fmt: str, *args) -> None:  # one short line per request
            sys.stderr.write(f"{self.address_string()} {fmt % args}\n")

    return ThreadingHTTPServer((bind, port), functools.partial(Handler, directory=str(store)))


def run(args: argparse.Namespace) -> int:
    store = Path(args.store)
    if not store.is_dir():
        print(f"tessera serve: no such directory: {store}", file=sys.stderr)
        return BAD_ARGS
    if not (store / "index.html").is_file():
        print(f"tessera serve: {store}/index.html is missing; run 'tessera analyze {store}' first",
              file=sys.stderr)
    server = make_server(store.resolve(), args.bind, args.port)
    host, port = server.server_address[:2]
    print(f"serving {store.resolve()} at http://{host}:{port}/index.html (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
