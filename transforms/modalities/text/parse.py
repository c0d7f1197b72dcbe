"""Reading the text modality's documents: table files and class folders.

No Beam pipeline in here: plain functions that turn one table file (CSV,
TSV, JSON lines), a byte range of a large CSV or TSV file, or a list of
class-folder documents into batches of good documents plus the documents
that cannot be used (dead letters, checked by `documents.py`), each with a
stable id and a short reason: `iter_table_batches`, `parse_csv_range` and
`iter_folder_batches`.

Decisions:

- A large local CSV/TSV file can also be read in byte ranges, each on its
  own (by worker processes): `parse_csv_range` gives a range's documents
  numbered from its first row, or None when the range did not end between
  records; the caller then reads the rest of the file in one piece from
  that range's start (`iter_table_batches` with `start`).
- CSV/TSV are read through the shared table reader (`sources/tables.py`)
  the way it reads sensor rows (`table_csv.open_binary`):
  `pyarrow.csv.open_csv`, single-threaded (so pyarrow reports the record
  number of a row with the wrong number of fields, which keeps the row
  indices exact), with only the text and label columns read, as *binary*:
  one bad byte then only costs a per-cell decode of that column of that
  batch instead of failing the block. Quoting applies to TSV as well. Empty
  lines are not rows; a line of blanks is a one-field row (a dead letter).
  Memory: about one batch plus one pyarrow block (at least 1 MiB).
- JSON lines: blocks of `batch_rows` non-blank lines (the table reader's
  `table_jsonl.line_blocks`); a block goes to `pyarrow.json`
  (`table_jsonl.arrow_block`) when every line starts with '{' and the block
  is valid UTF-8, and the text and label columns come back as strings,
  integers, booleans or nulls. Anything else (a bad line, floats, nested
  values, invalid UTF-8) sends the block to a per-line `json.loads` path, so
  a bad line costs only itself. Numbers and booleans become their JSON
  spelling ('1', '2.5', 'true'); a text or label that is a JSON array or
  object is a dead letter. Invalid UTF-8 in JSON lines is found per value
  (bytes are kept with `surrogateescape`); a JSON escape of a lone surrogate
  (e.g. "\\ud800") cannot be encoded as UTF-8 either and counts as invalid.
- A column missing from a CSV/TSV file found while reading (for example in a
  later file of a glob) raises `UsageError`; in JSON lines a missing key
  only makes that line a dead letter.
- Folder documents: read whole (one document per file), a UTF-8 BOM is
  stripped; an `OSError` while reading is a dead letter ('cannot read: ...');
  other errors propagate, so that Beam retries them.
"""

from __future__ import annotations

import io
import json
import logging
from typing import (TYPE_CHECKING, Iterator, List, NamedTuple, Optional,
                    Sequence, Tuple)

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from transforms.modalities.text import documents
from transforms.modalities.text import inputs
from transforms.sources import table_cells
from transforms.sources import table_csv
from transforms.sources import table_formats
from transforms.sources import table_jsonl
from transforms.sources import table_ranges

if TYPE_CHECKING:
  from transforms.sources import files

_LOG = logging.getLogger(__name__)


def _check_policy(invalid_utf8: str):
  if invalid_utf8 not in inputs.INVALID_UTF8:
    raise ValueError(f'invalid_utf8 {invalid_utf8!r} is not one of '
                     f'{", ".join(inputs.INVALID_UTF8)}')


# ---------------------------------------------------------------------------
# Table files.


def _fields(n: int) -> str:
  return f'{n} field' if n == 1 else f'{n} fields'


def _even_batches(batches: Iterator[pa.RecordBatch],
                  batch_rows: int) -> Iterator[pa.Table]:
  """Regroups record batches into tables of batch_rows rows (the last: fewer).

  pyarrow's CSV batches follow its blocks, which hold about (not exactly)
  batch_rows records; regrouping avoids a small batch after every block.
  """
  held: List[pa.RecordBatch] = []
  count = 0
  for batch in batches:
    if not batch.num_rows:
      continue
    held.append(batch)
    count += batch.num_rows
    if count < batch_rows:
      continue
    table = pa.Table.from_batches(held)
    start = 0
    while count - start >= batch_rows:
      yield table.slice(start, batch_rows)
      start += batch_rows
    held = [b for b in table.slice(start).to_batches() if b.num_rows]
    count -= start
  if count:
    yield pa.Table.from_batches(held)


