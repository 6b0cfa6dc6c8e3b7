"""Thumbnails of the files a report shows, made in isolated worker processes.

The files a report shows are mostly the broken ones, so every thumbnail is
made the way the scan checks a file: in a loky worker process, under a time
limit (SIGALRM kills the worker), a memory ceiling (RLIMIT_AS) and a pixel
limit (Pillow's decompression-bomb guard), all from
:mod:`dsclean.scanning.worker`. When a worker dies, the files in flight are
re-done one at a time; the one that kills it again gets a placeholder. The
report process itself never decodes a file.

What comes back is always re-encoded (a small JPEG, or a PNG waveform), never
the file's own bytes:

- images: what still decodes (Pillow with ``LOAD_TRUNCATED_IMAGES``); for a
  bad image whose lower part did not decode, the missing part is hatched in red
  and a red line marks the cut;
- audio: a waveform (min/max per column); for a WAV or FLAC that promises
  more frames than it holds, the missing tail is hatched and the cut marked.
"""

from __future__ import annotations

import base64
import io
import os
import signal
import struct
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import BinaryIO, Callable, NamedTuple

from .. import reasons as R
from .model import Item, Thumb

#: reasons whose files are not decoded again: nothing would come out, or decoding is what went wrong
NOT_DECODED = {
    R.EMPTY: "empty: nothing to show",
    R.NOT_MEDIA: "not media: nothing to show",
    R.UNREADABLE: "the file could not be read",
    R.VANISHED: "the file disappeared during the scan",
    R.DECOMPRESSION_BOMB: "not decoded: it declares more pixels than the limit",
    R.DECODER_CRASH: "not decoded again: checking it crashed the decoder",
    R.TIMEOUT: "not decoded again: checking it took too long",
    R.TOO_LARGE: "not decoded again: checking it needed too much memory",
}
CHUNK = 32  # files per worker task
CHUNK_BYTES = 64 << 20  # fetched bytes per worker task (objects read from a store); one object may be alone past it
FETCH_BUDGET = 256 << 20  # fetched bytes in flight at once, all tasks together (about)
FETCH_THREADS = 8  # objects read at once while a task's bytes are gathered
CUT_RED = (220, 30, 40)


@dataclass(frozen=True)
class ThumbLimits:
    """Limits of one thumbnail's making (picklable: travels to the workers)."""

    size: int = 128  # longest side in pixels
    wave_width: int = 192
    wave_height: int = 56
    timeout: float = 20.0  # seconds per file; the worker is killed past it
    max_memory: int = 1 << 30  # bytes of address space one thumbnail may add
    max_pixels: int = 89_478_485  # Pillow's default; the scan's --max-pixels when it recorded one
    quality: int = 70  # JPEG quality
    max_bytes: int = 32 << 20  # an object (a bucket's) larger than this is not read for its thumbnail


# ---- in the worker -------------------------------------------------------------------------------

#: one job: (source: a path, or an object's URL when a fetch reads it; kind; whether to look for a cut)
Job = tuple[str, str, bool]
#: what a worker gets: a job and the bytes fetched for it (None: the worker reads the path itself)
Task = tuple[str, str, bool, "bytes | None"]
#: reads an object's bytes in the report process (``source``, its size by the scan) -> (bytes, note), or
#: (None, why there is no picture); the bytes go to the isolated worker, which decodes them (:func:`render`)
Fetch = Callable[[str, "int | None"], "tuple[bytes | None, str]"]


class Result(NamedTuple):
    """A worker's answer for one file."""

    mime: str | None  # None: no picture; the note says why
    data: bytes = b""  # the re-encoded thumbnail
    note: str = ""
    width: int = 0
    height: int = 0
    cut: bool = False  # the picture marks where decoding stops


def render_chunk(jobs: list[Task], limits: ThumbLimits) -> list[Result]:
    """Worker task: one result per job, each under the time limit, all under the memory ceiling."""
    from ..scanning.worker import FAULT_ENV, inject_fault, set_memory_ceiling, time_limit

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    _load_decoders()  # before the ceiling: importing under a tight ceiling could fail
    set_memory_ceiling(limits.max_memory)
    faults = os.environ.get(FAULT_ENV) == "1"  # dsclean's own tests only: real crashes and hangs
    out = []
    for path, kind, find_cut, data in jobs:
        with time_limit(limits.timeout):
            source = path if data is None else data
            out.append(render(source, kind, find_cut, limits, inject_fault if faults else None, name=path))
    return out


