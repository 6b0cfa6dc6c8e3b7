"""The report of a bucket scan: thumbnails read from the bucket (bytes decoded in the isolated workers), a
placeholder naming an object gone since the scan, the quarantine's copies, ``scan URL --html``, no secret."""

from __future__ import annotations

import json
import os

import pytest
from support import synth
from support.reportpage import by_path

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

SECRET = "FAKE-SECRET-do-not-print-7f3a"


@pytest.fixture
def filled(bucket, s3fs_direct, aws_env, tmp_path):
    """A prefix with a truncated JPEG, a good PNG and a good JPEG; the state folder of the test."""
    files = {
        "bad/cut.jpg": synth.truncate(synth.jpeg(96, 64, seed=3), 0.5),
        "good/whole.png": synth.png(40, 30, seed=2),
        "good/photo.jpg": synth.jpeg(200, 100, seed=1),
    }
    for key, data in files.items():
        s3fs_direct.pipe_file(f"{bucket}/data/{key}", data)
    return f"s3://{bucket}/data", str(tmp_path / "state")


def _scan(cli, url, state, endpoint, *more):
    code, out, err = cli(
        ["scan", url, "--storage-option", f"endpoint_url={endpoint}", "--state-dir", state, "--jobs", "1", *more]
    )
    assert code in (0, 1), err
    return out


def _cards(path) -> dict:
    return by_path(open(path, encoding="utf-8").read())


def test_report_of_a_bucket_scan_has_thumbnails_read_from_the_bucket(filled, s3_endpoint, cli, tmp_path):
    url, state = filled
    _scan(cli, url, state, s3_endpoint)
    out = tmp_path / "r.html"
    # the endpoint comes from what the scan recorded (no --storage-option here)
    code, stdout, err = cli(["report", url, "--state-dir", state, "-o", out, "--json", "--max-thumbnails", "50"])
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["thumbnails"] >= 1
    cards = _cards(out)
    bad = cards["bad/cut.jpg"]
    assert bad.src is not None, bad.placeholder
    im = bad.image()
    assert im.size == (96, 64)  # the thumbnail of a 96x64 picture (under the 128 px limit): its own size
    assert "red line" in bad.rest  # what still decodes, the cut marked
    # the good ones (shown in the outlier galleries), decoded from their bytes too
    assert cards["good/whole.png"].image().size == (40, 30)
    assert cards["good/photo.jpg"].image().size == (128, 64)  # 200x100 to the 128 px limit


def test_object_deleted_after_the_scan_gets_a_placeholder_naming_it(filled, s3_endpoint, s3fs_direct, cli, tmp_path):
    url, state = filled
    _scan(cli, url, state, s3_endpoint)
    s3fs_direct.rm(f"{url[5:]}/bad/cut.jpg")
    out = tmp_path / "r.html"
    code, _, err = cli(["report", url, "--state-dir", state, "-o", out])
    assert code == 0, err
    card = _cards(out)["bad/cut.jpg"]
    assert card.src is None
    assert "bad/cut.jpg" in card.placeholder and "404" in card.placeholder


def test_quarantined_object_is_read_from_the_quarantine_prefix(filled, s3_endpoint, s3fs_direct, cli, tmp_path):
    url, state = filled
    q = url.rsplit("/", 1)[0] + "/quarantine"
    _scan(cli, url, state, s3_endpoint, "--quarantine", q)
    assert not s3fs_direct.exists(f"{url[5:]}/bad/cut.jpg")  # moved
    out = tmp_path / "r.html"
    code, _, err = cli(["report", url, "--state-dir", state, "-o", out])
    assert code == 0, err
    card = _cards(out)["bad/cut.jpg"]
    assert card.src is not None, card.placeholder
    assert card.image().size == (96, 64)
    assert "quarantine" in card.rest


