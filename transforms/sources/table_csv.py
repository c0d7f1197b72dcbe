"""The table reader's CSV and TSV files, read as a stream.

Part of the table reader (`sources/tables.py`): the header sampled for
`read_header`, and the file streamed in batches through pyarrow.

Decisions:

- CSV/TSV: `pyarrow.csv.open_csv` with every needed column read as *binary*
  (not string): pyarrow validates UTF-8 for string columns and fails the whole
  block on one bad byte. The binary columns are then cast to string; when a
  column of a batch holds invalid UTF-8, the cells are decoded one by one and
  each row with an invalid cell becomes a dead letter ("column 'x' holds
  invalid UTF-8"). Columns that are not needed are never converted, so bad
  bytes there do no harm. Reading is single-threaded (`use_threads=False`)
  because only then does pyarrow report the record number of a row with the
  wrong number of fields, which is what keeps the row indices exact. Empty
  lines are skipped and not counted; a line holding only blanks is a
  one-field row (a dead letter). A block is at least 1 MiB; a single record
  longer than a block stops the read with a ValueError.
"""

from __future__ import annotations

import csv
import io
from typing import List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from transforms.sources import table_cells
from transforms.sources import table_columns
from transforms.sources import table_formats
from transforms.sources import table_rows

# CSV block sizes (bytes) for pyarrow's streaming reader. A block must hold
# at least one whole record, hence the floor.
MIN_BLOCK_BYTES = 1 << 20
_MAX_BLOCK_BYTES = 256 << 20


def read_header(path: str, fmt: str) -> Tuple[List[str], List[str]]:
  """tables.read_header for a CSV or TSV file ('csv' or 'tsv')."""
  sample_rows = table_formats.SAMPLE_ROWS
  data, at_end = table_formats.read_prefix(path, table_formats.SAMPLE_BYTES)
  if not data.strip():
    raise table_columns.ColumnError(f'the file {path} is empty')
  text = data.decode('utf-8-sig', errors='replace')
  reader = csv.reader(io.StringIO(text, newline=''),
                      delimiter='\t' if fmt == 'tsv' else ',')
  records = []
  try:
    for record in reader:
      if record:
        records.append(record)
      if len(records) > sample_rows + 1:
        break
  except csv.Error:
    pass  # A damaged sample: judge from the records read so far.
  if not at_end and len(records) <= sample_rows + 1 and len(records) > 1:
    records.pop()  # The last record may be cut by the sample's end.
  if not records:
    raise table_columns.ColumnError(f'the file {path} has no header line')
  names = records[0]
  rows = [r for r in records[1:sample_rows + 1] if len(r) == len(names)]
  numeric = []
  for i, name in enumerate(names):
    cells = [r[i] for r in rows if not table_cells.is_missing_text(r[i])]
    if cells and all(table_cells.NUMBER_RE.match(c.strip()) for c in cells):
      numeric.append(name)
  return names, numeric


def block_bytes(path: str, batch_rows: int) -> int:
  """A pyarrow block size that holds about batch_rows records of the file
  (judged from its first 64 KiB), at least MIN_BLOCK_BYTES."""
  sample, _ = table_formats.read_prefix(path, 1 << 16)
  lines = max(1, sample.count(b'\n'))
  per_row = max(1.0, len(sample) / lines)
  wanted = int(batch_rows * per_row * 1.1)
  return int(min(max(wanted, MIN_BLOCK_BYTES), _MAX_BLOCK_BYTES))


def _split(batch, batch_rows: int):
  for start in range(0, max(batch.num_rows, 1), batch_rows):
    yield batch.slice(start, batch_rows)


# A field larger than pyarrow's block cannot be parsed ("straddling
# object straddles two block boundaries"); readers then read again with a
# block this many times larger, up to LARGEST_BLOCK_BYTES.
BLOCK_GROWTH = 8
LARGEST_BLOCK_BYTES = 1 << 30


def block_too_small(error: Exception) -> bool:
  """Whether pyarrow refused a record larger than its block."""
  return 'straddl' in str(error)


def larger_block(block: int) -> Optional[int]:
  """The next block size to try after block_too_small, or None when even
  the largest was too small."""
  return None if block >= LARGEST_BLOCK_BYTES else min(
      block * BLOCK_GROWTH, LARGEST_BLOCK_BYTES)


