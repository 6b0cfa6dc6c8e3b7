"""dsclean.DataLoader: a dead worker is named (signal, meaning, sample) and the epoch can go on."""

from __future__ import annotations

import warnings

import pytest
import torch
from support.guarded import FullShm, Numbers, SegvLoader, SegvStream
from support.mounts import tmpfs
from support.packing import make_indexed

import dsclean


def _flat(loader) -> list[int]:
    return [x for b in loader for x in b.flatten().tolist()]


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_segfault_is_a_worker_died_naming_the_sample(tmp_path, ctx):
    log = tmp_path / "f.jsonl"
    loader = dsclean.DataLoader(
        Numbers(40, segv_on={13}), batch_size=4, num_workers=2, log=log, multiprocessing_context=ctx
    )
    with pytest.raises(dsclean.WorkerDied) as info:
        _flat(loader)
    err = info.value
    assert isinstance(err, RuntimeError)  # existing `except RuntimeError` handlers still catch it
    text = str(err)
    assert "killed by SIGSEGV" in text and "it was loading sample 13" in text
    assert "crashed in native code" in text and "dsclean scan" in text and str(log) in text
    assert (err.signal, err.samples, err.kind) == ("SIGSEGV", [13], "crash")
    (line,) = dsclean.read_failures(log).failures
    assert (line["kind"], line["error"], line["index"], line["worker"], line["action"]) == (
        "worker_died",
        "SIGSEGV",
        13,
        1,
        "raise",
    )


def test_indexed_dataset_death_names_the_file(tmp_path):
    root, index = make_indexed(tmp_path, n_images=8, n_audio=0, odd_name=False)
    probe = dsclean.IndexedDataset(index)
    victim = probe.path(6)
    ds = dsclean.IndexedDataset(index, loader=SegvLoader(victim))
    with pytest.raises(dsclean.WorkerDied, match=rf"sample 6 \({victim} under {root}\)"):
        for _ in dsclean.DataLoader(ds, batch_size=2, num_workers=2, multiprocessing_context="fork"):
            pass


@pytest.mark.parametrize("ctx", ["fork", "forkserver"])
def test_skip_delivers_every_other_index_exactly_once(tmp_path, ctx):
    order = torch.randperm(60, generator=torch.Generator().manual_seed(3)).tolist()
    loader = dsclean.DataLoader(
        Numbers(60, segv_on={order[29]}),
        batch_size=4,
        num_workers=2,
        sampler=order,
        on_worker_death="skip",
        log=tmp_path / "f.jsonl",
        multiprocessing_context=ctx,
    )
    got = _flat(loader)
    assert got == [i for i in order if i != order[29]]  # the sampler's order, the culprit left out, no repeats
    assert [f["index"] for f in dsclean.read_failures(tmp_path / "f.jsonl").failures] == [order[29]]


def test_skip_with_persistent_workers_and_pin_memory_over_two_epochs():
    loader = dsclean.DataLoader(
        Numbers(30, segv_on={7}),
        batch_size=3,
        num_workers=2,
        on_worker_death="skip",
        persistent_workers=True,
        pin_memory=True,
        multiprocessing_context="fork",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pin_memory without an accelerator warns
        epochs = [_flat(loader) for _ in range(2)]
    assert epochs[0] == epochs[1] == [i for i in range(30) if i != 7]


def test_deaths_on_different_samples_stop_with_the_memory_hint():
    loader = dsclean.DataLoader(
        Numbers(40, segv_on={3, 12, 21, 30}),
        batch_size=2,
        num_workers=2,
        on_worker_death="skip",
        max_worker_deaths=3,
        multiprocessing_context="fork",
    )
    with pytest.raises(
        dsclean.WorkerDied,
        match=r"(?s)4 DataLoader workers died this epoch.*max_worker_deaths=3"
        r".*dsclean doctor",
    ):
        _flat(loader)


def test_sigkill_reads_as_out_of_memory_and_exit_as_exit_code():
    with pytest.raises(dsclean.WorkerDied, match=r"(?s)killed by SIGKILL; it was loading sample 5.*out of memory"):
        _flat(dsclean.DataLoader(Numbers(20, kill_on={5}), batch_size=2, num_workers=2, multiprocessing_context="fork"))
    with pytest.raises(dsclean.WorkerDied, match=r"exit code 3; it was loading sample 9"):
        _flat(dsclean.DataLoader(Numbers(20, exit_on={9}), batch_size=2, num_workers=2, multiprocessing_context="fork"))


def test_iterable_death_is_named_and_raised_even_with_skip():
    loader = dsclean.DataLoader(
        SegvStream(50, bad=17), batch_size=4, num_workers=2, on_worker_death="skip", multiprocessing_context="fork"
    )
    with pytest.raises(dsclean.WorkerDied, match=r"(?s)reading sample #17 of its stream.*cannot be resumed"):
        _flat(loader)


def test_exceptions_in_workers_are_not_mistaken_for_deaths():
    with pytest.raises(dsclean.SampleError, match="sample 4: OSError"):
        _flat(
            dsclean.DataLoader(Numbers(10, raise_on={4}), batch_size=2, num_workers=2, multiprocessing_context="fork")
        )


def test_options_are_checked_and_torch_arguments_pass_through():
    with pytest.raises(ValueError, match="on_worker_death"):
        dsclean.DataLoader(Numbers(4), on_worker_death="ignore")
    loader = dsclean.DataLoader(Numbers(10), 5, False, num_workers=0, drop_last=True)
    assert (loader.batch_size, loader.drop_last) == (5, True) and len(list(loader)) == 2
    assert isinstance(loader, torch.utils.data.DataLoader) and loader.dataset.dataset.n == 10


def test_a_death_while_the_loop_body_runs_is_still_named(tmp_path):
    # torch's SIGCHLD handler would raise its unnamed RuntimeError inside this sleep (the training step)
    import time

    loader = dsclean.DataLoader(
        Numbers(40, segv_on={21}),
        batch_size=2,
        num_workers=2,
        prefetch_factor=1,
        log=tmp_path / "f.jsonl",
        multiprocessing_context="fork",
    )
    seen = []
    with pytest.raises(dsclean.WorkerDied, match="it was loading sample 21"):
        for batch in loader:
            seen.extend(batch.tolist())
            time.sleep(0.3)
    assert 21 not in seen


def test_a_big_batch_in_flight_is_named_in_one_short_line(tmp_path):
    loader = dsclean.DataLoader(
        Numbers(600, segv_on={300}), batch_size=256, num_workers=2, prefetch_factor=1, multiprocessing_context="fork"
    )
    with pytest.raises(dsclean.WorkerDied) as info:
        _flat(loader)
    first = str(info.value).splitlines()[0]
    assert "it was loading sample 300" in first and "(256 samples)]" in first and len(first) < 400


def test_a_full_shared_memory_mount_is_named_as_sigbus_and_dev_shm(tmp_path):
    with tmpfs(tmp_path / "shm", size="1m") as shm:
        loader = dsclean.DataLoader(
            FullShm(20, bad=11, folder=shm), batch_size=2, num_workers=2, multiprocessing_context="fork"
        )
        with pytest.raises(dsclean.WorkerDied) as info:
            _flat(loader)
    text = str(info.value)
    assert info.value.signal == "SIGBUS" and "it was loading sample 11" in text and "/dev/shm" in text
