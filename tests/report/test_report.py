"""dsclean report end to end on a real scan: galleries, thumbnails, safety, options, errors."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from support import synth
from support.files import write
from support.fixtures.cli import run_cli
from support.reportpage import by_path, cards, sections
from support.reporttree import HOSTILE_JPG, HOSTILE_PNG, facts_results

from dsclean.report.build import ReportOptions, write_report
from dsclean.report.collect import Caps
from dsclean.report.safe import display


def tree_state(root) -> dict[str, bytes]:
    """{path: bytes} of every file under root (the dataset must not change)."""
    return {
        os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
        for d, _, files in os.walk(root)
        for f in files
    }


def red_pixels(img) -> np.ndarray:
    a = np.asarray(img.convert("RGB")).astype(int)
    return (a[..., 0] > 170) & (a[..., 1] < 90) & (a[..., 2] < 100)


@pytest.fixture(scope="module")
def page(scanned, tmp_path_factory):
    out = tmp_path_factory.mktemp("page") / "report.html"
    summary = write_report(str(scanned.root), str(out), ReportOptions(jobs=2, command=("dsclean", "report", "x")))
    return summary, out.read_text(encoding="utf-8")


def test_every_problem_is_shown_under_its_reason(scanned, page):
    summary, html = page
    shown = by_path(sections(html)["reasons"])
    problems = {p: sr for p, sr in scanned.expected.items() if sr[0] != "ok"}
    assert summary.problems == len(problems) == 13 and summary.failed == 0
    for path, (status, reason) in problems.items():
        card = shown[display(path)]
        assert card.status == status and f">{reason}</span>" in card.rest, (path, card)


def test_cut_images_show_what_decodes_with_the_cut_marked(page):
    _, html = page
    shown = by_path(sections(html)["reasons"])
    for path, cut_at_top in [
        ("cats/cut.jpg", False),
        ("dogs/cut.png", False),
        ("dogs/cut.bmp", True),
        (HOSTILE_JPG, False),
    ]:
        img = shown[path].image()
        assert max(img.size) <= 128 and img.format == "JPEG"
        red_rows = np.flatnonzero(red_pixels(img).mean(axis=1) > 0.9)  # the cut: a full-width red line
        assert len(red_rows), path
        line = red_rows[0] / img.height
        assert (0.05 < line < 0.8) if cut_at_top else (0.2 < line < 0.95), (path, line)
        assert "red line" in shown[path].rest
    wave = shown["audio/cut.wav"].image()
    assert wave.format == "PNG"
    red_cols = np.flatnonzero(red_pixels(wave).mean(axis=0) > 0.9)
    assert len(red_cols) and 0.4 < red_cols[0] / wave.width < 0.6  # half the bytes: cut half way
    assert "50% of the 16,000 frames" in shown["audio/cut.wav"].rest


def test_undecodable_files_get_placeholders_saying_why(page):
    _, html = page
    shown = by_path(sections(html)["reasons"])
    assert "not media" in shown["cats/page.jpg"].placeholder
    assert "empty" in shown["cats/empty.jpg"].placeholder
    assert "more pixels than the limit" in shown["dogs/bomb.png"].placeholder
    assert shown[HOSTILE_PNG].placeholder  # the CRC break sits in the first bytes of pixel data


def test_thumbnails_are_reencoded_never_the_files_bytes(scanned, page):
    _, html = page
    for card in cards(html):
        if card.src is None:
            continue
        for folder in (scanned.root, scanned.quarantine):
            candidate = os.path.join(folder, card.path)
            if os.path.isfile(candidate):
                original = open(candidate, "rb").read()
                assert card.raw() != original
                assert base64.b64encode(original[:300]).decode() not in html


def test_quarantined_files_are_found_through_the_journal(scanned, page):
    _, html = page
    assert not (scanned.root / "cats/cut.jpg").exists() and (scanned.quarantine / "cats/cut.jpg").exists()
    assert by_path(sections(html)["reasons"])["cats/cut.jpg"].src  # read from the quarantine


def test_hostile_names_are_text_and_no_machine_path_leaks(scanned, page, tmp_path):
    _, html = page
    assert "<img src=x" not in html and "<svg onload" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;.jpg" in html
    assert str(scanned.base) not in html and os.path.expanduser("~") + "/" not in html
    assert "dsclean scan ROOT --quarantine QUARANTINE" in html  # the scan's command line, scrubbed
    out = tmp_path / "abs.html"
    write_report(str(scanned.root), str(out), ReportOptions(absolute_paths=True, jobs=2))
    assert str(scanned.root) in out.read_text(encoding="utf-8")


def test_sections_without_their_facts_are_left_out(scanned, page, tmp_path):
    _, html = page
    found = sections(html)
    assert {"summary", "reasons", "composition", "problems", "quality"} <= set(found)  # the scan records facts
    # the same tree scanned with --facts none (a dry run: the tree stays as the other tests expect it)
    from dsclean.scanning.check import CheckOptions
    from dsclean.scanning.scanner import ScanOptions, scan

    scan(
        str(scanned.root),
        ScanOptions(
            dry_run=True,
            report_dir=str(tmp_path / "r"),
            state_dir=str(tmp_path / "s"),
            check=CheckOptions(facts=False),
            jobs=2,
        ),
    )
    write_report(str(tmp_path / "r"), str(tmp_path / "none.html"), ReportOptions(jobs=2))
    found = sections((tmp_path / "none.html").read_text(encoding="utf-8"))
    assert "quality" not in found and "duplicates" not in found  # no quality facts, no content hashes...
    assert "The scan ran with --facts none" in found["summary"]  # ...and the page says why, and what to do
    assert "--facts all" in found["summary"]
    comp = found["composition"]
    assert "Files per class" in comp and "Image resolution" in comp and "Audio duration" in comp
    assert "Audio sample rate" in comp and "1 files sit directly in the root" in comp


def test_no_thumbnails_means_no_picture_at_all(scanned, tmp_path):
    out = tmp_path / "r.html"
    s = write_report(str(scanned.root), str(out), ReportOptions(thumbnails=False))
    html = out.read_text(encoding="utf-8")
    assert "data:image" not in html and s.thumbnails == 0
    assert all(c.placeholder for c in cards(html))


def test_caps_keep_counts_of_the_rest(scanned, tmp_path):
    out = tmp_path / "r.html"
    write_report(str(scanned.root), str(out), ReportOptions(caps=Caps(per_reason=2, table=3), jobs=2))
    html = out.read_text(encoding="utf-8")
    truncated = sections(html)["reasons"].split('id="bad-truncated"')[1].split("<h3")[0]
    assert len(cards(truncated)) == 2
    assert "Showing 2 of 7" in truncated and 'data-show-reason="truncated"' in truncated
    rows = json.loads(html.split('id="problems-data">')[1].split("</script>")[0])["rows"]
    assert len(rows) == 3 and "first 3 of 13 problems" in html


def test_results_folder_or_file_instead_of_the_root(scanned, tmp_path):
    for target in (scanned.quarantine, scanned.quarantine / "scan_results.parquet"):
        out = tmp_path / "r.html"
        s = write_report(str(target), str(out), ReportOptions(thumbnails=False))
        assert s.problems == 13 and s.files == len(scanned.expected)


def test_facts_sections_appear_with_their_columns(scanned, tmp_path):
    results = facts_results(scanned, tmp_path / "results")
    out = tmp_path / "r.html"
    write_report(str(results), str(out), ReportOptions(jobs=2))
    found = sections(out.read_text(encoding="utf-8"))
    quality = found["quality"]
    darkest = cards(quality.split('id="outlier-brightness-low"')[1].split("<h3")[0])
    assert darkest[0].path == "birds/dark.jpg" and darkest[0].src and "brightness 0.02" in darkest[0].rest
    clipped = cards(quality.split('id="outlier-clipped-high"')[1].split("<h3")[0])
    assert clipped[0].path == "audio/loud.flac" and clipped[0].image().format == "PNG"
    assert [c.path for c in cards(quality.split('id="flag-dark"')[1].split("<h3")[0])] == ["birds/dark.jpg"]
    groups = found["duplicates"]
    assert "1 groups, 2 files" in groups
    assert [c.path for c in cards(groups)] == ["cats/copy_a.jpg", "dogs/copy_b.jpg"]


def test_each_facts_section_needs_only_its_own_columns(scanned, tmp_path):
    results = facts_results(scanned, tmp_path / "results", columns=("brightness",))
    out = tmp_path / "r.html"
    write_report(str(results), str(out), ReportOptions(thumbnails=False))
    found = sections(out.read_text(encoding="utf-8"))
    assert "Darkest" in found["quality"] and "Blurriest" not in found["quality"]


def test_dups_groups_file_puts_split_leakage_first(scanned, tmp_path):
    groups = tmp_path / "groups.jsonl"
    member = lambda rel, d=0: {"root": str(scanned.root), "path": rel, "distance": d}  # noqa: E731
    lines = [
        {
            "group": 0,
            "kind": "near",
            "members": [member("cats/cat0.jpg"), member("cats/cat1.jpg", 5)],
            "splits": ["data"],
        },
        {
            "group": 1,
            "kind": "exact",
            "members": [member("cats/copy_a.jpg"), {"root": "val", "path": "../../etc/x.jpg"}],
            "splits": ["data", "val"],
        },
    ]
    groups.write_text("".join(json.dumps(g) + "\n" for g in lines))
    out = tmp_path / "r.html"
    write_report(str(scanned.root), str(out), ReportOptions(dups=str(groups), jobs=2))
    dup = sections(out.read_text(encoding="utf-8"))["duplicates"]
    assert "1 groups span splits" in dup
    assert dup.index("split leakage") < dup.index("cats/cat0.jpg")  # the leaking group comes first
    shown = by_path(dup)
    assert shown["cats/copy_a.jpg"].src and shown["cats/cat1.jpg"].src and "distance 5" in shown["cats/cat1.jpg"].rest
    assert "not found" in shown["../../etc/x.jpg"].placeholder  # a path leaving its root is never read


def _two_splits(base, scan_val=False):
    """train/ (scanned) and val/ with a copy of train's t0.jpg in val: one exact group leaking across splits."""
    from dsclean.cli import main

    train, val = base / "secret-project" / "train", base / "secret-project" / "val"
    for i in range(3):
        write(train, f"a/t{i}.jpg", synth.jpeg(96, 96, seed=i))
    write(val, "a/leak.jpg", (train / "a" / "t0.jpg").read_bytes())
    for root in (train, val) if scan_val else (train,):
        assert main(["scan", str(root), "--dry-run", "-q"]) == 0
    return train, val