def open_binary(f, path: str, fmt: str, needed: Sequence[str],
                batch_rows: int, on_invalid_row,
                block: Optional[int] = None):
  """pyarrow's streaming CSV reader over the `needed` columns, read as
  binary, single-threaded (so rows with a wrong field count are reported to
  `on_invalid_row` with their record number), quoted newlines allowed.

  Args:
    f: The open file (or a stream that starts with the header line).
    path: The file's path (to size the blocks from its start).
    fmt: 'csv' or 'tsv'.
    needed: The columns to read.
    batch_rows: About how many records a block holds, when `block` is None.
    on_invalid_row: pyarrow's invalid-row handler.
    block: The block size in bytes, or None for about batch_rows records.

  Returns:
    A pyarrow.csv.CSVStreamingReader.

  Raises:
    pyarrow.ArrowInvalid: An unreadable header; pyarrow.ArrowKeyError: a
      needed column is not in it.
  """
  return pa_csv.open_csv(
      f,
      read_options=pa_csv.ReadOptions(
          block_size=block or block_bytes(path, batch_rows),
          use_threads=False),
      parse_options=pa_csv.ParseOptions(
          delimiter='\t' if fmt == 'tsv' else ',', newlines_in_values=True,
          invalid_row_handler=on_invalid_row),
      convert_options=pa_csv.ConvertOptions(
          column_types={name: pa.binary() for name in needed},
          include_columns=list(needed), strings_can_be_null=True,
          null_values=[''], quoted_strings_can_be_null=False))


def take_row_numbers(next_row: int, n: int,
                     skipped: List[Tuple[int, str]]
                     ) -> Tuple[np.ndarray, List[Tuple[int, str]]]:
  """The row indices of a piece of n rows pyarrow returned: the first n
  from next_row on that it did not skip (`skipped`: (row, reason) of the
  rows it skipped, as its invalid-row handler saw them), and the skipped
  rows before the last of those, which are taken out of `skipped`."""
  skipped_rows = np.array([r for r, _ in skipped], np.int64)
  candidates = np.arange(next_row, next_row + n + len(skipped_rows),
                         dtype=np.int64)
  rows = candidates[~np.isin(candidates, skipped_rows)][:n]
  last = int(rows[-1])
  mine = [item for item in skipped if item[0] < last]
  skipped[:] = [item for item in skipped if item[0] > last]
  return rows, mine


def iter_batches(path, fmt, columns, unit, batch_rows, reads=None):
  """tables.iter_batches for a CSV or TSV file (arguments checked)."""
  with table_formats.open_file(path, reads) as f:
    yield from iter_stream_batches(f, path, fmt, columns, unit, batch_rows)


def iter_stream_batches(f, path, fmt, columns, unit, batch_rows,
                        first_row=0, block=None):
  """iter_batches over an open file object that starts with the header line
  (the file itself, or a header line and a byte range of it whose first
  record is data row `first_row` of the file), in pyarrow blocks of
  `block` bytes (default: about batch_rows records)."""
  needed = table_columns.needed_columns(columns)
  pending: List[Tuple[int, str]] = []  # wrong field counts, by row index

  def on_invalid_row(row):
    # row.number: 1-based record number, the header being record 1.
    pending.append((row.number - 2 + first_row if row.number is not None
                    else -1,
                    f'row has {row.actual_columns} fields, the header has '
                    f'{row.expected_columns}'))
    return 'skip'

  next_row = first_row
  try:
    reader = open_binary(f, path, fmt, needed, batch_rows, on_invalid_row,
                         block)
  except pa.ArrowInvalid as e:
    head, _ = table_formats.read_prefix(path, 1 << 16)
    if len(head.strip().splitlines()) == 1:
      return  # Only a header line without a newline: no rows.
    raise table_columns.ColumnError(
        f'cannot read the CSV header of {path}: {e}') from None
  while True:
    try:
      batch = reader.read_next_batch()
    except StopIteration:
      break
    except pa.ArrowInvalid as e:
      raise ValueError(f'cannot read {path} after data row {next_row}: '
                       f'{e}') from None
    for piece in _split(batch, batch_rows):
      n = piece.num_rows
      if not n:
        continue
      rows, mine = take_row_numbers(next_row, n, pending)
      next_row = int(rows[-1]) + 1
      arrays = {name: piece.column(name) for name in needed}
      yield table_rows.convert(arrays, rows, columns, unit, mine)
  if pending:
    yield table_rows.empty_batch(len(columns.channels)), sorted(pending)