def test_object_over_the_byte_limit_is_not_read(filled, s3_endpoint, tmp_path, monkeypatch, cli):
    from dsclean.report import remote
    from dsclean.report.build import ReportOptions, write_report
    from dsclean.report.thumbs import ThumbLimits

    url, state = filled
    _scan(cli, url, state, s3_endpoint)
    reads: list[str] = []
    real = remote.BucketObjects.fetch

    def counted(self, source, size):
        got = real(self, source, size)
        if got[0] is not None:
            reads.append(source)
        return got

    monkeypatch.setattr(remote.BucketObjects, "fetch", counted)
    out = tmp_path / "r.html"
    write_report(url, str(out), ReportOptions(state_dir=state, jobs=1, limits=ThumbLimits(max_bytes=100)))
    card = _cards(out)["bad/cut.jpg"]
    assert card.src is None and "over the 100-byte limit" in card.placeholder
    assert reads == []  # every object here is over 100 bytes: none was read


def test_scan_url_with_html_writes_the_report_of_that_scan(filled, s3_endpoint, cli, tmp_path):
    url, state = filled
    html = tmp_path / "scan.html"
    _scan(
        cli,
        url,
        state,
        s3_endpoint,
        "--html",
        html,
        "--storage-option",
        f"secret={SECRET}",
        "--storage-option",
        "key=testing",
    )
    assert html.is_file()
    page = html.read_text(encoding="utf-8")
    assert SECRET not in page
    card = by_path(page)["bad/cut.jpg"]
    assert card.src is not None and card.image().size == (96, 64)
    # the same report as `dsclean report URL -o FILE` afterwards (the secret given again, as it must be)
    again = tmp_path / "again.html"
    code, _, err = cli(
        [
            "report",
            url,
            "--state-dir",
            state,
            "-o",
            again,
            "--storage-option",
            f"secret={SECRET}",
            "--storage-option",
            "key=testing",
        ]
    )
    assert code == 0, err
    page2 = again.read_text(encoding="utf-8")
    assert SECRET not in page2
    assert by_path(page2)["bad/cut.jpg"].raw() == card.raw()
    assert set(by_path(page2)) == set(by_path(page))
    from dsclean.scanning.results import read_results_meta

    results = [os.path.join(d, n) for d, _, ns in os.walk(state) for n in ns if n == "scan_results.parquet"]
    assert len(results) == 1
    meta = read_results_meta(results[0])  # the options the report reads the objects with again: no secret
    assert meta["storage_options"] == {"endpoint_url": s3_endpoint}
    for d, _, names in os.walk(state):  # nothing the scan or the report wrote holds the secret
        for n in names:
            with open(os.path.join(d, n), "rb") as f:
                assert SECRET.encode() not in f.read(), n


@pytest.mark.parametrize("output", ["s3://{bucket}/r.html", "data"])
def test_scan_url_html_refuses_a_bucket_or_a_folder_before_scanning(filled, s3_endpoint, bucket, cli, tmp_path, output):
    url, state = filled
    target = output.format(bucket=bucket) if "{" in output else str(tmp_path)
    code, out, err = cli(
        ["scan", url, "--storage-option", f"endpoint_url={s3_endpoint}", "--state-dir", state, "--html", target]
    )
    assert code == 2
    assert target in err and ("local file" in err or "is a folder" in err)
    assert not os.path.exists(state) or not any("scan_summary.json" in n for _, _, ns in os.walk(state) for n in ns)


def test_storage_option_on_a_local_report_is_refused(scanned, cli, tmp_path):
    out = tmp_path / "r.html"
    code, _, err = cli(["report", scanned.root, "--storage-option", "endpoint_url=http://x", "-o", out])
    assert code == 2 and "only for a bucket scan" in err and str(scanned.root) in err
    assert not out.exists()


def test_public_options_leave_every_secret_out_and_merge_with_the_given():
    from dsclean.report.remote import merged_options
    from dsclean.storage.urls import public_options

    recorded = {
        "endpoint_url": "http://127.0.0.1:9",
        "secret": "s",
        "key": "k",
        "proxy": "http://user:pw@proxy:3128",
        "client_kwargs": {"region_name": "eu-west-1", "aws_session_token": "t"},
    }
    assert public_options(recorded) == {
        "endpoint_url": "http://127.0.0.1:9",
        "client_kwargs": {"region_name": "eu-west-1"},
    }
    merged = merged_options(recorded, {"secret": "again", "client_kwargs": {"verify": False}})
    assert merged == {
        "endpoint_url": "http://127.0.0.1:9",
        "secret": "again",
        "client_kwargs": {"region_name": "eu-west-1", "verify": False},
    }