def test_splits_of_a_groups_file_show_no_absolute_path(tmp_path):
    """dups run on absolute roots records them; the report's "splits:" header shows the folders' names."""
    from dsclean.cli import main

    train, val = _two_splits(tmp_path)
    groups = tmp_path / "groups.jsonl"
    assert main(["dups", str(train), str(val), "-o", str(groups), "-q"]) == 0
    out = tmp_path / "r.html"
    write_report(str(train), str(out), ReportOptions(dups=str(groups), jobs=1))
    html = out.read_text(encoding="utf-8")
    assert str(tmp_path) not in html and "secret-project" not in html
    dup = sections(html)["duplicates"]
    assert "splits: train, val" in dup and "split leakage" in dup and "1 groups span splits" in dup
    write_report(str(train), str(out), ReportOptions(dups=str(groups), jobs=1, absolute_paths=True))
    assert f"splits: {train}, {val}" in sections(out.read_text(encoding="utf-8"))["duplicates"]


def test_a_groups_file_made_with_relative_roots_is_read_from_another_folder(tmp_path, monkeypatch):
    """dups run on `train val` records root_abs too: report --dups run elsewhere finds every member; a member
    that is gone says the groups file (not the scan) put it there."""
    from dsclean.cli import main

    train, val = _two_splits(tmp_path, scan_val=True)
    groups = tmp_path / "groups.jsonl"
    monkeypatch.chdir(train.parent)
    assert main(["dups", "train", "val", "-o", str(groups), "-q"]) == 0
    members = json.loads(groups.read_text())["members"]
    assert [(m["root"], m["root_abs"], m["path"]) for m in members] == [
        ("train", str(train), "a/t0.jpg"),
        ("val", str(val), "a/leak.jpg"),
    ]
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    out = tmp_path / "r.html"
    write_report(str(train), str(out), ReportOptions(dups=str(groups), jobs=1))
    shown = by_path(sections(out.read_text(encoding="utf-8"))["duplicates"])
    assert shown["a/t0.jpg"].src and shown["a/leak.jpg"].src, shown
    (val / "a" / "leak.jpg").unlink()
    write_report(str(train), str(out), ReportOptions(dups=str(groups), jobs=1))
    shown = by_path(sections(out.read_text(encoding="utf-8"))["duplicates"])
    assert "groups file of dsclean dups" in shown["a/leak.jpg"].placeholder
    assert "the scan" not in shown["a/leak.jpg"].placeholder


