#!/usr/bin/env python3
"""Benchmark: each format's checker against the C checker people use for it, side by side, as whole processes.

Needs the reference tools (Debian/Ubuntu; not needed by CI or the tests):

    apt-get install -y jpeginfo pngcheck flac

Generates valid files (so every contender should pass all of them; the table shows what each
flagged), then times, interleaved, best of --repeats, every contender as a whole process
(start-up included) over the same files, read from the page cache:

- PNG (600 photo-like PNGs):   ``pngcheck -q``;
- FLAC (2,000 short FLACs):    ``flac -t -s``, and a bare ``soundfile.read`` loop;
- WAV (2,000 short WAVs):      a bare ``soundfile.read`` loop;
- JPEG (3,000 photo JPEGs):    ``jpeginfo -c``, and a loop of libjpeg-turbo's own decode as the
                               checker does it (header + strict 1/8-scale grey decode: the floor);
- M4A (500 short AAC .m4a):    ``ffmpeg -v error -i f -f null -`` per file (when ffmpeg is installed), and a
                               loop of PyAV decoding every packet (the same FFmpeg decoder the checker uses: the floor);

against, for each format:

- ``dsclean checker, --facts none``: one process calling ``dsclean.scanning.check.check_file``
  with ``CheckOptions(facts=False)`` on every file (the checker itself: one read per file, every
  rule; no content hash, no quality facts: what the speed bars of issue 11 are for); the same with
  the default options (facts on: the content hash and the quality facts), and for FLAC with the
  STREAMINFO MD5 check on;
- ``dsclean scan --jobs 1 --facts none``: the whole command (worker pool start-up, results,
  cache) as the issue's bars measure it; and ``dsclean scan --jobs 1`` with the default options.

Every contender is one process over all the files (as ``dsclean scan`` is): a Python process
pays its start-up and imports (~0.25 CPU-s with numpy) once, as a C tool does. dsclean's own
modules are byte-compiled first (``compileall``, into the ignored ``__pycache__`` folders), as
``pip install`` does for an installed package and for the reference's Python packages (numpy,
soundfile): in a source tree run with ``PYTHONDONTWRITEBYTECODE=1`` every dsclean process would
otherwise compile every module it imports from source at each start (~0.3-0.4 CPU-s for a scan's
main process and forkserver together). ``--no-compile`` measures that case.
Ratios are speeds against the format's reference, measured in the same run (higher is better
for dsclean): per CPU-second of the whole process tree (user + system time of every process,
workers included: "per core", and steady on a shared machine) and per wall-clock second. Then the cost of the content hash (BLAKE2b-128 of the bytes already read) per
format: hashing the files' bytes alone against the ``--facts none`` checker's time for the same files
(what ``--facts all`` adds on top of that, besides the quality facts: ``scripts/bench_facts.py``).

    python scripts/bench_checkers.py [--png 600] [--flac 2000] [--wav 2000] [--jpeg 3000] [--m4a 500] [--repeats 3]
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))  # tests/support: media synthesis
from support import synth  # noqa: E402

PY = sys.executable
UNCOMPILED: str | None = None  # a copy of this tree's dsclean without bytecode (--uncompiled-row)
BASELINE: str | None = None  # another tree (e.g. `git archive main`, byte-compiled), run through PYTHONPATH
BATCH = 100_000  # files per process: all of them

CHECKER_LOOP = """
import sys
from dsclean.scanning.check import CheckOptions, check_file
mode, root = sys.argv[1], sys.argv[2]
options = CheckOptions(flac_md5=mode == "md5", facts=mode != "none")
counts = {}
for rel in sys.argv[3:]:
    v = check_file(root, rel, options)
    counts[v.status] = counts.get(v.status, 0) + 1
print(counts.get("bad", 0), counts.get("warn", 0))
"""

SF_LOOP = """
import sys, soundfile
bad = 0
for p in sys.argv[1:]:
    try:
        soundfile.read(p)
    except Exception:
        bad += 1
