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

from transforms.sources.table_cells import _is_numeric_type
from transforms.sources.table_columns import _column_list
from transforms.sources.table_columns import _needed
from transforms.sources.table_columns import ColumnError
from transforms.sources.table_formats import _open
from transforms.sources.table_rows import _convert

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
    raise ColumnError(f'the file {path} is not a readable Parquet file: '
                      f'{e}') from None


def _parquet_header(path: str) -> Tuple[List[str], List[str]]:
  with _open(path) as f:
    schema = _parquet_file(path, f).schema_arrow
  names = list(schema.names)
  numeric = [field.name for field in schema if _is_numeric_type(field.type)]
  return names, numeric


def _iter_parquet(path, columns, unit, batch_rows, reads=None):
  needed = _needed(columns)
  next_row = 0
  with _open(path) as f:
    parquet = _parquet_file(path, f)
    names = parquet.schema_arrow.names
    for name in needed:
      if name not in names:
        raise ColumnError(f'the column {name!r} is not in {path} (columns: '
                          f'{_column_list(names)})')
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
      yield _convert(arrays, rows, columns, unit)
  if reads is not None:
    reads.reached(path, size)


def _size(path: str) -> int:
  from transforms.sources import files  # pylint: disable=import-outside-toplevel,redefined-outer-name
  meta = files.metadata(path)
  return meta.size_in_bytes if meta is not None else 0
