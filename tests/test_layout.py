"""The package layout is the pipeline: stage packages, no import cycles, lazy heavy imports."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile

import pytest

import dsclean

PKG = os.path.dirname(os.path.abspath(dsclean.__file__))
REPO = os.path.dirname(PKG)

#: stage -> the stages it may import (common top-level modules are open to all)
ALLOWED = {
    "quality": set(),  # pure per-file facts: numpy, Pillow, soundfile and the common modules only
    "loaders": {"data"},  # the training loader profiles: the default loaders are dsclean.data.loaders' functions
    "scanning": {"quality", "loaders"},  # the scan will compute facts from its own decode; scan --loader
    "index": {"scanning", "loaders", "storage"},  # dsclean index s3://...: the listing, reads, last scan
    "data": {"index", "loaders", "storage"},  # IndexedDataset over a URL root reads objects
    "diagnose": {"index", "data"},
    "pack": {"scanning", "index", "data", "storage"},  # pack s3://... (read, write), verify s3://...
    "dups": {"scanning", "index", "quality", "storage"},  # dups over a bucket prefix (reads, listing, quarantine)
    # scan results, the quarantine journal, the worker guards, dups' moves; a bucket's objects, shard members
    "report": {"scanning", "dups", "storage", "shardsets"},
    "fromlog": {"scanning", "index", "data", "pack"},  # quarantine --from-log: re-checks files and shard samples
    "training": {"data", "diagnose"},  # wraps any dataset (names IndexedDataset samples), explains worker deaths
    "storage": {"scanning", "quality"},  # object storage: listing, reads, quarantine; the scan's checker and flags
    "shardsets": {
        "scanning",
        "pack",
        "quality",
        "storage",
    },  # other tools' shards: the scan's checker and flags; pack's tar layout; shard sets in a bucket
    "cli": {
        "scanning",
        "index",
        "data",
        "diagnose",
        "pack",
        "quality",
        "dups",
        "report",
        "fromlog",
        "loaders",
        "storage",
        "shardsets",
    },
}
COMMON = {
    "reasons",
    "formats",
    "errors",
    "atomic",
    "locations",
    "argtypes",
    "hashing",
    "jsonpaths",
    "failures",
    "openfile",
    "denylist",
    "rechecked",
    "content",
    "schema",
    "interrupts",
    "inflight",
    "splits",
}  # stop on SIGINT/SIGTERM, bounded task submission: the scan's, dups' and pack's
#: the floor: modules every stage may derive from, importing nothing of the package but these names
FLOOR = {"dsclean.schema": {"dsclean.hashing"}}  # the results and facts columns, defined once
ENTRY = {"dsclean", "dsclean.__main__"}  # the public API and `python -m dsclean` may import any stage


def _modules() -> dict[str, str]:
    """dotted name -> file, for every module of the package."""
    found = {}
    for dirpath, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, f), os.path.dirname(PKG))[:-3].replace(os.sep, ".")
                found[rel.removesuffix(".__init__")] = os.path.join(dirpath, f)
    return found


def _imports(name: str, path: str, modules: dict[str, str], typing: bool = True) -> set[str]:
    """Modules of the package that ``name`` imports anywhere (top level or inside functions); with ``typing``
    False, not those only type checkers see (``if TYPE_CHECKING:``: never run, so never an import cycle)."""
    is_pkg = path.endswith("__init__.py")
    package = name if is_pkg else name.rpartition(".")[0]
    out = set()
    tree = ast.parse(open(path).read())
    skip = (
        set()
        if typing
        else {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and getattr(block.test, "id", None) == "TYPE_CHECKING"
            for n in ast.walk(block)
        }
    )
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                out.add(full if full in modules else target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in modules and m != name}


def _stage(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "common"  # `from .. import __version__`
    return "common" if len(parts) == 2 and parts[1] in COMMON else parts[1]


def test_stages_import_only_upstream_stages():
    modules = _modules()
    for name, path in modules.items():
        if name in ENTRY:
            continue
        stage = _stage(name)
        allowed = ALLOWED.get(stage, set()) | {stage}
        for dep in _imports(name, path, modules):
            dep_stage = _stage(dep)
            if dep_stage == "common" and stage != "common":
                continue
            assert dep_stage in allowed, f"{name} imports {dep}: stage {stage} may not depend on {dep_stage}"


def test_the_floor_imports_nothing_above_it():
    modules = _modules()
    for name, allowed in FLOOR.items():
        assert _imports(name, modules[name], modules) <= allowed, f"{name} must stay below every stage"


def test_no_import_cycles():
    modules = _modules()
    graph = {name: _imports(name, path, modules, typing=False) - {"dsclean"} for name, path in modules.items()}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if dep.startswith(node + "."):
                continue  # a package's __init__ naming its own submodules is not a cycle
            if state.get(dep) == 1:
                cycle = trail[trail.index(dep) :] + [dep] if dep in trail else [node, dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, trail + [dep])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


#: private names imported across modules before this rule; each is for its module's owner to make public
PRIVATE_IMPORTS_LEFT = {
    ("dsclean.rechecked", "dsclean.failures", "_lines"),
    ("dsclean.denylist", "dsclean.failures", "_lines"),
    ("dsclean.scanning.discover", "dsclean.formats", "_EXT_NO_DOT"),
    ("dsclean.scanning.scanner", "dsclean.scanning.verdict", "_FS_ENCODING"),
}


def test_no_module_imports_another_modules_private_names():
    # What modules share is public in the module that owns it (the quarantine package: journal, moves, ...).
    modules = _modules()
    found = set()
    for name, path in modules.items():
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("dsclean")):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                found |= {
                    (name, target, a.name) for a in node.names if a.name.startswith("_") and not a.name.startswith("__")
                }
    assert not found - PRIVATE_IMPORTS_LEFT, sorted(found - PRIVATE_IMPORTS_LEFT)


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_import_dsclean_is_cheap():
    loaded = _run("import sys, dsclean; print(sorted(m for m in ('torch', 'pyarrow', 'joblib') if m in sys.modules))")
    assert loaded == "[]"


def test_the_record_modules_import_no_pyarrow():
    # checking processes build Verdicts and Facts: the one schema they are checked against stays pyarrow-free
    loaded = _run(
        "import sys, dsclean.schema, dsclean.scanning.verdict, dsclean.quality.facts; print('pyarrow' in sys.modules)"
    )
    assert loaded == "False"


def test_scan_index_info_import_no_torch(tmp_path):
    from support import synth
    from support.files import write

    write(tmp_path / "data", "cats/a.jpg", synth.jpeg(32, 32))
    write(tmp_path / "data", "dogs/b.png", synth.png(32, 32))
    root, report, index = tmp_path / "data", tmp_path / "report", tmp_path / "i.arrow"
    code = (
        "import sys, dsclean.cli\n"
        f"assert dsclean.cli.main(['scan', {str(root)!r}, '--report', {str(report)!r}, '--backend', 'threads', '-q']) == 0\n"
        f"assert dsclean.cli.main(['index', {str(root)!r}, '-o', {str(index)!r}, '-q']) == 0\n"
        f"assert dsclean.cli.main(['info', {str(index)!r}]) == 0\n"
        "print('torch' in sys.modules)\n"
    )
    assert _run(code).splitlines()[-1] == "False"


def test_public_names_survive_importing_every_subpackage():
    # A subpackage named like a public function would replace it as an attribute of dsclean.
    code = (
        "import importlib, pkgutil, dsclean\n"
        "for m in pkgutil.walk_packages(dsclean.__path__, 'dsclean.'):\n"
        "    if m.name != 'dsclean.__main__':\n"
        "        importlib.import_module(m.name)\n"
        "print(all(getattr(dsclean, n) is getattr(importlib.import_module('dsclean.' + dsclean._EXPORTS[n]), n)"
        " for n in dsclean.__all__), callable(dsclean.scan))"
    )
    assert _run(code) == "True True"


def test_wheel_has_every_stage_and_no_test_support(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            REPO,
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = [f for f in os.listdir(tmp_path) if f.endswith(".whl")]
    names = zipfile.ZipFile(tmp_path / wheel).namelist()
    packages = {os.path.dirname(n) for n in names if n.endswith("__init__.py")}
    assert {
        "dsclean",
        "dsclean/scanning",
        "dsclean/index",
        "dsclean/data",
        "dsclean/diagnose",
        "dsclean/pack",
        "dsclean/cli",
        "dsclean/quality",
        "dsclean/dups",
        "dsclean/report",
    } <= packages
    assert not [n for n in names if "synth" in n or n.startswith("tests/") or "/support/" in n]
    assert "dsclean/scanning/check_image.py" in names
    assert {"dsclean/report/assets/report.css", "dsclean/report/assets/report.js"} <= set(
        names
    )  # the page's own CSS/JS
