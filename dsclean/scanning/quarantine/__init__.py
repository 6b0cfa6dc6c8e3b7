"""The quarantine, the scan's last step: bad files moved aside, journaled, never deleted.

- :mod:`.journal`: the write-ahead journal (``manifest.jsonl``): its format, its records, its lock
- :mod:`.moves`: moving a file aside, journaled before it happens (:class:`~.moves.Quarantine`)
- :mod:`.recovery`: finishing or rolling back the moves a killed run left half-done (``dsclean recover``)
- :mod:`.restore`: putting the files back (``dsclean restore``)
- :mod:`.status`: what a quarantine holds, from its journal (problems lines, summaries, ``dsclean status``)

Part of the scan stage, not a stage of its own: the scan moves files as it judges them
(:mod:`..scanner` imports :mod:`.moves`), and restore and status read the scan's own
records (the scan cache's tombstones, the marker discovery skips, a root's last scan).
"""
