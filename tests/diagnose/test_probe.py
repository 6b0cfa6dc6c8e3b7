"""dsclean probe: a real DataLoader with 2 workers (climbing vs settled memory) and --all over broken files."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import pytest
import torch
from support import synth
from torch.utils.data import Dataset

from dsclean.cli import diagnose as cli_doctor
from dsclean.diagnose.probe import (
    CLIMB_GROWTH,
    CLIMB_SLOPE,
    WorkerTrace,
    check_all,
    fit_trend,
    format_failures,
    format_probe,
    probe_dataset,
    probe_index,
    sparkline,
)
from dsclean.errors import UserError
from dsclean.index.build import build_index

MiB = 2**20


class GrowingDataset(Dataset):
    """Keeps 1 MiB of touched bytes per item (a per-item cache): worker memory climbs ~25 MiB/s."""

    def __init__(self) -> None:
        self.cache: list[bytes] = []

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int):
        self.cache.append(b"x" * MiB)  # b"x" * n writes every page (a bytearray(n) might stay untouched)
        time.sleep(0.04)
        return torch.zeros(4)


class FailingDataset(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        raise ValueError(f"cannot load sample {i}")


def _write(path, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


@pytest.fixture(scope="module")
def png_index(tmp_path_factory):
    """300 tiny real PNGs in 3 classes."""
    base = tmp_path_factory.mktemp("pngs")
    for i in range(300):
        _write(str(base / "data" / f"c{i % 3}" / f"{i}.png"), synth.png(16, 16, seed=i))
    out = str(base / "index.arrow")
    build_index(str(base / "data"), out)
    return out


@pytest.fixture
def broken_set(tmp_path):
    """Good images plus exactly five that fail to load, in different ways. Returns (index, broken paths)."""
    root = tmp_path / "data"
    for i in range(6):
        _write(str(root / "good" / f"{i}.png"), synth.png(16, 16, seed=i))
    _write(str(root / "good" / "photo.jpg"), synth.jpeg(32, 32))
    _write(str(root / "bad" / "truncated.png"), synth.truncate(synth.png(32, 32), 0.5))
    _write(str(root / "bad" / "truncated.jpg"), synth.truncate(synth.jpeg(64, 64), 0.3))
    _write(str(root / "bad" / "crc.png"), synth.png_break_crc(synth.png(32, 32)))
    _write(str(root / "bad" / "deleted.png"), synth.png(16, 16))
    _write(str(root / "bad" / "changed.png"), synth.png(16, 16))
    index = str(tmp_path / "index.arrow")
    build_index(str(root), index, check=False)  # magic bytes only: the broken files are in the index
    os.remove(root / "bad" / "deleted.png")  # gone since indexing
    _write(str(root / "bad" / "changed.png"), synth.png(24, 24, seed=9))  # rewritten since indexing
    broken = {"bad/truncated.png", "bad/truncated.jpg", "bad/crc.png", "bad/deleted.png", "bad/changed.png"}
    return index, broken


def _cli(argv, capsys):
    p = argparse.ArgumentParser(prog="dsclean")
    cli_doctor.add_parsers(p.add_subparsers(dest="command"))
    args = p.parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr().out


# ----------------------------------------------------------------------------- real DataLoader runs


def test_indexed_dataset_memory_settles(png_index):
    result = probe_index(png_index, num_workers=2, batch_size=16, seconds=3.0, interval=0.25)
    assert result.error is None and result.failed == 0
    assert len(result.workers) == 2 and result.samples > 0 and result.samples_per_s > 0
    for w in result.workers:
        assert w.slope is not None and not w.climbing, (w.slope, w.uss)
        assert w.start and w.end and w.pss[-1]
    assert not result.climbing and result.exit_code == 0
    text = format_probe(result)
    assert "worker memory settles" in text and "samples/s" in text and "CLIMBING" not in text


def test_growing_dataset_is_flagged_as_climbing():
    result = probe_dataset(GrowingDataset(), num_workers=2, batch_size=4, seconds=3.0, interval=0.25, collate_fn=None)
    assert len(result.workers) == 2
    for w in result.workers:
        assert w.climbing and w.slope > CLIMB_SLOPE and w.growth > CLIMB_GROWTH, (w.slope, w.uss)
    assert result.climbing and result.exit_code == 1
    text = format_probe(result, ascii_only=False)
    assert text.count("CLIMBING") == 2 and "warning: worker memory climbs steadily" in text and "IndexedDataset" in text


def test_loader_failure_is_reported_with_its_kind():
    result = probe_dataset(FailingDataset(), num_workers=1, batch_size=2, batches=2)
    assert result.error is not None and "cannot load sample" in result.error and result.exit_code == 1
    text = format_probe(result)
    assert "the DataLoader failed: ValueError" in text and "exception: exception in Dataset code" in text


def test_main_process_probe(png_index):
    result = probe_index(png_index, num_workers=0, batch_size=50, batches=3)
    assert result.batches == 3 and result.samples == 150 and result.workers == [] and result.main_rss
    assert result.exit_code == 0


# ----------------------------------------------------------------------------- trend fitting


def _trace(values_mib, dt=0.5):
    return WorkerTrace(pid=1, t=[i * dt for i in range(len(values_mib))], uss=[int(v * MiB) for v in values_mib])


def test_fit_trend_both_ways():
    steep = _trace([100 + 10 * i for i in range(10)])  # 20 MiB/s for 4.5 s
    fit_trend(steep, 0.0)
    assert steep.climbing and steep.slope == pytest.approx(20 * MiB, rel=1e-6)

    flat = _trace([100, 101, 100, 100.5, 100, 101, 100.5, 100])
    fit_trend(flat, 0.0)
    assert not flat.climbing and abs(flat.slope) < CLIMB_SLOPE

    slow_but_long = _trace([100 + 0.2 * i for i in range(200)])  # 0.4 MiB/s: below the slope threshold
    fit_trend(slow_but_long, 0.0)
    assert not slow_but_long.climbing and slow_but_long.growth > CLIMB_GROWTH

    short_jump = _trace([100, 101, 102, 103])  # 2 MiB/s but only 3 MiB in total: below the growth threshold
    fit_trend(short_jump, 0.0)
    assert short_jump.slope > CLIMB_SLOPE and not short_jump.climbing


def test_fit_trend_skips_warm_up_and_short_runs():
    warm = _trace([20, 60, 100, 100, 100, 100, 100, 100])  # imports fill the worker, then flat
    fit_trend(warm, 1.0)
    assert not warm.climbing and warm.slope == pytest.approx(0, abs=1)
    fit_trend(warm, 0.0)
    assert warm.climbing  # the same trace without the warm-up cut would be flagged
    short = _trace([10, 50])
    fit_trend(short, 0.0)
    assert short.slope is None and not short.climbing


def test_sparkline():
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8], ascii_only=False) == "▁▂▃▄▅▆▇█"
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8], ascii_only=True) == "_.-=+*#@"
    assert sparkline([5, 5, 5], ascii_only=True) == "___"
    assert sparkline([100, 101, 100, 101.5], ascii_only=True, min_span=16) == "____"  # noise stays flat
    assert sparkline([0, 8, 16], ascii_only=True, min_span=16) == "_+@"
    assert len(sparkline(list(range(1000)), width=40, ascii_only=True)) == 40
    assert sparkline([]) == ""


# ----------------------------------------------------------------------------- --all


def test_check_all_lists_exactly_the_broken_files(broken_set):
    index, broken = broken_set
    tried, failures = check_all(index)
    assert tried == 12
    assert {f.path for f in failures} == broken
    by_path = {f.path: f for f in failures}
    assert "image file is truncated" in by_path["bad/truncated.png"].error
    assert "StaleEntryError" in by_path["bad/changed.png"].error
    assert "No such file" in by_path["bad/deleted.png"].error
    for f in failures:
        assert f.traceback.startswith("Traceback (most recent call last):") and "SampleError" in f.traceback
    text = format_failures(tried, failures)
    assert text.startswith("loaded 12 samples in the main process: 5 failed")


def test_cli_all(broken_set, capsys):
    index, broken = broken_set
    code, out = _cli(["probe", index, "--num-workers", "0", "--all", "--json"], capsys)
    data = json.loads(out)
    assert code == 1 and data["samples"] == 12 and {f["path"] for f in data["failures"]} == broken
    code, out = _cli(["probe", index, "--all"], capsys)  # --num-workers defaults to 0 with --all
    assert code == 1 and all(f"{p}\n" in out for p in broken)


def test_cli_all_clean_set(png_index, capsys):
    code, out = _cli(["probe", png_index, "--num-workers", "0", "--all"], capsys)
    assert code == 0 and out.startswith("loaded 300 samples in the main process: 0 failed")


def test_cli_usage_errors(png_index, tmp_path, capsys, monkeypatch):
    with pytest.raises(UserError, match="--num-workers 0"):
        _cli(["probe", png_index, "--num-workers", "2", "--all"], capsys)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    with pytest.raises(UserError, match="pip install matplotlib"):
        _cli(["probe", png_index, "--batches", "1", "--plot", str(tmp_path / "m.png")], capsys)
    with pytest.raises(SystemExit):
        _cli(["probe", png_index, "--batches", "1", "--seconds", "1"], capsys)


def test_cli_probe_json(png_index, capsys):
    code, out = _cli(
        [
            "probe",
            png_index,
            "--num-workers",
            "2",
            "--batch-size",
            "8",
            "--batches",
            "20",
            "--interval",
            "0.1",
            "--json",
        ],
        capsys,
    )
    data = json.loads(out)
    assert code == 0 and data["batches"] == 20 and data["samples"] == 160 and data["climbing"] is False
    assert data["num_workers"] == 2


def test_plot_when_matplotlib_is_installed(png_index, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "mem.png"
    code, text = _cli(
        ["probe", png_index, "--batches", "10", "--batch-size", "8", "--interval", "0.1", "--plot", str(out)], capsys
    )
    assert code == 0 and out.stat().st_size > 0 and "plot written" in text


# ----------------------------------------------------------------------------- issue 10: wording


def test_all_groups_failures_by_reason(broken_set, capsys):
    index, broken = broken_set
    from dsclean.index.store import read_meta

    root = read_meta(index)["root"]
    for i in range(2):  # two more files gone: one reason, three files
        os.remove(os.path.join(root, "good", f"{i}.png"))
    code, out = _cli(["probe", index, "--all"], capsys)
    assert code == 1 and "Traceback" not in out and "full tracebacks: --tracebacks" in out
    counts = {
        line.split(None, 1)[1]: int(line.split()[0]) for line in out.splitlines()[1:] if line[:8].strip().isdigit()
    }
    assert counts["FileNotFoundError: [Errno 2] No such file or directory: <path>"] == 3
    assert sum(counts.values()) == 7 and len(counts) == 5
    assert re.search(r"sample \d+: good/0.png\n", out) and re.search(r"sample \d+: good/1.png\n", out)
    code, out = _cli(["probe", index, "--all", "--tracebacks"], capsys)
    assert sum(line.startswith("sample ") for line in out.splitlines()) == 7  # each failure in full
    assert "Traceback (most recent call last)" in out


def test_failure_reason_drops_what_differs_per_file():
    from dsclean.diagnose.probe import failure_reason

    a = failure_reason(
        "SampleError: sample 3 (bad/a.png under /d): OSError: image file is truncated (5 bytes not processed)"
    )
    b = failure_reason(
        "SampleError: sample 9 (x/b.png under /d): OSError: image file is truncated (12 bytes not processed)"
    )
    assert a == b == "OSError: image file is truncated (N bytes not processed)"
    # paths become <path>, the message's own text (parentheses, quotes, digits in words) stays readable
    farm = (
        "SampleError: sample 0 (a/0.jpg under /tmp/review5/farm): refused: its folder resolves to "
        "/tmp/review5/store/{}, outside the root (IndexedDataset(..., follow_symlinks='all') follows such links)"
    )
    assert (
        failure_reason(farm.format("a"))
        == failure_reason(farm.format("b"))
        == (
            "refused: its folder resolves to <path>, outside the root "
            "(IndexedDataset(..., follow_symlinks='all') follows such links)"
        )
    )
    gone = "SampleError: sample 2 (b/1.png under /d): FileNotFoundError: [Errno 2] No such file or directory: '{}'"
    assert (
        failure_reason(gone.format("/d/b/1.png"))
        == failure_reason(gone.format("/d/c 9/x.png"))
        == "FileNotFoundError: [Errno 2] No such file or directory: <path>"
    )
    assert (
        failure_reason(
            "SampleError: sample 1 (x under /d): UnidentifiedImageError: cannot identify image file "
            "<_io.BytesIO object at 0x7f3a2b1c0>"
        )
        == "UnidentifiedImageError: cannot identify image file <_io.BytesIO object at 0x…>"
    )


def test_probe_names_its_own_flag_for_a_moved_dataset(broken_set, tmp_path, capsys):
    import shutil

    from dsclean.errors import UserError
    from dsclean.index.store import read_meta

    index, _ = broken_set
    shutil.move(read_meta(index)["root"], str(tmp_path / "moved"))
    with pytest.raises(UserError, match="--root NEW_LOCATION") as info:
        _cli(["probe", index, "--all"], capsys)
    assert "root=" not in str(info.value)
    code, _ = _cli(["probe", index, "--all", "--root", str(tmp_path / "moved")], capsys)
    assert code == 1  # found the files at the new place (and the broken ones)


# ----------------------------------------------------------------------------- review 5: links, packed sets


@pytest.fixture
def symlink_farm(tmp_path):
    """A symlink farm (class folders link to storage outside the root), indexed the README's way."""
    for c in ("a", "b"):
        for i in range(3):
            _write(str(tmp_path / "store" / c / f"{i}.png"), synth.png(16, 16, seed=10 * (c == "b") + i))
    (tmp_path / "farm").mkdir()
    for c in ("a", "b"):
        os.symlink(f"../store/{c}", tmp_path / "farm" / c)
    index = str(tmp_path / "farm.arrow")
    build_index(str(tmp_path / "farm"), index, files="imagefolder", check=False)
    return index


