"""MariaDB under test (Debian's mariadb-server 10.11, galera-4 26.4), in the three topologies of
Jepsen's MySQL and Galera analyses, chosen by `--flag topology=`:

- `single`: one server, on the first host; every worker talks to it.
- `replicas`: a primary on the first host and a binlog replica (GTID replication, read-only) on
  each other; workers write to the primary and send read-only transactions to the replica on
  their own host, as Jepsen's MySQL test read from replicas.
- `galera`: a Galera cluster of every host, each node writable; worker t talks to host t mod n.

Each server is Debian's `mariadbd` run by the harness (not the package's service), with
`--no-defaults`: its data dir, socket and pid file under the host's data directory, its error
log on stderr (the harness's daemon log). A data dir is made once by `mariadb-install-db`; every
start runs an init file that creates the workload's user, database and table on that server
alone (neither binlogged nor replicated), so a replica or a Galera joiner has its schema before
anything arrives. `--flag isolation=` sets each transaction's level (default repeatable-read,
MariaDB's own); every other `--flag KEY=VALUE` is a mariadbd option (checked against
`mariadbd --verbose --help` before any host is touched), e.g.
`innodb_flush_log_at_trx_commit=2` or `innodb_snapshot_isolation=ON` (10.11.8 and later: a
REPEATABLE READ transaction that would overwrite a row changed since its snapshot fails with a
deadlock error instead, InnoDB's answer to lost updates).

`--flag gtid_domains=per-client` (topology replicas only) gives each worker's connection a GTID
domain of its own (`SET SESSION gtid_domain_id`), as an application that splits its writes into
independent streams does. A replica with parallel replication
(`--flag slave_parallel_threads=N`) applies the domains independently, so it may commit one
worker's transaction before another's that the primary committed first: out-of-order parallel
replication, which MariaDB's documentation leaves to the application to tolerate. The default,
`one`, keeps every transaction in domain 0, applied in the primary's commit order.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import ClassVar

from harness.cluster import Host
from harness.deployment import DATA, Deployment, bound_clients, first_write
from harness.systems.mariadb.clients import (
    DATABASE,
    ISOLATION,
    PASSWORD,
    PORT,
    SCHEMA,
    USER,
    SqlClient,
)
from reports.checkers.logs import rule

MARIADBD = "/usr/sbin/mariadbd"
GALERA = "/usr/lib/galera/libgalera_smm.so"
TOPOLOGIES = ("single", "replicas", "galera")
TABLES = f"{DATABASE}.lists, {DATABASE}.registers, {DATABASE}.accounts"  # every workload's, for the convergence check
GROUP = "mariadb"  # the one replication group, as the nemeses' tablet rules name it
# --flag keys for the harness's side, not mariadbd's
HARNESS_FLAGS = frozenset({"topology", "isolation", "gtid_domains"})
GTID_DOMAINS = ("one", "per-client")
# mariadbd options the harness sets itself, from the host list and the topology
OWN_FLAGS = frozenset({
    "datadir", "user", "bind_address", "port", "socket", "pid_file", "init_file", "server_id",
    "log_bin", "read_only", "wsrep_on", "wsrep_provider", "wsrep_cluster_address",
    "wsrep_cluster_name", "wsrep_node_address", "wsrep_node_name", "wsrep_sst_method",
    "wsrep_new_cluster", "log_error"})


@functools.cache
def known_options(binary: str = MARIADBD) -> frozenset[str]:
    """The option names `mariadbd --verbose --help` lists, with underscores: asked once per
    process (a matrix checks every cell's drawn options, then each run its own)."""
    out = subprocess.run([binary, "--no-defaults", "--verbose", "--help"], capture_output=True,
                         text=True, timeout=60)
    return frozenset(m.replace("-", "_")
                     for m in re.findall(r"^  --([a-z0-9-]+)", out.stdout, re.M))


def init_sql() -> str:
    """What every start runs first (mariadbd --init-file): the workload's user, database and
    table on this server alone: not written to the binlog nor replicated by Galera."""
    return "\n".join([
        "SET SESSION sql_log_bin = 0;",
        "SET SESSION wsrep_on = OFF;",
        f"CREATE USER IF NOT EXISTS '{USER}'@'%' IDENTIFIED BY '{PASSWORD}';",
        f"GRANT ALL ON *.* TO '{USER}'@'%';",
        f"CREATE DATABASE IF NOT EXISTS {DATABASE};",
        *(statement + ";" for statement in SCHEMA), ""])


@dataclass
class MariaDB(Deployment):
    name: ClassVar[str] = "mariadb"
    data_daemon: ClassVar[str] = "mariadb"
    all_daemons: ClassVar[tuple[str, ...]] = ("mariadb",)
    offers: ClassVar[frozenset[str]] = frozenset({"leaders"})
    workloads: ClassVar[tuple[str, ...]] = tuple(SqlClient.WORKLOADS)
    log_rules: ClassVar[tuple[dict, ...]] = (
        rule("crash", r"mariadbd got signal (?!9\b)|InnoDB: Assertion failure|Database page corruption",
             "mariadbd crashed or found a corrupt page"),
        rule("innodb-refused", r"InnoDB: .*corrupt|InnoDB' registration as a STORAGE ENGINE failed",
             "InnoDB refused its own files as corrupt"),
        # A deadlock (1213) or lock wait timeout (1205) of the applier against a replica's own
        # readers is a temporary error, which the SQL thread retries (slave_transaction_retries)
        # and logs each time: replication goes on (a clean-clone run logged one 1213 while
        # every replica converged). It stops on any other error, or when the retries run out.
        rule("replication-stopped",
             r"Slave SQL: .*Error_code: (?!1213\b|1205\b)|slave SQL thread aborted|"
             r"retried transaction .* in vain|Failed to initialize the master info structure",
             "a binlog replica could not apply an event, or read its master info, and stopped "
             "replicating: it serves an ever staler copy"),
        rule("replica-retried", r"Slave SQL: .*Error_code: (1213|1205)\b",
             "a binlog replica's applier lost a lock conflict to the replica's readers and "
             "retried the transaction", severity="note"),
        rule("inconsistency", r"WSREP: Inconsistency detected",
             "a Galera node found its data differs from the cluster's, and left it"),
        rule("aborted", r"\[ERROR\] Aborting", "a mariadbd start was aborted", severity="note"),
        rule("start-failure", r"^mariadb mariadb: ", "a mariadbd could not start"),
    )

    @classmethod
    def drawn_flags(cls, workload: str) -> dict[str, tuple[object, ...]]:
        """Every topology; every isolation level for a history judged against the level's
        model (TestSpec.claiming), but for bank, whose check (every read sees the total) asks
        for a snapshot, only the levels that promise one: read committed allows the read skew
        it would call a violation. And the two durability settings users tune: InnoDB's flush
        at commit (1, the default; 0 and 2, which Galera's documentation recommends) and the
        binlog's sync (0, the default; 1, which MariaDB asks of durable replication)."""
        from workloads import model_judged

        levels = tuple(ISOLATION) if workload in model_judged() else ("repeatable-read",
                                                                     "serializable")
        return {"topology": TOPOLOGIES, "isolation": levels,
                "innodb_flush_log_at_trx_commit": (1, 0, 2), "sync_binlog": (0, 1)}

    @classmethod
    def claimed_model(cls, flags: dict) -> str:
        """What the isolation level promises (MariaDB's documentation names the ANSI levels,
        Jepsen's analyses judge them by Adya's): the level's own model. Two settings promise
        snapshot isolation in place of repeatable read: `innodb_snapshot_isolation=ON` (a
        write to a row changed since the snapshot fails instead) and a Galera cluster, whose
        documentation claims snapshot isolation between transactions on different nodes
        (first committer wins at certification); neither lifts a weaker level set by
        `--flag isolation`."""
        isolation = flags.get("isolation", "repeatable-read")
        snapshot = (flags.get("topology") == "galera"
                    or str(flags.get("innodb_snapshot_isolation", "OFF")).upper() in ("ON", "1"))
        if snapshot and isolation in ("repeatable-read", "serializable"):
            return "snapshot-isolation"
        return isolation

    @classmethod
    def check_flags(cls, flags: dict) -> None:
        topology = flags.get("topology", "single")
        if topology not in TOPOLOGIES:
            raise ValueError(f"--flag topology={topology}: one of {', '.join(TOPOLOGIES)}")
        isolation = flags.get("isolation", "repeatable-read")
        if isolation not in ISOLATION:
            raise ValueError(f"--flag isolation={isolation}: one of {', '.join(ISOLATION)}")
        domains = flags.get("gtid_domains", "one")
        if domains not in GTID_DOMAINS:
            raise ValueError(f"--flag gtid_domains={domains}: one of {', '.join(GTID_DOMAINS)}")
        if domains != "one" and topology != "replicas":
            raise ValueError("--flag gtid_domains=per-client: only with --flag topology=replicas "
                             "(the domains are binlog replication's)")
        options = {k: v for k, v in flags.items() if k not in HARNESS_FLAGS}
        if not options:
            return
        if shutil.which(MARIADBD) is None:
            raise ValueError(f"--db mariadb: no {MARIADBD} on this machine to check --flag "
                             "against (make setup installs mariadb-server)")
        known = known_options()
        for key in options:
            if key in OWN_FLAGS:
                raise ValueError(f"--flag {key}: set by the harness from the host list and "
                                 "--flag topology")
            if key not in known:
                raise ValueError(f"--flag {key}: not an option `mariadbd --verbose --help` "
                                 "lists (e.g. innodb_flush_log_at_trx_commit, "
                                 "innodb_snapshot_isolation, sync_binlog)")

    # the Galera node that starts a new cluster (--wsrep-new-cluster): the first, at setup only
    _bootstrapping: set[str] = field(default_factory=set, init=False, repr=False)

    @property
    def topology(self) -> str:
        return str(self.flags.get("topology", "single"))

    @property
    def isolation(self) -> str:
        return str(self.flags.get("isolation", "repeatable-read"))

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    def daemons(self, host: str) -> list[str]:
        if self.topology == "single" and host != self.hosts[0].name:
            return []
        return ["mariadb"]

    # -- files and commands ----------------------------------------------------------------
    @property
    def socket(self) -> str:
        return f"{self.data_dir('mariadb')}/mysqld.sock"

    @property
    def init_file(self) -> str:
        return f"{DATA}/mariadb-init.sql"

    def run_files(self) -> list[str]:
        return [self.init_file]  # it holds the workload user's password

    def command(self, host: str, daemon: str) -> str:
        return " ".join([MARIADBD, *self.args(self.host(host))])

    def args(self, h: Host) -> list[str]:
        """mariadbd's options: files under the host's data directory, its address, then the
        topology's, then every --flag (the last of an option wins). It runs as Debian's
        `mysql` user, as the package runs it: run as root, Galera's rsync state transfer would
        drop to `nobody` and could not write the joiner's data dir."""
        index = next(i for i, o in enumerate(self.hosts) if o.name == h.name)
        d = self.data_dir("mariadb")
        own = ["--no-defaults", "--user=mysql", f"--datadir={d}",
               f"--bind-address={h.address}", f"--port={PORT}", f"--socket={self.socket}",
               f"--pid-file={d}/mysqld.pid", f"--init-file={self.init_file}",
               "--skip-name-resolve", f"--server-id={index + 1}"]
        if self.lazyfs:  # the FUSE data dir takes neither O_DIRECT nor native AIO
            own += ["--innodb-flush-method=fsync", "--innodb-use-native-aio=0"]
        if self.topology == "replicas":
            own += ["--log-bin=mariadb-bin", "--binlog-format=ROW"]
            if index > 0:
                own += ["--read-only=ON"]
        if self.topology == "galera":
            peers = ",".join(o.address for o in self.hosts)
            own += ["--wsrep-on=ON", f"--wsrep-provider={GALERA}",
                    f"--wsrep-cluster-address=gcomm://{peers}", "--wsrep-cluster-name=tessera",
                    f"--wsrep-node-address={h.address}", f"--wsrep-node-name={h.name}",
                    "--wsrep-sst-method=rsync", "--binlog-format=ROW",
                    "--innodb-autoinc-lock-mode=2"]
            if h.name in self._bootstrapping:
                own += ["--wsrep-new-cluster"]
        return own + [f"--{k.replace('_', '-')}={v}" for k, v in sorted(self.flags.items())
                      if k not in HARNESS_FLAGS]

    def _install(self, h: Host) -> None:
        """mariadbd is Debian's, not in the wheelhouse: present on the host (the netns hosts
        share this machine's), or installed from the host's packages."""
        r = self.remotes[h.name]
        r.run(["mkdir", "-p", f"{DATA}/logs"])
        if self.lazyfs:  # lazyfs (nemeses.lazyfs) runs from the harness's venv on the host
            super()._install(h)
        need = f"test -x {MARIADBD}" + (f" && test -f {GALERA}" if self.topology == "galera" else "")
        if r.sh(need, check=False).exit_status == 0:
            return
        res = r.sh("DEBIAN_FRONTEND=noninteractive apt-get install -y -q mariadb-server galera-4 "
                   f"rsync && {need}", check=False, timeout=900)
        if res.exit_status != 0:
            raise RuntimeError(f"{h.name}: mariadb-server is not installed and `apt-get install "
                               "mariadb-server galera-4 rsync` failed there; install them")

    def configure(self, h: Host) -> None:
        """A data dir made by mariadb-install-db (once: a restart keeps it), and the init file."""
        if not self.daemons(h.name):
            return
        r, d = self.remotes[h.name], self.data_dir("mariadb")
        r.run(["mkdir", "-p", d, f"{DATA}/logs"])
        r.sh(f"cat > {self.init_file} <<'EOF'\n{init_sql()}EOF")
        r.sh(f"[ -d {d}/mysql ] || mariadb-install-db --no-defaults --user=mysql --datadir={d} "
             f"--auth-root-authentication-method=normal --skip-test-db "
             f">> {DATA}/logs/mariadb-install.log 2>&1", timeout=300)

    def start_cluster(self) -> None:
        """The servers in the topology's order: a Galera cluster from its first node
        (bootstrapped), each joiner once the one before it synced; binlog replicas once the
        primary answers, each pointed at it."""
        self.log(f"starting mariadb ({self.topology})")
        if self.topology == "galera":
            self._bootstrapping = {self.hosts[0].name}
        try:
            for h in self.hosts:
                if self.daemons(h.name):
                    self.start(h.name, "mariadb")
                    self.wait_ready(h.name)
        finally:
            self._bootstrapping = set()
        if self.topology == "replicas":
            for h in self.hosts[1:]:
                self.sql(h.name, f"CHANGE MASTER TO MASTER_HOST='{self.hosts[0].address}', "
                         f"MASTER_PORT={PORT}, MASTER_USER='{USER}', "
                         f"MASTER_PASSWORD='{PASSWORD}', MASTER_USE_GTID=slave_pos; START SLAVE;")
        if self.lazyfs:
            self._each(self._flush_setup)

    def _flush_setup(self, h: Host) -> None:
        """Make what the setup wrote durable, as the kernel's writeback would within 30 s:
        lazyfs keeps unsynced bytes until an fsync, and two setup writes are never synced.
        Galera's rsync state transfer copies tablespaces without an fsync (the first power loss
        took them back to nothing and InnoDB refused them: "Cannot apply log to ... of corrupted
        file './mysql/wsrep_cluster.ibd'"), and CHANGE MASTER writes a replica's master.info
        without one (the first power loss left it empty, and every restart after it logged
        "Failed to initialize the master info structure" and never replicated again). Both are
        findings about a power loss within seconds of setup, not the commit loss the
        lose-unfsynced runs are after. A transfer or rewrite during the run is left as it is."""
        from nemeses.lazyfs import control_command

        if self.daemons(h.name):
            self.remotes[h.name].sh(control_command(self.data_dir("mariadb"), "flush"))

    def sql(self, host: str, statements: str, timeout: float = 30.0) -> str:
        """Run SQL on `host`'s server as root over its local socket; its tab-separated output."""
        from shlex import quote

        return self.remotes[host].sh(
            f"mariadb --no-defaults --socket={self.socket} -uroot -N -B -e {quote(statements)}",
            timeout=timeout).stdout

    def wait_ready(self, host: str, timeout: float = 120.0) -> None:
        """Until `host`'s server answers on its socket (a Galera node: synced with the
        cluster); RuntimeError after `timeout`, naming the log's last error."""
        ready = ("SELECT 1" if self.topology != "galera"
                 else "SHOW STATUS LIKE 'wsrep_local_state_comment'")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            res = self.remotes[host].sh(
                f"mariadb --no-defaults --socket={self.socket} -uroot -N -B -e \"{ready}\"",
                check=False, timeout=30)
            if res.exit_status == 0 and (self.topology != "galera" or "Synced" in res.stdout):
                return
            time.sleep(0.5)
        last = self.remotes[host].sh(f"grep -a 'ERROR' {DATA}/logs/mariadb.log | tail -n 1",
                                     check=False).stdout.strip()
        raise RuntimeError(f"{host}: mariadbd did not become ready in {timeout:.0f} s"
                           + (f"; its log: {last}" if last else ""))

    def log_files(self, host: str) -> list[str]:
        return super().log_files(host) + ([f"{DATA}/logs/mariadb-install.log"]
                                          if self.daemons(host) else [])

    # -- what nemeses may ask of it ----------------------------------------------------------
    def leader_master(self) -> str | None:
        """The primary: the single server, or the binlog topology's first host; a Galera
        cluster has none (every node takes writes)."""
        return None if self.topology == "galera" else self.hosts[0].name

    def tablet_leaders(self) -> dict[str, str]:
        leader = self.leader_master()
        return {GROUP: leader} if leader else {}

    # -- clients -----------------------------------------------------------------------------
    async def open_clients(self, workload, names: dict[str, str], binds: list[str] | None,
                           op_timeout: float, timeout: float = 60.0):
        """Once an append through the primary (or the first Galera node) commits: one client per
        worker thread, bound as the topology says."""
        primary = self.hosts[0].address
        self.log(f"waiting for mariadb ({self.topology}) to commit a write")
        await first_write(SqlClient(primary, self.hosts[0].name, op_timeout), "mariadb", timeout)
        served = [h.address for h in self.hosts if self.daemons(h.name)]
        binds = [b for b in binds or served if b in served] or served

        domains = iter(range(1, 1 << 30)) if self.flags.get("gtid_domains") == "per-client" else None

        def make(address: str, node: str) -> SqlClient:
            if self.topology == "galera":
                return SqlClient(address, node, op_timeout, self.isolation, workload=workload.name)
            return SqlClient(primary, node, op_timeout, self.isolation, workload=workload.name,
                             read_address=address if self.topology == "replicas" else None,
                             gtid_domain=next(domains) if domains else None)

        clients, close = bound_clients(binds, names, make)
        return clients, close, {0: GROUP}

    # -- end of run --------------------------------------------------------------------------
    def end_checks(self) -> list[tuple[str, object]]:
        return [("convergence", self.converge)] if len(self.served()) > 1 else []


    def served(self) -> list[str]:
        return [h.name for h in self.hosts if self.daemons(h.name)]

    def converge(self, timeout: float = 60.0, interval: float = 1.0,
                 cap: float = 600.0, stall: float = 30.0) -> dict:
        """Every server's checksums of the workloads' tables, once they agree or `timeout`
        passed: replicas catch up with the primary, Galera nodes apply what they certified.
        A binlog replica still applying (its SQL thread running, its GTID position short of
        the primary's and moved in the last `stall` seconds) is waited for past `timeout`,
        up to `cap`: a serial replica behind a primary that took writes at full rate on a
        loaded machine is lag, not divergence. One that stops moving, or is still behind at `cap`, leaves the verdict
        unknown; tables that differ once every replica holds the primary's position are
        invalid (a replica that diverged)."""
        start = time.monotonic()
        moved, behind = start, {}
        while True:
            # the positions before the checksums: a replica that holds the primary's position
            # when its tables are read and still differs has diverged
            now, was = time.monotonic(), behind
            behind = self.applying() if self.topology == "replicas" else {}
            sums = {}
            for host in self.served():
                try:
                    sums[host] = " ".join(self.sql(host, f"CHECKSUM TABLE {TABLES}").split()[1::2])
                except Exception as e:  # a server that does not answer has no checksum
                    sums[host] = f"no answer: {str(e)[-200:]}"
            answered = {h: s for h, s in sums.items() if not s.startswith("no answer")}
            if len(answered) == len(sums) and len(set(answered.values())) == 1:
                return {"checker": "convergence", "verdict": "valid", "checksums": sums}
            if behind != was:
                moved = now
            waiting = behind and now - moved < stall and now - start < cap
            if now - start > timeout and not waiting:
                if behind:
                    return {"checker": "convergence", "verdict": "unknown", "checksums": sums,
                            "error": "replicas still applying the primary's binlog: "
                            + "; ".join(f"{h} at {p}" for h, p in sorted(behind.items()))}
                verdict = "invalid" if len(set(answered.values())) > 1 else "unknown"
                return {"checker": "convergence", "verdict": verdict, "checksums": sums,
                        "error": "the servers' tables differ" if verdict == "invalid"
                        else "not every server answered"}
            time.sleep(interval)

    def applying(self) -> dict[str, str]:
        """The binlog replicas still applying: replication running, their GTID position
        (gtid_slave_pos) not the primary's (gtid_binlog_pos); each one's position."""
        def position(host: str, variable: str) -> frozenset[str]:
            return frozenset(self.sql(host, f"SELECT @@{variable}").strip().split(","))

        try:
            primary = position(self.hosts[0].name, "gtid_binlog_pos")
        except Exception:  # no primary to be behind
            return {}
        out = {}
        for h in self.served()[1:]:
            try:
                running = "ON" in self.sql(h, "SHOW STATUS LIKE 'Slave_running'")
                at = position(h, "gtid_slave_pos")
            except Exception:
                continue
            if running and at != primary:
                out[h] = ",".join(sorted(at))
        return out
