"""dsclean dups end to end: real files, real worker processes, the JSONL format, --check, quarantine."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from support import synth
from support.files import write

import dsclean
from dsclean.cli import main
from dsclean.dups.finder import DupsOptions, find_duplicates, write_groups
from dsclean.errors import UserError
from dsclean.quality.files import facts_from_path

OPTS = DupsOptions(jobs=2, timeout=30)


def _resized_jpeg(seed: int, size=(200, 150), quality=60) -> bytes:
    return synth.encode_image(synth.photo_like(320, 240, seed=seed).resize(size), "JPEG", quality=quality)


@pytest.fixture
def splits(tmp_path):
    """train/val/test with exact copies, a near copy leaking into val, and distinct pictures."""
    train, val, test = tmp_path / "train", tmp_path / "val", tmp_path / "test"
    a = synth.jpeg(320, 240, seed=1)
    write(train, "cats/a.jpg", a)
    write(train, "cats/a_copy.jpg", a)  # exact, same split
    write(val, "cats/a.jpg", a)  # exact, leaks into val
    write(train, "dogs/b.png", synth.encode_image(synth.photo_like(320, 240, seed=2), "PNG"))
    write(test, "dogs/b_small.jpg", _resized_jpeg(2))  # near copy of b, leaks into test
    for i in range(3, 9):
        write(train, f"other/{i}.jpg", synth.jpeg(320, 240, seed=i))
    return tmp_path


def _records(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_groups_jsonl_format_order_and_check(splits, capsys):
    out = splits / "groups.jsonl"
    roots = [str(splits / "train"), str(splits / "val"), str(splits / "test")]
    code = main(["dups", *roots, "-o", str(out), "--check", "-j", "2"])
    assert code == 1  # groups span splits
    recs = _records(out)
    assert [r["group"] for r in recs] == list(range(len(recs)))
    exact = next(r for r in recs if r["kind"] == "exact")
    assert exact["members"] == [
        {"root": roots[0], "path": "cats/a.jpg", "distance": 0},
        {"root": roots[0], "path": "cats/a_copy.jpg", "distance": 0},
        {"root": roots[1], "path": "cats/a.jpg", "distance": 0},
    ]
    assert exact["splits"] == roots[:2]
    near = next(r for r in recs if r["kind"] == "near")
    assert [(m["root"], m["path"]) for m in near["members"]] == [
        (roots[0], "dogs/b.png"),
        (roots[2], "dogs/b_small.jpg"),
    ]
    assert 0 < near["members"][1]["distance"] <= 8 and near["splits"] == [roots[0], roots[2]]
    assert len(recs) == 2  # the six other pictures are in no group
    assert "2 groups span splits" in capsys.readouterr().out


def test_check_passes_without_leakage(splits):
    assert main(["dups", str(splits / "train"), "--check", "-q", "-j", "2"]) == 0


def test_exact_only_and_json_summary(splits, capsys):
    assert main(["dups", str(splits / "train"), str(splits / "test"), "--near", "0", "--json", "-j", "2"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["exact_groups"], s["near_groups"], s["leaking_groups"]) == (1, 0, 0)
    assert s["computed"] == s["files"] == 10


def test_non_utf8_names_get_path_b64(tmp_path):
    data = synth.png(48, 48, seed=3)
    write(tmp_path / "r", b"caf\xe9.png", data)
    write(tmp_path / "r", "cafe.png", data)
    result = find_duplicates([str(tmp_path / "r")], OPTS)
    (rec,) = list(result.records())
    odd = next(m for m in rec["members"] if "path_b64" in m)
    assert base64.b64decode(odd["path_b64"]) == b"caf\xe9.png"


def test_distinct_pictures_and_flat_frames_are_not_near_duplicates(tmp_path):
    root = tmp_path / "r"
    for i in range(12):
        write(root, f"p{i}.jpg", synth.jpeg(256, 192, seed=100 + i))
    write(root, "black_small.png", synth.encode_image(Image.new("RGB", (64, 64)), "PNG"))
    write(root, "black_big.png", synth.encode_image(Image.new("RGB", (300, 200)), "PNG"))
    write(root, "black_big_copy.png", synth.encode_image(Image.new("RGB", (300, 200)), "PNG"))
    result = find_duplicates([str(root)], OPTS)
    assert [(g.kind, len(g.members)) for g in result.groups] == [("exact", 2)]  # only the byte-identical frames
    assert result.summary.near_stats["low_information"] == 2


def test_hostile_files_do_not_stop_dups(tmp_path):
    # fresh worker processes with the scan's test-only fault hook on (DSCLEAN_TEST_FAULTS=1)
    root = tmp_path / "r"
    a = synth.jpeg(128, 128, seed=5)
    write(root, "a.jpg", a)
    write(root, "a2.jpg", a)
    write(root, "x__segfault__.jpg", synth.jpeg(64, 64, seed=6))
    write(root, "y__hang__.jpg", synth.jpeg(64, 64, seed=7))
    proc = subprocess.run(
        [sys.executable, "-m", "dsclean", "dups", str(root), "--timeout", "2", "-j", "2", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "DSCLEAN_TEST_FAULTS": "1"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert (s["exact_groups"], s["duplicate_files"]) == (1, 1)
    assert sorted(f.split("/")[-1].split(":")[0] for f in s["failed"]) == ["x__segfault__.jpg", "y__hang__.jpg"]


def test_uses_current_scan_results_and_skips_bad_files(tmp_path):
    root = tmp_path / "r"
    a = synth.jpeg(128, 128, seed=8)
    for name in ("a.jpg", "b.jpg"):
        write(root, name, a)
    cut = synth.truncate(synth.jpeg(128, 128, seed=9), 0.6)
    write(root, "cut1.jpg", cut)
    write(root, "cut2.jpg", cut)
    # results as the scan writes them once it records facts (FACTS.md columns), pointed to by last_scan.json
    rows = []
    for name in ("a.jpg", "b.jpg", "cut1.jpg", "cut2.jpg"):
        path = str(root / name)
        st, ff = os.stat(path), facts_from_path(path)
        rows.append(
            {
                "path": name.encode(),
                "status": "bad" if "cut" in name else "ok",
                "size": st.st_size,
                "mtime_ns": st.st_mtime_ns,
                "width": 128,
                "height": 128,
                "content_hash": ff.facts.content_hash,
                "phash": ff.facts.phash,
                "flags": ff.facts.flags,
            }
        )
    os.makedirs(root / ".dsclean")
    schema = pa.schema(
        [
            ("path", pa.binary()),
            ("status", pa.string()),
            ("size", pa.int64()),
            ("mtime_ns", pa.int64()),
            ("width", pa.int32()),
            ("height", pa.int32()),
            ("content_hash", pa.binary(16)),
            ("phash", pa.uint64()),
            ("flags", pa.list_(pa.string())),
        ]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), root / ".dsclean" / "scan_results.parquet")
    write(root, "new.jpg", a)  # not in the results: computed
    result = find_duplicates([str(root)], OPTS)
    s = result.summary
    assert (s.from_results, s.computed, s.excluded_bad) == (2, 1, 2)
    assert [sorted(_rel(result, g)) for g in result.groups] == [["a.jpg", "b.jpg", "new.jpg"]]


def _rel(result, g):
    return [result.inventory.rel(i).decode() for i in g.members]


def test_never_scanned_root_and_missing_root(tmp_path, capsys):
    assert main(["dups", str(tmp_path / "nope")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert main(["dups", str(tmp_path), "--keep", "largest"]) == 2  # --keep without --quarantine


# ---- quarantine -------------------------------------------------------------------------------


def _listing(root):
    """Media files under ``root`` (not dsclean's own: state folder, quarantine marker, lock, journal)."""
    return sorted(
        os.path.relpath(os.path.join(d, f), root)
        for d, _, fs in os.walk(root)
        for f in fs
        if ".dsclean" not in d and not f.startswith(".") and f not in ("manifest.jsonl", "quarantine.json")
    )


def test_quarantine_keeps_one_per_split_and_never_moves_across_without_drop_from(splits):
    q = splits / "q"
    roots = [str(splits / "train"), str(splits / "val"), str(splits / "test")]
    assert main(["dups", *roots, "--quarantine", str(q), "-q", "-j", "2"]) == 0
    assert "cats/a_copy.jpg" not in _listing(splits / "train")  # the same-split extra moved
    assert "cats/a.jpg" in _listing(splits / "val") and "dogs/b_small.jpg" in _listing(splits / "test")
    assert os.path.exists(q / "train" / "cats" / "a_copy.jpg")
    manifest = [json.loads(line) for line in open(q / "train" / "manifest.jsonl")]
    assert [e.get("reason") for e in manifest if e["op"] == "move"] == ["duplicate"]
    dsclean.restore(str(q / "train"))
    assert "cats/a_copy.jpg" in _listing(splits / "train")


def test_drop_from_moves_that_splits_copies(splits):
    q = splits / "q"
    roots = [str(splits / "train"), str(splits / "val"), str(splits / "test")]
    assert main(["dups", *roots, "--quarantine", str(q), "--drop-from", roots[2], "-q", "-j", "2"]) == 0
    assert "dogs/b_small.jpg" not in _listing(splits / "test")
    assert os.path.exists(q / "test" / "dogs" / "b_small.jpg")
    assert "cats/a.jpg" in _listing(splits / "val")  # val is not the dropped split
    assert main(["dups", *roots, "--quarantine", str(q), "--drop-from", "nowhere"]) == 2


def test_nested_roots_and_outputs_inside_a_root_are_refused_before_anything_moves(splits, capsys):
    """A root inside another would make each of its files its own duplicate (and --drop-from would move every one);
    -o or --quarantine inside a root writes into the dataset (a new class folder for ImageFolder)."""
    train = splits / "train"
    before = _listing(train)
    assert main(["dups", str(train), str(train / "cats"), "--check", "-q"]) == 2
    assert "is inside" in capsys.readouterr().err
    assert (
        main(
            [
                "dups",
                str(train / "cats"),
                str(train),
                "--quarantine",
                str(splits / "q"),
                "--drop-from",
                str(train / "cats"),
                "-q",
            ]
        )
        == 2
    )
    assert main(["dups", str(train), "-o", str(train / "cats" / "groups.jsonl"), "-q"]) == 2
    assert "never writes into a dataset" in capsys.readouterr().err
    assert main(["dups", str(train), "--quarantine", str(train / "q"), "-q"]) == 2
    assert _listing(train) == before and not (train / "q").exists() and not (splits / "q").exists()
    result = find_duplicates([str(train)], OPTS)  # the Python API refuses the same
    with pytest.raises(UserError, match="inside the dataset"):
        write_groups(result, str(train / "g.jsonl"))
    from dsclean.dups.moves import quarantine_duplicates

    with pytest.raises(UserError, match="inside the dataset"):
        quarantine_duplicates(result, str(train / "q"))


def test_outputs_that_cannot_be_written_are_refused_before_any_work(splits, monkeypatch, capsys):
    """-o in a missing folder, a quarantine on a read-only file system or that is a file: exit 2 at once,
    not after hours of facts and search."""
    from support.mounts import make_read_only, tmpfs

    import dsclean.dups.finder

    def no_work(*args, **kwargs):
        raise AssertionError("the work started before the outputs were checked")

    monkeypatch.setattr(dsclean.dups.finder, "find_duplicates", no_work)
    train = str(splits / "train")
    assert main(["dups", train, "-o", str(splits / "no-such-folder" / "groups.jsonl"), "-q"]) == 2
    assert "does not exist" in capsys.readouterr().err
    (splits / "a-file").write_text("x")
    assert main(["dups", train, "--quarantine", str(splits / "a-file"), "-q"]) == 2
    assert "is a file" in capsys.readouterr().err
    with tmpfs(splits / "ro", size="1m") as ro:
        make_read_only(ro)
        assert main(["dups", train, "--quarantine", os.path.join(ro, "bin"), "-q"]) == 2
        assert "not writable" in capsys.readouterr().err
        assert main(["dups", train, "-o", os.path.join(ro, "groups.jsonl"), "-q"]) == 2
        assert "not writable" in capsys.readouterr().err


@pytest.fixture
def bind_mount(tmp_path):
    """mount --bind SRC DST (tests run as root), unmounted afterwards."""
    mounted = []

    def mount(src, dst):
        dst.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", str(src), str(dst)], check=True)
        mounted.append(dst)

    try:
        yield mount
    finally:
        for dst in reversed(mounted):
            subprocess.run(["umount", str(dst)], check=True)


def test_one_folder_under_two_paths_is_refused_also_through_a_bind_mount(splits, bind_mount, capsys):
    """realpath cannot see through a bind mount (or one NFS export mounted twice): folders are compared by
    (st_dev, st_ino), else every file is its own leak and --drop-from empties the dataset."""
    val = splits / "val"
    view = splits / "view"
    bind_mount(val, view)
    before = _listing(val)
    q = splits / "bin"
    assert main(["dups", str(val), str(view), "--quarantine", str(q), "--drop-from", str(view), "-q"]) == 2
    assert "are the same folder" in capsys.readouterr().err
    assert main(["dups", str(val), str(view / "cats"), "-q"]) == 2  # nested through the mount
    assert "is inside" in capsys.readouterr().err
    assert main(["dups", str(splits / "train"), str(val), "--quarantine", str(view / "bin"), "-q"]) == 2
    assert "inside the dataset" in capsys.readouterr().err
    assert _listing(val) == before and not q.exists() and not (val / "bin").exists()


@pytest.mark.parametrize("keep, kept", [("first", "a.jpg"), ("largest", "b.png"), ("most-pixels", "c.jpg")])
def test_keep_policies(tmp_path, keep, kept):
    root = tmp_path / "r"
    img = synth.photo_like(320, 240, seed=11)
    write(root, "a.jpg", synth.encode_image(img.resize((160, 120)), "JPEG", quality=95))
    write(root, "b.png", synth.encode_image(img.resize((200, 150)), "PNG"))  # most bytes
    write(root, "c.jpg", synth.encode_image(img, "JPEG", quality=50))  # most pixels
    assert main(["dups", str(root), "--quarantine", str(tmp_path / "q"), "--keep", keep, "-q", "-j", "2"]) == 0
    assert _listing(root) == [kept]
    assert sorted(_listing(tmp_path / "q" / "r")) == sorted({"a.jpg", "b.png", "c.jpg"} - {kept})


def test_dry_run_moves_nothing(splits, capsys):
    roots = [str(splits / "train")]
    before = _listing(splits / "train")
    assert main(["dups", *roots, "--quarantine", str(splits / "q"), "--dry-run", "-j", "2"]) == 0
    assert _listing(splits / "train") == before
    assert "would move 1 extra copies" in capsys.readouterr().out
    assert main(["dups", *roots, "--quarantine", str(splits / "q"), "--dry-run", "--json", "-j", "2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["planned"] == 1 and summary["moved"] == 0  # the JSON says how many would move
    assert _listing(splits / "train") == before and not (splits / "q").exists()
    assert main(["dups", *roots, "--quarantine", str(splits / "q"), "--json", "-j", "2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["planned"] == summary["moved"] == 1


def test_reads_every_part_of_a_job_array_and_says_where_results_came_from(tmp_path, capsys):
    """Real scans with facts, as two parts of a job array: dups decodes nothing and names the source."""
    from dsclean.scanning.scanner import ScanOptions, scan

    root, state = tmp_path / "r", str(tmp_path / "state")
    a = synth.jpeg(200, 150, seed=3)
    write(root, "x/a.jpg", a)
    write(root, "y/a_copy.jpg", a)
    for i in range(6):
        write(root, f"x/{i}.jpg", synth.jpeg(200, 150, seed=10 + i))
    write(root, "x/cut.jpg", synth.truncate(synth.jpeg(200, 150, seed=30), 0.5))
    for part in range(2):
        scan(
            str(root),
            ScanOptions(shard=(part, 2), report_dir=str(tmp_path / "rep"), state_dir=state, jobs=1, backend="threads"),
        )
    calls = []
    result = find_duplicates([str(root)], DupsOptions(jobs=2, timeout=30, state_dir=state), progress=calls.append)
    s = result.summary
    assert (s.from_results, s.computed, s.excluded_bad) == (8, 0, 1) and calls == []
    assert len(result.inventory.results_files[0]) == 2  # both parts' results
    assert s.results_sources[0].startswith(f"the last scan of {root}")
    assert [sorted(_rel(result, g)) for g in result.groups] == [["x/a.jpg", "y/a_copy.jpg"]]
    # a file added since the scan is computed here, and counted by the progress callback
    write(root, "y/new.jpg", synth.jpeg(200, 150, seed=40))
    result = find_duplicates([str(root)], DupsOptions(jobs=2, timeout=30, state_dir=state), progress=calls.append)
    assert (result.summary.from_results, result.summary.computed) == (8, 1) and calls == [1]
    assert main(["dups", str(root), "--state-dir", state]) == 0
    out = capsys.readouterr().out
    assert f"scan results of {root}: the last scan of {root}" in out and "8 from scan results, 1 computed here" in out


def test_a_scan_with_facts_none_holds_no_hashes_so_dups_computes_them_and_says_why(tmp_path, capsys):
    """``scan --facts none`` records no content_hash and no perceptual hash: dups hashes and decodes every
    file itself (a root never scanned works the same), finds the same groups, and says why it computed them."""
    root, state = tmp_path / "r", str(tmp_path / "state")
    a = synth.jpeg(200, 150, seed=3)
    write(root, "x/a.jpg", a)
    write(root, "y/a_copy.jpg", a)
    for i in range(4):
        write(root, f"x/{i}.jpg", synth.jpeg(200, 150, seed=10 + i))
    write(root, "x/cut.jpg", synth.truncate(synth.jpeg(200, 150, seed=30), 0.5))
    assert (
        main(["scan", str(root), "--facts", "none", "--state-dir", state, "-q", "-j", "1"]) == 0
    )  # no quarantine asked: exit 0
    result = find_duplicates([str(root)], DupsOptions(jobs=2, timeout=30, state_dir=state))
    s = result.summary
    assert (s.from_results, s.computed, s.excluded_bad) == (0, 6, 1)  # the scan's bad file still left out
    assert [sorted(_rel(result, g)) for g in result.groups] == [["x/a.jpg", "y/a_copy.jpg"]]
    capsys.readouterr()
    assert main(["dups", str(root), "--state-dir", state]) == 0
    out = capsys.readouterr().out
    assert "scanned with --facts none" in out and "0 from scan results, 6 computed here" in out


def test_a_job_array_with_parts_missing_gives_its_facts_and_the_rest_is_computed(tmp_path, capsys):
    """2 of 3 parts ran: their facts are used, the missing part's files are hashed and decoded here (nothing is
    left out), the groups are those of a complete scan, and the output names the missing part."""
    from dsclean.scanning.scanner import ScanOptions, in_part, scan

    root, state = tmp_path / "r", str(tmp_path / "state")
    a = synth.jpeg(200, 150, seed=3)
    write(root, "x/a.jpg", a)
    write(root, "y/a_copy.jpg", a)
    for i in range(7):
        write(root, f"x/{i}.jpg", synth.jpeg(200, 150, seed=10 + i))
    names = ["x/a.jpg", "y/a_copy.jpg", *(f"x/{i}.jpg" for i in range(7))]
    write(root, "x/cut.jpg", synth.truncate(synth.jpeg(200, 150, seed=30), 0.5))
    missing = [n for n in names if in_part(n, (2, 3))]
    assert missing and len(missing) < len(names)
    for part in (0, 1):
        scan(str(root), ScanOptions(shard=(part, 3), state_dir=state, jobs=1, backend="threads"))
    result = find_duplicates([str(root)], DupsOptions(jobs=2, timeout=30, state_dir=state))
    s = result.summary
    cut_done = not in_part("x/cut.jpg", (2, 3))  # the scan's bad verdict, when its part ran
    assert s.from_results == len(names) - len(missing) and s.computed == len(missing) + (not cut_done)
    assert s.excluded_bad == int(cut_done)
    assert len(result.inventory.results_files[0]) == 2
    assert "2 of the 3 parts" in s.results_sources[0] and "part 2/3 never ran" in s.results_sources[0]
    assert [sorted(_rel(result, g)) for g in result.groups] == [["x/a.jpg", "y/a_copy.jpg"]]
    assert main(["dups", str(root), "--state-dir", state, "-j", "1"]) == 0
    out = capsys.readouterr().out
    assert "the files of the missing parts are hashed and decoded here" in out and "no recorded scan" not in out


def test_the_quarantine_is_recorded_in_the_roots_state_folder(splits, tmp_path, capsys):
    """dups --quarantine records DIR/<root name> for `dsclean report ROOT` (before moving); a state folder that
    cannot be written is a note, and the moves still happen (journaled)."""
    from dsclean.dups.quarantines import recorded_quarantines

    train, q, state = splits / "train", splits / "q", tmp_path / "state"
    assert main(["dups", str(train), "--quarantine", str(q), "--state-dir", str(state), "-q"]) == 0
    assert recorded_quarantines(str(train), str(state)) == [str(q / "train")]
    assert main(["dups", str(train), "--quarantine", str(q), "--state-dir", str(state), "-q"]) == 0  # no copies left
    assert recorded_quarantines(str(train), str(state)) == [str(q / "train")]
    (splits / "not-a-folder").write_text("x")
    write(train, "cats/a_copy2.jpg", (train / "cats" / "a.jpg").read_bytes())
    assert (
        main(["dups", str(train), "--quarantine", str(q), "--state-dir", str(splits / "not-a-folder"), "--json"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["moved"] == 1 and any("dsclean report will not know" in n for n in out["notes"])


def test_a_bind_mount_of_a_folder_inside_another_root_is_refused_as_inside(splits, bind_mount, capsys):
    """Issue 24 item 6: root B is a bind mount of A/cats (outside A by path): refused as nested, nothing moves."""
    train = splits / "train"
    b = splits / "B"
    bind_mount(train / "cats", b)
    before = _listing(train)
    assert main(["dups", str(train), str(b), "--quarantine", str(splits / "q"), "--drop-from", str(b), "-q"]) == 2
    assert f"{b} is inside {train}" in capsys.readouterr().err
    assert main(["dups", str(b), str(train), "-q"]) == 2  # in either order
    assert f"{b} is inside {train}" in capsys.readouterr().err
    assert _listing(train) == before and not (splits / "q").exists()


def test_names_of_one_file_are_never_copies_of_each_other(tmp_path, bind_mount, capsys):
    """Hard links (across roots and within one) and files seen twice through a bind mount inside another root are
    one file: never grouped, and --drop-from never moves one name as the copy of the other."""
    a, b = tmp_path / "A", tmp_path / "B"
    pic, other = synth.jpeg(160, 120, seed=11), synth.jpeg(160, 120, seed=12)
    write(a, "cats/x.jpg", pic)
    write(a, "cats/real_copy.jpg", pic)  # a true copy: still grouped
    write(a, "dogs/y.jpg", other)
    os.makedirs(b / "cats")
    os.link(a / "cats" / "x.jpg", b / "cats" / "x.jpg")  # a hard link in another split
    os.link(a / "dogs" / "y.jpg", a / "dogs" / "y_link.jpg")  # a hard link in the same split
    bind_mount(a / "dogs", b / "view")  # A's dogs seen again inside B
    q = tmp_path / "q"
    before_a, before_b = _listing(a), _listing(b)
    code = main(
        [
            "dups",
            str(a),
            str(b),
            "-o",
            str(tmp_path / "g.jsonl"),
            "--quarantine",
            str(q),
            "--drop-from",
            str(b),
            "--near",
            "0",
            "-j",
            "2",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    groups = _records(tmp_path / "g.jsonl")
    assert [sorted(m["path"] for m in g["members"]) for g in groups] == [["cats/real_copy.jpg", "cats/x.jpg"]]
    assert all(m["root"] == str(a) for m in groups[0]["members"])
    assert _listing(b) == before_b and "dogs/y.jpg" in _listing(a) and "dogs/y_link.jpg" in _listing(a)
    assert set(before_a) - set(_listing(a)) in ({"cats/real_copy.jpg"}, {"cats/x.jpg"})  # the true copy's extra
    assert out.count("one file, two names") == 4, out  # B/cats/x, A/dogs/y_link, B/view/y, B/view/y_link
