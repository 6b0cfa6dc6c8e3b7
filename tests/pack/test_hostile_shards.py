"""Hostile packed sets (issue 24): tar headers that would stall the walk, name templates that are code,
counts that size memory, special files in place of shards, overlapping offsets, long zero tails.

Anything that could hang runs in a subprocess with a timeout, so a regression fails instead of stalling."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest
from support.fixtures import cli as support_cli

from dsclean.errors import UserError
from dsclean.pack.tarformat import TarError, iter_members

TIMEOUT = 120


def run_cli(*args, timeout=TIMEOUT):
    """Output that may not decode is replaced; a run past the timeout fails the test (a hostile shard hangs it)."""
    return support_cli.run_cli(*args, timeout=timeout, errors="replace")


@pytest.fixture
def packed(media_shards):
    """(shards, index): the session's (tests/support/fixtures/media.py), read only: damage goes to a ``copy``."""
    return media_shards


@pytest.fixture
def copy(packed, tmp_path):
    dst = tmp_path / "shards"
    shutil.copytree(packed[0], dst)
    return dst


def negative_size_header(name: str = "0123456789abcdef.jpg", size: int = -512) -> bytes:
    """A header with a GNU base-256 negative size field and a valid checksum."""
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(tarfile.GNU_FORMAT, "ascii", "strict")


# -- item 1: every step of the member walk makes progress ------------------------------------------------


@pytest.mark.parametrize("size", [-512, -1, -(2**40)])
def test_the_walker_refuses_a_negative_size_instead_of_standing_still(size):
    buf = negative_size_header(size=size) + bytes(4 * 512)
    with pytest.raises(TarError, match=r"at byte 0 has a negative size"):
        list(iter_members(buf))


def test_the_walker_refuses_a_negative_size_after_a_good_member():
    good = tarfile.TarInfo("a.txt")
    good.size = 3
    buf = (
        good.tobuf(tarfile.USTAR_FORMAT, "ascii", "strict") + b"abc" + bytes(509) + negative_size_header() + bytes(1024)
    )
    with pytest.raises(TarError, match=r"at byte 1024 has a negative size"):
        list(iter_members(buf))


def test_verify_names_a_negative_size_shard_and_its_offset_and_exits_1(copy):
    victim = copy / "data-000001.tar"
    with open(victim, "r+b") as f:
        f.write(negative_size_header())
    r = run_cli("verify", copy, "--json")
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    bad = {s["shard"]: [p["problem"] for p in s["problems"]] for s in out["shards"] if not s["ok"]}
    assert list(bad) == ["data-000001.tar"]
    assert any(p.startswith("broken tar:") and "at byte 0 has a negative size" in p for p in bad["data-000001.tar"])


def test_a_resumed_pack_refuses_a_negative_size_shard_naming_it(packed, tmp_path):
    out = tmp_path / "s"
    shutil.copytree(packed[0], out)
    for name in ("index.arrow", "shardindex.json"):  # the pack was killed before it published
        os.unlink(out / name)
    victim = out / "data-000002.tar"
    with open(victim, "r+b") as f:
        f.write(negative_size_header())
    r = run_cli("pack", packed[1], "-o", out, "--samples-per-shard", "5", "-q")
    assert r.returncode == 2, r.stderr
    assert f"error: {victim}: " in r.stderr and "negative size" in r.stderr and "remove that shard" in r.stderr
    assert not (out / "index.arrow").exists()


# -- items 2 and 3: the shard name template is data, counts are checked before they size anything ----------


def set_packed_meta(folder, **changes) -> None:
    """Rewrite the packed index's ``packed`` metadata (a hostile or damaged index)."""
    import pyarrow as pa

    path = str(folder / "index.arrow")
    with pa.memory_map(path) as src:
        table = pa.ipc.open_file(src).read_all()
    meta = json.loads(table.schema.metadata[b"dsclean"])
    meta["packed"].update(changes)
    table = table.replace_schema_metadata({**table.schema.metadata, b"dsclean": json.dumps(meta).encode()})
    tmp = path + ".new"
    with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=len(table))
    os.replace(tmp, path)


