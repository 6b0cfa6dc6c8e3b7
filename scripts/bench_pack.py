#!/usr/bin/env python3
"""Benchmark dsclean pack and reading from shards, each against a baseline in the same run.

    python scripts/bench_pack.py [--n 5000] [--size 256] [--repeats 3] [--rows 1000000] [--workers 2]
                                 [--only throughput,cold,read,memory] [--before TREE] [--no-rehash] [--out DIR]

1. throughput: ``dsclean pack`` (jobs 1 and 2; the files scanned first, so pack reuses the
   scan's checksums; with ``--no-fsync``; and with ``--rehash``, hashing every file) against
   ``tar -cf`` of the same files (and ``tar -cf`` followed by an fsync, since pack fsyncs every
   shard by default), 16 MiB shards; page cache warm, and (``cold``, root) dropped before every
   run; interleaved, best of ``--repeats``. Pack runs through the API in a child process (no
   start-up timed); ``--before TREE`` adds the same packs with another checkout's dsclean.
2. read: random-access reads of every sample in a random order through IndexedDataset,
   from the shards against from the original small files: raw bytes and decoded
   samples with a warm page cache, raw bytes with the page cache dropped before each
   pass (``echo 3 > /proc/sys/vm/drop_caches``; needs root, skipped otherwise).
3. memory: one DataLoader epoch (shuffle, batch 256, fork) over a packed set of
   ``--rows`` tiny samples with a loader that reads every sample's bytes; per-worker
   USS / PSS / RSS growth (psutil, as in scripts/bench_dataset.py), for the packed set,
   the packed set without dropping read pages (``MADV_DONTNEED`` off), and the folder
   index over the same small files. Each variant in a fresh interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))  # tests/support: media synthesis

MB = 1e6


def make_jpegs(root: str, n: int, size: int) -> float:
    from support import synth

    bases = [synth.jpeg(size, size, seed=s, quality=88) for s in range(16)]
    total = 0
    for i in range(n):
        d = os.path.join(root, f"class{i % 10:02d}")
        os.makedirs(d, exist_ok=True)
        data = bases[i % 16] + i.to_bytes(4, "big")  # unique bytes after the end marker
        with open(os.path.join(d, f"{i:07d}.jpg"), "wb") as f:
            f.write(data)
        total += len(data)
    return total / MB


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def _cpu(who: int) -> float:
    import resource

    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def bench_throughput(
    work: str,
    index: str,
    root: str,
    mb: float,
    repeats: int,
    cold: bool = False,
    before: str | None = None,
    rehash: bool = True,
) -> list[str]:
    """Wall time (best of the repeats) and CPU time (of that run; less sensitive to a loaded machine).

    Every pack runs through the API (``pack_shards``) in a long-lived child process per source
    tree (this one, and ``before``: another checkout of dsclean, for a before/after comparison
    in the same run), so interpreter start-up and imports are not timed; its CPU time is the
    child's (all threads) plus, for ``--jobs 2``, its loky workers'. ``tar`` is a whole process.
    ``cold``: the page cache is dropped before every run of every contender (root only).
    """
    import resource

    def tar(sync: bool) -> tuple[float, float]:
        out = os.path.join(work, "x.tar")
        if cold:
            _drop_caches()
        c, t = _cpu(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run(["tar", "-cf", out, "-C", root, "."], check=True)
        if sync:
            _fsync(out)
        t, c = time.perf_counter() - t, _cpu(resource.RUSAGE_CHILDREN) - c
        os.unlink(out)
        return t, c

    packers = {"": _Packer(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))}
    if before:
        packers["before: "] = _Packer(before)

    def pack(who: str, jobs: int, rehash: bool, fsync: bool = True, more: dict | None = None) -> tuple[float, float]:
        out = os.path.join(work, "shards-bench")
        shutil.rmtree(out, ignore_errors=True)
        if cold:
            _drop_caches()
        opts = {"shard_size": 16 << 20, "jobs": jobs, "rehash": rehash, **({} if fsync else {"fsync": False})}
        opts.update(more or {})
        r = packers[who].run(index, out, opts)
        shutil.rmtree(out)
        return r["wall"], r["cpu"]

    runs = {"tar -cf": lambda: tar(False), "tar -cf, then fsync": lambda: tar(True)}
    for who in packers:
        for jobs in (1, 2):
            runs[f"{who}dsclean pack --jobs {jobs}"] = lambda who=who, jobs=jobs: pack(who, jobs, False)
        if not who:
            for jobs in (1, 2):
                runs[f"dsclean pack --jobs {jobs} --no-fsync"] = lambda jobs=jobs: pack("", jobs, False, False)
            # the former default (index order, members named by format): what shuffling and by-kind names cost
            runs["dsclean pack --jobs 1 --no-shuffle --ext-policy keep"] = lambda: pack(
                "", 1, False, more={"shuffle": None, "ext_policy": "keep"}
            )
        if rehash:
            for jobs in (1, 2):
                runs[f"{who}dsclean pack --jobs {jobs} --rehash"] = lambda who=who, jobs=jobs: pack(who, jobs, True)
    try:
        for fn in runs.values():  # warm-up: page cache, loky pool, imports
            fn()
        best = {name: (float("inf"), float("nan")) for name in runs}
        for _ in range(repeats):
            for name, fn in runs.items():
                best[name] = min(best[name], fn())
    finally:
        for p in packers.values():
            p.close()
    lines = [
        "| writer | s | MB/s | vs tar -cf | vs tar -cf + fsync | CPU s | CPU vs tar -cf |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (t, c) in best.items():
        lines.append(
            f"| {name} | {t:.2f} | {mb / t:.0f} | {best['tar -cf'][0] / t:.2f}x | "
            f"{best['tar -cf, then fsync'][0] / t:.2f}x | {c:.2f} | {c / best['tar -cf'][1]:.1f}x |"
        )
    return lines


class _Packer:
    """A child process that runs ``pack_shards`` from the dsclean in ``tree`` on request (JSON lines)."""

    def __init__(self, tree: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--_packer", os.path.abspath(tree)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, index: str, out: str, opts: dict) -> dict:
        self.proc.stdin.write(json.dumps({"index": index, "out": out, "opts": opts}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the packer child died (exit {self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def run_packer(tree: str) -> None:
    """The child of :class:`_Packer`: import dsclean from ``tree``, pack what each stdin line asks."""
    import resource

    import psutil

    sys.path.insert(0, tree)
    from dsclean.pack.packer import PackOptions, pack_shards

    me = psutil.Process()

    def cpu() -> float:  # this process (all threads) and its loky workers
        kids = 0.0
        for child in me.children(recursive=True):
            try:
                t = child.cpu_times()
                kids += t.user + t.system
            except psutil.Error:
                pass
        return _cpu(resource.RUSAGE_SELF) + kids

    for line in sys.stdin:
        req = json.loads(line)
        c, t = cpu(), time.perf_counter()
        s = pack_shards(req["index"], req["out"], PackOptions(**req["opts"]))
        t, c = time.perf_counter() - t, cpu() - c
        assert s.complete and s.hashed == (s.samples if req["opts"]["rehash"] else 0), (s.hashed, s.scan_hashes)
        print(json.dumps({"wall": t, "cpu": c}), flush=True)


def _drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def bench_read(index: str, shards: str, repeats: int) -> list[str]:
    from dsclean import IndexedDataset

    files, packed = IndexedDataset(index), IndexedDataset(shards)
    n = len(files)
    order = list(range(n))
    random.Random(0).shuffle(order)

    def raw(ds) -> float:
        t = time.perf_counter()
        total = sum(len(ds.raw(i)) for i in order)
        t = time.perf_counter() - t
        assert total > 0
        return t

    def decoded(ds) -> float:
        t = time.perf_counter()
        for i in order[: min(n, 2000)]:
            ds[i]
        return (time.perf_counter() - t) * n / min(n, 2000)

    rows = []
    for label, fn, cold in (
        ("raw bytes, warm cache", raw, False),
        ("decoded (PIL RGB), warm cache", decoded, False),
        ("raw bytes, page cache dropped", raw, True),
    ):
        best = {}
        for _ in range(repeats):
            for name, ds in (("small files", files), ("shards", packed)):
                if cold and not _drop_caches():
                    rows.append(f"| {label} | (cannot drop caches: not root) | | |")
                    break
                if not cold:
                    fn(ds)  # warm
                best[name] = min(best.get(name, float("inf")), fn(ds))
            else:
                continue
            break
        if len(best) == 2:
            rows.append(
                f"| {label} | {n / best['small files']:,.0f} | {n / best['shards']:,.0f} | "
                f"{best['small files'] / best['shards']:.2f}x |"
            )
    return [
        "| read, random order | small files samples/s | shards samples/s | shards vs files |",
        "|---|---:|---:|---:|",
    ] + rows


# ----------------------------------------------------------------------------- memory (child processes)


def read_all(src) -> int:
    """The loader of the memory benchmark: reads every byte of the sample (path or file object)."""
    if hasattr(src, "read"):
        return len(src.read())
    with open(src, "rb") as f:
        return len(f.read())


def _worker_init(worker_id: int) -> None:
    import psutil

    info = psutil.Process().memory_full_info()
    with open(os.path.join(os.environ["BENCH_STATE"], f"start-{os.getpid()}.json"), "w") as f:
        json.dump({"uss": info.uss, "pss": info.pss, "rss": info.rss}, f)


def run_memory_variant(variant: str, target: str, workers: int, state: str) -> dict:
    import psutil
    from torch.utils.data import DataLoader

    from dsclean import IndexedDataset
    from dsclean.data import shards as shards_mod

    os.environ["BENCH_STATE"] = state
    if variant == "packed, pages kept":
        shards_mod.MADV_AFTER_READ = None  # what dropping the read pages saves
    ds = IndexedDataset(target, loader=read_all, check_stale=False)
    loader = DataLoader(
        ds,
        batch_size=256,
        shuffle=True,
        num_workers=workers,
        multiprocessing_context="fork",
        worker_init_fn=_worker_init,
    )
    me = psutil.Process()
    last: dict[int, dict] = {}
    t0 = time.monotonic()
    n = total = 0
    for b, (x, y) in enumerate(loader):
        n += len(y)
        total += int(x.sum())
        if b % 25 == 0:
            for child in me.children():
                try:
                    m = child.memory_full_info()
                except psutil.Error:
                    continue
                last[child.pid] = {"uss": m.uss, "pss": m.pss, "rss": m.rss}
    epoch_s = time.monotonic() - t0
    assert n == len(ds)
    growth = []
    for pid, end in last.items():
        start_file = os.path.join(state, f"start-{pid}.json")
        if os.path.exists(start_file):
            with open(start_file) as f:
                start = json.load(f)
            growth.append({k: end[k] - start[k] for k in ("uss", "pss", "rss")})
    return {"variant": variant, "rows": n, "bytes": total, "epoch_s": round(epoch_s, 1), "growth": growth}


def bench_memory(work: str, rows: int, workers: int) -> list[str]:
    from dsclean.index.build import build_index
    from dsclean.pack.packer import PackOptions, pack_shards

    root = os.path.join(work, "tiny")
    payload = b"\xff\xd8\xff\xe0" + bytes(196)  # 200 bytes that sniff as JPEG (the loader only reads them)
    t = time.perf_counter()
    for i in range(rows):
        d = os.path.join(root, f"n{i % 1000:08d}")
        if i < 1000:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{i:08d}.jpg"), "wb") as f:
            f.write(payload + i.to_bytes(8, "big"))
    made = time.perf_counter() - t
    index = os.path.join(work, "tiny.arrow")
    t = time.perf_counter()
    build_index(root, index)
    indexed = time.perf_counter() - t
    shards = os.path.join(work, "tiny-shards")
    t = time.perf_counter()
    s = pack_shards(index, shards, PackOptions(jobs=workers))
    packed = time.perf_counter() - t
    assert s.complete and s.samples == rows
    shard_bytes = sum(os.path.getsize(os.path.join(shards, f)) for f in os.listdir(shards) if f.endswith(".tar"))
    lines = [
        f"{rows:,} files of 208 bytes: written in {made:.0f} s, indexed in {indexed:.1f} s, packed "
        f"(--jobs {workers}) in {packed:.1f} s ({rows / packed:,.0f} samples/s) into {s.shards} shards of "
        f"{shard_bytes / 2**30:.2f} GiB in all; packed index {os.path.getsize(os.path.join(shards, 'index.arrow')) / MB:.1f} MB",
        "",
        "| dataset | worker USS growth MB (mean) | worker PSS growth MB (mean) | worker RSS growth MB (mean) | epoch s |",
        "|---|---:|---:|---:|---:|",
    ]
    for variant, target in (("packed", shards), ("packed, pages kept", shards), ("small files (folder index)", index)):
        state = tempfile.mkdtemp(prefix="state-", dir=work)
        spec = json.dumps({"variant": variant, "target": target, "workers": workers, "state": state})
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--_child", spec], check=True, capture_output=True, text=True
        )
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(json.dumps(r), file=sys.stderr)
        g = r["growth"]
        mean = {k: sum(x[k] for x in g) / max(1, len(g)) / 2**20 for k in ("uss", "pss", "rss")}
        lines.append(f"| {variant} | {mean['uss']:.1f} | {mean['pss']:.1f} | {mean['rss']:.1f} | {r['epoch_s']} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--only",
        default="throughput,cold,read,memory",
        help="comma-separated parts; cold = throughput with the page cache dropped (root)",
    )
    ap.add_argument("--out", default=None, help="work folder (default: a temp folder, removed at the end)")
    ap.add_argument(
        "--before",
        metavar="TREE",
        help="throughput: also pack with the dsclean of this checkout (e.g. a git archive of main), "
        "interleaved, for a before/after comparison in one run",
    )
    ap.add_argument("--no-rehash", action="store_true", help="throughput: leave out the --rehash rows")
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    ap.add_argument("--_packer", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._packer:
        run_packer(args._packer)
        return 0
    if args._child:
        spec = json.loads(args._child)
        print(json.dumps(run_memory_variant(spec["variant"], spec["target"], spec["workers"], spec["state"])))
        return 0
    work = args.out or tempfile.mkdtemp(prefix="dsclean-bench-pack-")
    os.makedirs(work, exist_ok=True)
    os.environ["DSCLEAN_STATE_DIR"] = os.path.join(work, "state")  # the scan's results and cache: not in ~/.cache
    from dsclean import ScanOptions, scan
    from dsclean.index.build import build_index
    from dsclean.pack.packer import PackOptions, pack_shards

    only = set(args.only.split(","))
    print(f"machine: {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"command: python scripts/bench_pack.py {' '.join(sys.argv[1:])}")
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    try:
        if only & {"throughput", "read"}:
            root = os.path.join(work, "jpegs")
            mb = make_jpegs(root, args.n, args.size)
            index = os.path.join(work, "jpegs.arrow")
            t = time.perf_counter()
            scanned = scan(root, ScanOptions(progress=False))  # records every file's content_hash
            print(
                f"{args.n:,} JPEGs of {args.size}x{args.size}, {mb:.1f} MB; dsclean scan: "
                f"{time.perf_counter() - t:.1f} s ({scanned.files:,} files)"
            )
            build_index(root, index)
            print()
            if "throughput" in only:
                print("page cache warm:\n")
                print(
                    "\n".join(
                        bench_throughput(
                            work, index, root, mb, args.repeats, before=args.before, rehash=not args.no_rehash
                        )
                    )
                    + "\n"
                )
                print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
                if "cold" in only:
                    if _drop_caches():
                        print("page cache dropped before every run:\n")
                        print(
                            "\n".join(
                                bench_throughput(
                                    work,
                                    index,
                                    root,
                                    mb,
                                    args.repeats,
                                    cold=True,
                                    before=args.before,
                                    rehash=not args.no_rehash,
                                )
                            )
                            + "\n"
                        )
                        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
                    else:
                        print("(cold throughput skipped: cannot drop the page cache, not root)\n")
            if "read" in only:
                shards = os.path.join(work, "jpeg-shards")
                pack_shards(index, shards, PackOptions(shard_size=64 << 20))
                print("\n".join(bench_read(index, shards, args.repeats)) + "\n")
        if "memory" in only:
            print("\n".join(bench_memory(work, args.rows, args.workers)))
    finally:
        if args.out is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
