"""The netns provider on the real machine: namespaces, bridge, sshd per host, SSH control.

Needs root; CI runs as root. `down` must leave the machine exactly as it found it.
"""

import concurrent.futures
import os
import signal
import subprocess
import time

import pytest

from harness.cluster import ClusterError, Host
from harness.cluster.netns import NetnsCluster, _links, _namespaces, _our_host_pids
from harness.control import Remote

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.netns]

if os.geteuid() != 0:  # pragma: no cover - CI is root
    pytest.fail("the netns tests need root", pytrace=False)


def machine_state(state_dir):
    mounts = open("/proc/self/mountinfo").read()
    return {
        "netns": sorted(_namespaces()),
        "links": sorted(_links()),
        "host_pids": sorted(_our_host_pids(state_dir)),
        "tessera_mounts": sorted(line for line in mounts.splitlines() if "tessera" in line),
        "iptables": subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout,
    }


@pytest.fixture
def cluster(no_netns_cluster):
    state_dir = f"/run/tessera-netns-test-{os.getpid()}"
    c = NetnsCluster(3, state_dir=state_dir)
    before = machine_state(state_dir)
    yield c
    c.down(lambda *_: None)
    assert machine_state(state_dir) == before
    assert not os.path.exists(state_dir)


def test_up_reach_repair_down(cluster, tmp_path):
    hosts = cluster.up(lambda *_: None)
    assert [h.address for h in hosts] == ["10.77.0.11", "10.77.0.12", "10.77.0.13"]
    remotes = [Remote(h) for h in hosts]
    try:
        for h, r in zip(hosts, remotes, strict=True):
            assert r.run(["hostname"]).stdout.strip() == h.name
            # each host has its own process tree with sshd as pid 1, and private dirs
            assert "sshd" in r.run(["cat", "/proc/1/cmdline"]).stdout
            r.run(["touch", f"/var/lib/tessera/mine-{h.name}"])
        assert remotes[0].run(["ls", "/var/lib/tessera"]).stdout.split() == ["mine-n1"]
        # output that comes after the exit status (sshd sends it when the shell exits) is kept:
        # the reader waits for the channel's end-of-file, as a large `ip -j addr` needs
        late = remotes[0].sh("echo early; (sleep 0.5; echo late) &")
        assert late.stdout.split() == ["early", "late"], late
        # a connection the server ends is made again, and the log says what ended it
        said: list[str] = []
        lost = Remote(hosts[0], log=said.append)
        try:
            assert lost.sh("kill -KILL $PPID", check=False).exit_status == -1  # its sshd: gone
            gone = time.monotonic() + 10
            while lost._client.get_transport().is_active() and time.monotonic() < gone:
                time.sleep(0.05)
            assert lost.run(["hostname"]).stdout.strip() == "n1"
            ends = [line for line in said if line.startswith("n1: SSH connection lost (")]
            assert ends and "no error kept" not in ends[0], said  # EOF, or a reset
            # the dead connection's command ended at once, not after the wait for late output
            assert not any("output still open" in line for line in said), said
        finally:
            lost.close()
        # hosts reach each other over the bridge
        probe = "import socket; socket.create_connection(('10.77.0.12', 22), 2); print('ok')"
        assert remotes[0].run(["python3", "-c", probe]).stdout.strip() == "ok"

        # a file the harness replaces (a daemon's certificate, its config) is never seen cut:
        # a reader on the host, looping while the harness rewrites it, finds the old or the new
        _rewrites_are_never_seen_cut(remotes[0], tmp_path)

        # up twice is fine and keeps running hosts
        pids = {r["name"]: r for r in cluster.status()}
        assert all(r["sshd"] and r["process"] for r in pids.values())
        first = {h["name"]: h["pid"] for h in cluster._load_state()["hosts"]}
        cluster.up(lambda *_: None)
        assert {h["name"]: h["pid"] for h in cluster._load_state()["hosts"]} == first

        # a dead host is repaired by the next up, the others are left alone
        os.kill(first["n2"], signal.SIGKILL)
        deadline = time.monotonic() + 10  # dead, not just signalled (a loaded CI host is slow)
        while first["n2"] in _our_host_pids(cluster.state_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        cluster.up(lambda *_: None)
        again = {h["name"]: h["pid"] for h in cluster._load_state()["hosts"]}
        assert again["n1"] == first["n1"] and again["n3"] == first["n3"]
        assert again["n2"] != first["n2"]
        assert Remote(cluster.hosts()[1]).run(["hostname"]).stdout.strip() == "n2"
    finally:
        for r in remotes:
            r.close()


def _rewrites_are_never_seen_cut(remote, tmp_path):
    whole = 256 * 1024
    local = tmp_path / "cert.pem"
    local.write_bytes(b"x" * whole)
    target = "/var/lib/tessera/cert.pem"
    remote.put(str(local), target)
    reader = ("import os, time\n"
              f"end, sizes = time.monotonic() + 60, set()\n"
              "while time.monotonic() < end and not os.path.exists('/var/lib/tessera/stop-reading'):\n"
              f"    sizes.add(len(open('{target}', 'rb').read()))\n"
              "print(sorted(sizes))\n")
    remote.run(["rm", "-f", "/var/lib/tessera/stop-reading"])
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        seen = pool.submit(remote.run, ["python3", "-c", reader])
        time.sleep(0.5)  # the reader has begun
        for i in range(20):
            if i % 2:
                remote.write(target, b"y" * whole)
            else:
                remote.put(str(local), target)
        remote.run(["touch", "/var/lib/tessera/stop-reading"])
        assert seen.result(timeout=90).stdout.strip() == f"[{whole}]"
    leftovers = remote.run(["ls", "/var/lib/tessera"]).stdout.split()
    assert not [n for n in leftovers if ".part-" in n], leftovers
    remote.run(["rm", "-f", target, "/var/lib/tessera/stop-reading"])


def test_many_quick_commands_at_once_never_lose_the_connection(cluster):
    """A command that ends at once, while other threads run theirs on the same connection: the
    client's EOF used to reach sshd after the server had freed the channel, and sshd dropped
    the whole connection ("ieof packet referred to nonexistent channel"), failing every command
    on it: about 4 in 1,000 here, enough to fail a nemesis's iptables call in nightly runs."""
    from concurrent.futures import ThreadPoolExecutor

    hosts = cluster.up(lambda *_: None)
    lost: list[str] = []
    remote = Remote(hosts[0], lambda line: lost.append(line) if "connection lost" in line else None)
    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda _: remote.sh("true", check=False).exit_status, range(3000)))
    assert statuses == [0] * 3000 and lost == []
    assert remote.sh("cat", stdin=b"still read").stdout == "still read"  # stdin sent still ends


