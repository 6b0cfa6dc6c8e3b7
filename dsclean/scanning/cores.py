"""How many cores a scan uses by default (``--jobs 0``): the affinity mask and the cgroup CPU quota.

Its own small module: the ``dsclean`` command reads it before it imports the scan (to start the pool's first worker
early, :func:`dsclean.scanning.executors.prestart_local_worker`)."""

from __future__ import annotations

import math
import os

#: the cgroup CPU quota files read (as joblib reads them): v2's ``cpu.max``, else v1's quota and period
CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"
CGROUP_V1_QUOTA = ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us")


def usable_cores() -> int:
    """Cores this process may use: affinity mask and cgroup CPU quota (rounded up), not just os.cpu_count().

    The count joblib's ``cpu_count(only_physical_cores=False)`` gives, read here: importing joblib (asyncio, its
    process pool, ~200 M instructions) was most of a default scan's start-up (issue 29)."""
    count = os.cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        count = min(count, len(os.sched_getaffinity(0)))
    quota = _cgroup_cpu_quota()
    if quota is not None:
        count = min(count, math.ceil(quota))
    return max(1, count)


def _cgroup_cpu_quota() -> float | None:
    """The cgroup CPU quota in cores (``1.5``: 150 ms per 100 ms), None when unlimited or unreadable."""
    try:
        with open(CGROUP_CPU_MAX) as f:
            quota, _, period = f.read().strip().partition(" ")
    except OSError:
        try:
            with open(CGROUP_V1_QUOTA[0]) as f, open(CGROUP_V1_QUOTA[1]) as g:
                quota, period = f.read().strip(), g.read().strip()
        except OSError:
            return None
    try:
        q, p = int(quota), int(period)
    except ValueError:  # "max": no quota
        return None
    return q / p if q > 0 and p > 0 else None
