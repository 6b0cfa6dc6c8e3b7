"""The columns of the scan's results table and of its facts, defined once (the facts schema, docs/reference/facts.md).

Each :class:`Column` has its name, its Arrow type, whether it may be null and what it means. Every stage
derives its own lists from these, so they cannot drift apart: the record :class:`~dsclean.scanning.verdict.Verdict`
(its fields are checked against :data:`RESULTS`), the results table's Arrow schema
(:data:`dsclean.scanning.schema.SCHEMA`), the fact columns :mod:`dsclean.quality` computes and
:class:`~dsclean.quality.facts.Facts` holds, the facts ``index --facts`` copies (``dsclean.index.store``), the
integer facts of a shard sample's ``.json`` (``dsclean.pack.bulk``), the report's fact sections
(``dsclean.report.collect``) and the docs' tables (docs/hooks.py).

Types are spelled as Arrow prints them (``str(pa_type)``), so this module stays free of pyarrow (the
checking processes that import ``Verdict`` start light) and the docs render them as written;
:func:`arrow_type` and :func:`arrow_fields` build the Arrow objects on demand. It imports no stage: it is
the floor below all of them (tests/test_layout.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from .hashing import DIGEST_SIZE

if TYPE_CHECKING:  # annotations only: importing pyarrow is left to the callers of arrow_type
    import pyarrow as pa


@dataclass(frozen=True)
class Column:
    """One column: ``type`` as Arrow prints it (``int32``, ``fixed_size_binary[16]``, ``list<item: string>``)."""

    name: str
    type: str
    meaning: str
    nullable: bool = True
    #: facts computed from a decode: the kind of file they describe ("image" / "audio"); None otherwise
    kind: str | None = None


#: the verdict's own columns: what the check decided and the media facts that come with it
RECORD: tuple[Column, ...] = (
    Column(
        "path",
        "binary",
        "the exact bytes of the file name relative to the root (decode with `os.fsdecode`)",
        nullable=False,
    ),
    Column("kind", "string", "`image` or `audio`", nullable=False),
    Column("status", "string", "`ok`, `warn` or `bad`", nullable=False),
    Column("reason", "string", "the reason code of a warn or bad verdict (null when ok)"),
    Column("detail", "string", "the decoder's or the rule's words"),
    Column("size", "int64", "bytes of the file"),
    Column("mtime_ns", "int64", "the file's modification time, in nanoseconds"),
    Column("format", "string", "the real format, from the content (not the extension)"),
    Column("width", "int32", "image width, pixels"),
    Column("height", "int32", "image height, pixels"),
    Column("mode", "string", "image mode (Pillow's: `RGB`, `L`, ...)"),
    Column("frames", "int64", "image: frames checked (or in the file); audio: sample frames decoded"),
    Column("sample_rate", "int32", "audio sample rate, Hz"),
    Column("channels", "int32", "audio channels"),
    Column("duration", "double", "audio duration, seconds"),
    Column("subtype", "string", "audio sample encoding (soundfile's: `PCM_16`, `VORBIS`, ...)"),
)

#: the fact columns (dsclean.quality): the content hash, the quality facts and the flags
FACTS: tuple[Column, ...] = (
    Column(
        "content_hash",
        f"fixed_size_binary[{DIGEST_SIZE}]",
        "BLAKE2b-128 of the bytes checked (null if not read, or with `--facts none`)",
    ),
    Column("phash", "uint64", "64-bit perceptual hash of the grey thumbnail", kind="image"),
    Column("brightness", "float", "mean luma, 0..1", kind="image"),
    Column("contrast", "float", "standard deviation of luma, 0..1", kind="image"),
    Column("entropy", "float", "Shannon entropy of the 256-bin luma histogram, bits (0..8)", kind="image"),
    Column(
        "sharpness",
        "float",
        "variance of the Laplacian of the 64×64 thumbnail (0..255 units); null under 64 px",
        kind="image",
    ),
    Column("grayscale", "bool", "a colour-stored image whose channels are all equal (null when unknown)", kind="image"),
    Column("orientation", "int8", "EXIF orientation 1..8 (null when absent)", kind="image"),
    Column("peak", "float", "audio: max abs sample, 0..1", kind="audio"),
    Column("rms", "float", "audio: RMS level over all channels, 0..1", kind="audio"),
    Column("clipped", "float", "audio: fraction of samples at or within 1 LSB of full scale", kind="audio"),
    Column("dc_offset", "float", "audio: mean sample value, max abs over channels", kind="audio"),
    Column("silent_channels", "int32", "audio: bitmask of channels whose RMS is below -60 dBFS", kind="audio"),
    Column("flags", "list<item: string>", "the quality flag codes, derived from the facts with the scan's thresholds"),
)

#: the results table's columns, in order (``scan_results.parquet``; a Verdict's fields)
RESULTS: tuple[Column, ...] = RECORD + FACTS
#: the columns a shard set's results add (dsclean.shardsets: samples inside another tool's shards); ``path``
#: then holds ``<shard>/<member>``, the name the checker saw
SHARD_COLUMNS: tuple[Column, ...] = (
    Column("shard", "string", "the shard holding the sample (relative to the shard set's folder)"),
    Column("member", "string", "the member inside the shard: a tar member, `row N` of a Parquet/MDS/litdata shard"),
    Column("key", "string", "the sample's key (WebDataset `__key__`; the row number for row-based formats)"),
    Column(
        "row",
        "int64",
        "the sample's row: in its shard (Parquet), in the whole set as StreamingDataset numbers it (MDS, "
        "litdata); null for a tar",
    ),
)
SHARD_NAMES: tuple[str, ...] = tuple(c.name for c in SHARD_COLUMNS)

#: column name -> Column
COLUMNS: dict[str, Column] = {c.name: c for c in RESULTS}

RESULTS_NAMES: tuple[str, ...] = tuple(c.name for c in RESULTS)
FACT_NAMES: tuple[str, ...] = tuple(c.name for c in FACTS)
#: the facts a check computes from its decode, in column order (the flags come later, from these)
DECODED_FACTS: tuple[str, ...] = tuple(c.name for c in FACTS if c.kind)
IMAGE_FACTS: tuple[str, ...] = tuple(c.name for c in FACTS if c.kind == "image")
AUDIO_FACTS: tuple[str, ...] = tuple(c.name for c in FACTS if c.kind == "audio")
#: the integer media facts ``index --facts`` copies and a shard sample's ``.json`` carries, in the index's order
MEDIA_FACTS: tuple[str, ...] = ("width", "height", "sample_rate", "frames", "channels")


def arrow_type(spelling: str) -> pa.DataType:
    """The Arrow type of a :attr:`Column.type` spelling (``str(arrow_type(s)) == s``)."""
    import pyarrow as pa

    if spelling.startswith("fixed_size_binary[") and spelling.endswith("]"):
        return pa.binary(int(spelling[len("fixed_size_binary[") : -1]))
    if spelling.startswith("list<item: ") and spelling.endswith(">"):
        return pa.list_(arrow_type(spelling[len("list<item: ") : -1]))
    return pa.type_for_alias(spelling)


def arrow_types(names: Iterable[str]) -> dict[str, pa.DataType]:
    """Column name -> Arrow type, for ``names`` in their order."""
    return {name: arrow_type(COLUMNS[name].type) for name in names}


def arrow_fields(columns: Iterable[Column]) -> list[pa.Field]:
    """The Arrow fields of ``columns``, in order (name, type, nullability)."""
    import pyarrow as pa

    return [pa.field(c.name, arrow_type(c.type), nullable=c.nullable) for c in columns]
