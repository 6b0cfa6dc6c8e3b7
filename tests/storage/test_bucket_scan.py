"""dsclean scan s3://...: listing streamed, objects checked from memory, results named by key."""

from __future__ import annotations

import json
import os

import pytest
from support import synth
from support.s3server import FaultProxy

from dsclean.cli import main
from dsclean.scanning.results import read_problems, read_results
from dsclean.storage.fs import Store
from dsclean.storage.listing import ListingStats, iter_objects
from dsclean.storage.scan import BucketScanOptions, scan_bucket


def fill(fs, bucket, prefix="data"):
    good = synth.jpeg(64, 48, seed=1)
    files = {
        f"{prefix}/cats/a.jpg": good,
        f"{prefix}/cats/b.png": synth.png(32, 32, seed=2),
        f"{prefix}/dogs/c.jpg": synth.truncate(synth.jpeg(64, 48, seed=3), 0.5),
        f"{prefix}/dogs/d.txt": b"not media",
        f"{prefix}/dogs/.hidden.jpg": good,
        "elsewhere/e.jpg": good,
    }
    for key, data in files.items():
        fs.pipe_file(f"{bucket}/{key}", data)
    return files


def opts(endpoint, **kw):
    return BucketScanOptions(storage_options={"endpoint_url": endpoint}, jobs=1, read_threads=4, **kw)


def test_scan_names_objects_by_key_relative_to_prefix(bucket, s3fs_direct, s3_endpoint, tmp_path):
    fill(s3fs_direct, bucket)
    summary = scan_bucket(f"s3://{bucket}/data/", opts(s3_endpoint, report_dir=str(tmp_path / "r")))
    table = read_results(summary.results_path).to_pydict()
    paths = sorted(os.fsdecode(p) for p in table["path"])
    assert paths == ["cats/a.jpg", "cats/b.png", "dogs/c.jpg"]  # no .txt, no dot-name, nothing outside the prefix
    status = dict(zip((os.fsdecode(p) for p in table["path"]), table["status"]))
    assert status == {"cats/a.jpg": "ok", "cats/b.png": "ok", "dogs/c.jpg": "bad"}
    problems = read_problems(summary.problems_path)
    assert [p["path"] for p in problems] == ["dogs/c.jpg"] and problems[0]["reason"] == "truncated"
    assert summary.files == 3 and summary.bad == 1
    assert not list(s3fs_direct.find(f"{bucket}/data/.dsclean"))  # nothing written into the bucket


def test_listing_streams_pages_not_a_list_of_all_keys(bucket, s3fs_direct, s3_endpoint, monkeypatch):
    from dsclean.storage import listing

    for i in range(25):
        s3fs_direct.pipe_file(f"{bucket}/p/{i:03d}.jpg", b"x")
    monkeypatch.setattr(listing, "PAGE_KEYS", 10)
    stats = ListingStats()
    it = iter_objects(Store(f"s3://{bucket}/p", {"endpoint_url": s3_endpoint}), stats=stats)
    first = next(it)
    assert first.rel == "000.jpg" and stats.pages == 1  # the first object came from the first page alone
    rest = list(it)
    assert len(rest) == 24 and stats.pages == 3
    assert all(o.etag and o.size == 1 and o.mtime_ns for o in rest)


def test_file_url_scans_a_local_folder(tmp_path):
    root = tmp_path / "set"
    (root / "x").mkdir(parents=True)
    (root / "x" / "ok.png").write_bytes(synth.png(16, 16))
    (root / "x" / "bad.png").write_bytes(synth.truncate(synth.png(16, 16), 0.5))
    summary = scan_bucket(f"file://{root}", BucketScanOptions(jobs=1, report_dir=str(tmp_path / "r")))
    table = read_results(summary.results_path).to_pydict()
    got = dict(zip((os.fsdecode(p) for p in table["path"]), table["status"]))
    assert got == {"x/ok.png": "ok", "x/bad.png": "bad"}


