"""One scanned tree (broken files of every sort, hostile names, audio, copies) shared by the report tests."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from support.reporttree import make_report_tree

from dsclean.scanning.scanner import ScanOptions, scan


@pytest.fixture(scope="session", autouse=True)
def report_state(tmp_path_factory):
    """One state folder for the report tests' shared scan, set for module-scoped fixtures too."""
    state = tmp_path_factory.mktemp("report-state")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DSCLEAN_STATE_DIR", str(state))
        yield state


@pytest.fixture(scope="session")
def scanned(tmp_path_factory, report_state):
    """The tree after a real scan that quarantined its bad files. Tests must not change it."""
    base = tmp_path_factory.mktemp("reported")
    root, quarantine, state = base / "data", base / "q", report_state
    expected = make_report_tree(root)
    summary = scan(
        str(root),
        ScanOptions(
            quarantine=str(quarantine),
            jobs=2,
            state_dir=str(state),
            command=("dsclean", "scan", str(root), "--quarantine", str(quarantine)),
        ),
    )
    return SimpleNamespace(base=base, root=root, quarantine=quarantine, expected=expected, summary=summary, state=state)


@pytest.fixture(autouse=True)
def scanned_state(report_state, monkeypatch):
    """The report tests find the shared scan's results by root, as a user would: through its state folder."""
    monkeypatch.setenv("DSCLEAN_STATE_DIR", str(report_state))