def _skipping_into(skipped: documents.BadRows, first_row: int):
  """pyarrow's invalid-row handler for a CSV read whose first data row is
  row `first_row` of the file: the row is skipped and noted in `skipped`
  as (row, reason)."""

  def on_invalid_row(row):
    # row.number: 1-based record number, the header being record 1; empty
    # lines are not counted.
    number = (row.number - 2 + first_row if row.number is not None
              else -1)
    skipped.append((number, f'row has {_fields(row.actual_columns)}, the '
                            f'header has {row.expected_columns}'))
    return 'skip'

  return on_invalid_row


def _only_bad(skipped: documents.BadRows, make_ids, replace: bool):
  """The batch of rows pyarrow skipped after the last good one."""
  return documents.check_batch(
      pa.array([], pa.string()), pa.array([], pa.string()),
      np.zeros(0, np.int64), make_ids, replace, skipped)


def _iter_csv(path, fmt, columns, make_ids, replace, batch_rows,
              reads=None, start=None):
  """The document batches of a CSV/TSV file. A field larger than the
  reader's block (one enormous text) makes it read the file again with a
  larger block, skipping the rows it already gave. `start`: (header line,
  byte offset, its data row) to read from a range's start on."""
  block, done = None, (start[2] if start else 0)
  while True:
    progress = {'next_row': done}
    try:
      yield from _iter_csv_from(path, fmt, columns, make_ids, replace,
                                batch_rows, block, done, progress, reads,
                                start)
      return
    except _BlockTooSmall as e:
      done = progress['next_row']
      block = table_csv.larger_block(e.block)
      if block is None:
        raise ValueError(f'cannot read {path} after data row {done}: a '
                         'field is larger than 1 GiB') from None
      _LOG.info('%s holds a field larger than %d MiB after data row %d; '
                'reading on with %d MiB blocks', path, e.block >> 20, done,
                block >> 20)


class _BlockTooSmall(Exception):

  def __init__(self, block: int):
    super().__init__(block)
    self.block = block


def _iter_csv_from(path, fmt, columns, make_ids, replace, batch_rows, block,
                   skip_rows, progress, reads=None, start=None):
  """_iter_csv, with blocks of `block` bytes, leaving out the data rows
  before `skip_rows` (given by an earlier attempt); progress['next_row']
  follows the rows given."""
  needed = list(dict.fromkeys((columns.text, columns.label)))
  skipped: documents.BadRows = []  # rows pyarrow skipped (wrong field count)
  block = block or table_csv.block_bytes(path, batch_rows)
  first_row = start[2] if start else 0

  on_invalid_row = _skipping_into(skipped, first_row)
  next_row = first_row
  with table_formats.open_file(path, reads) as f:
    stream = f
    if start:
      stream = io.BufferedReader(
          table_ranges.HeaderThenRest(f, start[0], start[1]), 1 << 20)
    try:
      reader = table_csv.open_binary(stream, path, fmt, needed, batch_rows,
                                     on_invalid_row, block)
    except pa.ArrowKeyError:
      inputs.check_columns(path, fmt, columns.text, columns.label)
      raise
    except pa.ArrowInvalid as e:
      if table_csv.block_too_small(e):
        raise _BlockTooSmall(block) from None
      head, _ = table_formats.read_prefix(path, 1 << 16)
      if head.startswith(table_formats.BOM):
        head = head[len(table_formats.BOM):]
      if len(head.strip().splitlines()) <= 1:
        return  # Empty, or only a header without a newline: no rows.
      raise ValueError(f'cannot read the header of {path}: {e}') from None

    def blocks():
      while True:
        try:
          yield reader.read_next_batch()
        except StopIteration:
          return
        except pa.ArrowInvalid as e:
          if table_csv.block_too_small(e):
            raise _BlockTooSmall(block) from None
          raise ValueError(f'cannot read {path} after data row {next_row}: '
                           f'{e}') from None

    for piece in _even_batches(blocks(), batch_rows):
      n = piece.num_rows
      rows, mine = table_csv.take_row_numbers(next_row, n, skipped)
      last = int(rows[-1])
      next_row = last + 1
      if last < skip_rows:
        continue  # given by an earlier attempt
      keep = rows >= skip_rows
      if not keep.all():
        first = int(np.argmax(keep))
        piece, rows = piece.slice(first), rows[first:]
      mine = [item for item in mine if item[0] >= skip_rows]
      progress['next_row'] = next_row
      yield documents.check_batch(
          piece.column(columns.text), piece.column(columns.label), rows,
          make_ids, replace, mine)
  skipped[:] = [item for item in skipped if item[0] >= skip_rows]
  if skipped:
    yield _only_bad(skipped, make_ids, replace)


