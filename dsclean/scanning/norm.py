"""The set's norm, inferred from the scan's own facts, and the files outside it (issue 27, section 4).

A pass after every check, over the results table a record batch at a time: the first pass counts, per class
folder (the first path component; files at the top form the root's group), the images' modes, alpha and grey
modes, the sounds' sample rates and channel counts, and a histogram of durations; the second flags every file
whose value is a minority (under ``minority`` of its group, e.g. 1%: 1 of 150 is flagged, 50 of 150 is not) as a
``warn`` (``alpha``, ``grayscale``, ``mode_mismatch``, ``sample_rate_mismatch``, ``channel_mismatch``; a clip
under a tenth of its group's median duration: ``too_short``). Memory: counts per (group, value), never a Python
object per file kept. Only ``ok`` files get a warning; a file warned for another reason keeps it. Their detail
starts with :data:`PREFIX`, so a later pass (a re-scan reusing these rows) takes them back before judging again.

The same first pass gives the distributions the summary, ``status`` and the report show (:func:`distributions`).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import reasons as R
from ..atomic import publish, temp_next_to
from .verdict import Verdict, decode_path

log = logging.getLogger("dsclean.scanning.norm")

#: how the detail of an inferred-norm warning starts
PREFIX = "inferred norm: "
#: default share of a group under which a value is a minority (``scan --minority``)
DEFAULT_MINORITY = 0.01
#: a clip under this share of its group's median duration is too_short
SHORT_SHARE = 0.1
#: reasons this pass gives
NORM_REASONS = (R.ALPHA, R.GRAYSCALE, R.MODE_MISMATCH, R.SAMPLE_RATE_MISMATCH, R.CHANNEL_MISMATCH, R.TOO_SHORT)
_COLUMNS = [
    "path",
    "kind",
    "status",
    "reason",
    "detail",
    "mode",
    "width",
    "height",
    "sample_rate",
    "channels",
    "duration",
]
_ALPHA = ["RGBA", "LA", "PA", "RGBa", "La"]
_GREY = ["1", "L", "LA", "La", "I;16", "I;16L", "I;16B", "I;16N", "I;16S", "I", "F"]
#: duration histogram: 8 bins an octave from 2**-16 s
_BINS_PER_OCTAVE, _LOW, _NBINS = 8, -16 * 8, 48 * 8
#: bucket edges of the distributions
SIDE_EDGES = (32, 64, 128, 224, 256, 512, 1024, 2048, 4096)
ASPECT_EDGES = (1.0, 1.25, 1.5, 2.0, 3.0, 4.0)
DURATION_EDGES = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass
class NormResult:
    """What the pass found: the distributions, the norm per group and how the counts changed."""

    flagged: dict[str, int] = field(default_factory=dict)  # reason -> files warned by this pass
    reset: int = 0  # warnings of an earlier pass taken back (a re-scan reusing rows)
    reset_reasons: dict[str, int] = field(default_factory=dict)  # reason -> warnings taken back
    count_changes: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> status -> +/- n
    distributions: dict = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)  # reason -> first paths


def _groups(path: pa.Array) -> pa.Array:
    parts = pc.split_pattern(path, b"/", max_splits=1)
    return pc.if_else(
        pc.greater(pc.list_value_length(parts), 1), pc.list_element(parts, 0), pa.scalar(b"", pa.binary())
    )


def _reset_mask(batch: pa.RecordBatch) -> np.ndarray:
    """Rows warned by an earlier inferred-norm pass."""
    m = pc.and_(
        pc.is_in(batch.column("reason"), value_set=pa.array(NORM_REASONS)),
        pc.starts_with(pc.fill_null(batch.column("detail"), ""), PREFIX),
    )
    return np.asarray(pc.fill_null(m, False).to_numpy(zero_copy_only=False), dtype=bool)


def _judged(batch: pa.RecordBatch, reset: np.ndarray) -> np.ndarray:
    """Rows that count for the norm: not bad."""
    return (np.asarray(pc.not_equal(batch.column("status"), R.BAD).to_numpy(zero_copy_only=False), dtype=bool)) | reset


def _as_key(group: pa.Array, values: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise(group, pc.cast(pc.cast(values, pa.string()), pa.binary()), pa.scalar(b"\0"))


class _Counts:
    """Counts per (attribute, group, value) and the duration histograms per group: the first pass."""

    def __init__(self) -> None:
        self.c: dict[str, Counter] = defaultdict(Counter)
        self.hist: dict[bytes, np.ndarray] = {}
        self.dist: dict[str, Counter] = defaultdict(Counter)

    def add(self, batch: pa.RecordBatch) -> None:
        reset = _reset_mask(batch)
        keep = pa.array(_judged(batch, reset))
        b = batch.filter(keep)
        if not b.num_rows:
            return
        group = _groups(b.column("path"))
        kind = b.column("kind")
        images = pc.equal(kind, "image")
        audio = pc.equal(kind, "audio")
        mode = b.column("mode")
        cols = {
            "mode": mode,
            "alpha": pc.is_in(mode, value_set=pa.array(_ALPHA)),
            "grey": pc.is_in(mode, value_set=pa.array(_GREY)),
            "sample_rate": b.column("sample_rate"),
            "channels": b.column("channels"),
        }
        for name, values in cols.items():
            sel = images if name in ("mode", "alpha", "grey") else audio
            sel = pc.and_(sel, pc.is_valid(values))
            t = pa.table({"g": group, "v": values}).filter(sel)
            if not t.num_rows:
                continue
            for row in t.group_by(["g", "v"]).aggregate([([], "count_all")]).to_pylist():
                self.c[name][(row["g"], row["v"])] += row["count_all"]
        # distributions (whole set): modes, sides, aspects, rates, channels, durations
        self._tally("mode", mode.filter(pc.and_(images, pc.is_valid(mode))))
        self._tally("sample_rate", b.column("sample_rate").filter(pc.and_(audio, pc.is_valid(b.column("sample_rate")))))
        self._tally("channels", b.column("channels").filter(pc.and_(audio, pc.is_valid(b.column("channels")))))
        w = b.column("width").filter(images).to_numpy(zero_copy_only=False).astype(float)
        h = b.column("height").filter(images).to_numpy(zero_copy_only=False).astype(float)
        ok = np.isfinite(w) & np.isfinite(h) & (w > 0) & (h > 0)
        w, h = w[ok], h[ok]
        short, long = np.minimum(w, h), np.maximum(w, h)
        self._buckets("shorter_side", short, SIDE_EDGES, "px")
        self._buckets("aspect_ratio", long / np.maximum(short, 1), ASPECT_EDGES, "")
        d_arr = b.column("duration").filter(audio)
        d = d_arr.to_numpy(zero_copy_only=False).astype(float)
        valid = np.isfinite(d) & (d > 0)
        self._buckets("duration", d[valid], DURATION_EDGES, "s")
        g_audio = group.filter(audio).to_numpy(zero_copy_only=False)[valid]
        bins = _bins(d[valid])
        if len(bins):
            codes, inverse = np.unique(g_audio.astype(object), return_inverse=True)
            for k, g in enumerate(codes):
                hist = self.hist.setdefault(g, np.zeros(_NBINS, np.int64))
                hist += np.bincount(bins[inverse == k], minlength=_NBINS)

    def _tally(self, name: str, values: pa.Array) -> None:
        if len(values):
            for row in pc.value_counts(values).to_pylist():
                self.dist[name][str(row["values"])] += row["counts"]

    def _buckets(self, name: str, values: np.ndarray, edges: tuple, unit: str) -> None:
        if not len(values):
            return
        at = np.searchsorted(np.asarray(edges, float), values, side="right")
        labels = (
            [f"< {edges[0]:g}{unit}"]
            + [f"{a:g}-{b:g}{unit}" for a, b in itertools.pairwise(edges)]
            + [f">= {edges[-1]:g}{unit}"]
        )
        for i, n in enumerate(np.bincount(at, minlength=len(edges) + 1)):
            if n:
                self.dist[name][labels[i]] += int(n)


def _bins(d: np.ndarray) -> np.ndarray:
    return np.clip(np.floor(np.log2(np.maximum(d, 1e-12)) * _BINS_PER_OCTAVE).astype(np.int64) - _LOW, 0, _NBINS - 1)


def _median_floor(hist: np.ndarray) -> float:
    """The lower edge of the histogram bin holding the median (a conservative median)."""
    cum = np.cumsum(hist)
    k = int(np.searchsorted(cum, (cum[-1] + 1) // 2))
    return float(2.0 ** ((k + _LOW) / _BINS_PER_OCTAVE))


@dataclass
class _Rule:
    reason: str
    column: str  # the counted attribute
    keys: set  # (group, value) pairs that are a minority
    norm: dict  # group -> (majority value, its share)


def _rules(counts: _Counts, minority: float) -> list[_Rule]:
    """The minority (group, value) pairs of each attribute, in the order a row's reason is chosen."""
    rules = []
    for reason, name, flag_value in (
        (R.ALPHA, "alpha", True),
        (R.GRAYSCALE, "grey", True),
        (R.MODE_MISMATCH, "mode", None),
        (R.SAMPLE_RATE_MISMATCH, "sample_rate", None),
        (R.CHANNEL_MISMATCH, "channels", None),
    ):
        by_group: dict = defaultdict(dict)
        for (g, v), n in counts.c[name].items():
            by_group[g][v] = n
        keys, norm = set(), {}
        for g, values in by_group.items():
            total = sum(values.values())
            major, n_major = max(values.items(), key=lambda kv: (kv[1], str(kv[0])))
            norm[g] = (major, n_major / total)
            for v, n in values.items():
                if v == major or n / total >= minority:
                    continue
                if flag_value is not None and v != flag_value:
                    continue
                if name == "mode" and v == "CMYK":
                    continue  # a CMYK JPEG is warned about per file (cmyk, ycck)
                keys.add((g, v))
        rules.append(_Rule(reason, name, keys, norm))
    return rules


