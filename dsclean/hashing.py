"""The one content checksum dsclean records: BLAKE2b-128 of a file's bytes.

The scan records it per file (``content_hash``), ``dsclean dups`` groups exact
duplicates by it, and ``dsclean pack`` stores it as each sample's ``checksum``
and ``dsclean verify`` checks shards against it. One definition, here.
"""

from __future__ import annotations

import hashlib

DIGEST_SIZE = 16  # bytes: BLAKE2b-128
_BLOCK = 1 << 20


def new_hasher() -> "hashlib._Hash":
    """An incremental hasher (``update`` it with the bytes as they are read)."""
    return hashlib.blake2b(digest_size=DIGEST_SIZE)


def content_hash(data: bytes | bytearray | memoryview) -> bytes:
    """The 16-byte digest of ``data``."""
    return hashlib.blake2b(data, digest_size=DIGEST_SIZE).digest()


def content_hash_file(path: str | bytes) -> bytes:
    """The 16-byte digest of a regular file's bytes, read in 1 MiB blocks."""
    h = new_hasher()
    with open(path, "rb", buffering=0) as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.digest()
