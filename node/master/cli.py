"""`tessera master`: run a master; `tessera master list | add | remove | leader-step-down`: the
masters (Kudu's `kudu master list | add | remove`, and LeaderStepDown on the catalog)."""

from node.server import daemon_cli


def configure(p):
    daemon_cli.configure(p, "master")
    from node.tools.admin import configure_list, configure_master_changes
    sub = p.add_subparsers(dest="verb", metavar="{list,add,remove,leader-step-down}")
    configure_list(sub, "master")
    configure_master_changes(sub)


def run(args) -> int:
    verb = getattr(args, "verb", None)
    if verb == "list":
        from node.tools.admin import run_list
        return run_list(args, "master")
    if verb in ("add", "remove", "leader-step-down"):
        from node.tools.admin import run_master_change
        return run_master_change(args)
    return daemon_cli.run(args)
