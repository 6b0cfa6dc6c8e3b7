"""How the ``dsclean`` command starts: what it imports, its BLAS threads, when the scan's workers start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from support import synth
from support.files import write


def _run(code: str, env: dict | None = None) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, env=env
    )
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


def test_a_first_scan_imports_no_pyarrow_compute_nor_acero(tmp_path):
    """The scan's own process writes a first scan's results, cache and the set's norm (issue 27's pass) with Arrow's
    kernels called by name: it never imports ``pyarrow.compute`` (~0.1 CPU-s: it wraps ~290 kernels), Acero or
    ``pyarrow.dataset``; nor ``numpy.ma``, which ``pa.array`` of a numpy array imports (~25 ms, issue 29); nor
    ``pyarrow.parquet``, whose ``pyarrow.fs`` loads OpenSSL and the cloud file systems (~50 M instructions, issue 29): the
    results are written and read back through ``pyarrow._parquet`` (scanning.parquetio); nor joblib, to count the
    usable cores of a default ``--jobs 0`` (~200 M instructions, issue 29)."""
    root = tmp_path / "data"
    for i in range(3):
        write(root / "cats", f"{i}.jpg", synth.jpeg(16, 16, seed=i))
    write(root / "dogs", "a.wav", synth.encode_audio(synth.tone(), 16_000, "WAV"))
    out = _run(f"""
        import sys
        from dsclean.cli import main, no_pandas
        no_pandas()  # as the command does
        code = main(["scan", {str(root)!r}, "--dry-run", "--quiet", "--state-dir", {str(tmp_path / "s")!r},
                     "--report", {str(tmp_path / "r")!r}])
        print(code, "dsclean.scanning.norm" in sys.modules, sorted(m for m in sys.modules if m in (
            "pyarrow.compute", "pyarrow.acero", "pyarrow.dataset", "numpy.ma", "pyarrow.parquet", "pyarrow.fs", "joblib", "asyncio", "ssl")))
    """)
    assert out.split("\n")[-2] == "0 True []"


def test_the_forkserver_inherits_numpy_and_pyarrow_from_a_single_threaded_process(tmp_path):
    """A first scan imports numpy and pyarrow before forking its workers' forkserver (which then does not import
    them again): pyarrow's allocator thread is off by default, so the process is still single-threaded and the
    forkserver a fork of it. A user's own BLAS threads or allocator options keep them out of it (and then any
    thread at all makes the forkserver a fresh interpreter, never a fork of a threaded process)."""
    write(tmp_path / "data", "a.jpg", synth.jpeg(16, 16))
    code = f"""
        import os, sys
        from multiprocessing import forkserver
        from dsclean.cli import main
        from dsclean.scanning import executors
        forked = executors._fork_helpers
        def fork(preload):  # the threads of this process as it forks the forkserver
            print("FORKED", len(os.listdir("/proc/self/task")), flush=True)
            return forked(preload)
        executors._fork_helpers = fork
        import dsclean.cli.scan as scan
        def stop(args):  # the command line parsed and the workers started: what was imported by then
            print(forkserver._forkserver._forkserver_pid is not None, "numpy" in sys.modules, "pyarrow" in sys.modules)
            return 0
        scan.cmd_scan = stop
        main(["scan", {str(tmp_path / "data")!r}, "--state-dir", {str(tmp_path / "s")!r}])
    """
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "JE_ARROW_MALLOC_CONF")}
    assert _run(code, env).split() == ["FORKED", "1", "True", "True", "True"]
    assert _run(code, {**env, "OPENBLAS_NUM_THREADS": "2"}).split() == ["FORKED", "1", "True", "False", "False"]
    other = _run(code, {**env, "JE_ARROW_MALLOC_CONF": "narenas:1"}).split()
    assert other == ["FORKED", "1", "True", "True", "False"]


def test_the_forkserver_inherits_pyarrows_first_conversion_when_pandas_is_refused(tmp_path):
    """pyarrow's first conversion of Python values imports dateutil (~6 ms): the command (pandas refused) makes it
    before forking the forkserver, so no worker pays it on its first chunk. Called from Python without the refusal,
    it is left alone (it would import pandas: ~0.35 s), and the process still forks single-threaded."""
    write(tmp_path / "data", "a.jpg", synth.jpeg(16, 16))
    code = f"""
        import os, sys
        from multiprocessing import forkserver
        from dsclean.cli import main, no_pandas
        from dsclean.scanning import executors
        if sys.argv[1:] == ["refuse"]:
            no_pandas()
        forked = executors._fork_helpers
        def fork(preload):  # the threads of this process as it forks the forkserver
            threads = len(os.listdir("/proc/self/task"))
            forked(preload)
            print("FORKED", threads, flush=True)
        executors._fork_helpers = fork
        import dsclean.cli.scan as scan
        def stop(args):
            print(forkserver._forkserver._forkserver_pid is not None, "dateutil" in sys.modules, "pandas" in sys.modules)
            return 0
        scan.cmd_scan = stop
        main(["scan", {str(tmp_path / "data")!r}, "--state-dir", {str(tmp_path / "s")!r}])
    """
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "JE_ARROW_MALLOC_CONF")}
    run = [sys.executable, "-c", textwrap.dedent(code)]
    refused = subprocess.run([*run, "refuse"], capture_output=True, text=True, timeout=120, env=env)
    assert refused.returncode == 0, refused.stderr
    assert refused.stdout.split() == ["FORKED", "1", "True", "True", "False"]
    assert _run(code, env).split() == ["FORKED", "1", "True", "False", "False"]


def test_a_process_with_a_native_thread_starts_its_forkserver_as_a_fresh_interpreter():
    """The forkserver is forked only from a single-threaded process, native threads counted (pyarrow's allocator
    thread, when a user turns it on): else it starts as multiprocessing starts it."""
    out = _run("""
        import os, sys
        os.environ["JE_ARROW_MALLOC_CONF"] = "background_thread:true"
        import pyarrow  # a native thread, no Python one
        import threading
        from dsclean.scanning import executors
        executors._fork_helpers = lambda preload: print("FORKED")
        print(threading.active_count(), len(os.listdir("/proc/self/task")) > 1)
        executors.start_local_workers({"jpeg"}, False, fork_here=True)
        from multiprocessing import forkserver
        print("STARTED" if forkserver._forkserver._forkserver_pid is not None else "NOT")
    """)
    assert out.split() == ["1", "True", "STARTED"]


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
    import sys
    from multiprocessing import forkserver
    from dsclean.cli.scan import parse_early
    parse_early(sys.argv[1:])  # what `dsclean scan ARGS` does first
    print("STARTED" if forkserver._forkserver._forkserver_pid is not None else "NOT")
    print("SCANNER" if "dsclean.scanning.scanner" in sys.modules else "NO-SCANNER")
    print("OTHER-COMMANDS" if "dsclean.cli.index" in sys.modules else "SCAN-ALONE")
"""


