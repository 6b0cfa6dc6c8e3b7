"""Sample keys that appear in more than one shard of a WebDataset set, found with bounded memory.

While the set is checked, each tar sample's key is remembered as a 64-bit hash and its shard's
number (12 bytes a sample, in two ``array`` buffers: no Python object per sample). At the end the
hashes are sorted (numpy) and those seen in two or more shards are looked up again by name in those
shards only (their headers walked once more), so each problem names the key and every shard holding it.
"""

from __future__ import annotations

import array
import hashlib
import itertools
import zlib
from typing import Iterator

from .. import reasons as R
from ..pack.tarformat import TarError
from .detect import ShardSet
from .events import Problem, Sample
from .webdataset import base_plus_ext, iter_members, open_stream

#: duplicate keys named at most (the count says how many more)
MAX_NAMED = 1000


def key_hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogateescape"), digest_size=8).digest(), "little")


class KeyTracker:
    """Remembers (key hash, shard number) of each tar sample; :meth:`problems` names the cross-shard ones."""

    def __init__(self, ss: ShardSet) -> None:
        self.ss = ss
        self.number = {name: i for i, name in enumerate(ss.names)}
        self.hashes = array.array("Q")
        self.shards = array.array("I")

    def add(self, sample: Sample) -> None:
        k = self.number.get(sample.shard)
        if k is not None and sample.row is None:
            self.hashes.append(key_hash(sample.key))
            self.shards.append(k)

    def add_hashes(self, number: int, hashes: bytes) -> None:
        """A shard's key hashes (uint64 bytes, as a worker hands them back), all at once."""
        before = len(self.hashes)
        self.hashes.frombytes(hashes)
        self.shards.extend(itertools.repeat(number, len(self.hashes) - before))

    def problems(self) -> Iterator[Problem]:
        import numpy as np

        if len(self.hashes) < 2:
            return
        h = np.frombuffer(self.hashes, dtype=np.uint64)
        s = np.frombuffer(self.shards, dtype=np.uint32)
        order = np.lexsort((s, h))
        h, s = h[order], s[order]
        new_shard = np.ones(len(h), dtype=bool)
        new_shard[1:] = (h[1:] != h[:-1]) | (s[1:] != s[:-1])
        h, s = h[new_shard], s[new_shard]  # one row per (hash, shard)
        dup = np.zeros(len(h), dtype=bool)
        dup[1:] |= h[1:] == h[:-1]
        dup[:-1] |= h[:-1] == h[1:]
        if not dup.any():
            return
        wanted = {int(x) for x in np.unique(h[dup])[:MAX_NAMED]}
        more = int(len(np.unique(h[dup]))) - len(wanted)
        shards = sorted({int(x) for x in s[dup][np.isin(h[dup], list(wanted))]})
        where: dict[int, tuple[str, list[str]]] = {}
        for k in shards:
            name = self.ss.names[k]
            for key in self._keys(name, wanted):
                entry = where.setdefault(key_hash(key), (key, []))
                if name not in entry[1]:
                    entry[1].append(name)
        for key, names in where.values():
            if len(names) > 1:
                detail = f"sample key {key} is in {len(names)} shards: {', '.join(names[:10])}"
                yield Problem(names[1], key, None, None, R.DUPLICATE_KEY, detail)
        if more > 0:
            yield Problem(self.ss.names[0], None, None, None, R.DUPLICATE_KEY, f"... and {more} more duplicate keys")

    def _keys(self, name: str, wanted: set[int]) -> Iterator[str]:
        """The keys of shard ``name`` whose hash is wanted (its walk stops where it breaks: reported already)."""
        try:
            with self.ss.open(name) as f:
                for member, _, _, _ in iter_members(open_stream(f, name)):
                    key = base_plus_ext(member)[0]
                    if key is not None and key_hash(key) in wanted:
                        yield key
        except (OSError, EOFError, TarError, zlib.error):  # the first walk reported where it breaks
            return
