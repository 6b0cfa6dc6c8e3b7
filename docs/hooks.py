"""MkDocs hooks: the reference pages generated from the code, so they cannot drift from it.

- ``reference/cli/<command>.md``: one page per subcommand of :func:`dsclean.cli.build_parser` (usage,
  description, every option with its help text, in the parser's own argument groups);
- ``<!-- dsclean:reasons -->``, ``<!-- dsclean:flags -->``, ``<!-- dsclean:exit-codes -->``,
  ``<!-- dsclean:results-schema -->``, ``<!-- dsclean:fact-columns -->``, ``<!-- dsclean:cli-index -->``
  and ``<!-- dsclean:api -->`` in any page: tables rendered from ``dsclean/reasons.py``, ``FLAGS``,
  ``dsclean/cli/exit_codes.py``, the columns of ``dsclean/schema.py``, the lazy exports of ``dsclean/__init__.py``;
- the nav: every ``docs/guides/*.md``, ``docs/bench/*.md`` and ``docs/reliability/*.md`` not listed in
  mkdocs.yml is appended to its section, so a branch adding a page there needs no nav edit.

``tests/test_docs.py`` imports this module to check the same renderings.
"""

from __future__ import annotations

import argparse
import ast
import html
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # the worktree's dsclean, not whichever is installed
    sys.path.insert(0, ROOT)

#: docs folder -> the nav section its unlisted pages are appended to
AUTO_SECTIONS = {"guides": "How-to guides", "bench": "Benchmarks", "reliability": "Reliability"}


def _esc(text: str) -> str:
    """Help text as Markdown text: no HTML, no emphasis by accident, no table breaks."""
    return html.escape(text, quote=False).replace("*", r"\*").replace("|", r"\|").replace("\n", " ")


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """Every subcommand's parser, by name (aliases left out)."""
    from dsclean.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    seen, out = set(), {}
    for name, parser in sub.choices.items():
        if id(parser) not in seen:
            seen.add(id(parser))
            out[name] = parser
    return out


def option_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """An option's help as ``--help`` prints it (``%(default)s`` and the like expanded)."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    return parser._get_formatter()._expand_help(action)


def command_page(name: str, parser: argparse.ArgumentParser) -> str:
    """The reference page of one subcommand."""
    lines = [f"# dsclean {name}", "", "```", parser.format_usage().strip().removeprefix("usage: "), "```", ""]
    if parser.description:
        lines += [_esc(parser.description), ""]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.help != argparse.SUPPRESS and a.dest != "help"]
        if not actions:
            continue
        title = {"positional arguments": "Arguments", "options": "Options", "optional arguments": "Options"}.get(
            group.title or "", group.title or "Options"
        )
        lines += [f"## {title}", ""]
        if group.description:
            lines += [_esc(group.description), ""]
        for a in actions:
            if a.option_strings:
                names = ", ".join(f"`{o}`" for o in a.option_strings)
                if a.nargs != 0:
                    metavar = parser._get_formatter()._format_args(a, a.dest.upper())
                    names += f" `{metavar}`"
            else:
                names = f"`{a.metavar or a.dest}`"
            extra = (
                f" (one of: {', '.join(f'`{c}`' for c in a.choices)})"
                if a.choices and a.option_strings and a.metavar
                else ""
            )
            lines.append(f"- {names}: {_esc(option_help(parser, a))}{extra}")
        lines.append("")
    lines += ["Exit codes: see [Exit codes](../exit-codes.md).", ""]
    return "\n".join(lines)


def reasons_table() -> str:
    from dsclean.reasons import REASONS

    return "\n".join(["| reason | meaning |", "|---|---|", *(f"| `{c}` | {m} |" for c, m in REASONS.items())])


def flags_table() -> str:
    from dsclean.quality.flags import FLAGS

    return "\n".join(["| flag | meaning |", "|---|---|", *(f"| `{c}` | {m} |" for c, m in FLAGS.items())])


def exit_codes() -> list[tuple[str, int, str]]:
    """(name, value, comment) of each ``EXIT_*`` constant, read from the module's source with its comment."""
    from dsclean.cli import exit_codes as X

    src = open(X.__file__).read().split("\n")
    out = []
    for node in ast.parse("\n".join(src)).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            line = src[node.lineno - 1]
            comment = line.split("#", 1)[1].strip() if "#" in line else ""
            out.append((name, getattr(X, name), comment))
    return out


