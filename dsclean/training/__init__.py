"""dsclean.training: the training guard: name the sample that failed, keep the run going, log every failure.

- :mod:`dsclean.data.guard` (in the data stage, so ``IndexedDataset(on_error="skip")`` can run it):
  ``dsclean.guard(dataset, on_error=..., log=..., max_failures=...)`` wraps any map-style or
  iterable dataset (per-sample errors: raise naming the sample, skip, or replace), with
  :mod:`dsclean.data.slots`, the shared-memory table each worker writes the index it is loading into.
- :mod:`.dataloader`: ``dsclean.DataLoader``, torch's loader plus: a worker that dies is named
  (``WorkerDied``) and, with ``on_worker_death="skip"``, the epoch goes on without the culprit.
- :mod:`.errors`: ``WorkerDied`` (``TooManyFailures`` is in :mod:`dsclean.data.errors`).

Failures are written with :mod:`dsclean.failures` (one file per process, whole-line appends).
"""
