"""The Dask backend on a real distributed.LocalCluster (2 worker processes on loopback)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

distributed = pytest.importorskip("distributed")

from support import synth  # noqa: E402
from support.cluster import local_cluster as _local_cluster  # noqa: E402
from support.files import write  # noqa: E402
from support.treegen import make_tree  # noqa: E402

import dsclean  # noqa: E402
from dsclean.errors import UserError  # noqa: E402
from dsclean.scanning.scanner import ScanOptions, scan  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    with _local_cluster() as c:
        yield c


def _verdicts(report):
    return dsclean.read_results(str(report)).sort_by("path").to_pylist()


def test_dask_scan_gives_the_same_verdicts_as_a_local_scan(cluster, tmp_path):
    root = tmp_path / "data"
    make_tree(root, n_good=30, n_bad=15)
    write(root, "audio/a.wav", synth.encode_audio(synth.tone(0.1, 8000), 8000, "WAV"))
    write(root, "audio/cut.wav", synth.truncate(synth.encode_audio(synth.tone(0.2, 8000), 8000, "WAV"), 0.5))
    local = scan(str(root), ScanOptions(report_dir=str(tmp_path / "local"), jobs=2, use_cache=False, chunk_size=4))
    remote = scan(
        str(root),
        ScanOptions(
            report_dir=str(tmp_path / "dask"),
            backend="dask",
            use_cache=False,
            scheduler=cluster.scheduler_address,
            chunk_size=4,
        ),
    )
    assert remote.files == local.files == 47 and remote.bad == local.bad == 16
    assert _verdicts(tmp_path / "dask") == _verdicts(tmp_path / "local")


def test_dask_scan_quarantines_like_a_local_scan(cluster, tmp_path):
    root = tmp_path / "data"
    make_tree(root, n_good=6, n_bad=6)
    s = scan(
        str(root),
        ScanOptions(
            quarantine=str(tmp_path / "q"), backend="dask", scheduler=cluster.scheduler_address, use_cache=False
        ),
    )
    assert s.quarantined == 6 and len(list((tmp_path / "q").rglob("bad*"))) == 6
    assert dsclean.restore(str(tmp_path / "q")).restored == 6


@pytest.mark.slow  # fault injection: a crashing check on a dask cluster
def test_a_crashing_file_does_not_take_a_dask_worker_down(tmp_path):
    root = tmp_path / "data"
    make_tree(root, n_good=8, n_bad=0)
    write(root, "cats/x__segfault__.jpg", synth.jpeg(8, 8))
    with (
        _local_cluster(env={"DSCLEAN_TEST_FAULTS": "1"}) as faulty,
        distributed.Client(faulty.scheduler_address) as client,
    ):
        pids = client.run(os.getpid)
        s = scan(
            str(root),
            ScanOptions(
                report_dir=str(tmp_path / "r"),
                backend="dask",
                use_cache=False,
                scheduler=faulty.scheduler_address,
                chunk_size=3,
            ),
        )
        assert client.run(os.getpid) == pids  # the same worker processes: none died
    v = {v.path: v for v in dsclean.iter_verdicts(str(tmp_path / "r"))}
    assert v["cats/x__segfault__.jpg"].reason == "decoder_crash" and "SIGSEGV" in v["cats/x__segfault__.jpg"].detail
    assert s.files == 9 and s.bad == 1


@pytest.mark.slow  # fault injection: a dask worker killed mid-scan
def test_a_worker_killed_mid_scan_costs_only_its_chunk(cluster, tmp_path):
    root = tmp_path / "data"
    good = synth.jpeg(384, 384)
    for i in range(3000):
        write(root, f"c{i % 4}/{i:04d}.jpg", good + i.to_bytes(4, "big"))
    local = scan(str(root), ScanOptions(report_dir=str(tmp_path / "local"), jobs=2, use_cache=False))
    with distributed.Client(cluster.scheduler_address) as client:
        victim = next(iter(client.run(os.getpid).values()))
        box = {}
        worker = threading.Thread(
            target=lambda: box.update(
                s=scan(
                    str(root),
                    ScanOptions(
                        report_dir=str(tmp_path / "dask"),
                        backend="dask",
                        use_cache=False,
                        scheduler=cluster.scheduler_address,
                        chunk_size=8,
                    ),
                )
            )
        )
        worker.start()
        time.sleep(0.4)
        assert worker.is_alive(), "the scan finished before a worker could be killed"
        os.kill(victim, signal.SIGKILL)
        worker.join(timeout=300)
        client.wait_for_workers(2, timeout=60)  # the nanny restarts it, for the next test
    assert box["s"].files == 3000 == local.files
    assert _verdicts(tmp_path / "dask") == _verdicts(tmp_path / "local")


def test_dask_backend_user_errors(tmp_path):
    root = tmp_path / "data"
    make_tree(root, n_good=1, n_bad=0)
    with pytest.raises(UserError, match="needs --scheduler"):
        scan(str(root), ScanOptions(backend="dask", report_dir=str(tmp_path / "r")))
    with pytest.raises(UserError, match="cannot reach the Dask scheduler"):
        scan(str(root), ScanOptions(backend="dask", scheduler="tcp://127.0.0.1:1", report_dir=str(tmp_path / "r")))


def test_a_clear_message_when_dask_is_not_installed(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)  # makes `import distributed` fail
    root = tmp_path / "data"
    make_tree(root, n_good=1, n_bad=0)
    with pytest.raises(UserError, match=r"pip install 'dsclean\[dask\]'"):
        scan(str(root), ScanOptions(backend="dask", scheduler="tcp://127.0.0.1:8786", report_dir=str(tmp_path / "r")))