def test_copies_moved_by_dups_are_not_duplicates_any_more(tmp_path):
    """dups --quarantine moved the extra copy (journaled): the report's exact groups (from the scan's hashes)
    leave it out, and nothing is "file not found"; once restored, the group is back."""
    from dsclean.cli import main

    root, bin_ = tmp_path / "r", tmp_path / "bin"
    for i in range(3):
        write(root, f"a/ok{i}.jpg", synth.jpeg(96, 96, seed=i))
    write(root, "a/ok0_copy.jpg", (root / "a" / "ok0.jpg").read_bytes())
    assert main(["scan", str(root), "--dry-run", "-q"]) == 0
    out = tmp_path / "r.html"
    write_report(str(root), str(out), ReportOptions(jobs=1))
    assert "1 groups, 2 files" in sections(out.read_text(encoding="utf-8"))["duplicates"]
    groups = tmp_path / "groups.jsonl"  # written before the moves: it still lists the copy
    assert main(["dups", str(root), "--quarantine", str(bin_), "-o", str(groups), "-q"]) == 0
    assert not (root / "a" / "ok0_copy.jpg").exists() and (bin_ / "r" / "a" / "ok0_copy.jpg").exists()
    write_report(str(root), str(out), ReportOptions(jobs=1))
    html = out.read_text(encoding="utf-8")
    dup = sections(html)["duplicates"]
    assert "0 groups, 0 files" in dup and "1 extra copies that dsclean dups --quarantine moved" in dup
    assert "ok0_copy.jpg" not in dup and "file not found" not in html
    write_report(str(root), str(out), ReportOptions(jobs=1, dups=str(groups)))
    html = out.read_text(encoding="utf-8")
    copy = by_path(sections(html)["duplicates"])["a/ok0_copy.jpg"]
    assert copy.src and "moved out by dsclean dups" in copy.rest and "file not found" not in html
    assert main(["restore", str(bin_ / "r")]) == 0
    write_report(str(root), str(out), ReportOptions(jobs=1))
    dup = sections(out.read_text(encoding="utf-8"))["duplicates"]
    assert "1 groups, 2 files" in dup and "moved out" not in dup


