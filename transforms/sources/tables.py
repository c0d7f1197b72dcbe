"""The table reader: CSV, TSV, JSON-lines and Parquet files, parsed in batches.

The reader the modalities share for table files. Sensor reads its rows
through this module's names; text reads its documents with the same file
handling through the public names of the reader's parts (listed below).
No Beam pipeline in here: plain functions that turn one CSV, TSV,
JSON-lines or Parquet file into batches of parsed rows plus the rows that
cannot be used (dead letters), each with its 0-based data-row index and a
short reason.

Layers:

- `format_of`, `read_header` and `resolve_columns` run on the launching
  machine and turn a bad invocation into a `ColumnError` (one sentence);
- `iter_batches` streams one file in batches of about `batch_rows` rows and
  converts each batch with vectorized numpy / pyarrow / pandas code;
- `csv_ranges`, `parse_range`, `iter_csv_from` and `shift_rows` read a
  large local CSV or TSV file in byte ranges, in several processes.

The reader is this module and its parts, each a module of its own, whose
names without an underscore are public:

- `table_formats`: formats and opening files (`open_file`, `read_prefix`,
  `BOM`);
- `table_columns`: column roles (`Columns`, `resolve_columns`,
  `column_list` for messages);
- `table_csv`, `table_jsonl`, `table_parquet`: one format each; CSV's
  binary streaming reader (`open_binary`, `block_bytes`,
  `take_row_numbers`, `block_too_small`, `larger_block`) and the blocks
  of JSON lines (`line_blocks`, `arrow_block`) serve text as well;
- `table_ranges`: CSV and TSV files in byte ranges (`HeaderThenRest`);
- `table_rows`: one batch's columns into good rows and dead letters, with
  `table_cells` and `table_timestamps` for its cells.

Decisions:

- `read_header` calls a column numeric only when the sampled rows hold at
  least one number and nothing that is not a number or a missing value.
- Beam is imported on first use (opening a file through FileSystems), not
  with this module: the worker processes that parse CSV ranges open local
  files themselves and start without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, List, Optional, Tuple

from transforms.sources import table_csv
from transforms.sources import table_formats
from transforms.sources import table_jsonl
from transforms.sources import table_parquet
from transforms.sources import table_timestamps
# The reader's public names, from its parts. A constant here (RANGE_BYTES)
# is a copy: a test that changes one patches it in its part module.
from transforms.sources.table_columns import ColumnError
from transforms.sources.table_columns import Columns
from transforms.sources.table_columns import resolve_columns
from transforms.sources.table_csv import BLOCK_GROWTH
from transforms.sources.table_csv import block_too_small
from transforms.sources.table_csv import larger_block
from transforms.sources.table_csv import take_row_numbers
from transforms.sources.table_formats import FORMATS
from transforms.sources.table_formats import format_of
from transforms.sources.table_ranges import RANGE_BYTES
from transforms.sources.table_ranges import RangeRows
from transforms.sources.table_ranges import Ranges
from transforms.sources.table_ranges import csv_ranges
from transforms.sources.table_ranges import iter_csv_from
from transforms.sources.table_ranges import parse_range
from transforms.sources.table_ranges import ranges_possible
from transforms.sources.table_ranges import shift_rows
from transforms.sources.table_rows import RowBatch

if TYPE_CHECKING:
  from transforms.sources import files


def read_header(path: str, fmt: str) -> Tuple[List[str], List[str]]:
  """The column names of a file and which of them look numeric.

  Args:
    path: The file (any path Beam's FileSystems opens).
    fmt: One of FORMATS.

  Returns:
    (all column names in file order, names of the numeric-looking columns).
    CSV/TSV: judged from up to 1000 data rows (every non-empty cell is a
    number, nan/inf spellings included). JSON lines: the keys of the first
    1000 lines in first-seen order; numeric when the values are JSON numbers
    or null. Parquet: integer, floating and decimal columns.

  Raises:
    ColumnError: Empty file, no header, a first JSON line that is not an
      object, or a file that is not Parquet.
  """
  table_formats.check_format(fmt)
  if fmt in ('csv', 'tsv'):
    return table_csv.read_header(path, fmt)
  if fmt == 'jsonl':
    return table_jsonl.read_header(path)
  return table_parquet.read_header(path)


def iter_batches(path: str, fmt: str, columns: Columns,
                 timestamp_unit: str = 's', batch_rows: int = 65536,
                 reads: Optional[files.ReadCount] = None
                 ) -> Iterator[Tuple[RowBatch, List[Tuple[int, str]]]]:
  """Streams a file as parsed batches.

  Args:
    path: The file (any path Beam's FileSystems opens).
    fmt: One of FORMATS.
    columns: The roles (from resolve_columns).
    timestamp_unit: Unit of numeric timestamps: 's', 'ms', 'us' or 'ns'.
    batch_rows: Rows per batch (at most; CSV batches hold about as many).
    reads: Told how far the file has been read (for progress reports);
      a Parquet file by the share of its rows read.

  Yields:
    (good rows, bad rows) per batch; bad rows are [(row index, reason)]
    sorted by row index. A batch may hold only bad rows.

  Raises:
    ValueError: A bad format, unit or batch size, or a file that cannot be
      read at all (ColumnError for header problems).
  """
  table_formats.check_format(fmt)
  if timestamp_unit not in table_timestamps.UNIT_NS:
    raise ValueError(f'timestamp unit {timestamp_unit!r} is not one of '
                     f'{", ".join(table_timestamps.UNIT_NS)}')
  if batch_rows < 1:
    raise ValueError(f'batch_rows must be at least 1, got {batch_rows}')
  if fmt in ('csv', 'tsv'):
    return table_csv.iter_batches(path, fmt, columns, timestamp_unit,
                                  batch_rows, reads)
  if fmt == 'jsonl':
    return table_jsonl.iter_batches(path, columns, timestamp_unit,
                                    batch_rows, reads)
  return table_parquet.iter_batches(path, columns, timestamp_unit,
                                    batch_rows, reads)
