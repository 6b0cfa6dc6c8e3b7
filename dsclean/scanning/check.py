"""Stage 2: check one file. A pure function of its bytes (and its name, for the claimed format).

:func:`check_file` reads a file once (or maps it, when large) and runs every check on
those bytes; :func:`check_bytes` runs exactly the same checks on bytes already in hand
(e.g. a sample sliced out of a tar shard). Neither raises for a problem with the file:
every outcome is a :class:`~dsclean.scanning.verdict.Verdict`. The format comes from the
name's extension, confirmed by the magic bytes; then that format's checker, found in the
table :data:`dsclean.scanning.formats.REGISTRY` (:mod:`dsclean.scanning.check_image`,
:mod:`dsclean.scanning.check_audio`, ...), combines a real decode with the format's own
integrity rules (the format modules of :mod:`dsclean.scanning.formats`). Whatever
native decoders print on the C-level stderr is captured and kept in the verdict's detail.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import mmap
import os
import stat
import tempfile
import warnings
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Union

from .. import reasons as R
from ..formats import FORMATS, SNIFF_BYTES, format_of_name, is_prefix_of_magic, kind_of, sniff
from ..hashing import content_hash
from ..openfile import NotRegularFile, open_regular
from . import importguard
from .formats import PILLOW_MODULES, REGISTRY
from .verdict import Verdict

#: The version of the integrity rules. Bump it with every change that can change a verdict
#: (a new rule, a rule made stricter or more tolerant): it is part of the scan cache key and of
#: the results' recorded options, so no verdict outlives the rules that made it. Also bumped when the facts
#: a check records change (3: JPEG facts from a decode keeping the thumbnail's 64 px, not always 1/8).
#: 4: BigTIFF and RIFX signatures, .opus/.oga, the FLAC frame sequence, Ogg granules, TIFF PageNumber, AVIF/HEIF/JXL;
#: the warnings of what silently changes the data (issue 27: high_bit_depth, cmyk, exif_rotated, ...;
#: dsclean.scanning.traits) and ``--expect``.
#: also: a decoder's limit on a structurally whole file is the warning `unsupported`, decided after the format's next
#: decoder tried it (dsclean.scanning.fallback); the loader profiles of scan --loader, dsclean.loaders.
#: 5: M4A and ADTS AAC (dsclean.scanning.formats.m4a), the MPF index's order, Ogg's last granule position.
CHECKER_VERSION = 5

#: Pillow's own default for MAX_IMAGE_PIXELS (about 89.5 Mpx): above it an image is a decompression bomb.
DEFAULT_MAX_PIXELS = 89_478_485
#: frames of an animated image decoded at most; the rest are counted, not decoded
DEFAULT_MAX_FRAMES = 256
#: seconds one file's check may take before its worker is killed (see dsclean.scanning.worker)
DEFAULT_TIMEOUT = 60.0
#: files larger than this are mapped instead of read (their pages stay page cache, not process memory)
MAP_THRESHOLD = 64 << 20

#: what checkers get: the file's bytes, or a read-only map of them
Data = Union[bytes, mmap.mmap]


@dataclass(frozen=True)
class CheckOptions:
    """How strict the check is. Small and picklable: it travels to every worker."""

    lenient: bool = False  # recoverable decoder warnings become `warn` instead of `bad`
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_frames: int = DEFAULT_MAX_FRAMES
    # Also check FLAC's STREAMINFO MD5 against the decoded samples (`scan --flac-md5`): it catches whole
    # frames in the wrong order or from another stream, which every frame CRC passes. Off by default:
    # MD5 over the decoded samples alone is ~20% of a FLAC check (hashed in the same pass; MD5 runs at
    # ~850 MB/s here, so it cannot drop under 5%) — scripts/bench_flac.py, BENCHMARKS.md "Checker rules: the FLAC frame-sequence walk and the STREAMINFO MD5".
    flac_md5: bool = False
    # Record the facts (content_hash and the quality facts: perceptual hash, levels, ...; dsclean.quality)
    # from the bytes and decode the check has anyway. False (`scan --facts none`): the verdict alone, no
    # content_hash either. Never changes a verdict; part of the cache key, so a scan with facts never
    # reuses verdicts without.
    facts: bool = True
    # `scan --expect` in its canonical spelling (dsclean.scanning.traits.canonical_expect; "" = none): files
    # outside it are warned about, or bad with strict_expect (`--strict-expect`)
    expect: str = ""
    strict_expect: bool = False
    # `scan --exif apply`: the index's default image loader applies the EXIF orientation (no verdict changes;
    # recorded here so the results, and the index built from them, carry it)
    exif: str = "ignore"
    # The training loader profiles (dsclean.loaders.profiles) each whole file is also opened with, beyond the
    # reference ones the check stands for (pillow, soundfile): `scan --loader`. Sorted names; () = none.
    loaders: tuple[str, ...] = ()
    # Enforced around the check by the worker process (dsclean.scanning.worker), not by check_file:
    timeout: float = DEFAULT_TIMEOUT  # seconds per file; 0 = none
    # bytes of address space a check may add; 0 = the default ceiling (a share of RAM per core, see
    # dsclean.scanning.worker.default_memory_ceiling: past it a file is only warned about); -1 = none
    max_memory: int = 0


Checker = Callable[[Data, Verdict, CheckOptions], None]

#: Test-only: called with each file's path (or name) at the start of its check. dsclean.scanning.worker
#: installs a fault injector here when DSCLEAN_TEST_FAULTS=1; it is None in every real run.
fault_hook: Callable[[str], None] | None = None


_CHECKERS: dict[str, Checker] = {}  # format -> its check function, filled from each check module on first use


def checker_modules(formats: Iterable[str] | None = None) -> list[str]:
    """The full names of the modules checking ``formats`` (None: every format), e.g. to preload them
    (with Pillow for the formats it checks: a tree of JPEGs never loads it)."""
    rows = [REGISTRY[fmt] for fmt in (FORMATS if formats is None else formats)]
    pillow = list(PILLOW_MODULES) if any(row.pillow for row in rows) else []
    return sorted({row.checks.name for row in rows}) + pillow


def load_checkers(formats: Iterable[str] | None = None) -> None:
    """Import the checker modules of ``formats`` (None: every one) now."""
    for fmt in FORMATS if formats is None else formats:
        _checker(fmt)


def _checker(fmt: str) -> Checker:
    """The checker for a format (:data:`dsclean.scanning.formats.REGISTRY`); its module (and its decoders) is
    imported on first use, under the worker's import guard (:mod:`dsclean.scanning.importguard`)."""
    if fmt not in _CHECKERS:
        with importguard.guarded():
            table = REGISTRY[fmt].checks.load()
        _CHECKERS.update(table)
    return _CHECKERS[fmt]