def exit_codes_table() -> str:
    rows = [f"| `{name}` | {value} | {_esc(comment)} |" for name, value, comment in exit_codes()]
    return "\n".join(
        [
            "| constant | code | meaning |",
            "|---|---|---|",
            *rows,
            "| (signal) | 130 / 143 | 128 + the signal number: SIGINT / SIGTERM |",
        ]
    )


def _schema_table(columns) -> str:
    """Columns of :mod:`dsclean.schema` as a table: name, Arrow type, nullability, meaning."""
    return "\n".join(
        [
            "| column | Arrow type | nullable | meaning |",
            "|---|---|---|---|",
            *(
                f"| `{c.name}` | `{c.type}` | {'yes' if c.nullable else 'no'} | {_esc_cell(c.meaning)} |"
                for c in columns
            ),
        ]
    )


def _esc_cell(text: str) -> str:
    """A meaning as a table cell: Markdown kept (code spans), table breaks escaped."""
    return text.replace("|", r"\|").replace("\n", " ")


def results_schema_table() -> str:
    from dsclean.schema import RESULTS

    return _schema_table(RESULTS)


def fact_columns_table() -> str:
    from dsclean.schema import FACTS

    return _schema_table(FACTS)


def cli_index() -> str:
    return "\n".join(
        f"- [`dsclean {name}`](cli/dsclean-{name}.md): {_esc(p.description or '')}" for name, p in subcommands().items()
    )


def api_page() -> str:
    """One mkdocstrings block per public name of ``dsclean`` (the lazy exports), grouped by module."""
    import dsclean

    by_module: dict[str, list[str]] = {}
    for name, module in dsclean._EXPORTS.items():
        by_module.setdefault(module, []).append(name)
    lines = []
    for module in sorted(by_module):
        lines += [f"## `dsclean.{module}`", ""]
        for name in sorted(by_module[module]):
            lines += [f"::: dsclean.{module}.{name}", "    options:", "      heading_level: 3", ""]
    return "\n".join(lines)


MARKERS = {
    "<!-- dsclean:reasons -->": reasons_table,
    "<!-- dsclean:flags -->": flags_table,
    "<!-- dsclean:exit-codes -->": exit_codes_table,
    "<!-- dsclean:results-schema -->": results_schema_table,
    "<!-- dsclean:fact-columns -->": fact_columns_table,
    "<!-- dsclean:cli-index -->": cli_index,
    "<!-- dsclean:api -->": api_page,
}


def render_markers(markdown: str) -> str:
    for marker, render in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown


def _listed(nav) -> set[str]:
    out: set[str] = set()
    for item in nav or []:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            out |= _listed(value)
        elif isinstance(value, str):
            out.add(value)
    return out


def on_files(files, config):
    from mkdocs.structure.files import File

    commands = subcommands()
    for name, parser in commands.items():
        files.append(File.generated(config, f"reference/cli/dsclean-{name}.md", content=command_page(name, parser)))
    nav = config["nav"]
    listed = _listed(nav)
    for item in nav:
        if not isinstance(item, dict):
            continue
        title, value = next(iter(item.items()))
        if title == "Reference" and isinstance(value, list):
            value.append({"Commands": [{f"dsclean {n}": f"reference/cli/dsclean-{n}.md"} for n in commands]})
        for folder, section in AUTO_SECTIONS.items():
            if title == section and isinstance(value, list):
                pages = sorted(
                    f.src_uri
                    for f in files
                    if f.src_uri.startswith(f"{folder}/") and f.src_uri.endswith(".md") and f.src_uri not in listed
                )
                value.extend(pages)
    # sections that would be empty (no page on this branch yet) are dropped rather than left dangling
    config["nav"] = [i for i in nav if not (isinstance(i, dict) and next(iter(i.values())) == [])]
    return files


def on_page_markdown(markdown, page, config, files):
    return render_markers(markdown)
