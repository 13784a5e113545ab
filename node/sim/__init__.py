"""Deterministic cluster simulator for the pure Raft core: many cores, one process, a virtual
clock, a seeded scheduler of faults, and Raft's safety invariants checked after every step."""
