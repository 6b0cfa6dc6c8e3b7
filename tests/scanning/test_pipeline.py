"""The scan pipeline around the checkers: the local worker pool, per-file decoder messages, verdict columns."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from support import synth
from support.files import write

import dsclean
from dsclean.scanning.check import CheckOptions
from dsclean.scanning.executors import run_checks
from dsclean.scanning.schema import SCHEMA, chunk_of, verdicts_batch
from dsclean.scanning.verdict import verdict_of_row
from dsclean.scanning.worker import FAULT_ENV


def test_decoder_messages_stay_with_their_file_inside_one_task(tmp_path, monkeypatch):
    """fd 2 is redirected once per task: each file still gets exactly what was said while it was checked."""
    root = tmp_path / "data"
    names = ["a__stderr__.jpg", "b.jpg", "c__stderr__.jpg", "d.jpg"]
    for i, name in enumerate(names):
        write(root, name, synth.jpeg(16, 16, seed=i))
    monkeypatch.setenv(FAULT_ENV, "1")  # handed to the workers as they start
    out = [v for chunk in run_checks(str(root), [names], CheckOptions(), 1, "processes") for v in chunk]
    said = {v.path: v.detail for v in out}
    assert said["a__stderr__.jpg"] == "decoder said: warning from the decoder about a__stderr__.jpg"
    assert said["c__stderr__.jpg"] == "decoder said: warning from the decoder about c__stderr__.jpg"
    assert said["b.jpg"] == said["d.jpg"] == ""
    assert {v.status for v in out} == {"ok"}


def test_batches_carry_every_field_and_come_back_as_the_same_verdicts(tmp_path):
    """A worker hands a chunk back as one Arrow IPC message; read back, it holds the same verdicts, field for field."""
    root = tmp_path / "data"
    write(root, "ok.jpg", synth.jpeg(16, 16))
    write(root, "cut.jpg", synth.truncate(synth.jpeg(64, 64), 0.5))
    write(root, "caf\udce9.png", synth.png(8, 8))  # a non-UTF-8 name
    rels = sorted(os.listdir(root))
    objects = [v for chunk in run_checks(str(root), [rels], CheckOptions(), 1, "processes") for v in chunk]
    (chunk,) = run_checks(str(root), [rels], CheckOptions(), 1, "processes", batches=True)
    assert chunk.batch.schema.equals(SCHEMA)
    back = [verdict_of_row(tuple(r.values())) for r in chunk.batch.to_pylist()]
    exact = (
        "path",
        "kind",
        "status",
        "reason",
        "detail",
        "size",
        "mtime_ns",
        "format",
        "width",
        "content_hash",
        "phash",
    )
    assert [[getattr(v, f) for f in exact] for v in back] == [[getattr(v, f) for f in exact] for v in objects]
    assert {v.status for v in back} == {"ok", "bad"} and all(v.phash is not None for v in back if v.status == "ok")
    # the facts' float32 columns hold what the results file always held: the float32 of the check's value
    assert [v.brightness or 0.0 for v in back] == pytest.approx([v.brightness or 0.0 for v in objects], rel=1e-6)
    assert verdicts_batch(objects).equals(chunk.batch)
    # what the main process needs without looking at each row: the rows not ok, the ok ones by kind, the bytes
    assert [back[i].path for i in chunk.not_ok] == ["cut.jpg"]
    assert chunk.ok_kinds == {"image": 2} and chunk.size == sum(v.size for v in objects)
    assert chunk_of(objects).batch.equals(chunk.batch) and chunk_of(objects)[1:] == chunk[1:]


def test_a_script_without_a_main_guard_scans_once(tmp_path):
    """Workers never re-run the caller's __main__ (multiprocessing's default would scan again in each)."""
    root = tmp_path / "data"
    for i in range(6):
        write(root, f"x/{i}.jpg", synth.jpeg(16, 16, seed=i))
    script = tmp_path / "scan_it.py"
    script.write_text(
        textwrap.dedent(f"""
        import dsclean
        print("STARTED", flush=True)
        s = dsclean.scan({str(root)!r}, dsclean.ScanOptions(jobs=2, dry_run=True, report_dir={str(tmp_path / "r")!r}))
        print("FILES", s.files, flush=True)
    """)
    )
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DSCLEAN_STATE_DIR": str(tmp_path / "state")},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["STARTED", "FILES", "6"]


def test_tasks_follow_the_mean_file_size(tmp_path):
    """Tiny files go many to a task, large ones few: every file is checked once either way."""
    root = tmp_path / "data"
    for i in range(40):
        write(root, f"s/{i}.jpg", synth.jpeg(8, 8, seed=i))
    s = dsclean.scan(
        str(root),
        dsclean.ScanOptions(jobs=2, dry_run=True, report_dir=str(tmp_path / "r"), chunk_bytes=2000, use_cache=False),
    )
    assert s.files == 40 and s.bad == 0
    paths = sorted(v.path for v in dsclean.iter_verdicts(str(tmp_path / "r")))
    assert paths == sorted(f"s/{i}.jpg" for i in range(40))


_KILLED_SCAN = """
import os, signal
from dsclean.scanning.check import CheckOptions
from dsclean.scanning.executors import local_pool
from dsclean.scanning.worker import check_chunk
pool = local_pool(2)
for f in [pool.submit(check_chunk, "/", [], CheckOptions()) for _ in range(4)]:
    f.result()
