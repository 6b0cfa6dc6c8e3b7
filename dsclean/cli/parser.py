"""The argparse parser every ``dsclean`` command uses: short usage errors with a did-you-mean.

argparse's own error prints the whole usage (15 lines of options for ``scan``) before the one
line that matters, and blames unknown options of a sub-command on the top-level parser. Here a
usage error is three lines: the command's short usage, ``dsclean scan: error: ...`` (with "did
you mean --quarantine?" for an option or command spelt nearly right), and where the help is.
Exit 2, as argparse's.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import NoReturn

from .exit_codes import EXIT_USAGE


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are short, name the sub-command and suggest a spelling."""

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            owner = self._command_parser(ns)
            owner.error(f"unrecognized arguments: {' '.join(extras)}")
        return ns

    def _command_parser(self, ns: argparse.Namespace) -> "Parser":
        """The sub-command's parser the arguments went to (``self`` when there is none)."""
        command = getattr(ns, "command", None)
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and command in action.choices:
                chosen = action.choices[command]
                return chosen if isinstance(chosen, Parser) else self
        return self

    def short_usage(self) -> str:
        """``usage: dsclean scan ROOT [options]``: the positionals, not every option."""
        words = [self.prog]
        for action in self._actions:
            if action.option_strings or action.help == argparse.SUPPRESS:
                continue
            name = action.metavar or action.dest
            if isinstance(action, argparse._SubParsersAction):
                name = "COMMAND"
            name = name if isinstance(name, str) else " ".join(name)
            if action.nargs in ("+",):
                name = f"{name} [{name} ...]"
            elif action.nargs in ("?",):
                name = f"[{name}]"
            elif action.nargs == "*":
                name = f"[{name} ...]"
            words.append(name)
        if any(a.option_strings for a in self._actions if a.dest != "help"):
            words.insert(1, "[options]")
        return "usage: " + " ".join(words)

    def suggestion(self, message: str) -> str | None:
        """A close spelling for what the message says was wrong: an option, or a sub-command."""
        import difflib  # here: only a usage error needs it (the command's start-up does not)

        if message.startswith("unrecognized arguments:"):
            options = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
            for word in message.split(":", 1)[1].split():
                if word.startswith("-"):
                    match = difflib.get_close_matches(word.split("=", 1)[0], options, n=1, cutoff=0.6)
                    if match:
                        return f"did you mean {match[0]}?"
            return None
        if "invalid choice:" in message:
            for action in self._actions:
                if action.choices and "invalid choice:" in message:
                    wrong = message.split("invalid choice:", 1)[1].split("(", 1)[0].strip().strip("'\"")
                    match = difflib.get_close_matches(wrong, [str(c) for c in action.choices], n=1, cutoff=0.6)
                    if match:
                        return f"did you mean {match[0]!r}?"
        return None

    def error(self, message: str) -> NoReturn:
        hint = self.suggestion(message)
        lines = [
            self.short_usage(),
            f"{self.prog}: error: {message}" + (f"; {hint}" if hint else ""),
            f"see '{self.prog} --help'",
        ]
        sys.stderr.write("\n".join(lines) + "\n")
        sys.exit(EXIT_USAGE)


def add_output_options(
    p: argparse.ArgumentParser,
    *,
    quiet: str = "print nothing but errors",
    json_help: str | None = "print the result as JSON",
) -> None:
    """``-q``/``--quiet`` and ``--json``, the same two options on every command that prints."""
    p.add_argument("--quiet", "-q", action="store_true", help=quiet)
    if json_help:
        p.add_argument("--json", action="store_true", help=json_help)


def print_json(value) -> None:
    """One JSON document on standard output (what ``--json`` prints)."""
    print(json.dumps(value, indent=2, default=str))


def add_shard_set_options(p: argparse._ActionsContainer, scan: bool) -> None:
    """``--as``, ``--column``, ``--denylist`` of ``scan`` and ``verify`` (shard sets, :mod:`dsclean.shardsets`)."""
    from ..shardsets.detect import KINDS

    p.add_argument(
        "--as",
        dest="as_kind",
        choices=KINDS,
        help="read the input as this (default: recognised: a folder of .tar/.tar.gz, an MDS or litdata "
        "index.json, .parquet files, else a folder of files)",
    )
    p.add_argument(
        "--column",
        metavar="NAME",
        help="Parquet/Arrow: the column holding the media bytes (default: every column of Hugging Face "
        "Image/Audio features, a struct of bytes and path)",
    )
    if scan:
        p.add_argument(
            "--denylist",
            metavar="FILE",
            nargs="?",
            const="",
            help="shard sets: the deny-list the bad samples are appended to (default, also without --denylist: "
            "denylist.jsonl beside the shards; shards are never rewritten); storage URLs: list the bad objects in "
            "a deny-list instead of moving them (default FILE: denylist.jsonl beside the results)",
        )
    else:
        p.add_argument(
            "--denylist",
            metavar="FILE",
            help="shard sets: the deny-list to check against the set (default: denylist.jsonl beside the shards; "
            "a set in a bucket: the one its scan wrote beside its results; a storage URL: that object)",
        )
        p.add_argument(
            "--backend",
            choices=("processes", "loky", "threads", "dask"),
            default="processes",
            help="shard sets: where the samples are checked: processes (default), loky, threads, or dask: each "
            "shard a task on a Dask cluster whose workers read it from the store (see --scheduler)",
        )
        p.add_argument(
            "--scheduler",
            metavar="ADDRESS",
            help="shard sets, with --backend dask: the scheduler's tcp://HOST:PORT, or a scheduler file",
        )