def test_a_first_scan_starts_its_workers_before_importing_the_scan(tmp_path):
    """First scan or --rescan: the forkserver starts at once, from the command line alone; a re-scan with earlier
    results may check nothing, so it leaves the start to the scan (which starts workers only for files to check)."""
    root, state = tmp_path / "data", tmp_path / "state"
    write(root, "a.jpg", synth.jpeg(16, 16))

    def early(rescan: bool, *options: str) -> list[str]:
        argv = [str(root), "--state-dir", str(state), *(["--rescan"] if rescan else []), *options]
        out = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(_EARLY), *argv], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        assert out.stderr == ""  # help and usage errors are the real parser's to print
        return out.stdout.split()[:2] if out.stdout.split()[2] == "SCAN-ALONE" else ["other commands imported"]

    assert early(False) == ["STARTED", "NO-SCANNER"]  # no earlier scan
    assert early(False, "--jobs", "2", "--facts", "none", "--resc") == ["STARTED", "NO-SCANNER"]  # abbreviations too
    root.rename(tmp_path / "elsewhere")
    assert early(True) == ["NOT", "NO-SCANNER"]  # no such root: the scan refuses it at once
    (tmp_path / "elsewhere").rename(root)
    assert early(False, "--backend", "threads") == ["NOT", "NO-SCANNER"]
    assert early(False, "--back=dask", "--scheduler", "tcp://127.0.0.1:1") == ["NOT", "NO-SCANNER"]  # nothing local
    assert early(False, "--jobs", "many") == ["NOT", "NO-SCANNER"]  # a usage error: the command stops there
    assert early(False, "--jobs") == ["NOT", "NO-SCANNER"]
    assert early(False, "--no-such-option") == ["NOT", "NO-SCANNER"]
    assert early(False, "-h") == ["NOT", "NO-SCANNER"]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dsclean",
            "scan",
            str(root),
            "--dry-run",
            "--quiet",
            "--json",
            "--state-dir",
            str(state),
            "--report",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["files"] == 1
    assert early(False) == ["NOT", "NO-SCANNER"]  # earlier results: the scan decides
    assert early(True) == ["STARTED", "NO-SCANNER"]


