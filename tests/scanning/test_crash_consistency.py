"""The crash-consistency proof of RELIABILITY.md, run for real: 30 SIGKILLs of a quarantining scan."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts", "crash_test.py"
)


@pytest.mark.slow  # fault injection: thirty scans killed mid-way
def test_thirty_kills_lose_nothing():
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--runs", "30", "--files", "400", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["problems"] == [] and report["files_lost"] == 0, report
    assert proc.returncode == 0
    assert report["killed"] >= 25  # the scan really was killed mid-way, not left to finish
    assert report["distinct_kill_points"] >= 15