def test_unreachable_host_is_a_clear_error(cluster):
    hosts = cluster.up(lambda *_: None)
    wrong_port = Host("n1", hosts[0].address, 2222, key_file=hosts[0].key_file)
    with pytest.raises(ClusterError, match=r"n1 \(10\.77\.0\.11:2222\): unreachable over SSH"):
        Remote(wrong_port).run(["true"])


def test_wrong_key_is_a_clear_error(cluster, tmp_path):
    hosts = cluster.up(lambda *_: None)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")],
                   check=True)
    h = Host("n1", hosts[0].address, 22, key_file=str(tmp_path / "k"), host_key=hosts[0].host_key)
    with pytest.raises(ClusterError, match="authentication failed"):
        Remote(h).run(["true"])


def test_bad_arguments_are_refused():
    with pytest.raises(ClusterError, match="between 1 and"):
        NetnsCluster(0)
    with pytest.raises(ClusterError, match="would be hidden"):
        NetnsCluster(3, state_dir="/tmp/x")


def test_a_host_does_not_pin_the_machines_fuse_mounts(cluster, tmp_path):
    """A netns host made while the machine has a FUSE mount (a lazyfs test running beside the
    netns tests) must not keep a copy of it: the copy kept lazyfs running after the machine's
    unmount, and the test waiting for it to exit timed out (seen in a run from a clean clone)."""
    from lazyfs_helpers import DEADLINE, mounted, start_lazyfs, unmount, wait_until

    proc, _, mnt = start_lazyfs(tmp_path)
    try:
        wait_until(lambda: mounted(str(mnt)) or proc.poll() is not None, "the mount")
        cluster.up(lambda *_: None)
        unmount(str(mnt))
        assert proc.wait(timeout=DEADLINE) == 0  # no namespace holds the filesystem open
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            subprocess.run(["fusermount3", "-uz", str(mnt)], check=False)