def test_cli_report_and_its_errors(scanned, tmp_path):
    out = tmp_path / "r.html"
    proc = run_cli("report", scanned.root, "-o", out, "--no-thumbnails")
    assert proc.returncode == 0, proc.stderr
    assert "Report:" in proc.stdout and out.stat().st_mode & 0o044 == 0o044  # readable, like a plain new file
    before = tree_state(scanned.root)
    inside = run_cli("report", scanned.root, "-o", scanned.root / "cats" / "r.html")
    assert inside.returncode == 2 and "never writes into a dataset" in inside.stderr
    assert tree_state(scanned.root) == before
    assert run_cli("report", tmp_path / "nope").returncode == 2
    (tmp_path / "unscanned").mkdir()
    proc = run_cli("report", tmp_path / "unscanned", "-o", out)
    assert proc.returncode == 2 and "no scan results found" in proc.stderr and "Traceback" not in proc.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"group": 0, "kind": "exact", "members": []}\nnot json\n')
    proc = run_cli("report", scanned.root, "-o", out, "--dups", bad)
    assert proc.returncode == 2 and "bad.jsonl:2" in proc.stderr
    nopath = tmp_path / "nopath.jsonl"  # a member without its path
    nopath.write_text('{"group": 0, "kind": "exact", "members": [{"root": "r"}], "splits": ["r"]}\n')
    parquet = scanned.quarantine / "scan_results.parquet"  # the wrong file altogether: binary
    for wrong, where in ((nopath, "nopath.jsonl:1"), (parquet, "scan_results.parquet:1")):
        proc = run_cli("report", scanned.root, "-o", out, "--dups", wrong, "--no-thumbnails")
        assert proc.returncode == 2 and where in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_damaged_results_file_is_named_not_a_traceback(scanned, tmp_path):
    import shutil

    copy = tmp_path / "results"
    shutil.copytree(scanned.quarantine, copy, ignore=shutil.ignore_patterns("cats", "dogs", "*.tmp"))
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(copy / "scan_results.parquet").metadata
    chunk = meta.row_group(0).column(meta.schema.names.index("detail"))  # the middle of one column's pages
    start, size = chunk.data_page_offset, chunk.total_compressed_size
    data = bytearray((copy / "scan_results.parquet").read_bytes())
    for i in range(start + size // 3, start + size - 8):
        data[i] ^= 0x5A
    (copy / "scan_results.parquet").write_bytes(bytes(data))
    proc = run_cli("report", copy, "-o", tmp_path / "r.html", "--no-thumbnails")
    assert proc.returncode == 2 and "scan_results.parquet" in proc.stderr, proc.stderr
    assert "cannot read scan results" in proc.stderr or "not a readable dsclean results file" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "r.html").exists()


