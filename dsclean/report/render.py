"""ReportData -> one self-contained HTML page (inline CSS and JS, images as data URIs).

Every piece of text is escaped here, with :func:`~dsclean.report.safe.esc`, or
embedded as JSON with :func:`~dsclean.report.safe.script_json`. A Content
Security Policy in the page allows only its own stylesheet and script (by
hash) and ``data:`` images: no request can leave the page, and even a name
that slipped through escaping could not run a script.
"""

from __future__ import annotations

import base64
import hashlib
from importlib import resources

from .. import reasons as R
from .model import DupGroup, Duplicates, Gallery, Item, ReportData, TrainingFailures
from .safe import esc, script_json
from .svg import columns, hbars, heatmap, histogram, human_bytes, human_seconds

SECTIONS = {
    "summary": "Summary",
    "reasons": "Problems by reason",
    "duplicates": "Duplicates",
    "quality": "Quality outliers",
    "composition": "Dataset composition",
    "consistency": "Consistency of the set",
    "problems": "All problems",
}
#: the section shown only when there are training failures (logs or quarantine --from-log's record)
TRAINING = ("training", "Failed in training")


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def render(data: ReportData) -> str:
    """The whole page."""
    css, js = _asset("report.css"), _asset("report.js")
    csp = (
        f"default-src 'none'; img-src data:; style-src {_csp_hash(css)}; script-src {_csp_hash(js)}; "
        "base-uri 'none'; form-action 'none'"
    )
    parts = [_summary(data), _reasons(data)]
    if data.training is not None:
        parts.append(_training(data.training))
    if data.duplicates is not None:
        parts.append(_duplicates(data.duplicates))
    if data.outliers or data.flags or data.fact_counts:
        parts.append(_quality(data))
    parts += [_composition(data)]
    if data.distributions:
        parts.append(_consistency(data))
    parts.append(_problems(data))
    return "".join(
        [
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
            '<meta name="referrer" content="no-referrer">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>dsclean report: {esc(data.title)}{' (INCOMPLETE)' if data.incomplete else ''}</title>",
            f"<style>{css}</style></head><body>",
            '<header class="top">',
            f'<h1>dsclean report: <span class="root">{esc(data.title)}</span></h1>',
            f'<div class="sub">made {esc(data.generated)} by dsclean {esc(data.version)} from {esc(data.results)}</div>',
            f'<p class="incomplete" role="alert">{esc(data.incomplete)}</p>' if data.incomplete else "",
            "</header>",
            '<div class="layout">',
            _toc(data),
            "<main>",
            *parts,
            "</main></div>",
            "<footer>This page is self-contained: it makes no network request. Thumbnails are re-encoded previews, "
            "never the files themselves.</footer>",
            f"<script>{js}</script></body></html>\n",
        ]
    )


# ---- pieces ----------------------------------------------------------------------------------------


def _toc(data: ReportData) -> str:
    entries = [("summary", SECTIONS["summary"], "", False)]
    entries.append(("reasons", SECTIONS["reasons"], f"{data.problems_total:,}", False))
    entries += [(g.anchor, g.title, f"{g.total:,}", True) for g in data.reason_galleries]
    if data.training is not None:
        entries.append((*TRAINING, f"{data.training.distinct:,}", False))
    if data.duplicates is not None:
        entries.append(("duplicates", SECTIONS["duplicates"], f"{data.duplicates.total_groups:,}", False))
    if data.outliers or data.flags or data.fact_counts:
        entries.append(("quality", SECTIONS["quality"], "", False))
        entries += [(g.anchor, g.title, "", True) for g in data.outliers]
        entries += [(g.anchor, f"flag: {g.title}", f"{g.total:,}", True) for g in data.flags]
    entries += [("composition", SECTIONS["composition"], "", False)]
    if data.distributions:
        entries.append(("consistency", SECTIONS["consistency"], f"{sum(data.norm_flagged.values()):,}", False))
    entries += [("problems", SECTIONS["problems"], f"{data.problems_total:,}", False)]
    items = "".join(
        f'<li{" class=sub" if sub else ""}><a href="#{esc(anchor)}"><span>{esc(title)}</span>'
        f'<span class="n">{esc(n)}</span></a></li>'
        for anchor, title, n, sub in entries
    )
    return f'<nav class="toc" aria-label="Sections"><ol>{items}</ol></nav>'


