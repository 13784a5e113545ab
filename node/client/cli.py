"""`tessera kv ...` and `tessera table ...`: the client from the command line (the operator
tools in node/tools/admin.py share its options and error handling).

Masters come from --masters, else $TESSERA_MASTERS, else the local cluster's cluster.json.
Values are JSON (`tessera kv put k '[1,2]'`); a bare word is taken as a string.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys


def common_options(p: argparse.ArgumentParser, *, after_verb: bool = False) -> None:
    """The connection options. `after_verb`: on a verb's own parser, with no defaults of its
    own, so `kv get k --masters X` means what `kv --masters X get k` does (and what
    `master list --masters X` does), and a value given before the verb is kept."""
    def default(value):
        return argparse.SUPPRESS if after_verb else value

    p.add_argument("--masters", default=default(os.environ.get("TESSERA_MASTERS", "")),
                   help="comma-separated master HOST:PORT list (default: $TESSERA_MASTERS or "
                        "the local cluster)")
    p.add_argument("--timeout", type=float, default=default(10.0),
                   help="seconds per operation (default 10)")
    p.add_argument("--tls-cert", metavar="FILE",
                   default=default(os.environ.get("TESSERA_TLS_CERT", "")),
                   help="connect with TLS as the identity this certificate names (FILE.key and "
                        "the CA's ca.pem beside it; default: $TESSERA_TLS_CERT, else the local "
                        "cluster's operator certificate when it has one, else plaintext)")


def verb(sub: argparse._SubParsersAction, name: str, help: str, **kw) -> argparse.ArgumentParser:
    """A verb's parser that takes the connection options after the verb too."""
    v = sub.add_parser(name, help=help, description=kw.pop("description", help), **kw)
    common_options(v, after_verb=True)
    return v


def master_addrs(text: str) -> list[tuple[str, int]]:
    from node.client import parse_addrs
    from node.tools.local_cluster import LocalCluster
    from node.tools.local_cluster_cli import DEFAULT_DIR

    if not text:
        return LocalCluster.load(DEFAULT_DIR).master_addrs
    addrs = parse_addrs(text, 7051)
    for host, port in addrs:  # a name that resolves to nothing is a bad argument, not a wait
        try:
            socket.getaddrinfo(host, port)
        except (socket.gaierror, UnicodeError) as e:
            raise ValueError(f"--masters: cannot resolve {host!r}: {e}") from None
    return addrs


def client_tls(args):
    """The TLS context the CLI connects with (node.security.tls.client_tls): --tls-cert, or,
    for the local cluster, its operator's certificate. ValueError if unusable."""
    from node.security.tls import client_tls as tls_for
    from node.tools.local_cluster import LocalCluster, LocalClusterError
    from node.tools.local_cluster_cli import DEFAULT_DIR

    if args.tls_cert or args.masters:
        return tls_for(args.tls_cert or None)
    try:
        return LocalCluster.load(DEFAULT_DIR).tls()
    except LocalClusterError:
        return None


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def configure_kv(p: argparse.ArgumentParser) -> None:
    from node.protocol import EXTERNAL_CONSISTENCY

    common_options(p)
    p.add_argument("--table", default="kv", help="table (default kv)")
    p.add_argument("--external-consistency", choices=list(EXTERNAL_CONSISTENCY),
                   default="client-propagated",
                   help="a write's mode (Kudu's): client-propagated answers once the write is "
                        "applied; commit-wait also waits until every clock within the max "
                        "error is past its timestamp, so any write started after it gets a "
                        "larger one (default client-propagated)")
    sub = p.add_subparsers(dest="verb", required=True)

    def kv_verb(name: str, help: str) -> argparse.ArgumentParser:
        v = verb(sub, name, help)
        v.add_argument("--table", default=argparse.SUPPRESS, help="table (default kv)")
        v.add_argument("key", help="the key")
        return v

    kv_verb("get", "read a key")
    kv_verb("put", "write a key").add_argument("value", help="its new value (JSON; a bare word is a string)")
    cas = kv_verb("cas", "set NEW if the key holds EXPECTED (null: absent)")
    cas.add_argument("expected", help="the value it must hold (JSON; null: absent)")
    cas.add_argument("new", help="the value to set (JSON)")
    kv_verb("append", "append an element to the list at a key").add_argument(
        "element", help="the element to append (JSON)")


