"""--backend dask for shard sets: each shard a task on a Dask LocalCluster whose workers read it themselves (from the
local S3 server, or the shared folder); the same results, problems and deny-list rows as the local processes."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import webdataset as wds
from support import synth
from support.cluster import local_cluster
from support.fixtures.cli import run_cli
from support.s3server import FaultProxy

from dsclean import denylist
from dsclean.errors import UserError
from dsclean.shardsets import detect as detect_module
from dsclean.shardsets import tartasks, webdataset
from dsclean.shardsets.run import ShardScanOptions, scan_shard_set, verify_shard_set

distributed = pytest.importorskip("distributed")
pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

#: the test credentials, as options: the workers of the module's cluster started before any test's environment
KEYS = {"key": "testing", "secret": "testing"}


@pytest.fixture(scope="module")
def cluster():
    with local_cluster() as c:
        yield c


def wds_set(folder: str) -> set[tuple[str, str]]:
    """3 WebDataset tars (webdataset.TarWriter): a truncated JPEG in each, json and cls (non-media) members."""
    os.makedirs(folder)
    bad = set()
    for s in range(3):
        name = f"shard-{s:06d}.tar"
        with wds.TarWriter(os.path.join(folder, name)) as w:
            for i in range(10):
                jpg = synth.jpeg(32, 32, seed=s * 100 + i)
                if i == 2 * s + 1:
                    jpg = synth.truncate(jpg, 0.5)
                    bad.add((name, f"s{s}_{i:03d}"))
                w.write({"__key__": f"s{s}_{i:03d}", "jpg": jpg, "json": {"i": i}, "cls": i % 3})
    return bad


def rows(summary) -> list[dict]:
    return pq.read_table(summary.results_path).sort_by("path").to_pylist()


def problems(summary) -> list[str]:
    with open(summary.problems_path) as f:
        return sorted(f.read().splitlines())


def denied(path: str) -> list[tuple]:
    return sorted((e["shard"], e["key"], e["row"], e["reason"]) for e in denylist.read_denylist(path).entries)


SAME = ("kind", "shards", "samples", "checked", "counts", "bad_reasons", "warn_reasons", "problems", "flags")


def test_a_bucket_set_on_dask_reads_each_shard_on_the_workers_and_matches_a_local_scan(
    cluster, bucket, s3fs_direct, s3_endpoint, tmp_path, monkeypatch
):
    local = str(tmp_path / "shards")
    bad = wds_set(local)
    for name in sorted(os.listdir(local)):
        s3fs_direct.put_file(os.path.join(local, name), f"{bucket}/wds/{name}")
    url = f"s3://{bucket}/wds"
    with FaultProxy(s3_endpoint) as proxy:
        storage = {"endpoint_url": proxy.url, **KEYS}
        here = scan_shard_set(
            [url], ShardScanOptions(jobs=2, report_dir=str(tmp_path / "here"), storage_options=storage)
        )
        proxy.gets.clear()

        def refuse(*args, **kwargs):
            raise AssertionError("this process read a shard")

        # this process never opens a shard (the workers import their own, unpatched modules)
        monkeypatch.setattr(detect_module.ShardSet, "open", refuse)
        monkeypatch.setattr(tartasks, "_events", refuse)
        monkeypatch.setattr(webdataset, "read_shard", refuse)
        opts = ShardScanOptions(
            backend="dask",
            scheduler=cluster.scheduler_address,
            report_dir=str(tmp_path / "dask"),
            storage_options=storage,
        )
        with distributed.Client(cluster.scheduler_address) as client, distributed.get_task_stream(client) as stream:
            there = scan_shard_set([url], opts)
            workers = set(client.run(os.getpid))
        # ... and the shards were read from the store by the workers, both of them: every tar object GET at least
        # once (3 shards for 2 workers: each tar cut in 2 parts, 6 tasks)
        assert sorted(p.rsplit("/", 1)[1] for p in proxy.gets) == sorted(os.listdir(local))
        ran = {t["worker"] for t in stream.data if t["key"].startswith("check_tar_part")}
        assert ran == workers and len(workers) == 2
        v = verify_shard_set(
            [url],
            ShardScanOptions(
                backend="dask",
                scheduler=cluster.scheduler_address,
                denylist=there.denylist_path,
                storage_options=storage,
            ),
        )
        # the command line: the same set, verified on the cluster against that deny-list (the workers' credentials:
        # the options, as this module's workers started before the test's environment had any)
        argv = ["verify", url, "--backend", "dask", "--scheduler", cluster.scheduler_address, "--json"]
        argv += ["--denylist", there.denylist_path, "--storage-option", f"endpoint_url={proxy.url}"]
        argv += [a for k, v in KEYS.items() for a in ("--storage-option", f"{k}={v}")]
        r = run_cli(*argv)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["denied_bad"] == 3 and json.loads(r.stdout)["checked"] == 30
    assert (there.shards, there.samples, there.checked, there.bad) == (3, 30, 30, 3)
    for field in SAME:
        assert getattr(there, field) == getattr(here, field), field
    assert rows(there) == rows(here) and len(rows(here)) == 30
    assert problems(there) == problems(here)
    assert denied(there.denylist_path) == denied(here.denylist_path)
    assert {(shard, key) for shard, key, _, _ in denied(there.denylist_path)} == bad
    assert v.ok and v.checked == 30 and v.denied_bad == 3 and v.shards == 3


def test_a_local_parquet_set_on_dask_matches_a_local_scan(cluster, tmp_path):
    folder = tmp_path / "pq"
    folder.mkdir()
    for n in range(3):
        images = [synth.jpeg(24, 24, seed=n * 10 + i) for i in range(7)]
        images[n + 1] = synth.truncate(images[n + 1], 0.5)
        table = pa.table({"img": pa.array(images, type=pa.binary()), "label": list(range(7))})
        pq.write_table(table, folder / f"part-{n}.parquet", row_group_size=3)
    (folder / "part-3.parquet").write_bytes(b"PAR1 not parquet")
    here = scan_shard_set([str(folder)], ShardScanOptions(jobs=2, column="img", report_dir=str(tmp_path / "h")))
    opts = ShardScanOptions(
        column="img",
        backend="dask",
        scheduler=cluster.scheduler_address,
        report_dir=str(tmp_path / "d"),
        denylist=str(tmp_path / "dask-denylist.jsonl"),
    )
    there = scan_shard_set([str(folder)], opts)
    assert (there.shards, there.checked, there.bad, there.problems) == (4, 21, 3, {"broken_shard": 1})
    for field in SAME:
        assert getattr(there, field) == getattr(here, field), field
    assert rows(there) == rows(here) and problems(there) == problems(here)
    assert denied(there.denylist_path) == denied(here.denylist_path)
    assert {(shard, row) for shard, _, row, _ in denied(there.denylist_path)} == {
        (f"part-{n}.parquet", n + 1) for n in range(3)
    }


@pytest.mark.slow  # fault injection: a sample that segfaults its checker, on a cluster of its own
def test_a_sample_that_crashes_its_checker_is_named_and_the_dask_workers_survive(tmp_path):
    folder = tmp_path / "wds"
    folder.mkdir()
    members = [(f"k{i}.jpg", synth.jpeg(16, 16, seed=i)) for i in range(8)]
    members[3] = ("k3__segfault__.jpg", synth.jpeg(16, 16))
    (folder / "a.tar").write_bytes(synth.tar_bytes(members))
    (folder / "b.tar").write_bytes(synth.tar_bytes([(f"b{i}.jpg", synth.jpeg(16, 16, seed=50 + i)) for i in range(4)]))
    with (
        local_cluster(env={"DSCLEAN_TEST_FAULTS": "1"}) as faulty,
        distributed.Client(faulty.scheduler_address) as client,
    ):
        pids = client.run(os.getpid)
        s = scan_shard_set(
            [str(folder)],
            ShardScanOptions(backend="dask", scheduler=faulty.scheduler_address, report_dir=str(tmp_path / "r")),
        )
        assert client.run(os.getpid) == pids  # the same worker processes: none died
    assert (s.checked, s.bad, s.bad_reasons) == (12, 1, {"decoder_crash": 1})
    (crash,) = [r for r in rows(s) if r["status"] == "bad"]
    assert (crash["shard"], crash["member"], crash["reason"]) == ("a.tar", "k3__segfault__.jpg", "decoder_crash")
    assert "SIGSEGV" in crash["detail"]
    assert denied(s.denylist_path) == [("a.tar", "k3__segfault__", None, "decoder_crash")]


def test_backend_and_scheduler_go_together(tmp_path):
    folder = str(tmp_path / "shards")
    wds_set(folder)
    with pytest.raises(UserError, match="needs --scheduler"):
        scan_shard_set([folder], ShardScanOptions(backend="dask", report_dir=str(tmp_path / "r")))
    with pytest.raises(UserError, match="--scheduler goes with --backend dask"):
        verify_shard_set([folder], ShardScanOptions(scheduler="tcp://127.0.0.1:1"))
    with pytest.raises(UserError, match="cannot reach the Dask scheduler tcp://127.0.0.1:1"):
        verify_shard_set([folder], ShardScanOptions(backend="dask", scheduler="tcp://127.0.0.1:1"))


def test_cli_scan_and_verify_with_dask(cluster, tmp_path):
    folder = tmp_path / "shards"
    bad = wds_set(str(folder))
    r = run_cli("scan", folder, "--backend", "dask", "--scheduler", cluster.scheduler_address, "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert (s["checked"], s["bad"]) == (30, 3)
    assert {(e["shard"], e["key"]) for e in denylist.read_denylist(folder / "denylist.jsonl").entries} == bad
    r = run_cli("verify", folder, "--backend", "dask", "--scheduler", cluster.scheduler_address)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok: webdataset shard set")
    pack = tmp_path / "pack"  # a dsclean pack (its pack.json): verified on this machine, never on a cluster
    pack.mkdir()
    (pack / "pack.json").write_text("{}")
    for argv, message in (
        (("scan", folder, "--scheduler", cluster.scheduler_address), "--scheduler goes with --backend dask"),
        (("verify", folder, "--backend", "dask"), "--backend dask needs --scheduler"),
        (("verify", pack, "--backend", "dask", "--scheduler", cluster.scheduler_address), "a dsclean pack is verified"),
    ):
        r = run_cli(*argv)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


def many_tars(folder, shards: int = 40, per: int = 40) -> None:
    """Enough work that a scan is still running when a test acts on it."""
    folder.mkdir()
    for s in range(shards):
        with wds.TarWriter(str(folder / f"shard-{s:06d}.tar")) as w:
            for i in range(per):
                w.write({"__key__": f"s{s}_{i:03d}", "jpg": synth.jpeg(128, 128, seed=s * 1000 + i)})


def busy_worker(client, timeout: float = 60.0) -> str:
    """The address of a Dask worker running one of the scan's tasks (waited for)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for address, keys in client.processing().items():
            if keys:
                return address
        time.sleep(0.02)
    raise AssertionError("no task reached the cluster")