def _stat(value: str, label: str, cls: str = "") -> str:
    return f'<div class="stat {cls}"><div class="v">{esc(value)}</div><div class="k">{esc(label)}</div></div>'


def _summary(d: ReportData) -> str:
    bad = sum(d.reasons.get(R.BAD, {}).values())
    warn = sum(d.reasons.get(R.WARN, {}).values())
    stats = [
        _stat(f"{d.files:,}", "files checked" + (" (NOT the whole tree)" if d.incomplete else "")),
        _stat(human_bytes(d.bytes), "total size"),
        _stat(f"{d.files - bad - warn:,}", "ok", "ok"),
        _stat(f"{bad:,}", "bad", "bad"),
        _stat(f"{warn:,}", "warn", "warn"),
    ]
    if d.quarantined is not None:
        stats.append(_stat(f"{d.quarantined:,}", "in quarantine"))
    if d.restored:
        stats.append(_stat(f"{d.restored:,}", "restored to ROOT"))
    if d.elapsed:
        stats.append(_stat(human_seconds(d.elapsed), f"scan time ({d.files / d.elapsed:,.0f} files/s)"))
    rows = "".join(
        f"<tr><td>{esc(kind)}</td>"
        + "".join(f'<td class="n">{c.get(st, 0):,}</td>' for st in R.STATUSES)
        + f'<td class="n">{sum(c.values()):,}</td></tr>'
        for kind, c in d.counts.items()
    )
    kinds = (
        "<table class=plain><thead><tr><th>kind</th>"
        + "".join(f'<th class="n">{st}</th>' for st in R.STATUSES)
        + '<th class="n">files</th></tr></thead><tbody>'
        + rows
        + "</tbody></table>"
    )
    charts = []
    for st, title in ((R.BAD, "Bad files by reason"), (R.WARN, "Warnings by reason")):
        if d.reasons.get(st):
            rows_ = [(r, [n]) for r, n in d.reasons[st].items()]
            charts.append(f'<div class="chartbox"><h3>{title}</h3>{hbars(rows_, [st], title, width=520)}</div>')
    cmds = ""
    if d.scan_command:
        cmds += f"<h3>Scan command</h3><pre class=cmd>{esc(d.scan_command)}</pre>"
    if d.report_command and d.report_command != d.scan_command:
        cmds += f"<h3>Report command</h3><pre class=cmd>{esc(d.report_command)}</pre>"
    if d.scan_options:
        rows_ = "".join(
            f"<tr><th>{esc(label)}</th><td>{esc(value)}</td></tr>" for label, value in check_option_rows(d.scan_options)
        )
        cmds += f"<h3>Check options</h3><table class=plain>{rows_}</table>"
    notes = "".join(f"<p class=blurb>{esc(n)}</p>" for n in d.notes)
    return (
        f'<section id="summary"><h2>{SECTIONS["summary"]}</h2>'
        f'<p class="lead">Dataset <b>{esc(d.root)}</b>.</p>'
        f'<div class="stats">{"".join(stats)}</div>{kinds}<div class="charts">{"".join(charts)}</div>{cmds}{notes}</section>'
    )


def _meta(item: Item) -> str:
    bits = []
    if item.size is not None:
        bits.append(human_bytes(item.size))
    if item.width and item.height:
        bits.append(f"{item.width}×{item.height}")
    if item.duration is not None and item.kind == "audio" and item.duration == item.duration:
        bits.append(human_seconds(item.duration))
    if item.sample_rate:
        bits.append(f"{item.sample_rate / 1000:g} kHz")
    if item.format:
        bits.append(item.format)
    return " · ".join(bits)