_FIRST_WORKER = """
    import sys
    from dsclean.cli.scan import parse_early
    from dsclean.scanning import executors
    parse_early(sys.argv[1:])
    starting = executors._starting
    print("THREAD" if starting is not None else "NO-THREAD")
    print("SCANNER" if "dsclean.scanning.scanner" in sys.modules else "NO-SCANNER")
    if starting is not None:
        starting.join(60)
        pool = executors._local[0]
        print("WORKERS", len(pool._processes), pool._max_workers, "OK" if not executors._unavailable else "FAILED")
"""


def test_a_first_scan_starts_its_first_worker_while_it_imports_the_scan(tmp_path):
    """With the forkserver, the pool the scan will take (its size: --jobs, or the usable cores for --jobs 0) starts
    its first worker from a thread: the wait for the forkserver's preload and the worker's own start overlap the
    command's import of the scan, and the first chunk finds a worker ready (issue 29, start-up)."""
    from dsclean.scanning.cores import usable_cores

    root, state = tmp_path / "data", tmp_path / "state"
    write(root, "a.jpg", synth.jpeg(16, 16))
    base = [str(root), "--state-dir", str(state), "--rescan"]
    for extra, size in (([], usable_cores()), (["--jobs", "2"], 2)):
        out = _run(_FIRST_WORKER.replace("sys.argv[1:]", repr(base + extra))).split()
        assert out[:2] == ["THREAD", "NO-SCANNER"], out
        started, max_workers, ok = int(out[3]), int(out[4]), out[5]
        assert (max_workers, ok) == (size, "OK") and 1 <= started <= size, out
    out = _run(_FIRST_WORKER.replace("sys.argv[1:]", repr([*base, "--backend", "threads"]))).split()
    assert out[:2] == ["NO-THREAD", "NO-SCANNER"]  # no local processes: nothing to start


_CLI_STARTS = """
    import sys
    from multiprocessing import forkserver
    from dsclean.scanning import executors
    real, forked = forkserver.ensure_running, executors._fork_helpers
    forkserver.ensure_running = lambda: (print("FORKSERVER"), real())[1]
    executors._fork_helpers = lambda preload: (print("FORKSERVER"), forked(preload))[1]
    from dsclean.cli import main
    print("EXIT", main(["scan", *sys.argv[1:]]))
"""


def test_the_command_starts_workers_for_a_first_scan_only(tmp_path):
    """The whole `dsclean scan` command: a first scan starts the forkserver (once); a re-scan of the unchanged tree
    answers from its earlier results and starts no process; `--backend threads` never starts one."""
    root = tmp_path / "data"
    write(root, "a.jpg", synth.jpeg(16, 16))
    options = [str(root), "--dry-run", "--quiet", "--state-dir", str(tmp_path / "s"), "--report", str(tmp_path / "r")]
    assert _run(_CLI_STARTS.replace("sys.argv[1:]", repr(options))).split() == ["FORKSERVER", "EXIT", "0"]
    assert _run(_CLI_STARTS.replace("sys.argv[1:]", repr(options))).split() == ["EXIT", "0"]
    threads = [*options, "--rescan", "--backend", "threads"]
    assert _run(_CLI_STARTS.replace("sys.argv[1:]", repr(threads))).split() == ["EXIT", "0"]


