#!/usr/bin/env python3
"""Benchmark: what ``dsclean.guard`` + ``dsclean.DataLoader`` cost on a clean epoch, and how soon a dead worker is named.

Builds ``--images`` tiny images (8x8 PNG, unique bytes, 10 class folders) in a temp folder, indexes them
once (``build_index(..., check=False)``: magic bytes only, the files are known good), then measures, in
this one process, over the same ``IndexedDataset`` (default PIL loader, a transform to a uint8 tensor):

1. samples/s of a full epoch (batch ``--batch-size``, ``--workers`` fork workers, no shuffle), the
   baseline ``torch.utils.data.DataLoader(dataset)`` and ``dsclean.DataLoader(dsclean.guard(dataset))``
   run alternately (plain, guarded, plain, ...) ``--repeats`` times: the median of each and their ratio
   (target: guarded >= 0.97x plain). Worker start is inside the timed epoch, for both. Also CPU per
   sample (the workers' user + system time from /proc/PID/stat, plus the main process's), which the other
   tenants of a noisy machine disturb less than samples/s.
2. each worker's memory growth over those epochs: ``/proc/PID/smaps_rollup`` read when the first batch
   arrives and when the last one does (the workers are still alive then): USS (Private_Clean +
   Private_Dirty) and PSS, mean over the workers, median over the repeats (target: guarded within 1 MiB).
3. the delay from a worker's SIGSEGV to the exception caught in the main process: the dataset's loader
   writes ``time.monotonic()`` (CLOCK_MONOTONIC, system-wide) to a file and kills its own process on one
   chosen sample; the main process stamps the moment its ``except`` runs. Plain torch (its SIGCHLD
   handler: ``RuntimeError ... killed by signal: Segmentation fault``) against dsclean (its 0.2 s liveness
   poll while waiting for a batch: ``dsclean.WorkerDied``), ``--trials`` each, alternating, with the main
   loop (a) only iterating and (b) sleeping 0.05 s per batch (a training step). Also whether the
   exception's text names the sample (its index and file). Target: dsclean <= torch + 1 s.

Between 2 and 3, where a difference can come from inside a worker: us per sample in this process (no
workers) of ``ds.__getitems__(batch)`` (what torch's fetcher calls on the plain IndexedDataset), of
``ds[i]`` and of ``guard(ds)[i]`` (the guard has no ``__getitems__``), with the real loader and a trivial one.

Prints a Markdown section (command, machine, date, tables); no figure is asserted. Progress goes to stderr.
Usage: ``PYTHONPATH=. python scripts/bench_guard.py [--images 100000] [--repeats 3] [--trials 5]``.
"""

from __future__ import annotations

import argparse
import datetime
import io
import os
import platform
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
import torch.utils.data as tud
from PIL import Image

import dsclean
from dsclean.index.build import build_index

MiB = 1024 * 1024
CLASSES = 10
STEP_S = 0.05  # the "training step" of situation (b)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- data


def make_images(root: str, n: int) -> None:
    """``n`` 8x8 RGB PNGs, unique bytes (the pixels encode the number), in CLASSES folders."""
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    for c in range(CLASSES):
        os.makedirs(os.path.join(root, f"class{c:02d}"), exist_ok=True)
    for i in range(n):
        px = noise.copy()
        px[0, :4, 0] = np.frombuffer(i.to_bytes(4, "little"), np.uint8)
        buf = io.BytesIO()
        Image.fromarray(px, "RGB").save(buf, "PNG")
        with open(os.path.join(root, f"class{i % CLASSES:02d}", f"img{i:07d}.png"), "wb") as f:
            f.write(buf.getvalue())


class ToTensor:
    """PIL image -> uint8 HWC tensor (what default_collate stacks; a copy: a PIL array is read-only)."""

    def __call__(self, img):
        return torch.from_numpy(np.array(img))


class SegvAt:
    """An IndexedDataset loader that stamps the time and kills its process (SIGSEGV) on one file."""

    def __init__(self, victim: str, stamp: str) -> None:
        self.victim, self.stamp = victim, stamp

    def __call__(self, path: str):
        if path.endswith(self.victim):
            with open(self.stamp, "w") as f:
                f.write(repr(time.monotonic()))
            os.kill(os.getpid(), signal.SIGSEGV)
        with Image.open(path) as im:
            return im.convert("RGB")


# ----------------------------------------------------------------------------- 1 + 2: clean epochs


