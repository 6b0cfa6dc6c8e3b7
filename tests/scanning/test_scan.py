"""The scan end to end, through the Python API and the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
from support import synth
from support.files import write
from support.fixtures.cli import run_cli
from support.treegen import contents, tree_state

import dsclean
from dsclean.scanning.scanner import ScanOptions, format_summary, scan


def test_scan_quarantines_exactly_the_bad_files(tree, tmp_path):
    root, expected = tree
    qdir = tmp_path / "bad"
    s = scan(str(root), ScanOptions(quarantine=str(qdir), jobs=2, chunk_size=2))
    assert s.files == len(expected) and s.bad == 6 and s.quarantined == 6
    assert s.counts["image"] == {"ok": 6, "bad": 6}
    assert s.bad_reasons == {"truncated": 2, "not_media": 2, "corrupt": 2}
    remaining = set(tree_state(root))
    assert remaining == {p for p, st in expected.items() if st == "ok"}
    assert {p for p in tree_state(qdir)} == {p for p, st in expected.items() if st == "bad"}
    # results: every file, with its verdict; problems: only the bad ones, with where they went
    table = dsclean.read_results(str(qdir))
    rows = {os.fsdecode(p): st for p, st in zip(table["path"].to_pylist(), table["status"].to_pylist())}
    assert rows == expected
    problems = dsclean.read_problems(str(qdir))
    assert {p["path"] for p in problems} == {p for p, st in expected.items() if st == "bad"}
    assert all(p["quarantined_as"] == p["path"] for p in problems)
    summary = json.loads((qdir / "scan_summary.json").read_text())
    assert summary["bad"] == 6 and summary["files"] == 12


def test_jobs_do_not_change_verdicts(tree, tmp_path):
    root, _ = tree
    verdicts = []
    for jobs in (1, 2):
        scan(str(root), ScanOptions(jobs=jobs, report_dir=str(tmp_path / f"r{jobs}"), chunk_size=3))
        t = dsclean.read_results(str(tmp_path / f"r{jobs}")).sort_by("path").drop_columns(["mtime_ns"])
        verdicts.append(t.to_pylist())
    assert verdicts[0] == verdicts[1]


def test_dry_run_moves_nothing(tree, tmp_path):
    root, _ = tree
    before = tree_state(root)
    s = scan(str(root), ScanOptions(quarantine=str(tmp_path / "q"), dry_run=True))
    assert s.would_quarantine == 6 and s.quarantined == 0
    assert tree_state(root) == before and not (tmp_path / "q").exists()
    assert "Would quarantine 6 bad files (dry run: nothing moved)" in format_summary(s)
    assert os.path.exists(os.path.join(s.state_dir, "scan_results.parquet"))  # the root's state folder
    assert not s.state_dir.startswith(str(root)) and not (root / ".dsclean").exists()


def test_results_are_found_from_the_root(tree, tmp_path):
    root, _ = tree
    scan(str(root), ScanOptions(quarantine=str(tmp_path / "q")))
    from dsclean.locations import find_scan_results

    assert find_scan_results(str(root)) == str(tmp_path / "q" / "scan_results.parquet")


def test_discovery_rules(tmp_path):
    root = tmp_path / "data"
    write(root, "a/good.JPG", synth.jpeg(8, 8))  # extension case does not matter
    write(root, "a/notes.txt", b"hello")  # not media: counted, not checked
    write(root, ".hidden/x.jpg", b"junk")  # hidden folder: skipped
    write(root, "a/.x.jpg", b"junk")  # hidden file: skipped
    os.symlink(root / "a" / "good.JPG", root / "a" / "link.jpg")  # not followed
    write(tmp_path, "outside/evil.jpg", b"junk")
    os.symlink(tmp_path / "outside", root / "out")
    inner_q = root / "q"
    s = scan(str(root), ScanOptions(quarantine=str(inner_q), jobs=1, allow_inside_root=True))
    assert s.files == 1 and s.bad == 0
    d = s.discovery
    assert (d.ignored, d.hidden, d.symlinks) == (1, 2, 2)
    # A second scan does not look inside the quarantine that now sits inside the root.
    write(root, "b/bad.jpg", synth.HTML_PAGE)
    scan(str(root), ScanOptions(quarantine=str(inner_q), jobs=1, allow_inside_root=True))
    s = scan(str(root), ScanOptions(quarantine=str(inner_q), jobs=1, allow_inside_root=True))
    assert s.files == 1 and s.discovery.excluded_dirs == 1  # the quarantine


def test_follow_symlinks_stays_inside_and_never_loops(tmp_path):
    root = tmp_path / "data"
    write(root, "a/good.jpg", synth.jpeg(8, 8))
    os.symlink(root / "a", root / "alias")  # inside: followed
    os.symlink(root, root / "a" / "loop")  # a loop back to the root
    write(tmp_path, "outside/x.jpg", synth.jpeg(8, 8))
    os.symlink(tmp_path / "outside", root / "out")  # escapes: never followed
    os.symlink(root / "missing.jpg", root / "broken.jpg")
    s = scan(str(root), ScanOptions(follow_symlinks=True, jobs=1, report_dir=str(tmp_path / "r")))
    verdicts = {v.path: v for v in dsclean.iter_verdicts(str(tmp_path / "r"))}
    assert "a/good.jpg" in verdicts and not any(p.startswith("out/") for p in verdicts)
    assert verdicts["broken.jpg"].reason == "unreadable"
    assert s.files <= 3


def test_non_utf8_and_odd_names(tmp_path):
    root, qdir = tmp_path / "data", tmp_path / "q"
    odd = [
        b"cls/caf\xe9.jpg",
        b"cls/new\nline.jpg",
        b"cls/-rf.jpg",
        "cls/e\u0301.jpg".encode(),
        "cls/\u00e9.jpg".encode(),
    ]
    for i, name in enumerate(odd):
        write(root, name, synth.HTML_PAGE + bytes([i]))
    write(root, b"cls/ok\xff.png", synth.png(8, 8))
    before = tree_state(root)
    s = scan(str(root), ScanOptions(quarantine=str(qdir)))
    assert s.files == 6 and s.quarantined == 5
    table = pq.read_table(qdir / "scan_results.parquet")
    assert set(table["path"].to_pylist()) == set(odd) | {b"cls/ok\xff.png"}
    problems = dsclean.read_problems(str(qdir))
    assert {os.fsencode(p["path"]) for p in problems} == set(odd)
    dsclean.restore(str(qdir))
    assert tree_state(root) == before


def test_stderr_of_decoders_stays_out_of_the_terminal(tmp_path):
    root = tmp_path / "data"
    tiff = synth.encode_image(synth.photo_like(40, 40), "TIFF")
    write(root, "t.tif", tiff[: len(tiff) // 3] + tiff[-200:])  # Pillow prints "Corrupt EXIF data" warnings
    proc = run_cli("scan", root, "--quiet", "--jobs", "1")
    assert proc.returncode == 0 and proc.stderr == ""
    from dsclean.locations import root_state_dir

    v = next(dsclean.iter_verdicts(root_state_dir(str(root))))
    assert v.status == "bad"


# ---- CLI ------------------------------------------------------------------------------------


def test_cli_scan_summary_and_exit_codes(tree, tmp_path):
    root, _ = tree
    proc = run_cli("scan", root, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "Scanned 12 files" in proc.stdout and "not_media" in proc.stdout and "files/s" in proc.stdout
    assert run_cli("scan", root, "--dry-run", "--check", "--quiet").returncode == 1
    out = run_cli("scan", root, "--dry-run", "--json")
    assert json.loads(out.stdout)["bad"] == 6


def test_cli_check_passes_on_a_clean_tree(tmp_path):
    write(tmp_path / "d", "a.jpg", synth.jpeg(8, 8))
    assert run_cli("scan", tmp_path / "d", "--check", "--quiet").returncode == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["scan", "{tmp}/missing"], "does not exist"),
        (["scan", "{tmp}/afile"], "is a file, not a folder"),
        (["scan", "{tmp}/d", "--quarantine", "{tmp}/afile/q"], "not writable"),
        (["scan", "{tmp}/d", "--jobs", "many"], "not a whole number"),
        (["restore", "{tmp}/d"], "not a dsclean quarantine folder"),
    ],
)
def test_cli_user_errors_are_clear_and_exit_2(tmp_path, args, message):
    (tmp_path / "afile").write_text("x")
    write(tmp_path / "d", "a.jpg", synth.jpeg(8, 8))
    proc = run_cli(*[a.format(tmp=tmp_path) for a in args])
    assert proc.returncode == 2 and message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_second_scan_into_the_same_quarantine_is_refused(tree, tmp_path):
    root, _ = tree
    from dsclean.scanning.quarantine.moves import Quarantine

    with Quarantine(str(tmp_path / "q"), str(root)):
        proc = run_cli("scan", root, "--quarantine", tmp_path / "q")
    assert proc.returncode == 2 and "in use by another dsclean process" in proc.stderr


def test_cli_restore_round_trip(tree, tmp_path):
    root, _ = tree
    before = tree_state(root)
    assert run_cli("scan", root, "--quarantine", tmp_path / "q", "--quiet").returncode == 0
    assert tree_state(root) != before
    proc = run_cli("restore", tmp_path / "q")
    assert proc.returncode == 0 and "6 restored" in proc.stdout
    assert tree_state(root) == before


def test_cli_lists_reason_codes():
    out = run_cli("reasons").stdout
    for code in dsclean.REASONS:
        assert code in out


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_cli_interrupt_flushes_results(tmp_path, sig, code):
    root = tmp_path / "data"
    good = synth.jpeg(256, 256)
    for i in range(2000):  # unique bytes: bad pages numbered, good JPEGs with a numbered tail after EOI
        write(root, f"c/{i}.jpg", synth.HTML_PAGE + str(i).encode() if i % 2 else good + str(i).encode())
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
    deadline = time.time() + 60
    manifest = tmp_path / "q" / "manifest.jsonl"
    # the journal file is created when the quarantine opens; wait for the first journaled move
    while not (manifest.exists() and manifest.stat().st_size > 0) and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    assert proc.poll() is None, "scan finished before it could be interrupted"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    table = dsclean.read_results(str(tmp_path / "q"))
    assert 0 < table.num_rows < 2000
    assert len(contents(root, tmp_path / "q")) == 2000
    moved = sum(1 for _ in (tmp_path / "q" / "c").iterdir())
    assert moved == sum(1 for s in table["status"].to_pylist() if s == "bad")


def test_kill_9_mid_scan_loses_nothing_and_next_run_recovers(tmp_path):
    root, qdir = tmp_path / "data", tmp_path / "q"
    for i in range(300):
        write(root, f"c/{i}.jpg", synth.HTML_PAGE + str(i).encode() if i % 2 else synth.jpeg(32, 32, seed=i))
    original = sorted(tree_state(root).values())
    for delay in (0.5, 0.9, 1.3):
        proc = subprocess.Popen(
            [sys.executable, "-m", "dsclean", "scan", str(root), "--quarantine", str(qdir), "--jobs", "2", "--quiet"]
        )
        time.sleep(delay)
        proc.kill()
        proc.wait()
        assert set(contents(root, qdir)) == set(original)
    assert run_cli("scan", root, "--quarantine", qdir, "--quiet").returncode == 0
    assert contents(root, qdir) == original
    assert len(tree_state(root)) == 150
    assert run_cli("restore", qdir).returncode == 0
    assert sorted(tree_state(root).values()) == original


def test_permission_denied_files_and_folders_as_an_unprivileged_user(tmp_path):
    """Run the scan as 'nobody' so permission errors are real even when the suite runs as root."""
    import shutil
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root to switch to an unprivileged user")
    base = tempfile.mkdtemp(prefix="dsclean-perm-")
    try:
        os.chmod(base, 0o777)
        root = os.path.join(base, "data")
        write(root, "ok.jpg", synth.jpeg(8, 8))
        write(root, "locked.jpg", synth.jpeg(8, 8))
        write(root, "closed/x.jpg", synth.jpeg(8, 8))
        for d, _, files in os.walk(root):
            os.chmod(d, 0o777)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)
        os.chmod(os.path.join(root, "locked.jpg"), 0)
        os.chmod(os.path.join(root, "closed"), 0)
        report = os.path.join(base, "report")
        # The interpreter and the checkout may be where 'nobody' cannot read (under /root, a 0700 temp folder), so
        # everything the scan imports is imported as root first: a scan of one good file (the same command), then
        # the drop to 'nobody' and the real scan.
        warm = os.path.join(base, "warm")
        write(warm, "ok.jpg", synth.jpeg(8, 8))
        drop = (
            "import os, sys, PIL.Image, pyarrow.parquet, joblib, concurrent.futures.thread, dsclean.cli\n"
            "PIL.Image.init()\n"
            f"warm = [{warm!r} if a == sys.argv[2] else {os.path.join(base, 'warm-report')!r} "
            "if a == sys.argv[4] else a for a in sys.argv[1:]]\n"
            "assert dsclean.cli.main(warm) == 0\n"
            "os.setgid(65534); os.setuid(65534)\n"
            "sys.exit(dsclean.cli.main(sys.argv[1:]))\n"
        )
        # Threads: loky would start new interpreters, which 'nobody' may not execute from /root.
        proc = subprocess.run(
            [sys.executable, "-c", drop, "scan", root, "--report", report, "--backend", "threads"],
            capture_output=True,
            text=True,
            cwd=base,
        )
        assert proc.returncode == 0, proc.stderr
        assert "1 unreadable folders" in proc.stdout and "closed" in proc.stdout
        verdicts = {v.path: v for v in dsclean.iter_verdicts(report)}
        assert verdicts["locked.jpg"].reason == "unreadable" and "Permission denied" in verdicts["locked.jpg"].detail
        assert verdicts["ok.jpg"].status == "ok"
    finally:
        for d, dirs, _ in os.walk(base):
            for x in dirs:
                os.chmod(os.path.join(d, x), 0o755)
        shutil.rmtree(base)


def test_threads_backend_gives_the_same_verdicts(tree, tmp_path):
    root, _ = tree
    rows = []
    for backend in ("loky", "threads"):
        scan(str(root), ScanOptions(backend=backend, jobs=2, report_dir=str(tmp_path / backend), use_cache=False))
        rows.append(dsclean.read_results(str(tmp_path / backend)).sort_by("path").drop_columns(["detail"]).to_pylist())
    assert rows[0] == rows[1]


def test_progress_bar_counts_files_and_bad_ones(tree, tmp_path, capsys):
    root, _ = tree
    scan(str(root), ScanOptions(progress=True, jobs=1, report_dir=str(tmp_path / "r")))
    err = capsys.readouterr().err
    assert "checking" in err and "12" in err and "bad=6" in err


def test_very_long_names_are_scanned_and_quarantined(tmp_path):
    root, qdir = tmp_path / "data", tmp_path / "q"
    name = "d/" + "x" * 250 + ".jpg"  # 254 bytes: at the usual 255-byte limit for one name
    write(root, name, synth.HTML_PAGE)
    s = scan(str(root), ScanOptions(quarantine=str(qdir), jobs=1))
    assert s.quarantined == 1 and (qdir / name).exists()
    assert dsclean.restore(str(qdir)).restored == 1 and (root / name).exists()


def test_a_failed_scan_keeps_the_previous_results(tree, tmp_path):
    root, _ = tree
    first = scan(str(root), ScanOptions(jobs=1, report_dir=str(tmp_path / "r")))
    before = dsclean.read_results(str(tmp_path / "r")).num_rows
    proc = run_cli("scan", root, "--report", tmp_path / "r", "--timeout", "inf")
    assert proc.returncode == 2 and "--timeout" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("scan", root, "--report", tmp_path / "r", "--backend", "dask")
    assert proc.returncode == 2 and "needs --scheduler" in proc.stderr
    assert dsclean.read_results(str(tmp_path / "r")).num_rows == before == first.files
    assert not list((tmp_path / "r").glob(".*.tmp"))


def test_restore_reports_an_entry_it_cannot_move_and_goes_on(tmp_path):
    root, qdir = tmp_path / "data", tmp_path / "q"
    write(root, "cats/a.jpg", synth.HTML_PAGE + b"a")
    write(root, "dogs/b.jpg", synth.HTML_PAGE + b"b")
    scan(str(root), ScanOptions(quarantine=str(qdir), jobs=1))
    os.rmdir(root / "cats")
    (root / "cats").write_text("a file where the folder was")
    proc = run_cli("restore", qdir)
    # a move back that failed: incomplete (exit 3), listed, and the rest still done
    assert proc.returncode == 3 and "could not restore" in proc.stderr and "Traceback" not in proc.stderr
    assert "1 FAILED" in proc.stdout
    assert (root / "dogs" / "b.jpg").exists()  # the other entry was still restored


def test_discovery_lists_are_bounded_and_equal_the_file_stream(tmp_path, monkeypatch):
    """The scan takes discovery a folder at a time, at most LIST_MAX names per list (a flat folder of
    millions stays bounded); the lists hold exactly what iter_media yields, formats included."""
    from dsclean.scanning import discover

    monkeypatch.setattr(discover, "LIST_MAX", 7)
    for i in range(20):
        write(tmp_path / "d", f"big/{i:02d}.JPG", b"x")
    write(tmp_path / "d", "small/a.flac", b"x")
    write(tmp_path / "d", "small/notes.txt", b"x")
    write(tmp_path / "d", "small/.hidden.png", b"x")
    stats = discover.DiscoverStats()
    lists = list(discover.iter_media_lists(str(tmp_path / "d"), stats=stats))
    assert sorted(len(rels) for rels, _ in lists) == [1, 6, 7, 7]
    flat = sorted(pair for rels, formats in lists for pair in zip(rels, formats))
    assert flat == sorted(discover.iter_media(str(tmp_path / "d")))
    assert ("small/a.flac", "flac") in flat and ("big/00.JPG", "jpeg") in flat
    assert (stats.media, stats.ignored, stats.hidden) == (21, 1, 1)


def test_discovery_blocks_of_plain_files_follow_every_rule(tmp_path, monkeypatch):
    """A block of regular files takes the list-pass path, any other block the entry-by-entry one: both
    apply the same rules (names without an extension or with a leading dot, upper case, double extensions,
    a legacy state name in the root, a link among files), with the same counts."""
    from dsclean.scanning import discover

    monkeypatch.setattr(discover, "LIST_MAX", 4)
    root = tmp_path / "d"
    names = ["a.JPG", "jpg", "b.tar.png", ".x.jpg", "noext", "c.txt", "d.Wav", "e.", "f.jpeg"]
    for name in names:
        write(root, f"plain/{name}", b"x")  # regular files only: blocks of 4, 4 and 1
        write(root, f"mixed/{name}", b"x")
    write(root, "mixed/sub/g.png", b"x")  # a folder in the block: entry by entry
    os.symlink(root / "plain" / "a.JPG", root / "mixed" / "link.jpg")
    write(root, ".dsclean", b"x")  # a legacy state name in the root (a file here): excluded, not hidden
    write(root, "top.flac", b"x")
    for name in ["h.png", "i.tar.png", ".j.png", "kpng"]:  # one extension, but a hidden name and a name without a dot
        write(root, f"one/{name}", b"x")
    for name in ["l.png", ".m.png", "n.png"]:  # one extension and a hidden name: the one-extension pass
        write(root, f"two/{name}", b"x")
    stats = discover.DiscoverStats()
    flat = sorted(
        pair for rels, formats in discover.iter_media_lists(str(root), stats=stats) for pair in zip(rels, formats)
    )
    media = [("a.JPG", "jpeg"), ("b.tar.png", "png"), ("d.Wav", "wav"), ("f.jpeg", "jpeg")]
    assert flat == sorted(
        [
            *((f"plain/{n}", f) for n, f in media),
            *((f"mixed/{n}", f) for n, f in media),
            ("mixed/sub/g.png", "png"),
            ("top.flac", "flac"),
            ("one/h.png", "png"),
            ("one/i.tar.png", "png"),
            ("two/l.png", "png"),
            ("two/n.png", "png"),
        ]
    )
    assert (stats.media, stats.hidden, stats.ignored, stats.symlinks, stats.excluded_dirs) == (14, 4, 9, 1, 1)


def test_summary_counts_agree_with_the_results_file(tmp_path):
    """The scan counts fresh verdicts from its workers' batches (ok rows by kind, not-ok rows one by one):
    the summary must say what the results file holds, per kind and status, and the bytes."""
    root = tmp_path / "data"
    for i in range(30):
        write(root, f"i/{i}.jpg", synth.jpeg(16, 16, seed=i))
    for i in range(5):
        write(root, f"a/{i}.wav", synth.encode_audio(synth.tone(0.05, seed=i), 16_000, "wav"))
    write(root, "i/cut.jpg", synth.truncate(synth.jpeg(64, 64), 0.5))
    write(root, "a/cut.wav", synth.truncate(synth.encode_audio(synth.tone(0.2), 16_000, "wav"), 0.5))
    write(root, "i/page.png", synth.HTML_PAGE)
    s = scan(
        str(root),
        ScanOptions(jobs=2, dry_run=True, report_dir=str(tmp_path / "r"), chunk_size=4, state_dir=str(tmp_path / "st")),
    )
    table = dsclean.read_results(str(tmp_path / "r"))
    counts: dict = {}
    for kind, status in zip(table["kind"].to_pylist(), table["status"].to_pylist()):
        counts.setdefault(kind, {}).setdefault(status, 0)
        counts[kind][status] += 1
    assert s.counts == counts and s.files == table.num_rows == 38
    assert s.counts["image"]["ok"] == 30 and s.counts["audio"]["ok"] == 5
    assert (
        s.bytes == s.checked_bytes == sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
    )
    assert s.bad == sum(n for kind in counts.values() for st, n in kind.items() if st == "bad")


def test_problems_lines_of_non_utf8_names_carry_the_exact_bytes_in_every_run(tmp_path):
    """The run that finds a file writes path_b64 too (not only the lines carried over from earlier runs)."""
    import base64

    root, q = tmp_path / "data", tmp_path / "q"
    (root / "a").mkdir(parents=True)
    bad, warn = os.path.join(os.fsencode(root), b"a/bad\xff.jpg"), os.path.join(os.fsencode(root), b"a/warn\xfe.jpg")
    with open(bad, "wb") as f:
        f.write(synth.truncate(synth.jpeg(24, 24, seed=3), 0.5))
    with open(warn, "wb") as f:
        f.write(synth.png(8, 8))  # a PNG named .jpg: warn, kept
    for _ in range(2):  # the finding run, then a run that carries the moved file's line over
        scan(str(root), ScanOptions(quarantine=str(q), jobs=1))
        lines = [json.loads(line) for line in open(q / "problems.jsonl", encoding="utf-8")]
        assert sorted(base64.b64decode(x["path_b64"]) for x in lines) == [b"a/bad\xff.jpg", b"a/warn\xfe.jpg"]


def test_counts_follow_a_flagged_file_replaced_before_its_move(tmp_path, monkeypatch):
    """ok for the worker, warn/changed once its move finds it replaced: the summary counts what the results say."""
    from PIL import Image

    from dsclean.scanning.quarantine import moves as q

    root = tmp_path / "data"
    root.mkdir()
    Image.new("RGB", (16, 16), (120, 30, 200)).save(root / "tiny.png")  # flagged tiny
    write(root, "big.jpg", synth.jpeg(96, 96))

    def move(self, rel, *a, **k):  # as if the file were replaced between its check and its move
        raise q.ChangedError(rel, "size")

    monkeypatch.setattr(q.Quarantine, "move", move)
    s = scan(str(root), ScanOptions(quarantine=str(tmp_path / "q"), quarantine_flags=("tiny",), jobs=1))
    rows = {r["path"]: r["status"] for r in pq.read_table(s.results_path, columns=["path", "status"]).to_pylist()}
    assert rows == {b"tiny.png": "warn", b"big.jpg": "ok"}
    assert s.counts == {"image": {"ok": 1, "warn": 1}} and s.warn_reasons == {"changed": 1}