print(bad, 0)
"""

PYAV_LOOP = """
import sys, av
bad = 0
for p in sys.argv[1:]:
    try:
        with av.open(p) as c:
            s = c.streams.audio[0]
            for packet in c.demux(s):
                s.decode(packet)
    except Exception:
        bad += 1
print(bad, 0)
"""

# one ffmpeg process per file (it checks one input at a time); a failing file prints BAD
FFMPEG_LOOP = 'for f; do ffmpeg -nostdin -v error -i "$f" -f null - 2>/dev/null || echo BAD; done'

JPEG_FLOOR = """
import sys, simplejpeg
bad = 0
for p in sys.argv[1:]:
    with open(p, "rb") as f:
        data = f.read()
    try:
        h, w, cs, _ = simplejpeg.decode_jpeg_header(data)
        simplejpeg.decode_jpeg(data, colorspace="CMYK" if cs in ("CMYK", "YCCK") else "GRAY", strict=True,
                               min_height=1, min_width=1, fastdct=True, fastupsample=True)
    except ValueError:
        bad += 1
print(bad, 0)
"""

HASH_COST = """
import sys, time
from dsclean.hashing import content_hash
from dsclean.scanning.check import CheckOptions, check_file
root, rels = sys.argv[1], sys.argv[2:]
none = CheckOptions(facts=False)
datas = []
for rel in rels:
    with open(root + "/" + rel, "rb") as f:
        datas.append(f.read())
for rel in rels[:50]:
    check_file(root, rel, none)  # warm up: decoders loaded
best_hash = best_check = float("inf")
for _ in range(3):
    t = time.perf_counter()
    for d in datas:
        content_hash(d)
    best_hash = min(best_hash, time.perf_counter() - t)
    t = time.perf_counter()
    for rel in rels:
        check_file(root, rel, none)
    best_check = min(best_check, time.perf_counter() - t)
print(best_hash / len(rels), best_check / len(rels))
"""


# ---------------------------------------------------------------------------- data


def make_pngs(folder: str, n: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    bases = [synth.photo_like(1024, 768, seed=seed + i) for i in range(6)]
    for i in range(n):
        x, y = (int(v) for v in rng.integers(0, 400, 2))
        img = bases[i % len(bases)].crop((x, y, x + 512, y + 384))
        _write(folder, f"p{i:05d}.png", synth.encode_image(img, "PNG"))


def make_jpegs(folder: str, n: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    bases = [synth.photo_like(1024, 1024, seed=seed + i) for i in range(8)]
    for i in range(n):
        x, y = (int(v) for v in rng.integers(0, 512, 2))
        img = bases[i % len(bases)].crop((x, y, x + 512, y + 512 - int(rng.integers(0, 128))))
        data = synth.encode_image(img, "JPEG", quality=int(rng.integers(75, 96)), progressive=bool(rng.random() < 0.2))
        _write(folder, f"j{i:05d}.jpg", data)


def make_audio(folder: str, n: int, fmt: str, seed: int = 0) -> None:
    """Short stereo 44.1 kHz 16-bit clips of 0.5-1.5 s: tones with a little noise, like speech or music snippets."""
    import soundfile as sf

    rng = np.random.default_rng(seed)
    for i in range(n):
        x = synth.tone(float(rng.uniform(0.5, 1.5)), 44100, channels=2, seed=i)
        buf = io.BytesIO()
        sf.write(buf, x, 44100, format=fmt.upper(), subtype="PCM_16")
        _write(folder, f"a{i:05d}.{fmt}", buf.getvalue())


def make_m4a(folder: str, n: int, seed: int = 0) -> None:
    """Short stereo 44.1 kHz AAC clips of 0.5-1.5 s in .m4a, encoded by FFmpeg's AAC encoder through PyAV."""
    from support import audiogen

    rng = np.random.default_rng(seed)
    for i in range(n):
        _write(folder, f"a{i:05d}.m4a", audiogen.aac("ipod", float(rng.uniform(0.5, 1.5)), 44100, channels=2))