def smaps(pid: int) -> dict[str, int]:
    """USS (Private_Clean + Private_Dirty) and PSS of ``pid``, bytes."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return {"uss": fields["Private_Clean"] + fields["Private_Dirty"], "pss": fields["Pss"]}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time ``pid`` has used since it started (a forked worker: since the fork)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def epoch(loader) -> dict:
    """One full epoch: samples/s (worker start included), CPU per sample (workers + this process) and
    each worker's memory growth."""
    t0, c0 = time.perf_counter(), time.process_time()
    it = iter(loader)
    pids = [w.pid for w in it._workers]
    last = len(loader) - 1
    n, first, end, cpu = 0, {}, {}, 0.0
    for b, (x, _) in enumerate(it):
        n += len(x)
        if b == 0:
            first = {p: smaps(p) for p in pids}
        if b == last:
            end = {p: smaps(p) for p in pids}
            cpu = sum(cpu_seconds(p) for p in pids)
    seconds = time.perf_counter() - t0
    cpu += time.process_time() - c0
    growth = {k: statistics.mean(end[p][k] - first[p][k] for p in pids) for k in ("uss", "pss")}
    return {"samples": n, "seconds": seconds, "rate": n / seconds, "cpu_us": cpu / n * 1e6, **growth}


def clean_epochs(index: str, args) -> dict[str, list[dict]]:
    ds = dsclean.IndexedDataset(index, transform=ToTensor())
    kw = {"batch_size": args.batch_size, "num_workers": args.workers, "multiprocessing_context": "fork"}
    loaders = {"plain": tud.DataLoader(ds, **kw), "guarded": dsclean.DataLoader(dsclean.guard(ds), **kw)}
    out: dict[str, list[dict]] = {"plain": [], "guarded": []}
    for r in range(args.repeats):
        for name, loader in loaders.items():
            e = epoch(loader)
            assert e["samples"] == len(ds), (name, e["samples"], len(ds))
            out[name].append(e)
            log(
                f"epoch {r + 1}/{args.repeats} {name}: {e['rate']:,.0f} samples/s ({e['seconds']:.1f} s, CPU "
                f"{e['cpu_us']:.1f} us/sample), "
                f"worker growth USS {e['uss'] / MiB:+.2f} MiB, PSS {e['pss'] / MiB:+.2f} MiB"
            )
    return out


def per_sample(index: str, samples: int, batch_size: int, rounds: int = 5) -> dict[tuple[str, str], float]:
    """us per sample in this process (no workers), best of ``rounds``, interleaved: where a guarded epoch's
    difference can come from inside a worker. torch's fetcher calls ``__getitems__`` (batched) on the plain
    IndexedDataset; the guard has none, so it gets one ``guard[i]`` per sample."""
    batches = [list(range(s, s + batch_size)) for s in range(0, samples - batch_size + 1, batch_size)]
    n = len(batches) * batch_size
    out: dict[tuple[str, str], float] = {}
    for load, ds in (
        ("PIL decode + tensor", dsclean.IndexedDataset(index, transform=ToTensor())),
        ("trivial loader (bookkeeping only)", dsclean.IndexedDataset(index, loader=trivial_loader, check_stale=False)),
    ):
        g = dsclean.guard(ds)
        ways = {
            "`ds.__getitems__(batch)` (plain loader)": lambda ds=ds: [ds.__getitems__(b) for b in batches],
            "`[ds[i] for i in batch]`": lambda ds=ds: [[ds[i] for i in b] for b in batches],
            "`[guard(ds)[i] for i in batch]` (guarded loader)": lambda g=g: [[g[i] for i in b] for b in batches],
        }
        for _ in range(rounds):
            for way, fn in ways.items():
                t0 = time.perf_counter()
                fn()
                us = (time.perf_counter() - t0) / n * 1e6
                out[(load, way)] = min(out.get((load, way), float("inf")), us)
        log(f"per sample, {load}: " + ", ".join(f"{w.split(' (')[0]} {out[(load, w)]:.2f} us" for w in ways))
    return out


def trivial_loader(path: str) -> int:
    return 0


# ----------------------------------------------------------------------------- 3: a dead worker


