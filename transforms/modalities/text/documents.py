"""Checking a batch of the text modality's documents.

Part of the text reader (`inputs.py` finds the inputs, `parse.py` reads
them): one batch of text and label cells, from any input format, split into
good documents (`TextBatch`) and dead letters, each with a stable id and a
short reason, with vectorized pyarrow code.

Decisions:

- The text is kept as written (not stripped; CRLF kept); it is "empty" when
  missing, null, '' or only whitespace (`pyarrow.compute.utf8_is_space`, for
  every format). The label is stripped; missing, null or blank labels are
  dead letters. 'NA', 'null' written as text are kept as text.
- A document with several problems gets the first of: invalid UTF-8 in the
  text (policy 'dead_letter'), empty text, invalid UTF-8 in the label,
  missing label.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, List, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.core import label_text
from transforms.sources import table_cells

EMPTY_TEXT = 'empty text'
MISSING_LABEL = 'missing label'
INVALID_TEXT = 'invalid UTF-8 in the text'
# A longer document is a dead letter: tokenized in a batch, a text of
# millions of tokens overflows TensorFlow's 32-bit ragged indices (a 50 MB
# text crashed the whole run), and no model reads that far.
MAX_TEXT_BYTES = 1 << 20
TOO_LONG = f'text longer than {MAX_TEXT_BYTES >> 20} MiB'
INVALID_LABEL = 'invalid UTF-8 in the label'
NOT_AN_OBJECT = 'line is not a JSON object'


@dataclasses.dataclass
class TextBatch:
  """Good documents of one batch (equal lengths).

  Attributes:
    ids: Stable ids: '<source>:<row>' for table rows (row: 0-based data-row
      index), the path relative to the root for folder documents.
    text: The document texts, as written (None in batches read for their
      keys only: text/ranges.read_range without texts_needed).
    label: The labels, stripped.
  """
  ids: List[str]
  text: List[str]
  label: List[str]

  def __len__(self):
    return len(self.ids)


# Rows found bad before a batch is checked: [(row, reason)].
BadRows = List[Tuple[int, str]]


def _decode(array: pa.Array, replace: bool) -> Tuple[pa.Array, np.ndarray]:
  """A text column as strings, and where it held invalid UTF-8.

  Args:
    array: Binary (CSV, folders, per-line JSON), string, integer, boolean
      (JSON) or null values.
    replace: Whether invalid cells are decoded with U+FFFD (else null).

  Returns:
    (string array, boolean mask of the cells with invalid UTF-8).
  """
  n = len(array)
  no_bad = np.zeros(n, bool)
  t = array.type
  if pa.types.is_string(t) or pa.types.is_large_string(t):
    return array, no_bad
  if pa.types.is_null(t):
    return pa.nulls(n, pa.string()), no_bad
  if not (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
    return pc.cast(array, pa.string()), no_bad
  try:
    return pc.cast(array, pa.string()), no_bad
  except pa.ArrowInvalid:
    pass
  strings, bad = table_cells.decode_cells(array, replace)
  mask = no_bad.copy()
  mask[bad] = True
  return strings, mask


def _as_list(array: pa.Array) -> List[str]:
  return array.to_numpy(zero_copy_only=False).tolist()


def _labels_as_list(array: pa.Array) -> List[str]:
  """A string array without nulls as a list (one str object per label)."""
  encoded = pc.dictionary_encode(array)
  words = np.asarray(label_text.canonical_words(
      encoded.dictionary.to_numpy(zero_copy_only=False)), dtype=object)
  indices = encoded.indices.to_numpy(zero_copy_only=False)
  return words[indices].tolist()


def check_batch(text, label, rows: np.ndarray,
                make_ids: Callable[[List[int]], List[str]], replace: bool,
                earlier_bad: BadRows = ()
                ) -> Tuple[TextBatch, List[Tuple[str, str]]]:
  """Checks one batch and splits it into good and bad documents.

  Args:
    text: The text cells (see _decode for the types).
    label: The label cells.
    rows: int64 row index (or position) of each cell.
    make_ids: Turns a list of rows into ids.
    replace: Whether invalid UTF-8 in the text is replaced with U+FFFD
      (else the document is a dead letter).
    earlier_bad: [(row, reason)] found before (not in the arrays).

  Returns:
    (TextBatch of the good documents, [(id, reason)] sorted by row).
  """
  mask = table_cells.as_mask
  rows = np.asarray(rows, np.int64)
  n = len(rows)
  text, text_invalid = _decode(table_cells.as_array(text), replace)
  label, label_invalid = _decode(table_cells.as_array(label), False)
  empty = (mask(pc.is_null(text)) | mask(pc.equal(pc.utf8_length(text), 0))
           | mask(pc.utf8_is_space(text)))
  label = pc.utf8_trim_whitespace(label)
  label_missing = mask(pc.is_null(label)) | mask(pc.equal(label, ''))
  too_long = mask(pc.greater(pc.binary_length(text), MAX_TEXT_BYTES))
  checks = [(empty, EMPTY_TEXT), (too_long, TOO_LONG),
            (label_invalid, INVALID_LABEL), (label_missing, MISSING_LABEL)]
  if not replace:
    checks.insert(0, (text_invalid, INVALID_TEXT))
  taken = np.zeros(n, bool)
  bad = list(earlier_bad)
  for mask, reason in checks:
    new = mask & ~taken
    if new.any():
      bad.extend((row, reason) for row in rows[new].tolist())
      taken |= new
  if taken.any():
    keep = pa.array(~taken)
    text, label, rows = text.filter(keep), label.filter(keep), rows[~taken]
  bad.sort(key=lambda item: item[0])
  bad_ids = make_ids([row for row, _ in bad])
  batch = TextBatch(ids=make_ids(rows.tolist()), text=_as_list(text),
                    label=_labels_as_list(label))
  return batch, [(i, reason) for i, (_, reason) in zip(bad_ids, bad)]


def table_ids(source: str) -> Callable[[List[int]], List[str]]:
  """The make_ids of check_batch for the rows of a table file: row 7 of
  source 'docs.csv' is 'docs.csv:7'."""
  return lambda rows: [f'{source}:{row}' for row in rows]
