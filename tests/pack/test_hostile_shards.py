"""Hostile packed sets (issue 24): tar headers that would stall the walk, name templates that are code,
counts that size memory, special files in place of shards, overlapping offsets, long zero tails.

Anything that could hang runs in a subprocess with a timeout, so a regression fails instead of stalling."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest
from support.packing import make_indexed

from dsclean.errors import UserError
from dsclean.pack.packer import PackOptions, pack_shards
from dsclean.pack.tarformat import TarError, iter_members

TIMEOUT = 120


def run_cli(*args, timeout=TIMEOUT):
    return subprocess.run([sys.executable, "-m", "dsclean", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    _, index = make_indexed(tmp)
    pack_shards(index, str(tmp / "shards"), PackOptions(samples_per_shard=5))
    return tmp / "shards", index


@pytest.fixture
def copy(packed, tmp_path):
    dst = tmp_path / "shards"
    shutil.copytree(packed[0], dst)
    return dst


def negative_size_header(name: str = "0123456789abcdef.jpg", size: int = -512) -> bytes:
    """A header with a GNU base-256 negative size field and a valid checksum."""
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(tarfile.GNU_FORMAT, "ascii", "strict")


# -- item 1: every step of the member walk makes progress ------------------------------------------------

@pytest.mark.parametrize("size", [-512, -1, -(2 ** 40)])
def test_the_walker_refuses_a_negative_size_instead_of_standing_still(size):
    buf = negative_size_header(size=size) + bytes(4 * 512)
    with pytest.raises(TarError, match=r"at byte 0 has a negative size"):
        list(iter_members(buf))


def test_the_walker_refuses_a_negative_size_after_a_good_member():
    good = tarfile.TarInfo("a.txt")
    good.size = 3
    buf = good.tobuf(tarfile.USTAR_FORMAT, "ascii", "strict") + b"abc" + bytes(509) + negative_size_header() + bytes(1024)
    with pytest.raises(TarError, match=r"at byte 1024 has a negative size"):
        list(iter_members(buf))


def test_verify_names_a_negative_size_shard_and_its_offset_and_exits_1(copy):
    victim = copy / "data-000001.tar"
    with open(victim, "r+b") as f:
        f.write(negative_size_header())
    r = run_cli("verify", copy, "--json")
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    bad = {s["shard"]: [p["problem"] for p in s["problems"]] for s in out["shards"] if not s["ok"]}
    assert list(bad) == ["data-000001.tar"]
    assert any(p.startswith("broken tar:") and "at byte 0 has a negative size" in p for p in bad["data-000001.tar"])


def test_a_resumed_pack_refuses_a_negative_size_shard_naming_it(packed, tmp_path):
    out = tmp_path / "s"
    shutil.copytree(packed[0], out)
    for name in ("index.arrow", "shardindex.json"):  # the pack was killed before it published
        os.unlink(out / name)
    victim = out / "data-000002.tar"
    with open(victim, "r+b") as f:
        f.write(negative_size_header())
    r = run_cli("pack", packed[1], "-o", out, "--samples-per-shard", "5", "-q")
    assert r.returncode == 2, r.stderr
    assert f"error: {victim}: " in r.stderr and "negative size" in r.stderr and "remove that shard" in r.stderr
    assert not (out / "index.arrow").exists()
