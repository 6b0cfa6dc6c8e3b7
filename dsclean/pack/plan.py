"""Which sample goes into which shard, in which order: a pure function of the index and the options.

Because the plan depends on nothing else, any shard can be (re)built alone:
by a resumed pack, by one task of a job array, or by a Dask worker, and the
bytes are the same.

- Order: a permutation defined here (rows sorted by splitmix64 of their key
  mixed with the seed, so it never changes with a numpy version): the seed of
  ``--shuffle SEED``, or one chosen at random and recorded in ``pack.json``
  (:mod:`.packer` resolves it before the plan is made); the index's row order
  with ``--no-shuffle`` (seed None).
- Shards: ``--samples-per-shard N`` cuts every N samples; ``--shard-size SIZE``
  closes a shard before the sample that would take its file past SIZE: a tar
  file is whole 10,240-byte records (the end-of-archive blocks, then zeros to
  the record's end), so a shard's file is at most the largest multiple of
  10,240 not above SIZE. Each sample's bytes are exact (headers, media with
  padding, ``.cls``) but for its ``.json``, whose length is bounded from the
  path's length (exact: one block, unless the path is long or needs escapes).
  A shard always holds at least one sample, so a sample bigger than that
  (or any sample, below 10,240 bytes) gets a shard of its own.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

from ..errors import UserError
from ..index.store import KINDS, MappedIndex
from . import extnames, names
from .bulk import FACT_NAMES
from .samples import KEY_RE, int_facts_record, key_numbers
from .tarformat import BLOCK, RECORD

DEFAULT_SHARD_SIZE = 1 << 30  # 1 GiB
DEFAULT_NAME = names.EXAMPLE
#: the longest ``.json`` record but for its path and class name: every fact, the size and a label of the
#: most digits an int64 has, an empty path, path_b64 and class (their lengths are added per row)
_JSON_FIXED = (
    len(
        int_facts_record(
            {"path": "", "path_b64": ""},
            0,
            [""],
            max(KINDS, key=len),
            -(2**63),
            bytes(16),
            {k: -(2**63) for k in FACT_NAMES},
        )
    )
    + len(str(2**63))
    - 1
)
_ROWS = 65_536


@dataclass(frozen=True)
class Layout:
    """The options that decide the shards' bytes (and so must match to resume)."""

    shard_size: int | None = None  # None with samples_per_shard; else the target bytes per shard
    samples_per_shard: int | None = None
    shuffle: int | None = None  # the seed (None: index order)
    name: str = DEFAULT_NAME
    ext_policy: str = extnames.KEEP  # how media members are named (:mod:`.extnames`)

    def to_json(self) -> dict:
        return {
            "shard_size": self.shard_size,
            "samples_per_shard": self.samples_per_shard,
            "shuffle": self.shuffle,
            "name": self.name,
            "ext_policy": self.ext_policy,
        }


def make_layout(
    shard_size: int | None,
    samples_per_shard: int | None,
    shuffle: int | None,
    name: str | None,
    ext_policy: str = extnames.KEEP,
) -> Layout:
    """Check the options (clear errors) and fill in the defaults."""
    if shard_size is not None and samples_per_shard is not None:
        raise UserError("--shard-size and --samples-per-shard cannot be used together: pick one")
    if samples_per_shard is not None and samples_per_shard < 1:
        raise UserError(f"--samples-per-shard must be 1 or more, not {samples_per_shard}")
    if shard_size is not None and shard_size < 1:
        raise UserError(f"--shard-size must be more than 0 bytes, not {shard_size}")
    if samples_per_shard is None and shard_size is None:
        shard_size = DEFAULT_SHARD_SIZE
    if shuffle is not None and (isinstance(shuffle, bool) or not isinstance(shuffle, int) or shuffle < 0):
        raise UserError(f"--shuffle SEED must be a whole number 0 or more, not {shuffle!r}")
    if ext_policy not in extnames.POLICIES:
        raise UserError(f"--ext-policy must be one of {', '.join(extnames.POLICIES)}, not {ext_policy!r}")
    name = DEFAULT_NAME if name is None else name
    check_name(name)
    return Layout(shard_size, samples_per_shard, shuffle, name, ext_policy)


def check_name(name: str) -> None:
    """A shard name template (:mod:`.names`: a prefix, one integer field, a suffix), else a UserError (exit 2)."""
    try:
        names.parse(name)
    except names.NameTemplateError as exc:
        raise UserError(f"--name {name!r} is not a shard name template like {names.EXAMPLE!r}: {exc}") from None


@dataclass
class Plan:
    """``order``: source-index rows in pack order; shard ``k`` is ``order[bounds[k]:bounds[k + 1]]``."""

    order: np.ndarray  # int64
    bounds: np.ndarray  # int64, shards + 1 entries
    keys: np.ndarray  # uint64 key number of every source row (by source position)
    layout: Layout

    @property
    def shards(self) -> int:
        return len(self.bounds) - 1

    def rows(self, shard: int) -> np.ndarray:
        return self.order[self.bounds[shard] : self.bounds[shard + 1]]

    def shard_name(self, shard: int) -> str:
        return names.cached(self.layout.name).name(shard)


