"""The write-ahead log of one tablet replica, after Kudu's consensus and WAL design.

    log = Log.open("DATA/wals/<tablet_id>", tablet_id, LogOptions())
    replay(log.recovered)               # every entry that survived, contiguous, truncations applied

    # threads: under the caller's own ordering lock, reserve; then append outside the lock
    with raft_lock:
        res = log.reserve([Entry(term, index, EntryType.REPLICATE, payload), ...])
    log.async_append(res, callback)     # callback(None) on the appender thread once durable

    # asyncio (one loop): ordering comes from the loop's single thread
    await log.wait_for_space()          # back-pressure: the queue is bounded in bytes
    await log.append_future(log.reserve(entries))   # resolved once durable, one wake-up
                                                    # of the loop per group, not per entry

    res = log.truncate_suffix(after_index)  # Raft replacing a divergent tail: a reservation,
    log.async_append(res, callback)         # appended like entries (or append_future)
    log.register_anchor("peer-2", 120)  # keep entries >= 120; release_anchor(name) to drop
    log.gc()                            # delete closed segments wholly below every anchor
    log.close()                         # footer on the last segment

    Log.open(directory, tablet_id, options, disk=SimDisk())  # node.disk: every file operation
                                        # goes through `disk`; a SimDisk (inline) runs the log
                                        # without threads on the event loop, for the simulator

Guarantees: reservation order is disk order; with log_force_fsync_all (default true) nothing
is acknowledged before it is synced (unless the unsafe fault_ack_before_fsync is on); one appender thread writes each group with one vectored
write and one sync, then runs that group's callbacks in order. Bootstrap accepts only one kind
of damage, a torn tail of the newest unfinished segment, which it cuts off; anything else raises
WalCorruption naming file and offset. Every reservation must be appended (the appender waits
for it, in order).
"""

from node.wal.errors import WalClosed, WalCorruption, WalError
from node.wal.log import Log, LogOptions, Recovery, Reservation
from node.wal.reader import LogContents, read_log

__all__ = [
    "Log",
    "LogContents",
    "LogOptions",
    "Recovery",
    "Reservation",
    "WalClosed",
    "WalCorruption",
    "WalError",
    "read_log",
]