GOOD = ["data-{:06d}.tar", "{}.tar", "{:d}.tar", "x{0:06d}.tar", "{0}y.tar", "{{a}}-{:3d}.tar", "s{:020d}.tar"]
BAD = [
    "{0.x}.tar",
    "{0[0]}.tar",
    "{:>99999999999}.tar",
    "{:>300000000}.tar",
    "d{!s:.1}.tar",
    "d{!r}.tar",
    "{}{}.tar",
    "data.tar",
    "{:.3d}.tar",
    "{:021d}.tar",
    "{x}.tar",
    "{1}.tar",
    "{:x}.tar",
    "{:,d}.tar",
    "{:+d}.tar",
    "{:_>5d}.tar",
    "{:{}}.tar",
    "{:06d}/x.tar",
    ".{:03d}.tar",
    "pack.part-{}.tar",
    "{",
    "}{}",
    "a" * 250 + "{}.tar",
    "a\0{}.tar",
]


@pytest.mark.parametrize("template", GOOD)
def test_a_good_template_names_like_str_format_and_is_injective(template):
    from dsclean.pack import names

    t = names.parse(template)
    assert [t.name(k) for k in (0, 7, 123456)] == [template.format(k) for k in (0, 7, 123456)]
    many = [t.name(k) for k in range(20000)]
    assert len(set(many)) == len(many)


@pytest.mark.parametrize("template", BAD)
def test_a_bad_template_is_refused_by_the_grammar(template):
    from dsclean.pack import names

    with pytest.raises(names.NameTemplateError):
        names.parse(template)


@pytest.mark.parametrize("template", ["d{!s:.1}.tar", "{0.x}.tar", "{0[0]}.tar", "{:>99999999999}.tar", "{:{}}.tar"])
def test_pack_name_refuses_a_bad_template_with_exit_2_before_writing(packed, tmp_path, template):
    r = run_cli("pack", packed[1], "-o", tmp_path / "out", "--name", template, "-q")
    assert r.returncode == 2, r.stderr
    assert f"--name {template!r} is not a shard name template" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists() or not any(p.endswith(".tar") for p in os.listdir(tmp_path / "out"))


@pytest.mark.parametrize("template", ["{0.x}.tar", "{0[0]}.tar", "{:>99999999999}", "{:>300000000}", "d{!s:.1}.tar"])
def test_verify_refuses_a_template_in_the_metadata_that_is_code_or_a_size(copy, template):
    set_packed_meta(copy, name=template)
    r = run_cli("verify", copy)
    assert r.returncode == 1, r.stderr
    assert f"the packed index's shard name format {template!r} is unusable" in r.stdout + r.stderr
    assert "Traceback" not in r.stderr


def _peak_rss_of(code: str) -> tuple[int, str]:
    """Run ``code`` in a fresh interpreter; (peak RSS in bytes, its stdout).

    The peak is the interpreter's own (``VmHWM``: its address space's high-water mark), not ``ru_maxrss``: Linux
    carries ``ru_maxrss`` across fork (or vfork) and exec, so a child of a large pytest process would report the
    parent's peak (1.1 GB once the suite had grown, for a verify that peaked at 160 MB)."""
    wrapped = code + (
        "\nfor line in open('/proc/self/status'):\n"
        "    if line.startswith('VmHWM:'):\n"
        "        print('RSS', int(line.split()[1]) * 1024)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", wrapped], capture_output=True, text=True, errors="replace", timeout=TIMEOUT
    )
    assert r.returncode == 0, r.stderr
    rss = int(r.stdout.rsplit("RSS ", 1)[1])
    return rss, r.stdout


@pytest.mark.parametrize("drop_list", [False, True])
def test_a_huge_shard_count_in_the_metadata_is_checked_before_it_sizes_memory(copy, drop_list):
    if drop_list:
        os.unlink(copy / "shardindex.json")
    code = f"from dsclean.pack.verify import verify_shards\nr = verify_shards({str(copy)!r})\nprint(r.ok, r.problems)"
    control, _ = _peak_rss_of(code)  # the same verify with the count intact
    set_packed_meta(copy, shards=10**7)
    rss, out = _peak_rss_of(code)
    assert out.startswith("False") and "the packed index's metadata says 10000000 shards" in out
    assert rss - control < 100 << 20  # a list of 10**7 names would take ~700 MB


