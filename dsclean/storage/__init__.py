"""Object storage (``s3://``, ``gs://``, ``az://``, ``file://``): scan a bucket prefix through fsspec.

What a bucket needs that a folder does not: a URL and its storage options (:mod:`.urls`), the filesystem
(:mod:`.fs`), a streaming listing or a manifest instead of ``os.scandir`` (:mod:`.listing`, :mod:`.manifest`),
reads from memory retried on throttling (:mod:`.reads`), checks on a bounded read pool per worker
(:mod:`.workers`), quarantine by copy-verify-delete with a local write-ahead journal (:mod:`.quarantine`),
and the scan that wires them (:mod:`.scan`). The checks themselves are the scan's (``check_bytes``).
"""
