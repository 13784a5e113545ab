"""Faults injected on test hosts: partitions, packet faults, crashes, pauses, clocks, disks,
membership changes. Each module registers its fault packages (`nemeses.registry`); a run's fault
schedule is a plan drawn from the seed (`nemeses.plan`) that `nemeses.schedule` executes."""
