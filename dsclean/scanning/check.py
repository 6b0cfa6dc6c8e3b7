"""Stage 2: check one file. A pure function of (root, relative path, options).

:func:`check_file` never raises for a problem with the file: every outcome is a
:class:`~dsclean.scanning.verdict.Verdict`. It confirms the format from the magic bytes,
then runs that format's checker (:mod:`dsclean.scanning.check_image`,
:mod:`dsclean.scanning.check_audio`), which combines a full decode with the format's own
integrity rules. Whatever native decoders print on the C-level stderr is
captured and kept in the verdict's detail.
"""
from __future__ import annotations

import atexit
import contextlib
import errno
import os
import tempfile
import warnings
from dataclasses import dataclass
from typing import Callable, Iterator

from .. import reasons as R
from ..formats import SNIFF_BYTES, format_of_name, is_prefix_of_magic, kind_of, sniff
from .verdict import Verdict

#: Pillow's own default for MAX_IMAGE_PIXELS (about 89.5 Mpx): above it an image is a decompression bomb.
DEFAULT_MAX_PIXELS = 89_478_485
#: frames of an animated image decoded at most; the rest are counted, not decoded
DEFAULT_MAX_FRAMES = 256
#: seconds one file's check may take before its worker is killed (see dsclean.scanning.worker)
DEFAULT_TIMEOUT = 60.0


@dataclass(frozen=True)
class CheckOptions:
    """How strict the check is. Small and picklable: it travels to every worker."""

    lenient: bool = False  # recoverable decoder warnings become `warn` instead of `bad`
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_frames: int = DEFAULT_MAX_FRAMES
    # Enforced around the check by the worker process (dsclean.scanning.worker), not by check_file:
    timeout: float = DEFAULT_TIMEOUT  # seconds per file; 0 = none
    max_memory: int = 0  # bytes of address space a check may add; 0 = no ceiling


Checker = Callable[[str, Verdict, CheckOptions], None]

#: Test-only: called with each file's path at the start of its check. dsclean.scanning.worker installs
#: a fault injector here when DSCLEAN_TEST_FAULTS=1; it is None in every real run.
fault_hook: Callable[[str], None] | None = None


_CHECKERS: dict[str, Checker] = {}
#: formats whose checker module is not ``check_<kind>``
_MODULES = {"ppm": "check_pnm"}


def load_checkers() -> None:
    """Import every checker module now (workers do this before applying a memory ceiling)."""
    for fmt in ("jpeg", "wav", "ppm"):
        _checker(fmt)


def _checker(fmt: str) -> Checker:
    """The checker for a format; each kind's module (and its decoders) is imported on first use."""
    if fmt not in _CHECKERS:
        import importlib

        module = importlib.import_module(f".{_MODULES.get(fmt, 'check_' + kind_of(fmt))}", __package__)
        _CHECKERS.update(module.CHECKERS)
    return _CHECKERS[fmt]


def check_file(root: str, rel: str, options: CheckOptions = CheckOptions(), *, capture_stderr: bool = True) -> Verdict:
    """Decide whether ``root/rel`` is a whole, decodable media file.

    ``capture_stderr=False`` leaves fd 2 alone: redirecting it is process-wide,
    so threads checking side by side must not do it.
    """
    claimed = format_of_name(rel) or ""
    v = Verdict(path=rel, kind=kind_of(claimed) if claimed else "unknown")
    path = os.path.join(root, rel)
    if not capture_stderr:
        _check(path, claimed, v, options)
        return v
    with capture_c_stderr() as captured, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check(path, claimed, v, options)
    said = [f"{w.category.__name__}: {w.message}" for w in caught[:5]]
    text = " | ".join(filter(None, [*said, captured.text()]))
    if text:
        v.detail = f"{v.detail}; decoder said: {text}" if v.detail else f"decoder said: {text}"
    return v


def _check(path: str, claimed: str, v: Verdict, options: CheckOptions) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            v.mark(R.BAD, R.UNREADABLE, "broken symlink")
        else:
            v.mark(R.WARN, R.VANISHED, "file disappeared before it could be checked")
        return
    except OSError as exc:
        v.mark(R.BAD, R.UNREADABLE, _os_error_text(exc))
        return
    v.size, v.mtime_ns = st.st_size, st.st_mtime_ns
    if st.st_size == 0:
        v.mark(R.BAD, R.EMPTY, "file is 0 bytes")
        return
    _check_content(path, claimed, v, options)
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


def _check_content(path: str, claimed: str, v: Verdict, options: CheckOptions) -> None:
    try:
        if fault_hook is not None:
            fault_hook(path)
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
        real = sniff(head)
        if real is None:
            if is_prefix_of_magic(head, claimed):
                v.mark(R.BAD, R.TRUNCATED, f"file is {v.size} bytes, cut inside the {claimed} signature")
            else:
                v.mark(R.BAD, R.NOT_MEDIA, f"content is not {claimed}: starts with {_preview(head)}")
            return
        v.format, v.kind = real, kind_of(real)
        _checker(real)(path, v, options)
        if real != claimed and v.status == R.OK:
            v.mark(R.WARN, R.EXTENSION_MISMATCH, f"content is {real}, extension says {claimed}")
    except FileNotFoundError:
        v.mark(R.WARN, R.VANISHED, "file disappeared while being checked")
    except OSError as exc:
        v.mark(R.BAD, R.UNREADABLE, _os_error_text(exc))
    except MemoryError:
        v.mark(R.BAD, R.TOO_LARGE, "the check ran out of memory" + (
            f" (ceiling --max-memory {options.max_memory:,} bytes)" if options.max_memory else ""))
    except ImportError:
        raise  # a broken installation says nothing about the file
    except Exception as exc:  # a decoder's own exception on damaged data is a verdict, not a crash
        v.mark(R.BAD, R.CORRUPT, f"{type(exc).__name__}: {exc}")


def _os_error_text(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{exc.strerror or exc} ({name})" if name else str(exc)


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


@contextlib.contextmanager
def capture_c_stderr() -> Iterator[_Captured]:
    """Redirect file descriptor 2 into a per-process temp file for the duration.

    libjpeg, libpng, libsndfile and mpg123 write warnings straight to fd 2,
    bypassing ``sys.stderr``; this keeps them with the file they are about.
    """
    global _capture_file
    if _capture_file is None:
        _capture_file = tempfile.TemporaryFile()
        atexit.register(_capture_file.close)
    out = _Captured()
    cap = _capture_file
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
