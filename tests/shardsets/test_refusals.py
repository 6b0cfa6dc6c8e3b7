"""Review findings: a FIFO named like a shard in a shard folder is named (not left out), a missing path is
said not to exist, and a PAX ``size`` record takes ASCII digits only."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile

import pytest
from support import synth

from dsclean.errors import UserError
from dsclean.shardsets.detect import detect
from dsclean.shardsets.events import Problem, Sample
from dsclean.shardsets.run import ShardScanOptions, verify_shard_set
from dsclean.shardsets.webdataset import read_shard

FAST = dict(jobs=1, backend="threads")


def one_tar(path, n=3) -> None:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for i in range(n):
            data = synth.jpeg(24, 24, seed=i)
            info = tarfile.TarInfo(f"k{i}.jpg")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def dsclean(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "dsclean", *args], capture_output=True, text=True, timeout=timeout)


def test_a_fifo_named_like_a_shard_in_a_folder_is_named_without_blocking(tmp_path):
    folder = tmp_path / "wds"
    folder.mkdir()
    one_tar(folder / "shard-000000.tar")
    os.mkfifo(folder / "shard-000001.tar")  # nobody writes to it: an open for reading would block
    ss = detect([str(folder)])
    assert ss is not None and ss.names == ["shard-000000.tar", "shard-000001.tar"]
    run = dsclean("verify", str(folder), "--json")  # a subprocess with a timeout: a blocking open fails the test
    assert run.returncode == 1, run.stderr
    assert '"broken_shard": 1' in run.stdout and "not a regular file" in run.stdout
    v = verify_shard_set([str(folder)], ShardScanOptions(**FAST))
    assert v.checked == 3 and v.listed[0]["shard"] == "shard-000001.tar"


def test_a_missing_path_is_said_not_to_exist(tmp_path):
    missing = str(tmp_path / "nowhere")
    with pytest.raises(UserError, match="no such file or folder"):
        verify_shard_set([missing], ShardScanOptions(**FAST))
    run = dsclean("verify", missing)
    assert run.returncode == 2 and "nowhere: no such file or folder" in run.stderr
    assert "not a shard set" not in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("size", ["\u0661\u0662", "\u00b2", "12a", ""])
def test_a_pax_size_takes_ascii_digits_only(tmp_path, size):
    data = synth.jpeg(24, 24, seed=1)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo("a.jpg")
        info.size = len(data)
        info.pax_headers = {"size": size}
        tf.addfile(info, io.BytesIO(data))
    events = list(read_shard(io.BytesIO(out.getvalue()), "s.tar"))
    problems = [e for e in events if isinstance(e, Problem)]
    assert [p.reason for p in problems] == ["broken_shard"] and "is not a decimal number" in problems[0].detail
    assert not [e for e in events if isinstance(e, Sample)]


def test_an_ascii_pax_size_is_the_size(tmp_path):
    data = synth.jpeg(24, 24, seed=1)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo("a.jpg")
        info.size = len(data)
        info.pax_headers = {"size": str(len(data))}
        tf.addfile(info, io.BytesIO(data))
    samples = [e for e in read_shard(io.BytesIO(out.getvalue()), "s.tar") if isinstance(e, Sample)]
    assert [s.data for s in samples] == [data]