def death(index: str, variant: str, step: float, k: int, victim: str, stamp: str, args) -> dict:
    """Iterate until the worker loading sample ``k`` segfaults; the delay to the caught exception."""
    if os.path.exists(stamp):
        os.unlink(stamp)
    ds = dsclean.IndexedDataset(index, transform=ToTensor(), loader=SegvAt(victim, stamp))
    kw = {"batch_size": args.batch_size, "num_workers": args.workers, "multiprocessing_context": "fork"}
    loader = tud.DataLoader(ds, **kw) if variant == "torch" else dsclean.DataLoader(dsclean.guard(ds), **kw)
    it = iter(loader)
    caught, err = None, None
    try:
        for _ in it:
            if step:
                time.sleep(step)
    except Exception as exc:  # WorkerDied; torch's RuntimeError (its SIGCHLD handler, wherever the main thread is)
        caught, err = time.monotonic(), exc  # or what else torch lets through (EOFError, ConnectionError)
    finally:
        stop(it)
    if err is None:
        raise SystemExit(f"{variant}: the epoch ended without the worker's death")
    with open(stamp) as f:
        died = float(f.read())
    chain, e = [], err
    while e is not None:  # torch's SIGCHLD error interrupting its own queue.get becomes the cause of another
        chain.append(e)
        e = e.__cause__ or e.__context__
    text = "\n".join(str(x) for x in chain)
    if not isinstance(err, (RuntimeError, EOFError, ConnectionError)):
        raise err
    return {
        "delay": caught - died,
        "names": f"sample {k} " in text and victim in text,
        "error": type(err).__name__,
        "text": str(err),
        "found": " <- ".join(_kind(x) for x in chain),
    }


def stop(it) -> None:
    """Shut the iterator's workers down; torch's SIGCHLD handler may raise in the middle (a death it had
    not reported yet): then join or end the workers this process started."""
    try:
        it._shutdown_workers()
    except RuntimeError:
        pass
    for w in it._workers:
        w.join(timeout=5)
        if w.is_alive():
            w.terminate()
            w.join()


def _kind(exc: BaseException) -> str:
    """The exception's type, and for torch's RuntimeErrors which one (how the death was found)."""
    name, text = type(exc).__name__, str(exc)
    if type(exc) is RuntimeError:
        for what in ("killed by signal", "exited unexpectedly"):
            if what in text:
                return f"{name} ({what})"
    return name


