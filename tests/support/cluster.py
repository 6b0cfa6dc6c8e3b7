"""A real Dask ``distributed.LocalCluster`` for tests: 2 worker processes of 1 thread on loopback."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def local_cluster(**kw):
    """The cluster, its workers started non-daemonic (as real clusters set DASK_DISTRIBUTED__WORKER__DAEMON=False).

    Dask workers are daemonic by default, and daemonic processes may not start the fresh processes each chunk
    is checked in. The setting stays on for the cluster's life: nannies read it again when they restart a worker.
    """
    import dask
    import distributed

    with dask.config.set({"distributed.worker.daemon": False}):
        with distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None, **kw
        ) as c:
            yield c
