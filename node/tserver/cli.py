"""`tessera tserver`: run a tablet server; `tessera tserver list`: the live tablet servers;
`tessera tserver state enter_maintenance | exit_maintenance TS_UUID`: Kudu's maintenance mode."""

from node.server import daemon_cli


def configure(p):
    daemon_cli.configure(p, "tserver")
    from node.tools.admin import configure_list, configure_tserver_state
    sub = p.add_subparsers(dest="verb", metavar="list|state")
    configure_list(sub, "tserver")
    configure_tserver_state(sub)


def run(args) -> int:
    verb = getattr(args, "verb", None)
    if verb == "list":
        from node.tools.admin import run_list
        return run_list(args, "tserver")
    if verb == "state":
        from node.tools.admin import run_tserver_state
        return run_tserver_state(args)
    return daemon_cli.run(args)