def _load_decoders() -> None:
    import numpy  # noqa: F401
    import soundfile  # noqa: F401
    from PIL import Image, ImageDraw  # noqa: F401

    Image.init()


def render(
    path: str | bytes,
    kind: str,
    find_cut: bool,
    limits: ThumbLimits,
    fault: Callable[[str], None] | None = None,
    name: str = "",
) -> Result:
    """One thumbnail of a file (its path) or of an object's bytes, or a note saying why there is none.
    Never raises for a bad file.

    ``fault``: dsclean's own tests only (a real crash, hang or allocation where a decoder would be), keyed by
    ``name`` (the object's key or URL, for bytes) or the path.
    """
    try:
        if fault is not None:
            fault(name or (path if isinstance(path, str) else ""))
        source: str | BinaryIO = io.BytesIO(path) if isinstance(path, bytes) else path
        if kind == "image":
            return _image(source, find_cut, limits)
        if kind == "audio":
            return _waveform(source, limits)
        return Result(None, note="not an image or audio file")
    except MemoryError:
        return Result(None, note="decoding it needs more memory than the thumbnail limit")
    except Exception as exc:  # a decoder's own error on damaged data: the note says what it was
        return Result(None, note=f"does not decode: {type(exc).__name__}: {exc}"[:300])


def _image(path: str | BinaryIO, find_cut: bool, limits: ThumbLimits) -> Result:
    import numpy as np
    from PIL import Image, ImageFile

    saved = ImageFile.LOAD_TRUNCATED_IMAGES, Image.MAX_IMAGE_PIXELS
    ImageFile.LOAD_TRUNCATED_IMAGES = True  # show what decodes
    Image.MAX_IMAGE_PIXELS = limits.max_pixels
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                fmt = im.format
                im.draft("RGB", (limits.size, limits.size))  # JPEG: let libjpeg decode at 1/2..1/8 scale
                im.load()
                model = _as_the_model_sees(im)
                im = _rgb(im)
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES, Image.MAX_IMAGE_PIXELS = saved
    im.thumbnail((limits.size, limits.size), Image.Resampling.BILINEAR, reducing_gap=2.0)
    note, cut = "", False
    if model is not None:
        model = model.resize(im.size, Image.Resampling.BILINEAR)
    if find_cut:
        pixels = np.asarray(im)
        from_top = fmt == "BMP"  # BMP rows are stored bottom-up: a cut file misses its top
        good = _decoded_rows(pixels[::-1] if from_top else pixels)
        if good == 0:
            return Result(None, note="nothing of the picture decodes")
        if good < im.height:
            _mark_cut(im, good, from_top)
            cut = True
            note = f"decodes {'up' if from_top else 'down'} to the red line; the rest of the file is missing or broken"
        else:
            note = "the picture decodes whole at this size; the damage is elsewhere in the file"
    if model is not None:  # side by side: the picture with its transparency, and what convert("RGB") hands over
        pair = Image.new("RGB", (im.width * 2 + _GAP, im.height), (255, 255, 255))
        pair.paste(im, (0, 0))
        pair.paste(model, (im.width + _GAP, 0))
        im = pair
        note = " ".join(filter(None, [note, ALPHA_NOTE]))
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=limits.quality, optimize=True)
    return Result("image/jpeg", buf.getvalue(), note, im.width, im.height, cut)


_GAP = 4  # pixels between the two pictures of a transparent image
#: the note under a transparent image's thumbnail
ALPHA_NOTE = (
    'left: its transparency, on a checkerboard; right: as a loader\'s convert("RGB") gives it to the '
    "model (the alpha dropped, the colours under it shown)"
)


def _has_transparency(im) -> bool:
    return im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or ("transparency" in im.info and im.mode in ("P", "L", "RGB"))


def _as_the_model_sees(im):
    """``im.convert("RGB")`` (what torchvision's loader and most recipes do) when it differs from the picture
    with its transparency, i.e. when some pixel is not fully opaque; else None."""
    if not _has_transparency(im):
        return None
    alpha = im.convert("RGBA").getchannel("A")
    if alpha.getextrema()[0] == 255:  # an alpha channel that hides nothing: the model sees the picture
        return None
    return im.convert("RGB")