# The text of the row put after a range's bytes (parse_csv_range): no
# quote, delimiter or newline, and NUL bytes no document holds.
RANGE_END = b'\x00tfrecord-pipelines: end of range\x00'


class TextRange(NamedTuple):
  """What parse_csv_range found: [(good documents, [(row, reason)])] in
  file order, with rows numbered from 0 at the range's first record (the
  documents' ids are those row numbers), and how many records the range
  holds (good and bad)."""
  batches: List[Tuple[documents.TextBatch, List[Tuple[int, str]]]]
  records: int


def _range_end_row(header: bytes, fmt: str, column: str) -> Optional[bytes]:
  """A data row of the header's columns with RANGE_END in `column`, or
  None when the header cannot say where that column is."""
  delimiter = '\t' if fmt == 'tsv' else ','
  try:
    names = pa_csv.read_csv(pa.BufferReader(header), parse_options=(
        pa_csv.ParseOptions(delimiter=delimiter))).column_names
  except pa.ArrowInvalid:
    return None
  if names.count(column) != 1:
    return None
  cells = [RANGE_END if name == column else b'' for name in names]
  return delimiter.encode().join(cells) + b'\n'


def parse_csv_range(path: str, fmt: str, columns: inputs.TextColumns,
                    invalid_utf8: str, header: bytes, start: int, end: int,
                    batch_rows: int = 10000) -> Optional[TextRange]:
  """Reads bytes [start, end) of a CSV or TSV file (tables.csv_ranges with
  quotes), which must start at a record, on their own: what a worker
  process runs.

  Returns None when the range does not end between two records (it ends
  inside a quoted field, or cannot be read): a row holding RANGE_END is put
  after the range's bytes, and it is read back as a row of its own only
  when the reader was outside any field at the range's end. (The reader
  leaves a quoted field only at a quote, and that row has none.)
  """
  with open(path, 'rb') as f:
    f.seek(start)
    data = f.read(end - start)
  last = _range_end_row(header, fmt, columns.text)
  if last is None:
    return None
  if data and not data.endswith(b'\n'):
    data += b'\n'  # the file's last line, without its newline
  body = header + data + last
  needed = list(dict.fromkeys((columns.text, columns.label)))
  skipped: documents.BadRows = []

  on_invalid_row = _skipping_into(skipped, 0)
  # The range in one block: no record straddles two blocks.
  block = min(max(len(body), table_csv.MIN_BLOCK_BYTES),
              table_csv.LARGEST_BLOCK_BYTES)
  table = table_csv.open_binary(pa.BufferReader(body), path, fmt, needed,
                                batch_rows, on_invalid_row, block).read_all()
  n = table.num_rows - 1
  if n < 0 or table.column(columns.text)[n].as_py() != RANGE_END:
    return None
  table = table.slice(0, n)
  records = n + len(skipped)
  replace = invalid_utf8 == 'replace'
  batches, next_row = [], 0
  for piece in _even_batches(iter(table.to_batches()), batch_rows):
    rows, mine = table_csv.take_row_numbers(next_row, piece.num_rows, skipped)
    next_row = int(rows[-1]) + 1
    batches.append(documents.check_batch(piece.column(columns.text),
                                         piece.column(columns.label), rows,
                                         list, replace, mine))
  if skipped:
    batches.append(_only_bad(skipped, list, replace))
  return TextRange(batches, records)


