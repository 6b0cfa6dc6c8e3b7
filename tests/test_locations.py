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
    assert locations.find_results(root, ["x.parquet"], str(tmp_path / "flag")) == (["x.parquet"],
                                                                                   "--scan-results x.parquet")


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
