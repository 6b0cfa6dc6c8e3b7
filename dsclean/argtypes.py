"""argparse value types shared by every dsclean command: a bad value is a clear usage error (exit 2)."""

from __future__ import annotations

import argparse
import math

#: the largest --timeout accepted: a week (interval timers overflow on absurd values)
MAX_SECONDS = 7 * 24 * 3600.0
#: the largest size accepted: 1 EiB
MAX_SIZE = 1 << 60
#: the smallest memory ceiling accepted: below it a worker's own bookkeeping (a file's verdict, its name)
#: fails, not the file's decode, and the scan could not say which file was too large
MIN_MEMORY = 16 << 20


def _whole(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r} must be {least} or more")
    return value


def count(text: str) -> int:
    """A whole number, 0 or more."""
    return _whole(text, 0)


def positive(text: str) -> int:
    """A whole number, 1 or more (one message for 0 and for a negative number)."""
    return _whole(text, 1)


def _finite_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of seconds")
    return value


def seconds(text: str) -> float:
    """A number of seconds, more than 0."""
    value = _finite_seconds(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number more than 0")
    return value


def timeout(text: str) -> float:
    """Seconds from 0 (no limit) to a week."""
    value = _finite_seconds(text)
    if not 0 <= value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r} must be from 0 (no limit) to {MAX_SECONDS:g} seconds")
    return value


def size(text: str) -> int:
    """'512M', '2G', '1.5GiB', '1000000' -> bytes."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    number, unit = (t[:-1], t[-1]) if t and t[-1] in units else (t, "")
    try:
        value = float(number) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 512M or 2G") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_SIZE:
        raise argparse.ArgumentTypeError(f"{text!r} must be a size from 0 to 1E")
    return int(value)


def memory_ceiling(text: str) -> int:
    """``--max-memory``: a size of at least :data:`MIN_MEMORY`, or ``none`` / ``0`` for no ceiling at all (-1)."""
    if text.strip().lower() in ("none", "0"):
        return -1
    value = size(text)
    problem = memory_floor_problem(value, text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def memory_floor_problem(value: int, text: str | None = None) -> str | None:
    """Why a ``--max-memory`` of ``value`` bytes (> 0) can't work, or None. Shared by the CLI and the Python API."""
    if not 0 < value < MIN_MEMORY:
        return None
    shown = repr(text) if text is not None else f"max_memory={value}"
    if text is None:
        hint = " (max_memory is in bytes)"
    elif text.strip().isdigit():  # the one case where a unit was probably forgotten
        hint = f" (a bare number is bytes: did you mean {text.strip()}M?)"
    else:
        hint = f"; give at least {MIN_MEMORY >> 20}M"
    return f"{shown} is below the {MIN_MEMORY >> 20}M a worker needs for its own bookkeeping{hint}"


def shard(text: str) -> tuple[int, int]:
    """'3/16' -> (3, 16), with 0 <= I < N."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not I/N, e.g. 3/16") from None
    if not (n >= 1 and 0 <= i < n):
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 <= I < N")
    return i, n


def comma_list(text: str) -> tuple[str, ...]:
    """``dark,silent`` -> ('dark', 'silent'): one option value, so it can never swallow a positional argument."""
    items = tuple(part.strip() for part in text.split(","))
    if not all(items):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give comma-separated names without empty entries, e.g. dark,silent"
        )
    return items