@pytest.mark.slow  # fault injection: a Dask worker killed mid-scan, on a cluster of its own
def test_a_task_whose_worker_died_is_checked_again_here_and_nothing_is_lost(tmp_path, caplog):
    import signal
    import threading

    import dask

    folder = tmp_path / "wds"
    many_tars(folder, shards=12, per=40)
    here = scan_shard_set([str(folder)], ShardScanOptions(jobs=2, report_dir=str(tmp_path / "here"), dry_run=True))
    box: dict = {}
    # no second chance on the cluster: a task whose worker dies is Dask's KilledWorker at once
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        local_cluster() as c,
        distributed.Client(c.scheduler_address) as client,
    ):
        pids = client.run(os.getpid)
        opts = ShardScanOptions(
            backend="dask", scheduler=c.scheduler_address, report_dir=str(tmp_path / "dask"), dry_run=True
        )
        scan = threading.Thread(target=lambda: box.update(s=scan_shard_set([str(folder)], opts)))
        scan.start()
        os.kill(pids[busy_worker(client)], signal.SIGKILL)
        scan.join(timeout=300)
        assert not scan.is_alive()
    assert any("its Dask workers kept dying" in r.getMessage() for r in caplog.records)
    there = box["s"]
    for field in SAME:
        assert getattr(there, field) == getattr(here, field), field
    assert rows(there) == rows(here) and there.checked == 12 * 40


