"""Special files and hostile counts in a packed set, against every command that reads one (subprocess, timeout).
Usage: special.py PACKED_DIR WORK"""

import json
import os
import shutil
import subprocess
import sys

src, work = sys.argv[1], sys.argv[2]
py = sys.executable


def fresh(name):
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    return d


def run(args, code=None):
    try:
        r = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=60)
    except subprocess.TimeoutExpired:
        return "HANG", ""
    tb = "Traceback" in r.stderr and "SampleError" not in r.stderr
    return r.returncode, ("TRACEBACK " if tb else "") + (r.stderr.strip().splitlines() or [""])[-1][:160]


def ds(d):
    return [
        py,
        "-c",
        f"from dsclean import IndexedDataset\ntry:\n ds=IndexedDataset({d!r}, loader=lambda f: f.read()); [ds[i] for i in range(len(ds))]; print('served', len(ds))\nexcept Exception as e:\n print('refused', type(e).__name__, str(e)[:150]); raise SystemExit(5)",
    ]


cases = []


def special(name, make):
    d = fresh(name)
    make(d)
    for cmd in (
        ["verify", d],
        ["info", os.path.join(d, "index.arrow")],
        ["probe", d, "--workers", "1", "--batches", "2"],
    ):
        cases.append((name, cmd[0], *run([py, "-m", "dsclean", *cmd])))
    cases.append((name, "IndexedDataset", *run(ds(d))))


def repl(d, n, how):
    p = os.path.join(d, n)
    os.unlink(p)
    how(p)


special("shard-fifo", lambda d: repl(d, "data-000001.tar", os.mkfifo))
special(
    "shard-link-to-fifo",
    lambda d: (
        os.mkfifo(os.path.join(d, "f")),
        repl(d, "data-000001.tar", lambda p: os.symlink(os.path.join(d, "f"), p)),
    ),
)
special("shard-dev-zero", lambda d: repl(d, "data-000001.tar", lambda p: os.symlink("/dev/zero", p)))
special("shard-directory", lambda d: repl(d, "data-000001.tar", os.mkdir))
special("shardindex-fifo", lambda d: repl(d, "shardindex.json", os.mkfifo))
special("index-fifo", lambda d: repl(d, "index.arrow", os.mkfifo))
special("index-dev-zero", lambda d: repl(d, "index.arrow", lambda p: os.symlink("/dev/zero", p)))
special("index-empty", lambda d: open(os.path.join(d, "index.arrow"), "w").close())


def shardlist(d, change):
    p = os.path.join(d, "shardindex.json")
    j = json.load(open(p))
    change(j)
    json.dump(j, open(p, "w"))


special("nsamples-huge", lambda d: shardlist(d, lambda j: j["shardlist"][0].update(nsamples=10**18)))
special("filesize-negative", lambda d: shardlist(d, lambda j: j["shardlist"][0].update(filesize=-5)))
special(
    "shardlist-10k-entries",
    lambda d: shardlist(
        d,
        lambda j: j["shardlist"].extend([{"url": f"x{k}.tar", "nsamples": 1, "filesize": 10240} for k in range(10000)]),
    ),
)
for c in cases:
    print(" | ".join(map(str, c)))
print(
    "cases",
    len(cases),
    "hangs",
    sum(c[2] == "HANG" for c in cases),
    "tracebacks",
    sum("TRACEBACK" in str(c[3]) for c in cases),
)
