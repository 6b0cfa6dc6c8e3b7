"""Thumbnails of samples inside WebDataset tars (a shard set's scan, local or in a bucket): their member bytes.

The results name each sample by ``shard`` and ``member`` (no offset), so the bytes of the shown members are
found by one walk of each shard that holds some (:func:`dsclean.shardsets.webdataset.iter_members`, the
scan's own reader: other members skipped, not read into memory), stopping once every shown member of it
is found. Bounded: at most :data:`MAX_SHARDS` shards walked, a member larger than the thumbnail byte limit
not read, at most :data:`BUDGET` bytes of members kept (the rest get a placeholder saying so). The
bytes are decoded in the thumbnail workers (:mod:`.thumbs`), never here.

Parquet shards name a sample ``row N:COLUMN``: the row group holding each shown row is read once, its one
column only (a row group whose column is larger than :data:`BUDGET` is not read). MDS and litdata samples
get a placeholder: they are not read for thumbnails yet.
"""

from __future__ import annotations

import logging
import os
import re
import zlib
from typing import IO

from ..storage.fs import Store
from ..storage.urls import is_url, scrub
from .model import Item
from .source import safe_rel

log = logging.getLogger("dsclean.report.shardsamples")

MAX_SHARDS = 64  # shards walked for one report
BUDGET = 256 << 20  # member bytes kept for one report
SEP = "\0"  # shard SEP member: the source of a shard sample (never shown)
_PARQUET_MEMBER = re.compile(r"row (\d+):(.+)", re.S)  # dsclean.shardsets.parquet's member names