# -- item 4: special files in a shard folder are refused without blocking ----------------------------------


def test_open_regular_refuses_fifos_sockets_devices_and_folders_without_blocking(tmp_path):
    import socket

    from dsclean.openfile import NotRegularFile, map_regular, open_regular, open_regular_file

    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "fifo", tmp_path / "link-to-fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_bytes(b"abc")
    code = f"""
import os, sys
sys.path[:0] = {sys.path!r}
from dsclean.openfile import NotRegularFile, open_regular
for name in ("fifo", "link-to-fifo", "sock", "dir", "/dev/zero", "/dev/null"):
    try:
        os.close(open_regular(os.path.join({str(tmp_path)!r}, name)))
    except NotRegularFile as exc:
        print(name, exc.kind, exc.filename)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, errors="replace", timeout=60)
    assert r.returncode == 0, r.stderr
    kinds = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in r.stdout.splitlines()}
    assert kinds == {
        "fifo": f"FIFO {tmp_path}/fifo",
        "link-to-fifo": f"FIFO {tmp_path}/link-to-fifo",
        "sock": f"socket {tmp_path}/sock",
        "dir": f"directory {tmp_path}/dir",
        "/dev/zero": "character device /dev/zero",
        "/dev/null": "character device /dev/null",
    }
    with open_regular_file(tmp_path / "file") as f:
        assert f.read() == b"abc"
    fd = open_regular(tmp_path / "file")
    try:
        import fcntl

        assert not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK  # cleared for ordinary reads
    finally:
        os.close(fd)
    with map_regular(tmp_path / "file") as mm:
        assert mm[:] == b"abc"
    with pytest.raises(NotRegularFile, match="a FIFO"):
        map_regular(tmp_path / "fifo")
    sock.close()


def _replace_with_fifo(path) -> None:
    os.unlink(path)
    os.mkfifo(path)


@pytest.mark.parametrize("victim", ["data-000001.tar", "shardindex.json", "index.arrow"])
def test_verify_refuses_a_fifo_in_the_shard_set_without_blocking(copy, victim):
    _replace_with_fifo(copy / victim)
    r = run_cli("verify", copy, "--json", timeout=90)  # a blocking open would never return
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    text = json.dumps(out)
    assert "not a regular file (a FIFO)" in text and "Traceback" not in r.stderr
    if victim.endswith(".tar"):
        bad = [s for s in out["shards"] if not s["ok"]]
        assert [s["shard"] for s in bad] == [victim]


@pytest.mark.parametrize("target", ["fifo", "/dev/zero"])
def test_indexed_dataset_refuses_a_special_shard_instead_of_hanging(copy, target):
    """IndexedDataset(shards)[i] in a real DataLoader worker: a FIFO (or a link to /dev/zero) as a shard is a
    SampleError naming it, never a hang."""
    victim = copy / "data-000000.tar"
    os.unlink(victim)
    if target == "fifo":
        os.mkfifo(victim)
    else:
        os.symlink(target, victim)
    code = f"""
import sys
sys.path[:0] = {sys.path!r}
import torch
from dsclean import IndexedDataset
ds = IndexedDataset({str(copy)!r}, loader=lambda f: f.read())
try:
    next(iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1)))
except Exception as exc:
    print("ERROR", type(exc).__name__, exc)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, errors="replace", timeout=90)
    assert r.returncode == 0, r.stderr
    kind = "FIFO" if target == "fifo" else "character device"
    assert r.stdout.startswith("ERROR") and f"not a regular file (a {kind})" in r.stdout, r.stdout
    assert "data-000000.tar" in r.stdout


def test_a_resumed_pack_refuses_a_fifo_shard_naming_it(packed, tmp_path):
    out = tmp_path / "s"
    shutil.copytree(packed[0], out)
    for name in ("index.arrow", "shardindex.json"):
        os.unlink(out / name)
    _replace_with_fifo(out / "data-000002.tar")
    r = run_cli("pack", packed[1], "-o", out, "--samples-per-shard", "5", "-q", timeout=90)
    assert r.returncode == 2, r.stderr
    assert f"error: {out / 'data-000002.tar'}" in r.stderr and "FIFO" in r.stderr  # (pack's output check, or read-back)


