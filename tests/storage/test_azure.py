"""az:// end to end against a real Azure Blob service (Azurite on 127.0.0.1, support.fixtures.azure) through
adlfs, exactly as a user's commands run them: scan, quarantine + restore, re-scan reuse, index +
IndexedDataset, shard sets, pack to a container, errors naming the URL, and no account key in any output."""

from __future__ import annotations

import json
import os

import pytest
from support import synth
from support.fixtures.azure import ACCOUNT_KEY

from dsclean.cli import main
from dsclean.scanning.results import read_results

pytest.importorskip("adlfs")

FILES = {
    "cats/a.jpg": synth.jpeg(40, 30, seed=1),
    "cats/b.png": synth.png(20, 22, seed=2),
    "dogs/c.jpg": synth.truncate(synth.jpeg(64, 48, seed=3), 0.5),  # the one bad object
    "dogs/d.png": synth.png(18, 16, seed=4),
}


def put(fs, container, prefix="data", files=FILES):
    for key, data in files.items():
        fs.pipe_file(f"{container}/{prefix}/{key}", data)


def keys(fs, container, prefix):
    fs.invalidate_cache()
    return sorted(p.split("/", 2)[2] for p in fs.find(f"{container}/{prefix}"))


def opt_args(options):
    return [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]


def verdicts(results_path):
    table = read_results(results_path).to_pydict()
    return sorted(zip((os.fsdecode(p) for p in table["path"]), table["status"], table["reason"]))


def test_scan_of_an_az_prefix_gives_the_verdicts_of_the_same_files_on_local_disk(
    az_container, adlfs_direct, az_options, tmp_path, capsys
):
    put(adlfs_direct, az_container)
    local = tmp_path / "local"
    for key, data in FILES.items():
        (local / key).parent.mkdir(parents=True, exist_ok=True)
        (local / key).write_bytes(data)
    state = str(tmp_path / "state")
    url = f"az://{az_container}/data"
    code = main(["scan", url, *opt_args(az_options), "--state-dir", state, "--jobs", "1", "--json", "--check"])
    out = capsys.readouterr()
    remote = json.loads(out.out)
    assert code == 1 and remote["files"] == 4 and remote["bad"] == 1, out.err
    code = main(["scan", str(local), "--state-dir", state, "--jobs", "1", "--json", "--check", "--dry-run"])
    here = json.loads(capsys.readouterr().out)
    assert code == 1 and here["files"] == 4
    got = verdicts(remote["results_path"])
    assert got == verdicts(here["results_path"])
    assert [(p, s) for p, s, _ in got if s != "ok"] == [("dogs/c.jpg", "bad")]
    assert keys(adlfs_direct, az_container, "data") == sorted(FILES)