def configure_table(p: argparse.ArgumentParser) -> None:
    common_options(p)
    sub = p.add_subparsers(dest="verb", required=True)
    c = verb(sub, "create", "create a table")
    c.add_argument("name", help="the new table's name")
    c.add_argument("--tablets", type=int, default=1, help="hash partitions (default 1)")
    c.add_argument("--replication-factor", type=int, default=3, help="replicas per tablet (default 3)")
    verb(sub, "delete", "delete a table").add_argument("name", help="the table")
    verb(sub, "list", "list tables")
    verb(sub, "locations", "show where a table's tablets live (UUID@HOST:PORT, * = leader)"
         ).add_argument("name", help="the table")


async def _kv(args, client) -> int:
    t = client.table(args.table)
    if args.verb == "get":
        print(json.dumps(await t.read(args.key)))
    elif args.verb == "put":
        await t.write(args.key, _value(args.value))
    elif args.verb == "append":
        await t.append(args.key, _value(args.element))
    elif not await t.cas(args.key, _value(args.expected), _value(args.new)):
        print("cas failed: the value differs", file=sys.stderr)
        return 1
    return 0


async def _table(args, client) -> int:
    if args.verb == "create":
        locs = await client.create_table(args.name, args.tablets, args.replication_factor)
        print(f"created {args.name} with {len(locs.tablets)} tablets")
    elif args.verb == "delete":
        await client.delete_table(args.name)
    elif args.verb == "list":
        for name in await client.list_tables():
            print(name)
    else:
        locs = await client.locations(args.name)
        for t in locs.tablets:
            reps = " ".join(f"{p.uuid}@{p.host}:{p.port}{'*' if p.uuid == t.leader else ''}"
                            for p in t.replicas)
            print(f"{t.tablet_id}\t{reps}")
    return 0


def run_with_client(args, body) -> int:
    from node.client import TesseraClient
    from node.errors import TesseraError
    from node.exit_codes import BAD_ARGS
    from node.rpc import RpcError

    try:  # what the arguments name, checked before anything is asked of a server
        masters, tls = master_addrs(args.masters), client_tls(args)
    except (TesseraError, ValueError) as e:
        print(f"tessera: {e}", file=sys.stderr)
        return BAD_ARGS

    async def go():
        from node.protocol import CLIENT_PROPAGATED, EXTERNAL_CONSISTENCY

        mode = EXTERNAL_CONSISTENCY.get(getattr(args, "external_consistency", ""),
                                        CLIENT_PROPAGATED)
        client = TesseraClient(masters, timeout=args.timeout, tls=tls, external_consistency=mode)
        try:
            return await body(args, client)
        finally:
            await client.close()

    try:
        return asyncio.run(go())
    except (TesseraError, RpcError, ValueError) as e:
        print(f"tessera: {type(e).__name__}: {e}{tls_hint(args, e)}", file=sys.stderr)
        return 1


def tls_hint(args, e: Exception) -> str:
    """What to do about a refusal when no certificate was given: the cluster wants one."""
    from node.rpc import ErrorCode, RpcError

    if isinstance(e, RpcError) and e.code == ErrorCode.NOT_AUTHORIZED and not args.tls_cert:
        return ("\n(the cluster requires a certificate: pass --tls-cert FILE or set "
                "TESSERA_TLS_CERT, e.g. a test run's store/<workload>/<run>/tls/certs/admin.pem)")
    return ""


def run_kv(args) -> int:
    return run_with_client(args, _kv)


def run_table(args) -> int:
    return run_with_client(args, _table)
