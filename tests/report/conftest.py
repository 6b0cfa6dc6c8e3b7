"""One scanned tree (broken files of every sort, hostile names, audio, copies) shared by the report tests."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from support.reporttree import make_report_tree

from dsclean.scanning.scanner import ScanOptions, scan


@pytest.fixture(scope="session")
def scanned(tmp_path_factory):
    """The tree after a real scan that quarantined its bad files. Tests must not change it."""
    base = tmp_path_factory.mktemp("reported")
    root, quarantine = base / "data", base / "q"
    expected = make_report_tree(root)
    summary = scan(str(root), ScanOptions(quarantine=str(quarantine), jobs=2,
                                          command=("dsclean", "scan", str(root), "--quarantine", str(quarantine))))
    return SimpleNamespace(base=base, root=root, quarantine=quarantine, expected=expected, summary=summary)