def test_throttled_thumbnail_reads_are_retried_and_a_denied_one_says_so(filled, s3_endpoint, cli, tmp_path):
    from support.s3server import FaultProxy

    url, state = filled
    _scan(cli, url, state, s3_endpoint)
    out = tmp_path / "r.html"
    with FaultProxy(s3_endpoint, failures=2, status=503, match="/good/") as proxy:  # given over the recorded one
        code, _, err = cli(
            ["report", url, "--state-dir", state, "-o", out, "--storage-option", f"endpoint_url={proxy.url}"]
        )
    assert code == 0, err
    assert proxy.injected == 2 * 2  # each good object throttled twice, then read
    cards = _cards(out)
    assert cards["good/whole.png"].image().size == (40, 30)
    with FaultProxy(s3_endpoint, failures=100, status=403, match="/bad/cut.jpg") as proxy:
        code, _, err = cli(
            ["report", url, "--state-dir", state, "-o", out, "--storage-option", f"endpoint_url={proxy.url}"]
        )
    assert code == 0, err
    card = _cards(out)["bad/cut.jpg"]
    assert card.src is None and "bad/cut.jpg" in card.placeholder and "403" in card.placeholder
    assert proxy.injected == 1  # access denied is not retried
    with FaultProxy(s3_endpoint) as proxy:  # --no-thumbnails: nothing asked of the bucket
        code, _, err = cli(
            [
                "report",
                url,
                "--state-dir",
                state,
                "-o",
                out,
                "--no-thumbnails",
                "--storage-option",
                f"endpoint_url={proxy.url}",
            ]
        )
    assert code == 0, err
    assert proxy.requests == 0 and "data:image" not in out.read_text(encoding="utf-8")


def test_an_unreachable_store_is_given_up_after_a_few_reads(aws_env):
    import socket

    from dsclean.report.remote import GIVE_UP_AFTER, BucketObjects
    from dsclean.storage.reads import ReadPolicy

    with socket.socket() as s:  # a port nobody listens on: every connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    objects = BucketObjects(
        "s3://b/p", {"endpoint_url": f"http://127.0.0.1:{port}"}, None, None, 1 << 20, ReadPolicy(retries=0)
    )
    rels = [f"k{i}.jpg" for i in range(GIVE_UP_AFTER + 2)]
    where = objects.locate(set(rels))
    notes = [objects.fetch(where[rel], 10) for rel in rels]
    assert all(data is None for data, _ in notes)
    assert all(rel in note for rel, (_, note) in zip(rels, notes))  # each placeholder names its key
    tried = [note for _, note in notes[:GIVE_UP_AFTER]]
    assert not any("reads before it failed" in n for n in tried)
    assert all(f"the {GIVE_UP_AFTER} reads before it failed" in note for _, note in notes[GIVE_UP_AFTER:])


def test_an_object_that_crashes_its_decoder_gets_a_placeholder_and_the_report_goes_on(
    bucket, s3fs_direct, s3_endpoint, aws_env, cli, tmp_path
):
    """The bytes are decoded in the isolated workers, never in the report process (a real segfault there)."""
    from support.fixtures.cli import run_cli

    for name in ("x__segfault__.jpg", "fine.jpg"):
        s3fs_direct.pipe_file(f"{bucket}/c/{name}", synth.truncate(synth.jpeg(64, 64, seed=len(name)), 0.6))
    url, state = f"s3://{bucket}/c", str(tmp_path / "state")
    _scan(cli, url, state, s3_endpoint)  # no faults while scanning
    out = tmp_path / "r.html"
    proc = run_cli(
        "report", url, "--state-dir", state, "-o", out, "-j", "1", env={"DSCLEAN_TEST_FAULTS": "1"}, timeout=240
    )
    assert proc.returncode == 0, proc.stderr
    shown = _cards(out)
    assert shown["fine.jpg"].src is not None
    assert "crashed the decoder" in shown["x__segfault__.jpg"].placeholder
