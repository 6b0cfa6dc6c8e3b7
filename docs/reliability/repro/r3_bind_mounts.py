"""Round 3 (rel24b) adversarial repro: inside-ROOT rules through bind mounts, nested mounts, hard links.

Run as root: PYTHONPATH=. python docs/reliability/repro/r3_bind_mounts.py  (prints one line per case)."""
import contextlib, os, subprocess, sys, tempfile
sys.path.insert(0, "tests")
from support import synth
from support.files import write

PY = sys.executable
results = []


@contextlib.contextmanager
def bind(src, dst):
    os.makedirs(dst, exist_ok=True)
    subprocess.run(["mount", "--bind", src, dst], check=True)
    try:
        yield dst
    finally:
        subprocess.run(["umount", "-l", dst], check=True)


def cli(*args):
    p = subprocess.run([PY, "-m", "dsclean", *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stderr


def case(name, got, want):
    results.append((name, got == want))
    print(("HELD " if got == want else "FAIL ") + f"{name}: got {got}, want {want}")


t = tempfile.mkdtemp(prefix="r3bind")
root = os.path.join(t, "ROOT")
for i in range(6):
    write(root, f"{('cats', 'dogs')[i % 2]}/{i}.jpg", synth.jpeg(24, 24, seed=i))
write(root, "cats/bad.jpg", synth.jpeg(24, 24, seed=50)[:70])
os.makedirs(os.path.join(t, "out"))
code, _ = cli("scan", root, "--report", os.path.join(t, "rep"))
case("baseline scan outside", code, 0)
code, _ = cli("index", root, "-o", os.path.join(t, "i.arrow"))
with bind(os.path.join(root, "cats"), os.path.join(t, "M")) as m:
    case("report -o M/r.html", cli("report", root, "-o", os.path.join(m, "r.html"))[0], 2)
    case("scan --report M/rep", cli("scan", root, "--report", os.path.join(m, "rep"))[0], 2)
    case("merge -o M/merged", cli("merge", os.path.join(t, "rep", "scan_results.parquet"), "-o",
                                  os.path.join(m, "merged"))[0], 2)
    case("index -o M/deep/er/i.arrow", cli("index", root, "-o", os.path.join(m, "deep", "er", "i.arrow"))[0], 2)
    case("pack -o M/s", cli("pack", os.path.join(t, "i.arrow"), "-o", os.path.join(m, "s"))[0], 2)
    with bind(m, os.path.join(t, "M2")) as m2:
        case("nested bind: scan --quarantine M2/Q", cli("scan", root, "--quarantine", os.path.join(m2, "Q"))[0], 2)
    os.symlink(m, os.path.join(t, "L"))
    case("symlink to the bind mount: --quarantine L/Q", cli("scan", root, "--quarantine", os.path.join(t, "L", "Q"))[0], 2)
    case("dups ROOT M", cli("dups", root, m)[0], 2)
    case("dups M ROOT", cli("dups", m, root)[0], 2)
with bind(root, os.path.join(t, "RB")) as rb:  # ROOT itself bound elsewhere
    case("bind of ROOT: scan ROOT --quarantine RB/Q", cli("scan", root, "--quarantine", os.path.join(rb, "Q"))[0], 2)
    case("bind of ROOT: scan RB --quarantine ROOT/Q", cli("scan", rb, "--quarantine", os.path.join(root, "Q"))[0], 2)
    case("dups ROOT RB (same folder)", cli("dups", root, rb)[0], 2)
with bind(t, os.path.join(tempfile.mkdtemp(prefix="r3par"), "P")) as p:  # the parent of ROOT bound elsewhere
    case("bind of ROOT's parent: --quarantine P/ROOT/dogs/Q", cli("scan", root, "--quarantine", os.path.join(p, "ROOT", "dogs", "Q"))[0], 2)
    case("bind of ROOT's parent: --quarantine P/out/Q is fine", cli("scan", root, "--quarantine", os.path.join(p, "out", "Q"))[0], 0)
    subprocess.run([PY, "-m", "dsclean", "restore", os.path.join(p, "out", "Q")], capture_output=True)
case("no mount left: --quarantine out/Q2 fine", cli("scan", root, "--quarantine", os.path.join(t, "out", "Q2"))[0], 0)
subprocess.run([PY, "-m", "dsclean", "restore", os.path.join(t, "out", "Q2")], capture_output=True)
# hard links: three names of one file in three roots, plus a true copy in the first (fresh trees each time)
for k, drop in enumerate("ABC"):
    base = tempfile.mkdtemp(prefix="r3links")
    a, b, c = (os.path.join(base, n) for n in "ABC")
    write(a, "x/p.jpg", synth.jpeg(64, 48, seed=7))
    write(a, "x/copy.jpg", synth.jpeg(64, 48, seed=7))  # a true copy (another inode)
    for r in (b, c):
        os.makedirs(os.path.join(r, "x"))
        os.link(os.path.join(a, "x", "p.jpg"), os.path.join(r, "x", "p.jpg"))
    code, _ = cli("dups", a, b, c, "--quarantine", os.path.join(base, "q"), "--drop-from", os.path.join(base, drop),
                  "--near", "0", "-o", os.path.join(base, "g.jsonl"))
    links_kept = all(os.path.exists(os.path.join(r, "x", "p.jpg")) for r in (b, c))
    a_left = sum(os.path.exists(os.path.join(a, "x", n)) for n in ("p.jpg", "copy.jpg"))
    groups = [line for line in open(os.path.join(base, "g.jsonl"))]
    case(f"hard links x3 + a true copy, --drop-from {drop}: links in B, C kept, one of A's pair kept, one group",
         (code, links_kept, a_left, len(groups)), (0, True, 1, 1))
print(f"{sum(ok for _, ok in results)} of {len(results)} held")
