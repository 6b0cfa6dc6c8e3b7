"""recommended_loader_kwargs: bounds by cores, memory and /dev/shm; sample sizes from facts or measured."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from support import synth
from support.fixtures_sys.fakesys import GiB, MiB, facts_index, make_sys
from torch.utils.data import DataLoader, Dataset

from dsclean.diagnose.loader_kwargs import (
    WORKER_OVERHEAD,
    bytes_from_facts,
    estimate_sample_bytes,
    index_facts,
    recommended_loader_kwargs,
    sample_nbytes,
)
from dsclean.errors import UserError


class Tensors(Dataset):
    """n samples of (3, 8, 8) float32 = 768 bytes; indices in ``broken`` raise."""

    def __init__(self, n: int = 20, broken: tuple = ()) -> None:
        self.n, self.broken = n, set(broken)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if i in self.broken:
            raise OSError(f"broken {i}")
        return torch.zeros(3, 8, 8), i % 2


# ----------------------------------------------------------------------------- bounds


def test_cpu_bound(tmp_path):
    rec = recommended_loader_kwargs(Tensors(), 16, sys_paths=make_sys(tmp_path), cuda_available=False)
    assert rec.kwargs == {
        "batch_size": 16,
        "num_workers": 7,
        "prefetch_factor": 2,
        "persistent_workers": True,
        "pin_memory": False,
    }
    assert rec.bounds["cpu"] == 7 and "limited by cpu" in rec.reasons[-3]
    assert rec.estimate.method == "measured" and rec.estimate.mean == 768


def test_cpu_quota_and_single_core(tmp_path):
    rec = recommended_loader_kwargs(
        None, 8, sys_paths=make_sys(tmp_path / "a", cpu_max="300000 100000"), cuda_available=False, sample_bytes=1000
    )
    assert rec.kwargs["num_workers"] == 2 and "cgroup quota 3 cores" in rec.reasons[0]
    one = recommended_loader_kwargs(
        None, 8, sys_paths=make_sys(tmp_path / "b", cpus_allowed="0"), cuda_available=False, sample_bytes=1000
    )
    assert one.kwargs == {"batch_size": 8, "num_workers": 0, "pin_memory": False}  # no prefetch_factor at 0
    assert "0 = load in the main process" in str(one)


def test_memory_bound(
    tmp_path,
):
    # 3 MB samples, batch 32, prefetch 2: a worker needs 200 MiB + 3 x 96 MB ~ 488 MB; 50% of 2 GiB fits 2
    sp = make_sys(tmp_path, memory_max=str(2 * GiB + 500 * MiB), memory_current=500 * MiB)
    rec = recommended_loader_kwargs(None, 32, sys_paths=sp, cuda_available=False, sample_bytes=3_000_000)
    assert rec.bounds["memory"] == int(0.5 * 2 * GiB // (WORKER_OVERHEAD + 3 * 32 * 3_000_000)) == 2
    assert rec.kwargs["num_workers"] == 2 and "limited by memory" in str(rec)
    assert "cgroup v2 limit minus usage" in str(rec)


def test_shm_bound(tmp_path):
    sp = make_sys(tmp_path, shm=(64 * MiB, 64 * MiB))
    rec = recommended_loader_kwargs(None, 32, sys_paths=sp, cuda_available=False, sample_bytes=150_000)
    # each worker keeps 2 x 32 x 150 KB = 9.6 MB in /dev/shm; 32 MiB / 9.6 MB = 3
    assert rec.bounds["shm"] == 3 and rec.kwargs["num_workers"] == 3 and "limited by shm" in str(rec)


def test_no_room_at_all_means_main_process(tmp_path):
    sp = make_sys(tmp_path, shm=(64 * MiB, MiB))
    rec = recommended_loader_kwargs(None, 32, sys_paths=sp, cuda_available=False, sample_bytes=3_000_000)
    assert rec.kwargs["num_workers"] == 0 and "prefetch_factor" not in rec.kwargs


def test_pin_memory_follows_cuda(tmp_path):
    sp = make_sys(tmp_path)
    assert recommended_loader_kwargs(None, 4, sys_paths=sp, cuda_available=True, sample_bytes=10).kwargs["pin_memory"]
    auto = recommended_loader_kwargs(None, 4, sys_paths=sp, sample_bytes=10)
    assert auto.kwargs["pin_memory"] == torch.cuda.is_available()


def test_prefetch_factor_passes_through_and_bad_arguments(tmp_path):
    sp = make_sys(tmp_path)
    rec = recommended_loader_kwargs(None, 4, prefetch_factor=4, sys_paths=sp, cuda_available=False, sample_bytes=10)
    assert rec.kwargs["prefetch_factor"] == 4
    with pytest.raises(UserError, match="batch_size"):
        recommended_loader_kwargs(None, 0, sys_paths=sp)
    with pytest.raises(UserError, match="prefetch_factor"):
        recommended_loader_kwargs(None, 4, prefetch_factor=0, sys_paths=sp)


def test_unknown_sample_size(tmp_path):
    rec = recommended_loader_kwargs(None, 4, sys_paths=make_sys(tmp_path), cuda_available=False)
    assert rec.estimate is None and "sample size unknown" in str(rec) and "shm" not in rec.bounds


def test_kwargs_work_with_a_real_dataloader(tmp_path):
    rec = recommended_loader_kwargs(
        Tensors(), 4, sys_paths=make_sys(tmp_path, cpus_allowed="0-2"), cuda_available=False
    )
    assert rec.kwargs["num_workers"] == 2
    x, y = next(iter(DataLoader(Tensors(), **rec.kwargs)))
    assert x.shape == (4, 3, 8, 8)
    assert rec.to_json()["kwargs"] == rec.kwargs


# ----------------------------------------------------------------------------- sample sizes


def test_bytes_from_facts():
    facts = {
        "kind": np.array([0, 0, 1, 1, 0]),
        "width": np.array([10, 10, -1, -1, -1]),
        "height": np.array([20, 20, -1, -1, -1]),
        "channels": np.array([-1, 1, 2, -1, -1]),
        "frames": np.array([-1, -1, 1000, 1000, -1]),
    }
    assert bytes_from_facts(facts).tolist() == [600, 200, 8000, -1, -1]
    assert bytes_from_facts({}).tolist() == []


@pytest.mark.parametrize("fmt", ["arrow", "npy"])
def test_facts_from_index_and_dataset(tmp_path, fmt):
    from dsclean import IndexedDataset

    name = "i.arrow" if fmt == "arrow" else "i.npy"
    index = facts_index(tmp_path / name, tmp_path / "data", width=100, height=50, channels=4, fmt=fmt)
    assert index_facts(index)["width"].tolist() == [100] * 10
    est = estimate_sample_bytes(index)
    assert (est.mean, est.max, est.method, est.rows) == (20_000, 20_000, "index facts", 10)
    ds = IndexedDataset(index)
    rec = recommended_loader_kwargs(ds, 8, sys_paths=make_sys(tmp_path / "sys"), cuda_available=False)
    assert rec.estimate.method == "index facts" and "19.5 KiB" in str(rec)


def test_audio_facts(tmp_path):
    index = facts_index(
        tmp_path / "a.arrow", tmp_path / "data", kind=1, width=None, height=None, channels=2, frames=16_000
    )
    assert estimate_sample_bytes(index).mean == 16_000 * 2 * 4


def test_measured_when_facts_missing(tmp_path):
    """An index without facts: decode a few samples (images via the default RGB loader)."""
    from dsclean.index.build import build_index

    (tmp_path / "data" / "c").mkdir(parents=True)
    for i in range(4):
        (tmp_path / "data" / "c" / f"{i}.png").write_bytes(synth.png(8, 6, seed=i, mode="L"))
    (tmp_path / "data" / "c" / "tone.wav").write_bytes(synth.encode_audio(synth.tone(0.1, 8000, 1), 8000, "WAV"))
    build_index(str(tmp_path / "data"), str(tmp_path / "i.arrow"), check=False)  # magic bytes only: no facts
    est = estimate_sample_bytes(str(tmp_path / "i.arrow"))
    assert est.method == "measured" and est.rows == 5
    assert est.max == 800 * 4 and est.mean == (4 * 8 * 6 * 3 + 800 * 4) // 5


def test_measured_with_broken_samples(tmp_path):
    est = estimate_sample_bytes(Tensors(n=4, broken=(0, 1)))
    assert est.mean == 768 and est.rows == 2 and est.note == "2 of 4 samples failed to load"
    assert estimate_sample_bytes(Tensors(n=2, broken=(0, 1))) is None
    assert estimate_sample_bytes(Tensors(n=0)) is None


def test_sample_nbytes():
    assert sample_nbytes(torch.zeros(2, 3, dtype=torch.float64)) == 48
    assert sample_nbytes(np.zeros((4, 4), np.uint8)) == 16
    assert sample_nbytes(Image.new("RGBA", (3, 2))) == 24
    assert sample_nbytes({"a": torch.zeros(1), "b": [np.zeros(2, np.int16), b"xyz"]}) == 4 + 4 + 3
    assert sample_nbytes(None) == 0 and sample_nbytes("text") == 0
