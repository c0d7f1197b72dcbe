"""The table reader's rows: the needed columns of one batch converted.

Part of the table reader (`sources/tables.py`): `RowBatch`, the good rows
of a batch, and the conversion that splits a batch's columns (from any
format) into good rows and dead letters (cells: `table_cells`,
timestamps: `table_timestamps`).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa

from transforms.sources import table_cells
from transforms.sources import table_columns
from transforms.sources import table_timestamps


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


def empty_batch(n_channels: int) -> RowBatch:
  """A RowBatch of no rows (for a batch that holds only bad rows)."""
  return RowBatch(row=np.zeros(0, np.int64), time=np.zeros(0, np.int64),
                  entity=np.zeros(0, object), label=np.zeros(0, object),
                  values=np.zeros((0, n_channels), np.float64))


def convert(arrays: Dict[str, Optional[pa.Array]], rows: np.ndarray,
            columns: table_columns.Columns, unit: str,
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
  merge_bad = table_cells.merge_bad

  def get(name):
    array = arrays.get(name)
    if array is None:
      return pa.nulls(n, pa.string())
    return table_cells.as_array(array)

  time, bad = table_timestamps.column_to_ns(get(columns.timestamp),
                                            columns.timestamp, unit)
  if columns.entity is None:
    entity = np.full(n, '', dtype=object)
  else:
    entity, _, entity_bad = table_cells.canonical_strings(
        get(columns.entity), columns.entity)
    bad = merge_bad(bad, entity_bad)
  label, label_missing, label_bad = table_cells.canonical_strings(
      get(columns.label), columns.label)
  bad = merge_bad(bad, label_bad)
  bad = merge_bad(bad, table_cells.bad_cells(label_missing, 'missing label',
                                             None))
  values = np.empty((n, len(columns.channels)), np.float64)
  for j, name in enumerate(columns.channels):
    values[:, j], channel_bad = table_cells.channel_values(get(name), name)
    bad = merge_bad(bad, channel_bad)
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
