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


CHECK_BESIDE_A_READ = r"""
import sys, threading
from dsclean.scanning import check as check_module
from dsclean.scanning.check import CheckOptions
from dsclean.scanning.worker import handed_env
from dsclean.storage import workers
from dsclean.storage.fs import Store
from dsclean.storage.listing import Obj
from dsclean.storage.reads import ReadPolicy

started, allocated, held = threading.Event(), threading.Event(), []
real_fetch = workers.fetch


def fetch(store, obj, *args):  # pad.bin's read allocates 48 MB while victim.png's check runs
    got = real_fetch(store, obj, *args)
    if obj.rel == "pad.bin":
        assert started.wait(60)
        held.append(bytearray(48 << 20))
        allocated.set()
    return got


def hook(name):  # victim.png's decode needs 32 MB: it fits the 64 MB headroom alone, not beside the read's 48 MB
    if name == "victim.png":
        started.set()
        assert allocated.wait(60)
        bytearray(32 << 20)


def arm():
    check_module.fault_hook = hook


workers.fetch, workers._arm_faults = fetch, arm
store = Store(sys.argv[1], {"endpoint_url": sys.argv[2]})
objs = [Obj("victim.png"), Obj("pad.bin"), Obj("bomb.gif"), Obj("ok.png")]
check, policy = CheckOptions(max_memory=64 << 20), ReadPolicy()
result = workers.check_objects(store, objs, check, policy, 2, isolated=True)
before = [v.reason for v in result.verdicts]
alone = list(result.alone)
workers.settle(result, objs, store, check, policy, handed_env())
print(before[0], before[2], alone[:1], " ".join(f"{v.path}={v.status}/{v.reason}" for v in result.verdicts))
"""


def test_a_too_large_made_beside_a_read_in_flight_is_checked_again_alone(bucket, s3fs_direct, s3_endpoint, gif_bomb):
    """Deterministic: a reader thread allocates 48 MB while an innocent object's check (needing 32 MB, under a
    64 MB ceiling) runs: the check runs out of memory (too_large), is checked again in a fresh process alone,
    and ends ok; a real bomb checked beside reads still ends too_large."""
    import subprocess
    import sys

    s3fs_direct.pipe_file(f"{bucket}/b/victim.png", synth.png(16, 16, seed=1))
    s3fs_direct.pipe_file(f"{bucket}/b/pad.bin", b"padding")
    s3fs_direct.pipe_file(f"{bucket}/b/bomb.gif", gif_bomb)
    s3fs_direct.pipe_file(f"{bucket}/b/ok.png", synth.png(16, 16, seed=2))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, "-c", CHECK_BESIDE_A_READ, f"s3://{bucket}/b", s3_endpoint],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": repo},
    )
    assert proc.returncode == 0, proc.stderr
    first, bomb, alone, *final = proc.stdout.split()
    assert (first, bomb, alone) == ("too_large", "too_large", "[0]")  # the situation happened, and was seen
    assert dict(kv.split("=") for kv in final) == {
        "victim.png": "ok/None",
        "pad.bin": "bad/not_media",  # not an image or audio file: its own verdict, unchanged
        "bomb.gif": "bad/too_large",
        "ok.png": "ok/None",
    }