def card(item: Item) -> str:
    """One file: its thumbnail (or a placeholder saying why not), path, reason, the decoder's words."""
    t = item.thumb
    kind_cls = "thumb audio" if item.kind == "audio" else "thumb"
    if t is not None and t.data_uri:
        pic = (
            f'<img src="{t.data_uri}" width="{t.width}" height="{t.height}" alt="{esc("thumbnail of " + item.path)}" '
            'decoding="async" loading="lazy">'
        )  # off-screen thumbnails load as they scroll into view
    else:
        pic = f'<div class="ph">{esc(t.note if t else "no thumbnail (--no-thumbnails)")}</div>'
    badge = f'<span class="badge {esc(item.status)}">{esc(item.reason)}</span> ' if item.reason else ""
    note = ""
    if t is not None and t.data_uri and t.note:
        note = f'<div class="note{"" if t.cut else " info"}">{esc(t.note)}</div>'
    if item.note:
        note += f'<div class="note info">{esc(item.note)}</div>'
    detail = f'<div class="detail" title="{esc(item.detail)}">{esc(item.detail)}</div>' if item.detail else ""
    return (
        f'<figure class="card {esc(item.status)}"><div class="{kind_cls}">{pic}</div><figcaption>'
        f'<div class="path" title="{esc(item.path)}">{esc(item.path)}</div>'
        f'<div class="meta">{badge}{esc(_meta(item))}</div>{note}{detail}</figcaption></figure>'
    )


def _gallery(g: Gallery, show_all: bool) -> str:
    badge = f'<span class="badge {esc(g.status)}">{esc(g.status)}</span>' if g.status else ""
    head = (
        f'<h3 id="{esc(g.anchor)}">{badge}<span>{esc(g.title)}</span>'
        f'<span class="count">{g.total:,} file{"s" if g.total != 1 else ""}</span></h3>'
    )
    blurb = f'<p class="blurb">{esc(g.blurb)}</p>' if g.blurb else ""
    more = ""
    if g.total > len(g.items):
        more = f'<p class="more">Showing {len(g.items):,} of {g.total:,}. '
        if show_all:
            more += (
                f'<button type="button" data-show-status="{esc(g.status)}" data-show-reason="{esc(g.reason)}">'
                f"show all {g.total:,} in the table</button>"
            )
        more += "</p>"
    return f'{head}{blurb}<div class="grid">{"".join(card(i) for i in g.items)}</div>{more}'


def _reasons(d: ReportData) -> str:
    if not d.reason_galleries:
        body = '<p class="lead">No bad or warn files: every file decoded whole.</p>'
    else:
        body = (
            '<p class="lead">Each reason a file was marked bad or warn, with what still decodes of it. '
            "For a cut image the red line marks where decoding stops.</p>"
            + "".join(_gallery(g, show_all=True) for g in d.reason_galleries)
        )
    return f'<section id="reasons"><h2>{SECTIONS["reasons"]}</h2>{body}</section>'


def _group(g: DupGroup) -> str:
    leak = g.leak
    head = [
        f'<span class="badge {"bad" if leak else "info"}">{"split leakage" if leak else esc(g.kind)}</span>',
        f"<span>{g.total_members:,} files</span>",
    ]
    if g.splits:
        head.append(f"<span>splits: {esc(', '.join(g.splits))}</span>")
    if leak:
        head.append(f"<span>{esc(g.kind)} duplicates</span>")
    more = (
        f'<p class="more">and {g.total_members - len(g.members):,} more</p>' if g.total_members > len(g.members) else ""
    )
    return (
        f'<div class="group{" leak" if leak else ""}"><div class="head">{"".join(head)}</div>'
        f'<div class="side">{"".join(card(m) for m in g.members)}</div>{more}</div>'
    )


