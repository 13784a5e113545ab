"""One tablet replica's lower layer: state machine, ops, snapshots, superblock, consensus metadata.

Pure or file-only code: the tablet server drives it with the WAL, the Raft core and the network.
"""