def test_scan_html_writes_the_report_and_refuses_a_place_inside_the_dataset(tmp_path):
    root = tmp_path / "data"
    write(root, "a/x.jpg", synth.jpeg(32, 32))
    write(root, "a/cut.jpg", synth.truncate(synth.jpeg(64, 64, seed=1), 0.5))
    before = tree_state(root)
    proc = run_cli("scan", root, "--quarantine", tmp_path / "q", "--html", root / "r.html")
    assert proc.returncode == 2 and "never writes into a dataset" in proc.stderr
    assert tree_state(root) == before and not (tmp_path / "q").exists()  # refused before anything changed
    (tmp_path / "plain").write_text("x")
    proc = run_cli("scan", root, "--quarantine", tmp_path / "q", "--html", tmp_path / "plain" / "sub" / "r.html")
    assert proc.returncode == 2 and "plain is a file, not a folder" in proc.stderr, proc.stderr
    assert tree_state(root) == before and not (tmp_path / "q").exists()  # refused before anything moved
    proc = run_cli("scan", root, "--quarantine", tmp_path / "q", "--html", tmp_path / "r.html", "-j", "1")
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "a/cut.jpg" in html and "--html …/r.html" in html and str(tmp_path) not in html
    assert by_path(sections(html)["reasons"])["a/cut.jpg"].src


