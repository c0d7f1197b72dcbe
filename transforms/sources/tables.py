"""Reading and row parsing for the sensor modality (tabular time series).

No Beam pipeline in here: plain functions that turn one CSV, TSV, JSON-lines
or Parquet file into batches of parsed rows plus the rows that cannot be used
(dead letters), each with its 0-based data-row index and a short reason.

Layers:

- `format_of`, `read_header` and `resolve_columns` run on the launching
  machine and turn a bad invocation into a `ColumnError` (one sentence);
- `iter_batches` streams one file in batches of about `batch_rows` rows and
  converts each batch with vectorized numpy / pyarrow / pandas code.

Decisions:

- Files are opened with Beam's `FileSystems.open` (so `gs://` works). CSV,
  TSV and JSON lines are read as a stream; memory is bounded by about one
  batch (plus one read-ahead block).
- Parquet: the object from `FileSystems.open` is handed to pyarrow when it is
  seekable (local files; Beam's GCS reader is seekable too), so only the
  footer and the needed column chunks are read. A non-seekable object is read
  whole into a `pyarrow.BufferReader` (memory: the file size).
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
- Large local CSV/TSV files can be read in byte ranges, each on its own and
  by several processes at once (`csv_ranges`, `parse_range`): exact as long
  as no range holds a double quote; from the first that does, the rest of
  the file is read in one piece (`iter_csv_from`).
- Numbers in text cells: pyarrow's string -> float64 cast accepts 'nan',
  'inf', 'infinity' (any case, optional sign) but not surrounding whitespace
  or an empty string. The fast path is that cast; when it fails for a column
  of a batch, the cells are trimmed and classified with a regular expression
  (vectorized): empty, 'na', 'n/a', 'null', 'none' and the nan spellings are
  missing values; numbers are cast; anything else is a dead letter. Every
  missing or non-finite value (including +-inf) ends up as NaN.
- Timestamps: numbers (numeric columns or numeric text) are epoch values in
  `timestamp_unit`; other text is ISO-8601 (naive = UTC), read by Arrow's
  cast when every cell of the batch takes one of its strict forms, else by
  pandas (the same values; text that does not begin with a digit, such as
  the 'now' pandas would read as the clock's time, is a dead letter);
  Parquet timestamp and date columns are converted directly. The result is
  int64 nanoseconds; values outside its range (years 1677-2262) are dead
  letters.
- JSON lines: a block of `batch_rows` non-blank lines goes to
  `pyarrow.json.read_json` when every line starts with '{' (pyarrow 25
  crashes on a block whose first line is `null` and reads a `null` line as a
  row of nulls) and the block is valid UTF-8 (pyarrow.json does not check);
  otherwise, or when pyarrow raises or returns a different row count, every
  line of the block is parsed with `json.loads`, so a bad line is one dead
  letter ("invalid JSON: ...", "line is not valid UTF-8", "line is a JSON
  array, not an object") and the others are kept.
- Text cells of the label and entity columns are stripped and put in
  Unicode NFC (label_text.canonical); 'NA', 'null' and
  the like are kept as text there (only numeric columns know missing words).
- `read_header` calls a column numeric only when the sampled rows hold at
  least one number and nothing that is not a number or a missing value.
- Beam is imported on first use (opening a file through FileSystems), not
  with this module: the worker processes that parse CSV ranges open local
  files themselves and start without it.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import os
import re
from typing import (TYPE_CHECKING, Dict, Iterator, List, NamedTuple,
                    Optional, Sequence, Tuple)

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from transforms.core import label_text

if TYPE_CHECKING:
  from transforms.sources import files

FORMATS = ('csv', 'tsv', 'jsonl', 'parquet')

_EXTENSIONS = {
    '.csv': 'csv',
    '.tsv': 'tsv', '.tab': 'tsv',
    '.jsonl': 'jsonl', '.ndjson': 'jsonl', '.json': 'jsonl',
    '.parquet': 'parquet', '.pq': 'parquet',
}
_UNIT_NS = {'s': 10**9, 'ms': 10**6, 'us': 10**3, 'ns': 1}
_INT64_MAX = np.iinfo(np.int64).max

# How much of a file read_header samples.
_SAMPLE_ROWS = 1000
_SAMPLE_BYTES = 4 << 20
# CSV block sizes (bytes) for pyarrow's streaming reader. A block must hold
# at least one whole record, hence the floor.
_MIN_BLOCK_BYTES = 1 << 20
_MAX_BLOCK_BYTES = 256 << 20
# How much of a JSON-lines file is read per call.
_JSON_CHUNK_BYTES = 1 << 20
_BOM = b'\xef\xbb\xbf'

# Text cells that mean "no value" in a numeric column (compared lower-case,
# after trimming). The nan spellings are handled by _NUMBER.
_MISSING_WORDS = ('', 'na', 'n/a', 'null', 'none')
# What pyarrow's string -> float64 cast accepts (the same pattern runs in
# RE2 via pyarrow.compute and in Python's re).
_NUMBER = (r'(?i)^[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?'
           r'|nan(?:\([0-9a-z_]*\))?|inf|infinity)$')
# Finite numbers only (timestamps), and integers that fit int64.
_FINITE_NUMBER = r'(?i)^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?$'
_INTEGER = r'^-?[0-9]{1,19}$'
_NUMBER_RE = re.compile(_NUMBER)


class ColumnError(ValueError):
  """A bad invocation about columns; the message is one plain sentence."""


def format_of(path: str) -> Optional[str]:
  """The format of a file from its extension (case-insensitive), or None."""
  name = path.replace('\\', '/').rsplit('/', 1)[-1].lower()
  dot = name.rfind('.')
  return _EXTENSIONS.get(name[dot:]) if dot >= 0 else None


@dataclasses.dataclass(frozen=True)
class Columns:
  """Which columns play which role.

  Attributes:
    timestamp: The timestamp column.
    entity: The column naming the series (device, patient...); None when all
      rows are one series.
    label: The label column.
    channels: Numeric channel columns, in file order or in the order given.
  """
  timestamp: str
  entity: Optional[str]
  label: str
  channels: Tuple[str, ...]


@dataclasses.dataclass
class RowBatch:
  """Parsed good rows of one batch (all arrays have the same length n).

  Attributes:
    row: int64, 0-based data-row index in the file (header excluded; a CSV
      record with an embedded newline is one row; empty lines are not rows).
    time: int64 nanoseconds since the Unix epoch (UTC).
    entity: Object array of str ('' when there is no entity column or the
      cell is missing).
    label: Object array of str, stripped of surrounding whitespace.
    values: float64 [n, len(channels)]; missing cells are NaN.
  """
  row: np.ndarray
  time: np.ndarray
  entity: np.ndarray
  label: np.ndarray
  values: np.ndarray

  def __len__(self):
    return len(self.row)


def _open(path: str, reads: Optional[files.ReadCount] = None):
  """The file, as bytes; with `reads`, counting how far it is read."""
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  from transforms.sources import files  # pylint: disable=import-outside-toplevel,redefined-outer-name
  f = FileSystems.open(path, compression_type='uncompressed')
  return f if reads is None else files.CountingFile(f, path, reads)


def _column_list(names: Sequence[str], limit: int = 40) -> str:
  shown = ', '.join(names[:limit])
  if len(names) > limit:
    shown += f' and {len(names) - limit} more'
  return shown or 'none'


def _show(value, limit: int = 60) -> str:
  """A cell for a dead-letter reason: quoted, and cut when long."""
  text = value if isinstance(value, str) else str(value)
  if len(text) > limit:
    text = text[:limit] + '...'
  return repr(text)


def _is_missing_text(text: str) -> bool:
  return text.strip().lower() in _MISSING_WORDS


# ---------------------------------------------------------------------------
# Headers and columns.


def _read_prefix(path: str, limit: int) -> Tuple[bytes, bool]:
  """The first `limit` bytes of a file and whether that is all of it."""
  with _open(path) as f:
    data = f.read(limit)
    at_end = len(data) < limit or not f.read(1)
  return data, at_end


def _csv_header(path: str, fmt: str) -> Tuple[List[str], List[str]]:
  data, at_end = _read_prefix(path, _SAMPLE_BYTES)
  if not data.strip():
    raise ColumnError(f'the file {path} is empty')
  text = data.decode('utf-8-sig', errors='replace')
  reader = csv.reader(io.StringIO(text, newline=''),
                      delimiter='\t' if fmt == 'tsv' else ',')
  records = []
  try:
    for record in reader:
      if record:
        records.append(record)
      if len(records) > _SAMPLE_ROWS + 1:
        break
  except csv.Error:
    pass  # A damaged sample: judge from the records read so far.
  if not at_end and len(records) <= _SAMPLE_ROWS + 1 and len(records) > 1:
    records.pop()  # The last record may be cut by the sample's end.
  if not records:
    raise ColumnError(f'the file {path} has no header line')
  names = records[0]
  rows = [r for r in records[1:_SAMPLE_ROWS + 1] if len(r) == len(names)]
  numeric = []
  for i, name in enumerate(names):
    cells = [r[i] for r in rows if not _is_missing_text(r[i])]
    if cells and all(_NUMBER_RE.match(c.strip()) for c in cells):
      numeric.append(name)
  return names, numeric


def _jsonl_header(path: str) -> Tuple[List[str], List[str]]:
  names: Dict[str, None] = {}
  kinds: Dict[str, set] = {}
  seen = 0
  with _open(path) as f:
    first = True
    while seen < _SAMPLE_ROWS:
      line = f.readline()
      if not line:
        break
      if first and line.startswith(_BOM):
        line = line[len(_BOM):]
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except ValueError:
        record = None
      if first and not isinstance(record, dict):
        raise ColumnError(f'the first line of {path} is not a JSON object, '
                          'expected one JSON object per line')
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
    raise ColumnError(f'the file {path} is empty')
  numeric = [k for k in names if 'number' in kinds[k] and 'other' not in
             kinds[k]]
  return list(names), numeric


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


def _is_numeric_type(t: pa.DataType) -> bool:
  return (pa.types.is_integer(t) or pa.types.is_floating(t)
          or pa.types.is_decimal(t))


def _parquet_header(path: str) -> Tuple[List[str], List[str]]:
  with _open(path) as f:
    schema = _parquet_file(path, f).schema_arrow
  names = list(schema.names)
  numeric = [field.name for field in schema if _is_numeric_type(field.type)]
  return names, numeric


def _check_format(fmt: str):
  if fmt not in FORMATS:
    raise ValueError(f'format {fmt!r} is not one of {", ".join(FORMATS)}')


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
  _check_format(fmt)
  if fmt in ('csv', 'tsv'):
    return _csv_header(path, fmt)
  if fmt == 'jsonl':
    return _jsonl_header(path)
  return _parquet_header(path)


def resolve_columns(names: Sequence[str], numeric: Sequence[str],
                    timestamp: str, entity: Optional[str], label: str,
                    channels: Optional[Sequence[str]]) -> Columns:
  """Checks the column roles against a file's columns.

  Args:
    names: All column names (from read_header).
    numeric: The numeric-looking ones.
    timestamp: The timestamp column.
    entity: The entity column, or None.
    label: The label column.
    channels: Channel columns, or None for every numeric column that has no
      other role.

  Returns:
    The Columns.

  Raises:
    ColumnError: A missing column, a column with two roles, a column given
      twice, or no channel column left.
  """
  names = list(names)
  available = _column_list(names)

  def check_exists(name, role):
    if name not in names:
      raise ColumnError(f'the {role} column {name!r} is not in the file '
                        f'(columns: {available})')
    if names.count(name) > 1:
      raise ColumnError(f'the {role} column {name!r} appears more than once '
                        f'in the header (columns: {available})')

  roles = [('timestamp', timestamp)]
  if entity is not None:
    roles.append(('entity', entity))
  roles.append(('label', label))
  for role, name in roles:
    check_exists(name, role)
  for i, (role, name) in enumerate(roles):
    for other, other_name in roles[i + 1:]:
      if name == other_name:
        raise ColumnError(f'the column {name!r} is used as both the {role} '
                          f'and the {other} column')
  role_of = {name: role for role, name in roles}
  if channels is None:
    numeric_set = set(numeric)
    picked = []
    for name in names:
      if name in numeric_set and name not in role_of and name not in picked:
        picked.append(name)
    if not picked:
      numeric_left = [n for n in names if n in numeric_set]
      raise ColumnError(
          'no numeric channel columns are left besides the timestamp, '
          f'entity and label columns (numeric columns: '
          f'{_column_list(numeric_left)}; columns: {available})')
    return Columns(timestamp, entity, label, tuple(picked))
  if isinstance(channels, str):
    channels = [channels]
  picked = []
  for name in channels:
    check_exists(name, 'channel')
    if name in role_of:
      raise ColumnError(f'the column {name!r} is used as both the '
                        f'{role_of[name]} and a channel column')
    if name in picked:
      raise ColumnError(f'the channel column {name!r} is given twice')
    picked.append(name)
  if not picked:
    raise ColumnError(f'no channel columns given (columns: {available})')
  return Columns(timestamp, entity, label, tuple(picked))


def _needed(columns: Columns) -> List[str]:
  """The columns to read, each once, in role order."""
  out = []
  for name in (columns.timestamp, columns.entity, columns.label,
               *columns.channels):
    if name is not None and name not in out:
      out.append(name)
  return out


# ---------------------------------------------------------------------------
# Vectorized conversion of one batch.
#
# Each converter returns its result for all n rows plus (bad positions,
# reasons) for the rows it rejects.

_Bad = Tuple[np.ndarray, List[str]]
_NO_BAD: _Bad = (np.zeros(0, np.int64), [])


def _array(column) -> pa.Array:
  if isinstance(column, pa.ChunkedArray):
    return column.combine_chunks()
  return column


def _mask(array) -> np.ndarray:
  """A boolean pyarrow array as numpy, nulls as False."""
  return np.asarray(pc.fill_null(array, False).to_numpy(zero_copy_only=False),
                    dtype=bool)


def _json_text(value) -> Optional[str]:
  """A value decoded by json.loads as the text of a cell."""
  if value is None or isinstance(value, str):
    return value
  if isinstance(value, bool):
    return 'true' if value else 'false'
  if isinstance(value, (int, float)):
    return repr(value)
  return json.dumps(value, ensure_ascii=False)


def _to_text(array: pa.Array, name: str) -> Tuple[pa.Array, _Bad]:
  """Any column as a string array; cells with invalid UTF-8 become null."""
  t = array.type
  if pa.types.is_string(t) or pa.types.is_large_string(t):
    return array, _NO_BAD
  if pa.types.is_null(t):
    return pa.nulls(len(array), pa.string()), _NO_BAD
  if pa.types.is_binary(t) or pa.types.is_large_binary(t):
    try:
      return pc.cast(array, pa.string()), _NO_BAD
    except pa.ArrowInvalid:
      pass
    # Rare: find the bad cells one by one (only this column of this batch).
    cells, bad = [], []
    for i, raw in enumerate(array.to_pylist()):
      if raw is None:
        cells.append(None)
        continue
      try:
        cells.append(raw.decode('utf-8'))
      except UnicodeDecodeError:
        cells.append(None)
        bad.append(i)
    reason = f'column {name!r} holds invalid UTF-8'
    return pa.array(cells, pa.string()), (np.array(bad, np.int64),
                                          [reason] * len(bad))
  if pa.types.is_dictionary(t):
    return _to_text(array.dictionary_decode(), name)
  try:
    return pc.cast(array, pa.string()), _NO_BAD
  except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
    cells = [_json_text(v) for v in array.to_pylist()]
    return pa.array(cells, pa.string()), _NO_BAD


def _finite(values: np.ndarray) -> np.ndarray:
  values = np.array(values, dtype=np.float64)
  values[~np.isfinite(values)] = np.nan
  return values


def _float_array(array: pa.Array) -> np.ndarray:
  return _finite(array.to_numpy(zero_copy_only=False))


def _channel(array: pa.Array, name: str) -> Tuple[np.ndarray, _Bad]:
  """A channel column as float64 (NaN for missing) and its bad cells."""
  t = array.type
  if _is_numeric_type(t):
    return _float_array(pc.cast(array, pa.float64())), _NO_BAD
  text, utf8_bad = _to_text(array, name)
  try:
    return _float_array(pc.cast(text, pa.float64())), utf8_bad
  except pa.ArrowInvalid:
    pass
  trimmed = pc.utf8_trim_whitespace(text)
  number = _mask(pc.match_substring_regex(trimmed, _NUMBER))
  missing = _mask(pc.is_in(pc.utf8_lower(trimmed),
                           value_set=pa.array(_MISSING_WORDS)))
  missing |= _mask(pc.is_null(trimmed))
  clean = pc.if_else(pa.array(number), trimmed, pa.scalar(None, pa.string()))
  try:
    values = _float_array(pc.cast(clean, pa.float64()))
  except pa.ArrowInvalid:  # The pattern let through what the cast refuses.
    values = np.full(len(text), np.nan)
    for i in np.flatnonzero(number):
      try:
        values[i] = float(trimmed[i].as_py())
      except ValueError:
        number[i] = False
    values = _finite(values)
  bad = np.flatnonzero(~number & ~missing)
  cells = text.take(pa.array(bad)).to_pylist() if len(bad) else []
  reasons = [f'channel {name!r} value {_show(c)} is not a number'
             for c in cells]
  return values, _merge_bad(utf8_bad, (bad, reasons))


def _epoch_ints(ints: np.ndarray, factor: int) -> Tuple[np.ndarray,
                                                        np.ndarray]:
  """int64 epoch values times factor, and where that overflows."""
  limit = _INT64_MAX // factor
  over = (ints > limit) | (ints < -limit)
  return np.where(over, 0, ints) * factor, over


def _epoch_floats(values: np.ndarray, factor: int) -> Tuple[np.ndarray,
                                                            np.ndarray]:
  """float epoch values to int64 ns (nearest), and where that overflows.

  The whole and fractional parts are scaled separately, so epoch seconds
  keep sub-microsecond precision.
  """
  over = ~np.isfinite(values) | (np.abs(values) >= 9.2e18 / factor)
  values = np.where(over, 0.0, values)
  whole = np.trunc(values)
  ns = (whole.astype(np.int64) * factor
        + np.rint((values - whole) * factor).astype(np.int64))
  return ns, over


def _numbers_to_ns(array: pa.Array, factor: int) -> Tuple[np.ndarray,
                                                          np.ndarray]:
  """A numeric array (no nulls) of epoch values to int64 ns and overflow."""
  if pa.types.is_integer(array.type):
    try:
      return _epoch_ints(
          pc.cast(array, pa.int64()).to_numpy(zero_copy_only=False), factor)
    except pa.ArrowInvalid:  # uint64 above the int64 range
      pass
  # Unsafe: huge integers may round; they are out of range anyway.
  return _epoch_floats(pc.cast(array, pa.float64(), safe=False).to_numpy(
      zero_copy_only=False), factor)


def _integer_text_to_ns(texts: pa.Array, factor: int) -> Tuple[np.ndarray,
                                                             np.ndarray]:
  """Integer strings (up to 19 digits) to int64 ns, and where that overflows."""
  try:
    return _epoch_ints(
        pc.cast(texts, pa.int64()).to_numpy(zero_copy_only=False), factor)
  except pa.ArrowInvalid:
    pass
  # Rare: some 19-digit value is beyond int64; go cell by cell.
  values = [int(text) for text in texts.to_pylist()]
  fits = np.array([abs(v) <= _INT64_MAX for v in values], bool)
  ns, over = _epoch_ints(
      np.array([v if ok else 0 for v, ok in zip(values, fits)], np.int64),
      factor)
  return ns, over | ~fits


def _iso_to_ns(texts: np.ndarray) -> Tuple[np.ndarray, np.ndarray,
                                           np.ndarray]:
  """ISO-8601 strings to int64 ns: (ns, unparseable, out of range)."""
  pd = _pandas()
  try:
    parsed = pd.DatetimeIndex(pd.to_datetime(texts, format='ISO8601',
                                             utc=True, errors='coerce'))
  except (ValueError, TypeError, OverflowError):
    # Should not happen with errors='coerce'; parse cell by cell.
    parsed = pd.DatetimeIndex([_parse_one_iso(t) for t in texts]).as_unit(
        'us')
  nat = np.asarray(parsed.isna())
  ticks = np.where(nat, 0, parsed.asi8)
  ns, over = _epoch_ints(ticks, _UNIT_NS[parsed.unit])
  return ns, nat, over & ~nat


def _iso_by_arrow(texts: pa.Array) -> Optional[np.ndarray]:
  """Every one of `texts` as int64 ns since the epoch, when Arrow's
  ISO-8601 cast reads them all, else None (pandas then reads them:
  _iso_to_ns).

  Arrow reads the strict forms: a date, then optionally a time (hours,
  minutes, seconds, up to 9 decimals) after 'T' or a space, and either a
  zone on every cell ('Z', +hh, +hhmm, +hh:mm: converted to UTC) or on
  none (naive = UTC). Each value it gives is the one pandas gives (the
  tests hold the two to that on many spellings); what it refuses (a
  leap second, 24:00, a comma, a week date, a mix of zoned and naive cells,
  an empty or null cell, a number) makes the whole array go to pandas. It
  never reads a number as a date: its forms put '-' where a number cannot
  have one (after the 4th and the 7th character). About 7 times faster
  than pandas, which matters in a column of millions of timestamps.
  """
  if texts.null_count or not len(texts):
    return None
  for target in (pa.timestamp('ns', tz='UTC'), pa.timestamp('ns')):
    try:
      stamps = pc.cast(texts, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
      continue
    return np.asarray(stamps.cast(pa.int64()).to_numpy(
        zero_copy_only=False), np.int64)
  return None


def _pandas():
  """pandas, imported when a timestamp column needs it (a fifth of a
  second, which the text reader's worker processes do without)."""
  import pandas  # pylint: disable=import-outside-toplevel
  return pandas


def _parse_one_iso(text):
  pd = _pandas()
  try:
    return pd.to_datetime(text, format='ISO8601', utc=True)
  except (ValueError, TypeError, OverflowError):
    return pd.NaT


def _timestamps(array: pa.Array, name: str, unit: str) -> Tuple[np.ndarray,
                                                                 _Bad]:
  """A timestamp column as int64 ns since the epoch and its bad cells."""
  n = len(array)
  t = array.type
  factor = _UNIT_NS[unit]
  ns = np.zeros(n, np.int64)
  if pa.types.is_timestamp(t) or pa.types.is_date(t):
    if pa.types.is_timestamp(t):
      type_factor = _UNIT_NS[t.unit]
    else:
      type_factor = 86400 * 10**9 if pa.types.is_date32(t) else 10**6
    missing = _mask(pc.is_null(array))
    # date32 casts only to int32 (days), the others to int64.
    storage = pa.int32() if pa.types.is_date32(t) else pa.int64()
    ints = pc.cast(array, storage).fill_null(0).to_numpy(
        zero_copy_only=False).astype(np.int64)
    ns, over = _epoch_ints(ints, type_factor)
    shown = array
  elif _is_numeric_type(t):
    missing = _mask(pc.is_null(array))
    if pa.types.is_floating(t):
      missing |= _mask(pc.is_nan(array))
    filled = array.fill_null(0)
    if pa.types.is_floating(t):
      filled = pc.if_else(pa.array(missing), 0.0, filled)
    ns, over = _numbers_to_ns(filled, factor)
    over &= ~missing
    shown = array
  else:
    text, utf8_bad = _to_text(array, name)
    trimmed = pc.utf8_trim_whitespace(text)
    over = np.zeros(n, bool)
    unparsed = np.zeros(n, bool)
    every_iso = _iso_by_arrow(trimmed)
    if every_iso is not None:
      # The usual column: every cell a timestamp in one ISO-8601 form.
      missing = np.zeros(n, bool)
      ns, over = _epoch_ints(every_iso, 1)
      integer = number = iso = missing
    else:
      missing = _mask(pc.is_null(trimmed)) | _mask(pc.equal(trimmed, ''))
      integer = _mask(pc.match_substring_regex(trimmed, _INTEGER))
      number = (_mask(pc.match_substring_regex(trimmed, _FINITE_NUMBER))
                & ~integer)
      iso = ~missing & ~integer & ~number
      # An ISO-8601 time begins with a digit. pandas also reads the words
      # 'now' and 'today' (as the clock's time when it reads them): such a
      # cell is no time of the data.
      word = iso & ~_mask(pc.match_substring_regex(trimmed, '^[0-9]'))
      unparsed |= word
      iso &= ~word
    if integer.any():
      part = trimmed if integer.all() else trimmed.filter(pa.array(integer))
      ns[integer], over[integer] = _integer_text_to_ns(part, factor)
    if number.any():
      part = trimmed.filter(pa.array(number))
      ns[number], over[number] = _epoch_floats(
          pc.cast(part, pa.float64()).to_numpy(zero_copy_only=False), factor)
    if iso.any():
      part = trimmed if iso.all() else trimmed.filter(pa.array(iso))
      iso_ns, iso_nat, iso_over = _iso_to_ns(
          part.to_numpy(zero_copy_only=False))
      ns[iso], unparsed[iso], over[iso] = iso_ns, iso_nat, iso_over
    if len(utf8_bad[0]):
      missing[utf8_bad[0]] = False
      unparsed[utf8_bad[0]] = False
    bad = utf8_bad
    for mask, template in ((missing, 'missing timestamp'),
                           (unparsed, 'timestamp {} is not ISO-8601 or a '
                                      'number'),
                           (over, 'timestamp {} is out of range')):
      bad = _merge_bad(bad, _reasons(mask, template, text))
    return ns, bad
  bad = _merge_bad(_reasons(missing, 'missing timestamp', shown),
                   _reasons(over, 'timestamp {} is out of range', shown))
  return ns, bad


def _reasons(mask: np.ndarray, template: str, cells: pa.Array) -> _Bad:
  """(positions, reasons) for the true positions of mask."""
  where = np.flatnonzero(mask)
  if not len(where):
    return _NO_BAD
  if '{}' not in template:
    return where, [template] * len(where)
  shown = cells.take(pa.array(where)).to_pylist()
  return where, [template.format(_show(c)) for c in shown]


def _merge_bad(first: _Bad, second: _Bad) -> _Bad:
  """Both lists of bad positions; a position keeps its first reason."""
  if not len(second[0]):
    return first
  if not len(first[0]):
    return second
  taken = set(first[0].tolist())
  positions, reasons = list(first[0]), list(first[1])
  for p, r in zip(second[0].tolist(), second[1]):
    if p not in taken:
      positions.append(p)
      reasons.append(r)
      taken.add(p)
  return np.array(positions, np.int64), reasons


def _strings(array: pa.Array, name: str) -> Tuple[np.ndarray, np.ndarray,
                                                  _Bad]:
  """A text column as an object array of stripped, NFC str ('' for
  missing): label_text.canonical of each cell.

  Returns:
    (values, missing mask, bad cells (invalid UTF-8)).
  """
  n = len(array)
  text, bad = _to_text(array, name)
  trimmed = pc.utf8_trim_whitespace(text)
  missing = _mask(pc.is_null(trimmed)) | _mask(pc.equal(trimmed, ''))
  out = np.full(n, '', dtype=object)
  encoded = pc.dictionary_encode(trimmed)
  if len(encoded.dictionary):
    words = np.asarray(label_text.canonical_words(
        encoded.dictionary.to_numpy(zero_copy_only=False)), dtype=object)
    present = ~_mask(pc.is_null(encoded.indices))
    indices = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
    out[present] = words[indices[present]]
  if len(bad[0]):
    missing[bad[0]] = False
  return out, missing, bad


def _empty_batch(n_channels: int) -> RowBatch:
  return RowBatch(row=np.zeros(0, np.int64), time=np.zeros(0, np.int64),
                  entity=np.zeros(0, object), label=np.zeros(0, object),
                  values=np.zeros((0, n_channels), np.float64))


def _convert(arrays: Dict[str, Optional[pa.Array]], rows: np.ndarray,
             columns: Columns, unit: str,
             earlier_bad: Sequence[Tuple[int, str]] = ()
             ) -> Tuple[RowBatch, List[Tuple[int, str]]]:
  """Turns the needed columns of one batch into good rows and bad rows.

  Args:
    arrays: Column name -> array of len(rows) (None: absent, all null).
    rows: The data-row index of each array position.
    columns: The roles.
    unit: The epoch unit of numeric timestamps.
    earlier_bad: Bad rows found before conversion (not in `arrays`).

  Returns:
    (RowBatch of the good rows, [(row, reason)] sorted by row).
  """
  n = len(rows)

  def get(name):
    array = arrays.get(name)
    return pa.nulls(n, pa.string()) if array is None else _array(array)

  time, bad = _timestamps(get(columns.timestamp), columns.timestamp, unit)
  if columns.entity is None:
    entity = np.full(n, '', dtype=object)
  else:
    entity, _, entity_bad = _strings(get(columns.entity), columns.entity)
    bad = _merge_bad(bad, entity_bad)
  label, label_missing, label_bad = _strings(get(columns.label), columns.label)
  bad = _merge_bad(bad, label_bad)
  bad = _merge_bad(bad, _reasons(label_missing, 'missing label', None))
  values = np.empty((n, len(columns.channels)), np.float64)
  for j, name in enumerate(columns.channels):
    values[:, j], channel_bad = _channel(get(name), name)
    bad = _merge_bad(bad, channel_bad)
  rows = np.asarray(rows, np.int64)
  bad_rows = list(earlier_bad)
  if len(bad[0]):
    keep = np.ones(n, bool)
    keep[bad[0]] = False
    bad_rows += zip(rows[bad[0]].tolist(), bad[1])
    rows, time, entity, label, values = (rows[keep], time[keep], entity[keep],
                                         label[keep], values[keep])
  bad_rows.sort(key=lambda item: item[0])
  return RowBatch(rows, time, entity, label, values), bad_rows


# ---------------------------------------------------------------------------
# Streaming the formats.


def _csv_block_bytes(path: str, batch_rows: int) -> int:
  """A pyarrow block size that holds about batch_rows records."""
  sample, _ = _read_prefix(path, 1 << 16)
  lines = max(1, sample.count(b'\n'))
  per_row = max(1.0, len(sample) / lines)
  wanted = int(batch_rows * per_row * 1.1)
  return int(min(max(wanted, _MIN_BLOCK_BYTES), _MAX_BLOCK_BYTES))


def _split(batch, batch_rows: int):
  for start in range(0, max(batch.num_rows, 1), batch_rows):
    yield batch.slice(start, batch_rows)


# A field larger than pyarrow's block cannot be parsed ("straddling
# object straddles two block boundaries"); readers then read again with a
# block this many times larger, up to _LARGEST_BLOCK_BYTES.
BLOCK_GROWTH = 8
_LARGEST_BLOCK_BYTES = 1 << 30


def block_too_small(error: Exception) -> bool:
  """Whether pyarrow refused a record larger than its block."""
  return 'straddl' in str(error)


def larger_block(block: int) -> Optional[int]:
  """The next block size to try after block_too_small, or None when even
  the largest was too small."""
  return None if block >= _LARGEST_BLOCK_BYTES else min(
      block * BLOCK_GROWTH, _LARGEST_BLOCK_BYTES)


def _open_binary_csv(f, path: str, fmt: str, needed: Sequence[str],
                     batch_rows: int, on_invalid_row,
                     block: Optional[int] = None):
  """pyarrow's streaming CSV reader over the `needed` columns, read as
  binary, single-threaded (so rows with a wrong field count are reported to
  `on_invalid_row` with their record number), quoted newlines allowed;
  blocks of `block` bytes (default: about batch_rows records)."""
  return pa_csv.open_csv(
      f,
      read_options=pa_csv.ReadOptions(
          block_size=block or _csv_block_bytes(path, batch_rows),
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


def _iter_csv(path, fmt, columns, unit, batch_rows, reads=None):
  with _open(path, reads) as f:
    yield from _iter_csv_file(f, path, fmt, columns, unit, batch_rows)


def _iter_csv_file(f, path, fmt, columns, unit, batch_rows, first_row=0,
                   block=None):
  """_iter_csv over an open file object that starts with the header line
  (the file itself, or a header line and a byte range of it whose first
  record is data row `first_row` of the file), in pyarrow blocks of
  `block` bytes (default: about batch_rows records)."""
  needed = _needed(columns)
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
    reader = _open_binary_csv(f, path, fmt, needed, batch_rows,
                              on_invalid_row, block)
  except pa.ArrowInvalid as e:
    head, _ = _read_prefix(path, 1 << 16)
    if len(head.strip().splitlines()) == 1:
      return  # Only a header line without a newline: no rows.
    raise ColumnError(f'cannot read the CSV header of {path}: {e}') from None
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
      yield _convert(arrays, rows, columns, unit, mine)
  if pending:
    yield _empty_batch(len(columns.channels)), sorted(pending)


# ---------------------------------------------------------------------------
# CSV and TSV files in byte ranges (read by several processes at once).
#
# A file without a double quote has one record per line, so a range that
# starts after a newline starts at a record: each range is read on its own,
# with the header line put in front, and its rows are numbered from 0; the
# reader adds the records of the ranges before it. The first range that
# holds a quote (a quoted field may hold a newline), or that fails, ends
# the ranges: the rest of the file is read in one piece from that range's
# start, as it would be without ranges (a failure then names the file's own
# row number).

# Ranges of about this many bytes; smaller files are read in one piece.
RANGE_BYTES = 16 << 20


class Ranges(NamedTuple):
  """A CSV or TSV file cut at newlines: its header line (with a BOM, if
  any) and [(start, end)) byte ranges of the rest."""
  header: bytes
  spans: List[Tuple[int, int]]


# With quotes=True, how far past a range's nominal end a newline outside
# quotes (by the count of quotes) is looked for before the range is cut at
# the next newline anyway (the reader then finds out, and reads on in one
# piece).
_QUOTED_LINE_SEARCH = 4 << 20


def _local_table_stat(path: str, fmt: str) -> Optional[os.stat_result]:
  """The os.stat of a local CSV or TSV file; None for another format, a
  remote path or a path that cannot be read."""
  if fmt not in ('csv', 'tsv') or '://' in path:
    return None
  try:
    return os.stat(path)
  except OSError:
    return None


def ranges_possible(path: str) -> bool:
  """Whether csv_ranges may cut the file into ranges (with the default
  range size), from its name and size alone: a local CSV or TSV file of
  at least two ranges."""
  stat = _local_table_stat(path, format_of(path))
  return stat is not None and stat.st_size >= 2 * RANGE_BYTES


def csv_ranges(path: str, fmt: str, range_bytes: Optional[int] = None,
               quotes: bool = False) -> Optional[Ranges]:
  """The file's ranges of about `range_bytes` (default RANGE_BYTES), or
  None when it is read in one piece: not a local CSV or TSV file, smaller
  than two ranges, or a header with a quote.

  With `quotes`, quotes are allowed (not in an odd number in the header)
  and each range ends at the first newline after its nominal end where the
  number of quotes since the range's start (itself such a place) is even:
  outside any quoted field in a file whose quotes open and close fields (a
  doubled quote counts twice). A quote inside an unquoted field breaks
  that rule, and so does a range cut after _QUOTED_LINE_SEARCH bytes
  without such a place, so the reader must check that each range ended
  outside a quoted field (see modalities/text/inputs.parse_csv_range)."""
  range_bytes = range_bytes or RANGE_BYTES
  stat = _local_table_stat(path, fmt)
  if stat is None:
    return None
  # Each pass of a run asks again; with quotes the whole file is read.
  found = _cut_ranges(path, range_bytes, quotes, _QUOTED_LINE_SEARCH,
                      stat.st_size, stat.st_mtime_ns)
  return found and Ranges(found.header, list(found.spans))


@functools.lru_cache(maxsize=16)
def _cut_ranges(path: str, range_bytes: int, quotes: bool, search: int,
                size: int, unused_mtime_ns: int) -> Optional[Ranges]:
  """csv_ranges for one state of the file (its size and modification
  time), with spans as a tuple (the cached value is shared)."""
  try:
    if size < 2 * range_bytes:
      return None
    spans = []
    with open(path, 'rb') as f:
      header = f.readline()
      if not header.endswith(b'\n'):
        return None
      if b'"' in header and (not quotes or header.count(b'"') % 2):
        return None
      start = f.tell()
      while start < size:
        if quotes:
          odd = f.read(range_bytes - 1).count(b'"') % 2
          line = f.readline()  # to the end of the line the range ends in
          odd ^= line.count(b'"') % 2
          searched = 0
          while odd and line and searched < search:
            line = f.readline()
            odd ^= line.count(b'"') % 2
            searched += len(line)
        else:
          f.seek(start + range_bytes - 1)
          f.readline()  # to the end of the line the range ends in
        end = min(f.tell(), size)
        spans.append((start, end))
        start = end
        f.seek(start)
  except OSError:
    return None
  return Ranges(header, tuple(spans))


class RangeRows(NamedTuple):
  """What parse_range found: [(good rows, bad rows)] with rows numbered
  from 0 in the range, and how many records the range holds (good and
  bad); or quoted=True and nothing else when the range holds a quote."""
  batches: List[Tuple[RowBatch, List[Tuple[int, str]]]]
  records: int
  quoted: bool = False


def parse_range(path: str, fmt: str, columns: Columns, unit: str,
                header: bytes, start: int, end: int,
                batch_rows: int = 65536) -> RangeRows:
  """Reads bytes [start, end) of a CSV or TSV file (see csv_ranges): what
  a worker process runs."""
  with open(path, 'rb') as f:
    f.seek(start)
    data = f.read(end - start)
  if b'"' in data:
    return RangeRows([], 0, quoted=True)
  # The range in one block: the block size is then not sampled from the
  # file through Beam, and rows are batched the same whatever the block.
  block = min(max(len(header) + len(data), _MIN_BLOCK_BYTES),
              _LARGEST_BLOCK_BYTES)
  batches = list(_iter_csv_file(pa.BufferReader(header + data), path, fmt,
                                columns, unit, batch_rows, block=block))
  records = sum(len(rows.row) + len(bad) for rows, bad in batches)
  return RangeRows(batches, records)


class _Prefixed(io.RawIOBase):
  """The header line, then the file from byte `start` on, as one stream."""

  def __init__(self, f, header: bytes, start: int):
    super().__init__()
    self._f, self._head = f, header
    f.seek(start)

  def readable(self):
    return True

  def readinto(self, buffer):
    if self._head:
      n = min(len(buffer), len(self._head))
      buffer[:n] = self._head[:n]
      self._head = self._head[n:]
      return n
    data = self._f.read(len(buffer))
    buffer[:len(data)] = data
    return len(data)


def iter_csv_from(path: str, fmt: str, columns: Columns, unit: str,
                  header: bytes, start: int, first_row: int,
                  batch_rows: int = 65536,
                  reads: Optional[files.ReadCount] = None):
  """iter_batches over the file from byte `start` (a range's start, where
  data row `first_row` begins) to its end, in one piece."""
  with _open(path, reads) as f:
    stream = io.BufferedReader(_Prefixed(f, header, start), 1 << 20)
    yield from _iter_csv_file(stream, path, fmt, columns, unit, batch_rows,
                              first_row)


def shift_rows(rows: RowBatch, bad: List[Tuple[int, str]], offset: int
               ) -> Tuple[RowBatch, List[Tuple[int, str]]]:
  """A range's rows numbered in the whole file (row -1, not known, stays)."""
  if not offset:
    return rows, bad
  return (dataclasses.replace(rows, row=rows.row + offset),
          [(r + offset if r >= 0 else r, reason) for r, reason in bad])


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


def _json_blocks(f, batch_rows: int) -> Iterator[Tuple[bytes, int, bool]]:
  """Cuts a JSON-lines stream into blocks of batch_rows non-blank lines.

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
      if chunk.startswith(_BOM):
        chunk = chunk[len(_BOM):]
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


def _json_fast(block: bytes, count: int, objects: bool) -> Optional[pa.Table]:
  """The block via pyarrow, or None when the per-line path must decide.

  Only blocks whose lines all start with '{' go to pyarrow: pyarrow 25
  crashes on a block whose first line is `null` and reads a `null` line as
  a row of nulls.
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
      cells[name].append(_json_text(record.get(name)))
  arrays = {name: pa.array(values, pa.string())
            for name, values in cells.items()}
  return arrays, np.array(good, np.int64), bad


def _iter_jsonl(path, columns, unit, batch_rows, reads=None):
  needed = _needed(columns)
  next_row = 0
  with _open(path, reads) as f:
    for block, count, objects in _json_blocks(f, batch_rows):
      rows = np.arange(next_row, next_row + count, dtype=np.int64)
      next_row += count
      table = _json_fast(block, count, objects)
      if table is not None:
        arrays = {name: (table.column(name) if name in table.column_names
                         else None) for name in needed}
        yield _convert(arrays, rows, columns, unit)
      else:
        arrays, good, bad = _json_slow(block, rows, needed)
        yield _convert(arrays, good, columns, unit, bad)


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
  _check_format(fmt)
  if timestamp_unit not in _UNIT_NS:
    raise ValueError(f'timestamp unit {timestamp_unit!r} is not one of '
                     f'{", ".join(_UNIT_NS)}')
  if batch_rows < 1:
    raise ValueError(f'batch_rows must be at least 1, got {batch_rows}')
  if fmt in ('csv', 'tsv'):
    return _iter_csv(path, fmt, columns, timestamp_unit, batch_rows, reads)
  if fmt == 'jsonl':
    return _iter_jsonl(path, columns, timestamp_unit, batch_rows, reads)
  return _iter_parquet(path, columns, timestamp_unit, batch_rows, reads)
