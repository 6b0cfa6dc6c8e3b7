"""MDS and litdata sets are recognised by their index.json; without their library (this venv has neither:
they import torchvision) the commands stop with a clear error naming the extra to install."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from dsclean.shardsets.detect import detect

MDS_INDEX = {
    "version": 2,
    "shards": [
        {
            "column_encodings": ["jpeg"],
            "column_names": ["image"],
            "column_sizes": [None],
            "compression": None,
            "format": "mds",
            "hashes": [],
            "raw_data": {"basename": "shard.00000.mds", "bytes": 0, "hashes": {}},
            "samples": 0,
            "size_limit": 1 << 26,
            "version": 2,
            "zip_data": None,
        }
    ],
}
LITDATA_INDEX = {"chunks": [{"chunk_bytes": 0, "chunk_size": 0, "filename": "chunk-0-0.bin"}], "config": {}}


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "dsclean", *map(str, args)], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("kind", "doc", "module", "extra"),
    [("mds", MDS_INDEX, "streaming", "dsclean[mds]"), ("litdata", LITDATA_INDEX, "litdata", "dsclean[litdata]")],
)
def test_missing_library_names_the_extra(tmp_path, kind, doc, module, extra):
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here")
    (tmp_path / "index.json").write_text(json.dumps(doc))
    ss = detect([str(tmp_path)])
    assert ss is not None and ss.kind == kind
    for command in ("scan", "verify"):
        r = run(command, tmp_path)
        assert r.returncode == 2 and extra in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_as_kind_that_does_not_match_is_refused(tmp_path):
    (tmp_path / "index.json").write_text(json.dumps(LITDATA_INDEX))
    r = run("verify", tmp_path, "--as", "mds")
    assert r.returncode == 2 and "index.json: not a mds index" in r.stderr
    (tmp_path / "index.json").write_text("[1, 2]")
    r = run("verify", tmp_path, "--as", "mds")
    assert r.returncode == 2 and "not a JSON object" in r.stderr
