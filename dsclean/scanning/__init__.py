"""The scan stage: discover -> check (parallel) -> verdicts -> quarantine.

- :mod:`.discover`: stream media paths with ``os.scandir`` (no list of all paths)
- :mod:`.check`, :mod:`.check_image`, :mod:`.check_audio`, :mod:`.check_pnm`: one file in, one verdict out
- :mod:`.executors`, :mod:`.worker`: chunks on a process pool that survives crashing
  and hanging decoders (loky, threads or Dask)
- :mod:`.verdict`, :mod:`.results`, :mod:`.cache`: the record, the results table, the
  re-scan cache
- :mod:`.quarantine`: the journal, journaled moves, recovery, restore, and what a quarantine holds
  (problems lines, summaries, status)
- :mod:`.scanner`: wires the above together (:func:`dsclean.scan`)
- :mod:`.merge`: combine the results of a job array's parts

Named ``scanning`` rather than ``scan`` so that the package never shadows the public
function :func:`dsclean.scan` (``import dsclean.scan`` would rebind that attribute).
"""
