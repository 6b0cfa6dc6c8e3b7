"""``dsclean doctor``, ``dsclean explain`` and ``dsclean probe``: argparse wiring and output.

The main CLI calls :func:`add_parsers` with its subparsers object; each handler
returns an exit code and raises :class:`UserError` for user mistakes.

Exit codes: doctor 0 all ok / 1 any check failed; explain 0 recognised / 1 not a
known DataLoader failure; probe 0 settled / 1 a worker's memory climbs, samples
failed or the loader raised (``--all``: 1 when any sample failed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .. import argtypes
from ..errors import UserError


def add_parsers(sub) -> None:
    """Register the ``doctor``, ``explain`` and ``probe`` subcommands."""
    p = sub.add_parser(
        "doctor",
        help="check shared memory, RAM/cgroup limits, CPUs, OOM kills for DataLoader workers",
        description="Measure the environment DataLoader workers run in (shared memory, container, memory, CPU, "
        "OOM kills, start method); each check says ok/warn/fail and how to fix it. Exit 1 if any check fails.",
    )
    p.add_argument("--index", metavar="INDEX", help="a dsclean index: estimate the decoded bytes per sample from it")
    p.add_argument(
        "--batch-size", type=argtypes.positive, metavar="B", help="DataLoader batch_size (default 32 for estimates)"
    )
    p.add_argument(
        "--num-workers", type=argtypes.count, metavar="W", help="DataLoader num_workers (default: the recommended)"
    )
    p.add_argument(
        "--prefetch-factor", type=argtypes.positive, metavar="P", help="DataLoader prefetch_factor (default 2)"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the checks that warn or fail")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser(
        "explain",
        help="say what a DataLoader error means (OOM, shared memory, exception) and what fixes it",
        description="Classify a DataLoader error message: killed by signal (OOM), bus error / shared memory, "
        "exited with exit code 1 (an exception in Dataset code), and more. Exit 1 if it is not recognised.",
    )
    p.add_argument("message", nargs="?", metavar="MESSAGE", help="the error text")
    p.add_argument("--file", metavar="LOG", help="read the text from a log file ('-' = standard input)")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the fix (exit 1 if not recognised)")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser(
        "probe",
        help="run a real DataLoader over an index and watch each worker's memory",
        description="Iterate a DataLoader over IndexedDataset(INDEX) (an index or a packed shard set), sampling "
        "every worker's USS/PSS and the main RSS twice a second: samples/s, memory per worker, and whether it "
        "settles or climbs. "
        "With --num-workers 0 --all: load every sample in this process and list each failure.",
    )
    p.add_argument(
        "index", metavar="INDEX", help="an index written by dsclean index, or a shard folder written by dsclean pack"
    )
    p.add_argument(
        "--num-workers", type=argtypes.count, metavar="W", help="DataLoader workers (default 2; 0 with --all)"
    )
    p.add_argument(
        "--batch-size", type=argtypes.positive, default=32, metavar="B", help="DataLoader batch_size (default 32)"
    )
    run = p.add_mutually_exclusive_group()
    run.add_argument("--batches", type=argtypes.positive, metavar="N", help="stop after N batches")
    run.add_argument("--seconds", type=argtypes.seconds, metavar="S", help="stop after S seconds (default 10)")
    p.add_argument(
        "--all",
        action="store_true",
        help="with --num-workers 0: load every sample; failures grouped by reason with counts",
    )
    p.add_argument("--tracebacks", action="store_true", help="with --all: also print every failure's full traceback")
    p.add_argument("--root", metavar="DIR", help="where the files are (default: the root recorded in the index)")
    p.add_argument(
        "--symlinks",
        choices=("inside", "all"),
        help="links to follow when loading: inside (refuse links leading out of the root) or all; "
        "default: all for an index built with --symlinks all (or --files imagefolder), else inside",
    )
    p.add_argument("--interval", type=argtypes.seconds, default=0.5, metavar="S", help="seconds between memory samples")
    p.add_argument("--plot", metavar="FILE.png", help="also write a plot of the memory over time (needs matplotlib)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing: the exit code says whether it settled")
    p.set_defaults(func=cmd_probe)


def system_paths():
    """Where doctor reads the system from: the real system (tests replace this function)."""
    from ..diagnose.sysinfo import SysPaths

    return SysPaths()


def cmd_doctor(args: argparse.Namespace) -> int:
    from ..diagnose.doctor import format_report, run_doctor

    report = run_doctor(
        args.index,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        prefetch_factor=args.prefetch_factor,
        sys_paths=system_paths(),
    )
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif args.quiet:
        for c in report.checks:
            if c.status != "ok":
                print(f"[{c.status:^4}] {c.title}: {c.value}" + "".join(f"\n       fix: {f}" for f in c.fixes))
    else:
        print(format_report(report))
    return report.exit_code


def _read_message(args: argparse.Namespace) -> str:
    if args.file is not None and args.message is not None:
        raise UserError("pass MESSAGE or --file, not both")
    if args.file is None:
        if args.message is None:
            raise UserError("nothing to explain: pass the error text as MESSAGE or a log with --file")
        return args.message
    if args.file == "-":
        return sys.stdin.read()
    try:
        with open(args.file, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as exc:
        raise UserError(f"{args.file}: cannot read the log ({exc.strerror or exc})") from exc


def cmd_explain(args: argparse.Namespace) -> int:
    from ..diagnose.explain import explain, format_explanation

    exp = explain(_read_message(args))
    if args.json:
        print(json.dumps(exp.to_json(), indent=2))
    elif args.quiet:
        if exp.recognized:
            print("\n".join(exp.fixes))
    else:
        print(format_explanation(exp))
    return 0 if exp.recognized else 1


def _check_root(index: str, root: str | None) -> None:
    """A moved dataset: name this command's flag (--root), not the Python argument."""
    from ..data.shards import is_packed_set, refuse_unfinished_pack
    from ..index.store import read_meta

    refuse_unfinished_pack(index)
    if is_packed_set(index):
        if root is not None:
            raise UserError(
                f"{index}: is a packed shard set: its samples are inside its shards, so --root does not apply"
            )
        return
    from ..storage.urls import is_url

    meta = read_meta(index)
    where = root if root is not None else meta["root"]
    if is_url(where):  # a bucket prefix: its objects are read with the environment's credentials and endpoint
        return
    if not os.path.isdir(where):
        if root is not None:
            raise UserError(f"--root {root}: no such folder")
        raise UserError(
            f"{index}: the files were indexed under {where}, which is not a folder now; "
            "if the dataset moved, pass --root NEW_LOCATION"
        )