def _json_value(value, role: str) -> Tuple[Optional[bytes], Optional[str]]:
  """A value from json.loads as the bytes of a cell, or a dead-letter reason.

  Strings keep their invalid bytes (decoded with surrogateescape); a lone
  surrogate from a JSON escape becomes bytes that are not valid UTF-8.
  """
  if value is None:
    return None, None
  if isinstance(value, str):
    try:
      return value.encode('utf-8', 'surrogateescape'), None
    except UnicodeEncodeError:
      return value.encode('utf-8', 'surrogatepass'), None
  if isinstance(value, bool):
    return (b'true' if value else b'false'), None
  if isinstance(value, (int, float)):
    return repr(value).encode('ascii'), None
  kind = 'an array' if isinstance(value, list) else 'an object'
  return None, f'the {role} is {kind}, not a string'


def _json_lines(block: bytes, rows: np.ndarray, columns: inputs.TextColumns):
  """Parses every line with json.loads; bad lines become dead letters.

  Returns:
    (text cells, label cells, their rows, [(row, reason)]).
  """
  texts, labels, good, bad = [], [], [], []
  lines = [line for line in block.split(b'\n') if line.strip(b' \t\r')]
  for row, line in zip(rows.tolist(), lines):
    try:
      record = json.loads(line.decode('utf-8', 'surrogateescape'))
    except (ValueError, RecursionError) as e:
      bad.append((row, f'invalid JSON: {e}'))
      continue
    if not isinstance(record, dict):
      bad.append((row, documents.NOT_AN_OBJECT))
      continue
    text, problem = _json_value(record.get(columns.text), 'text')
    if problem is None:
      label, problem = _json_value(record.get(columns.label), 'label')
    if problem is not None:
      bad.append((row, problem))
      continue
    texts.append(text)
    labels.append(label)
    good.append(row)
  return (pa.array(texts, pa.binary()), pa.array(labels, pa.binary()),
          np.array(good, np.int64), bad)


def _fast_column(table: pa.Table, name: str, n: int) -> Optional[pa.Array]:
  """A column read by pyarrow.json when its type converts exactly, or None."""
  if name not in table.column_names:
    return pa.nulls(n, pa.string())
  column = table_cells.as_array(table.column(name))
  t = column.type
  if (pa.types.is_string(t) or pa.types.is_large_string(t)
      or pa.types.is_null(t) or pa.types.is_integer(t)
      or pa.types.is_boolean(t)):
    return column
  return None  # Floats (pyarrow spells 1.0 as '1'), nested values.


def _iter_jsonl(path, columns, make_ids, replace, batch_rows, reads=None):
  next_row = 0
  with table_formats.open_file(path, reads) as f:
    for block, count, objects in table_jsonl.line_blocks(f, batch_rows):
      rows = np.arange(next_row, next_row + count, dtype=np.int64)
      next_row += count
      table = table_jsonl.arrow_block(block, count, objects)
      if table is not None:
        text = _fast_column(table, columns.text, count)
        label = _fast_column(table, columns.label, count)
        if text is not None and label is not None:
          yield documents.check_batch(text, label, rows, make_ids, replace)
          continue
      text, label, good, bad = _json_lines(block, rows, columns)
      yield documents.check_batch(text, label, good, make_ids, replace, bad)


