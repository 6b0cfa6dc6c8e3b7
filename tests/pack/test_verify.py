"""dsclean verify: every kind of damage is found, reported per shard, and nothing is modified."""

from __future__ import annotations

import json
import os
import shutil
import tarfile

import pytest
from support.packing import folder_digests

from dsclean.cli import main
from dsclean.errors import UserError
from dsclean.pack.packer import PackOptions, pack_shards
from dsclean.pack.verify import verify_shards


@pytest.fixture
def packed(media_shards):
    """The session's shards (tests/support/fixtures/media.py), read only: damage goes to a ``copy``."""
    return media_shards[0]


@pytest.fixture
def copy(packed, tmp_path):
    dst = tmp_path / "shards"
    shutil.copytree(packed, dst)
    return dst


def _problems(report, shard=None) -> list[str]:
    out = list(report.problems) if shard is None else []
    for s in report.shards:
        if shard is None or s.shard == shard:
            out += [p["problem"] for p in s.problems]
    return out


def _member(folder, shard: str, suffix: str) -> tarfile.TarInfo:
    with tarfile.open(folder / shard) as t:
        return next(m for m in t.getmembers() if m.name.endswith(suffix))


def _poke(path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_a_good_set_passes_in_json_and_text(packed, capsys):
    before = folder_digests(packed)
    assert main(["verify", str(packed), "--json", "--jobs", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["samples"] == 18 and not out["problems"]
    assert [(s["shard"], s["ok"], s["problems"]) for s in out["shards"]] == [
        (f"data-{k:06d}.tar", True, []) for k in range(4)
    ]
    assert main(["verify", str(packed)]) == 0 and "ok:" in capsys.readouterr().out
    assert folder_digests(packed) == before  # read only


def test_a_flipped_media_byte_is_a_checksum_mismatch(copy, capsys):
    m = _member(copy, "data-000001.tar", ".jpg")
    _poke(copy / "data-000001.tar", m.offset_data + m.size // 2, b"\x00\x01\x02")
    before = folder_digests(copy)
    assert main(["verify", str(copy), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    bad = [s for s in out["shards"] if not s["ok"]]
    assert [s["shard"] for s in bad] == ["data-000001.tar"]
    key = m.name.split(".")[0]
    by_member = {p["member"]: p for p in bad[0]["problems"]}  # against the packed index and the sample's own json
    assert set(by_member) == {m.name, f"{key}.json"} and {p["key"] for p in by_member.values()} == {key}
    assert "checksum mismatch" in by_member[m.name]["problem"]
    assert "differs from the json" in by_member[f"{key}.json"]["problem"]
    assert folder_digests(copy) == before  # never modifies shards


def test_truncated_missing_and_extra_shards_and_temp_files(copy):
    with open(copy / "data-000002.tar", "r+b") as f:
        f.truncate(3000)
    os.unlink(copy / "data-000003.tar")
    shutil.copy(copy / "data-000000.tar", copy / "stray.tar")
    (copy / ".data-000003.tar.x1y2.tmp").write_bytes(b"half a shard")
    r = verify_shards(str(copy))
    assert not r.ok
    assert any("broken tar" in p and "runs past the end" in p for p in _problems(r, "data-000002.tar"))
    assert any("shard list says" in p for p in _problems(r, "data-000002.tar"))
    assert _problems(r, "data-000003.tar") == ["missing: the shard list names it but there is no such file"]
    assert _problems(r, "stray.tar") == ["extra shard: a .tar file the shard list does not name"]
    assert [n for n in r.notes if n.startswith(".data-000003.tar.x1y2.tmp: a temp file")]


def test_repeated_keys_across_shards(copy):
    shutil.copy(copy / "data-000000.tar", copy / "data-000001.tar")
    r = verify_shards(str(copy))
    assert any("5 sample keys appear more than once" in p for p in r.problems)


def test_damaged_header_padding_order_and_labels(copy):
    m = _member(copy, "data-000000.tar", ".json")
    _poke(copy / "data-000000.tar", m.offset + 10, b"Z")  # a header byte: its checksum fails
    r = verify_shards(str(copy))
    assert any("bad header" in p for p in _problems(r, "data-000000.tar"))
    cls = _member(copy, "data-000001.tar", ".cls")
    _poke(copy / "data-000001.tar", cls.offset_data, b"9")  # a wrong label
    _poke(copy / "data-000001.tar", cls.offset_data + 5, b"!")  # junk in the padding
    r = verify_shards(str(copy))
    probs = _problems(r, "data-000001.tar")
    assert any("label '9', the packed index says" in p for p in probs)
    assert any("padding" in p for p in probs)


def test_samples_out_of_order_against_the_index(copy, tmp_path):
    # rebuild shard 1 with its first two samples swapped (a valid tar, wrong order)
    with tarfile.open(copy / "data-000001.tar") as t:
        members = [(m, t.extractfile(m).read()) for m in t.getmembers()]
    swapped = members[3:6] + members[0:3] + members[6:]
    with tarfile.open(copy / "data-000001.tar", "w", format=tarfile.USTAR_FORMAT) as t:
        for m, data in swapped:
            import io

            t.addfile(m, io.BytesIO(data))
    r = verify_shards(str(copy))
    assert any("samples are missing, extra or out of order" in p for p in _problems(r, "data-000001.tar"))


def test_a_damaged_packed_index_or_shard_list_is_a_problem(copy):
    (copy / "shardindex.json").write_text("{not json")
    r = verify_shards(str(copy))
    assert not r.ok and any("unreadable shard list" in p for p in r.problems)
    shutil.copy(copy / "data-000000.tar", copy / "index.arrow")  # garbage in place of the index
    r = verify_shards(str(copy))
    assert not r.ok and any("not a readable Arrow index" in p for p in r.problems)


def test_not_a_shard_set_is_a_usage_error(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "nope")]) == 2
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "pack.json").write_text("{}")
    with pytest.raises(UserError, match="unfinished pack"):
        verify_shards(str(tmp_path / "half"))
    assert main(["verify", str(tmp_path)]) == 2
    assert "not a shard set" in capsys.readouterr().err


def test_decode_runs_the_scans_checks_on_every_sample(tmp_path, capsys):
    from support import synth
    from support.files import write

    from dsclean.index.build import build_index

    root = tmp_path / "data"
    for i in range(6):
        write(root, f"c{i % 2}/ok{i}.jpg", synth.jpeg(32, 32, seed=i))
    write(root, "c0/cut.jpg", synth.truncate(synth.jpeg(64, 64, seed=9), 0.6))
    write(root, "c1/bad.png", synth.png_break_crc(synth.png(16, 16, seed=3)))
    build_index(str(root), str(tmp_path / "i.arrow"), check=False)  # magic bytes only: the bad files get packed
    pack_shards(str(tmp_path / "i.arrow"), str(tmp_path / "s"), PackOptions(samples_per_shard=3, ext_policy="keep"))
    assert main(["verify", str(tmp_path / "s")]) == 0  # the bytes are what was packed
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "s"), "--decode", "--json", "--jobs", "2"]) == 1
    out = json.loads(capsys.readouterr().out)
    found = {p["member"].split(".")[1]: p["problem"] for s in out["shards"] for p in s["problems"]}
    assert set(found) == {"jpg", "png"}
    assert found["jpg"].startswith("decode: truncated") and found["png"].startswith("decode: corrupt")


