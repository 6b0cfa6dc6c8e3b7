"""A shortened ``--storage-option`` (argparse takes any unambiguous prefix) never leaks a secret into an output."""

from __future__ import annotations

import json
import logging
import os

import pytest
from support import synth

pytest.importorskip("s3fs")

from dsclean.cli import main  # noqa: E402
from dsclean.storage.urls import redact_argv  # noqa: E402


@pytest.mark.parametrize(
    "argv",
    [
        ["--storage-opt", "secret=S1"],
        ["--storage-opt=secret=S1"],
        ["--st", "secret=S1"],
        ["--storage-option=secret=S1"],
        ["--storage-option", "secret=S1"],
    ],
)
def test_every_form_argparse_accepts_is_redacted(argv):
    got = redact_argv(["dsclean", "scan", "s3://b/p", *argv, "--json"])
    assert "S1" not in " ".join(got) and "***" in " ".join(got)
    assert got[:3] == ["dsclean", "scan", "s3://b/p"] and got[-1] == "--json"


def test_other_flags_and_plain_options_are_kept():
    argv = ["scan", "--state-dir", "secret=S1", "--storage-opt", "endpoint_url=http://x", "--", "secret=S2"]
    assert redact_argv(argv) == argv  # not a storage flag, a non-secret key, a bare "--": all kept as given


@pytest.mark.parametrize("form", ["separate", "equals"])
def test_a_shortened_flag_through_the_cli_leaves_no_secret_in_any_output(
    form, bucket, s3fs_direct, s3_endpoint, tmp_path, capsys, caplog
):
    s3fs_direct.pipe_file(f"{bucket}/data/cats/a.jpg", synth.jpeg(32, 24, seed=1))
    s3fs_direct.pipe_file(f"{bucket}/data/cats/b.jpg", synth.truncate(synth.jpeg(32, 24, seed=2), 0.5))
    secret = "ABBREVSECRET" + form.upper()
    flag = ["--storage-opt", f"secret={secret}"] if form == "separate" else [f"--storage-opt=secret={secret}"]
    state = tmp_path / "state"
    caplog.set_level(logging.DEBUG)
    code = main(
        [
            "scan",
            f"s3://{bucket}/data",
            "--storage-option",
            f"endpoint_url={s3_endpoint}",
            "--storage-opt",
            "key=AKIDEXAMPLE",
            *flag,
            "--state-dir",
            str(state),
            "--jobs",
            "1",
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    summary = json.loads(out.out)
    assert summary["files"] == 2 and summary["bad"] == 1  # the secret was used: the scan read the bucket
    assert any("=***" in part for part in summary["command"])
    everything = out.out + out.err + caplog.text
    written = []
    for dirpath, _, names in os.walk(tmp_path):
        for name in names:
            written.append(name)
            with open(os.path.join(dirpath, name), "rb") as f:
                everything += f.read().decode("latin-1")
    assert "scan_summary.json" in written  # where the command is recorded (and the HTML report reads it)
    assert secret not in everything
