"""The table reader's JSON-lines files.

Part of the table reader (`sources/tables.py`): the keys sampled for
`read_header`, and the file cut into blocks of lines and parsed.

Decisions:

- JSON lines: a block of `batch_rows` non-blank lines goes to
  `pyarrow.json.read_json` when every line starts with '{' (pyarrow 25
  crashes on a block whose first line is `null` and reads a `null` line as a
  row of nulls) and the block is valid UTF-8 (pyarrow.json does not check);
  otherwise, or when pyarrow raises or returns a different row count, every
  line of the block is parsed with `json.loads`, so a bad line is one dead
  letter ("invalid JSON: ...", "line is not valid UTF-8", "line is a JSON
  array, not an object") and the others are kept.
"""

from __future__ import annotations

import io
import json
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

from transforms.sources import table_cells
from transforms.sources import table_columns
from transforms.sources import table_formats
from transforms.sources import table_rows

# How much of a JSON-lines file is read per call.
_JSON_CHUNK_BYTES = 1 << 20


def read_header(path: str) -> Tuple[List[str], List[str]]:
  """tables.read_header for a JSON-lines file."""
  names: Dict[str, None] = {}
  kinds: Dict[str, set] = {}
  seen = 0
  with table_formats.open_file(path) as f:
    first = True
    while seen < table_formats.SAMPLE_ROWS:
      line = f.readline()
      if not line:
        break
      if first and line.startswith(table_formats.BOM):
        line = line[len(table_formats.BOM):]
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except ValueError:
        record = None
      if first and not isinstance(record, dict):
        raise table_columns.ColumnError(
            f'the first line of {path} is not a JSON object, expected one '
            'JSON object per line')
      first = False
      seen += 1
      if not isinstance(record, dict):
        continue
      for key, value in record.items():
        names.setdefault(key, None)
        if value is None:
          kind = 'null'
        elif isinstance(value, bool):
          kind = 'other'
        elif isinstance(value, (int, float)):
          kind = 'number'
        else:
          kind = 'other'
        kinds.setdefault(key, set()).add(kind)
  if first:
    raise table_columns.ColumnError(f'the file {path} is empty')
  numeric = [k for k in names if 'number' in kinds[k] and 'other' not in
             kinds[k]]
  return list(names), numeric