def _duplicates(dup: Duplicates) -> str:
    if dup.source == "hashes":
        lead = (
            f"Exact duplicates inside this dataset (same content hash): {dup.total_groups:,} groups, "
            f"{dup.total_files:,} files, {human_bytes(dup.wasted_bytes)} in extra copies. "
            "Run <code>dsclean dups</code> across your splits and pass <code>--dups groups.jsonl</code> "
            "to see near duplicates and split leakage."
        )
    else:
        lead = (
            f"From {esc(dup.source)}: {dup.total_groups:,} groups ({dup.exact_groups:,} exact, "
            f"{dup.near_groups:,} near), {dup.total_files:,} files; "
            f"<b>{dup.leaking_groups:,} groups span splits</b> (the same picture in train and test), shown first."
        )
    shown = (
        f'<p class="more">Showing {len(dup.groups):,} of {dup.total_groups:,} groups.</p>'
        if dup.total_groups > len(dup.groups)
        else ""
    )
    body = "".join(_group(g) for g in dup.groups) or '<p class="empty">No duplicates found.</p>'
    notes = "".join(f"<p class=blurb>{esc(n)}</p>" for n in dup.notes)
    return f'<section id="duplicates"><h2>{SECTIONS["duplicates"]}</h2><p class="lead">{lead}</p>{notes}{body}{shown}</section>'


def _training(t: TrainingFailures) -> str:
    lead = (
        f"{t.total:,} failures logged while training, {t.distinct:,} distinct files and shard samples, from "
        f"{', '.join(t.sources) or 'no log'}. A failure is not a verdict: dsclean quarantine --from-log checks "
        "each again and moves (or denies) only the ones that check bad."
    )
    damaged = (
        f'<p class="blurb">Log lines not used: {t.damaged_lines:,} damaged, {t.torn_lines:,} cut short.</p>'
        if t.damaged_lines or t.torn_lines
        else ""
    )
    notes = "".join(f'<p class="blurb">{esc(n)}</p>' for n in t.notes)
    errors = (
        '<table class=plain><thead><tr><th>error</th><th>kind</th><th class="n">failures</th></tr></thead><tbody>'
        + "".join(f'<tr><td>{esc(e)}</td><td>{esc(k)}</td><td class="n">{n:,}</td></tr>' for e, k, n in t.by_error)
        + "</tbody></table>"
    )
    concl = (
        '<table class=plain><thead><tr><th>re-check</th><th class="n">files / samples</th></tr></thead><tbody>'
        + "".join(f'<tr><td>{esc(c)}</td><td class="n">{n:,}</td></tr>' for c, n in t.conclusions.items())
        + "</tbody></table>"
    )
    rows = "".join(
        f'<tr><td class="path">{esc(x["where"])}</td><td>{esc(x["error"])}</td><td>{esc(x["kind"])}</td>'
        f"<td>{esc(x['message'])}</td><td>{esc(x['conclusion'])}</td></tr>"
        for x in t.examples
    )
    more = (
        f'<p class="blurb">The first {len(t.examples):,} of {t.distinct:,} are shown.</p>'
        if t.distinct > len(t.examples)
        else ""
    )
    examples = (
        '<div class="tablewrap"><table class="plain training"><thead><tr><th>file or shard [key]</th>'
        f"<th>error</th><th>kind</th><th>message</th><th>re-check</th></tr></thead><tbody>{rows}</tbody>"
        f"</table></div>{more}"
    )
    return (
        f'<section id="{TRAINING[0]}"><h2>{TRAINING[1]}</h2><p class="lead">{esc(lead)}</p>{damaged}{notes}'
        f'<div class="charts">{errors}{concl}</div>{examples}</section>'
    )


def _quality(d: ReportData) -> str:
    parts = [
        '<p class="lead">The most extreme files by the quality facts the scan recorded, and the files '
        "carrying each quality flag. These are not broken; they may still be worth a look.</p>"
    ]
    if d.fact_counts:
        parts.append(
            "<table class=plain><tbody>"
            + "".join(f'<tr><td>{esc(k)}</td><td class="n">{n:,}</td></tr>' for k, n in d.fact_counts.items())
            + "</tbody></table>"
        )
    parts += [_gallery(g, show_all=False) for g in d.outliers]
    parts += [_gallery(g, show_all=False) for g in d.flags]
    return f'<section id="quality"><h2>{SECTIONS["quality"]}</h2>{"".join(parts)}</section>'