def test_a_scan_is_parsed_alone_as_the_full_parser_would(tmp_path):
    """`dsclean scan` never builds the other commands' parsers; its options come out as the full parser's."""
    from dsclean.cli import build_parser
    from dsclean.cli.scan import parse_early

    missing = str(tmp_path / "missing")  # no such root: nothing starts
    for argv in (
        [missing],
        [
            missing,
            "-j",
            "3",
            "--back",
            "threads",
            "--facts=none",
            "--quarantine-flags",
            "dark,tiny",
            "--timeout",
            "2.5",
            "--max-memory",
            "512M",
            "--follow-symlinks",
            "--flag-tiny",
            "8",
        ],
        ["--rescan", "--dry-run", "--json", "--", missing],
    ):
        assert vars(parse_early(argv)) == vars(build_parser().parse_args(["scan", *argv]))
    assert (
        parse_early([missing, "--symlinks", "all", "--follow-symlinks"]) is None
    )  # exclusive: the full parser says so
    out = _run(f"""
        import sys
        from dsclean.cli import main
        code = main(["scan", {missing!r}])
        print(code, sorted(m for m in sys.modules if m.startswith("dsclean.cli.")))
    """)
    assert (
        out.split("\n")[-2]
        == "2 ['dsclean.cli.bucket', 'dsclean.cli.exit_codes', 'dsclean.cli.notes', 'dsclean.cli.parser', 'dsclean.cli.scan', 'dsclean.cli.scanend']"
    )


