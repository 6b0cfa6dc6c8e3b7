"""What ``scan --loader NAME`` adds to a verdict: each named profile opens the file exactly as training would.

Runs in the checking process, on the bytes the check read, after the check found the file not bad. The reference
profiles (``pillow``, ``soundfile``) are what the check itself judged: they decode again only when another profile
of the file's kind needs reference pixels or samples to compare with. Outcomes (warnings; a file the check already
warned about keeps its reason, the loader's words are added to the detail):

- ``loader_fails``: the profile raises, or returns nothing (``cv2.imdecode`` returns None);
- ``loader_differs``: its decode disagrees with the reference decode beyond :mod:`.compare`'s tolerance.
"""

from __future__ import annotations

import re

from .. import reasons as R
from . import compare
from .profiles import PROFILES, REFERENCE, as_array


def check_loaders(data, v, names, fmt: str | None = None) -> None:
    """Open ``data`` with every profile in ``names`` of the verdict's kind; mark ``v`` with what they disagree on."""
    wanted = [PROFILES[n] for n in names if n in PROFILES and PROFILES[n].kind == v.kind and not PROFILES[n].reference]
    if not wanted:
        return
    ref_profile = PROFILES[REFERENCE[v.kind]]
    try:
        reference = as_array(ref_profile, ref_profile.load(bytes(data)))
        ref_error = None if reference is not None else "returned nothing"
    except MemoryError:
        raise
    except Exception as exc:  # the reference cannot read it either: the check's own verdict says why
        reference, ref_error = None, f"{type(exc).__name__}: {_short(exc)}"
    read = []
    for p in wanted:
        try:
            out = as_array(p, p.load(bytes(data)))
        except (MemoryError, ImportError):
            raise  # the ceiling, or a broken installation (scan --loader checked it first): nothing about the file
        except Exception as exc:  # the loader's own failure is the finding
            _note(v, R.LOADER_FAILS, f"--loader {p.name} ({p.call}) raises {type(exc).__name__}: {_short(exc)}")
            continue
        if out is None:
            _note(v, R.LOADER_FAILS, f"--loader {p.name} ({p.call}) returns nothing")
            continue
        read.append(p.name)
        if reference is None:
            continue
        diff = (
            compare.image_difference(reference, out)
            if v.kind == "image"
            else compare.audio_difference(reference, out, fmt)
        )
        if diff is not None:
            _note(v, R.LOADER_DIFFERS, f"--loader {p.name}: {diff} ({ref_profile.name})")
    if reference is None and read:
        v.detail = _join(v.detail, f"loaders: {', '.join(read)} read it; {ref_profile.name} {ref_error}")


def _note(v, reason: str, detail: str) -> None:
    """A warning of ``reason``, unless the verdict already says something (then only the detail grows)."""
    if v.status == R.OK:
        v.mark(R.WARN, reason, detail)
    else:
        v.detail = _join(v.detail, detail)


_OBJECT_REPR = re.compile(r" ?<[\w.]+ object at 0x[0-9a-f]+>")


def _short(exc: BaseException) -> str:
    text = _OBJECT_REPR.sub("", " ".join(str(exc).split()))  # the same words for the same bytes
    return text if len(text) <= 200 else text[:200] + "…"


def _join(detail: str, more: str) -> str:
    return f"{detail}; {more}" if detail else more
