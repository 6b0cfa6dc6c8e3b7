"""The README documents what the code does: every reason code and every CLI option."""
from __future__ import annotations

import os
import re

import pytest

from dsclean import REASONS
from dsclean.cli import build_parser

README = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")).read()


@pytest.mark.parametrize("code", sorted(REASONS))
def test_reason_code_documented_with_its_meaning(code):
    assert f"| `{code}` | {REASONS[code]} |" in README


def _options(command: str) -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    parser = sub.choices[command]
    return [o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"]


@pytest.mark.parametrize("command", ["scan", "index", "info", "merge", "doctor", "explain", "probe", "report"])
def test_every_option_documented(command):
    missing = [o for o in _options(command) if not re.search(rf"`{re.escape(o)}\b", README)]
    assert not missing, f"README does not document dsclean {command} {missing}"