def _worker_modules(tmp_path, files: dict[str, bytes], *options: str) -> dict[str, str]:
    """Scan ``files`` with a real `dsclean scan` process; what each ``__modules__`` file's worker had imported."""
    root = tmp_path / "data"
    for rel, data in files.items():
        write(root, rel, data)
    env = {**os.environ, "DSCLEAN_TEST_FAULTS": "1"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dsclean",
            "scan",
            str(root),
            "--dry-run",
            "--quiet",
            "--jobs",
            "1",
            "--state-dir",
            str(tmp_path / "state"),
            "--report",
            str(tmp_path / "r"),
            *options,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode in (0, 1), out.stderr
    from dsclean import iter_verdicts

    said = {}
    for v in iter_verdicts(str(tmp_path / "r")):
        if "__modules__" in v.path:
            assert v.detail.startswith("decoder said: modules:"), v.detail
            said[v.path] = v.detail.split("modules:", 1)[1].strip()
    return said


def test_a_tree_of_sounds_never_loads_the_image_decoders_in_its_workers(tmp_path):
    """The forkserver preloads the checkers of the formats the tree holds (a peek at its first entries)."""
    wav = synth.encode_audio(synth.tone(), 16_000, "WAV")
    said = _worker_modules(tmp_path, {"a/x__modules__.wav": wav, "b/y.wav": wav, "z__modules__.wav": wav})
    assert said == {"a/x__modules__.wav": "soundfile", "z__modules__.wav": "soundfile"}


def test_a_tree_of_jpegs_never_loads_libsndfile(tmp_path):
    said = _worker_modules(tmp_path, {"a/x__modules__.jpg": synth.jpeg(16, 16), "b/y.jpg": synth.jpeg(16, 16, seed=1)})
    assert said == {"a/x__modules__.jpg": "PIL simplejpeg"}


def test_a_tree_of_jpegs_without_facts_never_loads_pillow(tmp_path):
    """libjpeg-turbo checks JPEGs: Pillow (and the PNG walker) load only for a format they check, on its first
    file in the worker when the peek did not see it; those files get their usual verdicts."""
    jpegs = {f"a/{i:03d}.jpg": synth.jpeg(16, 16, seed=i) for i in range(300)}  # more than the peek reads
    said = _worker_modules(tmp_path / "jpegs", {**jpegs, "a/x__modules__.jpg": synth.jpeg(16, 16)}, "--facts", "none")
    assert said == {"a/x__modules__.jpg": "simplejpeg"}
    late = {
        "z/cut.gif": synth.truncate(synth.animated_gif(), 0.5),
        "z/cut.png": synth.truncate(synth.png(16, 16), 0.5),
        "z/png.jpg": synth.png(16, 16),
        "z/ok.gif": synth.animated_gif(),
    }  # png.jpg: checked as what it is
    _worker_modules(tmp_path / "mixed", {**jpegs, **late}, "--facts", "none")
    from dsclean import iter_verdicts

    verdicts = {v.path: (v.status, v.reason) for v in iter_verdicts(str(tmp_path / "mixed" / "r"))}
    assert verdicts["z/cut.gif"][0] == "bad" and verdicts["z/cut.png"] == ("bad", "truncated")
    assert verdicts["z/png.jpg"] == ("warn", "extension_mismatch") and verdicts["z/ok.gif"] == ("ok", None)
    assert all(verdicts[rel] == ("ok", None) for rel in jpegs)


_SLOW_PILLOW = """
    import sys, time
    from dsclean.scanning import check, check_image, worker  # the checker preloaded, as for a tree of JPEGs
    from dsclean.scanning.check import CheckOptions
    assert "PIL" not in sys.modules

    class Slow:  # Pillow's import made slow on purpose (a cold network file system)
        def find_spec(self, name, path=None, target=None):
            if name == "PIL":
                time.sleep(0.6)  # three times the file's limit
            return None

    sys.meta_path.insert(0, Slow())
    [v] = worker.check_chunk(sys.argv[1], ["z/good.png"], CheckOptions(timeout=0.2, facts=False))
    print(v.status, v.reason, "PIL" in sys.modules)
"""


def test_pillow_imported_mid_scan_is_not_on_the_files_clock(tmp_path):
    """Pillow loads on the first file that needs it, under the same import guard as a checker module."""
    write(tmp_path, "z/good.png", synth.png(16, 16))
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_SLOW_PILLOW), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ok", "None", "True"]


def test_a_sound_the_peek_did_not_see_is_still_checked(tmp_path):
    """The peek reads the first entries only; a worker imports another format's checker when a chunk holds it."""
    files = {f"a/{i:03d}.jpg": synth.jpeg(16, 16, seed=i) for i in range(300)}  # more than the peek reads
    files["z/late__modules__.wav"] = synth.encode_audio(synth.tone(), 16_000, "WAV")
    files["z/cut.wav"] = synth.truncate(files["z/late__modules__.wav"], 0.5)
    said = _worker_modules(tmp_path, files)
    assert said == {"z/late__modules__.wav": "PIL simplejpeg soundfile"}
    from dsclean import iter_verdicts

    status = {v.path: v.status for v in iter_verdicts(str(tmp_path / "r"))}
    assert status["z/cut.wav"] == "bad"
    assert sorted(p for p, s in status.items() if s == "ok" and p.endswith(".jpg")) == [
        f"a/{i:03d}.jpg" for i in range(300)
    ]


