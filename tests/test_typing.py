"""What IDEs and type checkers see of the lazy public API: the package says it is typed (py.typed), and
the ``TYPE_CHECKING`` imports in dsclean/__init__.py name exactly the lazy exports, from the same modules."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import dsclean

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INIT = os.path.join(ROOT, "dsclean", "__init__.py")


def _type_checking_imports() -> dict[str, str]:
    tree = ast.parse(open(INIT).read())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING")
    return {alias.name: node.module for node in block.body if isinstance(node, ast.ImportFrom) for alias in node.names}


def test_type_checking_imports_match_the_lazy_exports():
    assert _type_checking_imports() == dsclean._EXPORTS


def test_every_export_resolves_to_what_the_type_checker_sees():
    for name, module in dsclean._EXPORTS.items():
        obj = getattr(dsclean, name)
        assert getattr(sys.modules[f"dsclean.{module}"], name) is obj


def test_import_stays_lazy():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, dsclean; print(sorted(m for m in sys.modules "
            "if m.startswith('dsclean.') or m in ('torch', 'pyarrow', 'numpy')))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip() == "[]"


def test_the_package_is_marked_typed():
    assert os.path.isfile(os.path.join(ROOT, "dsclean", "py.typed"))
    pyproject = open(os.path.join(ROOT, "pyproject.toml")).read()
    assert '"dsclean" = ["py.typed"]' in pyproject
