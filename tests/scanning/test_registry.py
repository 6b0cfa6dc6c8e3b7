"""The one table the checker dispatches on (dsclean.scanning.formats.REGISTRY): a row for every format, each
naming the module its check function is really in, and no module found by a name built at run time."""

from __future__ import annotations

import ast
import importlib
import os
import sys

from dsclean.formats import FORMATS
from dsclean.scanning import check, importguard
from dsclean.scanning.formats import PILLOW_MODULES, REGISTRY


def test_every_format_has_one_row():
    assert set(REGISTRY) == set(FORMATS)


def test_each_row_names_the_module_its_check_function_is_in(monkeypatch):
    monkeypatch.setattr(importguard, "hook", None)  # not a stale worker's guard (it would arm its SIGALRM timer)
    for fmt, row in REGISTRY.items():
        checker = row.checks.load()[fmt]
        assert checker.__module__ == row.checks.name, fmt
        assert sys.modules[row.checks.name] is importlib.import_module(row.checks.name)


def test_the_pillow_modules_preloaded_are_the_ones_the_image_checks_import(monkeypatch):
    from dsclean.scanning import check_image

    monkeypatch.setattr(importguard, "hook", None)  # as above

    check_image._load_pillow()
    assert [m for m in PILLOW_MODULES if m in sys.modules] == list(PILLOW_MODULES)
    assert check_image.png is sys.modules[PILLOW_MODULES[1]]


def test_the_dispatch_imports_no_module_by_a_built_name():
    """Every check module is reached by a plain import (an IDE and tests/test_layout.py follow it)."""
    for path in (check.__file__, os.path.join(os.path.dirname(check.__file__), "formats", "__init__.py")):
        calls = [n for n in ast.walk(ast.parse(open(path).read())) if isinstance(n, ast.Call)]
        names = {getattr(c.func, "attr", getattr(c.func, "id", None)) for c in calls}
        assert not names & {"import_module", "__import__", "getattr"}, path


def test_a_finished_chunk_leaves_no_import_guard_behind(tmp_path):
    # a stale guard re-armed the finished chunk's watchdog timer on a later import: SIGALRM killed the process
    from support import synth

    from dsclean.scanning import importguard, worker
    from dsclean.scanning.check import CheckOptions

    (tmp_path / "a.png").write_bytes(synth.encode_image(synth.photo_like(16, 16, seed=1), "PNG"))
    before = importguard.hook
    [v] = worker.check_chunk(str(tmp_path), ["a.png"], CheckOptions(timeout=5, facts=False))
    assert v.status == "ok" and importguard.hook is before
