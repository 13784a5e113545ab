"""One check of a run's `TestSpec` before anything touches a host, shared by `tessera test`
(its arguments), `tessera test-all` (every cell's spec, before the cluster comes up) and
`tessera replay` (a recorded test.json, which may have been edited or come from another
version). A spec that passes here fails later only for what the hosts themselves say.

`check(spec)` raises ValueError naming the first problem in the words of `tessera test`'s
flags, so a user knows which one to change."""

from __future__ import annotations

from harness.failure_detection import check_taken
from harness.spec import PACINGS, PROVIDERS, TestSpec
from harness.systems import SYSTEMS


def check(spec: TestSpec) -> TestSpec:
    """`spec`, unchanged, once every value in it is one the run can use."""
    from harness.systems import system
    from nemeses.registry import select

    if spec.db not in SYSTEMS:
        raise ValueError(f"--db {spec.db!r}: not one of {', '.join(SYSTEMS)}")
    kind = system(spec.db)
    check_writes(spec)
    check_external_consistency(spec)
    try:  # an unknown workload is named as such before asking whether --db runs it
        workload = spec.make_workload()
    except TypeError as e:
        raise ValueError(f"bad --workload-option for {spec.workload}: {e}") from None
    if spec.workload not in kind.workloads:
        raise ValueError(f"--db {spec.db} runs the workloads {', '.join(kind.workloads)}, "
                         f"not {spec.workload}")
    kind.check_workload(workload)
    check_value_buffers(spec, workload)
    if spec.client not in kind.client_modes:  # each system's are among CLIENT_MODES
        raise ValueError(f"--db {spec.db} takes --client {', '.join(kind.client_modes)}, "
                         f"not {spec.client}")
    kind.check_flags(dict(spec.flags))
    if spec.fast_failure_detection:
        check_taken(kind, spec.db)
    if spec.time_limit <= 0:
        raise ValueError(f"--time-limit must be > 0, got {spec.time_limit:g}")
    if spec.nemesis_interval <= 0:
        raise ValueError("--nemesis-interval must be > 0")
    if not 1 <= spec.time_scale <= 100:
        raise ValueError(f"--time-scale must be between 1 and 100, got {spec.time_scale:g}")
    if spec.concurrency < 0 or spec.rate < 0 or spec.op_timeout <= 0:
        raise ValueError("--concurrency, --rate must be >= 0 and --op-timeout > 0")
    check_pacing(spec)
    if spec.provider not in PROVIDERS:
        raise ValueError(f"--provider {spec.provider!r}: not one of {', '.join(PROVIDERS)}")
    if spec.provider == "vagrant":
        from harness.cluster.vagrant import subnet

        subnet()  # TESSERA_VAGRANT_SUBNET, which the Vagrantfile reads too
    if spec.provider == "netns" and spec.hosts < 1:
        raise ValueError(f"--netns-hosts must be at least 1, got {spec.hosts}")
    if spec.nemesis:
        select(",".join(spec.nemesis), kind.offers)  # each a known fault that applies
    if spec.workload == "watch" and "admin" in spec.nemesis:
        raise ValueError("--workload watch cannot go with --nemesis admin: compaction removes "
                         "the history its final watch reads from revision 1")
    if bool(spec.ca_cert) != bool(spec.ca_key):
        raise ValueError("--ca-cert and --ca-key go together")
    if spec.ca_cert:
        if spec.db != "tessera":
            raise ValueError(f"--ca-cert is for --db tessera; {spec.db} has no RPC security here")
        from node.security.pki import load_ca
        load_ca(spec.ca_cert, spec.ca_key)  # ValueError saying what is wrong with them
    if spec.wheelhouse is not None:
        from harness.cluster import ClusterError
        from harness.wheelhouse import check_wheelhouse
        try:
            check_wheelhouse(spec.wheelhouse)
        except ClusterError as e:
            raise ValueError(str(e)) from None
    return spec


def check_pacing(spec: TestSpec) -> None:
    """--pacing: one of PACINGS; bursts spread a rate, so --rate 0 (no pacing) takes none, and
    a run would pass for one that tried it."""
    if spec.pacing not in PACINGS:
        raise ValueError(f"--pacing {spec.pacing!r}: not one of {', '.join(PACINGS)}")
    if spec.pacing != "even" and not spec.rate:
        raise ValueError(f"--pacing {spec.pacing} spreads the --rate's op starts: --rate 0 "
                         "starts each op as soon as its worker is free, and has none to spread")


def check_value_buffers(spec: TestSpec, workload) -> None:
    """value_buffers=true: the workers hand string values over in buffers they reuse, which
    only Tessera's client adapter does, and only a workload writing strings has any to reuse
    (register with value_sizes=wide or zeros): anywhere else the option would do nothing, and
    a run would pass for one that tried it."""
    if not workload.value_buffers:
        return
    if spec.db != "tessera":
        raise ValueError(f"--workload-option value_buffers=true hands values to Tessera's client "
                         f"in reused buffers: --db {spec.db}'s client takes none")
    if getattr(workload, "value_sizes", "small") == "small":
        raise ValueError("--workload-option value_buffers=true reuses the buffers of string "
                         "values: it takes value_sizes=wide or zeros (--workload register), "
                         "not the small integer values")


def check_external_consistency(spec: TestSpec) -> None:
    """--external-consistency: one of Kudu's two modes or both mixed, for Tessera's client
    alone."""
    from harness.systems.tessera.clients import client_modes

    mode = spec.external_consistency
    if mode is None:
        return
    if mode not in client_modes():
        raise ValueError(f"--external-consistency {mode!r}: not one of "
                         f"{', '.join(client_modes())}")
    if spec.db != "tessera":
        raise ValueError(f"--external-consistency is the mode of Tessera's client: --db {spec.db} "
                         "has no such mode")


def check_writes(spec: TestSpec) -> None:
    """--writes and the batch size that goes with it, in the words of `tessera test`'s flags:
    one way to say how the workers write (--writes; the workload options once were a second
    way), a mode other than own only where Tessera's client is the client, and batch=N only
    for a batching session."""
    from workloads.base import SESSION_MODES, WRITE_MODES

    options = spec.workload_options
    if "writes" in options:
        raise ValueError(f"--workload-option writes={options['writes']}: how the workers write "
                         f"is --writes {'|'.join(WRITE_MODES)}, not a workload option")
    if "coalesce" in options:
        raise ValueError("--workload-option coalesce is gone: coalesce=true is now "
                         "--writes shared")
    if spec.writes not in WRITE_MODES:
        raise ValueError(f"--writes {spec.writes!r}: not one of {', '.join(WRITE_MODES)}")
    if spec.writes != "own" and spec.db != "tessera":
        raise ValueError(f"--writes {spec.writes} groups Tessera's client writes; --db "
                         f"{spec.db} has no such client: its workers write as own")
    if options.get("batch") and spec.writes not in SESSION_MODES:
        raise ValueError(f"--workload-option batch={options['batch']} sizes a batching "
                         f"session's batches: it takes --writes {' or '.join(SESSION_MODES)}, "
                         f"not {spec.writes}")
