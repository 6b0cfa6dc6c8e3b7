"""A CLI that helps on the first mistake: short usage errors, did-you-mean, -q/--json on every command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import synth
from support.files import write

from dsclean.cli import build_parser, main


def _usage_error(capsys, argv: list[str]) -> list[str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    return err.strip().split("\n")


def test_a_misspelt_option_is_blamed_on_the_command_with_a_suggestion(capsys, tmp_path):
    lines = _usage_error(capsys, ["scan", str(tmp_path), "--qurantine", "x"])
    assert lines == [
        "usage: dsclean scan [options] ROOT [ROOT ...]",
        "dsclean scan: error: unrecognized arguments: --qurantine x; did you mean --quarantine?",
        "see 'dsclean scan --help'",
    ]


def test_a_misspelt_command_and_choice_get_a_suggestion(capsys, tmp_path):
    lines = _usage_error(capsys, ["scna", str(tmp_path)])
    assert len(lines) == 3 and lines[1].startswith("dsclean: error: argument COMMAND: invalid choice: 'scna'")
    assert lines[1].endswith("did you mean 'scan'?") and lines[2] == "see 'dsclean --help'"
    lines = _usage_error(capsys, ["index", str(tmp_path), "-o", "x.arrow", "--format", "arow"])
    assert lines[0] == "usage: dsclean index [options] ROOT" and lines[1].endswith("did you mean 'arrow'?")
    lines = _usage_error(capsys, ["restore", str(tmp_path), "--stat-dir", "s"])
    assert lines[1] == "dsclean restore: error: unrecognized arguments: --stat-dir s; did you mean --state-dir?"


def test_a_usage_error_is_three_lines_not_the_option_list(capsys):
    lines = _usage_error(capsys, ["index", "d"])  # -o is required
    assert lines == [
        "usage: dsclean index [options] ROOT",
        "dsclean index: error: the following arguments are required: -o/--output",
        "see 'dsclean index --help'",
    ]
    lines = _usage_error(capsys, ["scan", "d", "--zzzzzz"])  # nothing close: no suggestion
    assert lines[1] == "dsclean scan: error: unrecognized arguments: --zzzzzz"


def test_the_command_line_prints_the_same_three_lines():
    out = subprocess.run(
        [sys.executable, "-m", "dsclean", "scan", "d", "--qurantine", "x"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.split("\n")[1].endswith("did you mean --quarantine?")
    assert "Traceback" not in out.stderr and len(out.stderr.strip().split("\n")) == 3


PRINTING = [
    "scan",
    "index",
    "info",
    "merge",
    "restore",
    "recover",
    "status",
    "reasons",
    "doctor",
    "explain",
    "probe",
    "pack",
    "verify",
    "dups",
    "report",
]


@pytest.mark.parametrize("command", PRINTING)
def test_every_command_that_prints_takes_quiet_and_json(command):
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    options = {o for a in sub.choices[command]._actions for o in a.option_strings}
    assert {"-q", "--quiet", "--json"} <= options, command


def _quarantined(tmp_path):
    root = tmp_path / "data"
    write(root, "a/ok.jpg", synth.jpeg(16, 16))
    write(root, "a/cut.jpg", synth.truncate(synth.jpeg(64, 64), 0.5))
    assert (
        main(["scan", str(root), "--quarantine", str(tmp_path / "q"), "--quiet", "--jobs", "1", "--backend", "threads"])
        == 0
    )
    assert not (root / "a" / "cut.jpg").exists()
    return root


def test_restore_and_status_are_quiet_or_json(tmp_path, capsys):
    root = _quarantined(tmp_path)
    capsys.readouterr()
    assert main(["status", str(tmp_path / "q"), "-q"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["restore", str(tmp_path / "q"), "-q"]) == 0
    assert capsys.readouterr().out == "" and (root / "a" / "cut.jpg").exists()
    assert main(["reasons", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["truncated"]


def test_restore_json(tmp_path, capsys):
    root = _quarantined(tmp_path)
    capsys.readouterr()
    assert main(["restore", str(tmp_path / "q"), "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["restored"] == 1 and said["failed"] == [] and (root / "a" / "cut.jpg").exists()


def test_index_json_prints_its_summary(tmp_path, capsys):
    root = _quarantined(tmp_path)
    capsys.readouterr()
    assert main(["index", str(root), "-o", str(tmp_path / "i.arrow"), "--json", "--jobs", "1"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["rows"] == 1 and said["output"].endswith("i.arrow")
    assert main(["info", str(tmp_path / "i.arrow"), "-q"]) == 0
    assert capsys.readouterr().out == ""