def check_file(root: str, rel: str, options: CheckOptions = CheckOptions(), *, capture_stderr: bool = True) -> Verdict:
    """Decide whether ``root/rel`` is a whole, decodable media file.

    The file is opened once: its bytes are read (or mapped, above :data:`MAP_THRESHOLD`)
    and every check runs on them. ``capture_stderr=False`` leaves fd 2 alone:
    redirecting it is process-wide, so threads checking side by side must not do it.
    """
    v = _new_verdict(rel)
    with _decoder_messages(v, capture_stderr):
        _check_path(os.path.join(root, rel), v, options)
    return v


def check_bytes(
    data: bytes | bytearray | memoryview,
    name: str,
    options: CheckOptions = CheckOptions(),
    *,
    capture_stderr: bool = True,
) -> Verdict:
    """Decide whether ``data`` is a whole, decodable media file of the format ``name``'s extension claims.

    Exactly the checks :func:`check_file` runs, as a pure function of its input
    (``size`` is ``len(data)``; ``mtime_ns`` stays None). For bytes that are not on
    disk as a file of their own, e.g. a sample inside a tar shard.
    """
    if not isinstance(data, bytes):
        data = bytes(data)  # a memoryview or bytearray: the checkers need an immutable buffer
    v = _new_verdict(name)
    v.size = len(data)
    with _decoder_messages(v, capture_stderr):
        _check_data(data, name, v, options)
    return v