def _children_cpu() -> float:
    """User + system CPU seconds of every finished child process so far (their children included once reaped)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _compile_dsclean() -> str:
    """Byte-compile the dsclean package the contenders import (this tree's), as an installed package is."""
    import compileall

    folder = os.path.join(REPO, "dsclean")
    ok = compileall.compile_dir(folder, quiet=1)
    return f"dsclean byte-compiled ({folder}): {'ok' if ok else 'FAILED'}"


def _subreaper() -> None:
    """Adopt orphaned descendants (a scan's forkserver, resource trackers), so their CPU is counted when reaped."""
    import ctypes

    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER (Linux)


def _reap(timeout: float = 10.0) -> None:
    """Wait for adopted descendants (they exit with the scan's process) so ``_children_cpu`` includes them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.005)


def _write(folder: str, name: str, data: bytes) -> None:
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


# ---------------------------------------------------------------------------- contenders


def _batches(cmd: list[str], files: list[str], cwd: str) -> tuple[int, int]:
    """Run ``cmd + files`` (in batches of BATCH); sum the (bad, warn) each prints (or count failing files)."""
    bad = warn = 0
    for start in range(0, len(files), BATCH):
        out = subprocess.run(cmd + files[start : start + BATCH], cwd=cwd, capture_output=True, text=True)
        b, w = out.stdout.split()[-2:] if cmd[0] == PY else ("0", "0")
        bad, warn = bad + int(b), warn + int(w)
        if cmd[0] != PY:
            bad += _tool_failures(cmd[0], out)
    return bad, warn


def _tool_failures(tool: str, out: subprocess.CompletedProcess) -> int:
    name = os.path.basename(tool)
    if name == "jpeginfo":
        return sum(1 for line in out.stdout.splitlines() if line.strip() and not line.rstrip().endswith("OK"))
    if name == "pngcheck":  # -q: one line per file with a problem, nothing else
        return sum(1 for line in out.stdout.splitlines() if line.strip())
    if name == "flac":
        return out.stderr.count("ERROR")
    if name == "sh":  # FFMPEG_LOOP
        return out.stdout.count("BAD")
    return 0


def checker_loop(folder: str, files: list[str], mode: str = "default") -> tuple[int, int]:
    return _batches([PY, "-c", CHECKER_LOOP, mode, folder], files, folder)


def dsclean_scan(folder: str, files: list[str], *options: str, src: str | None = None) -> tuple[int, int]:
    """A whole ``dsclean scan --jobs 1`` (a fresh report and state folder); ``src``: run the dsclean
    found there (through PYTHONPATH: a baseline tree, or an uncompiled copy of this one) instead."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # an uncompiled copy stays uncompiled
    with tempfile.TemporaryDirectory() as report:
        proc = subprocess.run(
            [
                PY,
                "-c",
                "import sys, dsclean, dsclean.cli; print(dsclean.__file__, file=sys.stderr); "
                "sys.exit(dsclean.cli.main())",
                "scan",
                folder,
                "--jobs",
                "1",
                "--dry-run",
                "--rescan",
                "--quiet",
                "--json",
                "--report",
                report,
                "--state-dir",
                os.path.join(report, "state"),
                *options,
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=report,
        )
        _reap()
    import json

    if proc.returncode not in (0, 1):
        raise RuntimeError(f"dsclean scan failed ({proc.returncode}): {proc.stderr[-2000:]}")
    used = os.path.dirname(os.path.dirname(os.path.abspath(proc.stderr.splitlines()[0])))
    if used != os.path.abspath(src or REPO):
        raise RuntimeError(f"the scan ran the dsclean of {used}, not of {src or REPO}")

    summary = json.loads(proc.stdout)
    return summary.get("bad", 0), sum(summary.get("warn_reasons", {}).values())


def contenders(fmt: str, folder: str, files: list[str]) -> list[tuple[str, object]]:
    """(name, fn) for one format; fn() -> (bad, warn), or None when the tool is not installed. The first is the reference."""
    tool = {"png": "pngcheck", "flac": "flac", "jpeg": "jpeginfo", "m4a": "ffmpeg"}.get(fmt)
    exe = shutil.which(tool) if tool else None
    refs = {
        "png": [("pngcheck -q", lambda: _batches([exe, "-q"], files, folder) if exe else None)],
        "flac": [
            ("flac -t -s", lambda: _batches([exe, "-t", "-s"], files, folder) if exe else None),
            ("soundfile.read loop", lambda: _batches([PY, "-c", SF_LOOP], files, folder)),
        ],
        "wav": [("soundfile.read loop", lambda: _batches([PY, "-c", SF_LOOP], files, folder))],
        "m4a": [
            (
                "ffmpeg -v error -i f -f null - (a process per file)",
                lambda: _batches(["sh", "-c", FFMPEG_LOOP, "sh"], files, folder) if exe else None,
            ),
            ("PyAV decode loop (every packet: the floor)", lambda: _batches([PY, "-c", PYAV_LOOP], files, folder)),
        ],
        "jpeg": [
            ("jpeginfo -c", lambda: _batches([exe, "-c"], files, folder) if exe else None),
            (
                "libjpeg-turbo floor (header + strict 1/8 grey decode loop)",
                lambda: _batches([PY, "-c", JPEG_FLOOR], files, folder),
            ),
        ],
    }[fmt]
    extra = [("dsclean checker, FLAC MD5 on (CheckOptions(flac_md5=True))", lambda: checker_loop(folder, files, "md5"))]
    return refs + [
        ("dsclean checker, --facts none (check_file loop)", lambda: checker_loop(folder, files, "none")),
        ("dsclean checker, default options (facts on)", lambda: checker_loop(folder, files)),
        *(extra if fmt == "flac" else []),
        ("dsclean scan --jobs 1 --facts none", lambda: dsclean_scan(folder, files, "--facts", "none")),
        *(
            [
                (
                    "dsclean scan --jobs 1 --facts none, not byte-compiled (source tree, PYTHONDONTWRITEBYTECODE=1)",
                    lambda: dsclean_scan(folder, files, "--facts", "none", src=UNCOMPILED),
                )
            ]
            if UNCOMPILED
            else []
        ),
        *(
            [
                (
                    "dsclean scan --jobs 1 --facts none, baseline tree",
                    lambda: dsclean_scan(folder, files, "--facts", "none", src=BASELINE),
                )
            ]
            if BASELINE
            else []
        ),
        ("dsclean scan --jobs 1 (default options)", lambda: dsclean_scan(folder, files)),
    ]


def bench_format(fmt: str, n: int, repeats: int, base_dir: str) -> list[str]:
    folder = os.path.join(base_dir, fmt)
    os.makedirs(folder)
    t0 = time.perf_counter()
    {"png": make_pngs, "jpeg": make_jpegs, "m4a": make_m4a}.get(fmt, lambda f, k: make_audio(f, k, fmt))(folder, n)
    files = sorted(os.listdir(folder))
    mb = sum(os.path.getsize(os.path.join(folder, f)) for f in files) / 1e6
    for f in files:  # warm the page cache
        with open(os.path.join(folder, f), "rb") as fh:
            fh.read()
    print(f"{fmt}: generated {len(files)} files ({mb:.1f} MB) in {time.perf_counter() - t0:.0f} s", flush=True)
    entries = contenders(fmt, folder, files)
    walls: dict[str, list[float]] = {name: [] for name, _ in entries}
    cpus: dict[str, list[float]] = {name: [] for name, _ in entries}
    flagged: dict[str, tuple[int, int] | None] = {}
    for _ in range(repeats):  # interleaved: the machine is shared and noisy
        for name, fn in entries:
            before, start = _children_cpu(), time.perf_counter()
            result = fn()
            walls[name].append(time.perf_counter() - start)
            cpus[name].append(_children_cpu() - before)
            flagged[name] = result
    ref = next(name for name, _ in entries if flagged[name] is not None)
    base_cpu, base_wall = min(cpus[ref]), min(walls[ref])
    lines = [
        f"\n### {fmt.upper()}: {len(files):,} files, {mb:.1f} MB (whole processes, start-up included; best of {repeats})\n",
        f"| contender | CPU ms per file | files per CPU-second | vs {ref}, CPU | vs {ref}, wall | flagged bad / warn |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, _ in entries:
        if flagged[name] is None:
            lines.append(f"| {name} | not installed (apt-get install -y jpeginfo pngcheck flac ffmpeg) | | | | |")
            continue
        cpu, wall = min(cpus[name]), min(walls[name])
        lines.append(
            f"| {name} | {cpu / len(files) * 1e3:.2f} | {len(files) / cpu:,.0f} | {base_cpu / cpu:.2f}x | "
            f"{base_wall / wall:.2f}x | {flagged[name][0]} / {flagged[name][1]} |"
        )
    hash_s, check_s = (
        float(x)
        for x in subprocess.run(
            [PY, "-c", HASH_COST, folder, *files[:1000]], capture_output=True, text=True, cwd=folder
        ).stdout.split()
    )
    lines.append(
        f"\ncontent hash: {hash_s * 1e6:.0f} µs per file = {hash_s / check_s:.1%} of the --facts none checker's "
        f"{check_s * 1e6:.0f} µs per file (in-process, best of 3, {min(len(files), 1000)} files)"
    )
    print("\n".join(lines), flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--png", type=int, default=600)
    ap.add_argument("--flac", type=int, default=2000)
    ap.add_argument("--wav", type=int, default=2000)
    ap.add_argument("--jpeg", type=int, default=3000)
    ap.add_argument("--m4a", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--only", choices=["png", "flac", "wav", "jpeg", "m4a"], action="append", help="run only these formats"
    )
    ap.add_argument(
        "--no-compile",
        action="store_true",
        help="do not byte-compile dsclean first (measures a source tree without __pycache__)",
    )
    ap.add_argument(
        "--uncompiled-row",
        action="store_true",
        help="add a row: the scan from a copy of this tree's dsclean without bytecode (compiled at every start)",
    )
    ap.add_argument(
        "--baseline",
        metavar="DIR",
        help="add a row: the scan of the dsclean in DIR (e.g. `git archive main` unpacked; byte-compiled first)",
    )
    args = ap.parse_args()
    global UNCOMPILED, BASELINE
    _subreaper()
    bytecode = (
        "dsclean not byte-compiled (--no-compile): "
        + (
            "PYTHONDONTWRITEBYTECODE is set, every process compiles it from source"
            if os.environ.get("PYTHONDONTWRITEBYTECODE")
            else "caches as Python left them"
        )
        if args.no_compile
        else _compile_dsclean()
    )
    print(bytecode, flush=True)
    base = tempfile.mkdtemp(prefix="dsclean-bench-checkers-")
    if args.uncompiled_row:
        UNCOMPILED = os.path.join(base, "uncompiled")
        shutil.copytree(
            os.path.join(REPO, "dsclean"),
            os.path.join(UNCOMPILED, "dsclean"),
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    if args.baseline:
        import compileall

        BASELINE = os.path.abspath(args.baseline)
        compileall.compile_dir(os.path.join(BASELINE, "dsclean"), quiet=1)
    load_before = os.getloadavg()
    out = []
    try:
        for fmt in args.only or ["png", "flac", "wav", "jpeg", "m4a"]:
            out += bench_format(fmt, getattr(args, fmt), args.repeats, base)
    finally:
        shutil.rmtree(base)
    load_after = os.getloadavg()
    print(
        "\n".join(
            [
                "",
                f"machine: {platform.node()}, {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}",
                f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
                f"load average before / after: {load_before[0]:.1f} / {load_after[0]:.1f} (other processes were running)",
                "command: python scripts/bench_checkers.py " + " ".join(sys.argv[1:]),
                bytecode,
            ]
        )
    )


if __name__ == "__main__":
    main()