def test_read_back_itself_refuses_a_fifo_swapped_in_after_the_output_check(packed, tmp_path):
    """The resume's read-back opens through dsclean.openfile too: a FIFO reaching it is a TarError naming it."""
    os.mkfifo(tmp_path / "x.tar")
    code = f"""
import sys
sys.path[:0] = {sys.path!r}
import numpy as np
from dsclean.pack.tarformat import TarError
from dsclean.pack.readback import read_back
from dsclean.pack.shardjob import ShardJob
job = ShardJob(number=0, output={str(tmp_path)!r}, name="x.tar", index={packed[1]!r}, root="/", rows=np.arange(3),
               classes=())
try:
    read_back(job)
except TarError as exc:
    print("TarError", exc)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, errors="replace", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("TarError") and "x.tar: not a regular file (a FIFO)" in r.stdout, r.stdout


def test_a_fifo_pack_json_is_refused_without_blocking(packed, tmp_path):
    out = tmp_path / "s"
    shutil.copytree(packed[0], out)
    for name in ("index.arrow", "shardindex.json"):
        os.unlink(out / name)
    _replace_with_fifo(out / "pack.json")
    r = run_cli("pack", packed[1], "-o", out, "--samples-per-shard", "5", "-q", timeout=90)
    assert r.returncode == 2, r.stderr
    assert "pack.json" in r.stderr and "not a regular file (a FIFO)" in r.stderr


# -- item 5: opening a packed index refuses rows that overlap or go back within a shard ---------------------


def set_packed_column(folder, column: str, row: int, value) -> None:
    import pyarrow as pa

    path = str(folder / "index.arrow")
    with pa.memory_map(path) as src:
        table = pa.ipc.open_file(src).read_all()
    values = table.column(column).to_pylist()
    values[row] = value
    i = table.column_names.index(column)
    table = table.set_column(i, column, pa.array(values, table.schema.field(column).type))
    tmp = path + ".new"
    with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=len(table))
    os.replace(tmp, path)


def _row_of(folder, row: int, column: str):
    import pyarrow as pa

    with pa.memory_map(str(folder / "index.arrow")) as src:
        return pa.ipc.open_file(src).read_all().column(column)[row].as_py()


def test_a_row_copying_the_previous_rows_member_is_refused_at_open(copy):
    """Row 1 points at row 0's member (offset and size copied): served silently before, refused now."""
    from dsclean import IndexedDataset

    assert _row_of(copy, 0, "shard") == _row_of(copy, 1, "shard") == 0
    set_packed_column(copy, "offset", 1, _row_of(copy, 0, "offset"))
    set_packed_column(copy, "size", 1, _row_of(copy, 0, "size"))
    with pytest.raises(
        UserError,
        match=r"corrupt packed index at row 1: in data-000000.tar, its bytes .* are the "
        r"same bytes as row 0",
    ):
        IndexedDataset(str(copy))


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda f: ("offset", 2, _row_of(f, 1, "offset") - 512), "overlap or come before those of row 1"),
        (lambda f: ("offset", 1, _row_of(f, 1, "offset") + 1), "are not a member's data"),
        (lambda f: ("offset", 1, 0), "are not a member's data"),
        (lambda f: ("offset", 4, 10**12), "are not a member's data in data-000000.tar"),
        (lambda f: ("shard", 2, 3), "comes before the previous row's|not a member's data"),
        (lambda f: ("shard", 2, 99), "it names shard 99; the shard list has 4"),
    ],
)
def test_offsets_that_go_back_leave_the_shard_or_break_shard_order_are_refused(copy, change, match):
    from dsclean import IndexedDataset

    set_packed_column(copy, *change(copy))
    with pytest.raises(UserError, match=match):
        IndexedDataset(str(copy))


def test_an_intact_packed_set_opens_and_the_check_runs_once_per_process(packed):
    from dsclean import IndexedDataset
    from dsclean.data import shards

    ds = IndexedDataset(str(packed[0]))
    assert len(ds) == 18 and os.path.realpath(str(packed[0] / "index.arrow")) in shards._LAID_OUT


# -- item 9: a long zero tail after the end-of-archive is checked in bounded memory -------------------------