def iter_table_batches(path: str, fmt: str, columns: inputs.TextColumns,
                       source: str, invalid_utf8: str = 'replace',
                       batch_rows: int = 10000,
                       reads: Optional[files.ReadCount] = None,
                       start: Optional[Tuple[bytes, int, int]] = None
                       ) -> Iterator[Tuple[documents.TextBatch,
                                           List[Tuple[str, str]]]]:
  """Streams one table file as batches of documents.

  Args:
    path: The file (any path Beam's FileSystems opens).
    fmt: 'csv', 'tsv' or 'jsonl'.
    columns: The text and label columns (from inputs.check_columns).
    source: The name in the ids ('<source>:<row>').
    invalid_utf8: 'replace' (invalid bytes in the text become U+FFFD) or
      'dead_letter'. Invalid UTF-8 in the label is always a dead letter.
    batch_rows: Rows per batch (at most).
    reads: Told how far the file has been read (for progress reports).
    start: CSV/TSV only: (header line, byte offset, data row) to read from
      the start of a range (tables.csv_ranges) to the end of the file.

  Yields:
    (good documents, [(id, reason)] of the bad ones sorted by row) per batch;
    a batch may hold only bad documents. Rows are 0-based data-row indices
    (the header and empty lines are not rows; a quoted CSV record with
    embedded newlines is one row).

  Raises:
    ValueError: A bad format, policy or batch size, or a file that cannot be
      read at all; UsageError when a CSV/TSV file lacks a column.
  """
  inputs.check_table_format(fmt)
  _check_policy(invalid_utf8)
  if batch_rows < 1:
    raise ValueError(f'batch_rows must be at least 1, got {batch_rows}')
  replace = invalid_utf8 == 'replace'
  make_ids = documents.table_ids(source)
  if fmt == 'jsonl':
    return _iter_jsonl(path, columns, make_ids, replace, batch_rows, reads)
  return _iter_csv(path, fmt, columns, make_ids, replace, batch_rows, reads,
                   start)


# ---------------------------------------------------------------------------
# Class folders.


def _iter_folder(paths, root, replace, batch_docs, reads=None):
  from transforms.sources import files  # pylint: disable=import-outside-toplevel,redefined-outer-name
  for start in range(0, len(paths), batch_docs):
    ids, raws, labels, good, bad = [], [], [], [], []
    for i, path in enumerate(paths[start:start + batch_docs]):
      parts = files.relative_parts(root, path)
      ids.append('/'.join(parts))
      try:
        with table_formats.open_file(path) as f:
          raw = f.read()
      except Exception as e:  # pylint: disable=broad-except
        if not (isinstance(e, OSError) or files.is_not_found(e)):
          raise
        bad.append((i, files.VANISHED if files.is_not_found(e)
                    else f'cannot read: {e}'))
        continue
      if reads is not None:
        reads.add(len(raw))
      if raw.startswith(table_formats.BOM):
        raw = raw[len(table_formats.BOM):]
      raws.append(raw)
      labels.append(parts[-2] if len(parts) > 1 else '')
      good.append(i)
    yield documents.check_batch(
        pa.array(raws, pa.binary()), pa.array(labels, pa.string()),
        np.array(good, np.int64), lambda rows, ids=ids: [ids[r] for r in rows],
        replace, bad)


def iter_folder_batches(paths: Sequence[str], root: str,
                        invalid_utf8: str = 'replace', batch_docs: int = 1000,
                        reads: Optional[files.ReadCount] = None
                        ) -> Iterator[Tuple[documents.TextBatch,
                                            List[Tuple[str, str]]]]:
  """Reads class-folder documents (one per file) in batches.

  Args:
    paths: The .txt files (from list_inputs), each root/<label>/<name>.
    root: Their root folder.
    invalid_utf8: 'replace' or 'dead_letter' (see iter_table_batches).
    batch_docs: Files per batch.
    reads: Told the bytes of every file read (for progress reports).

  Yields:
    (good documents, [(id, reason)] of the bad ones) per batch of files. The
    id is the path relative to root ('pos/001.txt'), the label the name of
    the file's folder.

  Raises:
    ValueError: A bad policy or batch size.
  """
  _check_policy(invalid_utf8)
  if batch_docs < 1:
    raise ValueError(f'batch_docs must be at least 1, got {batch_docs}')
  return _iter_folder(list(paths), root, invalid_utf8 == 'replace',
                      batch_docs, reads)
