"""dsclean.guard on map-style datasets, through real DataLoader workers (fork and spawn)."""

from __future__ import annotations

import pickle

import pytest
import torch
from support.guarded import Hungry, Numbers, limit_memory
from support.packing import make_indexed

import dsclean
from dsclean.data.dataset import SampleError
from dsclean.data.guard import GuardedDataset, replacement_index

START = ["fork", "spawn"]


def _loader(ds, ctx, **kw):
    kw.setdefault("batch_size", 4)
    return torch.utils.data.DataLoader(ds, num_workers=2, multiprocessing_context=ctx, **kw)


@pytest.mark.parametrize("ctx", START)
def test_raise_names_the_sample_and_logs_it(tmp_path, ctx):
    log = tmp_path / "runs" / "failures.jsonl"
    ds = dsclean.guard(Numbers(16, raise_on={9}), log=log)
    with pytest.raises(SampleError, match=r"sample 9: OSError: broken sample 9"):
        for _ in _loader(ds, ctx):
            pass
    logs = dsclean.read_failures(log)
    assert [(f["index"], f["error"], f["action"], f["kind"]) for f in logs.failures] == [
        (9, "OSError", "raise", "exception")
    ]
    assert logs.failures[0]["worker"] in (0, 1) and logs.files[0].endswith(f"worker{logs.failures[0]['worker']}.jsonl")
    assert any("__getitem__" in fr for fr in logs.failures[0]["traceback"])


@pytest.mark.parametrize("ctx", ["fork"])
def test_skip_makes_the_batch_shorter_with_dsclean_loader(tmp_path, ctx):
    ds = dsclean.guard(Numbers(16, raise_on={1, 2, 3, 9}), on_error="skip", log=tmp_path / "f.jsonl")
    batches = [
        b.flatten().tolist() for b in dsclean.DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context=ctx)
    ]
    assert batches == [[0], [4, 5, 6, 7], [8, 10, 11], [12, 13, 14, 15]]
    assert sorted(f["index"] for f in dsclean.read_failures(tmp_path / "f.jsonl").failures) == [1, 2, 3, 9]


def test_skip_works_with_torch_loader_and_collate_skip_none():
    ds = dsclean.guard(Numbers(8, raise_on={0, 1, 2, 3}), on_error="skip")
    batches = [b for b in _loader(ds, "fork", collate_fn=dsclean.collate_skip_none)]
    assert batches[0][0].numel() == 0  # a batch where all failed is empty, not a crash
    assert batches[1].flatten().tolist() == [4, 5, 6, 7]


@pytest.mark.parametrize("ctx", START)
def test_replace_keeps_batch_size_and_is_deterministic(tmp_path, ctx):
    bad = {2, 5, 11}
    runs = []
    for _ in range(2):
        ds = dsclean.guard(Numbers(16, raise_on=bad), on_error="replace", seed=7)
        ds.set_epoch(3)
        runs.append([b.flatten().tolist() for b in _loader(ds, ctx)])
    assert runs[0] == runs[1] and all(len(b) == 4 for b in runs[0])
    served = [x for b in runs[0] for x in b]
    assert not bad & set(served)
    assert served[2] == replacement_index(7, 3, 2, 0, 16)


def test_replacement_depends_on_seed_epoch_and_index():
    picks = {replacement_index(s, e, 5, 0, 1000) for s in range(3) for e in range(3)}
    assert len(picks) > 5 and 5 not in picks
    assert replacement_index(0, 0, 5, 0, 1000) == replacement_index(0, 0, 5, 0, 1000)


def test_replace_retries_then_names_the_sample():
    ds = dsclean.guard(Numbers(3, raise_on={0, 1, 2}), on_error="replace", retries=4)
    with pytest.raises(SampleError, match="no replacement loaded after 4 tries"):
        ds[0]
    assert ds.counts()["failed"] == 5


@pytest.mark.parametrize("ctx", ["forkserver"])
def test_max_failures_count_is_summed_over_workers(tmp_path, ctx):
    ds = dsclean.guard(Numbers(40, raise_on={1, 6, 21, 26}), on_error="skip", max_failures=3, log=tmp_path / "f.jsonl")
    with pytest.raises(dsclean.TooManyFailures, match=r"4 samples failed, more than max_failures=3.*f\.jsonl"):
        for _ in dsclean.DataLoader(ds, batch_size=5, num_workers=2, multiprocessing_context=ctx):
            pass  # worker 0 gets batches 0, 2, 4 (1, 21), worker 1 batches 1, 3, 5 (6, 26): 2 each