def _edit_json(folder, shard: str, pick, change) -> tuple[str, str]:
    """Rewrite, in place and at the same length, the ``.json`` of the first sample of ``shard`` that
    ``pick(record)`` accepts with ``change(record)``; returns (member name, key)."""
    with tarfile.open(folder / shard) as t:
        for m in t.getmembers():
            if m.name.endswith(".json"):
                rec = json.loads(t.extractfile(m).read())
                if pick(rec):
                    break
        else:
            raise AssertionError("no such sample")
    change(rec)
    new = json.dumps(rec, sort_keys=True, separators=(",", ":")).encode()
    assert len(new) == m.size, "the edit must keep the member's length (tar headers unchanged)"
    _poke(folder / shard, m.offset_data, new)
    return m.name, m.name.split(".")[0]


def _swap_cat_for_dog(rec: dict) -> None:
    rec.update({"class": "dogs", "label": 1, "kind": "audio", "path": rec["path"].replace("cats/", "dogs/")})
    rec["size"] += 1 if rec["size"] % 10 != 9 else -1  # one digit differs


def test_every_field_of_a_json_is_checked_against_the_packed_index_and_the_members(copy, capsys):
    """A .json edited to say another label, class, kind, path and size (same length, so the tar is
    intact and webdataset reads it) fails verify, one problem per field, naming shard, member and field."""
    member, key = _edit_json(
        copy, "data-000000.tar", lambda r: r.get("class") == "cats" and r["path"].isascii(), _swap_cat_for_dog
    )
    assert main(["verify", str(copy), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    bad = [s for s in out["shards"] if not s["ok"]]
    assert [s["shard"] for s in bad] == ["data-000000.tar"]
    by_field = {p["field"]: p for p in bad[0]["problems"]}
    assert set(by_field) == {"class", "kind", "label", "path", "size"}
    assert all(p["member"] == member and p["key"] == key for p in by_field.values())
    assert 'class is "dogs", the packed index says "cats"' in by_field["class"]["problem"]
    assert 'kind is "audio", the packed index says "image"' in by_field["kind"]["problem"]
    assert "label is 1, the .cls member says 0" in by_field["label"]["problem"]
    assert (
        "not this sample's" in by_field["path"]["problem"]
        and 'the packed index says "cats/' in by_field["path"]["problem"]
    )
    assert "the media member has" in by_field["size"]["problem"]
    assert main(["verify", str(copy)]) == 1
    text = capsys.readouterr().out
    assert f'data-000000.tar: {member}: the json\'s class is "dogs"' in text


def test_without_the_packed_index_the_json_is_checked_against_the_samples_members(copy):
    """The .json's checksum, size, label (the .cls) and path (the key is its hash) need no packed index."""
    member, _ = _edit_json(
        copy, "data-000001.tar", lambda r: r.get("class") == "cats" and r["path"].isascii(), _swap_cat_for_dog
    )
    os.unlink(copy / "index.arrow")
    r = verify_shards(str(copy))
    assert any("index.arrow" in p for p in r.problems)
    shard = next(s for s in r.shards if s.shard == "data-000001.tar")
    assert {p["field"] for p in shard.problems if p["member"] == member} == {"label", "path", "size"}
    assert all(s.ok for s in r.shards if s.shard != "data-000001.tar")


def test_a_pack_with_media_facts_passes_and_a_changed_fact_is_found(tmp_path):
    """An index built with --facts puts width/height/... in every .json; verify checks them too."""
    from support.packing import make_media

    from dsclean import scan
    from dsclean.index.build import build_index
    from dsclean.scanning.scanner import ScanOptions

    root = tmp_path / "data"
    make_media(root)
    scan(str(root), ScanOptions(jobs=1))
    build_index(str(root), str(tmp_path / "i.arrow"), facts=True)
    pack_shards(str(tmp_path / "i.arrow"), str(tmp_path / "s"), PackOptions(samples_per_shard=7))
    assert verify_shards(str(tmp_path / "s")).ok
    member, _ = _edit_json(
        tmp_path / "s",
        "data-000000.tar",
        lambda r: r.get("width", 0) >= 10,
        lambda r: r.update(width=r["width"] + 1 if r["width"] % 10 != 9 else r["width"] - 1),
    )
    r = verify_shards(str(tmp_path / "s"))
    problems = [p for s in r.shards for p in s.problems]
    assert [(p["member"], p["field"]) for p in problems] == [(member, "width")]
    assert "packed index says" in problems[0]["problem"]


def _png_pack(tmp_path, n: int = 3) -> str:
    from support import synth

    from dsclean.index.build import build_index

    data = tmp_path / "data" / "cats"
    data.mkdir(parents=True)
    for i in range(n):
        (data / f"{i}.png").write_bytes(synth.png(16, 16, seed=i))
    build_index(str(tmp_path / "data"), str(tmp_path / "i.arrow"))
    out = str(tmp_path / "shards")
    pack_shards(str(tmp_path / "i.arrow"), out, PackOptions())  # --ext-policy by-kind: every PNG named .jpg
    return out


def test_verify_decode_counts_members_named_by_kind_once_not_a_note_each(tmp_path):
    out = _png_pack(tmp_path)
    report = verify_shards(out, decode=True)
    assert report.ok
    assert [n for n in report.notes if "named by kind" in n] == [
        n for n in report.notes if n.startswith("3 members are named by kind")
    ]
    assert len([n for n in report.notes if "named by kind" in n]) == 1
    assert not [n for n in report.notes if "decode warning" in n]


def test_verify_decode_lists_the_first_warnings_then_counts_them(tmp_path, monkeypatch):
    import dsclean.pack.state as state
    import dsclean.pack.verify as verify

    out = _png_pack(tmp_path)
    monkeypatch.setattr(verify, "MAX_DECODE_NOTES", 1)
    monkeypatch.setattr(state, "read_state", lambda folder: {})  # as a pack whose names say nothing of by-kind
    report = verify_shards(out, decode=True)
    listed = [n for n in report.notes if "decode warning: extension_mismatch" in n]
    assert len(listed) == 1
    assert any(
        n.startswith("decode warnings: the first 1 are listed above; in all: 3 extension_mismatch")
        for n in report.notes
    )