def test_an_interrupted_dask_scan_stops_and_keeps_what_was_checked(cluster, tmp_path):
    import signal
    import subprocess
    import sys

    from support.fixtures.cli import cli_env

    folder = tmp_path / "wds"
    many_tars(folder)
    argv = [sys.executable, "-m", "dsclean", "scan", str(folder), "--backend", "dask"]
    argv += ["--scheduler", cluster.scheduler_address, "--report", str(tmp_path / "r"), "--json"]
    with distributed.Client(cluster.scheduler_address) as client:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
        busy_worker(client)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted; results so far were saved" in err, err
    s = json.loads(out)
    # the tasks that finished (whole shards: 40 shards are more than 2 per worker, none cut), the others cancelled
    assert s["signal"] == signal.SIGINT and 0 <= s["checked"] < 40 * 40 and s["checked"] % 40 == 0
    assert len(pq.read_table(s["results_path"])) == s["checked"]


@pytest.mark.slow  # a cluster of its own, closed mid-scan
def test_a_scheduler_gone_mid_scan_is_a_clear_error_not_a_hang(tmp_path):
    import threading

    folder = tmp_path / "wds"
    many_tars(folder)
    box: dict = {}
    with local_cluster() as c, distributed.Client(c.scheduler_address) as client:
        opts = ShardScanOptions(backend="dask", scheduler=c.scheduler_address, report_dir=str(tmp_path / "r"))

        def run() -> None:
            try:
                box["s"] = scan_shard_set([str(folder)], opts)
            except UserError as exc:
                box["error"] = str(exc)

        scan = threading.Thread(target=run)
        scan.start()
        busy_worker(client)
        c.close()
        scan.join(timeout=120)
        assert not scan.is_alive()
    assert "s" not in box and f"the Dask cluster at {c.scheduler_address} dropped the scan's tasks" in box["error"]
    assert not list((tmp_path / "r").glob("*parquet*"))  # nothing half-written, no temp file left


