"""What the sensor reader's worker processes run: a byte range of a large
CSV or TSV file parsed (sources/tables.parse_range) and the split of each
of its rows, so that neither the parse nor the split hashes (a SHA-256 per
row) run on the runner's thread.

`row_splits` is the one definition of a row's split; the reader calls it
in-line for files read in one piece.
"""

from typing import List, NamedTuple, Optional, Tuple

import numpy as np

from transforms.core import splits as split_lib
from transforms.modalities.sensor import windows
from transforms.sources import tables


class SplitRule(NamedTuple):
  """How a row's split is found (from the run's config)."""
  split_by: str  # 'time', 'entity' or 'hash'
  ratios: Tuple[Tuple[str, float], ...]
  names: Tuple[str, ...]
  time_cutoffs: Tuple[int, ...]


def row_splits(rows: tables.RowBatch, rule: SplitRule) -> np.ndarray:
  """The split index (int8) of each row."""
  if rule.split_by == 'time':
    return windows.time_splits(rows.time, rule.time_cutoffs)
  if rule.split_by == 'entity':
    return split_lib.hash_splits(rows.entity, rule.ratios, rule.names)
  # A row is an observation: its entity at its time. Keyed by that (not
  # by its place in the file), a row the input holds twice is one
  # observation in one split, never in train and test at once.
  keys = [f'{e}\x1f{t}' for e, t in zip(rows.entity.tolist(),
                                         rows.time.tolist())]
  return split_lib.hash_splits(keys, rule.ratios, rule.names)


def read_range(path: str, fmt: str, columns: tables.Columns, unit: str,
               header: bytes, start: int, end: int, rule: SplitRule
               ) -> Tuple[tables.RangeRows, Optional[List[np.ndarray]]]:
  """A range's rows (tables.parse_range) and the splits of each batch's
  good rows (None when the range holds a quote)."""
  found = tables.parse_range(path, fmt, columns, unit, header, start, end)
  if found.quoted:
    return found, None
  return found, [row_splits(rows, rule) for rows, _ in found.batches]


def split_rule(cfg) -> SplitRule:
  """The run's SplitRule (picklable, for the worker processes)."""
  sc = cfg.settings
  return SplitRule(sc.split_by, tuple(tuple(r) for r in cfg.split_ratios),
                   tuple(cfg.split_names), tuple(sc.time_cutoffs))
