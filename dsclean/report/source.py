"""Which scan a report is about, and where that scan's files are now.

``dsclean report`` takes a dataset root (its results are found the way
``dsclean index`` finds them) or a results folder / file directly. Files the
scan moved are found through the quarantine journal (``manifest.jsonl``), so a
report made after quarantining still shows what was removed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from .. import locations
from ..atomic import output_target
from ..errors import UserError

REQUIRED_COLUMNS = ("path", "kind", "status", "reason", "detail")


@dataclass
class Source:
    """A scan's results and what is known about the scan that wrote them."""

    results_path: str  # the results (Parquet) file; the first part's, for a job array's unmerged parts
    root: str  # the scanned root, absolute (the one given, else the one the results record)
    columns: list[str]  # columns of the results table
    meta: dict = field(default_factory=dict)  # the results file's own metadata (root, options)
    summary: dict | None = None  # scan_summary.json, when it is there
    quarantine: str | None = None  # the quarantine folder, when there is one
    results_paths: list[str] = field(default_factory=list)  # every results file (all parts of a job array)
    results_source: str = ""  # where the results came from (dsclean.locations.find_scan), for the user
    incomplete: str | None = None  # the results are some parts of a job array only: which files they leave out
    prefix: bytes = b""  # a scanned parent's results: only the rows under this prefix are the report's (b"train/")
    scanned_root: str | None = None  # that parent (``root`` is then the folder reported on, one of its folders)

    @property
    def results_dir(self) -> str:
        return os.path.dirname(self.results_path)


def incomplete_note(root: str, metas: list[dict], ignored: list[str] = (), of_root: bool = False) -> str | None:
    """What results that are only some parts of a job array leave out (from their files' own metadata), or None.

    ``of_root``: they are every part of ROOT's array that has run (the others never did); else the
    results files given (``scan --shard I/N --html``, ``report RESULTS``), whatever other parts exist."""
    shards = [m.get("shard") for m in metas]
    if not shards or not all(isinstance(s, list) and len(s) == 2 for s in shards):
        return None
    n = shards[0][1]
    done = sorted({s[0] for s in shards})
    missing = sorted(set(range(n)) - set(done))
    if not missing:
        return None
    names = ", ".join(f"{i}/{n}" for i in missing)
    one = len(missing) == 1
    note = (
        f"INCOMPLETE: this report covers {len(done)} of the {n} parts of a job-array scan of {root} (part"
        f"{'s' if len(done) > 1 else ''} {', '.join(f'{i}/{n}' for i in done)}). The files of part"
        f"{'' if one else 's'} {names} are not in it"
        + (": they were never scanned" if of_root else "")
        + ", so their problems, duplicates and quality are unknown here and every count leaves them out. "
        + (
            (
                f"Run `dsclean scan {root} --shard {missing[0]}/{n}`"
                if one
                else f"Run `dsclean scan {root} --shard I/{n}` for each missing part I"
            )
            + f", then `dsclean report {root}`."
            if of_root
            else f"`dsclean report {root}` reports every part that has run."
        )
    )
    return note + "".join(f" Ignored: {why}." for why in ignored)


def open_source(target: str, state_dir: str | None = None) -> Source:
    """The scan behind ``target``: a dataset root (its last scan by :func:`dsclean.locations.find_results`,
    every part of a job array), a results folder, or a results file."""
    from ..scanning.results import read_results_meta

    root_given = None
    ignored: list[str] = []
    prefix, parent = b"", None
    if os.path.isfile(target):
        paths, found = [target], f"the results file {target}"
    elif os.path.isdir(target):
        results = os.path.join(target, locations.RESULTS_FILE)
        paths, found = [results], f"the results folder {target}"
        if not os.path.isfile(results):
            root_given = os.path.abspath(target)
            scan = locations.find_scan(target, state_dir=state_dir)
            paths, found = scan.paths, scan.source
            if scan.scanned_root:  # a scanned parent's results: only its rows under target are reported
                prefix, parent = scan.prefix, scan.scanned_root
                found += f" (the report covers only {target}: the rows under {scan.subdir}/)"
            ignored = scan.partial.ignored if scan.partial is not None else []
            if not paths:
                raise UserError(
                    f"{target}: no scan results found (neither a results folder nor a scanned root: "
                    f"{found}); run `dsclean scan {target}` first, or give the folder its results were written to"
                )
    else:
        raise UserError(f"{target} does not exist")
    paths = [os.path.abspath(p) for p in paths]
    results = paths[0]
    try:
        import pyarrow.parquet as pq

        columns = pq.read_schema(results).names
        metas = [read_results_meta(p) for p in paths]
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise UserError(f"{results} is not a readable dsclean results file: {exc}") from exc
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise UserError(f"{results} is not a dsclean results file: no column {', '.join(missing)}")
    meta = metas[0]
    root = root_given or meta.get("root") or ""
    summary = _summed_parts([_read_summary(p) for p in paths]) if len(paths) > 1 else _read_summary(results)
    return Source(
        results,
        root,
        columns,
        meta,
        summary,
        _quarantine_of(results, summary),
        paths,
        found,
        incomplete_note(root, metas, ignored, of_root=root_given is not None),
        prefix,
        parent,
    )