def _grow_sparse(folder, shard: str, extra: int) -> int:
    """Extend the shard by a hole of ``extra`` zero bytes (no disk used) and record its new size in the
    shard list, so the tail is the only thing unusual about it; returns the new size."""
    path = folder / shard
    size = os.path.getsize(path) + extra
    os.truncate(path, size)
    lst = json.loads((folder / "shardindex.json").read_text())
    for s in lst["shardlist"]:
        if s["url"] == shard:
            s["filesize"] = size
    (folder / "shardindex.json").write_text(json.dumps(lst))
    return size


def test_a_multi_gib_zero_tail_is_checked_in_bounded_memory(copy):
    code = f"from dsclean.pack.verify import verify_shards\nr = verify_shards({str(copy)!r})\nprint(r.ok, r.problems)"
    control, out = _peak_rss_of(code)
    assert out.startswith("True")
    _grow_sparse(copy, "data-000001.tar", 2 << 30)
    rss, out = _peak_rss_of(code)
    assert out.startswith("True"), out  # zeros after the end-of-archive are fine
    assert rss - control < 300 << 20, f"peak RSS grew by {(rss - control) >> 20} MiB for a 2 GiB tail"


def test_a_non_zero_byte_far_into_a_sparse_tail_is_found_at_its_offset(copy):
    size = _grow_sparse(copy, "data-000002.tar", 64 << 20)
    with open(copy / "data-000002.tar", "r+b") as f:
        f.seek(size - 3)
        f.write(b"\x01")
    from dsclean.pack.verify import verify_shards

    r = verify_shards(str(copy))
    bad = {s.shard: [p["problem"] for p in s.problems] for s in r.shards if not s.ok}
    assert bad == {
        "data-000002.tar": [f"non-zero bytes after the end-of-archive blocks (the first at byte {size - 3})"]
    }


# -- the adversarial pass's finding: a sidecar member is read into memory only up to a cap ------------------


def _bloat_first_json(shard, size: int) -> str:
    """Rewrite ``shard`` with its first sample's .json member grown to ``size`` bytes (spaces: still valid JSON)."""
    with tarfile.open(shard) as tf:
        members = [(m, tf.extractfile(m).read()) for m in tf.getmembers()]
    name = next(m.name for m, _ in members if m.name.endswith(".json"))
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tf:
        for m, data in members:
            if m.name == name:
                data = data + b" " * (size - len(data))
                m.size = len(data)
            tf.addfile(m, io.BytesIO(data))
    return name


def test_verify_refuses_a_sample_json_past_the_cap_instead_of_copying_it(copy):
    from dsclean.pack.tarformat import MAX_SIDECAR

    name = _bloat_first_json(copy / "data-000001.tar", MAX_SIDECAR + 1)
    r = run_cli("verify", copy, "--json")
    assert r.returncode == 1, r.stderr
    problems = [p for s in json.loads(r.stdout)["shards"] for p in s["problems"] if p.get("member") == name]
    assert any(f"is {MAX_SIDECAR + 1:,} bytes, more than the {MAX_SIDECAR:,}" in p["problem"] for p in problems), (
        problems
    )


def test_verify_of_a_sparse_multi_gib_json_member_stays_in_bounded_memory(copy):
    """The header says 3 GiB of .json: refused by its size, never copied (before: 3 GiB of RSS)."""
    shard = copy / "data-000001.tar"
    name = _bloat_first_json(shard, 4096)
    with tarfile.open(shard) as tf:  # where the member's header is
        m = tf.getmember(name)
    huge = 3 << 30
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = huge, m.mtime, m.mode
    with open(shard, "r+b") as f:
        f.seek(m.offset)
        f.write(info.tobuf(tarfile.GNU_FORMAT, "ascii", "strict"))
        f.truncate(m.offset_data + huge + 1024)  # sparse: the member's bytes are a hole of zeros
    code = f"from dsclean.pack.verify import verify_shards\nr = verify_shards({str(copy)!r})\nprint(r.ok)"
    rss, out = _peak_rss_of(code)
    assert out.startswith("False")
    assert rss < 1 << 30, (
        rss
    )  # without the cap: 9.8 GB peak RSS measured (the 3 GiB copy, and what json.loads makes of it)
