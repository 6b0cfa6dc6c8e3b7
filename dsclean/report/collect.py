"""Read a scan's results once, in batches, into what the report shows.

Memory is bounded whatever the number of files: counts and histograms are
fixed-size, galleries keep at most a cap of items, the problems table at most
``table_cap`` rows, the outlier galleries a running top-k. Facts columns
(``brightness``, ``flags``, ... see docs/reference/facts.md) are optional: a section exists
only when its columns are in the results.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import locations
from .. import reasons as R
from ..errors import UserError
from ..schema import FACT_NAMES
from .model import Gallery, Histogram, Item, ReportData
from .safe import Scrubber, display

BATCH_ROWS = 65_536

#: log2 bin edges: file sizes 64 B .. 64 GiB, image sides 8 .. 32768 px, durations ~8 ms .. ~9 h (2 bins per octave)
SIZE_EDGES = [2.0 ** (k / 2) for k in range(12, 73)]
SIDE_EDGES = [2.0 ** (k / 2) for k in range(6, 31)]
DURATION_EDGES = [2.0 ** (k / 2) for k in range(-14, 31)]

#: the columns a gallery card or a table row needs
CARD_COLUMNS = [
    "path",
    "kind",
    "status",
    "reason",
    "detail",
    "size",
    "format",
    "width",
    "height",
    "duration",
    "sample_rate",
]


@dataclass(frozen=True)
class Outlier:
    """A quality gallery: the files with the most extreme values of one facts column."""

    column: str
    order: str  # "low": smallest first; "high": largest first; "abs": largest magnitude first
    title: str
    kind: str  # image / audio
    blurb: str


OUTLIERS = (
    Outlier("brightness", "low", "Darkest", "image", "lowest mean luma (0 = black)"),
    Outlier("brightness", "high", "Brightest", "image", "highest mean luma (1 = white)"),
    Outlier("contrast", "low", "Lowest contrast", "image", "smallest spread of luma"),
    Outlier("entropy", "low", "Least information", "image", "lowest entropy of the luma histogram, in bits"),
    Outlier("sharpness", "low", "Blurriest", "image", "lowest variance of the Laplacian"),
    Outlier("rms", "low", "Most silent", "audio", "lowest RMS level"),
    Outlier("clipped", "high", "Most clipped", "audio", "largest fraction of samples at full scale"),
    Outlier("dc_offset", "abs", "Largest DC offset", "audio", "mean sample value furthest from 0"),
)
#: the fact columns a report may find in the results (dsclean.schema.FACTS)
FACT_COLUMNS = FACT_NAMES


@dataclass(frozen=True)
class Caps:
    """How much of each kind of thing the report keeps (the rest is counted)."""

    per_reason: int = 200  # thumbnails per bad/warn reason
    per_flag: int = 60  # thumbnails per quality flag
    per_outlier: int = 24  # files per outlier gallery
    table: int = 100_000  # rows of the problems table
    classes: int = 50  # bars of the class histogram
    detail_chars: int = 400  # characters of a decoder message in the table


TABLE_COLUMNS = ["path", "status", "reason", "kind", "format", "size", "dims", "detail"]


def iter_batches(results: str | list[str], columns: list[str], prefix: bytes = b""):
    """Record batches of ``columns`` from a results file, or from each of several (a job array's parts) in turn.

    ``prefix`` (a scanned parent's results, :attr:`.source.Source.prefix`): only the rows under it, their
    paths made relative to that folder (:func:`dsclean.locations.subtree_rows`)."""
    read = columns if not prefix or "path" in columns else [*columns, "path"]
    for path in [results] if isinstance(results, str) else results:
        try:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS, columns=read):
                if prefix:
                    batch = locations.subtree_rows(batch, prefix)
                    batch = batch.select(columns) if read is not columns else batch
                yield batch
        except (OSError, pa.ArrowException) as exc:  # damaged (or not Parquet): name the file, no traceback
            raise UserError(
                f"{path}: cannot read scan results ({' '.join(str(exc).split())}); scan the root again (--rescan) "
                "to rebuild them"
            ) from exc


def collect(
    results_path: str | list[str], columns: list[str], scrub: Scrubber, caps: Caps = Caps(), prefix: bytes = b""
) -> ReportData:
    """One pass over the results table (one file, or every part's; ``prefix``: only the rows under it, as
    :func:`iter_batches`); returns a :class:`ReportData` without thumbnails or duplicates."""
    present = set(columns)
    data = ReportData(title="", root="", results="", generated="", version="")
    data.facts = [c for c in FACT_COLUMNS if c in present]
    data.problems_columns = TABLE_COLUMNS
    counts: Counter = Counter()
    reasons: Counter = Counter()
    classes: Counter = Counter()  # (class bytes, is bad) -> n
    sizes: dict[str, np.ndarray] = {}
    res = np.zeros((len(SIDE_EDGES) - 1, len(SIDE_EDGES) - 1), dtype=np.int64)
    durations = np.zeros(len(DURATION_EDGES) - 1, dtype=np.int64)
    rates: Counter = Counter()
    channels: Counter = Counter()
    galleries: dict[tuple[str, str], Gallery] = {}
    outliers = {o: _TopK(caps.per_outlier) for o in OUTLIERS if o.column in present}
    flags: dict[str, Gallery] = {}
    fact_counts: Counter = Counter()
    wanted = [c for c in (*CARD_COLUMNS, "channels", *data.facts) if c in present and c != "content_hash"]
    clean = _Cleaner(scrub)
    for batch in iter_batches(results_path, wanted, prefix):
        t = pa.Table.from_batches([batch])
        data.files += t.num_rows
        data.bytes += int(pc.sum(t["size"]).as_py() or 0) if "size" in present else 0
        for row in t.group_by(["kind", "status"]).aggregate([("status", "count")]).to_pylist():
            counts[(row["kind"], row["status"])] += row["status_count"]
        status = t["status"]
        _classes(t, status, classes)
        if "size" in present:
            _sizes(t, sizes)
        if "width" in present and "height" in present:
            _resolution(t, res)
        if "duration" in present:
            _durations(t, durations, rates, channels)
        problems = t.filter(pc.not_equal(status, R.OK))
        if problems.num_rows:
            for row in problems.group_by(["status", "reason"]).aggregate([("status", "count")]).to_pylist():
                reasons[(row["status"], row["reason"] or "?")] += row["status_count"]
            _problems(problems, data, galleries, clean, caps)
        if not data.facts:
            continue
        kept = pc.not_equal(status, R.BAD)  # facts describe files that stay in the dataset
        of_kind = {k: pc.and_(kept, pc.equal(t["kind"], k)) for k in ("image", "audio")}
        for o, top in outliers.items():
            top.add(t, o, of_kind[o.kind])
        if "flags" in present:
            _flags(t, kept, flags, caps, scrub)
        _fact_counts(t, kept, fact_counts)

    data.counts = {}
    for (kind, st), n in sorted(counts.items()):
        data.counts.setdefault(kind, {})[st] = n
    data.reasons = {}
    for (st, reason), n in reasons.most_common():
        data.reasons.setdefault(st, {})[reason] = n
    data.problems_total = sum(reasons.values())
    order = {(st, r): i for i, (st, r) in enumerate(sorted(reasons, key=lambda k: (k[0] != R.BAD, -reasons[k], k[1])))}
    data.reason_galleries = sorted(galleries.values(), key=lambda g: order[(g.status, g.reason)])
    for g in data.reason_galleries:
        g.total = reasons[(g.status, g.reason)]
    _finish_classes(data, classes, caps)
    data.sizes = {k: Histogram(SIZE_EDGES, v.tolist()) for k, v in sorted(sizes.items()) if v.any()}
    if res.any():
        data.resolution = (SIDE_EDGES, SIDE_EDGES, res.tolist())
    if durations.any():
        data.durations = Histogram(DURATION_EDGES, durations.tolist())
    data.sample_rates, data.channels = dict(sorted(rates.items())), dict(sorted(channels.items()))
    data.outliers = [top.gallery(o, scrub) for o, top in outliers.items() if top.heap]
    data.flags = sorted(flags.values(), key=lambda g: (-g.total, g.reason))
    data.fact_counts = {k: n for k, n in fact_counts.items() if n}
    return data


def item_from_row(row: dict, scrub: Scrubber) -> Item:
    """A gallery item from a results row (a dict with some of :data:`CARD_COLUMNS`)."""
    import os

    rel = os.fsdecode(row["path"])
    return Item(
        path=display(rel),
        kind=row.get("kind") or "unknown",
        status=row.get("status") or R.OK,
        reason=row.get("reason"),
        detail=scrub(display(row.get("detail") or "")),
        size=row.get("size"),
        format=row.get("format"),
        width=row.get("width"),
        height=row.get("height"),
        duration=row.get("duration"),
        sample_rate=row.get("sample_rate"),
        rel=rel,
    )


class _Cleaner:
    """Display text of decoder messages, remembered: the same few messages repeat across thousands of files."""

    def __init__(self, scrub: Scrubber, size: int = 10_000) -> None:
        self.scrub, self.size, self.seen = scrub, size, {}

    def __call__(self, text: str | None) -> str:
        text = text or ""
        out = self.seen.get(text)
        if out is None:
            if len(self.seen) >= self.size:
                self.seen.clear()
            out = self.seen[text] = self.scrub(display(text))
        return out


def _problems(problems: pa.Table, data: ReportData, galleries: dict, clean: _Cleaner, caps: Caps) -> None:
    """Table rows (up to the cap) and gallery items (up to the cap per reason) from a batch's bad/warn rows."""
    room = caps.table - len(data.problems)
    full = {key for key, g in galleries.items() if len(g.items) >= caps.per_reason}
    if room <= 0:
        # Only rows whose reason gallery still has room are needed now.
        keys = pc.binary_join_element_wise(problems["status"], pc.fill_null(problems["reason"], "?"), "\x00")
        problems = problems.filter(pc.invert(pc.is_in(keys, pa.array([f"{s}\x00{r}" for s, r in full], pa.string()))))
    cols = [c for c in CARD_COLUMNS if c in problems.column_names]
    for i, row in enumerate(problems.select(cols).to_pylist()):
        if i < room:
            data.problems.append(_table_row(row, clean, caps))
        key = (row["status"], row["reason"] or "?")
        g = galleries.get(key)
        if g is None:
            g = galleries[key] = Gallery(
                anchor=f"{row['status']}-{key[1]}",
                title=key[1],
                total=0,
                status=row["status"],
                reason=key[1],
                blurb=R.REASONS.get(key[1], ""),
            )
        if len(g.items) < caps.per_reason:
            g.items.append(item_from_row(row, clean.scrub))


def _table_row(row: dict, clean: _Cleaner, caps: Caps) -> list:
    """One row of the problems table, in :data:`TABLE_COLUMNS` order."""
    import os

    w, h, duration = row.get("width"), row.get("height"), row.get("duration")
    if w and h:
        dims = f"{w}×{h}"
    elif duration is not None and not math.isnan(duration):
        dims = f"{duration:.2f} s"
    else:
        dims = ""
    detail = clean(row.get("detail"))
    if len(detail) > caps.detail_chars:
        detail = detail[: caps.detail_chars] + "…"
    return [
        display(os.fsdecode(row["path"])),
        row["status"],
        row["reason"] or "",
        row.get("kind") or "",
        row.get("format") or "",
        row.get("size"),
        dims,
        detail,
    ]


def _classes(t: pa.Table, status: pa.ChunkedArray, classes: Counter) -> None:
    """ImageFolder classes: the first folder under the root (None for files directly in it)."""
    parts = pc.split_pattern(t["path"], b"/", max_splits=1)
    has_class = pc.greater(pc.list_value_length(parts), 1)
    names = pc.if_else(has_class, pc.list_element(parts, 0), pa.scalar(None, pa.binary()))
    grouped = (
        pa.table({"c": names, "bad": pc.equal(status, R.BAD)}).group_by(["c", "bad"]).aggregate([("bad", "count")])
    )
    for row in grouped.to_pylist():
        classes[(row["c"], row["bad"])] += row["bad_count"]


def _finish_classes(data: ReportData, classes: Counter, caps: Caps) -> None:
    import os

    per: dict[bytes | None, list[int]] = {}
    for (name, bad), n in classes.items():
        per.setdefault(name, [0, 0])[1 if bad else 0] += n
    data.unlabelled = sum(per.pop(None, [0, 0]))
    ranked = sorted(per.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))
    data.classes_total = len(ranked)
    data.classes = [(display(os.fsdecode(name)), kept, bad) for name, (kept, bad) in ranked[: caps.classes]]


def _valid(t: pa.Table, column: str, kind: str | None = None) -> np.ndarray:
    col = t[column]
    mask = pc.is_valid(col)
    if kind is not None:
        mask = pc.and_(mask, pc.equal(t["kind"], kind))
    return col.filter(mask).to_numpy().astype(np.float64)


def _log_hist(values: np.ndarray, edges: list[float]) -> np.ndarray:
    """Counts per bin; values beyond the ends go into the first / last bin."""
    values = values[np.isfinite(values) & (values > 0)]
    clipped = np.clip(values, edges[0], np.nextafter(edges[-1], 0))
    return np.histogram(clipped, bins=edges)[0]


def _sizes(t: pa.Table, sizes: dict[str, np.ndarray]) -> None:
    for kind in pc.unique(t["kind"]).to_pylist():
        counts = _log_hist(_valid(t, "size", kind), SIZE_EDGES)
        sizes[kind] = sizes.get(kind, 0) + counts


def _resolution(t: pa.Table, res: np.ndarray) -> None:
    mask = pc.and_(pc.is_valid(t["width"]), pc.is_valid(t["height"]))
    w = t["width"].filter(mask).to_numpy().astype(np.float64)
    h = t["height"].filter(mask).to_numpy().astype(np.float64)
    keep = (w > 0) & (h > 0)
    lo, hi = SIDE_EDGES[0], np.nextafter(SIDE_EDGES[-1], 0)
    res += np.histogram2d(np.clip(h[keep], lo, hi), np.clip(w[keep], lo, hi), bins=[SIDE_EDGES, SIDE_EDGES])[0].astype(
        np.int64
    )


def _durations(t: pa.Table, durations: np.ndarray, rates: Counter, channels: Counter) -> None:
    audio = t.filter(pc.and_(pc.equal(t["kind"], "audio"), pc.is_valid(t["duration"])))
    if not audio.num_rows:
        return
    durations += _log_hist(audio["duration"].to_numpy(zero_copy_only=False).astype(np.float64), DURATION_EDGES)
    for name, counter in (("sample_rate", rates), ("channels", channels)):
        if name in audio.column_names:
            for row in pc.value_counts(audio[name].drop_null()).to_pylist():
                counter[row["values"]] += row["counts"]


class _TopK:
    """The k most extreme rows of one column, over all batches."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.heap: list[tuple[float, int, dict]] = []  # min-heap on score: the weakest candidate on top
        self.seq = 0

    def add(self, t: pa.Table, o: Outlier, rows_mask: pa.ChunkedArray) -> None:
        """Consider the rows of ``t`` where ``rows_mask`` holds (only the k best are ever turned into dicts)."""
        col = t[o.column]
        idx = np.flatnonzero(pc.and_(rows_mask, pc.is_valid(col)).to_numpy())
        if not len(idx):
            return
        values = col.take(pa.array(idx)).to_numpy().astype(np.float64)
        score = {"low": -values, "high": values, "abs": np.abs(values)}[o.order]
        score = np.where(np.isfinite(score), score, -np.inf)
        n = min(self.k, len(score))
        best = np.argpartition(-score, n - 1)[:n]
        cols = [c for c in CARD_COLUMNS if c in t.column_names]
        rows = t.select(cols).take(pa.array(idx[best])).to_pylist()
        for i, row in zip(best, rows):
            if not np.isfinite(score[i]):
                continue
            entry = (float(score[i]), -self.seq, {**row, "_value": float(values[i])})
            self.seq += 1
            if len(self.heap) < self.k:
                heapq.heappush(self.heap, entry)
            elif entry[:2] > self.heap[0][:2]:
                heapq.heapreplace(self.heap, entry)

    def gallery(self, o: Outlier, scrub: Scrubber) -> Gallery:
        items = []
        for _, _, row in sorted(self.heap, key=lambda e: e[:2], reverse=True):
            item = item_from_row(row, scrub)
            item.note = f"{o.column} {row['_value']:.3g}"
            items.append(item)
        anchor = f"outlier-{o.column}-{o.order}"
        return Gallery(anchor=anchor, title=o.title, total=len(items), items=items, blurb=o.blurb)


def _flags(t: pa.Table, kept: pa.ChunkedArray, flags: dict[str, Gallery], caps: Caps, scrub: Scrubber) -> None:
    rows = np.flatnonzero(kept.to_numpy())
    col = t["flags"].take(pa.array(rows))
    flat = pc.list_flatten(col)
    if not len(flat):
        return
    parents = pa.array(rows[pc.list_parent_indices(col).to_numpy()])  # back to rows of t
    cols = [c for c in CARD_COLUMNS if c in t.column_names]
    for row in pc.value_counts(flat).to_pylist():
        flag, n = row["values"], row["counts"]
        if flag is None:
            continue
        g = flags.get(flag)
        if g is None:
            g = flags[flag] = Gallery(
                anchor=f"flag-{display(flag)}", title=display(flag), total=0, reason=display(flag)
            )
        g.total += n
        room = caps.per_flag - len(g.items)
        if room > 0:
            idx = parents.filter(pc.equal(flat, flag)).to_numpy()[:room]
            for r in t.select(cols).take(pa.array(idx)).to_pylist():
                item = item_from_row(r, scrub)
                item.note = f"flag {display(flag)}"
                g.items.append(item)


def _fact_counts(t: pa.Table, kept: pa.ChunkedArray, counts: Counter) -> None:
    """Counts of yes/no facts over the files that stay."""
    tests = {
        "grayscale": ("grayscale images (colour stored, all channels equal)", lambda c: c),
        "orientation": ("images with an EXIF rotation (orientation 2..8)", lambda c: pc.greater(c, 1)),
        "silent_channels": ("audio files with a silent channel", lambda c: pc.not_equal(c, 0)),
    }
    for column, (label, test) in tests.items():
        if column in t.column_names:
            hits = pc.and_(kept, pc.fill_null(test(t[column]), False))
            counts[label] += int(pc.sum(hits.cast(pa.int64())).as_py() or 0)