def _describe(rule: _Rule, group: bytes, value, minority: float) -> str:
    where = f"folder {decode_path(group)!r}" if group else "the root's files"
    major, share = rule.norm[group]
    what = {R.ALPHA: ("with alpha", "opaque"), R.GRAYSCALE: ("greyscale", "colour")}.get(rule.reason)
    if what:
        return (
            f"{PREFIX}{rule.reason}: mode {{mode}} is {what[0]} in {where}, {share:.1%} of which is {what[1]} "
            f"(under {minority:g} of the group: a minority)"
        )
    return (
        f"{PREFIX}{rule.reason}: {rule.column.replace('_', ' ')} {value} in {where}, whose norm is {major} "
        f"({share:.1%}; this value is under {minority:g} of the group)"
    )


def apply_norm(
    results_path: str, problems_path: str, minority: float = DEFAULT_MINORITY, batch_rows: int = 65_536
) -> NormResult:
    """Infer the set's norm from ``results_path`` and rewrite it (and ``problems_path``) with the minority warned.

    ``minority`` 0: nothing is flagged (earlier inferred warnings are still taken back); the distributions
    are computed either way. The files are replaced only when a row changes (temp file, then rename)."""
    out = NormResult()
    pf = pq.ParquetFile(results_path)
    counts = _Counts()
    any_reset = False
    for batch in pf.iter_batches(batch_size=batch_rows, columns=_COLUMNS):
        counts.add(batch)
        any_reset = any_reset or bool(_reset_mask(batch).any())
    out.distributions = {k: dict(v.most_common()) for k, v in counts.dist.items()}
    rules = _rules(counts, minority) if minority > 0 else []
    shorts = (
        {g: _median_floor(h) * SHORT_SHARE for g, h in counts.hist.items() if h.sum() >= 10} if minority > 0 else {}
    )
    if not any_reset and not any(r.keys for r in rules) and not shorts:
        return out
    tmp = temp_next_to(results_path)
    changed_lines: list[dict] = []
    try:
        writer = pq.ParquetWriter(tmp, pf.schema_arrow, compression="zstd")
        with writer:
            for batch in pf.iter_batches(batch_size=batch_rows):
                batch = _flag_batch(batch, rules, shorts, minority, out, changed_lines)
                writer.write_batch(batch)
        if not out.flagged and not out.reset:
            os.unlink(tmp)
            return out
        _rewrite_problems(problems_path, changed_lines)
        publish(tmp, results_path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return out


def _flag_batch(
    batch: pa.RecordBatch, rules: list[_Rule], shorts: dict, minority: float, out: NormResult, lines: list[dict]
) -> pa.RecordBatch:
    names = batch.schema.names
    status = batch.column("status").to_numpy(zero_copy_only=False).astype(object)
    reason = batch.column("reason").to_numpy(zero_copy_only=False).astype(object)
    detail = batch.column("detail").to_numpy(zero_copy_only=False).astype(object)
    kinds = batch.column("kind").to_numpy(zero_copy_only=False).astype(object)
    reset = _reset_mask(batch)
    for i in np.flatnonzero(reset):
        _count(out, kinds[i], status[i], -1)
        out.reset_reasons[reason[i]] = out.reset_reasons.get(reason[i], 0) + 1
        status[i], reason[i], detail[i] = R.OK, None, ""
        _count(out, kinds[i], R.OK, +1)
        out.reset += 1
    free = status == R.OK
    group = _groups(batch.column("path"))
    chosen = np.full(len(status), -1, np.int64)
    values = {}
    for k, rule in enumerate(rules):
        if not rule.keys:
            continue
        col = batch.column("mode") if rule.column in ("mode", "alpha", "grey") else batch.column(rule.column)
        if rule.column == "alpha":
            col = pc.is_in(col, value_set=pa.array(_ALPHA))
        elif rule.column == "grey":
            col = pc.is_in(col, value_set=pa.array(_GREY))
        kind = "image" if rule.column in ("mode", "alpha", "grey") else "audio"
        key_set = pa.array(
            [g + b"\0" + str(v if not isinstance(v, bool) else str(v).lower()).encode() for g, v in rule.keys],
            pa.binary(),
        )
        keys = _as_key(group, col)
        hit = pc.and_(pc.is_in(keys, value_set=key_set), pc.equal(batch.column("kind"), kind))
        hit = np.asarray(pc.fill_null(hit, False).to_numpy(zero_copy_only=False), dtype=bool) & free & (chosen < 0)
        chosen[hit] = k
        values[k] = col
    short_hit = np.zeros(len(status), bool)
    if shorts:
        d = batch.column("duration").to_numpy(zero_copy_only=False).astype(float)
        limit = np.zeros(len(d))
        audio_rows = np.flatnonzero(free & (kinds == "audio"))
        if len(audio_rows):
            g_np = group.take(pa.array(audio_rows, pa.int64())).to_pylist()
            limit[audio_rows] = [shorts.get(g, 0.0) for g in g_np]
        short_hit = free & (chosen < 0) & np.isfinite(d) & (d < limit) & (kinds == "audio")
    rows = np.flatnonzero((chosen >= 0) | short_hit)
    if not len(rows):
        if not reset.any():
            return batch
    g_py = group.take(pa.array(rows, pa.int64())).to_pylist() if len(rows) else []
    mode = batch.column("mode")
    for j, i in enumerate(rows):
        g = g_py[j]
        if chosen[i] >= 0:
            rule = rules[chosen[i]]
            v = values[chosen[i]][int(i)].as_py()
            text = _describe(rule, g, v, minority).replace("{mode}", str(mode[int(i)].as_py()))
        else:
            rule = None
            text = (
                f"{PREFIX}{R.TOO_SHORT}: {batch.column('duration')[int(i)].as_py():.3f} s, under "
                f"{SHORT_SHARE:g} of the median duration of {('folder ' + repr(decode_path(g))) if g else 'the root'}"
                f" (about {shorts[g] / SHORT_SHARE:.3g} s)"
            )
        code = rule.reason if rule else R.TOO_SHORT
        _count(out, kinds[i], R.OK, -1)
        _count(out, kinds[i], R.WARN, +1)
        status[i], reason[i], detail[i] = R.WARN, code, text
        out.flagged[code] = out.flagged.get(code, 0) + 1
        ex = out.examples.setdefault(code, [])
        if len(ex) < 20:
            ex.append(decode_path(batch.column("path")[int(i)].as_py()))
    arrays = list(batch.columns)
    for name, col in (("status", status), ("reason", reason), ("detail", detail)):
        arrays[names.index(name)] = pa.array(list(col), batch.schema.field(name).type)
    new = pa.RecordBatch.from_arrays(arrays, schema=batch.schema)
    if len(rows):
        for row in new.take(pa.array(rows, pa.int64())).to_pylist():
            row["path"] = decode_path(row["path"])
            lines.append(Verdict(**row).to_json())
    return new


def _count(out: NormResult, kind: str, status: str, n: int) -> None:
    by = out.count_changes.setdefault(kind, {})
    by[status] = by.get(status, 0) + n


def _rewrite_problems(path: str, new_lines: list[dict]) -> None:
    """The problems file without an earlier pass's inferred warnings, plus this pass's."""
    kept = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                rec = json.loads(line)
                if rec.get("reason") in NORM_REASONS and str(rec.get("detail", "")).startswith(PREFIX):
                    continue
                kept.append(line if line.endswith("\n") else line + "\n")
    tmp = temp_next_to(path)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(kept)
            for rec in new_lines:
                f.write(json.dumps(rec) + "\n")
        publish(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def format_distributions(dist: dict, flagged: dict[str, int] | None = None, width: int = 30) -> list[str]:
    """The distributions as small text tables with bars (the scan summary and ``status``)."""
    lines = []
    for name in ("mode", "shorter_side", "aspect_ratio", "sample_rate", "channels", "duration"):
        values = dist.get(name)
        if not values:
            continue
        total = sum(values.values())
        lines.append(f"  {name.replace('_', ' ')}:")
        for value, n in list(values.items())[:12]:
            bar = "#" * max(1, round(width * n / total)) if n else ""
            lines.append(f"    {value:>14}  {n:>10}  {n / total:6.1%}  {bar}")
    if flagged:
        lines.append("  outside the set's norm (warn): " + ", ".join(f"{r} {n}" for r, n in sorted(flagged.items())))
    return lines