def test_daemonic_dask_workers_are_a_clear_error(tmp_path):
    """Dask's default workers may not start the processes a task checks its samples in: the scan says how to fix it."""
    import dask

    folder = str(tmp_path / "shards")
    wds_set(folder)
    with (
        dask.config.set({"distributed.worker.daemon": True}),  # Dask's default (the module's cluster sets it off)
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as daemonic,
    ):
        opts = ShardScanOptions(backend="dask", scheduler=daemonic.scheduler_address, report_dir=str(tmp_path / "r"))
        with pytest.raises(UserError, match="DASK_DISTRIBUTED__WORKER__DAEMON=False"):
            scan_shard_set([folder], opts)
    assert not list((tmp_path / "r").glob("*parquet*"))


def test_only_the_clusters_own_errors_are_reported_as_the_cluster_dropping_the_scan():
    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError

    from dsclean.shardsets.run import cluster_error

    def raised(exc: BaseException) -> BaseException:
        try:
            raise exc
        except BaseException as caught:
            return caught

    assert cluster_error(raised(CommClosedError("in <TCP local=... remote=...>: Stream is closed")))
    assert cluster_error(raised(FutureCancelledError("k", "lost")))
    assert not cluster_error(raised(OSError(28, "No space left on device")))  # this machine's own I/O
    assert not cluster_error(raised(PermissionError(13, "Access Denied")))  # a task's own, re-raised here


def test_a_local_io_error_during_a_dask_scan_is_not_blamed_on_the_cluster(tmp_path, cluster, monkeypatch):
    from dsclean.inflight import InFlight

    folder = str(tmp_path / "shards")
    wds_set(folder)

    def disk_full(self, broken):
        raise OSError(28, "No space left on device (injected)")

    monkeypatch.setattr(InFlight, "completed", disk_full)
    opts = ShardScanOptions(backend="dask", scheduler=cluster.scheduler_address, report_dir=str(tmp_path / "r"))
    with pytest.raises(OSError, match="No space left on device"):
        scan_shard_set([folder], opts)
