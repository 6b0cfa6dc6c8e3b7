#!/usr/bin/env python3
"""Benchmark: dsclean dups' near-duplicate search at scale, and its accuracy on real photos.

1. Search scale. N 64-bit hashes (default 1,000,000) go through
   ``dsclean.dups.search.near_pairs`` at K (default: dups' default) in a fresh
   child process, which reports its time, its peak RSS, and the planted near
   pairs it found. Two distributions: uniform hashes with 1,000 planted copies at
   distance 0..K, and a clustered set (N/10 centres, 10 hashes each, half of them
   identical to the centre and half within 12 bits: a duplicate-heavy dataset,
   crowded buckets); and the second signal's (``windows``): N/6 textures, each a
   whole-picture hash and five window hashes 8-16 bits from it, pairs found counting
   those between one picture's own hashes (dropped after the search). The baseline, in the same run: a
   numpy brute-force all-pairs pass over a 20,000-hash sample, extrapolated to
   N by N^2.

2. Accuracy. The real-photo set of the tests (scikit-image's and matplotlib's
   bundled pictures, quadrant tiles of textures and busy photos, eight edits of
   each: ``tests/support/realphotos.py``) at full size. Side by side:
   - dsclean's hash and imagehash's pHash (if installed: ``pip install imagehash``)
     alone: recall of (original, copy) pairs within a threshold, and pairs of
     *different* pictures within it (false pairs), per threshold;
   - the whole ``dsclean dups`` pipeline at its defaults (hash search + fine check +
     centred groups): recall of copies grouped with their original, groups
     holding two different pictures.

3. Second signal (textures, dsclean.quality.texture). The same real photos, every one with
   twelve wider edits in ``val`` (resized 40/60/75/90%, cropped 2/4/7/10% split between
   sides, 4/7/10% off one side, JPEG quality 50: ``realphotos.WIDE_EDITS``), through the
   whole pipeline with the second signal off (before) and on (after): recall, groups holding
   two different pictures (the tiles of one texture are the negative set: different walls,
   same statistics), time per image; and what the second signal costs per unstable picture
   against computing its facts.

    python scripts/bench_dups.py [--n 1000000] [--near K] [--skip-search] [--skip-accuracy] [--skip-second]
                                 [--max-side PX]
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))  # tests/support: the real-photo set

from dsclean.dups import DEFAULT_NEAR  # noqa: E402

CHILD = r"""
import json, sys, time
# the peak-RSS mark is inherited from the forking parent: reset it (Linux: clear_refs 5), then read VmHWM
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
def peak_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024)
import numpy as np
sys.path.insert(0, sys.argv[1])
from dsclean.dups.search import near_pairs, plan, _Hashes
n, radius, kind = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rng = np.random.default_rng(0)
def flip(h, count):
    # flip `count` distinct random bits of each hash in h
    out = h.copy()
    for row in range(len(h)):
        for b in rng.choice(64, int(count[row]), replace=False):
            out[row] ^= np.uint64(1) << np.uint64(int(b))
    return out
