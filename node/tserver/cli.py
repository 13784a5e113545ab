"""`tessera tserver`: run a tablet server; `tessera tserver list`: the live tablet servers."""

from node import daemon_cli


def configure(p):
    daemon_cli.configure(p, "tserver")
    from node.tools.admin import configure_list
    configure_list(p.add_subparsers(dest="verb", metavar="list"), "tserver")


def run(args) -> int:
    if getattr(args, "verb", None) == "list":
        from node.tools.admin import run_list
        return run_list(args, "tserver")
    return daemon_cli.run(args)