def shown_members(results: list[str], rels: set[str], prefix: bytes = b"") -> dict[str, tuple[str, str]]:
    """``path -> (shard, member)`` of the shown rows ``rels`` (read from the results, a batch at a time)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from .collect import iter_batches

    out: dict[str, tuple[str, str]] = {}
    if not rels:
        return out
    wanted = pa.array(sorted(os.fsencode(r) for r in rels), pa.binary())
    for batch in iter_batches(results, ["path", "shard", "member"], prefix):
        paths = batch.column(0)
        if not pa.types.is_binary(paths.type):
            paths = paths.cast(pa.binary())
        picked = batch.filter(pc.is_in(paths, value_set=wanted))
        for row in picked.to_pylist():
            path, shard, member = row["path"], row["shard"], row["member"]
            if isinstance(shard, str) and isinstance(member, str):
                out[os.fsdecode(path)] = (shard, member)
    return out


class ShardSamples:
    """The shown samples of a WebDataset shard set, read by walking their shards once
    (:data:`dsclean.report.thumbs.Fetch`)."""

    def __init__(self, kind: str, folder: str, options: dict, max_bytes: int) -> None:
        self.kind, self.max_bytes = kind, max_bytes
        self.store = Store(folder, dict(options)) if is_url(folder) else None
        self.folder = folder if self.store is not None else os.path.abspath(folder)
        self._data: dict[str, tuple[bytes | None, str]] = {}  # source -> (bytes, "") or (None, why)

    def locate(self, where: dict[str, tuple[str, str]]) -> dict[str, str]:
        """The source of each shown path, after reading their members (one walk per shard)."""
        by_shard: dict[str, set[str]] = {}
        for shard, member in where.values():
            by_shard.setdefault(shard, set()).add(member)
        kept = 0
        for n, (shard, members) in enumerate(sorted(by_shard.items())):
            if not safe_rel(shard):  # the results file is data: a name leaving the shard set is not opened
                why = f"not read: the shard name {shard!r} is not a path inside the shard set"
            elif self.kind not in ("webdataset", "parquet"):
                why = f"not read for a thumbnail: samples of {self.kind} shards are not read by the report yet"
            elif n >= MAX_SHARDS:
                why = f"not read for a thumbnail: the report reads at most {MAX_SHARDS} shards"
            elif self.kind == "parquet":
                kept += self._rows(shard, members, BUDGET - kept)
                continue
            else:
                kept += self._walk(shard, members, BUDGET - kept)
                continue
            for member in members:
                self._data[shard + SEP + member] = (None, why)
        return {path: shard + SEP + member for path, (shard, member) in where.items()}

    def _open(self, shard: str) -> IO[bytes]:
        if self.store is not None:
            from ..shardsets.remote import open_object

            return open_object(self.store, shard)
        from ..openfile import open_regular_file

        return open_regular_file(os.path.join(self.folder, shard))

    def _walk(self, shard: str, members: set[str], budget: int) -> int:
        """Read ``members`` of ``shard`` (until all are found, the shard breaks or the budget is spent)."""
        from ..shardsets.webdataset import TarError, iter_members, open_stream

        left, kept = set(members), 0
        why = "not found in its shard (rewritten since the scan?)"
        try:
            with self._open(shard) as raw:
                f = open_stream(raw, shard)
                for name, _at, data, _problem in iter_members(f, self.max_bytes, wanted=left.__contains__):
                    if name not in left:
                        continue
                    left.discard(name)
                    if data is None:  # over max_bytes: iter_members did not read it
                        self._data[shard + SEP + name] = (
                            None,
                            f"not read for a thumbnail: over the {self.max_bytes:,}-byte limit",
                        )
                    else:
                        kept += self._keep(shard + SEP + name, data, kept, budget)
                    if not left:
                        break
        except (TarError, EOFError, zlib.error) as exc:  # a truncated .tar.gz ends in EOFError or zlib.error
            why = f"not read: its shard {shard} breaks before it ({type(exc).__name__}: {exc})"
        except OSError as exc:
            text = str(exc) if self.store is None else scrub(str(exc), self.store.options)
            why = f"not read: the shard {shard} could not be read: {text}"
        for name in left:
            self._data[shard + SEP + name] = (None, why)
        return kept

    def _keep(self, source: str, data: object, kept: int, budget: int) -> int:
        """Keep ``data`` as ``source``'s bytes if it fits the limits (else its placeholder); bytes kept."""
        if not isinstance(data, (bytes, bytearray)):
            self._data[source] = (None, "no bytes in the row")
        elif len(data) > self.max_bytes:
            self._data[source] = (None, f"not read for a thumbnail: over the {self.max_bytes:,}-byte limit")
        elif kept + len(data) > budget:
            self._data[source] = (None, "not read for a thumbnail: the report's budget for shard samples is spent")
        else:
            self._data[source] = (bytes(data), "")
            return len(data)
        return 0

    def _rows(self, shard: str, members: set[str], budget: int) -> int:
        """Read the shown ``row N:COLUMN`` values of a Parquet shard: each row group holding some, once."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        wanted: dict[tuple[int, str], str] = {}
        for member in members:
            m = _PARQUET_MEMBER.fullmatch(member)
            if m is None:
                self._data[shard + SEP + member] = (None, "not read: not a row of the shard")
            else:
                wanted[(int(m.group(1)), m.group(2))] = member
        kept = 0
        try:
            with self._open(shard) as f:
                pf = pq.ParquetFile(f)
                starts, start = [], 0
                for g in range(pf.metadata.num_row_groups):
                    starts.append(start)
                    start += pf.metadata.row_group(g).num_rows
                groups: dict[tuple[int, str], list[int]] = {}
                for row, column in wanted:
                    g = next((g for g in range(len(starts) - 1, -1, -1) if starts[g] <= row), -1)
                    if 0 <= row < start and column in pf.schema_arrow.names:
                        groups.setdefault((g, column), []).append(row)
                for (g, column), rows in sorted(groups.items()):
                    group = pf.metadata.row_group(g)
                    size = sum(
                        group.column(j).total_uncompressed_size
                        for j in range(group.num_columns)
                        if group.column(j).path_in_schema.split(".")[0] == column
                    )
                    if size > budget - kept:
                        for row in rows:
                            source = shard + SEP + wanted.pop((row, column))
                            self._data[source] = (None, "not read for a thumbnail: its row group is too large")
                        continue
                    values = pf.read_row_group(g, columns=[column]).column(column)
                    for row in rows:
                        value = values[row - starts[g]].as_py()
                        data = value.get("bytes") if isinstance(value, dict) else value
                        kept += self._keep(shard + SEP + wanted.pop((row, column)), data, kept, budget)
        except (pa.ArrowException, OSError) as exc:
            text = str(exc) if self.store is None else scrub(str(exc), self.store.options)
            for member in wanted.values():
                self._data[shard + SEP + member] = (None, f"not read: the shard {shard} could not be read: {text}")
            return kept
        for member in wanted.values():
            self._data[shard + SEP + member] = (None, "not found in its shard (rewritten since the scan?)")
        return kept

    def fetch(self, source: str, size: int | None) -> tuple[bytes | None, str]:
        return self._data.get(source, (None, "not read for a thumbnail"))


def attach(items: list[Item], where: dict[str, str]) -> None:
    """Set each shown sample's source."""
    for i in items:
        if i.rel and i.source is None:
            i.source = where.get(i.rel)
