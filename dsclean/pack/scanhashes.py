"""The scan's checksums, reused: a file whose size and mtime are still the scan's is not hashed again.

``dsclean scan`` records every file's ``content_hash`` (BLAKE2b-128 of its bytes,
:mod:`dsclean.hashing`) — the very checksum pack stores per sample. Hashing is
most of pack's CPU time (BLAKE2b runs at ~0.5-0.8 GB/s on one core, a page-cache
copy at several GB/s), so pack takes the scan's hash for every sample whose
file has the same size and ``mtime_ns`` in the scan results as in the index
(which pack checks against the file itself, before and after reading it). The
trust is the scan cache's: a file rewritten in place with the same size and
mtime would keep its old checksum; ``dsclean verify`` (which hashes every
member) reports exactly that, and ``rehash`` hashes everything.

The scan results are found by :func:`dsclean.locations.find_scan`, the rule
every command uses (the parts that ran of an unfinished job array too: a checksum of
a file unchanged since is right whichever part recorded it; the files of the missing
parts are hashed here), and read in Parquet batches (bounded memory); rows are matched to the index through a 64-bit hash of the path bytes (:func:`path_hashes`,
vectorised: ~5x cheaper than a BLAKE2b per row), then compared on the exact path
bytes, so a collision only costs a file's hash being computed by pack.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import locations
from ..hashing import DIGEST_SIZE
from ..index.store import MappedIndex

_COLUMNS = ["path", "size", "mtime_ns", "content_hash"]
_BATCH = 65_536
_HASH_ROWS = 8_192  # rows hashed at once by path_hashes (its temporaries are ~40 bytes per path byte)
_PRIME = np.uint64(0x100000001B3)  # FNV-1a's 64-bit prime (odd, so powers never vanish mod 2**64)


def path_hashes(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """A 64-bit hash per row of a binary column's buffers (``offsets``, ``data``): the polynomial
    sum of its bytes times powers of a prime, mod 2**64, mixed with its length. Only for matching
    rows (candidates are then compared byte for byte), never as an identity."""
    offsets = np.asarray(offsets, np.int64)
    data = np.asarray(data, np.uint8)
    n = len(offsets) - 1
    out = np.empty(max(n, 0), np.uint64)
    with np.errstate(over="ignore"):
        for lo in range(0, n, _HASH_ROWS):
            hi = min(n, lo + _HASH_ROWS)
            starts, lengths = offsets[lo:hi], np.diff(offsets[lo : hi + 1])
            base, end = int(offsets[lo]), int(offsets[hi])
            h = np.zeros(hi - lo, np.uint64)
            if end > base:
                powers = np.cumprod(np.full(int(lengths.max()), _PRIME, np.uint64))
                terms = (
                    data[base:end].astype(np.uint64) * powers[np.arange(end - base) - np.repeat(starts - base, lengths)]
                )
                filled = lengths > 0  # reduceat gives an empty row the next row's first term
                h[filled] = np.add.reduceat(terms, starts[filled] - base)
            out[lo:hi] = (h ^ lengths.astype(np.uint64)) * _PRIME
    return out


def scan_checksums(idx: MappedIndex) -> tuple[np.ndarray, np.ndarray, str]:
    """``(checksums (rows, 16) uint8, known bool per row, where they came from)`` for the index's rows."""
    n = len(idx)
    sums = np.zeros((n, DIGEST_SIZE), np.uint8)
    known = np.zeros(n, bool)
    found = locations.find_scan(str(idx.meta["root"]))
    paths, source = found.paths, found.source
    if found.partial is not None:  # a hash is a hash: the parts that ran are reused, the others' files hashed here
        source += ": the files of the missing parts are hashed here"
    if not paths:
        return sums, known, source
    keys = path_hashes(idx.offsets, idx.data)
    by_key = np.argsort(keys, kind="stable")
    sorted_keys = keys[by_key]
    sizes, mtimes = np.asarray(idx.sizes, np.int64), np.asarray(idx.mtimes, np.int64)
    index_paths = pa.LargeBinaryArray.from_buffers(  # a zero-copy view of the index's path column
        pa.large_binary(),
        n,
        [None, pa.py_buffer(np.ascontiguousarray(idx.offsets, np.int64)), pa.py_buffer(np.ascontiguousarray(idx.data))],
    )
    for path in paths:
        if os.path.isdir(path):
            path = os.path.join(path, locations.RESULTS_FILE)
        try:
            pf = pq.ParquetFile(path)
            if "content_hash" not in pf.schema_arrow.names:  # results of a dsclean that did not hash
                continue
            for batch in pf.iter_batches(batch_size=_BATCH, columns=_COLUMNS):
                batch = locations.subtree_rows(batch, found.prefix)  # a scanned parent's: this subtree's rows
                _match(batch, index_paths, sorted_keys, by_key, sizes, mtimes, sums, known)
        except (OSError, pa.ArrowException) as exc:
            return sums, known, f"{path}: unreadable ({exc}); every file is hashed"
    return sums, known, source


def _match(
    batch: pa.RecordBatch,
    index_paths: pa.Array,
    sorted_keys: np.ndarray,
    by_key: np.ndarray,
    sizes: np.ndarray,
    mtimes: np.ndarray,
    sums: np.ndarray,
    known: np.ndarray,
) -> None:
    """Fill ``sums``/``known`` for the index rows this batch of results has a current hash for."""
    usable = pc.and_(
        pc.is_valid(batch.column("content_hash")),
        pc.and_(pc.is_valid(batch.column("size")), pc.is_valid(batch.column("mtime_ns"))),
    )
    batch = batch.filter(usable)
    if not batch.num_rows:
        return
    rpaths = batch.column("path")
    if not pa.types.is_large_binary(rpaths.type):
        rpaths = rpaths.cast(pa.large_binary())
    _, off_buf, data_buf = rpaths.buffers()
    offsets = np.frombuffer(off_buf, np.int64)[rpaths.offset : rpaths.offset + len(rpaths) + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    rkeys = path_hashes(offsets, data)
    at = np.minimum(np.searchsorted(sorted_keys, rkeys), len(sorted_keys) - 1)
    rows = by_key[at]
    hit = (
        (sorted_keys[at] == rkeys)
        & (sizes[rows] == batch.column("size").to_numpy())
        & (mtimes[rows] == batch.column("mtime_ns").to_numpy())
    )
    if not hit.any():
        return
    where = np.flatnonzero(hit)  # the same key: make sure it is the same path (64-bit keys can collide)
    same = pc.equal(rpaths.take(pa.array(where)), index_paths.take(pa.array(rows[where])))
    hit[where[~same.to_numpy(zero_copy_only=False)]] = False
    fixed = batch.column("content_hash").cast(pa.binary(DIGEST_SIZE))
    digests = np.frombuffer(fixed.buffers()[1], np.uint8)[
        fixed.offset * DIGEST_SIZE : (fixed.offset + len(fixed)) * DIGEST_SIZE
    ]
    digests = digests.reshape(-1, DIGEST_SIZE)
    sums[rows[hit]] = digests[hit]
    known[rows[hit]] = True