def _read_summary(results: str) -> dict | None:
    """The scan_summary.json written next to a results file (part-tagged names too), if readable."""
    folder, name = os.path.split(results)
    stem_r, _ = os.path.splitext(locations.RESULTS_FILE)
    stem_s, ext_s = os.path.splitext(locations.SUMMARY_FILE)
    tag = os.path.splitext(name)[0][len(stem_r) :] if name.startswith(stem_r) else None
    if tag is None:
        return None
    path = os.path.join(folder, stem_s + tag + ext_s)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _summed_parts(summaries: list[dict | None]) -> dict | None:
    """The summary of several parts of a job array as the report shows it: the first part's command and
    options, files quarantined added up, interrupted if any part was; no scan time (the parts ran apart).
    None when a part's summary cannot be read: one part's count would pass for all of them."""
    if not summaries or any(s is None for s in summaries):
        return None
    first = summaries[0]
    moved = [s.get("quarantined") for s in summaries]
    out = {k: v for k, v in first.items() if k not in ("elapsed", "quarantined")}
    if all(isinstance(n, int) for n in moved):
        out["quarantined"] = sum(moved)
    out["interrupted"] = any(s.get("interrupted") for s in summaries)
    return out


def _quarantine_of(results: str, summary: dict | None) -> str | None:
    q = (summary or {}).get("quarantine")
    if isinstance(q, str) and os.path.isdir(q):
        return q
    folder = os.path.dirname(results)
    stem, ext = os.path.splitext(locations.MANIFEST_FILE)
    if any(n.startswith(stem) and n.endswith(ext) for n in os.listdir(folder)):
        return folder
    return None


def safe_rel(rel: object) -> bool:
    """A relative path that stays below its folder (journal and groups entries are not trusted)."""
    return (
        isinstance(rel, str)
        and bool(rel)
        and not os.path.isabs(rel)
        and ".." not in rel.split("/")
        and "\x00" not in rel
    )


def quarantined_locations(quarantine: str, root: str, rels: set[str]) -> dict[str, str]:
    """Where the journal says each of ``rels`` (moved from ``root``) is now, for moves done and not undone."""
    from ..scanning.quarantine.journal import read_journal

    stem, ext = os.path.splitext(locations.MANIFEST_FILE)
    moved: dict[str, tuple[str, str]] = {}  # move id -> (src, dst)
    done: set[str] = set()
    restored_moves: dict[str, str] = {}  # restore id -> the move it undoes
    for name in sorted(os.listdir(quarantine)):
        if not (name.startswith(stem) and name.endswith(ext)):
            continue
        for e in read_journal(os.path.join(quarantine, name)):
            op, ident = e["op"], str(e["id"])
            if op == "move" and e.get("src") in rels and e.get("root") == root and safe_rel(e.get("dst")):
                moved[ident] = (e["src"], e["dst"])
            elif op == "restore":
                restored_moves[ident] = str(e.get("of"))
            elif op == "done":
                done.add(ident)
    undone = {of for ident, of in restored_moves.items() if ident in done}
    return {
        src: os.path.join(quarantine, dst)
        for ident, (src, dst) in moved.items()
        if ident in done and ident not in undone
    }


def locate(source: Source, rels: set[str]) -> dict[str, str]:
    """Absolute path of each of ``rels`` (relative to the scan root): in place, else in the quarantine."""
    found: dict[str, str] = {}
    prefix = source.root.rstrip(os.sep) + os.sep if source.root else None
    for rel in rels:
        if prefix and safe_rel(rel) and os.path.lexists(prefix + rel):
            found[rel] = prefix + rel
    missing = rels - found.keys()
    if missing and source.quarantine and source.root:
        under = os.fsdecode(source.prefix)  # a split's rels are the parent scan's under its folder
        asked = {under + rel: rel for rel in missing}
        moved = quarantined_locations(source.quarantine, source.meta.get("root") or source.root, set(asked))
        found.update((asked[key], where) for key, where in moved.items() if key in asked)
    return found


#: what the head of every report holds (its <title>): an existing file without it is not replaced
REPORT_MARK = b"<title>dsclean report"


def check_output(output: str, root: str | None) -> str:
    """The report's absolute path; refuses a storage URL (a report is written locally, never into a bucket), a
    folder, a device or other special file, an existing file that is not a dsclean report, and any place inside
    the dataset being reported on."""
    from ..storage.urls import is_url

    if is_url(output) or "://" in output:
        raise UserError(
            f"{output}: the report is written to a local file (never into a bucket): give a local path, "
            "and copy it where you need it"
        )
    out = os.path.abspath(output)
    if os.path.isdir(out):
        raise UserError(
            f"{output} is a folder; give the report's file name, e.g. {os.path.join(output, 'report.html')}"
        )
    parent = os.path.dirname(out)
    while not os.path.lexists(parent):  # missing folders are made; an existing ancestor must be a folder
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise UserError(f"{output}: {parent} is a file, not a folder; the report cannot be written there")
    target = output_target(out)  # devices, FIFOs, sockets: refused; a symbolic link: its target
    if os.path.isfile(target) and os.path.getsize(target) > 0:
        with open(target, "rb") as f:
            if REPORT_MARK not in f.read(4096):
                raise UserError(
                    f"{output}: exists and is not a dsclean report; refusing to replace it: "
                    "choose another file name (-o FILE)"
                )
    if root:
        if locations.is_inside(os.path.dirname(out), root):
            raise UserError(
                f"{output} is inside the dataset {root}; dsclean never writes into a dataset: "
                "write the report somewhere else (-o FILE)"
            )
    return out
