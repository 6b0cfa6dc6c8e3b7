"""What a shard reader yields: samples to check, problems of the shard's structure, the end of a shard.

Readers are generators over one shard (a file object, never a path they open themselves twice), so
the same run loop serves every format and only one sample's bytes per reader are held at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple

from .. import reasons as R

if TYPE_CHECKING:
    from .detect import ShardSet


class Sample(NamedTuple):
    """One media member to check: ``member`` names it inside the shard (a tar member, ``row 12:image``)."""

    shard: str
    key: str
    member: str
    row: int | None
    data: bytes
    name: str  # what the checker sees: its extension names the claimed format


class Problem(NamedTuple):
    """Something wrong with the shard's structure (reason: a code of :mod:`dsclean.reasons`).

    ``deny``: the sample (``key``) cannot be read whole, so it belongs on the deny-list.
    """

    shard: str
    key: str | None
    member: str | None
    row: int | None
    reason: str
    detail: str
    deny: bool = False


class ShardDone(NamedTuple):
    """The end of a shard: how many samples (keys or rows) it held."""

    shard: str
    samples: int


class ReadFailed(OSError):
    """A shard in object storage that could not be read (after retries): ``reason`` is a reason code
    (unreadable, vanished), the message says which object and why (403, 404, still failing)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def listed_shard_events(
    ss: ShardSet, name: str, samples: int, read: Callable[[str], Iterator[Sample | Problem | ShardDone]]
) -> Iterator[Sample | Problem | ShardDone]:
    """The events of a shard its set's ``index.json`` lists (MDS, litdata): ``read(path)``'s, on the shard where this
    runs (one in a bucket: a temp copy, removed after); a listed shard that is not there, or could not be read, is a
    problem of its own (and the end of a shard of ``samples``, for one that could not be read)."""
    try:
        with ss.local(name) as path:
            if path is None:
                yield Problem(name, None, None, None, R.MISSING_SHARD, f"{name}: listed in index.json, not there")
            else:
                yield from read(path)
    except ReadFailed as exc:
        yield Problem(name, None, None, None, exc.reason, str(exc))
        yield ShardDone(name, samples)
