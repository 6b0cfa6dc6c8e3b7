#!/usr/bin/env python3
"""Benchmark: the report of a bucket scan (thumbnails read from a local S3 server) against the report of the
same files scanned on local disk (the baseline: thumbnails decoded from paths), same workers, same caps.

A moto S3 server on 127.0.0.1 (``tests/support/s3server.py``), optionally behind a proxy adding latency to
every request; N objects (a third truncated JPEGs, the rest whole JPEGs and PNGs), copied to a local folder
too. Both are scanned (not timed), then each report is written ``--repeat`` times in this process
(``write_report``), the median taken. Prints the times and their ratio (bucket / local).

    python scripts/bench_report_bucket.py [--objects 300] [--latency 0.02] [--jobs 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from support import synth  # noqa: E402
from support.s3server import FaultProxy, start_moto  # noqa: E402


def files(n: int) -> dict[str, bytes]:
    out = {}
    for i in range(n):
        if i % 3 == 0:
            out[f"bad/{i:05d}.jpg"] = synth.truncate(synth.jpeg(320, 240, seed=i), 0.5)
        elif i % 3 == 1:
            out[f"ok/{i:05d}.jpg"] = synth.jpeg(320, 240, seed=i)
        else:
            out[f"ok/{i:05d}.png"] = synth.png(160, 120, seed=i)
    return out


def timed(fn, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objects", type=int, default=300)
    ap.add_argument("--latency", type=float, default=0.0, help="seconds added to every S3 request (a proxy)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()

    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    os.environ.update(AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent")
    import s3fs

    from dsclean.report.build import ReportOptions, write_report
    from dsclean.report.collect import Caps
    from dsclean.scanning.scanner import ScanOptions, scan
    from dsclean.storage.scan import BucketScanOptions, scan_bucket

    server, endpoint = start_moto()
    tmp = tempfile.mkdtemp(prefix="bench-report-bucket-")
    try:
        fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
        bucket = f"b-{uuid.uuid4().hex[:12]}"
        fs.mkdir(bucket)
        data = files(a.objects)
        local = os.path.join(tmp, "data")
        for key, blob in data.items():
            fs.pipe_file(f"{bucket}/d/{key}", blob)
            os.makedirs(os.path.dirname(os.path.join(local, key)), exist_ok=True)
            with open(os.path.join(local, key), "wb") as f:
                f.write(blob)
        state = os.path.join(tmp, "state")
        url = f"s3://{bucket}/d"
        scan_bucket(url, BucketScanOptions(storage_options={"endpoint_url": endpoint}, jobs=a.jobs, state_dir=state))
        scan(local, ScanOptions(jobs=a.jobs, state_dir=state, progress=False))
        caps = Caps(per_reason=a.objects)
        with FaultProxy(endpoint, latency=a.latency) as proxy:
            bucket_opts = ReportOptions(
                jobs=a.jobs, state_dir=state, caps=caps, storage_options={"endpoint_url": proxy.url}
            )
            out = os.path.join(tmp, "r.html")
            s_bucket = write_report(url, out, bucket_opts)
            t_bucket = timed(lambda: write_report(url, out, bucket_opts), a.repeat)
        local_opts = ReportOptions(jobs=a.jobs, state_dir=state, caps=caps)
        s_local = write_report(local, out, local_opts)
        t_local = timed(lambda: write_report(local, out, local_opts), a.repeat)
        print(f"objects {a.objects}, latency {a.latency * 1000:.0f} ms a request, jobs {a.jobs}, median of {a.repeat}")
        print(f"local report:  {t_local:.2f} s ({s_local.thumbnails} thumbnails, {s_local.placeholders} placeholders)")
        print(
            f"bucket report: {t_bucket:.2f} s ({s_bucket.thumbnails} thumbnails, {s_bucket.placeholders} placeholders)"
        )
        print(f"ratio bucket / local: {t_bucket / t_local:.2f}x")
    finally:
        server.stop()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