def cmd_probe(args: argparse.Namespace) -> int:
    from ..diagnose import probe

    _check_root(args.index, args.root)
    if args.tracebacks and not args.all:
        raise UserError("--tracebacks goes with --all")
    if args.all:
        if args.num_workers not in (None, 0):
            raise UserError("--all loads every sample in the main process: use it with --num-workers 0")
        if args.plot:
            raise UserError("--plot charts worker memory; it does not apply to --all")
        tried, failures = probe.check_all(args.index, root=args.root, follow_symlinks=args.symlinks)
        if args.json:
            print(json.dumps({"samples": tried, "failures": [f.__dict__ for f in failures]}, indent=2))
        elif not args.quiet:
            print(probe.format_failures(tried, failures, tracebacks=args.tracebacks))
        return 1 if failures else 0
    if args.plot:
        probe.require_matplotlib()  # fail before the run, not after it
    workers = 2 if args.num_workers is None else args.num_workers
    result = probe.probe_index(
        args.index,
        root=args.root,
        follow_symlinks=args.symlinks,
        num_workers=workers,
        batch_size=args.batch_size,
        batches=args.batches,
        seconds=args.seconds,
        interval=args.interval,
    )
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    elif not args.quiet:
        print(probe.format_probe(result))
    if args.plot:
        probe.plot_probe(result, args.plot)
        if not (args.json or args.quiet):
            print(f"plot written to {args.plot}")
    return result.exit_code
