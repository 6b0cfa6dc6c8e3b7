"""gs:// end to end against a real GCS JSON API server (gcp-storage-emulator on 127.0.0.1, support.fixtures.gcs):
scan, quarantine + restore, index + IndexedDataset, through gcsfs exactly as a user's commands run them."""

from __future__ import annotations

import json
import os

import pytest
from support import synth

from dsclean.cli import main
from dsclean.scanning.results import read_results

pytest.importorskip("gcsfs")
pytest.importorskip("gcp_storage_emulator.server")

FILES = {
    "cats/a.jpg": synth.jpeg(40, 30, seed=1),
    "cats/b.png": synth.png(20, 22, seed=2),
    "dogs/c.jpg": synth.truncate(synth.jpeg(64, 48, seed=3), 0.5),  # the one bad object
    "dogs/d.png": synth.png(18, 16, seed=4),
}


def put(fs, bucket, prefix="data"):
    for key, data in FILES.items():
        fs.pipe_file(f"{bucket}/{prefix}/{key}", data)


def keys(fs, bucket, prefix):
    fs.invalidate_cache()
    return sorted(p.split("/", 2)[2] for p in fs.find(f"{bucket}/{prefix}"))


def opt_args(options):
    return [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]


def verdicts(results_path):
    table = read_results(results_path).to_pydict()
    return sorted(zip((os.fsdecode(p) for p in table["path"]), table["status"], table["reason"]))


def test_scan_of_a_gs_prefix_gives_the_verdicts_of_the_same_files_on_local_disk(
    gcs_bucket, gcsfs_direct, gcs_options, tmp_path, capsys
):
    put(gcsfs_direct, gcs_bucket)
    local = tmp_path / "local"
    for key, data in FILES.items():
        (local / key).parent.mkdir(parents=True, exist_ok=True)
        (local / key).write_bytes(data)
    state = str(tmp_path / "state")
    url = f"gs://{gcs_bucket}/data"
    code = main(["scan", url, *opt_args(gcs_options), "--state-dir", state, "--jobs", "1", "--json", "--check"])
    remote = json.loads(capsys.readouterr().out)
    assert code == 1 and remote["files"] == 4 and remote["bad"] == 1  # --check: one bad object
    code = main(["scan", str(local), "--state-dir", state, "--jobs", "1", "--json", "--check", "--dry-run"])
    here = json.loads(capsys.readouterr().out)
    assert code == 1 and here["files"] == 4
    got = verdicts(remote["results_path"])
    assert got == verdicts(here["results_path"])
    assert [(p, s) for p, s, _ in got if s != "ok"] == [("dogs/c.jpg", "bad")]
    assert keys(gcsfs_direct, gcs_bucket, "data") == sorted(FILES)  # no --quarantine: nothing moved, nothing written


