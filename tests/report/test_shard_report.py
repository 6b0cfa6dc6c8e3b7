"""The report of a shard set's scan: thumbnails of the samples inside WebDataset tars (local, gzipped, in a
bucket), read from their member bytes by one bounded walk of each shard, decoded in the isolated workers."""

from __future__ import annotations

import gzip

import pytest
from support import synth
from support.reportpage import by_path

CUT = synth.truncate(synth.jpeg(96, 64, seed=3), 0.5)
GOOD = synth.png(40, 30, seed=2)


def shards(gz: bool = False) -> dict[str, bytes]:
    """Two shards: the first holds a truncated JPEG among good samples and captions."""
    first = synth.tar_bytes(
        [
            ("a.png", GOOD),
            ("a.txt", b"a caption"),
            ("b.jpg", CUT),
            ("b.txt", b"cut"),
            ("c.png", synth.png(20, 50, seed=4)),
        ]
    )
    second = synth.tar_bytes([(f"k{i}.jpg", synth.jpeg(64, 64, seed=10 + i)) for i in range(4)])
    if gz:
        return {"shard-000000.tar.gz": gzip.compress(first), "shard-000001.tar.gz": gzip.compress(second)}
    return {"shard-000000.tar": first, "shard-000001.tar": second}


def wds_folder(tmp_path, gz: bool = False):
    """The two shards of :func:`shards`, written into ``tmp_path/wds``."""
    folder = tmp_path / "wds"
    folder.mkdir()
    for name, data in shards(gz).items():
        (folder / name).write_bytes(data)
    return folder


@pytest.mark.parametrize("gz", [False, True])
def test_local_shard_set_report_shows_the_bad_samples_thumbnail(tmp_path, cli, gz):
    folder = wds_folder(tmp_path, gz)
    out = tmp_path / "r.html"
    code, _, err = cli(["scan", folder, "--html", out, "--jobs", "1", "--state-dir", tmp_path / "state"])
    assert code == 0, err
    cards = by_path(out.read_text(encoding="utf-8"))
    first = next(iter(shards(gz)))
    bad = cards[f"{first}/b.jpg"]
    assert bad.src is not None, bad.placeholder
    assert bad.image().size == (96, 64)
    assert "red line" in bad.rest


def test_shard_rewritten_since_the_scan_gets_a_placeholder(tmp_path, cli):
    folder = wds_folder(tmp_path)
    state = tmp_path / "state"
    code, _, err = cli(["scan", folder, "--jobs", "1", "--state-dir", state])
    assert code == 0, err
    (folder / "shard-000000.tar").write_bytes(synth.tar_bytes([("a.png", GOOD)]))  # b.jpg gone
    out = tmp_path / "r.html"
    code, _, err = cli(["report", folder, "-o", out, "--state-dir", state])
    assert code == 0, err
    card = by_path(out.read_text(encoding="utf-8"))["shard-000000.tar/b.jpg"]
    assert card.src is None and "not found in its shard" in card.placeholder


def test_member_over_the_byte_limit_is_not_read(tmp_path, cli):
    from dsclean.report.build import ReportOptions, write_report
    from dsclean.report.thumbs import ThumbLimits

    folder = wds_folder(tmp_path)
    state = tmp_path / "state"
    code, _, err = cli(["scan", folder, "--jobs", "1", "--state-dir", state])
    assert code == 0, err
    out = tmp_path / "r.html"
    write_report(str(folder), str(out), ReportOptions(state_dir=str(state), jobs=1, limits=ThumbLimits(max_bytes=100)))
    card = by_path(out.read_text(encoding="utf-8"))["shard-000000.tar/b.jpg"]
    assert card.src is None and "over the 100-byte limit" in card.placeholder


def test_bucket_shard_set_report_reads_the_members_from_the_store(
    bucket, s3fs_direct, s3_endpoint, aws_env, tmp_path, cli
):
    for name, data in shards().items():
        s3fs_direct.pipe_file(f"{bucket}/wds/{name}", data)
    out = tmp_path / "r.html"
    url = f"s3://{bucket}/wds"
    code, _, err = cli(
        [
            "scan",
            url,
            "--storage-option",
            f"endpoint_url={s3_endpoint}",
            "--html",
            out,
            "--jobs",
            "1",
            "--state-dir",
            tmp_path / "state",
        ]
    )
    assert code == 0, err
    cards = by_path(out.read_text(encoding="utf-8"))
    bad = cards["shard-000000.tar/b.jpg"]
    assert bad.src is not None, bad.placeholder
    assert bad.image().size == (96, 64)
    assert not [p for p in s3fs_direct.find(f"{bucket}") if not p.endswith(".tar")]  # nothing written to the bucket
    again = tmp_path / "again.html"  # `dsclean report URL` finds that scan, and reads with its recorded endpoint
    code, _, err = cli(["report", url, "-o", again, "--state-dir", tmp_path / "state"])
    assert code == 0, err
    assert by_path(again.read_text(encoding="utf-8"))["shard-000000.tar/b.jpg"].raw() == bad.raw()