def _new_verdict(name: str) -> Verdict:
    claimed = format_of_name(name)
    return Verdict(path=name, kind=kind_of(claimed) if claimed else "unknown")


# Warnings about a library's API, not about the bytes (torchvision 0.29 warns that its decoders are deprecated on
# every decode_image call): never part of a file's verdict
_NOT_ABOUT_THE_FILE = (DeprecationWarning, PendingDeprecationWarning, FutureWarning, ImportWarning)


@contextlib.contextmanager
def _decoder_messages(v: Verdict, capture_stderr: bool) -> Iterator[None]:
    """Keep what decoders said (Python warnings and C-level stderr) in the verdict's detail."""
    if not capture_stderr:
        yield
        return
    if _session is not None:  # fd 2 and warnings are already redirected for a run of checks
        yield
        caught, captured = _session.take()
    else:
        with capture_c_stderr() as captured, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    said = [f"{w.category.__name__}: {w.message}" for w in caught if not issubclass(w.category, _NOT_ABOUT_THE_FILE)]
    said = said[:5]
    text = " | ".join(filter(None, [*said, captured.text()]))
    if text:
        v.detail = f"{v.detail}; decoder said: {text}" if v.detail else f"decoder said: {text}"


def _check_path(path: str, v: Verdict, options: CheckOptions) -> None:
    """Open once, read (or map) the bytes, check them; note a file that changed meanwhile."""
    try:
        first = os.stat(path)
    except OSError:
        first = None  # the open below says why
    if first is not None and not stat.S_ISREG(first.st_mode):
        _not_regular(v, first.st_mode)  # a FIFO, socket or device is never opened: the open could block or act
        return
    try:
        fd = open_regular(path)  # a FIFO swapped in since the stat must not block the open: refused
    except NotRegularFile as exc:
        _not_regular(v, exc.mode)
        return
    except FileNotFoundError:
        if os.path.islink(path):
            v.mark(R.BAD, R.UNREADABLE, _broken_link(path))
        else:
            v.mark(R.WARN, R.VANISHED, "file disappeared before it could be checked")
        return
    except OSError as exc:
        v.mark(R.BAD, R.UNREADABLE, _os_error_text(exc))
        return
    try:
        st = os.fstat(fd)
        v.size, v.mtime_ns = st.st_size, st.st_mtime_ns
        data = _read_all(fd, st.st_size)
    except OSError as exc:
        v.mark(R.BAD, R.UNREADABLE, _os_error_text(exc))
        return
    except MemoryError:
        _too_large(v, options, f"reading the {st.st_size:,}-byte file needs more memory than allowed")
        return
    finally:
        os.close(fd)
    try:
        _check_data(data, path, v, options)
    finally:
        if isinstance(data, mmap.mmap):
            data.close()
    try:
        after = os.stat(path)
    except OSError:
        after = None
    if after is None or (after.st_size, after.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
        # Whatever was decided was decided about bytes that are no longer there: a file still being
        # written must not be judged (and quarantined) as truncated. Warn, keep what was seen.
        seen = f" (the check saw: {v.status} {v.reason}: {v.detail})" if v.status != R.OK else ""
        v.status, v.reason = R.WARN, R.CHANGED
        v.detail = "file changed or disappeared while being checked; scan again later" + seen
        v.content_hash = None  # the bytes hashed are no longer the file's


def _not_regular(v: Verdict, mode: int) -> None:
    what = (
        "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a character device"
        if stat.S_ISCHR(mode)
        else "a block device"
        if stat.S_ISBLK(mode)
        else "a folder"
        if stat.S_ISDIR(mode)
        else "not a regular file"
    )
    v.mark(R.WARN, R.NOT_REGULAR, f"{what}, not a regular file: not opened, not moved")


def _read_all(fd: int, size: int) -> Data:
    """The file's bytes: one read for the usual file, a read-only map above MAP_THRESHOLD."""
    if size > MAP_THRESHOLD:
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    data = os.read(fd, size)
    if len(data) < size:  # a short read (or the file shrank meanwhile: the stat after notices)
        parts = [data]
        while chunk := os.read(fd, max(size - len(data), 1 << 16)):
            parts.append(chunk)
        data = b"".join(parts)
    return data


def _check_data(data: Data, name: str, v: Verdict, options: CheckOptions) -> None:
    """Every check, on the bytes in hand: hash (facts on), empty, magic bytes, the format's checker."""
    claimed = format_of_name(name) or ""
    try:
        if fault_hook is not None:
            fault_hook(name)
        if options.facts:
            v.content_hash = content_hash(data)
        if len(data) == 0:
            v.mark(R.BAD, R.EMPTY, "file is 0 bytes")
            return
        head = bytes(data[:SNIFF_BYTES])
        real = _sniff(data, head)
        if real is None:
            if is_prefix_of_magic(head, claimed):
                v.mark(R.BAD, R.TRUNCATED, f"file is {len(data)} bytes, cut inside the {claimed} signature")
            else:
                from ..content import HEAD_BYTES, describe_content

                what = describe_content(bytes(data[:HEAD_BYTES]))
                v.mark(
                    R.BAD,
                    R.NOT_MEDIA,
                    f"content is not {claimed}: " + (f"it is {what}" if what else f"starts with {_preview(head)}"),
                )
            return
        v.format, v.kind = real, kind_of(real)
        _checker(real)(data, v, options)
        if options.loaders and v.status != R.BAD:
            from ..loaders.check import check_loaders  # only a scan with --loader loads the profiles
            from ..loaders.profiles import require

            with importguard.guarded():  # torch, torchvision, cv2, av load outside the file's ceiling and timeout
                require(options.loaders)
            check_loaders(data, v, options.loaders, real)
        if real != claimed and v.status == R.OK:
            v.mark(
                R.WARN, R.EXTENSION_MISMATCH, f"content is {real}, extension says {claimed}{_who_cares(real, claimed)}"
            )
        from .traits import apply as record_traits  # what silently changes the data: warnings (issue 27)

        record_traits(data, v, options.expect, options.strict_expect)
    except MemoryError:
        _too_large(v, options, "the check ran out of memory")
    except ImportError:
        raise  # a broken installation says nothing about the file
    except Exception as exc:  # a decoder's own exception on damaged data is a verdict, not a crash
        v.mark(R.BAD, R.CORRUPT, f"{type(exc).__name__}: {exc}")


def _who_cares(real: str, claimed: str) -> str:
    """Which loaders an extension that names another format affects (the detail of extension_mismatch)."""
    if kind_of(real) != kind_of(claimed):
        return "; every loader for its extension's kind fails on it (an image dataset's transforms on a sound)"
    return (
        "; Pillow, torchvision.io.decode_image and cv2.imread read by content (no harm), while loaders that "
        "pick the decoder by extension (DALI/nvJPEG readers, torchvision.io.decode_jpeg on a .jpg list, "
        "webdataset's extension-keyed decoders) fail or misread it"
    )


def _too_large(v: Verdict, options: CheckOptions, what: str) -> None:
    """Out of memory: ``bad`` only past a ceiling the user chose; the default ceiling's (or none) only warns.

    Never ``corrupt``, never cached (the verdict is about the ceiling, not the bytes).
    """
    v.content_hash = None
    if options.max_memory > 0:
        v.status, v.reason = R.BAD, R.TOO_LARGE  # replaces whatever a decoder said half-way
        v.detail = f"{what} (ceiling --max-memory {options.max_memory:,} bytes)"
    else:
        v.status, v.reason = R.WARN, R.TOO_LARGE
        v.detail = (
            f"{what} (the default ceiling per check); not judged: raise --max-memory (e.g. --max-memory 8G) "
            "to check it, and to quarantine it if it still does not fit"
        )


def _sniff(data: Data, head: bytes) -> str | None:
    """The real format from the magic bytes, looking past an ID3v2 tag for a FLAC stream
    (libFLAC skips such a tag; the FLAC spec does not allow it: the FLAC checker warns) or an ADTS
    AAC stream (HLS segments and some encoders put one there; the AAC checker skips it)."""
    real = sniff(head)
    if real == "mp3" and head[:3] == b"ID3":
        from .formats.id3 import id3v2_end

        end = id3v2_end(data, 0)
        if end is not None and data[end : end + 4] == b"fLaC":
            return "flac"
        if end is not None and sniff(bytes(data[end : end + SNIFF_BYTES])) == "aac":
            return "aac"
    return real


def _os_error_text(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{exc.strerror or exc} ({name})" if name else str(exc)


def _broken_link(path: str) -> str:
    """A dangling symlink's detail: what its target is when it is a git-annex object (never fetched)."""
    from ..content import describe_symlink_target

    try:
        what = describe_symlink_target(os.readlink(path))
    except OSError:
        what = None
    return f"broken symlink: it is {what}" if what else "broken symlink"


def _preview(head: bytes) -> str:
    text = head[:12].decode("ascii", "replace")
    return repr(text) if text.isprintable() else head[:12].hex(" ")


class _Captured:
    def __init__(self) -> None:
        self.data = b""

    def text(self, limit: int = 500) -> str:
        t = self.data.decode("utf-8", "replace").strip()
        t = " | ".join(line.strip() for line in t.splitlines() if line.strip())
        return t if len(t) <= limit else t[:limit] + "…"


_capture_file = None


def _capture_target():
    """The per-process temp file that fd 2 is redirected into."""
    global _capture_file
    if _capture_file is None:
        _capture_file = tempfile.TemporaryFile()
        atexit.register(_capture_file.close)
    return _capture_file


@contextlib.contextmanager
def capture_c_stderr() -> Iterator[_Captured]:
    """Redirect file descriptor 2 into a per-process temp file for the duration.

    libjpeg, libpng, libsndfile and mpg123 write warnings straight to fd 2,
    bypassing ``sys.stderr``; this keeps them with the file they are about.
    """
    out = _Captured()
    cap = _capture_target()
    cap.seek(0)
    cap.truncate()
    saved = os.dup(2)
    os.dup2(cap.fileno(), 2)
    try:
        yield out
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        cap.seek(0)
        out.data = cap.read(4096)


class _Session:
    """fd 2 and Python warnings redirected once for a run of checks (see :func:`decoder_messages_for_run`)."""

    def __init__(self, fd: int, caught: list) -> None:
        self.fd, self.caught = fd, caught

    def take(self) -> tuple[list, _Captured]:
        """What the check that just ran said; then empty both for the next one.

        One ``lseek`` when the decoders said nothing (the usual case): fd 2 shares the
        capture file's offset, so the offset is the number of bytes written since the last reset.
        """
        caught, self.caught[:] = list(self.caught), []
        out = _Captured()
        written = os.lseek(self.fd, 0, os.SEEK_CUR)
        if written:
            out.data = os.pread(self.fd, min(written, 4096), 0)
            os.ftruncate(self.fd, 0)
            os.lseek(self.fd, 0, os.SEEK_SET)
        return caught, out


_session: _Session | None = None


@contextlib.contextmanager
def decoder_messages_for_run() -> Iterator[None]:
    """Capture decoder messages for every check run inside, setting the redirection up once.

    The same per-file messages as each check capturing on its own (:func:`capture_c_stderr`),
    without its ~10 system calls per file: a worker wraps its chunk in this.
    """
    global _session
    if _session is not None:
        yield
        return
    cap = _capture_target()
    fd = cap.fileno()
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    saved = os.dup(2)
    os.dup2(fd, 2)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _session = _Session(fd, caught)
            yield
    finally:
        _session = None
        os.dup2(saved, 2)
        os.close(saved)
