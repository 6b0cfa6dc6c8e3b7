"""litdata optimized chunk sets (``index.json`` with ``chunks`` and ``config``, ``chunk-*.bin``).

Recognised (:func:`dsclean.shardsets.detect.index_kind`); reading them needs litdata
(``pip install 'dsclean[litdata]'``). Checking their samples is not built yet: a clear error says so.
"""

from __future__ import annotations

from typing import Iterator

from ..errors import UserError
from .detect import ShardSet
from .events import Problem, Sample, ShardDone


def require() -> None:
    """litdata importable, or a UserError naming the extra to install."""
    try:
        import litdata  # noqa: F401
    except ImportError as exc:
        raise UserError(f"reading litdata chunks needs litdata: pip install 'dsclean[litdata]' ({exc})") from None


def read_set(ss: ShardSet, column: str | None = None) -> Iterator[Sample | Problem | ShardDone]:
    """litdata sets are recognised, not checked yet: a UserError naming the index."""
    require()
    raise UserError(f"{ss.index}: a litdata chunk set; checking its samples is not supported yet")
    yield  # a generator, like the other readers
