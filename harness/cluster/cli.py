"""`tessera cluster up|down|status`: the local netns cluster or the Vagrant VMs; `tessera
cluster ksck`: any running cluster's health (node/tools/ksck.py)."""

from __future__ import annotations

import argparse
import json


def configure(p: argparse.ArgumentParser) -> None:
    p.description = ("Manage the test cluster: hosts n1..nN as network namespaces on bridge "
                     "tsbr0 in 10.77.0.0/24 (n1 = 10.77.0.11), each with its own sshd (needs "
                     "root), or the Vagrantfile's five VMs (--provider vagrant, 192.168.56.11..15); "
                     "or check any running Tessera cluster's health (ksck).")
    sub = p.add_subparsers(dest="action", required=True, metavar="{up,down,status,build-box,ksck}")
    for action, what in (("up", "create or repair the hosts: netns namespaces, or the "
                                "Vagrantfile's VMs with --provider vagrant"),
                         ("down", "remove everything up made (netns: the hosts' install is "
                                  "kept for the next up; vagrant: destroy the VMs)"),
                         ("status", "show each host: netns namespaces, or with --provider "
                                    "vagrant the VMs' state")):
        a = sub.add_parser(action, help=what, description=what)
        a.add_argument("--provider", choices=("netns", "vagrant"), default="netns",
                       help="netns (default), or vagrant: `vagrant up`, `vagrant destroy -f` or "
                            "`vagrant status` in the directory holding the Vagrantfile (up then "
                            "waits until root answers over SSH on each VM)")
        a.add_argument("--netns-hosts", "--hosts", dest="hosts", type=int, default=5, metavar="N",
                       help="netns: number of hosts (default 5)")
        a.add_argument("--json", action="store_true", help="machine-readable output")
    from harness.cluster import vagrant_box

    b = sub.add_parser("build-box", help="build a Debian 12 libvirt box from Debian packages "
                       "and add it to Vagrant (for machines without Vagrant Cloud; needs root)",
                       description=(vagrant_box.__doc__ or "").split("\n\n")[0])
    b.add_argument("--name", default=vagrant_box.DEFAULT_NAME,
                   help=f"the box's name in Vagrant (default {vagrant_box.DEFAULT_NAME}; the "
                        "Vagrantfile uses it when TESSERA_VAGRANT_BOX names it)")
    b.add_argument("--mirror", default=vagrant_box.DEFAULT_MIRROR,
                   help=f"the Debian mirror (default {vagrant_box.DEFAULT_MIRROR})")
    b.add_argument("--disk-gb", type=int, default=6, metavar="GB",
                   help="the guests' disk size (default 6; sparse, 2-64)")
    b.add_argument("--out", default=".", metavar="DIR",
                   help="where the .box file is written (default: here)")
    b.add_argument("--no-add", action="store_true", help="only write the .box file")
    from node.tools import ksck
    ksck.configure(sub.add_parser("ksck", help="Kudu's cluster consistency check: masters, "
                                               "tablets, replicas; --checksum-scan",
                                  description=(ksck.__doc__ or "").split("\n\n")[0]))


def run(args: argparse.Namespace) -> int:
    import sys

    if args.action == "ksck":
        from node.tools import ksck
        return ksck.run(args)
    if args.action == "build-box":
        return _build_box(args)
    from harness.cluster import ClusterError
    from harness.cluster.netns import NetnsCluster

    say = (lambda *_: None) if args.json else (lambda m: print(m, file=sys.stderr))
    if args.provider == "vagrant":
        return _vagrant(args, say)
    try:
        cluster = NetnsCluster(args.hosts)
        if args.action == "up":
            hosts = cluster.up(say)
            if args.json:
                print(json.dumps([h.__dict__ for h in hosts]))
            else:
                for h in hosts:
                    print(f"{h.name}\t{h.address}\tssh -i {h.key_file} root@{h.address}")
        elif args.action == "down":
            cluster.down(say)
        else:
            rows = cluster.status()
            if args.json:
                print(json.dumps(rows))
            elif not rows:
                print("no netns cluster is up")
            for r in rows:
                ok = r["namespace"] and r["process"] and r["sshd"]
                print(f"{r['name']}\t{r['address']}\t{'up' if ok else 'DOWN'}\t"
                      f"namespace={r['namespace']} process={r['process']} sshd={r['sshd']}")
            return 0 if rows and all(r["sshd"] for r in rows) else 1
    except ClusterError as e:
        print(f"tessera cluster: {e}", file=sys.stderr)
        return 1
    return 0


def _vagrant(args: argparse.Namespace, say) -> int:
    import sys
    from pathlib import Path

    from harness.cluster import ClusterError, vagrant

    try:
        if args.action == "up":
            hosts = vagrant.up(Path.cwd(), say)
            if args.json:
                print(json.dumps([h.__dict__ for h in hosts]))
            for h in [] if args.json else hosts:
                print(f"{h.name}\t{h.address}\tssh -i {h.key_file} root@{h.address}")
        elif args.action == "down":
            vagrant.down(Path.cwd(), say)
        else:
            rows = vagrant.status(Path.cwd())
            print(json.dumps(rows) if args.json else "\n".join(f"{r['name']}\t{r['state']}" for r in rows))
            return 0 if rows and all(r["state"] == "running" for r in rows) else 1
    except ValueError as e:  # a setting such as TESSERA_VAGRANT_SUBNET, before anything ran
        from node.exit_codes import BAD_ARGS

        print(f"tessera cluster: {e}", file=sys.stderr)
        return BAD_ARGS
    except ClusterError as e:
        print(f"tessera cluster: {e}", file=sys.stderr)
        return 1
    return 0


def _build_box(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from harness.cluster import ClusterError, vagrant_box
    from node.exit_codes import BAD_ARGS

    say = lambda m: print(m, file=sys.stderr)  # noqa: E731
    try:
        box = vagrant_box.build_box(Path(args.out), args.name, args.mirror, args.disk_gb,
                                    add=not args.no_add, say=say)
    except ValueError as e:
        print(f"tessera cluster build-box: {e}", file=sys.stderr)
        return BAD_ARGS
    except ClusterError as e:
        print(f"tessera cluster build-box: {e}", file=sys.stderr)
        return 1
    print(box)
    return 0