def test_the_peek_reads_a_bounded_number_of_entries(tmp_path):
    from dsclean.scanning.discover import peek_formats
    from dsclean.scanning.executors import preload_modules

    for i in range(20):
        write(tmp_path, f"{i}.flac", b"x")
    write(tmp_path / "b", "late.png", b"x")  # a folder is read after the entries before it
    write(tmp_path, ".hidden.jpg", b"x")
    assert peek_formats(str(tmp_path), entries=5) == {"flac"}
    assert peek_formats(str(tmp_path)) == {"flac", "png"}
    assert peek_formats(str(tmp_path / "missing")) is None  # expect anything
    assert peek_formats(str(tmp_path / "b"), entries=0) is None
    # the workers' code and their Arrow batches, the pool's queues, and what every check records
    base = [
        "dsclean.scanning.executors",
        "dsclean.scanning.schema",
        "multiprocessing.synchronize",
        "dsclean.scanning.traits",
    ]
    assert preload_modules({"flac"}) == [*base, "dsclean.scanning.check_audio"]
    assert preload_modules({"jpeg"}, facts=False) == [*base, "dsclean.scanning.check_image"]  # no Pillow
    assert preload_modules({"jpeg", "gif"}, facts=False) == [
        *base,
        "dsclean.scanning.check_image",
        "PIL.PngImagePlugin",
        "dsclean.scanning.formats.png",
    ]
    assert preload_modules({"jpeg"})[-1] == "dsclean.quality.image"  # the image facts, when facts are recorded
    assert set(preload_modules(None)) >= {
        "dsclean.scanning.check_image",
        "dsclean.scanning.check_audio",
        "dsclean.scanning.formats.pnm",
        "dsclean.quality.image",
    }


_EXIT = """
    import atexit, sys, threading, time
    from dsclean.cli import exit_now
    atexit.register(lambda: print("atexit ran", flush=True))
    if sys.argv[1] == "thread":  # a non-daemon thread still working: the normal exit waits for it
        threading.Thread(target=lambda: (time.sleep(0.5), print("thread done", flush=True))).start()
    print("partial line, not flushed yet", end="")
    exit_now(int(sys.argv[2]))
"""


def test_the_command_exits_fast_but_runs_atexit_flushes_and_waits_for_threads():
    for mode, code in (("plain", 0), ("plain", 3), ("thread", 1)):
        out = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(_EXIT), mode, str(code)], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == code, out.stderr
        assert "partial line, not flushed yet" in out.stdout and "atexit ran" in out.stdout
        assert ("thread done" in out.stdout) == (mode == "thread")


_GUARD = """
    import resource
    from dsclean.scanning import worker
    worker.set_memory_ceiling(32 << 20)  # 32 MB of headroom
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    try:
        bytearray(256 << 20)
        print("no ceiling?")
    except MemoryError:
        pass
    with worker.without_ceiling():  # what a checker module's import runs under
        loaded = bytearray(256 << 20)  # fine: no ceiling meanwhile
    after = resource.getrlimit(resource.RLIMIT_AS)[0]
    print("headroom kept" if soft + (256 << 20) <= after < soft + (300 << 20) else f"limit {soft} -> {after}")
    try:
        bytearray(64 << 20)
        print("ceiling gone")
    except MemoryError:
        print("ceiling back")
"""


def test_a_checker_imported_mid_scan_loads_without_the_memory_ceiling():
    """A worker imports a format's checker on its first file: that load is lifted out of the check's ceiling,
    and the ceiling comes back with the same headroom."""
    assert _run(_GUARD).split("\n")[:2] == ["headroom kept", "ceiling back"]


def test_a_checker_imported_mid_scan_is_not_on_the_files_clock(tmp_path):
    """A checker the forkserver did not preload is imported at its format's first file: that import (slow on a cold
    network file system; here made slow on purpose) must not count against the file's --timeout (SIGALRM kills)."""
    write(tmp_path, "z/good.jpg", synth.jpeg(16, 16))
    out = _run(f"""
        import sys, time
        assert "dsclean.scanning.check_image" not in sys.modules
        from dsclean.scanning import worker
        from dsclean.scanning.check import CheckOptions
        class Slow:  # the import system asks it first, and it lets the real finders find the module
            def find_spec(self, name, path=None, target=None):
                if name.endswith("check_image"):
                    time.sleep(0.6)  # three times the file's limit
                return None
        sys.meta_path.insert(0, Slow())
        [v] = worker.check_chunk({str(tmp_path)!r}, ["z/good.jpg"], CheckOptions(timeout=0.2, facts=False))
        print(v.status, v.reason)
    """)
    assert out.split() == ["ok", "None"]