def test_probe_uses_the_link_policy_the_index_was_built_with(symlink_farm, capsys):
    """An index built with --files imagefolder (--symlinks all) loads through its links: probe exits 0."""
    from dsclean.index.store import read_meta

    assert read_meta(symlink_farm)["symlinks"] == "all"
    code, out = _cli(["probe", symlink_farm, "--all"], capsys)
    assert code == 0 and out.startswith("loaded 6 samples in the main process: 0 failed"), out
    code, out = _cli(
        [
            "probe",
            symlink_farm,
            "--num-workers",
            "1",
            "--batch-size",
            "2",
            "--batches",
            "3",
            "--interval",
            "0.1",
            "--json",
        ],
        capsys,
    )
    data = json.loads(out)
    assert code == 0 and data["failed"] == 0 and data["samples"] == 6
    # --symlinks inside: the links out of the root are refused, grouped under a readable cause
    code, out = _cli(["probe", symlink_farm, "--all", "--symlinks", "inside"], capsys)
    assert code == 1 and "6 failed" in out
    assert (
        "     6  refused: its folder resolves to <path>, outside the root "
        "(IndexedDataset(..., follow_symlinks='all') follows such links)\n"
    ) in out
    assert "dsclean probe --symlinks all follows them" in out


def test_probe_and_info_take_a_packed_shard_folder_as_indexed_dataset_does(png_index, tmp_path, capsys):
    from dsclean.cli import main
    from dsclean.data.dataset import IndexedDataset
    from dsclean.pack.packer import PackOptions, pack_shards

    shards = str(tmp_path / "shards")
    pack_shards(png_index, shards, PackOptions(samples_per_shard=100))
    assert len(IndexedDataset(shards)) == 300
    code, out = _cli(["probe", shards, "--all"], capsys)
    assert code == 0 and out.startswith("loaded 300 samples in the main process: 0 failed")
    code, out = _cli(
        ["probe", shards, "--num-workers", "1", "--batch-size", "10", "--batches", "3", "--interval", "0.1", "--json"],
        capsys,
    )
    assert code == 0 and json.loads(out)["samples"] == 30
    with pytest.raises(UserError, match="packed shard set.*--root does not apply"):
        _cli(["probe", shards, "--all", "--root", str(tmp_path)], capsys)
    assert main(["info", shards, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["rows"] == 300 and info["index"] == os.path.join(shards, "index.arrow")
    assert info["metadata"]["packed"]["shards"] == 3
