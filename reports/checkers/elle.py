"""Elle-style transactional checking (after Kingsbury & Alvaro, "Elle: Inferring Isolation
Anomalies from Experimental Observations", and Jepsen's elle library).

A transaction is an op with f "txn" whose value is a list of micro-ops `[f, key, value]`:
list-append uses `append` and `r` (a read returns the whole list), rw-register uses `w` and `r`.
From the reads we infer dependencies between transactions (ww, wr, rw, plus process or realtime
order as the consistency model needs), search the graph for cycles (`cycles`), find the anomalies
no cycle shows directly, and judge them against Elle's consistency-model lattice (`consistency`).

Both checkers return {"checker", "verdict", "consistency_model", "anomaly_types", "anomalies",
"not", "also_not", "ruled_out", "possible", "transactions"}; each anomaly has "type",
"explanation" and, for cycles, "transactions" and "edges". `anomaly_types` lists every anomaly
found; only those the chosen model proscribes make the verdict invalid.
"""

from reports.checkers.elle_list_append import check_list_append
from reports.checkers.elle_rw_register import check_rw_register
from reports.checkers.registry import Model, register

__all__ = ["check_list_append", "check_rw_register"]


register(Model("list-append", lambda ops, opts: [
    check_list_append(ops, consistency_model=opts.consistency_model)]))
register(Model("rw-register", lambda ops, opts: [
    check_rw_register(ops, consistency_model=opts.consistency_model, wfr_keys=opts.wfr_keys)]))