_HELPERS = """
    import json, os, sys
    from multiprocessing import forkserver, resource_tracker
    from dsclean.cli.scan import parse_early
    args = parse_early(sys.argv[1:])
    server, tracker = forkserver._forkserver._forkserver_pid, resource_tracker._resource_tracker._pid
    def cmdline(pid):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\\0")
    def parent(pid):
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    mine = cmdline(os.getpid())
    print(json.dumps({"same": [cmdline(p) == mine for p in (server, tracker)],
                      "parent": [parent(p) == os.getpid() for p in (server, tracker)], "tracker": tracker}))
    sys.stdout.flush()
    code = args.func(args)
    assert not os.path.exists(f"/proc/{server}"), server  # stopped and reaped by the scan
    print("EXIT", code)
"""


def test_the_command_forks_its_forkserver_and_tracker_and_isolates_crashes(tmp_path):
    """`dsclean scan` forks the forkserver and the resource tracker from its own process (no fresh interpreters);
    workers forked from that server still isolate a segfaulting file, and both helpers end with the scan."""
    root = tmp_path / "data"
    for i in range(6):
        write(root, f"a/{i}.jpg", synth.jpeg(16, 16, seed=i))
    write(root, "a/x__segfault__.jpg", synth.jpeg(16, 16))
    options = [
        str(root),
        "--jobs",
        "2",
        "--dry-run",
        "--quiet",
        "--facts",
        "none",
        "--state-dir",
        str(tmp_path / "s"),
        "--report",
        str(tmp_path / "r"),
    ]
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_HELPERS), *options],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DSCLEAN_TEST_FAULTS": "1"},
    )
    assert out.returncode == 0, out.stderr
    first, last = out.stdout.strip().split("\n")
    tracker = json.loads(first).pop("tracker")
    assert json.loads(first) == {"same": [True, True], "parent": [True, True], "tracker": tracker}
    assert last == "EXIT 0"
    for _ in range(100):  # the tracker ends when the command's process has ended (its pipe's last writer)
        if not os.path.exists(f"/proc/{tracker}") or open(f"/proc/{tracker}/stat").read().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the resource tracker {tracker} outlived the scan")
    from dsclean import iter_verdicts

    verdicts = {v.path: (v.status, v.reason) for v in iter_verdicts(str(tmp_path / "r"))}
    assert verdicts.pop("a/x__segfault__.jpg") == ("bad", "decoder_crash")
    assert verdicts == {f"a/{i}.jpg": ("ok", None) for i in range(6)}


def test_a_process_with_threads_starts_fresh_interpreters(tmp_path):
    """Forking is for the command's small single-threaded process: with another thread running (a user's
    program, a Dask worker), the forkserver is a fresh interpreter, as multiprocessing starts it."""
    out = _run("""
        import threading, os
        from multiprocessing import forkserver
        from dsclean.scanning import executors
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        executors.start_local_workers(["jpeg"], facts=False, fork_here=True)
        import time
        deadline = time.monotonic() + 30  # the fresh interpreter's command line shows once its exec is done
        while True:
            with open(f"/proc/{forkserver._forkserver._forkserver_pid}/cmdline", "rb") as f:
                fresh = b"multiprocessing.forkserver" in f.read()
            if fresh or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        print(fresh)
        stop.set()
        t.join()
        executors.stop_local_workers()
    """)
    assert out.split() == ["True"]


