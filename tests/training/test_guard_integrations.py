"""dsclean.guard with real components: webdataset tars, DDP ranks, a SIGKILLed run, spawn + pin_memory (issue 26)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from support.guarded import Numbers
from support.guarded_more import DecodeRGB, ddp_rank, write_shards
from torch.utils.data.distributed import DistributedSampler

import dsclean
from dsclean.data.dataset import SampleError

TESTS = Path(__file__).resolve().parents[1]
BAD = 8  # the damaged sample: the third of shard 1


@pytest.fixture
def shards(tmp_path):
    """Two real webdataset shards of 6 samples; s008's .jpg is a cut JPEG."""
    from support.guarded_more import jpeg

    url, keys = write_shards(tmp_path / "wds", shards=2, per_shard=6, bad={BAD: jpeg(BAD)[:60]})
    return url, keys, str(tmp_path / "wds" / "part-001.tar")


def test_webdataset_damaged_member_really_breaks_plain_webdataset(shards):
    import webdataset as wds

    url, keys, shard1 = shards
    got = []
    with pytest.raises(wds.autodecode.DecodingError) as info:
        for s in wds.WebDataset(url, shardshuffle=False).decode("pil"):
            got.append(s["__key__"])
    assert got == keys[:BAD] and (info.value.key, info.value.url) == (keys[BAD], shard1)


@pytest.mark.parametrize("workers", [1, 2])
def test_webdataset_skip_through_loader_yields_the_good_samples_and_logs_shard_and_key(shards, tmp_path, workers):
    import webdataset as wds

    url, keys, shard1 = shards
    log = tmp_path / "runs" / "failures.jsonl"
    ds = dsclean.guard(wds.WebDataset(url, shardshuffle=False), transform=DecodeRGB(), on_error="skip", log=log)
    loader = dsclean.DataLoader(ds, batch_size=4, num_workers=workers)
    seen = []
    for batch in loader:
        assert batch["jpg"].shape[1:] == (3, 12, 16) and batch["jpg"].dtype == torch.float32
        seen += list(batch["__key__"])
    assert sorted(seen) == [k for i, k in enumerate(keys) if i != BAD]  # the 11 good ones, once each
    logs = dsclean.read_failures(log)
    (line,) = logs.failures
    assert (line["key"], line["shard"], line["action"], line["kind"]) == (keys[BAD], shard1, "skip", "exception")
    assert line["error"] == "DecodingError" and line["worker"] == (1 if workers == 2 else 0)  # shard 1: worker 1
    assert logs.files == [str(tmp_path / "runs" / f"failures.rank0.worker{line['worker']}.jsonl")]


def test_webdataset_raise_names_the_key_and_shard(shards, tmp_path):
    import webdataset as wds

    url, keys, shard1 = shards
    ds = dsclean.guard(wds.WebDataset(url, shardshuffle=False), transform=DecodeRGB(), log=tmp_path / "f.jsonl")
    with pytest.raises(SampleError, match=rf"sample 2 \(key {keys[BAD]} in {shard1}\): DecodingError"):
        for _ in dsclean.DataLoader(ds, batch_size=4, num_workers=2):
            pass
    (line,) = dsclean.read_failures(tmp_path / "f.jsonl").failures
    assert (line["key"], line["shard"], line["action"]) == (keys[BAD], shard1, "raise")


def test_webdataset_decode_inside_the_pipeline_cannot_be_skipped_and_says_so(shards, tmp_path):
    """Without transform=, webdataset's generator is dead after the error: the guard names it instead of hiding it."""
    import webdataset as wds

    url, keys, shard1 = shards
    ds = dsclean.guard(wds.WebDataset(url, shardshuffle=False).decode("pil"), on_error="skip")
    got = []
    with pytest.raises(SampleError, match=rf"(?s)key {keys[BAD]} in {shard1}.*cannot go on.*transform="):
        for s in ds:
            got.append(s["__key__"])
    assert got == keys[:BAD]


# -- DDP: two gloo ranks -------------------------------------------------------------------


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_distributed_sampler_two_ranks_cover_every_good_index_once_and_log_per_rank(tmp_path, ctx):
    n, bad, epochs = 40, [3, 17, 30], 2
    torch.multiprocessing.spawn(ddp_rank, args=(str(tmp_path), ctx, n, bad, epochs), nprocs=2)
    got = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in (0, 1)]
    for epoch in range(epochs):
        for r in (0, 1):  # each rank got its DistributedSampler share for this epoch (set_epoch reached the sampler)
            sampler = DistributedSampler(range(n), num_replicas=2, rank=r, shuffle=True, seed=1)
            sampler.set_epoch(epoch)
            assert got[r][str(epoch)] == [i for i in sampler if i not in bad]
        both = got[0][str(epoch)] + got[1][str(epoch)]
        assert sorted(both) == [i for i in range(n) if i not in bad]  # every good index exactly once
    assert got[0]["0"] != got[0]["1"]  # the epochs are shuffled differently
    logs = dsclean.read_failures(tmp_path / "f.jsonl")
    assert logs.files == [str(tmp_path / f"f.rank{r}.worker0.jsonl") for r in (0, 1)]
    lines = [(f["rank"], f["epoch"], f["index"]) for f in logs.failures]
    assert len(lines) == len(bad) * epochs
    for r in (0, 1):
        mine = [ln for ln in lines if ln[0] == r]
        assert mine and all(i in _share(n, r, e) for _, e, i in mine)
    assert sorted((e, i) for _, e, i in lines) == sorted((e, i) for e in range(epochs) for i in bad)
    for r in (0, 1):  # each per-rank file holds that rank's lines only
        raw = [json.loads(x) for x in (tmp_path / f"f.rank{r}.worker0.jsonl").read_text().splitlines()]
        assert {x["rank"] for x in raw} == {r}


