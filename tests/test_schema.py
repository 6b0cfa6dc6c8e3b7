"""The results and facts columns are defined once (dsclean.schema): every stage's list is derived from it,
and what scan, index and pack write keeps its columns, types and order."""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from dsclean import schema as S

#: the results table as scan_results.parquet has always held it: (name, Arrow type, nullable), in order
RESULTS_WRITTEN = [
    ("path", "binary", False),
    ("kind", "string", False),
    ("status", "string", False),
    ("reason", "string", True),
    ("detail", "string", True),
    ("size", "int64", True),
    ("mtime_ns", "int64", True),
    ("format", "string", True),
    ("width", "int32", True),
    ("height", "int32", True),
    ("mode", "string", True),
    ("frames", "int64", True),
    ("sample_rate", "int32", True),
    ("channels", "int32", True),
    ("duration", "double", True),
    ("subtype", "string", True),
    ("content_hash", "fixed_size_binary[16]", True),
    ("phash", "uint64", True),
    ("brightness", "float", True),
    ("contrast", "float", True),
    ("entropy", "float", True),
    ("sharpness", "float", True),
    ("grayscale", "bool", True),
    ("orientation", "int8", True),
    ("peak", "float", True),
    ("rms", "float", True),
    ("clipped", "float", True),
    ("dc_offset", "float", True),
    ("silent_channels", "int32", True),
    ("flags", "list<item: string>", True),
]


def test_the_results_columns_are_those_scan_has_always_written():
    assert [(c.name, c.type, c.nullable) for c in S.RESULTS] == RESULTS_WRITTEN
    assert S.RESULTS_NAMES[-len(S.FACTS) :] == S.FACT_NAMES and S.FACT_NAMES[0] == "content_hash"
    assert all(c.meaning for c in S.RESULTS)


def test_each_type_spelling_is_arrows_own():
    from dsclean.hashing import DIGEST_SIZE

    for c in S.RESULTS:
        assert str(S.arrow_type(c.type)) == c.type, c.name
    assert S.arrow_type(S.COLUMNS["content_hash"].type) == pa.binary(DIGEST_SIZE)


def test_the_records_fields_are_the_columns():
    from dsclean.quality.audio import AudioFacts
    from dsclean.quality.facts import FIELDS as FACTS_FIELDS
    from dsclean.quality.image import ImageFacts
    from dsclean.scanning.verdict import FACT_FIELDS, FIELDS

    assert FIELDS == S.RESULTS_NAMES
    assert FACTS_FIELDS == S.FACT_NAMES
    assert FACT_FIELDS == S.DECODED_FACTS == S.IMAGE_FACTS + S.AUDIO_FACTS
    assert set(S.IMAGE_FACTS) <= {f.name for f in dataclasses.fields(ImageFacts)}
    assert set(S.AUDIO_FACTS) <= {f.name for f in dataclasses.fields(AudioFacts)}


def test_the_arrow_schemas_are_derived():
    from dsclean.quality.columns import FACT_COLUMNS, FACT_FIELDS
    from dsclean.scanning.schema import SCHEMA

    assert SCHEMA.equals(pa.schema(S.arrow_fields(S.RESULTS)), check_metadata=True)
    assert [(f.name, str(f.type), f.nullable) for f in SCHEMA] == RESULTS_WRITTEN
    assert {f.name: f.type for f in SCHEMA if f.name in S.FACT_NAMES} == FACT_COLUMNS
    assert list(FACT_COLUMNS) == list(S.FACT_NAMES)
    assert [SCHEMA.field(n) for n in S.FACT_NAMES] == FACT_FIELDS


def test_the_index_copies_the_columns_in_its_order():
    from dsclean.index import store
    from dsclean.scanning.schema import SCHEMA

    assert list(store.MEDIA_FACTS) == list(S.MEDIA_FACTS) == ["width", "height", "sample_rate", "frames", "channels"]
    assert list(store.SCAN_FACTS) == list(S.FACT_NAMES)
    assert store.FACTS == {**store.MEDIA_FACTS, **store.SCAN_FACTS}
    assert all(SCHEMA.field(n).type == t for n, t in store.FACTS.items())
    schema = store.index_schema(classes=3, max_size=10, large=False, facts=True)
    assert schema.names == ["path", "label", "kind", "size", "mtime_ns", *S.MEDIA_FACTS, *S.FACT_NAMES]


def test_pack_and_report_lists_are_derived():
    from dsclean.pack import bulk, samples
    from dsclean.report import collect

    assert bulk.FACT_NAMES == S.MEDIA_FACTS
    assert frozenset(S.MEDIA_FACTS) == samples._INT_FACTS
    # the .json record's integer facts (its key order is the JSON's, sorted) are the media facts
    assert {f for f, spec in bulk._SLOTS if spec.endswith(":%d")} - {"size"} == set(S.MEDIA_FACTS)
    assert set(S.MEDIA_FACTS) <= set(bulk._OPTIONAL)
    assert collect.FACT_COLUMNS == S.FACT_NAMES
    assert {o.column for o in collect.OUTLIERS} <= set(S.FACT_NAMES)
