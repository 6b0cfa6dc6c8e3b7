"""What a report shows, as plain data: collected from the results, then thumbnailed, then rendered.

Every string here is display text (absolute paths already scrubbed); HTML
escaping happens only when rendering (:mod:`dsclean.report.render`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Thumb:
    """A thumbnail, re-encoded (never the file's own bytes), or why there is none."""

    data_uri: str | None = None  # data:image/jpeg;base64,... or data:image/png;base64,...
    note: str = ""  # why there is no picture, or what the picture shows ("decodes down to the red line")
    width: int = 0
    height: int = 0
    cut: bool = False  # the picture marks where decoding stops (a red line)


@dataclass
class Item:
    """One file in a gallery or a duplicate group."""

    path: str  # display text: path relative to its root (or "root: path" across roots)
    kind: str = "unknown"
    status: str = "ok"
    reason: str | None = None
    detail: str = ""
    size: int | None = None
    format: str | None = None
    width: int | None = None
    height: int | None = None
    duration: float | None = None
    sample_rate: int | None = None
    note: str = ""  # what put it here: "brightness 0.031", "distance 4"
    rel: str = ""  # the path relative to the scan root, as the file system spells it (for finding the bytes)
    source: str | None = None  # absolute path to read the bytes from; never shown
    missing: str = ""  # the placeholder when no source is found (default: where the scan or journal says)
    thumb: Thumb | None = None


@dataclass
class Gallery:
    """Files that share a reason, a flag or an extreme value: at most a cap of them, and the total."""

    anchor: str  # HTML id
    title: str
    total: int
    items: list[Item] = field(default_factory=list)
    status: str = ""  # bad / warn for reason sections
    reason: str = ""  # the reason code or flag (the table filter the "show all" button applies)
    blurb: str = ""  # one line on what this is


@dataclass
class DupGroup:
    kind: str  # exact / near
    members: list[Item]
    splits: list[str] = field(default_factory=list)  # the splits as shown (names, unless --absolute-paths)
    leak: bool = False  # members in two or more splits (split leakage)
    total_members: int = 0  # members in the group (members may be capped)


@dataclass
class Duplicates:
    source: str  # "hashes" (content_hash of this scan) or the groups file's name
    groups: list[DupGroup] = field(default_factory=list)  # the first few, leakage first
    total_groups: int = 0
    total_files: int = 0  # files in all groups
    leaking_groups: int = 0  # groups spanning splits
    exact_groups: int = 0
    near_groups: int = 0
    wasted_bytes: int = 0  # bytes of every member but one, exact groups (when sizes are known)
    notes: list[str] = field(default_factory=list)


@dataclass
class Histogram:
    """Counts over bins; ``edges`` has one more entry than ``counts``."""

    edges: list[float]
    counts: list[int]


@dataclass
class TrainingFailures:
    """The "Failed in training" section: failure logs (dsclean.guard's) and what re-checking them concluded."""

    sources: list[str] = field(default_factory=list)  # display text: the logs, or the state folder's record
    total: int = 0  # failure lines (or recorded re-checks)
    by_error: list[tuple[str, str, int]] = field(default_factory=list)  # (error, kind, n), most first
    conclusions: dict[str, int] = field(default_factory=dict)  # re-check outcome -> distinct files/samples
    examples: list[dict] = field(default_factory=list)  # display text: where, error, kind, message, conclusion
    distinct: int = 0  # distinct files and samples
    damaged_lines: int = 0
    torn_lines: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass
class ReportData:
    """Everything the page shows."""

    title: str
    root: str  # display text
    results: str  # display text
    generated: str  # UTC timestamp
    version: str
    incomplete: str | None = None  # display text: the results are some parts of a job array; what is left out
    scan_command: str = ""
    report_command: str = ""
    scan_options: dict = field(default_factory=dict)
    elapsed: float | None = None
    files: int = 0
    bytes: int = 0
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> status -> n
    reasons: dict[str, dict[str, int]] = field(default_factory=dict)  # status -> reason -> n
    quarantined: int | None = None  # files in the scan's quarantine now, by its journal
    restored: int = 0  # files `dsclean restore` put back into ROOT, by the journal
    reason_galleries: list[Gallery] = field(default_factory=list)
    problems_columns: list[str] = field(default_factory=list)
    problems: list[list] = field(default_factory=list)  # rows of the problems table (capped)
    problems_total: int = 0
    classes: list[tuple[str, int, int]] = field(default_factory=list)  # (class, kept, bad), largest first
    classes_total: int = 0
    unlabelled: int = 0  # files directly in the root
    sizes: dict[str, Histogram] = field(default_factory=dict)  # kind -> file sizes
    resolution: tuple[list[float], list[float], list[list[int]]] | None = None  # x edges, y edges, counts[y][x]
    durations: Histogram | None = None
    sample_rates: dict[int, int] = field(default_factory=dict)
    channels: dict[int, int] = field(default_factory=dict)
    facts: list[str] = field(default_factory=list)  # facts columns present in the results
    fact_counts: dict[str, int] = field(default_factory=dict)  # "grayscale images" -> n
    outliers: list[Gallery] = field(default_factory=list)
    flags: list[Gallery] = field(default_factory=list)
    duplicates: Duplicates | None = None
    thumbnails: str = "on"  # on / off (--no-thumbnails)
    notes: list[str] = field(default_factory=list)
    #: the set's distributions from the scan's summary (dsclean.scanning.norm: name -> value -> files) and the
    #: files its inferred norm warned about (reason -> n)
    distributions: dict = field(default_factory=dict)
    norm_flagged: dict = field(default_factory=dict)
    training: TrainingFailures | None = None  # from failure logs / quarantine --from-log's record

    def items(self):
        """Every item that may get a thumbnail."""
        for g in (*self.reason_galleries, *self.outliers, *self.flags):
            yield from g.items
        if self.duplicates:
            for group in self.duplicates.groups:
                yield from group.members