def _composition(d: ReportData) -> str:
    boxes = []
    if d.classes:
        rows = [(name, [kept, bad]) for name, kept, bad in d.classes]
        kept = [k for _, k, _ in d.classes if k]
        ratio = (
            f" The largest class has {max(kept) / min(kept):,.1f}× the files of the smallest shown."
            if len(kept) > 1
            else ""
        )
        more = f" Top {len(d.classes)} of {d.classes_total:,} classes." if d.classes_total > len(d.classes) else ""
        unl = f" {d.unlabelled:,} files sit directly in the root (no class)." if d.unlabelled else ""
        boxes.append(
            '<div class="chartbox wide"><h3>Files per class</h3>'
            f'<p class="blurb">Class = first folder under the root (as ImageFolder reads it).{ratio}{more}{unl}</p>'
            '<div class="legend"><span><i></i>kept</span><span><i class="bad"></i>bad</span></div>'
            + hbars(rows, ["kept", "bad"], "files per class", width=760)
            + "</div>"
        )
    if d.resolution is not None:
        xe, ye, counts = d.resolution
        boxes.append(
            '<div class="chartbox"><h3>Image resolution</h3><p class="blurb">width × height, log scale; '
            "darker = more images</p>" + heatmap(xe, ye, counts, "image resolution") + "</div>"
        )
    for kind, h in d.sizes.items():
        boxes.append(
            f'<div class="chartbox"><h3>File size: {esc(kind)}</h3>'
            + histogram(h.edges, h.counts, human_bytes, f"{kind} file sizes")
            + "</div>"
        )
    if d.durations is not None:
        boxes.append(
            '<div class="chartbox"><h3>Audio duration</h3>'
            + histogram(d.durations.edges, d.durations.counts, human_seconds, "audio durations")
            + "</div>"
        )
    if d.sample_rates:
        boxes.append(
            '<div class="chartbox"><h3>Audio sample rate</h3>'
            + columns(d.sample_rates, lambda r: f"{r / 1000:g} kHz", "audio sample rates")
            + "</div>"
        )
    if d.channels:
        boxes.append(
            '<div class="chartbox"><h3>Audio channels</h3>'
            + columns(d.channels, lambda c: f"{c} ch", "audio channels")
            + "</div>"
        )
    body = "".join(boxes) or '<p class="empty">No media facts recorded.</p>'
    return f'<section id="composition"><h2>{SECTIONS["composition"]}</h2><div class="charts">{body}</div></section>'


#: the distributions the consistency section shows, with their titles
_DISTRIBUTIONS = (
    ("mode", "Image modes"),
    ("shorter_side", "Image shorter side"),
    ("aspect_ratio", "Aspect ratio"),
    ("sample_rate", "Audio sample rate (Hz)"),
    ("channels", "Audio channels"),
    ("duration", "Audio duration"),
)


def _consistency(d: ReportData) -> str:
    """The set's distributions (table + bars each) and the minority its inferred norm warned about."""
    boxes = []
    for name, title in _DISTRIBUTIONS:
        values = d.distributions.get(name)
        if not values:
            continue
        total = sum(values.values()) or 1
        rows = "".join(
            f'<tr><td>{esc(k)}</td><td class="n">{n:,}</td><td class="n">{n / total:.1%}</td></tr>'
            for k, n in list(values.items())[:20]
        )
        boxes.append(
            f'<div class="chartbox"><h3>{esc(title)}</h3>'
            + columns(values, str, title.lower())
            + f'<table class=plain><thead><tr><th>value</th><th class="n">files</th><th class="n">share</th>'
            f"</tr></thead><tbody>{rows}</tbody></table></div>"
        )
    if d.norm_flagged:
        flagged = ", ".join(f"{r} {n:,}" for r, n in sorted(d.norm_flagged.items()))
        lead = (
            f'<p class="lead">Outside the set\'s inferred norm (a minority of their class folder, warned about; '
            f"their galleries are under {esc(SECTIONS['reasons'])}): {esc(flagged)}.</p>"
        )
    else:
        lead = '<p class="lead">No file lies outside the set\'s inferred norm.</p>'
    return (
        f'<section id="consistency"><h2>{SECTIONS["consistency"]}</h2>{lead}'
        f'<div class="charts">{"".join(boxes)}</div></section>'
    )


