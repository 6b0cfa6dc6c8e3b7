"""What a shard reader yields: samples to check, problems of the shard's structure, the end of a shard.

Readers are generators over one shard (a file object, never a path they open themselves twice), so
the same run loop serves every format and only one sample's bytes per reader are held at once.
"""

from __future__ import annotations

from typing import NamedTuple


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