def test_max_failures_fraction_of_seen():
    ds = dsclean.guard(Numbers(3000, raise_on={10, 2500, 2600}), on_error="skip", max_failures=0.001)
    served = []
    with pytest.raises(dsclean.TooManyFailures, match=r"3 samples failed.*\(2 of 2601 samples seen\)"):
        for i in range(3000):
            served.append(ds[i])
    assert len(served) == 2600 and served.count(None) == 2  # 1 of 11 seen is allowed, 2 of 2501 too


def test_guard_pickles_small_and_keeps_no_per_sample_objects():
    ds = dsclean.guard(Numbers(100000), on_error="skip")
    before = len(pickle.dumps(ds))
    for i in range(0, 100000, 7):
        ds[i]
    assert len(pickle.dumps(ds)) == before  # nothing accumulates per sample
    assert ds.counts()["seen"] == len(range(0, 100000, 7))


def test_indexed_dataset_failure_names_path_and_root(tmp_path):
    root, index = make_indexed(tmp_path, n_images=8, n_audio=0, odd_name=False)
    inner = dsclean.IndexedDataset(index)
    victim = inner.path(5)
    (root / victim).write_bytes(b"\xff\xd8 not really a jpeg")
    ds = dsclean.guard(inner, on_error="skip", log=tmp_path / "f.jsonl")
    out = [
        b
        for b in dsclean.DataLoader(
            ds, batch_size=4, num_workers=2, collate_fn=lambda b: b, multiprocessing_context="fork"
        )
    ]
    assert sum(x is None for b in out for x in b) == 0 and sum(len(b) for b in out) == 7
    (line,) = dsclean.read_failures(tmp_path / "f.jsonl").failures
    assert (line["index"], line["path"], line["root"]) == (5, victim, str(root))
    assert ds.classes == inner.classes  # the inner dataset's attributes show through


def test_memory_error_under_rlimit_as_is_skipped_and_logged(tmp_path):
    ds = dsclean.guard(Hungry(12, big=6), on_error="skip", log=tmp_path / "f.jsonl")
    got = [
        x
        for b in dsclean.DataLoader(
            ds, batch_size=3, num_workers=2, worker_init_fn=limit_memory, multiprocessing_context="fork"
        )
        for x in b.flatten().tolist()
    ]
    assert got == [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11]
    (line,) = dsclean.read_failures(tmp_path / "f.jsonl").failures
    assert (line["index"], line["error"], line["action"]) == (6, "MemoryError", "skip")


def test_hf_datasets_row_is_named(tmp_path):
    import datasets  # in the test extra: a missing one is a failure, not a skip
    from PIL import Image

    folder = tmp_path / "hf" / "train"
    for cls in ("a", "b"):
        (folder / cls).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (8, 8), (i * 40, 0, 0)).save(folder / cls / f"{i}.png")
    hf = datasets.load_dataset(
        "imagefolder", data_dir=str(tmp_path / "hf"), split="train", cache_dir=str(tmp_path / "cache")
    )
    bad_row = 4
    (folder / ("b" if bad_row >= 3 else "a") / f"{bad_row % 3}.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    hf = hf.cast_column("image", datasets.Image(decode=True))
    broken = [i for i in range(len(hf)) if _fails(hf, i)]
    assert broken, "the damaged file must fail to decode"
    ds = dsclean.guard(hf, on_error="skip", log=tmp_path / "f.jsonl")
    kept = [row for row in (ds[i] for i in range(len(hf))) if row is not None]
    assert len(kept) == len(hf) - len(broken)
    assert [f["row"] for f in dsclean.read_failures(tmp_path / "f.jsonl").failures] == broken


def _fails(hf, i) -> bool:
    try:
        hf[i]["image"].load()
        return False
    except Exception:
        return True


def test_refuses_bad_options():
    with pytest.raises(ValueError, match="on_error"):
        dsclean.guard(Numbers(2), on_error="ignore")
    with pytest.raises(ValueError, match="fraction"):
        dsclean.guard(Numbers(2), max_failures=1.5)
    assert isinstance(dsclean.guard(Numbers(2)), GuardedDataset)
