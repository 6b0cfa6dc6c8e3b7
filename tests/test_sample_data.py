"""The bundled sample_data: reproducible from its script, and every broken file is caught."""

from __future__ import annotations

import filecmp
import os
import re
import subprocess
import sys

import dsclean
from dsclean.scanning.scanner import ScanOptions, scan

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "sample_data")


def test_sample_data_is_what_the_script_writes(tmp_path):
    out = tmp_path / "sample"
    subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", "make_sample_data.py"), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    cmp = filecmp.dircmp(SAMPLE, out)
    stack, diffs = [cmp], []
    while stack:
        c = stack.pop()
        diffs += c.left_only + c.right_only + filecmp.cmpfiles(c.left, c.right, c.common_files, shallow=False)[1]
        stack += c.subdirs.values()
    assert diffs == [], "sample_data is stale: run scripts/make_sample_data.py and commit"
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(SAMPLE) for f in fs)
    assert size < 3_000_000


def test_every_sample_file_gets_the_verdict_its_name_says(tmp_path):
    import shutil

    copy = tmp_path / "sample"  # a copy: the repo's own files are never touched
    shutil.copytree(SAMPLE, copy)
    s = scan(str(copy), ScanOptions(dry_run=True, report_dir=str(tmp_path / "r"), jobs=2))
    verdicts = {v.path: v for v in dsclean.iter_verdicts(str(tmp_path / "r"))}
    assert s.files == len(verdicts) == 49
    for path, v in verdicts.items():
        name = os.path.basename(path)
        if re.fullmatch(r"[a-z]+_(\d{3}|anim)\.\w+", name):
            assert v.status == "ok", (path, v.reason, v.detail)
        elif name == "really_a_png.jpg":
            assert (v.status, v.reason) == ("warn", "extension_mismatch")
        else:
            assert v.status == "bad", (path, v.detail)
