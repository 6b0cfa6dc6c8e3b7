"""Batches laid out in bulk: the same bytes as one header / one record at a time, and as tarfile writes them."""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import tarfile

import numpy as np
import pytest
from support.packing import make_media

from dsclean import scan
from dsclean.formats import FORMATS, format_of_name, sniff
from dsclean.index.build import build_index
from dsclean.index.store import KINDS, open_index, read_table
from dsclean.jsonpaths import path_fields
from dsclean.pack.bulk import EXTS, JSON, MEDIA, headers, json_members, key_stems, layout
from dsclean.pack.packer import PackOptions, pack_shards
from dsclean.pack.samples import int_facts_record, member_order, sample_key
from dsclean.pack.tarformat import BLOCK, header
from dsclean.scanning.scanner import ScanOptions

FACTS = ("width", "height", "sample_rate", "frames", "channels")


def test_layout_and_headers_are_one_member_at_a_time():
    r = random.Random(3)
    for n in (1, 2, 37):
        keys = np.array([r.getrandbits(64) for _ in range(n)], np.uint64)
        ext = np.array([r.randrange(len(EXTS)) for _ in range(n)])
        labelled = np.array([r.random() < 0.7 for _ in range(n)])
        sizes = np.array(
            [
                [
                    r.choice([0, 1, 511, 512, 513, r.randrange(10**6), (8 << 30) - 1]),
                    r.randrange(1, 4),
                    r.randrange(1, 2000),
                ]
                for _ in range(n)
            ],
            np.int64,
        )
        lay = layout(ext, labelled, sizes)
        got = headers(key_stems(keys), lay, ext)
        pos, m = 0, 0  # a writer that goes member by member, as the tar is read
        for i in range(n):
            assert lay.sample_at[i] == pos
            key = f"{int(keys[i]):016x}"
            for name in member_order(EXTS[ext[i]], bool(labelled[i])):
                kind = {"cls": 1, "json": 2}.get(name, 0)
                assert lay.header_at[m] == pos and lay.data_at[i, kind] == pos + BLOCK
                assert bytes(got[m]) == header(f"{key}.{name}", int(sizes[i, kind]))
                pos += BLOCK + int(sizes[i, kind]) + (-int(sizes[i, kind]) % BLOCK)
                m += 1
            if not labelled[i]:
                assert lay.data_at[i, 1] == -1
        assert lay.total == pos == lay.sample_at[-1] and m == len(lay.header_at)


def test_key_stems_are_sample_keys():
    paths = [os.urandom(r) for r in range(1, 40)]
    keys = np.array([int(sample_key(p), 16) for p in paths], np.uint64)
    assert [bytes(s).decode() for s in key_stems(keys)] == [sample_key(p) for p in paths]


def test_json_members_are_the_one_at_a_time_records():
    r = random.Random(11)
    alphabet = ['"', "\\", "A", "\u263a", "\xe9", "\n", "\U0001f600", "\x7f", "%", "%d"]
    for _ in range(60):
        n = r.randrange(1, 50)
        classes = ["".join(r.choice(alphabet) for _ in range(3)) for _ in range(3)]
        paths = [
            bytes(r.randrange(1, 256) for _ in range(r.randrange(1, 24)))
            if r.random() < 0.3
            else f"c/{r.randrange(10**6)}%s.jpg".encode()
            for _ in range(n)
        ]
        labels = np.array([r.choice([-1, 0, 2, 7]) for _ in range(n)])  # 7: a label without a class name
        kinds = np.array([r.randrange(2) for _ in range(n)])
        sizes = np.array([r.randrange(10**11) for _ in range(n)])
        sums = np.frombuffer(os.urandom(16 * n), np.uint8).reshape(n, 16)
        present = r.sample(FACTS, r.randrange(len(FACTS) + 1))  # columns the index has
        facts = {
            k: (np.array([r.randrange(10**12) for _ in range(n)]), np.array([r.random() < 0.8 for _ in range(n)]))
            for k in present
        }
        text, starts, lengths = json_members(paths, labels, classes, kinds, KINDS, sizes, sums, facts)
        for i in range(n):
            row_facts = {k: int(facts[k][0][i]) if k in facts and facts[k][1][i] else None for k in FACTS}
            want = int_facts_record(
                path_fields(paths[i]),
                int(labels[i]),
                classes,
                KINDS[kinds[i]],
                int(sizes[i]),
                bytes(sums[i]),
                row_facts,
            )
            assert text[starts[i] : starts[i] + lengths[i]] == want
            assert json.dumps(json.loads(want), sort_keys=True, separators=(",", ":")).encode() == want


# --------------------------------------------------------------------------- whole shards against tarfile


