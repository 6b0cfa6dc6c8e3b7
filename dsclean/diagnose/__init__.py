"""Diagnosing DataLoader failures: the environment half of the problem.

- :mod:`.doctor`: measured checks of shared memory, memory, CPUs, OOM kills, start method
- :mod:`.explain`: which failure a DataLoader error message is, and what fixes it
- :mod:`.probe`: run a real DataLoader and watch each worker's memory
- :mod:`.loader_kwargs`: recommended DataLoader settings for this machine
- :mod:`.sysinfo`: reading cgroups, /proc, /dev/shm and the kernel log

Depends on :mod:`dsclean.index` and :mod:`dsclean.data` only.
"""
