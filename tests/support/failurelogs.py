"""Datasets with a few bad files, and failure logs written as dsclean.guard writes them (FailureWriter)."""

from __future__ import annotations

from pathlib import Path

from dsclean.failures import FailureWriter, process_log_path
from support import synth
from support.files import write


def dataset(root: Path) -> dict[str, bytes]:
    """cats/ and dogs/ with good JPEGs and PNGs, one truncated JPEG and one PNG whose bytes are garbage."""
    files = {f"cats/c{i}.jpg": synth.jpeg(32, 24 + i, seed=i) for i in range(4)}
    files.update({f"dogs/d{i}.png": synth.png(20 + i, 16, seed=10 + i) for i in range(3)})
    good = synth.jpeg(40, 30, seed=99)
    files["cats/cut.jpg"] = good[: len(good) // 2]
    files["dogs/junk.png"] = b"not a png at all" * 10
    for rel, data in files.items():
        write(root, rel, data)
    return files


def log_failures(log: Path, lines: list[tuple[int | None, dict]], rank: int = 0) -> None:
    """Each (worker, fields) pair is written by that worker's own FailureWriter, as guard does."""
    writers: dict[int | None, FailureWriter] = {}
    for worker, fields in lines:
        w = writers.setdefault(worker, FailureWriter(process_log_path(log, rank=rank, worker=worker)))
        w.write(**fields)
    for w in writers.values():
        w.close()
