"""``dsclean quarantine --from-log``: argparse wiring and human output over :mod:`dsclean.fromlog`."""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter

from .. import argtypes
from .exit_codes import EXIT_FOUND_BAD, EXIT_INCOMPLETE, EXIT_OK

_MAX_LISTED = 20
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _shown(text: object) -> str:
    """Log text for a terminal: a log is untrusted, so control characters (escape sequences) are made visible."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quarantine",
        help="re-check the files and shard samples a training run logged as failed; quarantine the bad",
        description="Read the failure logs dsclean.guard wrote (each with its per-process files beside it), check "
        "every logged file still on disk again with the scan's checker, and move the bad ones into DIR with the "
        "scan's journal (dsclean restore puts them back). Files that check ok are listed with their logged error "
        "and left in place. Bad samples inside shards are appended to denylist.jsonl beside the shards.",
    )
    p.add_argument(
        "--from-log",
        dest="logs",
        nargs="+",
        required=True,
        metavar="LOG",
        help="failure logs (runs/failures.jsonl reads runs/failures.rank*.jsonl too)",
    )
    p.add_argument("--quarantine", metavar="DIR", help="where bad files go (outside ROOT); without it: list only")
    p.add_argument("--root", metavar="ROOT", help="the dataset root of relative logged paths (default: the log's root)")
    p.add_argument("--dry-run", action="store_true", help="check and list; move nothing, deny nothing")
    p.add_argument("--lenient", action="store_true", help="judge as scan --lenient (recoverable decoder warnings warn)")
    p.add_argument(
        "--jobs",
        "-j",
        type=argtypes.positive,
        default=1,
        metavar="N",
        help="files checked at once, each in a fresh process (default 1)",
    )
    p.add_argument("--state-dir", metavar="DIR", help="base of the per-root state folders (as scan)")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_quarantine)


def cmd_quarantine(args: argparse.Namespace) -> int:
    from ..fromlog import FromLogOptions, quarantine_from_log
    from ..scanning.check import CheckOptions

    options = FromLogOptions(
        quarantine=args.quarantine,
        dry_run=args.dry_run,
        root=args.root,
        check=CheckOptions(lenient=args.lenient),
        state_dir=args.state_dir,
        jobs=args.jobs,
    )
    s = quarantine_from_log(args.logs, options)
    if args.json:
        print(json.dumps(s.to_json(), indent=2))
    elif not args.quiet:
        print(format_summary(s))
    if s.failed_moves:
        return EXIT_INCOMPLETE
    return EXIT_FOUND_BAD if s.bad else EXIT_OK


_VERB = {
    "quarantined": "quarantined",
    "would_quarantine": "bad, would be quarantined",
    "denied": "bad, denied",
    "would_deny": "bad, would be denied",
    "already_denied": "bad, already on the deny-list",
    "left": "checks {status}: left in place",
    "missing": "missing",
    "failed": "bad, MOVE FAILED",
}


def _where(i) -> str:
    return f"{i.path} [{i.key}]" if i.what == "sample" else str(i.path)


def format_summary(s) -> str:
    lines = [
        f"Re-checked {len(s.items):,} files and shard samples from {s.failures:,} failure lines "
        f"({len(s.files_read)} log files; checker version {s.checker_version})"
    ]
    if s.damaged_lines or s.torn_lines:
        lines.append(
            f"  log lines not used: {s.damaged_lines} damaged, {s.torn_lines} cut short (a process killed mid-write)"
        )
    lines += [f"  refused: {r}" for r in s.refused]
    counts = Counter(i.outcome for i in s.items)
    lines.append("  " + ", ".join(f"{n:,} {o.replace('_', ' ')}" for o, n in counts.most_common()))
    if s.dry_run:
        lines.append("  dry run: nothing moved, nothing denied")
    elif s.quarantine is None and counts.get("would_quarantine"):
        lines.append("  no --quarantine given: bad files listed, not moved")
    for outcome in (
        "quarantined",
        "would_quarantine",
        "failed",
        "denied",
        "would_deny",
        "already_denied",
        "left",
        "missing",
    ):
        shown = [i for i in s.items if i.outcome == outcome]
        for i in shown[:_MAX_LISTED]:
            verb = _VERB[outcome].format(status=i.status or "?")
            why = f"{i.reason}: {i.detail}" if i.status and i.status != "ok" else (i.detail or "")
            logged = f"; in training: {i.error or i.kind}: {i.message}" if (i.error or i.message) else ""
            lines.append(_shown(f"  {verb}: {_where(i)}" + (f" ({why})" if why else "") + logged))
        if len(shown) > _MAX_LISTED:
            lines.append(f"  ... and {len(shown) - _MAX_LISTED} more {outcome} (--json lists all)")
    if s.quarantine and counts.get("quarantined"):
        lines.append(f"Quarantined into {s.quarantine} (dsclean restore {s.quarantine} puts them back)")
    for d in s.denylists:
        lines.append(f"Deny-list: {d}")
    if s.recorded:
        lines.append(f"Recorded for the next dsclean scan of {s.root}: {s.recorded}")
    lines += [f"note: {n}" for n in s.notes]
    return "\n".join(lines)
