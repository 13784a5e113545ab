"""The master daemon and its Raft-replicated catalog."""
