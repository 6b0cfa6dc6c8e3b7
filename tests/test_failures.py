"""The training-time failure log: per-process files, whole-line appends, a tolerant reader."""

from __future__ import annotations

import os
import subprocess
import sys

from dsclean.failures import FailureWriter, failure_line, log_files, process_log_path, read_failures


def test_each_process_writes_its_own_file_and_the_reader_merges_them(tmp_path):
    log = tmp_path / "runs" / "failures.jsonl"
    a = FailureWriter(process_log_path(log, rank=0, worker=0))
    b = FailureWriter(process_log_path(log, rank=1, worker=None))
    a.write(kind="exception", index=3, path="cats/a.jpg", error="OSError", message="image file is truncated")
    b.write(kind="worker_died", index=7, error="SIGSEGV", message="killed by signal")
    got = read_failures(log)
    assert sorted(os.path.basename(f) for f in got.files) == [
        "failures.rank0.worker0.jsonl",
        "failures.rank1.main.jsonl",
    ]
    assert [(r["index"], r["kind"]) for r in got.failures] == [(3, "exception"), (7, "worker_died")]
    assert got.failures[0]["path"] == "cats/a.jpg" and got.damaged_lines == got.torn_lines == 0


def test_a_torn_last_line_and_garbage_are_counted_not_raised(tmp_path):
    log = tmp_path / "f.jsonl"
    good = failure_line(kind="exception", index=1, error="ValueError", message="x")
    path = process_log_path(log, rank=0, worker=1)
    with open(path, "wb") as f:
        f.write(good + b"not json\n" + b"[1, 2]\n" + b"x" * 70000 + b"\n" + good + good[:-10])
    got = read_failures(log)
    assert len(got.failures) == 2 and got.damaged_lines == 3 and got.torn_lines == 1


def test_a_non_utf8_path_survives_the_round_trip(tmp_path):
    log = tmp_path / "f.jsonl"
    name = os.fsdecode(b"caf\xe9.jpg")
    FailureWriter(process_log_path(log, rank=0, worker=None)).write(kind="exception", path=name, error="E")
    rec = read_failures(log).failures[0]
    assert "path_b64" in rec and os.fsencode(rec["path"]) == b"caf\xe9.jpg"


def test_a_fifo_beside_the_log_is_refused_without_blocking(tmp_path):
    log = tmp_path / "f.jsonl"
    os.mkfifo(process_log_path(log, rank=0, worker=2))
    code = (
        "import sys; from dsclean.failures import read_failures; "
        f"r = read_failures({str(log)!r}); print(len(r.refused), len(r.failures))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == ["1", "0"], out.stderr


def test_the_limit_bounds_what_is_kept_but_not_what_is_counted(tmp_path):
    log = tmp_path / "f.jsonl"
    w = FailureWriter(process_log_path(log, rank=0, worker=0))
    for i in range(50):
        w.write(kind="exception", index=i, error="E")
    got = read_failures(log, limit=5)
    assert len(got.failures) == 5 and len(log_files(log)) == 1


def test_a_writer_pickled_into_a_child_reopens_there(tmp_path):
    import pickle

    log = tmp_path / "f.jsonl"
    w = FailureWriter(process_log_path(log, rank=0, worker=0))
    w.write(kind="exception", index=0, error="E")
    clone = pickle.loads(pickle.dumps(w))
    clone.write(kind="exception", index=1, error="E")
    assert [r["index"] for r in read_failures(log).failures] == [0, 1]