if kind == "uniform":
    h = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64) << np.uint64(1) | rng.integers(0, 2, n).astype(np.uint64)
    m = 1000
    src = rng.choice(n // 2, m, replace=False)
    h[n - m:] = flip(h[src], rng.integers(0, radius + 1, m))
    planted = set(zip(src.tolist(), range(n - m, n)))
elif kind == "windows":  # the second signal: n/6 textures, each a whole-picture hash and 5 window hashes 8-16 bits off
    m = n // 6
    whole = rng.integers(0, 2**63, m, dtype=np.int64).astype(np.uint64) << np.uint64(1) | rng.integers(0, 2, m).astype(np.uint64)
    h = np.repeat(whole, 6)
    powers = np.left_shift(np.uint64(1), np.arange(64, dtype=np.uint64))
    for w in range(1, 6):  # exactly 8..16 distinct bits flipped per window: the ranks of 64 random numbers
        chosen = rng.random((m, 64)).argsort(axis=1).argsort(axis=1) < rng.integers(8, 17, m)[:, None]
        h[w::6] = whole ^ np.bitwise_or.reduce(np.where(chosen, powers, np.uint64(0)), axis=1)
    planted = None
else:  # clustered: n/10 centres, each with 10 hashes within 12 bits of it (every picture has 9 near copies)
    centres = rng.integers(0, 2**63, n // 10, dtype=np.int64).astype(np.uint64)
    member = np.repeat(np.arange(n // 10), 10)
    h = centres[member]
    # flip up to 12 bits with a vectorised mask: OR of 12 random single-bit masks (duplicates lower the count)
    flips = np.zeros(len(h), np.uint64)
    for _ in range(12):
        flips |= np.uint64(1) << rng.integers(0, 64, len(h)).astype(np.uint64)
    keep = rng.random((len(h),)) < 0.5
    h = np.where(keep, h, h ^ flips)
    planted = None
rss_before = peak_mb()
t = time.perf_counter()
i, j, d = near_pairs(h, radius)
elapsed = time.perf_counter() - t
found = None
if planted is not None:
    got = set(zip(i.tolist(), j.tolist()))
    found = sum((min(a, b), max(a, b)) in got for a, b in planted) / len(planted)
p = plan(_Hashes(h), radius)
print(json.dumps({"n": n, "kind": kind, "radius": radius, "seconds": round(elapsed, 2), "pairs": int(len(i)),
                  "planted_found": found, "k": p.k, "tables": p.tables,
                  "rss_before_mb": rss_before, "peak_rss_mb": peak_mb()}))
"""


def bench_search(n: int, radius: int, kinds: list[str]) -> None:
    from dsclean.quality.phash import popcount64

    print(f"## search: {n:,} hashes, K={radius}")
    rng = np.random.default_rng(1)
    sample = rng.integers(0, 2**63, 20_000, dtype=np.int64).astype(np.uint64)
    t = time.perf_counter()
    close = 0
    for start in range(0, len(sample), 500):
        block = sample[start : start + 500]
        close += int((popcount64(block[:, None] ^ sample[None, :]) <= radius).sum())
    brute = time.perf_counter() - t
    print(
        f"baseline brute force: 20,000 hashes in {brute:.1f} s -> {n:,} extrapolated: {brute * (n / 20_000) ** 2 / 3600:.1f} h"
    )
    for kind in kinds:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, os.path.join(HERE, ".."), str(n), str(radius), kind],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout)
        print(
            f"{kind:9s}: {r['seconds']:.1f} s (brute force / LSH = {brute * (n / 20_000) ** 2 / r['seconds']:.0f}x), "
            f"{r['pairs']:,} pairs within K, planted found {r['planted_found']}, key {r['k']} bits x {r['tables']} tables, "
            f"peak RSS {r['peak_rss_mb']} MB (hashes generated: {r['rss_before_mb']} MB)"
        )


def bench_accuracy(radius: int) -> None:
    from PIL import Image
    from support import realphotos

    from dsclean.dups.finder import DupsOptions, find_duplicates
    from dsclean.quality.image import image_facts_from_pil
    from dsclean.quality.phash import hamming

    if not realphotos.available():
        print("accuracy: scikit-image is not installed; skipped")
        return
    try:
        import imagehash
    except ImportError:
        imagehash = None
        print("note: imagehash is not installed (pip install imagehash): its column is left out")
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        truth = realphotos.write_set(tmp)
        print(
            f"\n## accuracy: {len(truth)} files, {sum(k[1].startswith('orig/') for k in truth)} distinct pictures "
            f"(written in {time.perf_counter() - t:.0f} s)"
        )
        ours, theirs = {}, {}
        t_ours = t_theirs = 0.0
        for key in truth:
            with Image.open(os.path.join(*key)) as im:
                im.load()
                t = time.perf_counter()
                ours[key] = image_facts_from_pil(im).phash
                t_ours += time.perf_counter() - t
                if imagehash:
                    t = time.perf_counter()
                    theirs[key] = imagehash.phash(im)
                    t_theirs += time.perf_counter() - t
        print(
            f"hash time per decoded picture: dsclean {t_ours / len(truth) * 1000:.2f} ms"
            + (f", imagehash.phash {t_theirs / len(truth) * 1000:.2f} ms" if imagehash else "")
        )
        origin = {src: key for key, src in truth.items() if key[1].startswith("orig/")}
        copies = [(origin[src], key) for key, src in truth.items() if not key[1].startswith("orig/")]
        keys = list(truth)
        cross = [(a, b) for a, b in itertools.combinations(keys, 2) if truth[a] != truth[b]]
        methods = {"dsclean hash": lambda a, b: hamming(ours[a], ours[b])}
        if imagehash:
            methods["imagehash.phash"] = lambda a, b: theirs[a] - theirs[b]
        print(
            f"\nhash alone: recall of {len(copies)} (original, copy) pairs / false pairs among {len(cross):,} pairs of different pictures"
        )
        print("| threshold | " + " | ".join(methods) + " |")
        print("|---|" + "---|" * len(methods))
        dist = {
            m: (np.array([f(a, b) for a, b in copies]), np.array([f(a, b) for a, b in cross]))
            for m, f in methods.items()
        }
        for k in (4, 6, 8, 10, 12, 14, 16):
            cells = [f"{(dp <= k).mean():.1%} / {int((dn <= k).sum())}" for dp, dn in dist.values()]
            print(f"| {k} | " + " | ".join(cells) + " |")
        print(
            "\nrecall by edit at K=%d: " % radius
            + ", ".join(
                f"{edit} "
                + "/".join(
                    f"{(dist[m][0][[c[1][1].startswith(edit + '/') for c in copies]] <= radius).mean():.0%}"
                    for m in methods
                )
                for edit in realphotos.EDITS
            )
        )
        from dsclean.quality.compare import DEFAULT_MIN_CORRELATION, similarity
        from dsclean.quality.image import thumbnail_from_path

        thumbs = {key: thumbnail_from_path(os.path.join(*key)) for key in truth}
        pos = np.array([similarity(thumbs[a], thumbs[b], 2.0) for a, b in copies])  # 2.0: always search crops
        originals = list(origin.values())
        neg = np.array([similarity(thumbs[a], thumbs[b], 2.0) for a, b in itertools.combinations(originals, 2)])
        print(
            f"\nfine check (64x64 correlation, crop search): copies min {pos.min():.3f} (5th percentile "
            f"{np.percentile(pos, 5):.3f}); {len(neg)} pairs of different originals max {neg.max():.3f}; "
            f"threshold {DEFAULT_MIN_CORRELATION}"
        )
        t = time.perf_counter()
        result = find_duplicates([os.path.join(tmp, "train"), os.path.join(tmp, "val")], DupsOptions(near=radius))
        elapsed = time.perf_counter() - t
        groups = [[(m["root"], m["path"]) for m in rec["members"]] for rec in result.records()]
        s = realphotos.score(groups, truth)
        print(
            f"\ndsclean dups pipeline (K={radius}, fine check on): recall {s['found']}/{s['copies']} = {s['recall']:.1%}, "
            f"false groups {s['false_groups']} of {s['groups']}, missed by edit {s['missed_by_edit']}, "
            f"near stats {result.summary.near_stats}, {elapsed:.1f} s for {len(truth)} files (facts computed, 2 jobs)"
        )


def _before_after(tmp: str, truth: dict, radius: int, name: str) -> None:
    """One table row each for the pipeline without and with the second signal, on one written set."""
    from support import realphotos

    from dsclean.dups.finder import DupsOptions, find_duplicates

    for label, on in (("before (perceptual hash only)", False), ("after (+ second signal)", True)):
        t = time.perf_counter()
        result = find_duplicates(
            [os.path.join(tmp, "train"), os.path.join(tmp, "val")], DupsOptions(near=radius, jobs=2, second_signal=on)
        )
        elapsed = time.perf_counter() - t
        groups = [[(m["root"], m["path"]) for m in rec["members"]] for rec in result.records()]
        s = realphotos.score(groups, truth)
        ns = result.summary.near_stats
        print(
            f"| {name}, {label} | {s['found']}/{s['copies']} = {s['recall']:.1%} | {s['false_groups']} of "
            f"{s['groups']} | {s['missed_by_edit']} | {ns['unstable']} / {ns['second_hashed']} | {ns['candidates']} "
            f"({ns['second_candidates']} from the second signal; {ns['rejected']} rejected) | "
            f"{elapsed / len(truth) * 1000:.1f} ms |"
        )


def bench_second_signal(radius: int, max_side: int | None) -> None:
    from support import realphotos

    from dsclean.quality.image import image_facts_from_path
    from dsclean.quality.phash import hamming
    from dsclean.quality.texture import antialiased_hashes_from_path, is_unstable

    if not realphotos.available():
        print("second signal: scikit-image is not installed; skipped")
        return
    with tempfile.TemporaryDirectory() as tmp:
        truth = realphotos.write_wide_set(tmp, max_side=max_side)
        n_src = sum(k[1].startswith("orig/") for k in truth)
        textures = sum(src.startswith(realphotos.TEXTURES) for src in truth.values())
        print(
            f"\n## second signal: {len(truth)} files, {n_src} distinct pictures (max side {max_side or 'full'}), "
            f"{textures} of them brick/grass/gravel tiles or their copies; K={radius}, 2 jobs"
        )
        print("| | recall | false groups | missed by edit | unstable / decoded again | candidates | time per image |")
        print("|---|---|---|---|---|---|---|")
        _before_after(tmp, truth, radius, "wider edits")
        with tempfile.TemporaryDirectory() as std:  # the eight edits of the accuracy test, as tests/dups runs them
            _before_after(std, realphotos.write_set(std, max_side=max_side), radius, "eight edits")
        t_facts = t_second = 0.0
        unstable, ratios = 0, {}
        phashes, second = {}, {}
        for key, src in truth.items():
            path = os.path.join(*key)
            t = time.perf_counter()
            facts = image_facts_from_path(path)
            t_facts += time.perf_counter() - t
            phashes[key] = facts.phash
            if key[1].startswith("orig/"):
                ratios[src] = facts.sharpness / max((255 * facts.contrast) ** 2, 1e-9)
            if is_unstable(facts.sharpness, facts.contrast):
                unstable += 1
                t = time.perf_counter()
                second[key] = antialiased_hashes_from_path(path)
                t_second += time.perf_counter() - t
        print(
            f"\ncost, one process: facts (decode + thumbnail + hash) {t_facts / len(truth) * 1000:.2f} ms per picture; "
            f"second signal (decode again + 6 Lanczos windows + 6 hashes) {t_second / max(unstable, 1) * 1000:.2f} ms "
            f"per unstable picture = {t_second / max(unstable, 1) / (t_facts / len(truth)):.1f}x the facts; "
            f"{unstable} of {len(truth)} pictures unstable"
        )
        tex = sorted(r for src, r in ratios.items() if src.startswith(realphotos.TEXTURES))
        other = sorted(r for src, r in ratios.items() if not src.startswith(realphotos.TEXTURES))
        print(
            f"sharpness / luma variance of the originals: texture tiles {tex[0]:.1f}..{tex[-1]:.1f}; "
            f"the others {other[0]:.2f}..{other[-1]:.2f} (above 2.5: {[s for s, r in ratios.items() if r >= 2.5 and not s.startswith(realphotos.TEXTURES)]})"
        )
        origin = {src: key for key, src in truth.items() if key[1].startswith("orig/")}
        pairs = [(origin[src], key) for key, src in truth.items() if key in second and origin[src] in second]
        pairs = [(o, c) for o, c in pairs if o != c and truth[c].startswith(realphotos.TEXTURES)]
        first = sum(hamming(phashes[o], phashes[c]) <= radius for o, c in pairs)
        best = sum(
            min(min(hamming(w, second[c][0]) for w in second[o]), min(hamming(w, second[o][0]) for w in second[c]))
            <= radius
            for o, c in pairs
        )
        both = sum(
            hamming(phashes[o], phashes[c]) <= radius
            or min(min(hamming(w, second[c][0]) for w in second[o]), min(hamming(w, second[o][0]) for w in second[c]))
            <= radius
            for o, c in pairs
        )
        print(
            f"hash alone, {len(pairs)} (original, copy) pairs of texture tiles within K={radius}: perceptual hash "
            f"{first}, second signal (whole picture or a window) {best}, either {both}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--near", type=int, default=DEFAULT_NEAR)
    ap.add_argument("--skip-search", action="store_true")
    ap.add_argument(
        "--search-kinds",
        default="uniform,clustered,windows",
        help="hash distributions of the search benchmark (windows: the second signal's, six hashes per texture)",
    )
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--skip-second", action="store_true")
    ap.add_argument("--max-side", type=int, default=None, help="shrink the real photos of the second-signal set")
    args = ap.parse_args()
    print(
        f"# bench_dups {time.strftime('%Y-%m-%d %H:%M')} on {platform.node()}: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, python {platform.python_version()}, numpy {np.__version__}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    if not args.skip_search:
        bench_search(args.n, args.near, args.search_kinds.split(","))
    if not args.skip_accuracy:
        bench_accuracy(args.near)
    if not args.skip_second:
        bench_second_signal(args.near, args.max_side)


if __name__ == "__main__":
    main()
