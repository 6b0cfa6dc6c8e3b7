"""Packing beyond one machine: job-array parts + finish, and a real Dask LocalCluster; byte-identical to a local pack."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from support.packing import folder_digests

from dsclean.cli import main
from dsclean.errors import UserError
from dsclean.pack.packer import PackOptions, finish_pack, pack_shards

PY = sys.executable


@pytest.fixture(scope="module")
def source(media_index, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cluster")
    _, index = media_index
    pack_shards(index, str(tmp / "local"), PackOptions(samples_per_shard=3, shuffle=5))
    return index, tmp / "local"


def test_parts_started_at_once_then_finish_equal_a_local_pack(source, tmp_path):
    index, local = source
    out = tmp_path / "parts"
    cmd = [PY, "-m", "dsclean", "pack", index, "-o", str(out), "--samples-per-shard", "3", "--shuffle", "5", "-q"]
    procs = [subprocess.Popen(cmd + ["--part", f"{i}/3"]) for i in range(3)]  # racing for pack.json
    assert [p.wait() for p in procs] == [0, 0, 0]
    assert not (out / "index.arrow").exists() and len(list(out.glob("pack.part-*-of-0003.json"))) == 3
    part1 = json.loads((out / "pack.part-0001-of-0003.json").read_text())
    assert part1["part_shards"] == [1, 4]  # shard numbers I mod N
    assert main(["pack", index, "-o", str(out), "--samples-per-shard", "3", "--shuffle", "5", "--finish", "-q"]) == 0
    parts = {k: v for k, v in folder_digests(out).items() if not k.startswith("pack.part-")}
    assert parts == folder_digests(local)
    assert main(["verify", str(out)]) == 0


def test_finish_refuses_missing_foreign_and_mixed_parts(source, tmp_path, capsys):
    index, _ = source
    out = tmp_path / "p"
    opts = dict(samples_per_shard=3, shuffle=5)
    pack_shards(index, str(out), PackOptions(part=(0, 3), **opts))
    pack_shards(index, str(out), PackOptions(part=(2, 3), **opts))
    with pytest.raises(UserError, match=r"1 of 3 parts have not finished: 1/3"):
        finish_pack(index, str(out), PackOptions(**opts))
    # a part marker of another pack (other options) dropped in the folder
    other = tmp_path / "other"
    pack_shards(index, str(other), PackOptions(part=(1, 3), samples_per_shard=4, shuffle=5))
    shutil.copy(other / "pack.part-0001-of-0003.json", out)
    with pytest.raises(UserError, match="parts of another pack: pack.part-0001-of-0003.json"):
        finish_pack(index, str(out), PackOptions(**opts))
    pack_shards(index, str(out), PackOptions(part=(1, 3), **opts))  # rewrites its own marker: now complete
    pack_shards(index, str(out), PackOptions(part=(0, 2), **opts))
    with pytest.raises(UserError, match="parts of different splits"):
        finish_pack(index, str(out), PackOptions(**opts))
    (out / "pack.part-0000-of-0002.json").unlink()
    assert finish_pack(index, str(out), PackOptions(**opts)).complete
    assert main(["pack", index, "-o", str(tmp_path / "x"), "--finish"]) == 2  # nothing packed there yet
    assert "nothing was packed there yet" in capsys.readouterr().err
    with pytest.raises(UserError, match="cannot be used together"):
        finish_pack(index, str(out), PackOptions(part=(0, 3), **opts))


def test_finish_refuses_a_missing_shard_of_a_finished_part(source, tmp_path):
    index, _ = source
    out = tmp_path / "p"
    for i in range(2):
        pack_shards(index, str(out), PackOptions(part=(i, 2), samples_per_shard=3, shuffle=5))
    (out / "data-000003.tar").unlink()
    with pytest.raises(UserError, match="1 shards are missing"):
        finish_pack(index, str(out), PackOptions(samples_per_shard=3, shuffle=5))


distributed = pytest.importorskip("distributed")


@pytest.mark.slow  # a dask LocalCluster of worker processes
def test_dask_local_cluster_packs_byte_identical(source, tmp_path):
    index, local = source
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        s = pack_shards(
            index,
            str(tmp_path / "dask"),
            PackOptions(samples_per_shard=3, shuffle=5, backend="dask", scheduler=cluster.scheduler_address),
        )
        assert s.complete and s.written == s.shards == 6
        (tmp_path / "dask" / "data-000002.tar").unlink()  # a resumed pack on the cluster reads the others back
        s = pack_shards(
            index,
            str(tmp_path / "dask"),
            PackOptions(samples_per_shard=3, shuffle=5, backend="dask", scheduler=cluster.scheduler_address),
        )
        assert s.written == 1 and s.reused == 5
    assert folder_digests(tmp_path / "dask") == folder_digests(local)