def checkerboard(size: tuple[int, int], cell: int = 8):
    """The light-grey checkerboard transparent pixels are drawn on (as image editors show transparency)."""
    import numpy as np
    from PIL import Image

    w, h = size
    ys, xs = np.indices((h, w))
    board = np.where(((ys // cell) + (xs // cell)) % 2 == 0, 255, 204).astype(np.uint8)
    return Image.fromarray(np.stack([board] * 3 + [np.full_like(board, 255)], axis=-1), "RGBA")


def _rgb(im):
    """Any Pillow mode as RGB: 16-bit and float greys scaled to 8 bits, transparency over a checkerboard."""
    import numpy as np
    from PIL import Image

    if im.mode in ("I", "I;16", "I;16B", "I;16L", "F"):
        a = np.asarray(im, dtype=np.float64)
        lo, hi = np.nanmin(a), np.nanmax(a)
        a = (a - lo) * (255.0 / (hi - lo)) if hi > lo else np.zeros_like(a)
        return Image.fromarray(np.nan_to_num(a).astype(np.uint8), "L").convert("RGB")
    if _has_transparency(im):
        rgba = im.convert("RGBA")
        return Image.alpha_composite(checkerboard(rgba.size), rgba).convert("RGB")
    return im.convert("RGB")


def _decoded_rows(pixels) -> int:
    """Rows from the top before a run of identical, flat rows that reaches the bottom (a decoder's fill)."""
    import numpy as np

    a = pixels.astype(np.int16)
    flat = (a.max(axis=(1, 2)) - a.min(axis=(1, 2))) <= 2
    same = (np.abs(a[:, 0, :] - a[-1, 0, :]) <= 2).all(axis=1)
    fill = flat & same
    k = len(fill)
    while k > 0 and fill[k - 1]:
        k -= 1
    return k


def _mark_cut(im, good: int, from_top: bool) -> None:
    """Hatch the rows that did not decode in red and draw the cut as a red line."""
    from PIL import Image, ImageDraw

    w, h = im.size
    y0, y1 = (0, h - good) if from_top else (good, h)
    overlay = Image.new("RGBA", (w, h), (0, 0, 0, 0))
    d = ImageDraw.Draw(overlay)
    d.rectangle([0, y0, w, y1], fill=(*CUT_RED, 60))
    for x in range(-h, w, 8):
        d.line([(x, y1), (x + (y1 - y0), y0)], fill=(*CUT_RED, 150), width=1)
    cut = y1 if from_top else y0
    d.rectangle([0, max(0, cut - 1), w, min(h, cut + 1)], fill=(*CUT_RED, 255))
    im.paste(Image.alpha_composite(im.convert("RGBA"), overlay).convert("RGB"))


def _claimed_frames(path: str | BinaryIO) -> int | None:
    """Frames a WAV's data chunk or a FLAC's STREAMINFO promise (header bytes only), else None."""
    if isinstance(path, str):
        with open(path, "rb") as f:
            head = f.read(4096)
    else:
        head = path.read(4096)
        path.seek(0)
    if head[:4] == b"fLaC" and len(head) >= 26:
        total = int.from_bytes(head[18:26], "big") & ((1 << 36) - 1)
        return total or None
    if head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE":
        pos, align = 12, None
        while pos + 8 <= len(head):
            cid, size = head[pos : pos + 4], struct.unpack("<I", head[pos + 4 : pos + 8])[0]
            if cid == b"fmt " and pos + 22 <= len(head):
                align = struct.unpack("<H", head[pos + 20 : pos + 22])[0]
            if cid == b"data":
                return size // align if align and size != 0xFFFFFFFF else None
            pos += 8 + size + (size & 1)
    return None


def _waveform(path: str | BinaryIO, limits: ThumbLimits) -> Result:
    """A min/max waveform of the whole file (long files: of evenly spaced windows)."""
    import numpy as np
    import soundfile as sf
    from PIL import Image, ImageDraw

    w, h = limits.wave_width, limits.wave_height
    lo, hi = np.zeros(w), np.zeros(w)
    bad_cols = np.zeros(w, dtype=bool)
    claimed = _claimed_frames(path)
    note, error, cut = "", None, False
    with sf.SoundFile(path) as f:
        total = max(f.frames, claimed or 0)
        if total <= 0:
            return Result(None, note="no audio frames")
        step = max(1, -(-total // w))
        window = min(step, 1 << 14)  # frames read per column: all of them for short files
        decoded = 0
        for col in range(w):
            start = col * step
            if start >= f.frames:
                break
            try:
                if window < step:
                    f.seek(start)
                block = f.read(window, dtype="float32", always_2d=True)
            except (RuntimeError, sf.LibsndfileError) as exc:
                error = exc
                break
            if not len(block):
                break
            decoded = start + len(block)
            if not np.isfinite(block).all():
                bad_cols[col] = True
                block = np.nan_to_num(block, nan=0.0, posinf=1.0, neginf=-1.0)
            lo[col], hi[col] = float(block.min()), float(block.max())
    img = Image.new("RGB", (w, h), (246, 247, 249))
    d = ImageDraw.Draw(img)
    mid = (h - 1) / 2
    d.line([(0, mid), (w, mid)], fill=(200, 205, 212))
    for col in range(w):
        if col * step >= decoded:
            break
        a, b = np.clip([lo[col], hi[col]], -1, 1)
        color = CUT_RED if bad_cols[col] or max(abs(a), abs(b)) >= 0.999 else (37, 99, 235)
        d.line([(col, mid - b * mid), (col, mid - a * mid)], fill=color)
    cut_col = min(w, -(-decoded // step))
    if decoded < total and cut_col < w:
        for x in range(cut_col - h, w, 6):
            d.line([(max(x, cut_col), h - (max(x, cut_col) - x)), (x + h, 0)], fill=(240, 170, 170))
        d.line([(cut_col, 0), (cut_col, h)], fill=CUT_RED, width=2)
        cut = True
        note = f"decodes {decoded / total:.0%} of the {total:,} frames its header promises; the red line is the cut"
    if error is not None:
        note = (note + "; " if note else "") + f"decoding stopped: {error}"[:200]
    if bad_cols.any():
        note = (note + "; " if note else "") + "red: samples that are NaN, infinite or at full scale"
    buf = io.BytesIO()
    img.quantize(colors=16).save(buf, "PNG", optimize=True)
    return Result("image/png", buf.getvalue(), note, w, h, cut)


# ---- in the report process -----------------------------------------------------------------------


def placeholder_note(item: Item) -> str | None:
    """Why ``item`` gets no decode attempt, or None if it should get one."""
    if item.status != R.OK and item.reason in NOT_DECODED:
        return NOT_DECODED[item.reason]
    if item.kind not in ("image", "audio"):
        return "not an image or audio file"
    if item.source is None:
        return item.missing or "file not found where the scan or the quarantine journal says it is"
    return None


def make_thumbnails(
    items: list[Item],
    limits: ThumbLimits,
    jobs: int,
    scrub: Callable[[str], str] = str,
    fetch: Fetch | None = None,
) -> dict[str, int]:
    """Set ``item.thumb`` for every item; each source is decoded once, in an isolated worker.

    ``scrub`` cleans the notes (a decoder's message may name absolute paths). ``fetch``: the sources are
    objects in a store (a bucket scan's), read by it here, a bounded amount at a time, and decoded from
    their bytes in the workers; else they are paths the workers open.

    Returns counts: ``made``, ``placeholders``, ``failed`` (workers that died or overran).
    """
    by_source: dict[tuple[str, str, bool], list[Item]] = {}
    stats = {"made": 0, "placeholders": 0, "failed": 0}
    for item in items:
        note = placeholder_note(item)
        if note is not None:
            item.thumb = Thumb(note=note)
            continue
        key = (item.source, item.kind, item.status == R.BAD and item.kind == "image")
        by_source.setdefault(key, []).append(item)
    sizes = [group[0].size for group in by_source.values()]
    results = _run(list(by_source), limits, jobs, stats, fetch, sizes)
    for key, result in zip(by_source, results):
        thumb = _thumb(result, scrub)
        for item in by_source[key]:
            item.thumb = thumb
    stats["made"] = sum(1 for r in results if r.mime is not None)
    stats["placeholders"] = sum(1 for i in items if i.thumb is not None and i.thumb.data_uri is None)
    return stats


def _thumb(result: Result, scrub: Callable[[str], str]) -> Thumb:
    note = scrub(result.note)
    if result.mime is None:
        return Thumb(note=note)
    uri = f"data:{result.mime};base64,{base64.b64encode(result.data).decode('ascii')}"
    return Thumb(data_uri=uri, note=note, width=result.width, height=result.height, cut=result.cut)


def _chunks(sizes: list[int | None], by_bytes: bool) -> list[list[int]]:
    """Job indexes in tasks of at most :data:`CHUNK` jobs and (``by_bytes``) :data:`CHUNK_BYTES` of recorded size."""
    out: list[list[int]] = []
    chunk: list[int] = []
    held = 0
    for i, size in enumerate(sizes):
        size = size or 0 if by_bytes else 0
        if chunk and (len(chunk) >= CHUNK or held + size > CHUNK_BYTES):
            out.append(chunk)
            chunk, held = [], 0
        chunk.append(i)
        held += size
    return out + ([chunk] if chunk else [])


class _Tasks:
    """A chunk's worker tasks: paths as they are, or each object's bytes fetched (a few at a time, in threads);
    an object that cannot be fetched gets its placeholder result at once, without a worker."""

    def __init__(self, jobs: list[Job], sizes: list[int | None], fetch: Fetch | None, pool: ThreadPoolExecutor | None):
        self.jobs, self.sizes, self.fetch, self.pool = jobs, sizes, fetch, pool
        self.notes: dict[int, str] = {}  # what the fetch says about an object it read (changed since the scan)

    def make(self, chunk: list[int], results: list[Result | None]) -> tuple[list[int], list[Task]]:
        if self.fetch is None or self.pool is None:
            return chunk, [(*self.jobs[i], None) for i in chunk]
        fetch = self.fetch
        got = list(self.pool.map(lambda i: fetch(self.jobs[i][0], self.sizes[i]), chunk))
        idx: list[int] = []
        tasks: list[Task] = []
        for i, (data, note) in zip(chunk, got):
            if data is None:
                results[i] = Result(None, note=note)
                continue
            if note:
                self.notes[i] = note
            idx.append(i)
            tasks.append((*self.jobs[i], data))
        return idx, tasks

    def noted(self, i: int, r: Result) -> Result:
        note = self.notes.get(i)
        return r._replace(note="; ".join(filter(None, [note, r.note]))) if note else r


def _run(
    jobs: list[Job],
    limits: ThumbLimits,
    workers: int,
    stats: dict,
    fetch: Fetch | None = None,
    sizes: list[int | None] | None = None,
) -> list[Result]:
    """Results in job order: chunks on the reusable loky pool; what a dying worker took down, one at a time.

    Paths: every chunk submitted at once (a task is a few paths). Fetched bytes: a bounded few chunks in
    flight (:data:`FETCH_BUDGET`), each chunk's objects read just before it is submitted."""
    from joblib.externals.loky import get_reusable_executor

    results: list[Result | None] = [None] * len(jobs)
    if not jobs:
        return []
    sizes = sizes if sizes is not None else [None] * len(jobs)
    chunks = iter(_chunks(sizes, fetch is not None))
    ahead = max(1, min(workers * 2, FETCH_BUDGET // CHUNK_BYTES)) if fetch is not None else len(jobs)
    lost: list[int] = []
    with ThreadPoolExecutor(FETCH_THREADS) if fetch is not None else _nothing() as pool:
        tasks = _Tasks(jobs, sizes, fetch, pool)
        pending: dict[Future, list[int]] = {}
        while True:
            while len(pending) < ahead:
                chunk = next(chunks, None)
                if chunk is None:
                    break
                idx, work = tasks.make(chunk, results)
                if not work:
                    continue
                try:
                    executor = get_reusable_executor(max_workers=max(1, workers), timeout=60)
                    pending[executor.submit(render_chunk, work, limits)] = idx
                except BrokenProcessPool:
                    lost += idx
            if not pending:
                break
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                idx = pending.pop(future)
                try:
                    for i, r in zip(idx, future.result()):
                        results[i] = tasks.noted(i, r)
                except BrokenProcessPool:
                    lost += idx
        for i in sorted(lost):
            idx, work = tasks.make([i], results)
            if not work:
                continue
            executor = get_reusable_executor(max_workers=max(1, workers), timeout=60)
            started = time.monotonic()
            try:
                results[i] = tasks.noted(i, executor.submit(render_chunk, work, limits).result()[0])
            except BrokenProcessPool as exc:
                stats["failed"] += 1
                results[i] = Result(
                    None, note=f"no thumbnail: decoding it {_why_died(exc, time.monotonic() - started, limits)}"
                )
    return results  # type: ignore[return-value]


def _nothing():
    import contextlib

    return contextlib.nullcontext(None)


def _why_died(exc: BaseException, took: float, limits: ThumbLimits) -> str:
    """What killed a worker that was making one thumbnail, from the signal loky reports when it can.

    SIGALRM is the time limit (:func:`dsclean.scanning.worker.time_limit`); any other signal is the
    decoder crashing. Without a signal, the time it took decides.
    """
    import re

    signals = re.findall(r"\b(SIG[A-Z]+)\b", str(exc))
    if "SIGALRM" in signals or (not signals and limits.timeout and took >= limits.timeout):
        return f"took longer than {limits.timeout:g} s"
    return f"crashed the decoder ({signals[0]})" if signals else "crashed the decoder"
