"""The table reader's Parquet files.

Part of the table reader (`sources/tables.py`): the schema for
`read_header`, and the needed columns read in batches.

Decisions:

- Parquet: the object from `FileSystems.open` is handed to pyarrow when it is
  seekable (local files; Beam's GCS reader is seekable too), so only the
  footer and the needed column chunks are read. A non-seekable object is read
  whole into a `pyarrow.BufferReader` (memory: the file size).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.sources import table_cells
from transforms.sources import table_columns
from transforms.sources import table_formats
from transforms.sources import table_rows

if TYPE_CHECKING:
  from transforms.sources import files


def _parquet_source(f):
  """Something pyarrow can seek in: the file itself, or its bytes."""
  seekable = getattr(f, 'seekable', None)
  if seekable is not None and seekable():
    return f
  return pa.BufferReader(f.read())


def _parquet_file(path: str, f) -> pq.ParquetFile:
  try:
    return pq.ParquetFile(_parquet_source(f))
  except (pa.ArrowException, OSError) as e:
    raise table_columns.ColumnError(
        f'the file {path} is not a readable Parquet file: {e}') from None


def read_header(path: str) -> Tuple[List[str], List[str]]:
  """tables.read_header for a Parquet file."""
  with table_formats.open_file(path) as f:
    schema = _parquet_file(path, f).schema_arrow
  names = list(schema.names)
  numeric = [field.name for field in schema
             if table_cells.is_numeric_type(field.type)]
  return names, numeric


def iter_batches(path, columns, unit, batch_rows, reads=None):
  """tables.iter_batches for a Parquet file (arguments checked)."""
  needed = table_columns.needed_columns(columns)
  next_row = 0
  with table_formats.open_file(path) as f:
    parquet = _parquet_file(path, f)
    names = parquet.schema_arrow.names
    for name in needed:
      if name not in names:
        raise table_columns.ColumnError(
            f'the column {name!r} is not in {path} (columns: '
            f'{table_columns.column_list(names)})')
    # Only some column chunks are read, wherever they are in the file: its
    # share of the rows stands for how far it is read.
    size = _size(path) if reads is not None else 0
    total_rows = max(parquet.metadata.num_rows, 1)
    for batch in parquet.iter_batches(batch_size=batch_rows, columns=needed):
      n = batch.num_rows
      if not n:
        continue
      rows = np.arange(next_row, next_row + n, dtype=np.int64)
      next_row += n
      if reads is not None:
        reads.reached(path, size * min(next_row, total_rows) // total_rows)
      arrays = {name: batch.column(name) for name in needed}
      yield table_rows.convert(arrays, rows, columns, unit)
  if reads is not None:
    reads.reached(path, size)


def _size(path: str) -> int:
  from transforms.sources import files  # pylint: disable=import-outside-toplevel,redefined-outer-name
  meta = files.metadata(path)
  return meta.size_in_bytes if meta is not None else 0
