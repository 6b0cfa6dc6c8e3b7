"""``--max-memory`` per object in a bucket scan: each check in a worker process runs under the ceiling the local
scan's worker sets (RLIMIT_AS), while the worker's reader threads go on beside it."""

from __future__ import annotations

import io
import os

import pytest
from support import synth

from dsclean.scanning.check import CheckOptions
from dsclean.scanning.results import read_results
from dsclean.storage.scan import BucketScanOptions, scan_bucket


@pytest.fixture(scope="module")
def gif_bomb() -> bytes:
    """A ~190 KB animated GIF with an 8000x8000 canvas: decoding its frames needs hundreds of MB (the local
    scan's memory test's file)."""
    from PIL import Image

    frames = [Image.new("P", (8000, 8000), i) for i in range(4)]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=50, disposal=2)
    return buf.getvalue()


def verdicts(results: str) -> dict[str, tuple[str, str | None, str]]:
    t = read_results(results).to_pydict()
    return {os.fsdecode(p): (s, r, d) for p, s, r, d in zip(t["path"], t["status"], t["reason"], t["detail"])}


def test_a_decompression_bomb_object_is_too_large_under_max_memory_and_the_others_are_checked(
    bucket, s3fs_direct, s3_endpoint, tmp_path, gif_bomb
):
    for i in range(6):
        s3fs_direct.pipe_file(f"{bucket}/m/ok{i}.png", synth.png(16, 16, seed=i))
    s3fs_direct.pipe_file(f"{bucket}/m/bomb.gif", gif_bomb)
    options = BucketScanOptions(
        storage_options={"endpoint_url": s3_endpoint},
        jobs=2,
        chunk_objects=3,
        check=CheckOptions(max_memory=100 << 20),
        report_dir=str(tmp_path / "r"),
    )
    summary = scan_bucket(f"s3://{bucket}/m", options)
    got = verdicts(summary.results_path)
    status, reason, detail = got.pop("bomb.gif")
    assert (status, reason) == ("bad", "too_large") and "--max-memory 104,857,600" in detail
    assert {k: v[:2] for k, v in got.items()} == {f"ok{i}.png": ("ok", None) for i in range(6)}
    assert summary.bad_reasons == {"too_large": 1}


def test_the_ceiling_holds_the_check_not_the_reads(bucket, s3fs_direct, s3_endpoint, tmp_path):
    """Objects much larger than the headroom of the ceiling are read (beside checks, in the reader threads)
    and checked fine: the ceiling is set for each check, from the address space at its start."""
    big = synth.encode_audio(synth.tone(seconds=40, rate=48_000, channels=2), 48_000, "WAV")  # ~7.7 MB
    assert len(big) > 7 << 20
    for i in range(4):
        s3fs_direct.pipe_file(f"{bucket}/w/t{i}.wav", big)
    options = BucketScanOptions(
        storage_options={"endpoint_url": s3_endpoint},
        jobs=2,
        chunk_objects=2,
        read_threads=8,  # up to 16 of them (120 MB) read ahead: far past the ceiling's 48 MB
        check=CheckOptions(max_memory=48 << 20),
        report_dir=str(tmp_path / "r"),
    )
    summary = scan_bucket(f"s3://{bucket}/w", options)
    assert {k: v[:2] for k, v in verdicts(summary.results_path).items()} == {
        f"t{i}.wav": ("ok", None) for i in range(4)
    }


READ_UNDER_A_CEILING = r"""
import sys, tempfile
from dsclean.scanning.worker import memory_ceiling
from dsclean.storage.fs import Store
from dsclean.storage.listing import Obj
from dsclean.storage.reads import ReadPolicy
from dsclean.storage.workers import _Counter, fetch

store = Store(sys.argv[1], {"endpoint_url": sys.argv[2]})
obj, tmp = Obj("big.bin", 64 << 20), tempfile.mkdtemp()
fetch(store, Obj("small.bin", 4), ReadPolicy(), tmp, _Counter())  # the store's client and loop set up first
with memory_ceiling(16 << 20):  # as a check near its ceiling: a read beside it cannot allocate 64 MB
    during = fetch(store, obj, ReadPolicy(retries=0), tmp, _Counter())
after = fetch(store, obj, ReadPolicy(), tmp, _Counter())  # the check over: read again
print(during.short_of_memory, during.error.reason if during.error else None, len(after.data or b""))
"""


def test_a_read_that_fails_for_memory_beside_a_check_is_read_again(bucket, s3fs_direct, s3_endpoint):
    """A real RLIMIT_AS in a fresh process: the read of a 64 MB object under a 16 MB ceiling fails for memory,
    is told apart from an unreadable object (short_of_memory), and the read after the ceiling gets the bytes."""
    import subprocess
    import sys

    s3fs_direct.pipe_file(f"{bucket}/r/big.bin", os.urandom(64 << 20))
    s3fs_direct.pipe_file(f"{bucket}/r/small.bin", b"abcd")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, "-c", READ_UNDER_A_CEILING, f"s3://{bucket}/r", s3_endpoint],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": repo},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "unreadable", str(64 << 20)]