def _share(n: int, rank: int, epoch: int) -> set[int]:
    sampler = DistributedSampler(range(n), num_replicas=2, rank=rank, shuffle=True, seed=1)
    sampler.set_epoch(epoch)
    return set(sampler)


# -- kill -9 while logging -----------------------------------------------------------------


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.jsonl")) if folder.exists() else 0


def _check_files(log: Path) -> tuple[int, int]:
    """Every complete line of every per-process file is a JSON failure; at most a last partial line. (lines, torn)"""
    lines = torn = 0
    files = sorted(log.parent.glob(log.stem + ".rank*" + log.suffix))
    assert files
    for path in files:
        data = path.read_bytes()
        *whole, tail = data.split(b"\n")
        for raw in whole:
            record = json.loads(raw)  # a complete line that is not JSON fails here
            assert record["v"] == 1 and record["action"] == "skip" and record["path"].endswith(".jpg")
        lines += len(whole)
        if tail:  # the one line being written when the kill came: the last, without its newline
            torn += 1
            with pytest.raises(ValueError):
                json.loads(tail)
    return lines, torn


@pytest.mark.slow  # fault injection: logging workers killed
@pytest.mark.parametrize("workers", [0, 2])
def test_sigkill_while_logging_loses_at_most_the_last_line_of_each_file(tmp_path, workers):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    total_torn = 0
    for kill in range(5):
        log = tmp_path / f"run{kill}" / "failures.jsonl"
        code = f"from support.guarded_more import fail_forever; fail_forever({str(log)!r}, {workers})"
        err = tmp_path / f"run{kill}.err"
        with open(err, "wb") as errf:
            proc = subprocess.Popen(
                [sys.executable, "-c", code], env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=errf
            )
        try:
            want, deadline = 40 + 60 * kill, time.monotonic() + 60
            while _size(log.parent) < want * 10_000:
                assert proc.poll() is None, f"the logging run ended by itself: {err.read_bytes()[-3000:]!r}"
                assert time.monotonic() < deadline
                time.sleep(0.005)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the run and its workers, wherever each is in its write
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        lines, torn = _check_files(log)
        total_torn += torn
        logs = dsclean.read_failures(log)
        assert len(logs.failures) == lines >= want // 2 and logs.damaged_lines == 0 and logs.torn_lines == torn
        assert all(f["message"].startswith("broken sample") for f in logs.failures)
    print(f"torn lines over 5 kills: {total_torn}")


def test_a_rerun_after_a_kill_keeps_its_first_failure(tmp_path):
    log = tmp_path / "f.jsonl"
    ds = dsclean.guard(Numbers(4, raise_on={1, 2}), on_error="skip", log=log)
    ds[1]
    mine = tmp_path / "f.rank0.main.jsonl"
    mine.write_bytes(mine.read_bytes()[:-25])  # the kill came in the middle of the line's write
    rerun = dsclean.guard(Numbers(4, raise_on={1, 2}), on_error="skip", log=log)
    rerun[2]
    logs = dsclean.read_failures(log)
    assert [f["index"] for f in logs.failures] == [2]  # the torn fragment stays apart; the next line is whole
    assert (logs.torn_lines, logs.damaged_lines) == (0, 1)  # now ended: one damaged line


# -- spawn + pin_memory + persistent workers -----------------------------------------------


def test_replace_keeps_batches_full_with_spawn_pin_memory_and_persistent_workers(tmp_path):
    bad = {2, 9, 10, 21}
    ds = dsclean.guard(Numbers(24, raise_on=bad), on_error="replace", seed=5, log=tmp_path / "f.jsonl")
    loader = dsclean.DataLoader(
        ds, batch_size=4, num_workers=2, pin_memory=True, persistent_workers=True, multiprocessing_context="spawn"
    )
    epochs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pin_memory without an accelerator warns
        for epoch in range(2):
            loader.set_epoch(epoch)
            batches = [b.flatten().tolist() for b in loader]
            assert [len(b) for b in batches] == [4] * 6
            epochs.append(batches)
    assert all(w.is_alive() for w in loader._iterator._workers)  # the same persistent workers served both epochs
    for epoch, batches in enumerate(epochs):
        assert [x for b in batches for x in b] == [_replacement(i, epoch, bad) if i in bad else i for i in range(24)]
    assert epochs[0] != epochs[1]  # set_epoch reached the persistent spawned workers: other replacements
    logs = dsclean.read_failures(tmp_path / "f.jsonl").failures
    assert {(f["epoch"], f["index"]) for f in logs} >= {(e, i) for e in range(2) for i in bad}
    assert {f["action"] for f in logs} == {"replace"}


def _replacement(index: int, epoch: int, bad: set[int]) -> int:
    """What guard(..., on_error="replace", seed=5) serves for a failing index (dsclean.data.guard)."""
    from dsclean.data.guard import replacement_index

    for attempt in range(10):
        index = replacement_index(5, epoch, index, attempt, 24)
        if index not in bad:
            return index
    raise AssertionError("no replacement")