def deaths(index: str, work: str, args) -> tuple[dict, int, str]:
    probe = dsclean.IndexedDataset(index)
    # a sample a few batches in (the workers are running steadily), in the middle of its batch
    k = min(len(probe) - 1, 8 * args.batch_size + args.batch_size // 2)
    victim = probe.path(k)
    stamp = os.path.join(work, "died-at")
    out: dict = {}
    for situation, step in (("a", 0.0), ("b", STEP_S)):
        for t in range(args.trials):
            for variant in ("torch", "dsclean"):
                d = death(index, variant, step, k, victim, stamp, args)
                out.setdefault((situation, variant), []).append(d)
                log(
                    f"death ({situation}) trial {t + 1}/{args.trials} {variant}: {d['delay'] * 1e3:.0f} ms, "
                    f"{d['error']}, names the sample: {d['names']}"
                )
    return out, k, victim


# ----------------------------------------------------------------------------- report


def report(
    args, n_images: int, build_s: float, clean: dict, inproc: dict, dead: dict, k: int, victim: str, total_s: float
) -> str:
    med = {
        v: {key: statistics.median(e[key] for e in es) for key in ("rate", "uss", "pss", "seconds", "cpu_us")}
        for v, es in clean.items()
    }
    ratio = med["guarded"]["rate"] / med["plain"]["rate"]
    lines = ["## Training guard: overhead and time to name a dead worker", ""]
    lines.append(
        f"Command: `PYTHONPATH=. python scripts/bench_guard.py --images {args.images} --repeats {args.repeats} "
        f"--trials {args.trials} --batch-size {args.batch_size} --workers {args.workers}` "
        f"({datetime.date.today().isoformat()}, {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, torch {torch.__version__}; {n_images:,} 8x8 PNGs on {args.tmp}, "
        f"indexed in {build_s:.0f} s; whole run {total_s / 60:.1f} min after imports)"
    )
    lines.append("")
    lines.append(
        f"A clean epoch over one `IndexedDataset` (default PIL loader, a transform to a uint8 tensor), batch "
        f"{args.batch_size}, {args.workers} fork workers, worker start included: torch's own `DataLoader` "
        f"(the baseline) and `dsclean.DataLoader(dsclean.guard(ds))`, alternated, {args.repeats} epochs each; "
        "the median samples/s and the ratio guarded/plain (target >= 0.97). Worker memory: growth between the "
        "first batch's arrival and the last one's, from /proc/PID/smaps_rollup (USS = Private_Clean + "
        "Private_Dirty; PSS), mean over the workers, median over the epochs (target: guarded within 1 MiB "
        "of plain). CPU us/sample: the user + system time of the workers (since their fork, read at the last "
        "batch) and of the main process over the epoch, per sample: less sensitive than samples/s to "
        "the other tenants of a noisy machine."
    )
    lines.append("")
    lines.append(
        "| loader | samples/s (median) | epochs (samples/s) | vs plain | CPU us/sample (median) | "
        "vs plain | worker USS growth MiB | worker PSS growth MiB |"
    )
    lines.append("|---|---|---|---|---|---|---|---|")
    for v, label in (
        ("plain", "torch `DataLoader(ds)` (baseline)"),
        ("guarded", "`dsclean.DataLoader(dsclean.guard(ds))`"),
    ):
        m = med[v]
        each = ", ".join(f"{e['rate']:,.0f}" for e in clean[v])
        lines.append(
            f"| {label} | {m['rate']:,.0f} | {each} | {m['rate'] / med['plain']['rate']:.3f}x | "
            f"{m['cpu_us']:.1f} | {m['cpu_us'] / med['plain']['cpu_us']:.3f}x | "
            f"{m['uss'] / MiB:+.2f} | {m['pss'] / MiB:+.2f} |"
        )
    lines.append("")
    d_uss = (med["guarded"]["uss"] - med["plain"]["uss"]) / MiB
    d_pss = (med["guarded"]["pss"] - med["plain"]["pss"]) / MiB
    spread = max(max(e["rate"] for e in es) / min(e["rate"] for e in es) - 1 for es in clean.values())
    pairs = [g["rate"] / p["rate"] for p, g in zip(clean["plain"], clean["guarded"])]
    lines.append(
        f"Guarded/plain: {ratio:.3f}x ({(ratio - 1) * 100:+.1f}% samples/s; target >= 0.97x: "
        f"{'met' if ratio >= 0.97 else 'not met'}). Each guarded epoch over the plain one just before "
        f"it: {', '.join(f'{r:.3f}x' for r in pairs)} (median {statistics.median(pairs):.3f}x). The "
        f"largest spread between one loader's own epochs was {spread * 100:.1f}%: the noise of this "
        "machine, against which the CPU per sample and the in-process table below are the steadier "
        f"figures (CPU per sample, guarded/plain: {med['guarded']['cpu_us'] / med['plain']['cpu_us']:.3f}x). "
        "Worker growth "
        "guarded - plain: USS "
        f"{d_uss:+.2f} MiB, PSS {d_pss:+.2f} MiB (target within 1 MiB: "
        f"{'met' if abs(d_uss) <= 1 and abs(d_pss) <= 1 else 'not met'})."
    )
    lines.append("")
    lines.append(
        f"Where a difference can come from inside a worker: us per sample in one process (no workers, "
        f"{args.per_sample:,} samples in batches of {args.batch_size}, best of 5 interleaved rounds). torch's "
        "fetcher calls the plain `IndexedDataset`'s batched `__getitems__`; the guard has no such hook, so "
        "the guarded loader gets one `guard(ds)[i]` per sample. The trivial loader (returns 0, no stat) shows "
        "the bookkeeping alone. (In the main process, dsclean's per-batch bookkeeping -- `_try_put_index`, "
        "`_next_data` -- is a few ms per epoch under cProfile, and the main process mostly waits.)"
    )
    lines.append("")
    loads = list(dict.fromkeys(load for load, _ in inproc))
    ways = list(dict.fromkeys(way for _, way in inproc))
    lines.append("| what runs | " + " | ".join(f"{load}: us/sample" for load in loads) + " |")
    lines.append("|---|" + "---|" * len(loads))
    for way in ways:
        cells = []
        for load in loads:
            base = inproc[(load, ways[0])]
            us = inproc[(load, way)]
            cells.append(f"{us:.2f}" + ("" if way == ways[0] else f" ({us - base:+.2f})"))
        lines.append(f"| {way} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        f"A dead worker: the loader segfaults its own process (SIGSEGV) on sample {k} (`{victim}`), after "
        f"writing `time.monotonic()`; the delay is from that stamp to the main process's `except`, {args.trials} "
        "trials each, torch and dsclean alternating. (a): the loop only iterates (the main process waits for "
        f"batches); (b): the loop body sleeps {STEP_S} s per batch (a training step). torch's SIGCHLD handler "
        "raises at once, wherever the main thread is (in (b): inside the loop body, in `time.sleep`); dsclean "
        "does not use that handler: it finds the death by a liveness check every 0.2 s while waiting for a batch "
        "(`dataloader._POLL`; a batch that arrives starts that wait again), or at once when the main process "
        "fetches a batch the dead worker had already sent (its shared memory is handed over by the worker "
        "itself: `<- ConnectionRefusedError`). The exception column is the chain of causes: `<- Empty` is "
        "the poll, torch's `killed by signal` is its SIGCHLD handler (caught and re-raised as `exited "
        "unexpectedly` when it interrupts torch's own `queue.get`); a bare `EOFError` or "
        "`ConnectionRefusedError` from torch is that fetch of a dead worker's batch before the death was "
        'visible, and names no worker at all. "Names the sample": the text of the '
        "exception and its causes holds both the index and the file. Target: dsclean <= torch + 1 s."
    )
    lines.append("")
    lines.append(
        "| situation | loader | exception (and its causes) | delay ms (median) | delay ms (max) | "
        "trials (ms) | names the sample |"
    )
    lines.append("|---|---|---|---|---|---|---|")
    for situation, what in (("a", "(a) main blocked on batches"), ("b", f"(b) {STEP_S} s step per batch")):
        for variant in ("torch", "dsclean"):
            ds_ = dead[(situation, variant)]
            delays = [d["delay"] * 1e3 for d in ds_]
            names = {d["names"] for d in ds_}
            named = "yes" if names == {True} else "no" if names == {False} else "sometimes"
            found = " / ".join(
                sorted(
                    {
                        f"`{d['found']}`"
                        + (f" x{c}" if (c := [x["found"] for x in ds_].count(d["found"])) < len(ds_) else "")
                        for d in ds_
                    }
                )
            )
            lines.append(
                f"| {what} | {variant} | {found} | {statistics.median(delays):.0f} | "
                f"{max(delays):.0f} | {', '.join(f'{x:.0f}' for x in delays)} | {named} |"
            )
    lines.append("")
    for situation in ("a", "b"):
        t = statistics.median(d["delay"] for d in dead[(situation, "torch")])
        g = statistics.median(d["delay"] for d in dead[(situation, "dsclean")])
        worst = max(d["delay"] for d in dead[(situation, "dsclean")])
        lines.append(
            f"- ({situation}) dsclean - torch, medians: {(g - t) * 1e3:+.0f} ms; dsclean's worst "
            f"{worst * 1e3:.0f} ms (target <= torch + 1 s: {'met' if worst <= t + 1 else 'not met'})"
        )
    forms = dict.fromkeys(
        re.sub(r"\d{2,}", "N", f"{d['error']}: {d['text']}".strip().splitlines()[0])
        for situation in ("a", "b")
        for d in dead[(situation, "torch")]
    )
    torch_text = "`, `".join(forms)
    ours = dead[("a", "dsclean")][0]["text"].strip().splitlines()[0]
    if len(ours) > 400:  # the batches in flight are listed in full
        ours = ours[:300] + f" ...({len(ours) - 400:,} characters)... " + ours[-100:]
    lines.append(f"- torch's messages: `{torch_text}`")
    lines.append(f"- dsclean's first line: `{ours}`")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3, help="clean epochs of each loader (alternated)")
    ap.add_argument("--trials", type=int, default=5, help="worker deaths per loader and situation")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tmp", default="/tmp", help="where the images and the index are written (removed after)")
    ap.add_argument("--per-sample", type=int, default=20_000, help="samples of the in-process per-sample table")
    args = ap.parse_args()
    if args.workers < 1 or args.images < 10 * args.batch_size:
        ap.error("needs --workers >= 1 and --images >= 10 x --batch-size")
    t_start = time.perf_counter()
    work = tempfile.mkdtemp(prefix="dsclean-bench-guard-", dir=args.tmp)
    try:
        root, index = os.path.join(work, "images"), os.path.join(work, "index.arrow")
        t0 = time.perf_counter()
        make_images(root, args.images)
        log(f"{args.images:,} images written in {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        summary = build_index(root, index, check=False)
        build_s = time.perf_counter() - t0
        log(f"indexed {summary.rows:,} rows in {build_s:.1f} s")
        clean = clean_epochs(index, args)
        inproc = per_sample(index, min(args.per_sample, summary.rows), args.batch_size)
        dead, k, victim = deaths(index, work, args)
    finally:
        t0 = time.perf_counter()
        shutil.rmtree(work, ignore_errors=True)
        log(f"removed {work} in {time.perf_counter() - t0:.1f} s")
    print(report(args, summary.rows, build_s, clean, inproc, dead, k, victim, time.perf_counter() - t_start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