def _scan_lines(data: bytes) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Finds the lines of whole-line bytes (ending with a newline).

  Returns:
    (offset of each line's newline, whether the line is not blank, whether
    it starts with '{'). Vectorized on the first byte of each line; only
    lines that start with a space, tab or CR are looked at one by one.
  """
  a = np.frombuffer(data, np.uint8)
  ends = np.flatnonzero(a == 10)
  starts = np.concatenate(([0], ends[:-1] + 1))
  first = a[starts]  # the newline itself for an empty line
  leading_blank = (first == 32) | (first == 9) | (first == 13)
  nonblank = ~leading_blank & (first != 10)
  for i in np.flatnonzero(leading_blank):
    if data[starts[i]:ends[i]].strip(b' \t\r'):
      nonblank[i] = True
  return ends, nonblank, first == ord('{')


def line_blocks(f, batch_rows: int) -> Iterator[Tuple[bytes, int, bool]]:
  """Cuts a JSON-lines stream into blocks of batch_rows non-blank lines.

  Args:
    f: The open file (a UTF-8 BOM at its start is skipped).
    batch_rows: Non-blank lines per block.

  Yields:
    (bytes of whole lines, number of non-blank lines in them, whether every
    non-blank line starts with '{'). The last block may hold fewer lines.
    Blank lines are kept in the bytes but not counted.
  """
  pieces: List[bytes] = []
  count = 0
  objects = True
  tail = b''
  first = True
  while True:
    chunk = f.read(_JSON_CHUNK_BYTES)
    if first:
      if chunk.startswith(table_formats.BOM):
        chunk = chunk[len(table_formats.BOM):]
      first = False
    at_end = not chunk
    data = tail + chunk
    if at_end:
      tail = b''
      if data and not data.endswith(b'\n'):
        data += b'\n'
    else:
      cut = data.rfind(b'\n') + 1
      data, tail = data[:cut], data[cut:]
    if data:
      ends, nonblank, brace = _scan_lines(data)
      odd = nonblank & ~brace  # non-blank lines that do not start with '{'
      odd_upto = np.cumsum(odd)
      cumulative = np.cumsum(nonblank)
      total = int(cumulative[-1])
      pos = done = 0
      line = 0  # first line of the current piece
      while total - done >= batch_rows - count:
        target = done + batch_rows - count
        k = int(np.searchsorted(cumulative, target))
        cut = int(ends[k]) + 1
        pieces.append(data[pos:cut])
        odd_before = int(odd_upto[line - 1]) if line else 0
        objects = objects and int(odd_upto[k]) == odd_before
        yield b''.join(pieces), batch_rows, objects
        pieces, count, objects = [], 0, True
        pos, done, line = cut, target, k + 1
      if pos < len(data):
        pieces.append(data[pos:])
        count += total - done
        odd_before = int(odd_upto[line - 1]) if line else 0
        objects = objects and int(odd_upto[-1]) == odd_before
    if at_end:
      if count:
        yield b''.join(pieces), count, objects
      return


def arrow_block(block: bytes, count: int, objects: bool
                ) -> Optional[pa.Table]:
  """The block via pyarrow, or None when the per-line path must decide.

  Only blocks whose lines all start with '{' go to pyarrow: pyarrow 25
  crashes on a block whose first line is `null` and reads a `null` line as
  a row of nulls.

  Args:
    block: A block from line_blocks.
    count: Its number of non-blank lines.
    objects: Whether every non-blank line starts with '{'.

  Returns:
    A table of `count` rows, or None: a line that does not start with '{',
    invalid UTF-8, a block pyarrow refuses, or another number of rows.
  """
  if not objects:
    return None
  try:
    block.decode('utf-8')  # pyarrow.json does not validate UTF-8 strings
  except UnicodeDecodeError:
    return None
  try:
    table = pa_json.read_json(
        io.BytesIO(block),
        read_options=pa_json.ReadOptions(block_size=len(block) + 1))
  except (pa.ArrowException, ValueError):
    return None
  return table if table.num_rows == count else None


def _json_slow(block: bytes, rows: np.ndarray, needed: Sequence[str]):
  """Parses every line with json.loads; bad lines become dead letters."""
  cells: Dict[str, List[Optional[str]]] = {name: [] for name in needed}
  good: List[int] = []
  bad: List[Tuple[int, str]] = []
  lines = [line for line in block.split(b'\n')
           if line.strip(b' \t\r')]
  for row, line in zip(rows.tolist(), lines):
    try:
      record = json.loads(line)
    except UnicodeDecodeError:
      bad.append((row, 'line is not valid UTF-8'))
      continue
    except ValueError as e:
      bad.append((row, f'invalid JSON: {e}'))
      continue
    if not isinstance(record, dict):
      kind = 'null' if record is None else type(record).__name__
      kind = {'list': 'array', 'str': 'string', 'dict': 'object',
              'int': 'number', 'float': 'number', 'bool': 'boolean'}.get(
                  kind, kind)
      bad.append((row, f'line is a JSON {kind}, not an object'))
      continue
    good.append(row)
    for name in needed:
      cells[name].append(table_cells.json_text(record.get(name)))
  arrays = {name: pa.array(values, pa.string())
            for name, values in cells.items()}
  return arrays, np.array(good, np.int64), bad


def iter_batches(path, columns, unit, batch_rows, reads=None):
  """tables.iter_batches for a JSON-lines file (arguments checked)."""
  needed = table_columns.needed_columns(columns)
  next_row = 0
  with table_formats.open_file(path, reads) as f:
    for block, count, objects in line_blocks(f, batch_rows):
      rows = np.arange(next_row, next_row + count, dtype=np.int64)
      next_row += count
      table = arrow_block(block, count, objects)
      if table is not None:
        arrays = {name: (table.column(name) if name in table.column_names
                         else None) for name in needed}
        yield table_rows.convert(arrays, rows, columns, unit)
      else:
        arrays, good, bad = _json_slow(block, rows, needed)
        yield table_rows.convert(arrays, good, columns, unit, bad)
