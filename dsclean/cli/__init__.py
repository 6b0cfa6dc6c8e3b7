"""The ``dsclean`` command: a thin layer of argparse over the Python API.

One module per command group (:mod:`.scan`, :mod:`.index`, :mod:`.diagnose`, :mod:`.pack`):
each parses, calls the API, prints.

Exit codes (:mod:`.exit_codes`, docs/reference/exit-codes.md): 0 done; 1 findings (``--check``
found bad files, a restore refused entries, ``verify`` found problems, ...); 2 usage error or bad input, before
anything changed (message, no traceback); 3 incomplete: some moves or writes failed,
state consistent, every failure listed; 130/143 interrupted by SIGINT/SIGTERM after
flushing what was decided.
"""

from __future__ import annotations

import argparse
import gc
import importlib.machinery
import logging
import os
import signal
import sys
from typing import Sequence

from .. import __version__
from ..errors import UserError
from .exit_codes import EXIT_INCOMPLETE, EXIT_OK, EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    from . import (
        diagnose,
        dups,
        fromlog,
        index,
        pack,
        report,
        scan,
    )  # here: `dsclean scan` needs none but its own (main)
    from .parser import Parser

    parser = Parser(prog="dsclean", description="Make image and audio training data safe to feed to PyTorch.")
    parser.add_argument("--version", action="version", version=f"dsclean {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    scan.add_parsers(sub)
    index.add_parsers(sub)
    diagnose.add_parsers(sub)
    pack.add_parsers(sub)
    dups.add_parsers(sub)
    report.add_parsers(sub)
    fromlog.add_parsers(sub)
    return parser


#: the environment variable pyarrow's jemalloc reads its options from, and the option that keeps it from starting a thread
ARROW_MALLOC_ENV, NO_ALLOCATOR_THREAD = "JE_ARROW_MALLOC_CONF", "background_thread:false"


def one_blas_thread() -> None:
    """One OpenBLAS thread per dsclean process (unless the environment already says otherwise).

    dsclean's numpy work is small arrays (thumbnails, a 32x32 DCT), and a scan runs one worker
    process per core. OpenBLAS's default starts a thread per core when numpy is imported, and
    those threads busy-wait ~0.1 CPU-s each (docs/benchmarks-history.md "The scan pipeline"): in this process, the
    workers' forkserver and every worker, all inheriting this environment. Must run before numpy
    is imported.
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # pyarrow's bundled jemalloc starts a background thread at import (its memory pool here is mimalloc: the thread
    # purges pages nothing allocated); without it a scan's process stays single-threaded after importing pyarrow,
    # so its workers' forkserver can be forked after that import and inherit it (cli/scan.py, _start_workers_early)
    os.environ.setdefault(ARROW_MALLOC_ENV, NO_ALLOCATOR_THREAD)


def main(argv: Sequence[str] | None = None) -> int:
    one_blas_thread()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = None
    if argv[:1] == ["scan"]:  # parsed alone, its workers' forkserver started at once: the other commands wait
        from .scan import parse_early

        args = parse_early(argv[1:])  # None: help or a usage error, for the full parser to print
    if args is None:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_USAGE
    args.argv = argv  # shown in reports: how the command was run
    from .notes import notes_at

    try:
        with notes_at(logging.ERROR if getattr(args, "quiet", False) else logging.WARNING):
            return int(args.func(args) or 0)
    except UserError as exc:
        print(f"dsclean {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("dsclean: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:
        return EXIT_OK
    except OSError as exc:  # a write failed partway (a full disk, a read-only folder); what was done is consistent
        from ..atomic import describe_write_error

        print(f"dsclean {args.command}: error: could not finish: {describe_write_error(exc)}", file=sys.stderr)
        return EXIT_INCOMPLETE


def run() -> None:
    """The ``dsclean`` command (and ``python -m dsclean``): :func:`main`, then :func:`exit_now`."""
    no_pandas()
    fewer_collections()
    exit_now(main())


#: the ``dsclean`` command's first-generation threshold of the cyclic garbage collector (Python's default: 700)
GC_THRESHOLD = 50_000


def fewer_collections() -> None:
    """Run the cyclic garbage collector less often in the ``dsclean`` command's own process: its first generation
    collected every :data:`GC_THRESHOLD` new container objects, not every 700.

    A command's start-up creates ~10^5 long-lived objects (modules, classes, functions): with the default, the
    collector traverses them again and again while they are imported (~15-25 M instructions of a one-file scan's
    process, issue 29). Garbage without cycles is freed at once either way; garbage in cycles waits for at most
    that many new objects (a few MB). Its forks (the workers' forkserver, the workers) go back to the thresholds
    they had: the checks run as before. :func:`main`, called from Python, leaves the caller's collector alone.
    """
    threshold = gc.get_threshold()
    if 0 < threshold[0] < GC_THRESHOLD:  # 0: the collector is off (a user's choice, kept)
        gc.set_threshold(GC_THRESHOLD, *threshold[1:])
        os.register_at_fork(after_in_child=lambda: _child_collections(threshold))


def _child_collections(threshold: tuple[int, ...]) -> None:
    """In a fork of the command's process: what it inherited frozen (:func:`gc.freeze`: never traversed again), then
    the collector's thresholds back to what they were.

    Without the freeze, the fork's first allocation starts a collection of up to :data:`GC_THRESHOLD` inherited young
    objects and on to a full one: it writes to the header of every object it visits, so the kernel copies each page
    that holds one (copy-on-write), ~30 ms of a one-file scan's start in the workers' forkserver (issue 29) and memory
    each worker no longer shares with it. Garbage in cycles made before the fork stays where it was (in the
    forked-from process's pages, shared)."""
    gc.freeze()
    gc.set_threshold(*threshold)


def no_pandas() -> None:
    """Keep pandas out of the ``dsclean`` command's process (and its workers, forked from it).

    No dsclean command uses pandas, but pyarrow, when pandas is installed, imports it on the first
    array it builds (to test whether the input is a pandas object): ~0.35 s and ~60 MB at the start
    of every command, plus pandas' own import of ``pyarrow.compute``. An import finder first in line
    refuses ``pandas`` (pyarrow then takes pandas to be absent). Only the command's own process:
    :func:`main`, called from Python, leaves the caller's imports alone.
    """
    if "pandas" not in sys.modules and not pandas_refused():
        sys.meta_path.insert(0, _NoPandas())


def pandas_refused() -> bool:
    """Whether this process refuses pandas (:func:`no_pandas` ran)."""
    return any(isinstance(f, _NoPandas) for f in sys.meta_path)


class _NoPandas:
    """An import finder that refuses pandas (see :func:`no_pandas`).

    It answers ``find_spec`` with a spec whose loader refuses: ``import pandas`` raises ModuleNotFoundError
    (what pyarrow catches), while a probe with ``importlib.util.find_spec`` (torch._dynamo, imported by
    torchvision, probes a list of modules with it) gets an answer instead of an exception.
    """

    def find_spec(self, name: str, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            return importlib.machinery.ModuleSpec(name, self)
        return None

    def create_module(self, spec):
        raise ModuleNotFoundError("the dsclean command does not load pandas", name=spec.name)

    def exec_module(self, module) -> None:  # never reached: create_module refuses
        raise ModuleNotFoundError("the dsclean command does not load pandas", name=module.__name__)


def exit_now(code: int) -> None:
    """End this process with ``code`` without tearing the interpreter down, when that is safe.

    A normal exit frees every object of every module (pyarrow, numpy, ...) one by one: 0.05-0.12 s
    of CPU and wall time at the end of each command (docs/benchmarks-history.md "The scan pipeline") that changes nothing
    on disk. So: flush stdout and stderr, run the atexit handlers (they stop the workers, remove
    temporary files, flush logs), then ``os._exit``. When a non-daemon thread is still running, or an
    atexit handler leaves one, the normal exit runs instead (it waits for those threads).
    """
    import atexit
    import threading

    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()  # the handlers a normal exit would run (and forget them: they run once)
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):  # the reader went away, or the stream was closed: as a normal exit would
        sys.exit(code)
    os._exit(code)


if __name__ == "__main__":
    run()