def test_quarantine_in_gcs_then_restore_puts_every_byte_back(gcs_bucket, gcsfs_direct, gcs_options, tmp_path, capsys):
    put(gcsfs_direct, gcs_bucket)
    state = str(tmp_path / "state")
    url, qurl = f"gs://{gcs_bucket}/data", f"gs://{gcs_bucket}/q"
    args = ["scan", url, *opt_args(gcs_options), "--state-dir", state, "--jobs", "1", "--json"]
    assert main([*args, "--quarantine", qurl]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["quarantined"] == 1
    assert keys(gcsfs_direct, gcs_bucket, "data") == sorted(k for k in FILES if k != "dogs/c.jpg")
    assert keys(gcsfs_direct, gcs_bucket, "q") == ["dogs/c.jpg"]
    assert gcsfs_direct.cat_file(f"{gcs_bucket}/q/dogs/c.jpg") == FILES["dogs/c.jpg"]  # the very bytes
    from dsclean.storage.quarantine import journal_dir

    journal = os.path.join(journal_dir(qurl, state), "manifest.jsonl")
    entries = [json.loads(line) for line in open(journal)]
    assert [e["op"] for e in entries] == ["move", "done"]
    assert entries[0]["size"] == len(FILES["dogs/c.jpg"])  # GCS: the copy is compared by size (a copy's ETag differs)
    assert gcs_options["endpoint_url"] not in open(journal).read()  # the URL only, never an option's value

    assert main(["status", f"{qurl}/", "--state-dir", state, "--json"]) == 0
    held = json.loads(capsys.readouterr().out)["quarantine"]
    assert held["moved"] == 1 and held["roots"] == [url] and held["quarantine"] == qurl
    assert main(["restore", qurl, *opt_args(gcs_options), "--state-dir", state]) == 0
    assert "1 restored" in capsys.readouterr().out
    assert keys(gcsfs_direct, gcs_bucket, "q") == []
    assert {k: gcsfs_direct.cat_file(f"{gcs_bucket}/data/{k}") for k in keys(gcsfs_direct, gcs_bucket, "data")} == (
        FILES
    )


def test_index_of_a_gs_prefix_read_by_indexed_dataset(gcs_bucket, gcsfs_direct, gcs_options, tmp_path, capsys):
    from dsclean.data.dataset import IndexedDataset

    put(gcsfs_direct, gcs_bucket)
    state = str(tmp_path / "state")
    url = f"gs://{gcs_bucket}/data"
    assert main(["scan", url, *opt_args(gcs_options), "--state-dir", state, "--jobs", "1", "-q"]) == 0
    out = str(tmp_path / "i.arrow")
    code = main(["index", url, "-o", out, *opt_args(gcs_options), "--state-dir", state, "--jobs", "1", "--json"])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    with open(out, "rb") as f:
        stored = f.read()
    for value in gcs_options.values():
        assert value.encode() not in stored  # the index holds the URL, never a storage option
    ds = IndexedDataset(out, transform=lambda img: img.size, storage_options=gcs_options)
    assert ds.root == url and ds.classes == ["cats", "dogs"]
    assert sorted(ds.path(i) for i in range(len(ds))) == ["cats/a.jpg", "cats/b.png", "dogs/d.png"]  # bad one out
    i = [ds.path(j) for j in range(len(ds))].index("dogs/d.png")
    assert ds[i] == ((18, 16), 1)
    assert ds.raw(i) == FILES["dogs/d.png"]


def test_the_cli_process_finds_the_server_through_storage_emulator_host(
    gcs_bucket, gcsfs_direct, gcs_endpoint, tmp_path, monkeypatch
):
    """The variables gcsfs reads at import: a fresh ``dsclean`` process, no ``endpoint_url`` option."""
    import subprocess
    import sys

    put(gcsfs_direct, gcs_bucket)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_endpoint)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    monkeypatch.setenv("PYTHONPATH", repo)
    cmd = [sys.executable, "-m", "dsclean", "scan", f"gs://{gcs_bucket}/data", "--storage-option", "token=anon"]
    done = subprocess.run(
        [*cmd, "--state-dir", str(tmp_path / "s"), "--jobs", "1", "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["files"] == 4 and summary["bad"] == 1
    assert [(p, s) for p, s, _ in verdicts(summary["results_path"]) if s != "ok"] == [("dogs/c.jpg", "bad")]


@pytest.mark.parametrize("command", ["scan", "index", "dups"])
def test_a_missing_bucket_is_a_clear_error_not_an_empty_scan(command, gcs_options, tmp_path, capsys):
    """GCS answers a missing bucket's path as it does an empty prefix (404): the bucket is looked up."""
    url = "gs://no-such-bucket-here/data"
    extra = {"scan": [], "index": ["-o", str(tmp_path / "i.arrow")], "dups": []}[command]
    code = main([command, url, *extra, *opt_args(gcs_options), "--state-dir", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2 and f"{url}: no such bucket" in err and "Traceback" not in err
    assert gcs_options["endpoint_url"] not in err


def test_an_empty_prefix_of_an_existing_bucket_scans_as_no_objects(gcs_bucket, gcs_options, tmp_path, capsys):
    url = f"gs://{gcs_bucket}/nothing-here"
    assert main(["scan", url, *opt_args(gcs_options), "--state-dir", str(tmp_path), "--jobs", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["files"] == 0


def test_access_denied_on_one_object_names_its_key_and_no_endpoint(
    gcs_bucket, gcsfs_direct, gcs_options, tmp_path, capsys
):
    """gcsfs raises a 403 as a bare OSError("Forbidden: URL\\nbody"): dsclean names it as S3's 403."""
    from support.s3server import FaultProxy

    from dsclean.scanning.results import read_problems

    put(gcsfs_direct, gcs_bucket)
    # GCS downloads carry ?alt=media: ``listings`` targets every GET whose path holds the match (not listings:
    # their prefix is in the query)
    with FaultProxy(gcs_options["endpoint_url"], failures=100, status=403, match="d.png", listings=True) as proxy:
        options = {**gcs_options, "endpoint_url": proxy.url}
        url = f"gs://{gcs_bucket}/data"
        assert main(["scan", url, *opt_args(options), "--state-dir", str(tmp_path), "--jobs", "1", "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
    assert proxy.injected == 1  # one GET, not retried: a 403 does not pass
    problems = {p["path"]: p for p in read_problems(summary["problems_path"])}
    assert sorted(problems) == ["dogs/c.jpg", "dogs/d.png"]
    denied = problems["dogs/d.png"]
    assert denied["reason"] == "unreadable" and "access denied (403) reading dogs/d.png" in denied["detail"]
    assert proxy.url not in json.dumps(denied)  # no storage option's value in the results


def test_worker_processes_give_the_verdicts_of_one_process(gcs_bucket, gcsfs_direct, gcs_options, tmp_path, capsys):
    """Forked workers open their own gcsfs filesystem (the parent's event loop thread is not theirs)."""
    put(gcsfs_direct, gcs_bucket)
    url = f"gs://{gcs_bucket}/data"
    got = {}
    for jobs in ("1", "2"):
        state = str(tmp_path / f"s{jobs}")
        assert main(["scan", url, *opt_args(gcs_options), "--state-dir", state, "--jobs", jobs, "--json"]) == 0
        got[jobs] = verdicts(json.loads(capsys.readouterr().out)["results_path"])
    assert got["2"] == got["1"] and len(got["1"]) == 4


def test_pack_a_gs_prefix_into_gs_shards_then_verify_them(gcs_bucket, gcsfs_direct, gcs_options, tmp_path, capsys):
    put(gcsfs_direct, gcs_bucket)
    url, shards = f"gs://{gcs_bucket}/data", f"gs://{gcs_bucket}/shards"
    state = ["--state-dir", str(tmp_path / "s")]
    assert main(["scan", url, *opt_args(gcs_options), *state, "--jobs", "1", "-q"]) == 0
    assert main(["pack", url, "-o", shards, *opt_args(gcs_options), *state, "--json"]) == 0
    packed = json.loads(capsys.readouterr().out)
    assert packed["samples"] == 3 and packed["complete"]  # the bad object left out
    assert "pack.json" in keys(gcsfs_direct, gcs_bucket, "shards")
    code = main(["verify", shards, "--decode", *opt_args(gcs_options), "--json"])
    verified = json.loads(capsys.readouterr().out)
    assert code == 0 and verified["ok"] and verified["samples"] == 3 and verified["problems"] == []
    assert [sh["shard"] for sh in verified["shards"]] == ["data-000000.tar"]


def test_kill_9_mid_quarantine_then_recover_loses_nothing_and_leaves_nothing_twice(
    gcs_bucket, gcsfs_direct, gcs_options, tmp_path
):
    """On GCS a copy is known whole by its size alone (no content ETag): recovery still finishes the move."""
    import subprocess
    import sys

    bad = {f"bad{i}.png": synth.truncate(synth.png(16, 16, seed=i), 0.5) for i in range(3)}
    before = {**bad, "good0.png": synth.png(16, 16, seed=10)}
    for k, data in before.items():
        gcsfs_direct.pipe_file(f"{gcs_bucket}/ds/{k}", data)
    state = str(tmp_path / "state")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    qurl = f"gs://{gcs_bucket}/q"
    cmd = [sys.executable, "-m", "dsclean", "scan", f"gs://{gcs_bucket}/ds", "--quarantine", qurl]
    cmd += [*opt_args(gcs_options), "--state-dir", state, "--jobs", "1"]
    env = {**os.environ, "PYTHONPATH": repo, "DSCLEAN_TEST_FAULTS": "1", "DSCLEAN_TEST_KILL_AT": "copied:2"}
    proc = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    # killed after the 2nd copy was verified and before its original was deleted: one object in two places
    ds, q = keys(gcsfs_direct, gcs_bucket, "ds"), keys(gcsfs_direct, gcs_bucket, "q")
    assert len(set(ds) & set(q)) == 1 and len(q) == 2
    assert main(["recover", qurl, *opt_args(gcs_options), "--state-dir", state]) == 0
    ds, q = keys(gcsfs_direct, gcs_bucket, "ds"), keys(gcsfs_direct, gcs_bucket, "q")
    assert not set(ds) & set(q) and sorted(ds + q) == sorted(before)  # nothing in two places, nothing lost
    for k in q:
        assert gcsfs_direct.cat_file(f"{gcs_bucket}/q/{k}") == before[k]
    env.pop("DSCLEAN_TEST_KILL_AT")
    proc = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    assert keys(gcsfs_direct, gcs_bucket, "ds") == ["good0.png"]
    assert keys(gcsfs_direct, gcs_bucket, "q") == sorted(bad)


def test_dups_of_a_gs_prefix_groups_as_the_same_files_on_local_disk(gcs_bucket, gcsfs_direct, gcs_options, tmp_path):
    from dsclean.dups.finder import DupsOptions, find_duplicates

    files = {**FILES, "cats/a_copy.jpg": FILES["cats/a.jpg"], "dogs/d_again.png": FILES["dogs/d.png"]}
    for key, data in files.items():
        gcsfs_direct.pipe_file(f"{gcs_bucket}/data/{key}", data)
        (tmp_path / "local" / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "local" / key).write_bytes(data)

    def shape(result):
        return sorted((r["kind"], sorted(m["path"] for m in r["members"])) for r in result.records())

    local = find_duplicates([str(tmp_path / "local")], DupsOptions(jobs=1, timeout=30))
    remote = find_duplicates(
        [f"gs://{gcs_bucket}/data"], DupsOptions(jobs=1, timeout=30, storage_options=dict(gcs_options))
    )
    assert shape(remote) == shape(local)
    assert shape(remote) == [
        ("exact", ["cats/a.jpg", "cats/a_copy.jpg"]),
        ("exact", ["dogs/d.png", "dogs/d_again.png"]),
    ]


def test_report_of_a_scanned_gs_prefix_uses_its_last_results(gcs_bucket, gcsfs_direct, gcs_options, tmp_path, capsys):
    put(gcsfs_direct, gcs_bucket)
    state = str(tmp_path / "state")
    url = f"gs://{gcs_bucket}/data"
    assert main(["scan", url, *opt_args(gcs_options), "--state-dir", state, "--jobs", "1", "-q"]) == 0
    capsys.readouterr()
    assert main(["report", url, "--state-dir", state, "-o", str(tmp_path / "r.html"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["files"] == 4 and out["problems"] == 1
    assert "dogs/c.jpg" in (tmp_path / "r.html").read_text()