print(" ".join(str(p) for p in pool._processes), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # as kill -9 or the OOM killer would end a scan
"""


def test_workers_end_when_the_scan_process_is_killed():
    """A pool worker waits on its task queue forever; it must not outlive a killed scan."""
    import time

    out = subprocess.run([sys.executable, "-c", _KILLED_SCAN], capture_output=True, text=True, timeout=120)
    assert out.returncode == -9
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split(") ")[-1][0] != "Z"
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 30
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids)


def test_the_last_chunks_are_cut_so_no_worker_waits_on_a_whole_one():
    from dsclean.scanning.executors import _last_split

    chunks = [list(range(0, 10)), list(range(10, 20)), list(range(20, 27))]
    out = list(_last_split(iter(chunks), 4))
    assert out[0] == chunks[0]
    # the last two (one per worker of 2) as pieces of the files left / 4, in order: large first, down to one file
    assert [len(piece) for piece in out[1:]] == [5, 3, 3, 2, 1, 1, 1, 1]
    assert [x for piece in out[1:] for x in piece] == list(range(10, 27))
    assert list(_last_split(iter([[1, 2]]), 4)) == [[1], [2]]  # never an empty piece
    last = list(range(190))  # ~190 photo JPEGs to a task: pieces shrink from a quarter down to one file
    sizes = [len(p) for p in _last_split(iter([last]), 4)]
    assert sizes[0] == 48 and sizes == sorted(sizes, reverse=True) and sizes[-1] == 1
    assert [x for p in _last_split(iter([last]), 4) for x in p] == last
    assert list(_last_split(iter([]), 4)) == []
    assert list(_last_split(iter(chunks), 1)) == chunks  # one worker: nothing to balance


def test_two_workers_check_every_file_once_with_the_last_chunks_in_pieces(tmp_path):
    root = tmp_path / "data"
    rels = [f"{i}.jpg" for i in range(12)]
    for i, rel in enumerate(rels):
        write(root, rel, synth.jpeg(16, 16, seed=i))
    chunks = list(run_checks(str(root), [rels[:6], rels[6:]], CheckOptions(), 2, "processes"))
    assert sorted(len(c) for c in chunks) == [1, 1, 1, 1, 2, 3, 3]  # both chunks (one per worker) in pieces
    assert sorted(v.path for c in chunks for v in c) == sorted(rels)


def test_a_chunk_whose_worker_died_comes_back_as_one_batch_with_its_neighbours(tmp_path, monkeypatch):
    """A crash inside a chunk: the chunk is re-checked file by file, and still comes back as one Chunk
    whose rows, not-ok list and counts are right (the culprit named, the neighbours ok)."""
    root = tmp_path / "data"
    rels = ["a.jpg", "b__segfault__.jpg", "c.wav", "d.jpg"]
    write(root, "a.jpg", synth.jpeg(8, 8))
    write(root, "b__segfault__.jpg", synth.jpeg(8, 8, seed=1))
    write(root, "c.wav", synth.encode_audio(synth.tone(0.05), 16_000, "wav"))
    write(root, "d.jpg", synth.jpeg(8, 8, seed=2))
    monkeypatch.setenv(FAULT_ENV, "1")
    chunks = list(run_checks(str(root), [rels], CheckOptions(), 1, "processes", batches=True))
    assert len(chunks) == 1
    rows = chunks[0].batch.to_pylist()
    assert sorted(r["path"] for r in rows) == sorted(os.fsencode(r) for r in rels)
    by_path = {os.fsdecode(r["path"]): r for r in rows}
    assert (by_path["b__segfault__.jpg"]["status"], by_path["b__segfault__.jpg"]["reason"]) == ("bad", "decoder_crash")
    assert [rows[i]["path"] for i in chunks[0].not_ok] == [b"b__segfault__.jpg"]
    assert chunks[0].ok_kinds == {"image": 2, "audio": 1}
    assert chunks[0].size == sum(os.path.getsize(root / r) for r in rels)


_CEILING = """
import resource, sys
from dsclean.scanning.check import CheckOptions
from dsclean.scanning.worker import check_chunk
before = resource.getrlimit(resource.RLIMIT_AS)
check_chunk(sys.argv[1], ["a.jpg"], CheckOptions(max_memory=512 << 20))
print(before == resource.getrlimit(resource.RLIMIT_AS))
"""


def test_the_memory_ceiling_is_the_checks_and_lifted_for_the_batch(tmp_path):
    """check_chunk bounds the checks' memory, then restores the limit: the worker builds the chunk's
    Arrow batch (and the next chunk sets its own ceiling) outside it."""
    write(tmp_path, "a.jpg", synth.jpeg(8, 8))
    out = subprocess.run([sys.executable, "-c", _CEILING, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True"], out.stderr


def test_a_scan_that_lets_its_workers_go_leaves_none_and_a_next_scan_starts_new_ones(tmp_path):
    """keep_workers=False (the command's one scan): the pool is let go as the last verdicts come in, its
    workers end (stop_local_workers waits for them), and a later scan in the same process still works."""
    from dsclean.scanning import executors
    from dsclean.scanning.scanner import ScanOptions

    root = tmp_path / "data"
    for i in range(8):
        write(root, f"{i}.jpg", synth.jpeg(16, 16, seed=i))
    write(root, "cut.jpg", synth.truncate(synth.jpeg(64, 64), 0.5))
    options = ScanOptions(
        jobs=2, dry_run=True, rescan=True, state_dir=str(tmp_path / "s"), check=CheckOptions(facts=False)
    )
    try:
        kept = dsclean.scan(str(root), options)
        assert executors._local is not None  # the default keeps the pool for the next scan
        workers = list(executors._local[0]._processes.values())
        let_go = dsclean.scan(str(root), ScanOptions(**{**vars(options), "keep_workers": False}))
        assert executors._local is None and executors._leaving  # told to end, not yet waited for
        executors.stop_local_workers()
        assert not executors._leaving and all(w.exitcode is not None for w in workers)
        again = dsclean.scan(str(root), options)  # a new pool
        assert [s.bad_reasons for s in (kept, let_go, again)] == [{"truncated": 1}] * 3
        assert [s.files for s in (kept, let_go, again)] == [9] * 3
    finally:
        executors.stop_local_workers()


@pytest.mark.parametrize("in_flight", [True, False])
def test_a_pool_that_breaks_between_waits_loses_no_chunk(tmp_path, monkeypatch, in_flight):
    """A worker that dies while the scan is handing out tasks makes the next ``submit`` raise BrokenProcessPool
    at once (seen under load: the exception escaped the scan). The chunk must go back to the queue: with tasks
    in flight they fail as lost and are isolated; with none, a new pool takes the queue."""
    from concurrent.futures import Future, ThreadPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from dsclean.scanning import executors

    root = tmp_path / "data"
    rels = [f"{i}.jpg" for i in range(8)]
    for i, rel in enumerate(rels):
        write(root, rel, synth.jpeg(16, 16, seed=i))
    calls = {"submit": 0, "pools": 0}
    fail_at = 2 if in_flight else 1  # the 2nd submit (one task in flight), or the very first one

    class Breaking:
        def __init__(self, broken: bool):
            self.inner, self.broken = ThreadPoolExecutor(1), broken

        def submit(self, fn, *args):
            calls["submit"] += 1
            if self.broken and calls["submit"] == fail_at:
                for f in pending:  # the tasks in flight fail too, as a broken pool's do
                    if not f.done():
                        f.set_exception(BrokenProcessPool("a worker died"))
                raise BrokenProcessPool("A child process terminated abruptly")
            if self.broken and calls["submit"] > fail_at:
                raise BrokenProcessPool("still broken")
            if self.broken:
                f = Future()  # held until the pool "breaks"
                pending.append(f)
                return f
            return self.inner.submit(fn, *args)

    pending: list = []

    def fake_pool(backend, workers, scheduler=None, formats=None, facts=True):
        calls["pools"] += 1
        ex = Breaking(broken=calls["pools"] == 1)
        return executors.Pool(ex, executors.check_chunk_in_thread, 1, lambda: ex.inner.shutdown(wait=False))

    monkeypatch.setattr(executors, "make_pool", fake_pool)
    monkeypatch.setattr(
        executors,
        "isolate_chunks",
        lambda root, chunks, options, parallel=1: (executors.check_chunk(root, c, options) for c in chunks),
    )
    chunks = list(run_checks(str(root), [rels[:4], rels[4:]], CheckOptions(), 1, "processes"))
    assert sorted(v.path for c in chunks for v in c) == sorted(rels)  # every file once
    assert calls["pools"] == 2
