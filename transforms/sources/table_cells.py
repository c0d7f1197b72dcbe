"""The table reader's cells: text, numbers and dead-letter reasons.

Part of the table reader (`sources/tables.py`): one column of a batch (an
Arrow array, from any format) as text, as a channel's numbers or as the
stripped text of a label or entity, with vectorized numpy / pyarrow code,
and the reasons of the cells that cannot be used.

Decisions:

- Numbers in text cells: pyarrow's string -> float64 cast accepts 'nan',
  'inf', 'infinity' (any case, optional sign) but not surrounding whitespace
  or an empty string. The fast path is that cast; when it fails for a column
  of a batch, the cells are trimmed and classified with a regular expression
  (vectorized): empty, 'na', 'n/a', 'null', 'none' and the nan spellings are
  missing values; numbers are cast; anything else is a dead letter. Every
  missing or non-finite value (including +-inf) ends up as NaN.
- Text cells of the label and entity columns are stripped and put in
  Unicode NFC (label_text.canonical); 'NA', 'null' and
  the like are kept as text there (only numeric columns know missing words).
"""

from __future__ import annotations

import json
import re
from typing import List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.core import label_text

# Text cells that mean "no value" in a numeric column (compared lower-case,
# after trimming). The nan spellings are handled by _NUMBER.
_MISSING_WORDS = ('', 'na', 'n/a', 'null', 'none')
# What pyarrow's string -> float64 cast accepts (the same pattern runs in
# RE2 via pyarrow.compute and in Python's re).
_NUMBER = (r'(?i)^[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?'
           r'|nan(?:\([0-9a-z_]*\))?|inf|infinity)$')
NUMBER_RE = re.compile(_NUMBER)


def _show(value, limit: int = 60) -> str:
  """A cell for a dead-letter reason: quoted, and cut when long."""
  text = value if isinstance(value, str) else str(value)
  if len(text) > limit:
    text = text[:limit] + '...'
  return repr(text)


def is_missing_text(text: str) -> bool:
  """Whether a text cell of a numeric column means "no value" ('', 'NA',
  'null'...; not the nan spellings, which are numbers)."""
  return text.strip().lower() in _MISSING_WORDS


def is_numeric_type(t: pa.DataType) -> bool:
  """Whether an Arrow type holds numbers (integers, floats, decimals)."""
  return (pa.types.is_integer(t) or pa.types.is_floating(t)
          or pa.types.is_decimal(t))


# Each converter returns its result for all n rows plus the cells it
# rejects, as BadCells: (bad positions in the batch, their reasons).

BadCells = Tuple[np.ndarray, List[str]]
NO_BAD: BadCells = (np.zeros(0, np.int64), [])


def as_array(column) -> pa.Array:
  """A column as one Arrow array (a chunked array's chunks combined; one
  chunk is taken as it is)."""
  if isinstance(column, pa.ChunkedArray):
    if column.num_chunks == 1:
      return column.chunk(0)
    return column.combine_chunks()
  return column


def as_mask(array) -> np.ndarray:
  """A boolean pyarrow array as numpy, nulls as False."""
  return np.asarray(pc.fill_null(array, False).to_numpy(zero_copy_only=False),
                    dtype=bool)


def json_text(value) -> Optional[str]:
  """A value decoded by json.loads as the text of a cell."""
  if value is None or isinstance(value, str):
    return value
  if isinstance(value, bool):
    return 'true' if value else 'false'
  if isinstance(value, (int, float)):
    return repr(value)
  return json.dumps(value, ensure_ascii=False)


def decode_cells(array: pa.Array, replace: bool = False
                 ) -> Tuple[pa.Array, List[int]]:
  """A binary column holding invalid UTF-8, decoded cell by cell (rare:
  only this column of this batch): its strings, the invalid cells null or,
  with `replace`, decoded with U+FFFD; and the positions of those cells."""
  cells, bad = [], []
  for i, raw in enumerate(array.to_pylist()):
    if raw is None:
      cells.append(None)
      continue
    try:
      cells.append(raw.decode('utf-8'))
    except UnicodeDecodeError:
      bad.append(i)
      cells.append(raw.decode('utf-8', 'replace') if replace else None)
  return pa.array(cells, pa.string()), bad


