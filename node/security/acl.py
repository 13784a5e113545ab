"""Who may call what: Kudu's coarse-grained ACLs ("security: authorize all RPCs against
coarse-grained ACLs"), as a table every registered RPC method must appear in.

Three roles, as in Kudu's ServerBase::Authorize:
- SERVICE: the cluster's own daemons (a certificate the cluster CA issued for the `service`
  role). Internal RPCs (Raft messages, tablet copy, heartbeats, tablet creation) take this alone:
  a process that could send them could rewrite any replica's log.
- SUPERUSER: names in --superuser-acl. Operations that can lose data or quorum: deleting a
  replica, unsafe config changes, master membership, replica moves, step-downs.
- USER: names in --user-acl (`*`: every authenticated name). Reads, writes, scans and DDL.

Pure: an identity and the rules in, the set of methods it may call out; the RPC server checks a
call against that set, one lookup per call.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Role(enum.Flag):
    SERVICE = enum.auto()
    SUPERUSER = enum.auto()
    USER = enum.auto()


S, SU, U = Role.SERVICE, Role.SUPERUSER, Role.USER

# method -> the roles any one of which may call it. RpcServer.register refuses a method that is
# missing here, so a new RPC cannot ship without a rule (tests/test_rpc_acl.py checks both).
RULES: dict[str, Role] = {
    # Raft and tablet copy between replicas: the service alone.
    "consensus": S,
    "ts.begin_copy_session": S,
    "ts.fetch_copy_chunk": S,
    "ts.end_copy_session": S,
    # The master's own calls to tablet servers and tablet servers' to the master.
    "master.ts_heartbeat": S,
    "ts.create_tablet": S,
    # Kudu: StartTabletCopy, DeleteTablet and ChangeConfig are "service user or superuser".
    "ts.start_tablet_copy": S | SU,
    "ts.delete_tablet": S | SU,
    "ts.change_config": S | SU,
    "consensus.leader_step_down": S | SU,
    "ts.unsafe_change_config": SU,
    "master.change_replica": SU,
    "master.add_master": SU,
    "master.remove_master": SU,
    "master.tserver_state": SU,
    # Data and metadata: users (and the service, which asks masters and tablet servers too).
    "master.info": S | SU | U,
    "master.list_tables": S | SU | U,
    "master.table_locations": S | SU | U,
    "master.create_table": SU | U,
    "master.delete_table": SU | U,
    "ts.write": SU | U,
    "ts.write_batch": SU | U,
    "ts.read": SU | U,
    "ts.status": S | SU | U,
    "ts.checksum": SU | U,
}

ALL_ROLES = S | SU | U


@dataclass(frozen=True)
class Acl:
    """--superuser-acl and --user-acl: comma-separated names; `*` in either admits every
    authenticated name. Kudu's defaults: no superusers, every user."""

    superusers: frozenset[str] = frozenset()
    users: frozenset[str] = frozenset({"*"})

    @staticmethod
    def parse(superuser_acl: str, user_acl: str) -> Acl:
        def names(text: str) -> frozenset[str]:
            return frozenset(n.strip() for n in text.split(",") if n.strip())
        return Acl(names(superuser_acl), names(user_acl))

    def roles(self, name: str, service: bool) -> Role:
        """The roles of an authenticated `name` (`service`: its certificate is the service's)."""
        roles = Role(0)
        if service:
            roles |= S
        if "*" in self.superusers or name in self.superusers:
            roles |= SU
        if "*" in self.users or name in self.users:
            roles |= U
        return roles


@dataclass(frozen=True)
class Identity:
    """Who is on the other end of a connection, as authentication established it. `name` is
    what a refusal names; `roles` what the ACLs grant."""

    name: str
    roles: Role
    authenticated: bool = True

    def __str__(self) -> str:
        return self.name


def allowed_methods(roles: Role, rules: dict[str, Role] = RULES) -> frozenset[str]:
    return frozenset(m for m, allowed in rules.items() if allowed & roles)


def needs(method: str, rules: dict[str, Role] = RULES) -> str:
    """The roles `method` needs, for a refusal's message ("service or superuser")."""
    allowed = rules.get(method)
    if allowed is None:
        return "a rule (the method has none)"
    return " or ".join(r.name.lower() for r in Role if r in allowed)