def test_a_first_scan_never_imports_pyarrow_compute(tmp_path):
    """`import pyarrow.compute` is ~75 ms of the main process's start (it wraps every kernel): a first scan,
    bad files included (their rows are taken out of the batch), calls the kernels it needs by name. Only the
    inferred-norm pass over the written results, after every check (dsclean.scanning.norm), imports it."""
    root = tmp_path / "data"
    for i in range(5):
        write(root, f"{i}.jpg", synth.jpeg(32, 32, seed=i))
    write(root, "cut.jpg", synth.truncate(synth.jpeg(64, 64), 0.5))
    out = _run(f"""
        import sys
        from dsclean.cli import main, no_pandas
        no_pandas()  # as the dsclean command does (dsclean.cli.run), before anything builds an Arrow array
        from dsclean.scanning import scanner
        seen = []
        apply_norm = scanner._apply_norm
        def spy(*args, **kwargs):  # the checks are done: what the scan imported until now
            seen.append("pyarrow.compute" in sys.modules)
            return apply_norm(*args, **kwargs)
        scanner._apply_norm = spy
        code = main(["scan", {str(root)!r}, "--jobs", "2", "--dry-run", "--rescan", "--quiet", "--facts", "none",
                     "--state-dir", {str(tmp_path / "s")!r}, "--report", {str(tmp_path / "r")!r}])
        print(code, seen, "pandas" in sys.modules)
    """)
    assert out.split() == ["0", "[False]", "False"]
    from dsclean import iter_verdicts

    assert {v.path: v.reason for v in iter_verdicts(str(tmp_path / "r"), status="bad")} == {"cut.jpg": "truncated"}


def test_the_command_keeps_pandas_out_but_main_leaves_callers_alone(tmp_path):
    """pyarrow imports pandas (when installed) on its first array: ~0.35 s of each command. The dsclean
    command hides it; dsclean.cli.main called from Python does not touch the caller's imports."""
    import importlib.util

    if importlib.util.find_spec("pandas") is None:
        pytest.skip("pandas is not installed: nothing to keep out")
    root = tmp_path / "data"
    write(root, "a.jpg", synth.jpeg(32, 32))
    scan = [
        "scan",
        str(root),
        "--dry-run",
        "--quiet",
        "--state-dir",
        str(tmp_path / "s"),
        "--report",
        str(tmp_path / "r"),
    ]
    out = _run(f"""
        import sys
        from dsclean.cli import main, no_pandas
        no_pandas()
        main({scan!r})
        print("pandas" in sys.modules)
    """)
    assert out.split() == ["False"]
    out = _run(f"""
        import sys
        from dsclean.cli import main
        main({scan!r})
        import pandas
        print(pandas.DataFrame({{"a": [1]}}).shape)
    """)
    assert out.split() == ["(1,", "1)"]


def test_keeping_pandas_out_answers_a_probe_and_refuses_the_import():
    """torch._dynamo (imported by torchvision's ops) probes modules with importlib.util.find_spec: the probe gets an
    answer, while `import pandas` still raises ModuleNotFoundError (what pyarrow catches)."""
    out = _run("""
        import importlib.util, sys
        from dsclean.cli import no_pandas
        no_pandas()
        print(importlib.util.find_spec("pandas") is not None)
        try:
            import pandas
        except ModuleNotFoundError as exc:
            print("refused", exc.name)
        import pyarrow as pa
        print(len(pa.array([1, 2, 3])), "pandas" in sys.modules)
    """)
    assert out.split() == ["True", "refused", "pandas", "3", "False"]


def test_the_command_collects_cyclic_garbage_less_often_but_main_leaves_callers_alone(tmp_path):
    """The ``dsclean`` command's own process runs the cyclic collector's first generation every 50,000 new
    objects, not every 700 (start-up: ~3% of a one-file scan's instructions, issue 29); its forks (forkserver,
    workers) go back to 700, with what they inherited frozen (never traversed: no collection copies the pages
    they share with the command's process); ``main`` called from Python leaves the caller's thresholds as they were."""
    missing = str(tmp_path / "missing")
    code = f"""
        import atexit, gc, os, sys
        from dsclean.cli import main, run
        main(["scan", {missing!r}])
        print(gc.get_threshold()[0])
        def fork():
            pid = os.fork()
            if pid == 0:
                print(gc.get_threshold()[0], gc.get_freeze_count() > 10_000, flush=True)
                os._exit(0)
            os.waitpid(pid, 0)

        atexit.register(fork)
        atexit.register(lambda: print(gc.get_threshold()[0], flush=True))
        sys.argv = ["dsclean", "scan", {missing!r}]
        run()
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr  # the missing root: a usage error, after which atexit handlers run
    # main from Python; the command; a fork of the command (frozen: the command's modules, at least)
    assert out.stdout.split() == ["700", "50000", "700", "True"]
