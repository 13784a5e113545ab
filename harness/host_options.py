"""Where a test runs, as `tessera test` and `tessera test-all` both take it: the provider, the
netns host count, and Jepsen's host lists (`--nodes`, `--nodes-file`) or the TOML hosts file,
with the SSH user and key. One definition and one check for both commands, so the same flag
means the same thing in each."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.spec import PROVIDERS, TestSpec


def configure(p: argparse.ArgumentParser) -> None:
    d = TestSpec()
    p.add_argument("--provider", default=d.provider, choices=PROVIDERS,
                   help="where the hosts come from (default netns)")
    p.add_argument("--netns-hosts", "--hosts", dest="hosts", type=int, default=d.hosts,
                   metavar="N", help="netns: how many namespace hosts to run on (default 5)")
    p.add_argument("--hosts-file", type=Path,
                   help="TOML file of hosts, one [[host]] table each with address and optional "
                        "port, user, key (implies --provider hosts)")
    p.add_argument("--nodes", metavar="HOST[:PORT],...",
                   help="the hosts inline, as Jepsen's CLI takes them: a comma list, named n1, "
                        "n2, ... in order (implies --provider hosts)")
    p.add_argument("--nodes-file", type=Path, metavar="FILE",
                   help="the hosts, one HOST[:PORT] a line, as Jepsen's --nodes-file (implies "
                        "--provider hosts; blank lines and # comments skipped)")
    p.add_argument("--username", default=d.username,
                   help="with --nodes or --nodes-file: the SSH user (default root)")
    p.add_argument("--ssh-private-key", type=Path, metavar="FILE",
                   help="with --nodes or --nodes-file: the SSH private key (default: the "
                        "user's ~/.ssh keys)")


def _nodes_file(path: Path) -> list[str]:
    """Jepsen's --nodes-file: one host a line; ValueError if unreadable or empty."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--nodes-file {path}: {e}") from None
    nodes = [line.split("#", 1)[0].strip() for line in lines]
    nodes = [n for n in nodes if n]
    if not nodes:
        raise ValueError(f"--nodes-file {path} lists no hosts")
    return nodes


def spec_fields(args: argparse.Namespace) -> dict:
    """The TestSpec fields the host options give, every combination and host list checked
    before any SSH; ValueError (or ClusterError for a bad host list) says what is wrong."""
    given = [f for f, v in (("--nodes", args.nodes), ("--nodes-file", args.nodes_file),
                            ("--hosts-file", args.hosts_file)) if v is not None]
    if len(given) > 1:
        raise ValueError(f"give one of {', '.join(given)}, not several")
    if args.hosts < 1:
        raise ValueError(f"--netns-hosts must be at least 1, got {args.hosts}")
    provider = args.provider
    raw = _nodes_file(args.nodes_file) if args.nodes_file is not None else (args.nodes or "").split(",")
    nodes = [n.strip() for n in raw if n.strip()]
    if given:  # a host list implies the hosts provider
        if provider not in ("hosts", PROVIDERS[0]):
            raise ValueError(f"{given[0]} lists the hosts: it cannot go with --provider {provider}")
        provider = "hosts"
    if not nodes and (args.username != "root" or args.ssh_private_key):
        raise ValueError("--username and --ssh-private-key go with --nodes or --nodes-file")
    if provider == "hosts" and not (args.hosts_file or nodes):
        raise ValueError("--provider hosts needs --nodes, --nodes-file or --hosts-file")
    if provider == "hosts":  # a bad host list is a bad argument, found before any SSH
        from harness.cluster import hostsfile
        if nodes:
            hostsfile.from_nodes(nodes, args.username, args.ssh_private_key)
        else:
            hostsfile.load(args.hosts_file)
    return {"provider": provider, "hosts": args.hosts,
            "hosts_file": str(args.hosts_file.resolve()) if args.hosts_file else None,
            "inline_nodes": nodes, "username": args.username,
            "ssh_private_key": str(args.ssh_private_key.resolve()) if args.ssh_private_key else None}
