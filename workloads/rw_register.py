"""Elle's rw-register: transactions of reads and writes over a few registers of one tablet,
generated as list-append's are (the same key sets, lengths and mix), with `w` in place of
`append`. Every written value is unique, so a read names the transaction that wrote it.

A register's reads say far less about the order of its versions than a list's, so the checker
is told what Jepsen's MySQL and Galera suites tell Elle for this workload (`--[no-]wfr-keys`,
on by default there): within one transaction, a write of a key follows that transaction's read
of it. What a lost update looks like here is two committed transactions that read the same
version of a register and both wrote it, which list-append cannot show when the database
appends without reading (MariaDB's `CONCAT` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from workloads.base import register
from workloads.list_append import ListAppend


@register
@dataclass
class RwRegister(ListAppend):
    name: str = "rw-register"
    write_f: ClassVar[str] = "w"

    def checker_options(self) -> dict:
        return {"wfr_keys": True}