def test_quarantine_in_a_container_then_restore_puts_every_byte_back(
    az_container, adlfs_direct, az_options, tmp_path, capsys
):
    put(adlfs_direct, az_container)
    state = str(tmp_path / "state")
    url, qurl = f"az://{az_container}/data", f"az://{az_container}/q"
    args = ["scan", url, *opt_args(az_options), "--state-dir", state, "--jobs", "1", "--json"]
    assert main([*args, "--quarantine", qurl]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["quarantined"] == 1
    assert keys(adlfs_direct, az_container, "data") == sorted(k for k in FILES if k != "dogs/c.jpg")
    assert keys(adlfs_direct, az_container, "q") == ["dogs/c.jpg"]
    assert adlfs_direct.cat_file(f"{az_container}/q/dogs/c.jpg") == FILES["dogs/c.jpg"]  # the very bytes
    from dsclean.storage.quarantine import journal_dir

    journal = os.path.join(journal_dir(qurl, state), "manifest.jsonl")
    entries = [json.loads(line) for line in open(journal)]
    assert [e["op"] for e in entries] == ["move", "done"]
    assert entries[0]["size"] == len(
        FILES["dogs/c.jpg"]
    )  # Azure: the copy is compared by size (a copy gets a new ETag)
    assert main(["status", f"{qurl}/", "--state-dir", state, "--json"]) == 0
    held = json.loads(capsys.readouterr().out)["quarantine"]
    assert held["moved"] == 1 and held["roots"] == [url] and held["quarantine"] == qurl
    assert main(["restore", qurl, *opt_args(az_options), "--state-dir", state]) == 0
    assert "1 restored" in capsys.readouterr().out
    assert keys(adlfs_direct, az_container, "q") == []
    restored = {k: adlfs_direct.cat_file(f"{az_container}/data/{k}") for k in keys(adlfs_direct, az_container, "data")}
    assert restored == FILES


def test_a_rescan_of_an_unchanged_container_reuses_its_results(az_container, adlfs_direct, az_options, tmp_path):
    """Azure's listing gives each blob an ETag, a size and a last-modified time: unchanged blobs are not read."""
    from dsclean.storage.scan import BucketScanOptions, scan_bucket

    put(adlfs_direct, az_container)
    url = f"az://{az_container}/data"
    opts = BucketScanOptions(storage_options=dict(az_options), jobs=1, state_dir=str(tmp_path / "state"))
    first = scan_bucket(url, opts)
    assert first.cached == 0 and first.files == 4 and first.bad == 1
    second = scan_bucket(url, opts)
    assert second.cached == 3 and second.bad == 1  # the 3 ok blobs reused, the bad one checked again
    assert verdicts(second.results_path) == verdicts(first.results_path)
    # the same bytes written again: a new ETag and time, so read again (never trusted on size alone)
    adlfs_direct.pipe_file(f"{az_container}/data/cats/a.jpg", FILES["cats/a.jpg"])
    adlfs_direct.pipe_file(f"{az_container}/data/cats/b.png", FILES["dogs/c.jpg"])  # now bad
    third = scan_bucket(url, opts)
    assert third.cached == 1 and third.bad == 2
    assert ("cats/b.png", "bad") in [(p, s) for p, s, _ in verdicts(third.results_path)]


def test_index_of_an_az_prefix_read_by_indexed_dataset(az_container, adlfs_direct, az_options, tmp_path, capsys):
    from dsclean.data.dataset import IndexedDataset

    put(adlfs_direct, az_container)
    state = str(tmp_path / "state")
    url = f"az://{az_container}/data"
    assert main(["scan", url, *opt_args(az_options), "--state-dir", state, "--jobs", "1", "-q"]) == 0
    out = str(tmp_path / "i.arrow")
    code = main(["index", url, "-o", out, *opt_args(az_options), "--state-dir", state, "--jobs", "1", "--json"])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    with open(out, "rb") as f:
        assert ACCOUNT_KEY.encode() not in f.read()  # the index holds the URL, never a storage option
    ds = IndexedDataset(out, transform=lambda img: img.size, storage_options=az_options)
    assert ds.root == url and ds.classes == ["cats", "dogs"]
    assert sorted(ds.path(i) for i in range(len(ds))) == ["cats/a.jpg", "cats/b.png", "dogs/d.png"]  # bad one out
    i = [ds.path(j) for j in range(len(ds))].index("dogs/d.png")
    assert ds[i] == ((18, 16), 1)
    assert ds.raw(i) == FILES["dogs/d.png"]


def _tars(folder, shards=2, per=6):
    """WebDataset tars (TarWriter) with one truncated JPEG each; returns the bad (shard, key)."""
    import webdataset as wds

    os.makedirs(folder, exist_ok=True)
    bad = set()
    for s in range(shards):
        name = f"shard-{s:06d}.tar"
        with wds.TarWriter(os.path.join(folder, name)) as w:
            for i in range(per):
                jpg = synth.jpeg(32, 32, seed=s * 100 + i)
                if i == s + 1:
                    jpg = synth.truncate(jpg, 0.5)
                    bad.add((name, f"s{s}_{i:03d}"))
                w.write({"__key__": f"s{s}_{i:03d}", "jpg": jpg, "json": {"i": i}})
    return bad


def test_scan_and_verify_of_a_webdataset_shard_set_in_a_container(
    az_container, adlfs_direct, az_options, tmp_path, capsys, monkeypatch
):
    from dsclean import denylist

    local = tmp_path / "shards"
    bad = _tars(str(local))
    for name in sorted(os.listdir(local)):
        adlfs_direct.put_file(str(local / name), f"{az_container}/sh/{name}")
    before = keys(adlfs_direct, az_container, "sh")
    url = f"az://{az_container}/sh/"
    monkeypatch.setenv("DSCLEAN_STATE_DIR", str(tmp_path / "state"))  # verify finds the scan's deny-list there
    assert main(["scan", url, *opt_args(az_options), "--json", "--jobs", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "webdataset" and out["checked"] == 12 and out["bad"] == 2
    assert {(e["shard"], e["key"]) for e in denylist.read_denylist(out["denylist_path"]).entries} == bad
    assert not out["denylist_path"].startswith("az://") and keys(adlfs_direct, az_container, "sh") == before
    code = main(["scan", str(local), "--json", "--jobs", "1", "--dry-run"])
    here = json.loads(capsys.readouterr().out)
    assert code == 0 and (here["checked"], here["bad"]) == (out["checked"], out["bad"])
    assert main(["verify", url, *opt_args(az_options)]) == 0  # the bad samples are on the deny-list
    assert "2 samples denied" in capsys.readouterr().out
    assert main(["verify", url, *opt_args(az_options), "--denylist", str(tmp_path / "none.jsonl")]) == 1
    assert "s0_001" in capsys.readouterr().out


def test_pack_an_az_prefix_into_az_shards_then_verify_them(az_container, adlfs_direct, az_options, tmp_path, capsys):
    put(adlfs_direct, az_container)
    url, shards = f"az://{az_container}/data", f"az://{az_container}/shards"
    state = ["--state-dir", str(tmp_path / "s")]
    assert main(["scan", url, *opt_args(az_options), *state, "--jobs", "1", "-q"]) == 0
    assert main(["pack", url, "-o", shards, *opt_args(az_options), *state, "--json"]) == 0
    packed = json.loads(capsys.readouterr().out)
    assert packed["samples"] == 3 and packed["complete"]  # the bad object left out
    assert "pack.json" in keys(adlfs_direct, az_container, "shards")
    code = main(["verify", shards, "--decode", *opt_args(az_options), "--json"])
    verified = json.loads(capsys.readouterr().out)
    assert code == 0 and verified["ok"] and verified["samples"] == 3 and verified["problems"] == []
    assert [sh["shard"] for sh in verified["shards"]] == ["data-000000.tar"]


@pytest.mark.parametrize("command", ["scan", "index", "pack", "verify"])
def test_a_missing_container_is_a_clear_error_naming_the_url(command, az_options, tmp_path, capsys):
    url = "az://no-such-container/data"
    extra = {"scan": [], "index": ["-o", str(tmp_path / "i.arrow")], "pack": ["-o", str(tmp_path / "p")]}
    state = [] if command == "verify" else ["--state-dir", str(tmp_path / "s")]
    code = main([command, url, *extra.get(command, []), *opt_args(az_options), *state])
    err = capsys.readouterr().err
    assert code == 2 and url in err and "Traceback" not in err, err
    assert "no such bucket" in err or "not found (404)" in err
    assert ACCOUNT_KEY not in err


@pytest.mark.parametrize("command", ["scan", "index", "verify"])
def test_a_wrong_account_key_is_a_clear_error_naming_the_url_and_never_the_key(
    command, az_container, adlfs_direct, azurite_endpoint, tmp_path, capsys
):
    from support.fixtures.azure import connection_string

    put(adlfs_direct, az_container)
    wrong = "d3Jvbmcga2V5IG9mIHRoZSBzYW1lIGxlbmd0aCBhcyBhIHJlYWwgb25lLCBubyBtb3JlLCBubyBsZXNzLg=="
    options = {"connection_string": connection_string(azurite_endpoint, key=wrong)}
    url = f"az://{az_container}/data"
    extra = {"index": ["-o", str(tmp_path / "i.arrow")]}.get(command, [])
    state = [] if command == "verify" else ["--state-dir", str(tmp_path / "s")]
    code = main([command, url, *extra, *opt_args(options), *state])
    err = capsys.readouterr().err
    assert code == 2 and url in err and "Traceback" not in err, err
    assert "403" in err or "denied" in err.lower()
    assert wrong not in err and "AccountKey" not in err


def _files_holding(folder, secret: bytes) -> list[str]:
    found = []
    for dirpath, _dirs, names in os.walk(folder):
        for name in names:
            with open(os.path.join(dirpath, name), "rb") as f:
                if secret in f.read():
                    found.append(os.path.join(dirpath, name))
    return found


def test_no_account_key_lands_in_any_output_file_or_log(
    az_container, adlfs_direct, az_options, tmp_path, capsys, caplog
):
    """The connection string holds the account key: every file dsclean writes (results, problems, summary with
    its command line, journal, index, pack state) and every log record is searched for it."""
    import logging

    caplog.set_level(logging.DEBUG, logger="dsclean")
    put(adlfs_direct, az_container)
    out = tmp_path / "out"
    state = ["--state-dir", str(out / "state")]
    url, so = f"az://{az_container}/data", opt_args(az_options)
    assert main(["scan", url, *so, *state, "--jobs", "1", "--quarantine", f"az://{az_container}/q"]) == 0
    assert main(["restore", f"az://{az_container}/q", *so, *state]) == 0
    assert main(["scan", url, *so, *state, "--jobs", "1", "--report", str(out / "report"), "--dry-run"]) == 0
    assert main(["index", url, "-o", str(out / "i.arrow"), *so, *state, "--jobs", "1"]) == 0
    assert main(["pack", url, "-o", f"az://{az_container}/packed", *so, *state]) == 0
    assert main(["pack", url, "-o", str(out / "local-pack"), *so, *state]) == 0
    printed = capsys.readouterr()
    summaries = [os.path.join(d, "scan_summary.json") for d, _, n in os.walk(out) if "scan_summary.json" in n]
    assert summaries, "no scan summary written"
    commands = [json.load(open(s)).get("command") for s in summaries]
    assert any("--storage-option" in " ".join(c or ()) for c in commands)  # the command line is recorded...
    for secret in (ACCOUNT_KEY, az_options["connection_string"]):
        assert _files_holding(out, secret.encode()) == []  # ...with its secret redacted
        assert secret not in printed.out + printed.err and secret not in caplog.text
    uploaded = {p: adlfs_direct.cat_file(p) for p in adlfs_direct.find(f"{az_container}/packed")}
    assert "pack.json" in {p.rsplit("/", 1)[1] for p in uploaded}
    assert [p for p, data in uploaded.items() if ACCOUNT_KEY.encode() in data] == []


def test_the_cli_process_reads_the_connection_string_from_the_environment(
    az_container, adlfs_direct, az_options, tmp_path, monkeypatch
):
    """``AZURE_STORAGE_CONNECTION_STRING`` (read by adlfs): a fresh ``dsclean`` process, no storage option."""
    import subprocess
    import sys

    put(adlfs_direct, az_container)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", az_options["connection_string"])
    monkeypatch.setenv("PYTHONPATH", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    cmd = [sys.executable, "-m", "dsclean", "scan", f"az://{az_container}/data"]
    done = subprocess.run(
        [*cmd, "--state-dir", str(tmp_path / "s"), "--jobs", "2", "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["files"] == 4 and summary["bad"] == 1
    assert [(p, s) for p, s, _ in verdicts(summary["results_path"]) if s != "ok"] == [("dogs/c.jpg", "bad")]
    assert _files_holding(tmp_path / "s", ACCOUNT_KEY.encode()) == []


def test_throttled_reads_are_retried_by_dsclean_counted_and_a_lasting_503_named(
    az_container, adlfs_direct, azurite_endpoint, tmp_path
):
    """The Azure SDK's own retries (3, after 15 s, 18 s, 24 s) are turned down: dsclean's reads retry with their
    short backoff and count each retry; an object still failing after ``retries`` is unreadable, not bad."""
    from support.fixtures.azure import connection_string
    from support.s3server import FaultProxy

    from dsclean.scanning.results import read_problems
    from dsclean.storage.reads import ReadPolicy
    from dsclean.storage.scan import BucketScanOptions, scan_bucket

    put(adlfs_direct, az_container)
    url = f"az://{az_container}/data"
    policy = ReadPolicy(retries=3, base_delay=0.01)
    with FaultProxy(azurite_endpoint, failures=2, status=503, match="d.png") as proxy:
        options = {"connection_string": connection_string(proxy.url)}
        s = scan_bucket(
            url, BucketScanOptions(storage_options=options, jobs=1, state_dir=str(tmp_path / "a"), policy=policy)
        )
    assert proxy.injected == 2 and s.files == 4 and s.bad == 1  # the throttled object checked in the end: ok
    assert any(note.startswith("2 reads were retried") for note in s.notes)  # dsclean's retries, counted
    with FaultProxy(azurite_endpoint, failures=100, status=503, match="d.png") as proxy:
        options = {"connection_string": connection_string(proxy.url)}
        s = scan_bucket(
            url, BucketScanOptions(storage_options=options, jobs=1, state_dir=str(tmp_path / "b"), policy=policy)
        )
        failing = [path for path in proxy.gets if path.endswith("/dogs/d.png")]
        assert [proxy.gets[p] for p in failing] == [1 + policy.retries]  # no SDK retries under each of ours
    problems = {p["path"]: p for p in read_problems(s.problems_path)}
    assert (
        problems["dogs/d.png"]["reason"] == "unreadable"
        and "still failing after retries" in problems["dogs/d.png"]["detail"]
    )
    assert "HTTP 503" in problems["dogs/d.png"]["detail"]


def test_kill_9_mid_quarantine_then_recover_loses_nothing_and_leaves_nothing_twice(
    az_container, adlfs_direct, az_options, tmp_path
):
    """On Azure a copy is known whole by its size alone (a copy gets a new ETag): recovery still finishes the move."""
    import subprocess
    import sys

    bad = {f"bad{i}.png": synth.truncate(synth.png(16, 16, seed=i), 0.5) for i in range(3)}
    before = {**bad, "good0.png": synth.png(16, 16, seed=10)}
    for k, data in before.items():
        adlfs_direct.pipe_file(f"{az_container}/ds/{k}", data)
    state = str(tmp_path / "state")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    qurl = f"az://{az_container}/q"
    cmd = [sys.executable, "-m", "dsclean", "scan", f"az://{az_container}/ds", "--quarantine", qurl]
    cmd += [*opt_args(az_options), "--state-dir", state, "--jobs", "1"]
    env = {**os.environ, "PYTHONPATH": repo, "DSCLEAN_TEST_FAULTS": "1", "DSCLEAN_TEST_KILL_AT": "copied:2"}
    proc = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    # killed after the 2nd copy was verified and before its original was deleted: one object in two places
    ds, q = keys(adlfs_direct, az_container, "ds"), keys(adlfs_direct, az_container, "q")
    assert len(set(ds) & set(q)) == 1 and len(q) == 2
    assert main(["recover", qurl, *opt_args(az_options), "--state-dir", state]) == 0
    ds, q = keys(adlfs_direct, az_container, "ds"), keys(adlfs_direct, az_container, "q")
    assert not set(ds) & set(q) and sorted(ds + q) == sorted(before)  # nothing in two places, nothing lost
    for k in q:
        assert adlfs_direct.cat_file(f"{az_container}/q/{k}") == before[k]
    env.pop("DSCLEAN_TEST_KILL_AT")
    proc = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    assert keys(adlfs_direct, az_container, "ds") == ["good0.png"]
    assert keys(adlfs_direct, az_container, "q") == sorted(bad)


def test_dups_and_report_of_an_az_prefix(az_container, adlfs_direct, az_options, tmp_path, capsys):
    from dsclean.dups.finder import DupsOptions, find_duplicates

    files = {**FILES, "cats/a_copy.jpg": FILES["cats/a.jpg"]}
    put(adlfs_direct, az_container, files=files)
    url = f"az://{az_container}/data"
    found = find_duplicates([url], DupsOptions(jobs=1, timeout=30, storage_options=dict(az_options)))
    groups = sorted((r["kind"], sorted(m["path"] for m in r["members"])) for r in found.records())
    assert groups == [("exact", ["cats/a.jpg", "cats/a_copy.jpg"])]
    state = str(tmp_path / "state")
    assert main(["scan", url, *opt_args(az_options), "--state-dir", state, "--jobs", "1", "-q"]) == 0
    capsys.readouterr()
    assert main(["report", url, "--state-dir", state, "-o", str(tmp_path / "r.html"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["files"] == 5 and out["problems"] == 1
    page = (tmp_path / "r.html").read_text()
    assert "dogs/c.jpg" in page and ACCOUNT_KEY not in page


class CopyStatus:
    """Rewrites the ``x-ms-copy-status`` of the blobs under ``/q/`` as Azure would show a copy it has not finished
    (``pending``) or one that broke (``failed``): the first ``len(script)`` answers get the scripted status."""

    def __init__(self, *script: str) -> None:
        self.script, self.served = list(script), []

    def __call__(self, method, path, headers):
        if "/q/" not in path or not any(k.lower() == "x-ms-copy-status" for k, _ in headers):
            return headers
        status = self.script.pop(0) if self.script else None
        self.served.append(status or {k.lower(): v for k, v in headers}["x-ms-copy-status"])
        return [(k, status if status and k.lower() == "x-ms-copy-status" else v) for k, v in headers]


@pytest.mark.parametrize("script", [("pending", "pending"), ("failed",) * 50])
def test_a_copy_azure_has_not_finished_is_waited_for_and_a_failed_one_never_costs_the_original(
    script, az_container, adlfs_direct, azurite_endpoint, tmp_path
):
    """Copy Blob may answer before the copy is done: the original is deleted only once the copy says success."""
    from support.fixtures.azure import connection_string
    from support.s3server import FaultProxy

    from dsclean.storage.quarantine import journal_dir
    from dsclean.storage.scan import BucketScanOptions, scan_bucket

    put(adlfs_direct, az_container)
    url, qurl, state = f"az://{az_container}/data", f"az://{az_container}/q", str(tmp_path / "state")
    rewrite = CopyStatus(*script)
    with FaultProxy(azurite_endpoint, rewrite_headers=rewrite) as proxy:
        options = {"connection_string": connection_string(proxy.url)}
        s = scan_bucket(url, BucketScanOptions(storage_options=options, jobs=1, state_dir=state, quarantine=qurl))
    entries = [json.loads(line) for line in open(os.path.join(journal_dir(qurl, state), "manifest.jsonl"))]
    if script[0] == "pending":
        assert rewrite.served[:3] == ["pending", "pending", "success"]  # asked again until it said success
        assert s.quarantined == 1 and [e["op"] for e in entries] == ["move", "done"]
        assert keys(adlfs_direct, az_container, "q") == ["dogs/c.jpg"]
        assert "dogs/c.jpg" not in keys(adlfs_direct, az_container, "data")
    else:
        assert s.quarantined == 0 and [e["op"] for e in entries] == ["move", "abort"]
        assert "copy status: failed" in entries[1]["error"]
        assert keys(adlfs_direct, az_container, "q") == []  # the broken copy removed
        assert keys(adlfs_direct, az_container, "data") == sorted(FILES)  # the original stays, every byte
        assert adlfs_direct.cat_file(f"{az_container}/data/dogs/c.jpg") == FILES["dogs/c.jpg"]


def test_recovery_of_a_killed_move_finishes_it_only_when_the_copy_says_success(
    az_container, adlfs_direct, az_options, azurite_endpoint, tmp_path
):
    """kill -9 between copy and delete; then ``recover`` sees the copy as Azure reports it: failed (reverted: the
    copy goes, the original stays), then, for the next kill, success (finished: the original goes)."""
    import subprocess
    import sys

    from support.fixtures.azure import connection_string
    from support.s3server import FaultProxy

    bad = {"bad0.png": synth.truncate(synth.png(16, 16, seed=1), 0.5)}
    adlfs_direct.pipe_file(f"{az_container}/ds/bad0.png", bad["bad0.png"])
    state = str(tmp_path / "state")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    qurl = f"az://{az_container}/q"
    cmd = [sys.executable, "-m", "dsclean", "scan", f"az://{az_container}/ds", "--quarantine", qurl]
    cmd += [*opt_args(az_options), "--state-dir", state, "--jobs", "1"]
    env = {**os.environ, "PYTHONPATH": repo, "DSCLEAN_TEST_FAULTS": "1", "DSCLEAN_TEST_KILL_AT": "copied:1"}
    for status, after in (("failed", ([], ["bad0.png"])), (None, (["bad0.png"], []))):
        proc = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
        assert proc.returncode == -9, proc.stderr.decode()
        assert keys(adlfs_direct, az_container, "q") == keys(adlfs_direct, az_container, "ds") == ["bad0.png"]
        rewrite = CopyStatus(*([status] * 50 if status else []))
        with FaultProxy(azurite_endpoint, rewrite_headers=rewrite) as proxy:
            so = opt_args({"connection_string": connection_string(proxy.url)})
            assert main(["recover", qurl, *so, "--state-dir", state]) == 0
        assert (keys(adlfs_direct, az_container, "q"), keys(adlfs_direct, az_container, "ds")) == after
    assert adlfs_direct.cat_file(f"{az_container}/q/bad0.png") == bad["bad0.png"]


def test_pack_from_a_shard_set_in_a_container_into_another_prefix_leaves_out_the_denied(
    az_container, adlfs_direct, az_options, tmp_path, capsys, monkeypatch
):
    import io
    import tarfile

    local = tmp_path / "shards"
    bad = _tars(str(local))
    for name in sorted(os.listdir(local)):
        adlfs_direct.put_file(str(local / name), f"{az_container}/sh/{name}")
    monkeypatch.setenv("DSCLEAN_STATE_DIR", str(tmp_path / "state"))
    url, so = f"az://{az_container}/sh", opt_args(az_options)
    assert main(["scan", url, *so, "--jobs", "1", "-q"]) == 0
    assert main(["pack", "--from", url, "-o", f"az://{az_container}/clean", *so, "--json"]) == 0
    copy = json.loads(capsys.readouterr().out)
    assert copy["shards"] == 2 and copy["left_out"] == 2 * len(bad)  # each denied sample's .jpg and .json
    kept = set()
    for name in keys(adlfs_direct, az_container, "clean"):
        with tarfile.open(fileobj=io.BytesIO(adlfs_direct.cat_file(f"{az_container}/clean/{name}"))) as tf:
            kept |= {(name, m.split(".")[0]) for m in tf.getnames()}
    assert len(kept) == 2 * 6 - len(bad) and not kept & bad


def test_access_denied_on_one_blob_names_its_key_and_no_secret(
    az_container, adlfs_direct, azurite_endpoint, tmp_path, capsys
):
    from support.fixtures.azure import connection_string
    from support.s3server import FaultProxy

    from dsclean.scanning.results import read_problems

    put(adlfs_direct, az_container)
    with FaultProxy(azurite_endpoint, failures=100, status=403, match="d.png") as proxy:
        options = {"connection_string": connection_string(proxy.url)}
        url = f"az://{az_container}/data"
        assert main(["scan", url, *opt_args(options), "--state-dir", str(tmp_path), "--jobs", "1", "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
    assert proxy.injected == 1  # one GET, not retried: a 403 does not pass
    problems = {p["path"]: p for p in read_problems(summary["problems_path"])}
    assert sorted(problems) == ["dogs/c.jpg", "dogs/d.png"]
    denied = problems["dogs/d.png"]
    assert denied["reason"] == "unreadable" and "access denied (403) reading dogs/d.png" in denied["detail"]
    assert ACCOUNT_KEY not in json.dumps(denied) and ACCOUNT_KEY not in json.dumps(summary)