def _reference_shard(index: str, rows: list[int], root, classes: list[str], policy: str = "by-kind") -> bytes:
    """What a shard of these source rows must hold, written with the standard library only
    (``policy``: by-kind names every image member .jpg and every sound .flac; keep, the real format's)."""
    idx, table = open_index(index), read_table(index)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for row in rows:
            rel = idx.path_bytes(row)
            with open(os.path.join(os.fsencode(root), rel), "rb") as f:
                data = f.read()
            fmt = sniff(data[:16]) or format_of_name(os.fsdecode(rel))
            label, kind = int(idx.labels[row]), KINDS[int(idx.kinds[row])]
            rec = {
                **path_fields(rel),
                "kind": kind,
                "size": len(data),
                "checksum": hashlib.blake2b(data, digest_size=16).hexdigest(),
            }
            if label >= 0:
                rec["label"], rec["class"] = label, classes[label] if label < len(classes) else None
            for k in FACTS:
                if k in table.column_names and table.column(k)[row].is_valid:
                    rec[k] = table.column(k)[row].as_py()
            named = FORMATS[fmt][1][0][1:] if policy == "keep" else {"image": "jpg", "audio": "flac"}[FORMATS[fmt][0]]
            members = {
                named: data,
                "json": json.dumps(rec, sort_keys=True, separators=(",", ":")).encode(),
            }
            if label >= 0:
                members["cls"] = str(label).encode()
            key = hashlib.blake2b(rel, digest_size=8).hexdigest()
            for ext in sorted(members):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size, info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = (
                    len(members[ext]),
                    946_684_800,
                    0o644,
                    0,
                    0,
                    "",
                    "",
                )
                tar.addfile(info, io.BytesIO(members[ext]))
    return out.getvalue()


@pytest.mark.parametrize("variant", ["labelled", "unlabelled", "facts", "streamed", "changed", "keep"])
def test_shards_are_what_tarfile_writes(tmp_path, variant):
    root = tmp_path / "data"
    make_media(root, n_images=14, n_audio=5)
    index = str(tmp_path / "i.arrow")
    if variant == "facts":
        scan(str(root), ScanOptions(jobs=1))  # (into the test's private state folder)
        build_index(str(root), index, facts=True)
        assert "width" in read_table(index).column_names
    else:
        build_index(str(root), index, no_labels=variant == "unlabelled")
    idx = open_index(index)
    rows = list(range(len(idx)))
    options = {"samples_per_shard": 7, "shuffle": None, "ext_policy": "keep" if variant == "keep" else "by-kind"}
    if variant == "streamed":  # files over the limit stream between batches laid out in bulk
        options["inline_limit"] = int(np.median(np.asarray(idx.sizes)))
    if variant == "changed":  # a file touched since the index: its batch goes sample by sample, without it
        victim = rows.pop(3)
        path = os.path.join(os.fsencode(root), idx.path_bytes(victim))
        os.utime(path, ns=(1, 1))
        options["skip_changed"] = True
    s = pack_shards(index, str(tmp_path / "s"), PackOptions(**options))
    assert s.complete and s.samples == len(rows)
    classes = list(idx.meta.get("classes", []))
    shards = sorted(n for n in os.listdir(tmp_path / "s") if n.endswith(".tar"))
    planned = [list(range(len(idx)))[k : k + 7] for k in range(0, len(idx), 7)]
    assert len(shards) == len(planned)
    for name, plan in zip(shards, planned):
        want = _reference_shard(index, [r for r in plan if r in rows], root, classes, options["ext_policy"])
        assert (tmp_path / "s" / name).read_bytes() == want, name


def test_a_misnamed_file_moves_its_media_member_where_its_real_format_puts_it(tmp_path):
    root = tmp_path / "data"
    make_media(root, n_images=4, n_audio=0)  # includes a PNG named .jpg: .png sorts after .json
    index = str(tmp_path / "i.arrow")
    build_index(str(root), index)
    assert pack_shards(index, str(tmp_path / "s"), PackOptions(ext_policy="keep")).complete
    with tarfile.open(tmp_path / "s" / "data-000000.tar") as t:
        names = t.getnames()
    key = sample_key(b"dogs/really_a_png.jpg")
    assert [n for n in names if n.startswith(key)] == [f"{key}.cls", f"{key}.json", f"{key}.png"]
    assert pack_shards(index, str(tmp_path / "k"), PackOptions()).complete  # by-kind: an image is .jpg
    with tarfile.open(tmp_path / "k" / "data-000000.tar") as t:
        names = t.getnames()
    assert [n for n in names if n.startswith(key)] == [f"{key}.cls", f"{key}.jpg", f"{key}.json"]
    assert MEDIA == 0 and JSON == 2
