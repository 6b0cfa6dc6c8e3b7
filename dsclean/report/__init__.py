"""Stage: a scan's results as one self-contained HTML page people would rather look at than read.

``write_report`` (:mod:`.build`) wires the small modules together: :mod:`.source`
(which scan, where its files are now), :mod:`.collect` (one streaming pass over
the results), :mod:`.duplicates`, :mod:`.thumbs` (previews made in isolated
workers), :mod:`.svg` (charts), :mod:`.render` (HTML) and :mod:`.safe`
(escaping; no machine paths). Reads scanning's outputs; only the CLI imports it.
"""