def test_cli_scan_with_storage_option_and_no_secret_in_any_output(
    bucket, s3fs_direct, s3_endpoint, tmp_path, capsys, caplog
):
    import logging

    fill(s3fs_direct, bucket)
    secret = "S3CR3T-never-shown-4242"
    state = tmp_path / "state"
    caplog.set_level(logging.DEBUG)
    # moto accepts any credentials: the secret is a real storage option the client signs with
    code = main(
        [
            "scan",
            f"s3://{bucket}/data",
            "--storage-option",
            f"endpoint_url={s3_endpoint}",
            "--storage-option",
            "key=AKIDEXAMPLE",
            "--storage-option",
            f"secret={secret}",
            "--state-dir",
            str(state),
            "--jobs",
            "1",
            "--json",
            "--check",
        ]
    )
    out = capsys.readouterr()
    assert code == 1  # --check: one bad object
    summary = json.loads(out.out)
    assert summary["files"] == 3 and summary["bad"] == 1
    assert "***" in " ".join(summary["command"])  # the command is recorded, the secret's value redacted
    everything = out.out + out.err + caplog.text
    for dirpath, _, files in os.walk(state):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                everything += f.read().decode("latin-1")
    assert secret not in everything
    assert "scan_results.parquet" in " ".join(os.listdir(os.path.dirname(summary["results_path"])))


def test_throttled_reads_are_retried(bucket, s3fs_direct, s3_endpoint, tmp_path):
    files = fill(s3fs_direct, bucket)
    with FaultProxy(s3_endpoint, failures=2, status=503, match="/data/") as proxy:
        summary = scan_bucket(f"s3://{bucket}/data", opts(proxy.url, report_dir=str(tmp_path / "r")))
    assert proxy.injected == 2 * 3  # each of the 3 media objects throttled twice
    assert summary.files == 3 and summary.bad == 1  # the truncated jpeg only: every throttled read got through
    data = json.load(open(os.path.join(str(tmp_path / "r"), "scan_summary.json")))
    assert data["discovery"]["retries"] == 6
    assert files  # (the contents are the fixture's)


@pytest.mark.parametrize("status", [500, 503])
def test_a_read_failing_past_the_retries_is_unreadable_naming_the_key(
    status, bucket, s3fs_direct, s3_endpoint, tmp_path
):
    from dsclean.storage.reads import ReadPolicy

    fill(s3fs_direct, bucket)
    with FaultProxy(s3_endpoint, failures=100, status=status, match="/cats/a.jpg") as proxy:
        summary = scan_bucket(
            f"s3://{bucket}/data",
            opts(proxy.url, report_dir=str(tmp_path / "r"), policy=ReadPolicy(retries=2, base_delay=0.01)),
        )
    assert proxy.injected == 3  # the first try and 2 retries
    problems = {p["path"]: p for p in read_problems(summary.problems_path)}
    assert problems["cats/a.jpg"]["reason"] == "unreadable"
    assert f"HTTP {status}" in problems["cats/a.jpg"]["detail"]


