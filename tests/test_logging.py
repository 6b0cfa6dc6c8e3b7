"""Library code logs on the dsclean logger and never prints; the CLI prints the notes; index says a scan was cut."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import time

from support import synth
from support.files import write

from dsclean.cli import main


def _tree(root) -> None:
    for i in range(3):
        write(root, f"cats/{i}.jpg", synth.jpeg(16, 16, seed=i))
        write(root, f"dogs/{i}.png", synth.png(16, 16))


def test_from_folder_logs_its_notes_and_prints_nothing(tmp_path, caplog, capfd):
    from dsclean import IndexedDataset

    root = tmp_path / "data"
    _tree(root)
    with caplog.at_level(logging.WARNING, logger="dsclean"):
        ds = IndexedDataset.from_folder(str(root), jobs=1)
    assert len(ds) == 6
    notes = [r for r in caplog.records if r.name.startswith("dsclean")]
    assert any("was never scanned" in r.getMessage() for r in notes)
    assert all(r.levelno == logging.WARNING for r in notes)
    out, err = capfd.readouterr()  # the file descriptors too: nothing reached the terminal on its own
    assert out == "" and err == ""


def _rank(rank: int, root: str, state: str, err_path: str) -> None:
    """One DDP-like rank: its stderr goes to its own file; only rank 0 configures logging."""
    fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    if rank == 0:
        logging.basicConfig(level=logging.WARNING, format="rank0 %(name)s: %(message)s")
    from dsclean import IndexedDataset

    ds = IndexedDataset.from_folder(root, jobs=1, state_dir=state)
    assert len(ds) == 6
    sys.stderr.flush()


def test_two_ranks_print_only_what_their_logging_config_says(tmp_path):
    root = tmp_path / "data"
    _tree(root)
    ctx = multiprocessing.get_context("spawn")
    errs = [str(tmp_path / f"rank{r}.err") for r in (0, 1)]
    procs = [ctx.Process(target=_rank, args=(r, str(root), str(tmp_path / f"state{r}"), errs[r])) for r in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    said = [open(e).read() for e in errs]
    assert "rank0 dsclean.index: " in said[0] and "was never scanned" in said[0]
    assert said[1] == ""  # no handler configured: no note, not even Python's last-resort printing


def test_the_cli_prints_notes_and_quiet_hides_them(tmp_path, capsys):
    root = tmp_path / "data"
    _tree(root)
    assert main(["index", str(root), "-o", str(tmp_path / "a.arrow"), "--jobs", "1"]) == 0
    err = capsys.readouterr().err
    assert "note: " in err and "was never scanned" in err
    assert main(["index", str(root), "-o", str(tmp_path / "b.arrow"), "--jobs", "1", "-q"]) == 0
    assert capsys.readouterr() == ("", "")


def test_library_modules_never_print_notes():
    """Outside the CLI, stderr is written only by progress bars a caller asked for (progress=True)."""
    import re

    pkg = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "dsclean")
    offenders = []
    for dirpath, _, files in os.walk(pkg):
        if os.path.basename(dirpath) == "cli":
            continue
        for f in files:
            if f.endswith(".py"):
                text = open(os.path.join(dirpath, f), encoding="utf-8").read()
                offenders += [f"{f}: {m}" for m in re.findall(r'print\(f?"(?:note|warning|error): [^\n]*', text)]
    assert offenders == []


def test_index_after_an_interrupted_scan_says_so(tmp_path, capsys):
    root = tmp_path / "data"
    good = synth.jpeg(128, 128)
    # bad pages numbered, good JPEGs with a numbered tail: a scan of some seconds, over several tasks (a task is up
    # to 1,024 files or 4 MiB: the first moves come after the first task, while later ones are still unjudged)
    n = 3000
    for i in range(n):
        write(root, f"c/{i:04d}.jpg", synth.HTML_PAGE + str(i).encode() if i % 2 else good + str(i).encode())
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dsclean",
            "scan",
            str(root),
            "--quarantine",
            str(tmp_path / "q"),
            "--jobs",
            "1",
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    manifest = tmp_path / "q" / "manifest.jsonl"
    deadline = time.monotonic() + 60
    while not (manifest.exists() and manifest.stat().st_size > 0) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the scan finished before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    from dsclean import read_results

    judged = read_results(str(tmp_path / "q")).num_rows
    assert 0 < judged < n
    assert main(["index", str(root), "-o", str(tmp_path / "i.arrow"), "--no-check"]) == 0
    err = capsys.readouterr().err
    assert (
        f"note: the last scan of {root} was interrupted after {judged:,} files: the files it did not reach are "
        f"checked here; run dsclean scan {root} to finish it"
    ) in err
    assert main(["scan", str(root), "--quarantine", str(tmp_path / "q"), "--quiet", "--jobs", "1"]) == 0
    capsys.readouterr()
    assert main(["index", str(root), "-o", str(tmp_path / "j.arrow"), "--no-check"]) == 0
    assert "interrupted" not in capsys.readouterr().err  # the finished scan is the last one now