def make_plan(idx: MappedIndex, layout: Layout, denied: "set[str] | None" = None) -> Plan:
    """Keys (refusing duplicates), order, shard boundaries; rows whose key is in ``denied`` (a deny-list's
    keys, :mod:`dsclean.denylist`) are left out of the order."""
    n = len(idx)
    if n == 0:
        raise UserError(f"{idx.path}: the index has no samples to pack")
    keys = key_numbers(np.asarray(idx.offsets, np.int64), idx.data)
    _refuse_duplicate_keys(idx, keys)
    order = np.arange(n, dtype=np.int64) if layout.shuffle is None else shuffled(keys, layout.shuffle)
    if denied:
        wanted = np.array(sorted(int(k, 16) for k in denied if KEY_RE.fullmatch(k)), dtype=np.uint64)
        order = order[~np.isin(keys[order], wanted)]
        n = len(order)
        if n == 0:
            raise UserError(f"{idx.path}: every sample of the index is on the deny-list: nothing to pack")
    if layout.samples_per_shard is not None:
        bounds = np.append(np.arange(0, n, layout.samples_per_shard, dtype=np.int64), n)
    else:
        # a shard's file is its members, the two end-of-archive blocks, then zeros to a whole record
        content = layout.shard_size // RECORD * RECORD - 2 * BLOCK
        bounds = _cut(np.cumsum(sample_bytes(idx)[order]), content)
    return Plan(order, bounds.astype(np.int64), keys, layout)


def sample_bytes(idx: MappedIndex) -> np.ndarray:
    """Bytes each row's members take in a shard (headers and padding included), never less than they do:
    exact for the media and ``.cls`` members, and for the ``.json`` when its length bound is one block
    (a path of up to ~200 bytes that needs no JSON escapes); for a longer one, the bound's blocks."""
    n = len(idx)
    sizes = np.asarray(idx.sizes, np.int64)
    labels = np.asarray(idx.labels, np.int64)
    classes = [str(c) for c in idx.meta.get("classes", [])]
    quoted = np.array([len(json.dumps(c)) - 2 for c in classes] + [len("null") - 2], np.int64)
    class_len = np.where(labels >= 0, quoted[np.clip(labels, 0, len(classes))], 0)
    offsets = np.asarray(idx.offsets, np.int64)
    path_len = np.diff(offsets)
    plain = np.empty(n, bool)  # the path is written as is: printable ASCII, no quote or backslash
    for lo in range(0, n, _ROWS):  # bounded temporaries, whatever the index's size
        hi = min(n, lo + _ROWS)
        data = np.asarray(idx.data[offsets[lo] : offsets[hi]], np.uint8)
        special = (data >= 0x80) | (data < 0x20) | (data == 0x22) | (data == 0x5C)
        if not special.any():  # the usual block: every path plain ASCII
            plain[lo:hi] = True
            continue
        at = offsets[lo:hi] - offsets[lo]
        nonempty = path_len[lo:hi] > 0  # (reduceat of an empty row gives the next row's first byte)
        plain[lo:hi] = ~nonempty | ~np.logical_or.reduceat(special, np.minimum(at, len(data) - 1))
    # an escaped byte is at most 6 characters (\uXXXX, or \udcXX for a byte that is not UTF-8);
    # then path_b64 may hold the bytes too
    path_json = np.where(plain, path_len, 6 * path_len + 4 * (-(-path_len // 3)))
    json_len = _JSON_FIXED + class_len + path_json
    json_bytes = BLOCK + BLOCK * -(-json_len // BLOCK)
    cls_bytes = np.where(labels >= 0, 2 * BLOCK, 0)  # a label is at most 20 characters: one block
    return BLOCK + sizes + (-sizes % BLOCK) + json_bytes + cls_bytes


def _cut(cum: np.ndarray, target: int) -> np.ndarray:
    """Greedy boundaries over cumulative sizes: each shard holds what fits in ``target`` (at least one)."""
    n = len(cum)
    bounds, start, base = [0], 0, 0
    while start < n:
        end = max(int(np.searchsorted(cum, base + target, side="right")), start + 1)
        bounds.append(end)
        base, start = int(cum[end - 1]), end
    return np.asarray(bounds, np.int64)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def shuffled(keys: np.ndarray, seed: int) -> np.ndarray:
    """The seeded permutation: rows sorted by a keyed mix of their sample key (stable for ties)."""
    salt = np.uint64(int.from_bytes(hashlib.blake2b(str(seed).encode(), digest_size=8).digest(), "big"))
    return np.argsort(_splitmix64(keys ^ salt), kind="stable").astype(np.int64)


def _refuse_duplicate_keys(idx: MappedIndex, keys: np.ndarray) -> None:
    order = np.argsort(keys, kind="stable")
    same = np.flatnonzero(keys[order][1:] == keys[order][:-1])
    if same.size:
        a, b = int(order[same[0]]), int(order[same[0] + 1])
        pa_, pb = idx.path_bytes(a), idx.path_bytes(b)
        why = "the same path twice" if pa_ == pb else "a 64-bit key collision (vanishingly rare)"
        raise UserError(
            f"{idx.path}: rows {a} ({pa_!r}) and {b} ({pb!r}) get the same sample key "
            f"{int(keys[a]):016x}: {why}; rebuild the index without the duplicate"
        )
