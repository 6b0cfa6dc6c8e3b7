"""The per-root state folder and THE results lookup rule (dsclean.locations.find_results)."""

from __future__ import annotations

import json
import os

import pytest
from support import synth
from support.files import write

from dsclean import locations
from dsclean.errors import UserError
from dsclean.scanning.scanner import ScanOptions, scan


@pytest.fixture
def root(tmp_path):
    write(tmp_path / "data", "cats/a.jpg", synth.jpeg(8, 8))
    write(tmp_path / "data", "dogs/b.jpg", synth.HTML_PAGE)
    return str(tmp_path / "data")


def test_state_folder_is_per_user_and_named_by_the_real_path(root, tmp_path, monkeypatch):
    base = os.environ["XDG_CACHE_HOME"]
    folder = locations.root_state_dir(root)
    assert folder.startswith(os.path.join(base, "dsclean", "roots") + os.sep)
    os.symlink(root, tmp_path / "alias")  # the same tree by another name: the same state
    assert locations.root_state_dir(str(tmp_path / "alias")) == folder
    assert locations.root_state_dir(str(tmp_path / "other")) != folder
    monkeypatch.setenv("DSCLEAN_STATE_DIR", str(tmp_path / "shared"))
    assert locations.root_state_dir(root).startswith(str(tmp_path / "shared" / "roots"))
    assert locations.root_state_dir(root, str(tmp_path / "flag")).startswith(str(tmp_path / "flag" / "roots"))
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.delenv("DSCLEAN_STATE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert locations.root_state_dir(root).startswith(str(tmp_path / "home" / ".cache" / "dsclean" / "roots"))


def test_pointer_records_root_results_and_options(root, tmp_path):
    s = scan(root, ScanOptions(quarantine=str(tmp_path / "q"), jobs=1))
    pointer = json.loads(open(os.path.join(s.state_dir, "last_scan.json")).read())
    assert pointer["root"] == os.path.realpath(root)
    assert pointer["results"] == [str(tmp_path / "q" / "scan_results.parquet")]
    assert pointer["problems"] == [str(tmp_path / "q" / "problems.jsonl")]
    assert pointer["quarantine"] == str(tmp_path / "q")
    assert json.loads(pointer["options"])["max_pixels"] == 89_478_485
    assert json.loads(open(os.path.join(s.state_dir, "root.json")).read())["root"] == os.path.realpath(root)


def test_lookup_order_and_each_source_is_named(root, tmp_path, monkeypatch):
    assert locations.find_results(root) == ([], f"none: no recorded scan of {root}")
    # legacy ROOT/.dsclean (dsclean 0.1): read only, with a note that it may be deleted
    legacy = write(tmp_path / "data", ".dsclean/scan_results.parquet", b"x")
    paths, source = locations.find_results(root)
    assert paths == [str(legacy)] and "older dsclean" in source and "delete" in source
    # the per-user pointer beats the legacy folder
    s = scan(root, ScanOptions(report_dir=str(tmp_path / "user"), jobs=1))
    paths, source = locations.find_results(root)
    assert paths == [s.results_path] and "(the per-user state folder)" in source
    # DSCLEAN_STATE_DIR beats the per-user pointer; --state-dir beats both
    monkeypatch.setenv("DSCLEAN_STATE_DIR", str(tmp_path / "team"))
    team = scan(root, ScanOptions(report_dir=str(tmp_path / "r-team"), jobs=1))
    assert locations.find_results(root) == ([team.results_path], locations.find_results(root)[1])
    assert "(DSCLEAN_STATE_DIR)" in locations.find_results(root)[1]
    flag = scan(root, ScanOptions(report_dir=str(tmp_path / "r-flag"), jobs=1, state_dir=str(tmp_path / "flag")))
    paths, source = locations.find_results(root, state_dir=str(tmp_path / "flag"))
    assert paths == [flag.results_path] and "(--state-dir)" in source
    # --scan-results beats everything
    assert locations.find_results(root, ["x.parquet"], str(tmp_path / "flag")) == (
        ["x.parquet"],
        "--scan-results x.parquet",
    )


def test_a_pointer_to_deleted_results_is_skipped_and_said(root, tmp_path):
    s = scan(root, ScanOptions(report_dir=str(tmp_path / "r"), jobs=1))
    os.remove(s.results_path)
    paths, source = locations.find_results(root)
    assert paths == [] and "no longer exist" in source and s.results_path in source


def test_parts_are_found_as_a_set_and_merge_wins_when_newer(root, tmp_path):
    parts = [scan(root, ScanOptions(shard=(i, 2), report_dir=str(tmp_path / "r"), jobs=1)) for i in range(2)]
    paths, source = locations.find_results(root)
    assert paths == [p.results_path for p in parts] and "part-*-of-0002" in source
    with pytest.raises(UserError, match="dsclean merge"):
        locations.find_scan_results(root)  # the one-file wrapper asks for a merge
    from dsclean.scanning.merge import merge

    m = merge([p.results_path for p in parts], str(tmp_path / "merged"))
    assert locations.find_results(root)[0] == [m.results_path]
    assert locations.find_scan_results(root) == m.results_path


def test_unwritable_state_folder_is_a_note_not_a_failure(root, tmp_path):
    (tmp_path / "notadir").write_text("a file where the state base should be")
    s = scan(root, ScanOptions(report_dir=str(tmp_path / "r"), jobs=1, state_dir=str(tmp_path / "notadir")))
    assert any("could not record the results location" in n for n in s.notes)
    assert any("scan cache" in n for n in s.notes) is False  # the cache fell back to the report folder
    assert os.path.isdir(tmp_path / "r" / "scan_cache")


# --------------------------------------------------------------------------- job arrays with parts missing


def _parts(root, tmp_path, n, parts, **check):
    """Scan parts ``parts`` of a job array of ``n`` (results in tmp_path/r-n); each part finishes after the last."""
    from dsclean.scanning.check import CheckOptions

    return [
        scan(root, ScanOptions(shard=(i, n), report_dir=str(tmp_path / f"r-{n}"), jobs=1, check=CheckOptions(**check)))
        for i in parts
    ]


def test_some_parts_of_a_job_array_are_found_and_the_missing_ones_named(root, tmp_path):
    done = _parts(root, tmp_path, 3, [0, 2])
    found = locations.find_scan(root)
    assert found.paths == [s.results_path for s in done]
    assert found.partial is not None and found.partial.missing == [1] and sorted(found.partial.done) == [0, 2]
    assert "2 of the 3 parts" in found.source and "part 1/3 never ran" in found.source
    assert f"dsclean scan {root} --shard 1/3" in found.source
    # the complete-results rule does not pass them off as a scan of the whole tree, and says why
    paths, source = locations.find_results(root)
    assert paths == [] and source.startswith(f"none: no complete scan of {root}") and "part 1/3 never ran" in source
    _parts(root, tmp_path, 3, [1])  # the last part: a complete array, no longer partial
    found = locations.find_scan(root)
    assert found.partial is None and len(found.paths) == 3 and locations.find_results(root)[0] == found.paths


def test_parts_of_another_job_array_are_never_mixed_in_and_are_named(root, tmp_path):
    _parts(root, tmp_path, 4, [0, 3])  # an older array of 4 parts, abandoned
    _parts(root, tmp_path, 3, [0], lenient=True)  # then an array of 3 with other check options, abandoned
    new = _parts(root, tmp_path, 3, [1, 0])  # the newest array: 3 parts, default options
    found = locations.find_scan(root)
    assert found.partial.n == 3 and found.partial.missing == [2]
    assert found.paths == [new[1].results_path, new[0].results_path]  # part order, this array's files only
    ignored = " | ".join(found.partial.ignored)
    assert "parts 0/4, 3/4 (an older job array of 4 parts" in ignored
    assert "part 0/3" not in ignored  # part 0/3 of the lenient array was overwritten by the new part 0/3
    assert "ignored: parts 0/4, 3/4" in found.source
    _parts(root, tmp_path, 3, [2], lenient=True)  # a lone part with other options: its own array, the newest now
    found = locations.find_scan(root)
    assert found.partial.n == 3 and sorted(found.partial.done) == [2] and found.partial.missing == [0, 1]
    assert "parts 0/3, 1/3 (an older job array of 3 parts scanned with other check options" in " | ".join(
        found.partial.ignored
    )


def test_an_unfinished_array_newer_than_a_whole_scan_is_named_and_not_used(root, tmp_path):
    whole = scan(root, ScanOptions(report_dir=str(tmp_path / "whole"), jobs=1))
    _parts(root, tmp_path, 3, [0, 1])
    found = locations.find_scan(root)
    assert found.paths == [whole.results_path] and found.partial is None
    assert found.newer is not None and found.newer.missing == [2]
    assert "NOT used: a newer job array of 3 parts" in found.source and "2/3 missing" in found.source
    again = scan(root, ScanOptions(report_dir=str(tmp_path / "whole"), jobs=1))  # a whole scan after it: no note
    found = locations.find_scan(root)
    assert found.paths == [again.results_path] and found.newer is None and "NOT used" not in found.source


def test_a_part_whose_results_are_gone_is_ignored_and_said(root, tmp_path):
    done = _parts(root, tmp_path, 3, [0, 1])
    os.remove(done[0].results_path)
    found = locations.find_scan(root)
    assert found.paths == [done[1].results_path] and found.partial.missing == [0, 2]
    assert "part 0/3" in found.source and "no longer exist" in found.source
    os.remove(done[1].results_path)
    paths, source = locations.find_results(root)
    assert paths == [] and source.startswith(f"none: no recorded scan of {root}") and "no longer exist" in source
