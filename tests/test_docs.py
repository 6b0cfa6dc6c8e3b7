"""The README documents what the code does: every reason code and every CLI option."""
from __future__ import annotations

import os
import re

import pytest

from dsclean import FLAGS, REASONS
from dsclean.cli import build_parser

README = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")).read()


@pytest.mark.parametrize("code", sorted(REASONS))
def test_reason_code_documented_with_its_meaning(code):
    assert f"| `{code}` | {REASONS[code]} |" in README


@pytest.mark.parametrize("code", sorted(FLAGS))
def test_flag_documented_with_its_meaning(code):
    assert f"| `{code}` | {FLAGS[code]} |" in README


def _options(command: str) -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    parser = sub.choices[command]
    return [o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"]


@pytest.mark.parametrize("command", ["scan", "index", "info", "merge", "restore", "status", "doctor", "explain",
                                     "probe", "pack", "verify", "dups", "report", "quarantine"])
def test_every_option_documented(command):
    missing = [o for o in _options(command) if not re.search(rf"`{re.escape(o)}\b", README)]
    assert not missing, f"README does not document dsclean {command} {missing}"


def test_exit_code_table_matches_the_code():
    from dsclean.cli import exit_codes as X

    table = README[README.index("## Exit codes"):README.index("## Where dsclean keeps its files")]
    for code in (X.EXIT_OK, X.EXIT_FOUND_BAD, X.EXIT_USAGE, X.EXIT_INCOMPLETE):
        assert f"\n| {code} | " in table
    assert "| 130 / 143 | interrupted |" in table


def test_docs_and_code_agree_on_skipped_samples():
    from dsclean.data.collate import collate_skip_none
    from dsclean.data.dataset import IndexedDataset

    readme, collate_doc, dataset_doc = (" ".join(t.split()) for t in (README, collate_skip_none.__doc__,
                                                                       IndexedDataset.__doc__))
    assert "empty batch of the same structure" in readme and "EMPTY batch of the same structure" in collate_doc
    assert "once per sample and process" in readme and "once per sample and process" in dataset_doc
