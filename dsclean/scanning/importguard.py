"""The guard around a mid-scan import of a format's check module or decoder library.

A check module and its decoders (libjpeg-turbo, Pillow, libsndfile, a Pillow plugin) are imported on the first
file of their format. A worker (:mod:`dsclean.scanning.worker`) sets :data:`hook` so that import runs outside the
file's memory ceiling and timeout: a library loading is not the file's doing, and under a tight ceiling the import
itself could fail. A module of its own, below the checkers and the dispatch that both use it.
"""

from __future__ import annotations

import contextlib
from typing import Callable, ContextManager

#: Set by dsclean.scanning.worker for its checks; None: imports run as they are.
hook: Callable[[], ContextManager[None]] | None = None


def guarded() -> ContextManager[None]:
    """What to wrap such an import in: the worker's guard, or nothing."""
    return hook() if hook is not None else contextlib.nullcontext()
