"""How the ``dsclean`` command starts: what it imports, its BLAS threads, when the scan's workers start."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from support import synth
from support.files import write


def _run(code: str, env: dict | None = None) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_parser_loads_no_index_stage():
    """`dsclean scan` never needs the index stage: building the parser must not import it (pyarrow)."""
    out = _run("""
        import sys
        from dsclean.cli import build_parser
        build_parser()
        print(sorted(m for m in sys.modules if m.startswith(("dsclean.index", "pyarrow"))))
    """)
    assert out.strip() == "[]"


def test_one_blas_thread_unless_the_user_chose():
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    code = """
        import os
        from dsclean.cli import main
        main(["reasons"])
        print("BLAS", os.environ.get("OPENBLAS_NUM_THREADS"))
    """
    assert _run(code, env).split()[-2:] == ["BLAS", "1"]
    assert _run(code, {**env, "OPENBLAS_NUM_THREADS": "3"}).split()[-2:] == ["BLAS", "3"]


_EARLY = """
    import argparse, sys
    from multiprocessing import forkserver
    from dsclean.cli.scan import _start_workers_early
    root, state, rescan, backend = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
    _start_workers_early(argparse.Namespace(root=root, state_dir=state, rescan=rescan, backend=backend))
    print("STARTED" if forkserver._forkserver._forkserver_pid is not None else "NOT")
    print("SCANNER" if "dsclean.scanning.scanner" in sys.modules else "NO-SCANNER")
"""


def test_a_first_scan_starts_its_workers_before_importing_the_scan(tmp_path):
    """First scan or --rescan: the forkserver starts at once; a re-scan with earlier results may check
    nothing, so it leaves the start to the scan (which starts workers only for files to check)."""
    root, state = tmp_path / "data", tmp_path / "state"
    write(root, "a.jpg", synth.jpeg(16, 16))

    def early(rescan: bool, backend: str = "processes") -> list[str]:
        out = subprocess.run([sys.executable, "-c", textwrap.dedent(_EARLY), str(root), str(state),
                              "1" if rescan else "0", backend], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert early(False) == ["STARTED", "NO-SCANNER"]  # no earlier scan
    root.rename(tmp_path / "elsewhere")
    assert early(True) == ["NOT", "NO-SCANNER"]  # no such root: the scan refuses it at once
    (tmp_path / "elsewhere").rename(root)
    assert early(False, "threads") == ["NOT", "NO-SCANNER"]
    out = subprocess.run([sys.executable, "-m", "dsclean", "scan", str(root), "--dry-run", "--quiet", "--json",
                          "--state-dir", str(state), "--report", str(tmp_path / "r")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["files"] == 1
    assert early(False) == ["NOT", "NO-SCANNER"]  # earlier results: the scan decides
    assert early(True) == ["STARTED", "NO-SCANNER"]
