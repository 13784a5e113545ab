"""`tessera master`: run a master; `tessera master list`: every master's role and term."""

from node import daemon_cli


def configure(p):
    daemon_cli.configure(p, "master")
    from node.tools.admin import configure_list
    configure_list(p.add_subparsers(dest="verb", metavar="list"), "master")


def run(args) -> int:
    if getattr(args, "verb", None) == "list":
        from node.tools.admin import run_list
        return run_list(args, "master")
    return daemon_cli.run(args)
