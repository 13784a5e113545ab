"""Sequential specifications for the linearizability checker.

A model is a small class: `init()` gives the initial state and `step(state, f, value)` gives the
state after applying op `f` with `value` (for a completed op, the value from its completion, so a
read carries what it returned), or `INCONSISTENT` when the op cannot happen in that state.
States must be hashable and compare by value, since the search memoizes (linearized set, state).
Add your own by subclassing `Model` and registering it in `MODELS`.
"""

from __future__ import annotations

from typing import Any

INCONSISTENT: Any = type("Inconsistent", (), {"__repr__": lambda self: "INCONSISTENT"})()


class Model:
    name = "model"
    def init(self) -> Any:
        raise NotImplementedError

    def step(self, state: Any, f: str, value: Any) -> Any:
        raise NotImplementedError

    def read_only(self, f: str, value: Any) -> bool:
        """True if the op never changes the state: a pending (never-returned) one is then dropped
        before searching, since it may always be linearized nowhere."""
        return f == "read"

    def describe(self, state: Any) -> Any:
        """JSON-friendly form of a state for reports."""
        return sorted(state, key=repr) if isinstance(state, frozenset) else state


class Register(Model):
    """A read/write register; initial value None (absent). An unknown read value is never
    given here: a read whose outcome is unknown is dropped before the search. With
    `nil_read_unknown`, an ok read of nil says nothing, as in Knossos's models (Jepsen clients
    record a read they could not parse that way); by default it says the register holds nil,
    which is what a Tessera read of an absent key returns."""

    name = "register"

    def __init__(self, initial: Any = None, nil_read_unknown: bool = False):
        self.initial = initial
        self.nil_read_unknown = nil_read_unknown

    def init(self) -> Any:
        return self.initial

    def step(self, state: Any, f: str, value: Any) -> Any:
        if f == "write":
            return value
        if f == "read":
            if value == state or (value is None and self.nil_read_unknown):
                return state
            return INCONSISTENT
        return INCONSISTENT


class CASRegister(Register):
    name = "cas-register"

    def step(self, state: Any, f: str, value: Any) -> Any:
        if f == "cas":
            try:
                old, new = value
            except (TypeError, ValueError):
                return INCONSISTENT
            return new if old == state else INCONSISTENT
        return Register.step(self, state, f, value)


class Mutex(Model):
    name = "mutex"

    def init(self) -> Any:
        return False

    def step(self, state: Any, f: str, value: Any) -> Any:
        if f == "acquire":
            return INCONSISTENT if state else True
        if f == "release":
            return False if state else INCONSISTENT
        return INCONSISTENT


class SetModel(Model):
    """A grow-only set: `add` an element, `read` returns every element."""

    name = "set"

    def init(self) -> Any:
        return frozenset()

    def step(self, state: Any, f: str, value: Any) -> Any:
        if f == "add":
            return state | {value}
        if f == "read":
            try:
                return state if frozenset(value) == state else INCONSISTENT
            except TypeError:
                return INCONSISTENT
        return INCONSISTENT


class FIFOQueue(Model):
    """`enqueue v`; `dequeue` returns the oldest element, or None when the queue is empty."""

    name = "queue"

    def init(self) -> Any:
        return ()

    def step(self, state: Any, f: str, value: Any) -> Any:
        if f == "enqueue":
            return state + (value,)
        if f == "dequeue":
            if not state:
                return state if value is None else INCONSISTENT
            return state[1:] if state[0] == value else INCONSISTENT
        return INCONSISTENT


class MultiRegister(Model):
    """Tessera's multi-key register: `txn` ops whose value is a list of `[read|write, key, v]`
    micro-ops applied atomically. The state is a sorted tuple of (key, value) pairs. A read
    micro-op with v None checks nothing (Jepsen leaves unknown reads nil), so the initial values
    should be given when keys start non-empty, as Knossos's multi-register tests do."""

    name = "multi-register"

    def __init__(self, initial: dict[Any, Any] | None = None):
        self.initial = tuple(sorted((initial or {}).items()))

    def init(self) -> Any:
        return self.initial

    def step(self, state: Any, f: str, value: Any) -> Any:
        if f != "txn":
            return INCONSISTENT
        current = dict(state)
        changed = False
        for mop in value or ():
            mf, k, v = mop
            if mf == "read":
                if v is not None and current.get(k) != v:
                    return INCONSISTENT
            elif mf == "write":
                current[k] = v
                changed = True
            else:
                return INCONSISTENT
        return tuple(sorted(current.items(), key=repr)) if changed else state

    def read_only(self, f: str, value: Any) -> bool:
        return f == "txn" and all(m[0] == "read" for m in value or ())

    def describe(self, state: Any) -> Any:
        return {str(k): v for k, v in state}


MODELS: dict[str, type[Model]] = {
    m.name: m for m in (Register, CASRegister, Mutex, SetModel, FIFOQueue, MultiRegister)
}
