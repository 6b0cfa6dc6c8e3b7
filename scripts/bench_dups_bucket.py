#!/usr/bin/env python3
"""``dsclean dups`` on a bucket prefix against the same files on local disk, in the same run.

    python scripts/bench_dups_bucket.py [--files 300] [--jobs 2] [--latency 0] [--repeats 1]

Writes ``--files`` JPEGs (256x192; every tenth an exact copy of the one before, every tenth + 5 a
resized re-encode: near copies) to a temp folder and to a bucket on a local S3 API server (moto, in this
process' threads; ``--latency`` seconds added to every request through the test proxy), then runs
``find_duplicates`` over each with no scan results (every file read, hashed and decoded) and the same
``--jobs``: wall time of each, best of ``--repeats``, the bucket's time over the folder's, and that both
found the same groups.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))  # tests/support


def _files(n: int) -> dict[str, bytes]:
    from support import synth

    out: dict[str, bytes] = {}
    for i in range(n):
        if i % 10 == 1:
            out[f"d{i // 100}/{i:05d}.jpg"] = out[f"d{(i - 1) // 100}/{i - 1:05d}.jpg"]
        elif i % 10 == 6:
            small = synth.photo_like(256, 192, seed=i - 1).resize((200, 150))
            out[f"d{i // 100}/{i:05d}.jpg"] = synth.encode_image(small, "JPEG", quality=70)
        else:
            out[f"d{i // 100}/{i:05d}.jpg"] = synth.encode_image(synth.photo_like(256, 192, seed=i), "JPEG", quality=85)
    return out


def _shape(result) -> list:
    return [(r["kind"], [m["path"] for m in r["members"]]) for r in result.records()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", type=int, default=300)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--latency", type=float, default=0.0)
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args()
    for k, v in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        os.environ.setdefault(k, v)
    import s3fs
    from support.s3server import FaultProxy, start_moto

    from dsclean.dups.finder import DupsOptions, find_duplicates

    files = _files(args.files)
    server, endpoint = start_moto()
    try:
        fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
        fs.mkdir("bench")
        with tempfile.TemporaryDirectory() as tmp, FaultProxy(endpoint, latency=args.latency) as proxy:
            for rel, data in files.items():
                os.makedirs(os.path.join(tmp, os.path.dirname(rel)), exist_ok=True)
                with open(os.path.join(tmp, rel), "wb") as f:
                    f.write(data)
                fs.pipe_file(f"bench/set/{rel}", data)
            out: dict = {"files": args.files, "jobs": args.jobs, "latency_s": args.latency}
            shapes = {}
            for name, root, opts in (
                ("local disk", tmp, DupsOptions(jobs=args.jobs, use_results=False)),
                (
                    "bucket (moto)",
                    "s3://bench/set",
                    DupsOptions(jobs=args.jobs, use_results=False, storage_options={"endpoint_url": proxy.url}),
                ),
            ):
                best = None
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    result = find_duplicates([root], opts)
                    wall = time.perf_counter() - t0
                    best = wall if best is None else min(best, wall)
                shapes[name] = _shape(result)
                s = result.summary
                out[name] = {
                    "wall_s": round(best, 2),
                    "files_per_s": round(args.files / best, 1),
                    "groups": (s.exact_groups, s.near_groups),
                    "failed": len(s.failed),
                }
                print(name, out[name], flush=True)
            out["bucket_over_local_time"] = round(out["bucket (moto)"]["wall_s"] / out["local disk"]["wall_s"], 2)
            out["same_groups"] = shapes["local disk"] == shapes["bucket (moto)"]
            print(json.dumps(out, indent=2))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
