"""`tessera local-cluster`: counts are --num-masters/--num-tservers (--masters is an address
list everywhere else), and --flag takes NAME=VALUE as `tessera test --flag` does; `down`
signals a recorded pid only while it is still that daemon (a reused pid is another process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from harness.cli import main
from node.tools.local_cluster import (
    Daemon,
    LocalCluster,
    _cmdline,
    _ephemeral_low,
    _wait_exec_done,
    free_port,
)
from node.tools.local_cluster_cli import daemon_flag


def test_flags_take_the_config_keys_form_and_reach_the_daemons_command_line():
    assert daemon_flag("log_force_fsync_all=false") == "--log-force-fsync-all=false"
    assert daemon_flag("log-segment-size-mb=1") == "--log-segment-size-mb=1"
    assert daemon_flag("--raft-heartbeat-interval-ms=100") == "--raft-heartbeat-interval-ms=100"
    for bad in ("no_such_flag=1", "log_force_fsync_all"):
        with pytest.raises(ValueError, match="want NAME=VALUE"):
            daemon_flag(bad)


def test_a_bad_flag_is_one_clear_line_and_starts_nothing(tmp_path, capsys):
    code = main(["local-cluster", "up", "--cluster-dir", str(tmp_path / "lc"), "--flag", "fsync=off"])
    assert code == 254 and "want NAME=VALUE" in capsys.readouterr().err
    assert not (tmp_path / "lc").exists()


@pytest.mark.slow
@pytest.mark.e2e
def test_up_with_counts_and_a_flag_then_down(tmp_path, capsys):
    lc = tmp_path / "lc"
    try:
        assert main(["local-cluster", "up", "--cluster-dir", str(lc), "--num-masters", "1",
                     "--num-tservers", "2", "--flag", "log_force_fsync_all=false"]) == 0
        doc = json.loads((lc / "cluster.json").read_text())
        assert [d["kind"] for d in doc["daemons"]] == ["master", "tserver", "tserver"]
        assert doc["flags"] == ["--log-force-fsync-all=false"]
        assert all(d["start_time"] > 0 and d["cmdline"] for d in doc["daemons"])
        capsys.readouterr()
    finally:
        assert main(["local-cluster", "down", "--cluster-dir", str(lc)]) == 0
    assert capsys.readouterr().out == "stopped 3 daemons\n"
    assert not any(_runs_in(d["pid"], lc) for d in doc["daemons"])


@pytest.mark.slow
@pytest.mark.e2e
def test_up_is_secure_by_default_from_the_operators_ca_and_the_cli_needs_a_certificate(
        tmp_path, capsys):
    from node.security import pki

    ca = pki.create_ca(tmp_path / "my-ca")
    lc = tmp_path / "lc"
    try:
        assert main(["local-cluster", "up", "--cluster-dir", str(lc), "--num-tservers", "1",
                     "--ca-cert", str(ca.cert), "--ca-key", str(ca.key)]) == 0
        out = capsys.readouterr().out
        assert f"operator certificate: {lc}/tls/certs/admin.pem" in out
        assert not (lc / "tls" / "ca").exists()  # issued from the operator's CA, not a new one
        doc = json.loads((lc / "cluster.json").read_text())
        assert doc["security"] and all("--rpc-authentication=required" in d["cmdline"]
                                       for d in doc["daemons"])
        masters = out.split("masters: ")[1].split()[0]
        admin = str(lc / "tls" / "certs" / "admin.pem")
        assert main(["table", "--masters", masters, "--tls-cert", admin, "create", "kv",
                     "--replication-factor", "1"]) == 0
        assert main(["kv", "--masters", masters, "--tls-cert", admin, "put", "k", "1"]) == 0
        capsys.readouterr()
        assert main(["kv", "--masters", masters, "--timeout", "3", "get", "k"]) == 1
        err = capsys.readouterr().err
        assert "NOT_AUTHORIZED" in err and "requires TLS" in err, err
        assert "pass --tls-cert FILE" in err  # and what to do about it
        rogue = pki.issue(pki.create_ca(tmp_path / "rogue-ca"), tmp_path / "rogue", "admin",
                          pki.USER)  # another CA
        (rogue.cert.parent / "ca.pem").write_bytes(ca.cert.read_bytes())  # trusts the cluster
        assert main(["kv", "--masters", masters, "--timeout", "3", "--tls-cert", str(rogue.cert),
                     "get", "k"]) == 1
        assert main(["kv", "--masters", masters, "--tls-cert", admin, "get", "k"]) == 0
    finally:
        capsys.readouterr()
        assert main(["local-cluster", "down", "--cluster-dir", str(lc)]) == 0
    assert capsys.readouterr().out == "stopped 2 daemons\n"


def test_ca_flags_are_checked_before_anything_starts(tmp_path, capsys):
    lc = tmp_path / "lc"
    assert main(["local-cluster", "up", "--cluster-dir", str(lc), "--ca-cert", "x.pem"]) == 254
    assert "--ca-cert and --ca-key go together" in capsys.readouterr().err
    (tmp_path / "x.pem").write_text("junk")
    assert main(["local-cluster", "up", "--cluster-dir", str(lc), "--ca-cert", str(tmp_path / "x.pem"),
                 "--ca-key", str(tmp_path / "x.pem")]) == 254
    assert "cannot load the CA" in capsys.readouterr().err
    assert not lc.exists()


def _runs_in(pid: int, lc) -> bool:
    """Process `pid` is a daemon of the cluster in `lc` (so a test may kill it)."""
    try:
        return str(lc) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.e2e
def test_down_leaves_a_reused_pid_alone_and_still_stops_the_daemons(tmp_path, capsys):
    """Two tablet servers die and the kernel hands their pids on, here to two `sleep`s: one
    record has the daemon's start time and command line (they differ from the sleep's), the
    other is as an older version wrote it (no identity recorded; the command line is not a
    daemon's). `down` must stop the master, whose record is also old, and signal no sleep."""
    lc = tmp_path / "lc"
    strangers, pids = [], []
    try:
        assert main(["local-cluster", "up", "--cluster-dir", str(lc), "--num-masters", "1",
                     "--num-tservers", "2", "--flag", "log_force_fsync_all=false"]) == 0
        doc = json.loads((lc / "cluster.json").read_text())
        by = {d["name"]: d for d in doc["daemons"]}
        pids = [d["pid"] for d in doc["daemons"]]
        for name in ("t1", "t2"):
            os.kill(by[name]["pid"], signal.SIGKILL)
            os.waitpid(by[name]["pid"], 0)  # our child: reaped, so its pid is free
        strangers = [_sleeper() for _ in range(2)]
        by["t1"]["pid"], by["t2"]["pid"] = strangers[0].pid, strangers[1].pid
        for name in ("m1", "t2"):
            by[name].pop("start_time", None)
            by[name].pop("cmdline", None)
        (lc / "cluster.json").write_text(json.dumps(doc))
        capsys.readouterr()

        assert main(["local-cluster", "down", "--cluster-dir", str(lc)]) == 0
        out = capsys.readouterr()
        assert [s.poll() for s in strangers] == [None, None], "down signalled an unrelated process"
        assert f"t1: pid {strangers[0].pid} now belongs to another process" in out.err, out.err
        assert f"t2: pid {strangers[1].pid} does not run this cluster's tserver" in out.err, out.err
        assert out.err.count("left alone, not signalled") == 2 and "sleep 1000" in out.err
        assert "stopped 1 daemons; left 2 pid(s) alone" in out.out
        assert not _runs_in(by["m1"]["pid"], lc), "the master was not stopped"
        assert not (lc / "cluster.json").exists()
    finally:
        for s in strangers:
            s.kill()
            s.wait()
        for pid in pids:
            if _runs_in(pid, lc):
                os.kill(pid, signal.SIGKILL)


def _sleeper() -> subprocess.Popen:
    """An unrelated process, `sleep 1000`, once it has exec'd."""
    p = subprocess.Popen(["sleep", "1000"])
    _wait_exec_done(p, ["sleep", "1000"])
    return p


def test_a_started_process_reads_as_its_own_command_line_at_once():
    """Popen returns before the kernel has laid out the new program's arguments, so a read of
    /proc/PID/cmdline right after it may be empty; `start` waits for the argv it recorded,
    which is what `alive` compares (a suite run under load once called a starting daemon
    dead)."""
    procs = [subprocess.Popen(["sleep", "1000", str(i)]) for i in range(50)]
    try:
        for i, p in enumerate(procs):
            _wait_exec_done(p, ["sleep", "1000", str(i)])
            assert _cmdline(p.pid) == ["sleep", "1000", str(i)]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    gone = subprocess.Popen(["true"])
    _wait_exec_done(gone, ["never", "shown"], timeout=30)  # returns once the child has died
    assert gone.poll() == 0


def test_a_pid_is_ours_only_while_its_start_time_and_command_line_match(tmp_path):
    """The identity rule on a real process: the recorded start time and command line make it
    ours; another start time, or (for an old record) a command line that is not this
    cluster's daemon, make it a stranger that is never signalled."""
    sleep = _sleeper()
    try:
        start = int(Path(f"/proc/{sleep.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        c = LocalCluster(tmp_path)
        c.daemons["t1"] = Daemon("t1", "tserver", 1, sleep.pid, start_time=start,
                                 cmdline=["sleep", "1000"])
        assert c.alive("t1") and c.stranger("t1") is None
        c.daemons["t1"].start_time = start + 1
        assert not c.alive("t1") and "now belongs to another process" in c.stranger("t1")
        c.daemons["t1"].start_time, c.daemons["t1"].cmdline = 0, []
        assert "does not run this cluster's tserver" in c.stranger("t1")
        assert not c.signal("t1", signal.SIGTERM) and sleep.poll() is None
        assert c.down() == [c.stranger("t1")] and sleep.poll() is None
    finally:
        sleep.kill()
        sleep.wait()


def test_an_unreadable_cluster_record_is_one_clear_line(tmp_path, capsys):
    (tmp_path / "cluster.json").write_text('{"masters": 1}')
    assert main(["local-cluster", "down", "--dir", str(tmp_path)]) == 1  # --dir: the short alias of --cluster-dir
    err = capsys.readouterr().err
    assert "is not a local cluster's record" in err and "Traceback" not in err


def test_a_daemons_port_is_never_one_an_outgoing_connection_may_hold():
    """bind(0) hands out an ephemeral port, which another process's outgoing connection can
    take before the daemon binds it (CI saw a tablet server fail "address already in use"):
    free_port chooses below the kernel's ephemeral range, and a port free now."""
    import socket

    low = _ephemeral_low()
    for _ in range(50):
        port = free_port()
        assert 1024 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_free_port_never_hands_out_one_port_twice():
    """A port is free until its daemon binds it: a cluster's daemons drew one port twice in CI
    ("address already in use" at start-up). One process never gets the same answer twice."""
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)


@pytest.mark.e2e
def test_a_tablet_server_whose_port_another_process_took_starts_again_on_another(
        tmp_path, monkeypatch):
    """Between free_port and the bind, another process may take the port (the suite's other
    half starts daemons too): the tablet server exits "address already in use", and up starts
    it again on a port of its own; the cluster comes up."""
    import socket

    import node.tools.local_cluster as lc

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    answers = iter([free_port(), taken.getsockname()[1]])
    monkeypatch.setattr(lc, "free_port", lambda host="127.0.0.1": next(answers, None)
                        or free_port(host))
    cluster = LocalCluster(tmp_path / "lc", masters=1, tservers=1)
    try:
        cluster.up(timeout=60)
        t1 = cluster.daemons["t1"]
        assert t1.port != taken.getsockname()[1] and cluster.alive("t1")
        assert "address already in use" in (tmp_path / "lc" / "t1.log").read_text()
    finally:
        cluster.down()
        taken.close()
