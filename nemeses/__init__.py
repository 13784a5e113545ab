"""Faults injected on test hosts: partitions, packet faults, crashes, pauses, clocks, disks."""
