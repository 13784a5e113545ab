"""What a fault may ask of the system under test, as typed protocols: Jepsen's `db/Kill`,
`db/Pause`, `db/Primary` and the etcd suite's member functions. Every system implements
`Processes`; each further protocol belongs to an offer (`OFFERED`), and a fault package's
`needs` names the offers it calls (nemeses.registry): a fault the system does not offer is
refused by name before the run. A system implements these in its own package
(harness/systems/<name>/, on harness.deployment.Deployment); no nemesis imports a system.
tests/test_offers.py checks every system against the protocols of what it offers."""

from __future__ import annotations

from typing import Any, Protocol


class Processes(Protocol):
    """Every system: its daemons as processes on hosts, and who holds one down."""

    hosts: list[Any]  # harness.cluster.Host
    data_daemon: str  # the daemon that holds the data (what lose-unfsynced and majority-kill stop)

    def daemons(self, host: str) -> list[str]: ...  # what `host` runs now (none: idle)
    def start(self, host: str, daemon: str | None = None, by: str = "") -> dict[str, str]: ...
    def kill(self, host: str, daemon: str | None = None) -> None: ...
    def pause(self, host: str, daemon: str | None = None) -> None: ...
    def resume(self, host: str, daemon: str | None = None) -> None: ...
    def process_states(self, host: str, daemon: str | None = None) -> dict[str, str]: ...
    def data_dir(self, daemon: str) -> str: ...
    # A fault that kills or pauses a daemon holds it; no other fault touches it meanwhile.
    def claim(self, host: str, daemon: str | None, by: str) -> str | None: ...
    def release(self, host: str, daemon: str | None, by: str) -> None: ...
    def give_back(self, host: str, daemon: str | None, by: str) -> dict[str, str]: ...
    def held_by(self, host: str, daemon: str | None = None, but: str = "") -> str | None: ...


class Leaders(Protocol):
    """"leaders": which host leads, for faults that target a leader."""

    def leader_master(self) -> str | None: ...
    def tablet_leaders(self) -> dict[str, str]: ...


class DiskFaults(Protocol):
    """"disk": which files the disk nemesis may damage, and what came of it."""

    def disk_layout(self) -> Any: ...  # nemeses.disk.DiskLayout
    def damaged(self, host: str, done: dict) -> dict: ...
    def repair(self, host: str, done: dict, by: str = "") -> dict | None: ...  # default: stays
    def cannot_spare(self) -> set[str]: ...  # groups to leave alone; default: none


class Fsync(Protocol):
    """"fsync": a data daemon that syncs what it acknowledges, which a failing disk reaches
    (nemeses.failing_disk fails every replica on its host until the restart)."""

    def groups_on(self, host: str) -> set[str] | None: ...  # None: the host did not answer
    def cannot_spare(self) -> set[str]: ...


class Membership(Protocol):
    """"membership": members removed and added back (nemeses.membership.Members)."""

    def membership(self) -> Any: ...


class Tablets(Protocol):
    """"tablets": replication groups seen and changed one at a time (nemeses.groups)."""

    def replica_groups(self) -> Any: ...  # nemeses.groups.ReplicaGroups


class Masters(Protocol):
    """"masters": a quorum of masters grown and shrunk one at a time."""

    master_hosts: list[Any]
    added_masters: list[str]

    def add_master(self, host: str, timeout: float = 60.0) -> str: ...
    def remove_master(self, host: str) -> str: ...


class Admin(Protocol):
    """"admin": maintenance an operator runs."""

    def admin(self, host: str, pick: int) -> dict: ...


class Transfers(Protocol):
    """"transfers": a group's leader made to hand over or step down (an operator's tool)."""

    def step_down_leader(self, tablet: str | None, graceful: bool, pick: int) -> dict: ...


class Sessions(Protocol):
    """"sessions": another user's calls against the workload's client sessions."""

    def intrude_sessions(self, step: str, groups: list[str], sessions: int) -> dict: ...


# offer (nemeses.registry.OFFERS) -> the protocol a system offering it implements; the other
# offer ("faketime") is a property of how the daemons run, with no methods behind it
OFFERED: dict[str, type] = {"leaders": Leaders, "disk": DiskFaults, "fsync": Fsync,
                            "membership": Membership,
                            "tablets": Tablets, "masters": Masters, "admin": Admin,
                            "sessions": Sessions, "transfers": Transfers}


def members(protocol: type) -> list[str]:
    """The methods and attributes a protocol asks for."""
    names = {n for n in vars(protocol) if not n.startswith("_")}
    return sorted(names | set(getattr(protocol, "__annotations__", {})))