def to_text(array: pa.Array, name: str) -> Tuple[pa.Array, BadCells]:
  """Any column as a string array; cells with invalid UTF-8 become null."""
  t = array.type
  if pa.types.is_string(t) or pa.types.is_large_string(t):
    return array, NO_BAD
  if pa.types.is_null(t):
    return pa.nulls(len(array), pa.string()), NO_BAD
  if pa.types.is_binary(t) or pa.types.is_large_binary(t):
    try:
      return pc.cast(array, pa.string()), NO_BAD
    except pa.ArrowInvalid:
      pass
    strings, bad = decode_cells(array)
    reason = f'column {name!r} holds invalid UTF-8'
    return strings, (np.array(bad, np.int64), [reason] * len(bad))
  if pa.types.is_dictionary(t):
    return to_text(array.dictionary_decode(), name)
  try:
    return pc.cast(array, pa.string()), NO_BAD
  except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
    cells = [json_text(v) for v in array.to_pylist()]
    return pa.array(cells, pa.string()), NO_BAD


def _finite(values: np.ndarray) -> np.ndarray:
  values = np.array(values, dtype=np.float64)
  values[~np.isfinite(values)] = np.nan
  return values


def _float_array(array: pa.Array) -> np.ndarray:
  return _finite(array.to_numpy(zero_copy_only=False))


def channel_values(array: pa.Array, name: str) -> Tuple[np.ndarray, BadCells]:
  """A channel column as float64 (NaN for missing) and its bad cells."""
  t = array.type
  if is_numeric_type(t):
    return _float_array(pc.cast(array, pa.float64())), NO_BAD
  text, utf8_bad = to_text(array, name)
  try:
    return _float_array(pc.cast(text, pa.float64())), utf8_bad
  except pa.ArrowInvalid:
    pass
  trimmed = pc.utf8_trim_whitespace(text)
  number = as_mask(pc.match_substring_regex(trimmed, _NUMBER))
  missing = as_mask(pc.is_in(pc.utf8_lower(trimmed),
                             value_set=pa.array(_MISSING_WORDS)))
  missing |= as_mask(pc.is_null(trimmed))
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
  return values, merge_bad(utf8_bad, (bad, reasons))


def bad_cells(mask: np.ndarray, template: str, cells: pa.Array) -> BadCells:
  """The cells of a batch that `mask` rejects, with their reasons.

  Args:
    mask: Boolean, one per cell: which are bad.
    template: The reason; a '{}' in it is filled with the cell (quoted,
      cut when long).
    cells: The cells shown in the reasons (unused without '{}').

  Returns:
    (positions, reasons) for the true positions of mask.
  """
  where = np.flatnonzero(mask)
  if not len(where):
    return NO_BAD
  if '{}' not in template:
    return where, [template] * len(where)
  shown = cells.take(pa.array(where)).to_pylist()
  return where, [template.format(_show(c)) for c in shown]


def merge_bad(first: BadCells, second: BadCells) -> BadCells:
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


def canonical_strings(array: pa.Array, name: str
                      ) -> Tuple[np.ndarray, np.ndarray, BadCells]:
  """A text column as an object array of stripped, NFC str ('' for
  missing): label_text.canonical of each cell.

  Returns:
    (values, missing mask, bad cells (invalid UTF-8)).
  """
  n = len(array)
  text, bad = to_text(array, name)
  trimmed = pc.utf8_trim_whitespace(text)
  missing = as_mask(pc.is_null(trimmed)) | as_mask(pc.equal(trimmed, ''))
  out = np.full(n, '', dtype=object)
  encoded = pc.dictionary_encode(trimmed)
  if len(encoded.dictionary):
    words = np.asarray(label_text.canonical_words(
        encoded.dictionary.to_numpy(zero_copy_only=False)), dtype=object)
    present = ~as_mask(pc.is_null(encoded.indices))
    indices = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
    out[present] = words[indices[present]]
  if len(bad[0]):
    missing[bad[0]] = False
  return out, missing, bad