def _problems(d: ReportData) -> str:
    capped = ""
    if d.problems_total > len(d.problems):
        capped = (
            f'<p class="blurb">The table holds the first {len(d.problems):,} of {d.problems_total:,} problems; '
            f"every one is in problems.jsonl next to the results.</p>"
        )
    statuses = "".join(f'<option value="{esc(s)}">{esc(s)}</option>' for s in (R.BAD, R.WARN) if d.reasons.get(s))
    reasons = sorted({r for by in d.reasons.values() for r in by})
    reason_opts = "".join(f'<option value="{esc(r)}">{esc(r)}</option>' for r in reasons)
    kinds = "".join(f'<option value="{esc(k)}">{esc(k)}</option>' for k in d.counts)
    heads = "".join(f'<th><button type="button" data-col="{esc(c)}">{esc(c)}</button></th>' for c in d.problems_columns)
    payload = script_json({"columns": d.problems_columns, "rows": d.problems})
    return (
        f'<section id="problems"><h2>{SECTIONS["problems"]}</h2>{capped}'
        '<div class="controls">'
        '<input type="search" id="f-q" placeholder="Filter by path, reason or message" aria-label="filter">'
        f'<select id="f-status" aria-label="status"><option value="">any status</option>{statuses}</select>'
        f'<select id="f-reason" aria-label="reason"><option value="">any reason</option>{reason_opts}</select>'
        f'<select id="f-kind" aria-label="kind"><option value="">any kind</option>{kinds}</select>'
        '<button type="button" id="f-clear">clear</button></div>'
        f'<div class="tablewrap"><table class="problems"><thead><tr>{heads}</tr></thead>'
        '<tbody id="problems-body"></tbody></table></div>'
        '<div class="pager"><button type="button" id="page-prev">‹ previous</button>'
        '<span id="page-no"></span><button type="button" id="page-next">next ›</button>'
        '<span id="problems-info"></span></div>'
        f'<script type="application/json" id="problems-data">{payload}</script></section>'
    )


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


def check_option_rows(opts: dict) -> list[tuple[str, str]]:
    """The scan's recorded check options as labelled rows a user reads (no bare ``max_memory=0``).

    The memory ceiling shows the one in force: ``--max-memory``'s, or the default ceiling
    (:func:`dsclean.scanning.worker.default_memory_ceiling`, computed on this machine) with what
    passing it means.
    """
    from ..scanning.worker import default_memory_ceiling

    rows: list[tuple[str, str]] = []
    for key, value in opts.items():
        if key == "checker":
            rows.append(("checker version", f"{value} (a newer version checks every file again)"))
        elif key == "lenient":
            rows.append(("recoverable decoder warnings", "warn (--lenient)" if value else "bad (the default)"))
        elif key == "max_pixels":
            rows.append(
                (
                    "pixel limit",
                    f"{value:,} pixels: larger images are decompression bombs" if value else "none (--max-pixels 0)",
                )
            )
        elif key == "max_frames":
            rows.append(("frames decoded per animation", f"at most {value:,}"))
        elif key == "flac_md5":
            rows.append(("FLAC MD5 check", "on" if value else "off"))
        elif key == "facts":
            rows.append(("facts recorded", "yes (hashes, levels, quality flags)" if value else "no (--facts none)"))
        elif key == "timeout":
            rows.append(("time limit per file", f"{float(value):g} s" if value else "none (--timeout 0)"))
        elif key == "max_memory":
            if isinstance(value, int) and value > 0:
                rows.append(
                    ("memory ceiling per check", f"{_gib(value)} (--max-memory: a file past it is bad/too_large)")
                )
            elif isinstance(value, int) and value < 0:
                rows.append(("memory ceiling per check", "none (--max-memory none)"))
            else:
                rows.append(
                    (
                        "memory ceiling per check",
                        f"{_gib(default_memory_ceiling())} (default: a share of "
                        "RAM per core on this machine; a file past it is warn/too_large, not judged)",
                    )
                )
        else:
            rows.append((str(key).replace("_", " "), str(value)))
    return rows
