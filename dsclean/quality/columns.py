"""The Arrow types of the fact columns (the facts schema, docs/reference/facts.md, is the contract).

The columns are defined once, in :data:`dsclean.schema.FACTS`; this module builds their Arrow
types (it imports pyarrow; the rest of this package does not). The scan's results table and
``index --facts`` append these columns; readers (``dsclean dups``, reports) must accept any
subset of them, including none.
"""

from __future__ import annotations

import pyarrow as pa

from ..schema import FACT_NAMES, FACTS, arrow_fields, arrow_types

#: fact column -> Arrow type; every column nullable (null = not computed / not applicable)
FACT_COLUMNS: dict[str, pa.DataType] = arrow_types(FACT_NAMES)

FACT_FIELDS: list[pa.Field] = arrow_fields(FACTS)


def facts_table(rows: list[dict]) -> pa.Table:
    """A table of fact rows (dicts from :meth:`Facts.row`), typed by :data:`FACT_COLUMNS`."""
    return pa.Table.from_pylist(rows, schema=pa.schema(FACT_FIELDS))