def test_missing_bucket_and_denied_listing_are_clear_errors(s3_endpoint, capsys):
    code = main(["scan", "s3://no-such-bucket-here/x", "--storage-option", f"endpoint_url={s3_endpoint}", "-j", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "s3://no-such-bucket-here/x" in err and "Traceback" not in err


def test_bucket_options_on_a_local_root_are_refused(tmp_path, capsys):
    code = main(["scan", str(tmp_path), "--manifest", str(tmp_path / "m.txt")])
    err = capsys.readouterr().err
    assert code == 2 and "--manifest" in err and "storage URL" in err


def test_worker_processes_give_the_verdicts_of_one_process(bucket, s3fs_direct, s3_endpoint, tmp_path):
    fill(s3fs_direct, bucket)
    for i in range(6):
        s3fs_direct.pipe_file(f"{bucket}/data/more/{i}.png", synth.png(16, 16, seed=20 + i))
    got = {}
    for jobs in (1, 2):
        options = BucketScanOptions(
            storage_options={"endpoint_url": s3_endpoint},
            jobs=jobs,
            chunk_objects=2,
            report_dir=str(tmp_path / str(jobs)),
        )
        table = read_results(scan_bucket(f"s3://{bucket}/data", options).results_path).to_pydict()
        got[jobs] = sorted(zip((os.fsdecode(p) for p in table["path"]), table["status"], table["content_hash"]))
    assert got[1] == got[2] and len(got[1]) == 9


def test_objects_past_the_memory_threshold_are_checked_from_a_temp_file_then_removed(
    bucket, s3fs_direct, s3_endpoint, tmp_path, monkeypatch
):
    import tempfile

    from dsclean.storage import workers
    from dsclean.storage.reads import ReadPolicy

    fill(s3fs_direct, bucket)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    seen = []
    real = workers.check_file

    def spy(root, rel, *a, **k):
        seen.append((os.path.getsize(os.path.join(root, rel)), rel))
        return real(root, rel, *a, **k)

    monkeypatch.setattr(workers, "check_file", spy)
    small = {o.rel: o.size for o in iter_objects(Store(f"s3://{bucket}/data", {"endpoint_url": s3_endpoint}))}
    threshold = sorted(small.values())[1]  # the largest object goes through a temp file, the others not
    summary = scan_bucket(
        f"s3://{bucket}/data",
        opts(s3_endpoint, report_dir=str(tmp_path / "r"), policy=ReadPolicy(max_in_memory=threshold)),
    )
    assert [size for size, _ in seen] == [max(small.values())]
    assert summary.files == 3 and summary.bad == 1
    assert os.listdir(tmp_path / "tmp") == []  # the temp copy and its folder removed


@pytest.mark.slow  # fault injection: checks that hang, block SIGALRM and segfault, each ending its process three times
def test_a_hanging_or_crashing_check_costs_its_object_only(bucket, s3fs_direct, s3_endpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("DSCLEAN_TEST_FAULTS", "1")  # objects named __hang__ / __segfault__ really hang / crash
    for i in range(5):
        s3fs_direct.pipe_file(f"{bucket}/f/ok{i}.png", synth.png(16, 16, seed=i))
    s3fs_direct.pipe_file(f"{bucket}/f/x__hang__.png", synth.png(16, 16, seed=7))
    s3fs_direct.pipe_file(f"{bucket}/f/y__segfault__.png", synth.png(16, 16, seed=8))
    s3fs_direct.pipe_file(f"{bucket}/f/z__stuck__.png", synth.png(16, 16, seed=9))  # a hang blocking SIGALRM
    from dsclean.scanning.check import CheckOptions

    options = BucketScanOptions(
        storage_options={"endpoint_url": s3_endpoint},
        jobs=2,
        chunk_objects=3,
        check=CheckOptions(timeout=1),
        report_dir=str(tmp_path / "r"),
    )
    summary = scan_bucket(f"s3://{bucket}/f", options)
    table = read_results(summary.results_path).to_pydict()
    got = dict(zip((os.fsdecode(p) for p in table["path"]), zip(table["status"], table["reason"])))
    details = dict(zip((os.fsdecode(p) for p in table["path"]), table["detail"]))
    # told apart as the local scan tells them (its reason codes): the hang is a timeout, the crash names its signal
    assert got.pop("x__hang__.png") == ("bad", "timeout") and "longer than 1 s" in details["x__hang__.png"]
    assert got.pop("y__segfault__.png") == ("bad", "decoder_crash") and "SIGSEGV" in details["y__segfault__.png"]
    assert got.pop("z__stuck__.png") == ("bad", "timeout")
    assert got == {f"ok{i}.png": ("ok", None) for i in range(5)}


def test_access_denied_is_not_retried_and_names_the_key(bucket, s3fs_direct, s3_endpoint, tmp_path):
    fill(s3fs_direct, bucket)
    with FaultProxy(s3_endpoint, failures=100, status=403, match="/cats/a.jpg") as proxy:
        summary = scan_bucket(f"s3://{bucket}/data", opts(proxy.url, report_dir=str(tmp_path / "r")))
    assert proxy.injected == 1  # a 403 is an answer, not a hiccup: no retry
    problems = {p["path"]: p for p in read_problems(summary.problems_path)}
    assert problems["cats/a.jpg"]["reason"] == "unreadable"
    assert (
        "access denied (403)" in problems["cats/a.jpg"]["detail"] and "cats/a.jpg" in problems["cats/a.jpg"]["detail"]
    )
    assert summary.files == 3


def test_report_of_a_scanned_url_uses_its_last_results(bucket, s3fs_direct, s3_endpoint, tmp_path, capsys):
    fill(s3fs_direct, bucket)
    state = str(tmp_path / "state")
    url = f"s3://{bucket}/data"
    assert main(["report", url, "--state-dir", state, "-o", str(tmp_path / "none.html")]) == 2
    assert "no scan of" in capsys.readouterr().err
    scan_bucket(url, opts(s3_endpoint, state_dir=state, report_dir=str(tmp_path / "elsewhere")))
    assert main(["report", url + "/", "--state-dir", state, "-o", str(tmp_path / "r.html"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["files"] == 3 and out["problems"] == 1 and out["thumbnails"] >= 1  # read with the recorded endpoint
    assert "elsewhere" in out["results_source"]  # the results the scan wrote, wherever --report put them
    assert "dogs/c.jpg" in (tmp_path / "r.html").read_text()


def test_endpoint_from_aws_endpoint_url_and_dry_run_moves_nothing(
    bucket, s3fs_direct, s3_endpoint, tmp_path, monkeypatch
):
    fill(s3fs_direct, bucket)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)  # the standard variable, no --storage-option
    summary = scan_bucket(
        f"s3://{bucket}/data",
        BucketScanOptions(jobs=1, quarantine=f"s3://{bucket}/q", dry_run=True, report_dir=str(tmp_path / "r")),
    )
    assert summary.files == 3 and summary.would_quarantine == 1 and summary.quarantined == 0
    s3fs_direct.invalidate_cache()
    assert s3fs_direct.exists(f"{bucket}/data/dogs/c.jpg") and not s3fs_direct.exists(f"{bucket}/q/dogs/c.jpg")


def test_a_scan_lists_each_page_once_and_probes_with_one_key(bucket, s3fs_direct, s3_endpoint, tmp_path, monkeypatch):
    from dsclean.storage import listing

    for i in range(25):
        s3fs_direct.pipe_file(f"{bucket}/flat/{i:03d}.bin", b"x")  # not media: listed and counted, never read
    monkeypatch.setattr(listing, "PAGE_KEYS", 10)
    with FaultProxy(s3_endpoint) as proxy:
        summary = scan_bucket(f"s3://{bucket}/flat", opts(proxy.url, report_dir=str(tmp_path / "r")))
    assert summary.files == 0
    assert proxy.requests == 1 + 3  # the probe (one key) and three pages; no listing of the whole prefix first
    assert any("25 objects are not media" in n for n in summary.notes)


def test_one_scan_of_a_prefix_at_a_time_and_results_stay_local(bucket, s3fs_direct, s3_endpoint, tmp_path):
    import fcntl

    from dsclean import locations
    from dsclean.errors import UserError

    fill(s3fs_direct, bucket)
    url = f"s3://{bucket}/data"
    state = locations.url_state_dir(url, str(tmp_path))
    os.makedirs(state)
    with open(os.path.join(state, locations.LOCK_FILE), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(UserError, match="is scanning s3://"):
            scan_bucket(url, opts(s3_endpoint, state_dir=str(tmp_path)))
    assert scan_bucket(url, opts(s3_endpoint, state_dir=str(tmp_path))).files == 3  # released: it runs
    with pytest.raises(UserError, match="--report is a local folder"):
        scan_bucket(url, opts(s3_endpoint, report_dir=f"s3://{bucket}/reports"))


def test_workers_forked_from_a_server_started_without_credentials_read_with_the_current_ones(
    bucket, s3fs_direct, s3_endpoint, tmp_path
):
    """A forkserver keeps the environment of its start; credentials set later (a notebook, a test) reach the
    scan's workers all the same: each worker gets the stores' variables as the scan has them now."""
    import subprocess
    import sys

    fill(s3fs_direct, bucket)
    script = f"""
import multiprocessing, os
for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
    os.environ.pop(name)
multiprocessing.get_context("forkserver").Process(target=print).start()  # the server starts without them
os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
from dsclean.scanning.results import read_results
from dsclean.storage.scan import BucketScanOptions, scan_bucket
options = BucketScanOptions(storage_options={{"endpoint_url": {s3_endpoint!r}}}, jobs=2, chunk_objects=1,
                            report_dir={str(tmp_path / "r")!r})
table = read_results(scan_bucket("s3://{bucket}/data", options).results_path).to_pydict()
print(sorted(zip(table["status"], map(str, table["reason"]))))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stderr
    assert "unreadable" not in out.stdout and "('bad', 'truncated')" in out.stdout, out.stdout
