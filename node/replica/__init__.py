"""One tablet replica: the Raft core driven with real I/O (`replica`), and what was carved out of
it so that each piece has one owner: its linearizable reads and leases (`read_only`), what a
tablet copy's source keeps pinned while a copy runs (`copy_pins`), and the callback contract
between the driver and its callers (`done`)."""
