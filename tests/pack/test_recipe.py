"""The everyday path (issue 28): the one-line webdataset recipe reads every sample, shuffled by default.

Real webdataset and soundfile: ``--ext-policy by-kind`` (the default) names every image member
``.jpg`` and every sound ``.flac`` so ``decode("pil").to_tuple("jpg", "cls")`` reads a set of
mixed formats; ``keep`` names them by format (the reader then needs every key: the recipe
pack records says which); the seed of the default shuffle is recorded and kept.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from support import synth
from support.files import write
from support.packing import folder_digests, make_indexed

from dsclean.cli import main
from dsclean.data.shards import open_packed_index
from dsclean.errors import UserError
from dsclean.index.build import build_index
from dsclean.index.store import open_index
from dsclean.pack.names import brace_pattern, cached
from dsclean.pack.packer import PackOptions, pack_shards
from dsclean.pack.verify import verify_shards

webdataset = pytest.importorskip("webdataset")
PIL = pytest.importorskip("PIL.Image")
PY = sys.executable


def _mixed(tmp_path: Path) -> str:
    """JPEG (.jpg and .JPEG), PNG, a PNG named .jpg, a non-UTF-8 name, and a WebP: images only."""
    root, index = make_indexed(tmp_path, n_images=12, n_audio=0)
    write(root, "cats/web.webp", synth.encode_image(synth.photo_like(30, 20, 7), "WEBP"))
    build_index(str(root), index)
    return index


def _urls(out: Path) -> str:
    n = len([p for p in os.listdir(out) if p.endswith(".tar")])
    return str(out / f"data-{{000000..{n - 1:06d}}}.tar")


def _one_line(out: Path) -> list:
    """The documented recipe, verbatim."""
    return list(webdataset.WebDataset(_urls(out), shardshuffle=False).decode("pil").to_tuple("jpg", "cls"))


def _run_recipe(out: Path) -> list:
    """The recipe pack.json records, run as written."""
    recipe = json.loads((out / "pack.json").read_text())["recipe"]
    scope = {name: __import__(name) for name in recipe["imports"]}
    scope["urls"] = str(out / recipe["urls"])
    return list(eval(recipe["python"], scope))


def test_the_one_line_recipe_reads_every_sample_of_mixed_image_formats_by_default(tmp_path):
    index = _mixed(tmp_path)
    n = len(open_index(index))
    s = pack_shards(index, str(tmp_path / "s"), PackOptions(samples_per_shard=4))
    assert s.complete and s.samples == n and s.ext_policy == "by-kind" and not s.warnings
    got = _one_line(tmp_path / "s")
    assert len(got) == n
    assert all(isinstance(img, PIL.Image) and img.size[0] > 0 for img, _ in got)
    formats = {
        PIL.open(tarfile.open(t).extractfile(m)).format
        for t in (tmp_path / "s").glob("*.tar")
        for m in tarfile.open(t).getmembers()
        if m.name.endswith(".jpg")
    }
    assert formats == {"JPEG", "PNG", "WEBP"}  # named .jpg, the bytes unchanged
    packed = open_packed_index(str(tmp_path / "s"))
    assert [y for _, y in got] == np.asarray(packed.labels).tolist()  # every sample, in pack order


def test_under_keep_the_one_line_recipe_stops_as_before_and_pack_warns(tmp_path, capsys):
    index = _mixed(tmp_path)
    n = len(open_index(index))
    out = tmp_path / "k"
    assert main(["pack", index, "-o", str(out), "--samples-per-shard", "4", "--ext-policy", "keep"]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and ".jpg, .png, .webp" in err and "--ext-policy by-kind" in err
    with pytest.raises(ValueError, match=r"didn't find \['jpg'\]"):
        _one_line(out)
    got = _run_recipe(out)  # the recipe names every key: jpg;png;webp
    assert len(got) == n and all(isinstance(img, PIL.Image) for img, _ in got)
    assert json.loads((out / "pack.json").read_text())["recipe"]["keys"] == ["jpg;png;webp", "cls"]


def test_the_recorded_recipe_runs_and_reads_every_sample(tmp_path, capsys):
    index = _mixed(tmp_path)
    n = len(open_index(index))
    out = tmp_path / "s"
    assert main(["pack", index, "-o", str(out), "--samples-per-shard", "5"]) == 0
    printed = capsys.readouterr().out
    recipe = json.loads((out / "pack.json").read_text())["recipe"]
    assert recipe["keys"] == ["jpg", "cls"] and recipe["decode"] == 'decode("pil")'
    assert recipe["python"] in printed and str(out / recipe["urls"]) in printed
    got = _run_recipe(out)
    assert len(got) == n and all(isinstance(img, PIL.Image) for img, _ in got)


def test_audio_and_mixed_sets_get_a_recipe_that_decodes_them_without_torchaudio(tmp_path):
    _, audio = make_indexed(tmp_path, "sounds", n_images=0, n_audio=6, odd_name=False)  # WAV and FLAC
    pack_shards(audio, str(tmp_path / "a"), PackOptions(samples_per_shard=4))
    with tarfile.open(tmp_path / "a" / "data-000000.tar") as t:
        assert {m.name.partition(".")[2] for m in t.getmembers()} == {"flac", "cls", "json"}
    got = _run_recipe(tmp_path / "a")
    assert len(got) == 6
    assert all(isinstance(x, np.ndarray) and rate == 8000 and x.size > 0 for (x, rate), _ in got)
    _, both = make_indexed(tmp_path, "both", n_images=4, n_audio=2, odd_name=False)
    pack_shards(both, str(tmp_path / "b"), PackOptions(samples_per_shard=4))
    got = _run_recipe(tmp_path / "b")
    assert len(got) == 6
    assert sum(isinstance(m, PIL.Image) for m, _ in got) == 4 and sum(isinstance(m, tuple) for m, _ in got) == 2


def test_shuffle_is_the_default_its_seed_recorded_and_reproducible(tmp_path, capsys):
    _, index = make_indexed(tmp_path)
    rows = [open_index(index).path_bytes(i) for i in range(len(open_index(index)))]
    a = pack_shards(index, str(tmp_path / "a"), PackOptions(samples_per_shard=4))
    seed = json.loads((tmp_path / "a" / "pack.json").read_text())["layout"]["shuffle"]
    assert isinstance(seed, int) and a.shuffle == seed
    packed = open_packed_index(str(tmp_path / "a"))
    assert [packed.path_bytes(i) for i in range(len(packed))] != rows  # not index order
    assert main(["pack", index, "-o", str(tmp_path / "b"), "--samples-per-shard", "4", "--shuffle", str(seed)]) == 0
    assert f"seed {seed}" in capsys.readouterr().out
    tars = {k: v for k, v in folder_digests(tmp_path / "a").items() if k.endswith((".tar", ".arrow"))}
    assert tars == {k: v for k, v in folder_digests(tmp_path / "b").items() if k.endswith((".tar", ".arrow"))}
    assert main(["pack", index, "-o", str(tmp_path / "c"), "--samples-per-shard", "4", "--no-shuffle"]) == 0
    assert "index order" in capsys.readouterr().out
    packed = open_packed_index(str(tmp_path / "c"))
    assert [packed.path_bytes(i) for i in range(len(packed))] == rows
    assert json.loads((tmp_path / "c" / "pack.json").read_text())["layout"]["shuffle"] is None


def test_a_resume_and_the_parts_of_a_job_array_keep_the_recorded_seed(tmp_path):
    _, index = make_indexed(tmp_path)
    out = tmp_path / "s"
    pack_shards(index, str(out), PackOptions(samples_per_shard=3))
    before = folder_digests(out)
    (out / "data-000002.tar").unlink()
    (out / "index.arrow").unlink()
    again = pack_shards(index, str(out), PackOptions(samples_per_shard=3))  # no seed given: the recorded one
    assert again.written == 1 and again.resumed and folder_digests(out) == before
    parts = tmp_path / "parts"
    cmd = [PY, "-m", "dsclean", "pack", index, "-o", str(parts), "--samples-per-shard", "3", "-q"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]),
    }
    procs = [subprocess.Popen([*cmd, "--part", f"{i}/3"], env=env) for i in range(3)]  # racing, each its own seed
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0]
    assert main(["pack", index, "-o", str(parts), "--samples-per-shard", "3", "--finish", "-q"]) == 0
    recorded = json.loads((parts / "pack.json").read_text())["layout"]["shuffle"]
    assert isinstance(recorded, int)
    whole = tmp_path / "whole"
    pack_shards(index, str(whole), PackOptions(samples_per_shard=3, shuffle=recorded))
    tars = {k: v for k, v in folder_digests(parts).items() if k.endswith(".tar") or k == "index.arrow"}
    assert tars == {k: v for k, v in folder_digests(whole).items() if k.endswith(".tar") or k == "index.arrow"}


def _class_ordered(tmp_path: Path) -> str:
    root = tmp_path / "classes"
    for c in range(5):
        for i in range(8):
            write(root, f"c{c}/img{i:02d}.png", synth.png(8, 8, seed=100 * c + i))
    index = str(tmp_path / "classes.arrow")
    build_index(str(root), index)
    return index


def test_verify_warns_about_a_set_in_class_blocks_and_not_about_a_shuffled_one(tmp_path, capsys):
    index = _class_ordered(tmp_path)
    blocks, mixed = tmp_path / "blocks", tmp_path / "mixed"
    pack_shards(index, str(blocks), PackOptions(samples_per_shard=8, shuffle=None))
    pack_shards(index, str(mixed), PackOptions(samples_per_shard=8, shuffle=3))
    report = verify_shards(str(blocks))
    assert report.ok and len(report.warnings) == 1
    assert "5 of 5 shards" in report.warnings[0] and "--shuffle SEED" in report.warnings[0]
    assert main(["verify", str(blocks)]) == 0  # a warning: the exit code is unchanged
    out = capsys.readouterr().out
    assert "warning:" in out and "class blocks" in out
    report = verify_shards(str(mixed))
    assert report.ok and report.warnings == []
    assert main(["verify", str(mixed), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == []


@pytest.mark.parametrize("template", ["data-{:06d}.tar", "{}.tar", "part{0:03d}-x.tar", "s{:2d}.tar", "a{{b}}{}.tar"])
@pytest.mark.parametrize("shards", [1, 12, 1001])
def test_the_recipes_urls_expand_to_the_shard_names_or_are_left_out(template, shards):
    braceexpand = pytest.importorskip("braceexpand").braceexpand
    pattern = brace_pattern(template, shards)
    names = [cached(template).name(k) for k in range(shards)]
    if pattern is None:  # space padding, literal braces, or numbers wider than the zero padding
        # (a name with a space or a brace, or numbers wider than the padding: their lengths differ)
        assert any(c in "".join(names) for c in " {}") or len({len(n) for n in names}) > 1
    else:
        assert list(braceexpand(pattern)) == names


def test_a_pack_json_older_than_ext_policy_resumes_as_keep_and_bad_options_are_refused(tmp_path, capsys):
    _, index = make_indexed(tmp_path, n_audio=0)
    out = tmp_path / "old"
    pack_shards(index, str(out), PackOptions(samples_per_shard=5, shuffle=2, ext_policy="keep"))
    state = json.loads((out / "pack.json").read_text())
    del state["layout"]["ext_policy"], state["recipe"]  # as packs before --ext-policy wrote it
    (out / "pack.json").write_text(json.dumps(state))
    again = pack_shards(index, str(out), PackOptions(samples_per_shard=5))  # no options: the recorded ones
    assert again.complete and again.written == 0 and again.shuffle == 2 and again.ext_policy == "keep"
    assert main(["pack", index, "-o", str(out), "--samples-per-shard", "5", "--ext-policy", "by-kind"]) == 2
    assert "ext_policy 'keep' (asked: 'by-kind')" in capsys.readouterr().err
    with pytest.raises(UserError, match="--ext-policy must be one of by-kind, keep"):
        pack_shards(index, str(tmp_path / "x"), PackOptions(ext_policy="jpg"))
    with pytest.raises(UserError, match="--shuffle SEED must be a whole number"):
        pack_shards(index, str(tmp_path / "x"), PackOptions(shuffle="sometimes"))
    assert not (tmp_path / "x").exists()
    with pytest.raises(SystemExit) as exit_:
        main(["pack", index, "-o", str(tmp_path / "y"), "--shuffle", "3", "--no-shuffle"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_recipe_of_a_set_where_only_some_samples_have_a_label_reads_them_all(tmp_path):
    from dsclean.pack.extnames import recipe

    shard = tmp_path / "s-0.tar"
    with tarfile.open(shard, "w") as tar:
        for key, members in (("a" * 16, {"cls": b"3", "jpg": synth.png(8, 8)}), ("b" * 16, {"jpg": synth.jpeg(8, 8)})):
            for ext, data in sorted(members.items()):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    some = recipe(["jpg"], "some", "s-0.tar")
    got = list(eval(some["python"], {"webdataset": webdataset, "urls": str(shard)}))
    assert [(img.size, y) for img, y in got] == [((8, 8), 3), ((8, 8), None)]
    with pytest.raises(ValueError, match="didn't find"):  # what the keys of a fully labelled set would do
        list(eval(recipe(["jpg"], "all", "s-0.tar")["python"], {"webdataset": webdataset, "urls": str(shard)}))
    assert recipe(["jpg"], "none", None)["keys"] == ["jpg"]


def test_a_resume_refuses_a_shard_whose_members_are_named_by_another_policy(tmp_path):
    _, index = make_indexed(tmp_path)
    kept, by_kind = tmp_path / "keep", tmp_path / "by-kind"
    pack_shards(index, str(kept), PackOptions(samples_per_shard=5, shuffle=1, ext_policy="keep"))
    pack_shards(index, str(by_kind), PackOptions(samples_per_shard=5, shuffle=1))
    named = {t.name: {m.name.partition(".")[2] for m in tarfile.open(t)} for t in sorted(kept.glob("*.tar"))}
    victim = next(n for n, exts in named.items() if exts - {"jpg", "flac", "cls", "json"})  # a .png or .wav in it
    (by_kind / victim).write_bytes((kept / victim).read_bytes())  # the same samples, named by format
    (by_kind / "index.arrow").unlink()
    with pytest.raises(UserError, match=f"{victim}: sample .* is not named as this pack .--ext-policy by-kind"):
        pack_shards(index, str(by_kind), PackOptions(samples_per_shard=5))
    again = pack_shards(index, str(kept), PackOptions(samples_per_shard=5))  # nothing to do: the warning again
    assert again.written == 0 and again.warnings and ".png" in again.warnings[0]