def test_hostile_files_cannot_crash_or_hang_the_report(tmp_path):
    """Real segfaults, hangs and memory hogs in the thumbnail workers (dsclean's test-only fault hook)."""
    root = tmp_path / "data"
    for name in ("x__segfault__.jpg", "y__hang__.jpg", "z__oom__.jpg", "fine.jpg"):
        write(root, f"c/{name}", synth.truncate(synth.jpeg(64, 64, seed=len(name)), 0.6))
    assert run_cli("scan", root, "--report", tmp_path / "r", "-q").returncode == 0  # no faults while scanning
    code = (
        "import sys; from dsclean.report.build import ReportOptions, write_report\n"
        "from dsclean.report.thumbs import ThumbLimits\n"
        f"s = write_report({str(tmp_path / 'r')!r}, {str(tmp_path / 'r.html')!r}, ReportOptions(jobs=2, "
        "limits=ThumbLimits(timeout=3, max_memory=256 << 20)))\n"
        "print(s.thumbnails, s.failed)\n"
    )
    env = {**os.environ, "DSCLEAN_TEST_FAULTS": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr
    shown = by_path((tmp_path / "r.html").read_text(encoding="utf-8"))
    assert shown["c/fine.jpg"].src
    assert "crashed the decoder" in shown["c/x__segfault__.jpg"].placeholder
    assert "took longer than 3 s" in shown["c/y__hang__.jpg"].placeholder
    assert "memory" in shown["c/z__oom__.jpg"].placeholder or "crashed" in shown["c/z__oom__.jpg"].placeholder


def test_a_job_array_with_parts_missing_is_reported_as_incomplete(tmp_path):
    """`report ROOT` after 2 of 3 parts: the parts that ran, with a banner naming the files it does not cover;
    `scan --shard I/N --html` of one part says the same of the others; once every part ran, no banner."""
    from support.treegen import make_tree

    from dsclean.scanning.scanner import ScanOptions, in_part, scan

    root, state = tmp_path / "data", tmp_path / "state"
    expected = make_tree(root, n_good=9, n_bad=9)
    bad = {p for p, v in expected.items() if v == "bad"}
    in_2 = {p for p in bad if in_part(p, (2, 3))}
    assert in_2 and bad - in_2  # bad files in the missing part and in the parts done
    env = {**os.environ, "DSCLEAN_STATE_DIR": str(state)}
    done = [scan(str(root), ScanOptions(shard=(i, 3), jobs=1, state_dir=str(state))) for i in (0, 1)]
    out = tmp_path / "r.html"
    proc = run_cli("report", root, "-o", out, "--no-thumbnails", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "INCOMPLETE: this report covers 2 of the 3 parts" in proc.stdout and "part 2/3" in proc.stdout
    html = out.read_text(encoding="utf-8")
    assert "<title>dsclean report: data (INCOMPLETE)</title>" in html
    banner = html.split('<p class="incomplete" role="alert">')[1].split("</p>")[0]
    assert (
        "covers 2 of the 3 parts" in banner
        and "The files of part 2/3 are not in it: they were never scanned" in banner
        and "dsclean scan ROOT --shard 2/3" in banner
    )
    assert html.index('class="incomplete"') < html.index('<section id="summary">')  # above everything else
    assert f'<div class="v">{sum(s.files for s in done)}</div><div class="k">files checked (NOT the whole tree)' in html
    shown = set(by_path(sections(html)["reasons"]))
    assert shown == bad - in_2
    # the report of one part, written by the scan itself: the other parts are named as not covered
    proc = run_cli("scan", root, "--shard", "2/3", "-j", "1", "--html", tmp_path / "p2.html", env=env)
    assert proc.returncode in (0, 1), proc.stderr
    assert "INCOMPLETE: this report covers 1 of the 3 parts" in proc.stdout
    html = (tmp_path / "p2.html").read_text(encoding="utf-8")
    banner = html.split('<p class="incomplete" role="alert">')[1].split("</p>")[0]
    assert "The files of parts 0/3, 1/3 are not in it" in banner and "never scanned" not in banner
    assert set(by_path(sections(html)["reasons"])) == in_2
    # every part has run now: the root's report is the whole tree's, without a banner
    proc = run_cli("report", root, "-o", out, "--no-thumbnails", env=env)
    html = out.read_text(encoding="utf-8")
    assert proc.returncode == 0 and "INCOMPLETE" not in proc.stdout + html and 'class="incomplete"' not in html
    assert set(by_path(sections(html)["reasons"])) == bad


def test_the_report_of_several_parts_counts_the_moves_of_every_part(tmp_path):
    """'in quarantine' adds up the parts (it was part 0's count alone), for a partial array too."""
    from support.treegen import make_tree

    from dsclean.scanning.scanner import ScanOptions, scan

    root, state, q = tmp_path / "data", str(tmp_path / "state"), str(tmp_path / "q")
    make_tree(root, n_good=6, n_bad=9)
    done = [scan(str(root), ScanOptions(shard=(i, 3), jobs=1, state_dir=state, quarantine=q)) for i in (0, 1)]
    assert all(s.quarantined for s in done)
    options = ReportOptions(thumbnails=False, state_dir=state)
    for last in (False, True):
        if last:
            done.append(scan(str(root), ScanOptions(shard=(2, 3), jobs=1, state_dir=state, quarantine=q)))
        html = open(write_report(str(root), str(tmp_path / "r.html"), options).output, encoding="utf-8").read()
        moved = sum(s.quarantined for s in done)
        assert f'<div class="v">{moved}</div><div class="k">in quarantine</div>' in html
        assert ('class="incomplete"' in html) == (not last)
