"""Benchmark: DataLoader worker memory, IndexedDataset vs a plain Python list of paths.

Usage:  python scripts/bench_dataset.py [--rows 1000000] [--workers 2] [--out bench_out/dataset]

Builds a synthetic index of ``--rows`` ImageNet-like paths (no media files:
both datasets use the same trivial custom loader, so only the per-sample
bookkeeping is measured), then runs one epoch (shuffle=True, batch 256, fork)
of each dataset in its own fresh Python process:

- ``list``: the usual ``Dataset`` holding ``self.paths`` / ``self.labels`` Python lists;
- ``index``: ``IndexedDataset`` over the Arrow index (and ``index-npy`` over the npy folder).

Each worker's USS and PSS are read with psutil when it starts (worker_init_fn)
and sampled from the main process during the epoch; growth = last sample - start.
psutil is used only here (it is not a dsclean dependency).

``--lookup``: the per-sample cost of ``IndexedDataset[i]`` (trivial loader,
``check_stale=False``: the index bookkeeping only) against the baseline of a plain
Python list of paths + ``os.path.join``, side by side in one process on real folders
and files (``--tmp``, default /dev/shm), for a few folders and for 100,000 folders
(the old per-process folder cache held 65,536). Then ``validate`` of a 10M-row index.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time

import numpy as np

MB = 1024 * 1024


def trivial_loader(path: str) -> int:
    """Stands in for image decoding: the same cost for both datasets."""
    return 0


# ----------------------------------------------------------------------------- index generation


def make_index(out_dir: str, rows: int) -> dict:
    """Write the synthetic index in both formats (uses dsclean's own writers)."""
    import pyarrow as pa

    from dsclean.index import store as ix
    from dsclean.index import write as ix_write

    root = os.path.join(out_dir, "root")
    os.makedirs(root, exist_ok=True)
    classes = 1000
    i = np.arange(rows)
    label = i % classes
    paths = [f"n{c + 1440764:08d}/n{c + 1440764:08d}_{k}.JPEG" for c, k in zip(label.tolist(), i.tolist())]
    table = pa.table(
        {
            "path": pa.array([p.encode() for p in paths], pa.binary()),
            "label": pa.array(label, pa.int64()),
            "kind": pa.array(np.zeros(rows, np.int8)),
            "size": pa.array(np.full(rows, 110_000, np.int64)),
            "mtime_ns": pa.array(np.zeros(rows, np.int64)),
        }
    )
    del paths
    table = ix_write.finalize(table, ix.index_schema(classes=classes, max_size=110_000, large=False, facts=False))
    names = [f"n{c + 1440764:08d}" for c in range(classes)]
    meta = ix.make_meta(root, names, "folder", rows, None)
    arrow = os.path.join(out_dir, "index.arrow")
    ix.write_arrow(table, arrow, meta)
    npy = os.path.join(out_dir, "index.npy")
    os.makedirs(npy, exist_ok=True)
    ix.write_npy(table, npy, meta)
    return {
        "root": root,
        "arrow": arrow,
        "npy": npy,
        "path_bytes": int(table.column("path").chunk(0).buffers()[2].size),
    }


# ----------------------------------------------------------------------------- one variant (child process)


class ListDataset:
    """The baseline: per-sample Python objects (what torchvision's ImageFolder keeps)."""

    def __init__(self, root: str, paths: list[str], labels: list[int], loader) -> None:
        self.root, self.paths, self.labels, self.loader = root, paths, labels, loader

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        return self.loader(os.path.join(self.root, self.paths[i])), self.labels[i]


def _worker_init(worker_id: int) -> None:
    import psutil

    info = psutil.Process().memory_full_info()
    with open(os.path.join(os.environ["BENCH_STATE"], f"start-{os.getpid()}.json"), "w") as f:
        json.dump({"uss": info.uss, "pss": info.pss, "rss": info.rss}, f)


def run_variant(variant: str, files: dict, workers: int, state: str) -> dict:
    import psutil
    import torch
    from torch.utils.data import DataLoader

    from dsclean import IndexedDataset

    os.environ["BENCH_STATE"] = state
    me = psutil.Process()
    before = me.memory_full_info().uss
    t0 = time.monotonic()
    if variant == "list":
        ds0 = IndexedDataset(files["arrow"])
        paths = [ds0.path(i) for i in range(len(ds0))]  # how a list-based dataset holds its samples
        labels = ds0.targets.tolist()
        del ds0
        ds = ListDataset(files["root"], paths, labels, trivial_loader)
        del paths, labels
    else:
        index = files["arrow"] if variant == "index" else files["npy"]
        ds = IndexedDataset(index, loader=trivial_loader, check_stale=False)
    init_s = time.monotonic() - t0
    parent_uss = me.memory_full_info().uss - before
    pickled = len(pickle.dumps(ds))

    loader = DataLoader(
        ds,
        batch_size=256,
        shuffle=True,
        num_workers=workers,
        multiprocessing_context="fork",
        worker_init_fn=_worker_init,
    )
    last: dict[int, dict] = {}
    t0 = time.monotonic()
    n = 0
    for b, (_, y) in enumerate(loader):
        n += len(y)
        if b % 25 == 0:
            for child in me.children():
                try:
                    m = child.memory_full_info()
                except psutil.Error:
                    continue
                last[child.pid] = {"uss": m.uss, "pss": m.pss, "rss": m.rss}
    epoch_s = time.monotonic() - t0
    assert n == len(ds), (n, len(ds))
    per_worker = []
    for pid, end in sorted(last.items()):
        start_file = os.path.join(state, f"start-{pid}.json")
        if not os.path.exists(start_file):  # a child that is not a worker (e.g. a pin-memory thread has none)
            continue
        with open(start_file) as f:
            start = json.load(f)
        per_worker.append({k: end[k] - start[k] for k in ("uss", "pss", "rss")} | {"end_uss": end["uss"]})
    return {
        "variant": variant,
        "rows": len(ds),
        "workers": workers,
        "init_s": round(init_s, 2),
        "epoch_s": round(epoch_s, 1),
        "parent_uss_growth": parent_uss,
        "pickled_bytes": pickled,
        "per_worker": per_worker,
        "torch": torch.__version__,
    }


# ----------------------------------------------------------------------------- per-sample lookup


def _lookup_index(work: str, rows: int, folders: int, create: bool) -> tuple[str, str, list[str], list[int]]:
    import pyarrow as pa

    from dsclean.index import store as ix

    root = os.path.join(work, f"root-{folders}")
    classes = min(folders, 1000)
    paths = [f"c{(i % folders) % classes:03d}/d{i % folders:06d}/img_{i:09d}.jpg" for i in range(rows)]
    labels = [(i % folders) % classes for i in range(rows)]
    if create:
        for p in paths:
            full = os.path.join(root, p)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            os.close(os.open(full, os.O_CREAT | os.O_WRONLY, 0o644))
    else:
        os.makedirs(root, exist_ok=True)
    schema = ix.index_schema(classes=classes, max_size=0, large=False, facts=False)
    table = pa.table(
        {
            "path": [p.encode() for p in paths],
            "label": labels,
            "kind": np.zeros(rows, np.int8),
            "size": np.zeros(rows, np.uint32),
            "mtime_ns": np.zeros(rows, np.int64),
        }
    ).cast(schema)
    out = os.path.join(work, f"lookup-{folders}.arrow")
    ix.write_arrow(table, out, ix.make_meta(root, [f"c{c:03d}" for c in range(classes)], "folder", rows, None))
    return out, root, paths, labels


def lookup(tmp: str, rows: int, validate_rows: int) -> str:
    import platform
    import shutil

    from dsclean import IndexedDataset

    work = tempfile.mkdtemp(prefix="dsclean-bench-lookup-", dir=tmp)
    lines = [
        f"IndexedDataset[i] vs list + os.path.join; {platform.platform()}, {os.cpu_count()} CPUs; "
        f"{rows:,} rows, files in {tmp}; us per sample, best of 5 rounds (interleaved)",
        "| folders | list + join (baseline) | IndexedDataset | difference | ratio | first pass (folders checked) |",
        "|---|---|---|---|---|---|",
    ]
    try:
        for folders in (100, 100_000):
            index, root, paths, labels = _lookup_index(work, rows, folders, create=True)
            ds = IndexedDataset(index, loader=trivial_loader, check_stale=False)
            order = np.random.default_rng(0).permutation(rows).tolist()
            t0 = time.perf_counter()
            for j in order:
                ds[j]
            first = (time.perf_counter() - t0) / rows * 1e6

            def base() -> None:
                for j in order:
                    trivial_loader(os.path.join(root, paths[j])), labels[j]

            def ours() -> None:
                for j in order:
                    ds[j]

            best = {"base": float("inf"), "ours": float("inf")}
            for _ in range(5):
                for name, fn in (("base", base), ("ours", ours)):
                    t0 = time.perf_counter()
                    fn()
                    best[name] = min(best[name], (time.perf_counter() - t0) / rows * 1e6)
            lines.append(
                f"| {folders:,} | {best['base']:.2f} | {best['ours']:.2f} | {best['ours'] - best['base']:+.2f} "
                f"| {best['ours'] / best['base']:.2f}x | {first:.2f} |"
            )
            print(lines[-1], file=sys.stderr, flush=True)
            shutil.rmtree(root)
        lines.append("")
        lines.append(_validate_bench(work, validate_rows))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return "\n".join(lines)


def _validate_bench(work: str, rows: int) -> str:
    """Time ``store.validate`` (what opening an index adds) on a ``rows``-row index, warm page cache."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from dsclean.index import store as ix

    classes = 1000
    i = pa.array(np.arange(rows, dtype=np.int64))
    names = pc.binary_join_element_wise(
        pa.scalar("c"),
        pc.cast(pc.divide(i, 10_000), pa.string()),
        pa.scalar("/img_"),
        pc.cast(i, pa.string()),
        pa.scalar(".jpg"),
        "",
    )
    schema = ix.index_schema(classes=classes, max_size=10**6, large=False, facts=False)
    table = pa.table(
        {
            "path": names.cast(pa.binary()),
            "label": pc.cast(pc.divide(i, rows // classes + 1), pa.int16()),
            "kind": np.zeros(rows, np.int8),
            "size": np.full(rows, 100_000, np.uint32),
            "mtime_ns": np.zeros(rows, np.int64),
        }
    ).cast(schema)
    out = os.path.join(work, "validate.arrow")
    ix.write_arrow(table, out, ix.make_meta(work, [str(c) for c in range(classes)], "folder", rows, None))
    del table, names, i
    times = []
    for _ in range(5):
        idx = ix.open_index(out)  # validated once (then trusted by identity in this process)
        t0 = time.perf_counter()
        ix.validate(idx)
        times.append(time.perf_counter() - t0)
    size = os.path.getsize(out)
    os.unlink(out)
    return (
        f"validate() of a {rows:,}-row index ({size / 1e6:.0f} MB, warm page cache): best {min(times):.3f} s, "
        f"median {sorted(times)[2]:.3f} s of 5"
    )


# ----------------------------------------------------------------------------- orchestration


def _fmt_mb(n: float) -> str:
    return f"{n / MB:.1f}"


def report(results: list[dict], path_bytes: int) -> str:
    lines = [
        "| dataset | init s | parent USS growth MB | pickled bytes | worker USS growth MB (mean) | "
        "worker PSS growth MB (mean) | worker RSS growth MB (mean) | epoch s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    mean = {}
    for r in results:
        w = r["per_worker"]
        m = {k: sum(x[k] for x in w) / max(len(w), 1) for k in ("uss", "pss", "rss")}
        mean[r["variant"]] = m
        lines.append(
            f"| {r['variant']} | {r['init_s']} | {_fmt_mb(r['parent_uss_growth'])} | {r['pickled_bytes']} | "
            f"{_fmt_mb(m['uss'])} | {_fmt_mb(m['pss'])} | {_fmt_mb(m['rss'])} | {r['epoch_s']} |"
        )
    lines.append("")
    lines.append(
        f"rows: {results[0]['rows']}, path bytes: {path_bytes} ({_fmt_mb(path_bytes)} MB), "
        f"workers: {results[0]['workers']}, torch {results[0]['torch']}"
    )
    base = mean.get("list")
    for v, m in mean.items():
        if v == "list" or base is None:
            continue
        for k in ("uss", "pss"):
            ratio = base[k] / m[k] if m[k] > 0 else float("inf")
            lines.append(
                f"- per-worker {k.upper()} growth, list / {v}: {ratio:.1f}x "
                f"({_fmt_mb(base[k])} MB vs {_fmt_mb(m[k])} MB)"
            )
        pr = next(r for r in results if r["variant"] == "list")["pickled_bytes"]
        pi = next(r for r in results if r["variant"] == v)["pickled_bytes"]
        lines.append(
            f"- pickled dataset (what spawn sends each worker), list / {v}: {pr / pi:.0f}x ({pr} vs {pi} bytes)"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=None, help="folder for the synthetic index (default: a temp folder)")
    ap.add_argument("--variants", default="list,index,index-npy")
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    ap.add_argument("--lookup", action="store_true", help="per-sample lookup cost and validate() time instead")
    ap.add_argument("--lookup-rows", type=int, default=200_000)
    ap.add_argument("--validate-rows", type=int, default=10_000_000)
    ap.add_argument("--tmp", default="/dev/shm")
    args = ap.parse_args()
    if args.lookup:
        print(lookup(args.tmp, args.lookup_rows, args.validate_rows))
        return 0
    if args._child:
        spec = json.loads(args._child)
        print(json.dumps(run_variant(spec["variant"], spec["files"], spec["workers"], spec["state"])))
        return 0
    out = args.out or tempfile.mkdtemp(prefix="dsclean-bench-")
    os.makedirs(out, exist_ok=True)
    files = make_index(out, args.rows)
    results = []
    for variant in args.variants.split(","):
        state = tempfile.mkdtemp(prefix=f"state-{variant}-", dir=out)
        spec = json.dumps({"variant": variant, "files": files, "workers": args.workers, "state": state})
        # each variant in a fresh interpreter, so neither inherits the other's objects
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--_child", spec], check=True, capture_output=True, text=True
        )
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), file=sys.stderr)
    print(report(results, files["path_bytes"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
