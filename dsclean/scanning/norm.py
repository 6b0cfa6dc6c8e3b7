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

from .. import reasons as R
from ..atomic import publish, temp_next_to
from . import parquetio
from .schema import CastOptions, MatchSubstringOptions, SetLookupOptions, SplitPatternOptions, call_function
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


def _k(name: str, *args, options=None):
    """An Arrow compute kernel called by name: the pass never imports ``pyarrow.compute`` (nor Acero), ~0.1 s of a
    first scan's start-up, nor calls the array methods that import it (``filter``, ``take``, ``group_by``)."""
    return call_function(name, list(args), options)


def _is_in(values, members) -> pa.Array:
    return _k("is_in", values, options=SetLookupOptions(pa.array(members)))


def _mask(m: pa.Array) -> np.ndarray:
    """A boolean array as a numpy mask, null as False."""
    return np.asarray(_k("coalesce", m, pa.scalar(False)).to_numpy(zero_copy_only=False), dtype=bool)


def _valid(values: pa.Array, rows: pa.Array) -> pa.Array:
    """The non-null ``values`` of the selected ``rows``."""
    return _k("filter", values, _k("and", rows, _k("is_valid", values)))


def _pair_counts(group: pa.Array, values: pa.Array):
    """(group, value) -> number of rows, for arrays without nulls: a group-by count in numpy over the two
    columns' dictionary codes (the same pairs and counts as Arrow's ``group_by(...).aggregate(count_all)``)."""
    if not len(group):
        return
    g, v = _k("dictionary_encode", group), _k("dictionary_encode", values)
    width = len(v.dictionary)
    code = g.indices.to_numpy(zero_copy_only=False).astype(np.int64) * width + v.indices.to_numpy(
        zero_copy_only=False
    ).astype(np.int64)
    seen, counts = np.unique(code, return_counts=True)
    gs, vs = g.dictionary.to_pylist(), v.dictionary.to_pylist()
    for c, n in zip(seen.tolist(), counts.tolist()):
        yield (gs[c // width], vs[c % width]), n


def _groups(path: pa.Array) -> pa.Array:
    parts = _k("split_pattern", path, options=SplitPatternOptions(b"/", max_splits=1))
    return _k(
        "if_else",
        _k("greater", _k("list_value_length", parts), pa.scalar(1)),
        _k("list_element", parts, pa.scalar(0)),
        pa.scalar(b"", pa.binary()),
    )


def _arrow_mask(m: np.ndarray) -> pa.Array:
    """A numpy mask as an Arrow boolean array, built from its bits: ``pa.array`` of an ndarray first tests for a
    masked array, which imports ``numpy.ma`` (~25 ms of CPU in every first scan's process, issue 29)."""
    bits = np.packbits(m, bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(m), [None, pa.py_buffer(bits)])


def _reset_mask(batch: pa.RecordBatch) -> np.ndarray:
    """Rows warned by an earlier inferred-norm pass."""
    m = _k(
        "and",
        _is_in(batch.column("reason"), NORM_REASONS),
        _k("starts_with", _k("coalesce", batch.column("detail"), pa.scalar("")), options=MatchSubstringOptions(PREFIX)),
    )
    return _mask(m)


def _judged(batch: pa.RecordBatch, reset: np.ndarray) -> np.ndarray:
    """Rows that count for the norm: not bad."""
    return (
        np.asarray(_k("not_equal", batch.column("status"), pa.scalar(R.BAD)).to_numpy(zero_copy_only=False), dtype=bool)
    ) | reset


def _as_key(group: pa.Array, values: pa.Array) -> pa.Array:
    text = _k("cast", _k("cast", values, options=CastOptions.safe(pa.string())), options=CastOptions.safe(pa.binary()))
    return _k("binary_join_element_wise", group, text, pa.scalar(b"\0"))


class _Counts:
    """Counts per (attribute, group, value) and the duration histograms per group: the first pass."""

    def __init__(self) -> None:
        self.c: dict[str, Counter] = defaultdict(Counter)
        self.hist: dict[bytes, np.ndarray] = {}
        self.dist: dict[str, Counter] = defaultdict(Counter)

    def add(self, batch: pa.RecordBatch) -> None:
        reset = _reset_mask(batch)
        keep = _arrow_mask(_judged(batch, reset))
        b = _k("filter", batch, keep)
        if not b.num_rows:
            return
        group = _groups(b.column("path"))
        kind = b.column("kind")
        images = _k("equal", kind, pa.scalar("image"))
        audio = _k("equal", kind, pa.scalar("audio"))
        mode = b.column("mode")
        cols = {
            "mode": mode,
            "alpha": _is_in(mode, _ALPHA),
            "grey": _is_in(mode, _GREY),
            "sample_rate": b.column("sample_rate"),
            "channels": b.column("channels"),
        }
        for name, values in cols.items():
            sel = images if name in ("mode", "alpha", "grey") else audio
            sel = _k("and", sel, _k("is_valid", values))
            for key, n in _pair_counts(_k("filter", group, sel), _k("filter", values, sel)):
                self.c[name][key] += n
        # distributions (whole set): modes, sides, aspects, rates, channels, durations
        self._tally("mode", _k("filter", mode, _k("and", images, _k("is_valid", mode))))
        self._tally("sample_rate", _valid(b.column("sample_rate"), audio))
        self._tally("channels", _valid(b.column("channels"), audio))
        w = _k("filter", b.column("width"), images).to_numpy(zero_copy_only=False).astype(float)
        h = _k("filter", b.column("height"), images).to_numpy(zero_copy_only=False).astype(float)
        ok = np.isfinite(w) & np.isfinite(h) & (w > 0) & (h > 0)
        w, h = w[ok], h[ok]
        short, long = np.minimum(w, h), np.maximum(w, h)
        self._buckets("shorter_side", short, SIDE_EDGES, "px")
        self._buckets("aspect_ratio", long / np.maximum(short, 1), ASPECT_EDGES, "")
        d_arr = _k("filter", b.column("duration"), audio)
        d = d_arr.to_numpy(zero_copy_only=False).astype(float)
        valid = np.isfinite(d) & (d > 0)
        self._buckets("duration", d[valid], DURATION_EDGES, "s")
        g_audio = _k("filter", group, audio).to_numpy(zero_copy_only=False)[valid]
        bins = _bins(d[valid])
        if len(bins):
            codes, inverse = np.unique(g_audio.astype(object), return_inverse=True)
            for k, g in enumerate(codes):
                hist = self.hist.setdefault(g, np.zeros(_NBINS, np.int64))
                hist += np.bincount(bins[inverse == k], minlength=_NBINS)

    def _tally(self, name: str, values: pa.Array) -> None:
        if len(values):
            for row in _k("value_counts", values).to_pylist():
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
    pf = parquetio.File(results_path)  # not pyarrow.parquet: a first scan's start-up (see .parquetio)
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
        writer = parquetio.Writer(tmp, pf.schema_arrow, compression="zstd")
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
            col = _is_in(col, _ALPHA)
        elif rule.column == "grey":
            col = _is_in(col, _GREY)
        kind = "image" if rule.column in ("mode", "alpha", "grey") else "audio"
        key_set = pa.array(
            [g + b"\0" + str(v if not isinstance(v, bool) else str(v).lower()).encode() for g, v in rule.keys],
            pa.binary(),
        )
        keys = _as_key(group, col)
        hit = _k(
            "and",
            _k("is_in", keys, options=SetLookupOptions(key_set)),
            _k("equal", batch.column("kind"), pa.scalar(kind)),
        )
        hit = _mask(hit) & free & (chosen < 0)
        chosen[hit] = k
        values[k] = col
    short_hit = np.zeros(len(status), bool)
    if shorts:
        d = batch.column("duration").to_numpy(zero_copy_only=False).astype(float)
        limit = np.zeros(len(d))
        audio_rows = np.flatnonzero(free & (kinds == "audio"))
        if len(audio_rows):
            g_np = _k("take", group, pa.array(audio_rows, pa.int64())).to_pylist()
            limit[audio_rows] = [shorts.get(g, 0.0) for g in g_np]
        short_hit = free & (chosen < 0) & np.isfinite(d) & (d < limit) & (kinds == "audio")
    rows = np.flatnonzero((chosen >= 0) | short_hit)
    if not len(rows):
        if not reset.any():
            return batch
    g_py = _k("take", group, pa.array(rows, pa.int64())).to_pylist() if len(rows) else []
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
        for row in _k("take", new, pa.array(rows, pa.int64())).to_pylist():
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