def test_parquet_shard_rows_get_thumbnails_from_their_row_group(tmp_path, cli):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "pq"
    folder.mkdir()
    images = [synth.png(30 + i, 20, seed=i) for i in range(5)]
    images[3] = CUT  # in the second row group (2 rows a group)
    image = pa.array(
        [{"bytes": b, "path": f"img{i}.{'jpg' if i == 3 else 'png'}"} for i, b in enumerate(images)],
        pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
    )
    pq.write_table(
        pa.table({"image": image, "label": list(range(5))}), folder / "train-00000.parquet", row_group_size=2
    )
    out = tmp_path / "r.html"
    code, _, err = cli(["scan", folder, "--html", out, "--jobs", "1", "--state-dir", tmp_path / "state"])
    assert code == 0, err
    cards = by_path(out.read_text(encoding="utf-8"))
    bad = [c for p, c in cards.items() if p.startswith("train-00000.parquet/row-3-")]
    assert len(bad) == 1, list(cards)
    assert bad[0].src is not None, bad[0].placeholder
    assert bad[0].image().size == (96, 64) and "red line" in bad[0].rest


def test_shard_set_scanned_by_a_relative_path_is_reported_from_anywhere(tmp_path, cli, monkeypatch):
    """The results record the set's absolute folder and the scan writes its summary: a report made from another
    working folder still reads the shards, and shows the scan's command and time."""
    folder = wds_folder(tmp_path)
    state = tmp_path / "state"
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(["scan", "wds", "--jobs", "1", "--state-dir", state])
    assert code == 0, err
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = tmp_path / "r.html"
    code, _, err = cli(["report", folder, "-o", out, "--state-dir", state])
    assert code == 0, err
    page = out.read_text(encoding="utf-8")
    bad = by_path(page)[f"{next(iter(shards()))}/b.jpg"]
    assert bad.src is not None, bad.placeholder
    assert "dsclean scan wds --jobs 1" in page


def _walked(folder, shard: str, member: str = "b.jpg") -> tuple[bytes | None, str]:
    """What the report's shard reader gets for ``member`` of ``shard`` (a name as read from a results file)."""
    from dsclean.report.shardsamples import ShardSamples

    samples = ShardSamples("webdataset", str(folder), {}, 1 << 20)
    where = samples.locate({"shown": (shard, member)})
    return samples.fetch(where["shown"], None)


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_broken_gzipped_shard_gets_a_placeholder_naming_it(tmp_path, damage):
    folder = tmp_path / "wds"
    folder.mkdir()
    name, data = next(iter(shards(gz=True).items()))
    assert _walked_ok(folder, name, data)  # whole, the member is read
    if damage == "truncated":  # the gzip stream ends early: EOFError
        broken = data[: len(data) // 2]
    else:  # the deflate stream garbled after its header: zlib.error
        broken = data[:20] + bytes(b ^ 0xFF for b in data[20:200]) + data[200:]
    (folder / name).write_bytes(broken)
    got, why = _walked(folder, name)
    assert got is None and name in why and "breaks before it" in why, why


def _walked_ok(folder, name: str, data: bytes) -> bool:
    (folder / name).write_bytes(data)
    got, why = _walked(folder, name)
    return got == CUT and why == ""


@pytest.mark.parametrize("hostile", ["../outside/shard-000000.tar", "/ABS/shard-000000.tar"])
def test_a_shard_name_leaving_the_set_is_not_read(tmp_path, hostile):
    folder = tmp_path / "wds"
    folder.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    first = next(iter(shards().values()))
    (outside / "shard-000000.tar").write_bytes(first)
    assert _walked(outside, "shard-000000.tar")[0] == CUT  # the tar there is readable
    shard = hostile.replace("/ABS", str(outside))
    got, why = _walked(folder, shard)
    assert got is None and "not a path inside the shard set" in why, why
