"""A re-scan of an unchanged bucket reuses the verdicts of objects whose ETag, size and time match."""

from __future__ import annotations

import os

from support import synth
from support.s3server import FaultProxy

from dsclean.scanning.check import CheckOptions
from dsclean.scanning.results import read_results
from dsclean.storage.scan import BucketScanOptions, scan_bucket


def _rows(summary):
    t = read_results(summary.results_path).to_pydict()
    return sorted(zip((os.fsdecode(p) for p in t["path"]), t["status"], t["width"], t["content_hash"]))


def test_unchanged_objects_are_not_read_again_and_keep_their_rows(bucket, s3fs_direct, s3_endpoint, tmp_path):
    for i in range(4):
        s3fs_direct.pipe_file(f"{bucket}/s/{i}.png", synth.png(16 + i, 16, seed=i))
    s3fs_direct.pipe_file(f"{bucket}/s/bad.png", synth.truncate(synth.png(16, 16), 0.5))
    state = str(tmp_path / "state")
    with FaultProxy(s3_endpoint) as proxy:

        def scan(**kw):
            opts = BucketScanOptions(storage_options={"endpoint_url": proxy.url}, jobs=1, state_dir=state, **kw)
            return scan_bucket(f"s3://{bucket}/s", opts)

        first = scan()
        assert first.cached == 0 and len(proxy.gets) == 5
        rows = _rows(first)
        proxy.gets.clear()
        second = scan()
        # the bad object is checked again (never reused), the 4 ok ones are not read
        assert second.cached == 4 and list(proxy.gets) == [f"/{bucket}/s/bad.png"]
        assert _rows(second) == rows and second.files == 5 and second.bad == 1
        # a changed object (new content, new ETag) is read and checked again; the others still reused
        s3fs_direct.pipe_file(f"{bucket}/s/0.png", synth.truncate(synth.png(16, 16, seed=9), 0.5))
        proxy.gets.clear()
        third = scan()
        assert sorted(proxy.gets) == [f"/{bucket}/s/0.png", f"/{bucket}/s/bad.png"]
        assert third.cached == 3 and third.bad == 2
        # the rows reused in the third scan came from the second's results (reuse chains)
        proxy.gets.clear()
        fourth = scan()
        assert fourth.cached == 3 and len(proxy.gets) == 2
        # --rescan reads everything; other check options do not reuse either
        proxy.gets.clear()
        assert scan(rescan=True).cached == 0 and len(proxy.gets) == 5
        proxy.gets.clear()
        assert scan(check=CheckOptions(lenient=True)).cached == 0 and len(proxy.gets) == 5
