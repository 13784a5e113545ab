"""The whole-stack simulator's watch on answers owed: a request waiting at a replica's leader
gate (node.replica.leader_gate) once that replica no longer leads, stops or fails is owed its
refusal at once. Left there, it waits out its RPC deadline, and its caller records a write that
was never proposed as maybe applied: no checker can object to that, so only this watch sees
it. A review found the gate's waiters left so (docs/decisions/answers-owed-at-stop.md); its
unit test failed on that code, but no seed did, since a late "maybe" is always a valid outcome.

A waiter woken by the gate runs its refusal in the loop's next turn, at the same virtual
instant, and a request that reaches a replica not leading is refused before it waits: so a
replica seen at two checks in a row with waiters it can no longer serve has left them there.
"""

from __future__ import annotations

from node.consensus import Role


class Owed:
    def __init__(self) -> None:
        # (host, tablet) -> (the replica, the virtual time it was first seen owing answers)
        self._since: dict[tuple[str, str], tuple[object, float]] = {}

    def left_waiting(self, host: str, tablet: str, r, now: float) -> str | None:
        """If `r`, the replica of `tablet` on `host`, has kept requests at its gate since an
        earlier check though it can no longer serve them: what happened, in a line."""
        why = _cannot_serve(r) if r.gate.waiting else None
        key = (host, tablet)
        if why is None:
            self._since.pop(key, None)
            return None
        seen = self._since.get(key)
        if seen is None or seen[0] is not r:
            self._since[key] = (r, now)
            return None
        if now <= seen[1]:
            return None
        return (f"answer owed: {r.gate.waiting} request(s) still wait at the leader gate of "
                f"tablet {tablet} on {host} (replica {r.uuid}) at {now:.3f} s, though {why} "
                f"since {seen[1]:.3f} s or before: each will run into its deadline and be "
                "recorded as maybe applied, never proposed")


def _cannot_serve(r) -> str | None:
    if r.failed:
        return f"it failed ({r.failed})"
    if r.stopping:
        return "it is stopping"
    if r.role is not Role.LEADER:
        return f"it no longer leads ({r.role.name} in term {r.term})"
    return None
