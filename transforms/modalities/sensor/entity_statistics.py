"""What the statistics pass learns about each entity (`EntityStats`): its
rows, time range, input file, order and sampling intervals, gathered per
file and merged over files; and what follows from them for the example
pass (whether it is windowed while reading, its max gap).
"""

from typing import Dict, NamedTuple, Optional

import numpy as np

from transforms.modalities.sensor import windows


class EntityStats(NamedTuple):
  """What the statistics pass learns about one entity."""
  rows: int
  first: int  # ns
  last: int  # ns
  source: Optional[str]  # its only input file; None when in several
  ordered: bool  # its rows are in time order in that file
  # The positive intervals between consecutive rows in file order
  # (windows.interval_sketch; None: none).
  intervals: Optional[tuple] = None
  repeats: int = 0  # consecutive rows in file order at the same time
  out_of_order: int = 0  # rows earlier than the row before them


class FileEntities:
  """What the statistics pass learns of each entity in one file, batch by
  batch: its rows, time range and the intervals between its consecutive
  rows in the file's order (the positive ones give the sampling interval;
  0 is a repeated time, a negative one a row out of order).

  The positive intervals wait in arrays and are counted
  (windows.interval_sketch) once _PENDING_INTERVALS of them wait in all,
  or at the file's end: counting each batch's few hundred per entity cost
  more than the rest of the pass."""

  def __init__(self):
    # entity -> [rows, first, last, previous, repeats, back, pending
    # arrays, sketch]
    self._found: Dict[str, list] = {}
    self._waiting = 0

  def add(self, entity, times):
    found = self._found.get(entity)
    if found is None:
      found = self._found[entity] = [0, None, None, None, 0, 0, [], None]
    steps = np.diff(times)
    if found[3] is not None:
      steps = np.concatenate([[times[0] - found[3]], steps])
    positive = steps[steps > 0]
    back = int(np.count_nonzero(steps < 0))
    low, high = int(times.min()), int(times.max())
    found[0] += len(times)
    found[1] = low if found[1] is None else min(found[1], low)
    found[2] = high if found[2] is None else max(found[2], high)
    found[3] = int(times[-1])
    found[4] += len(steps) - len(positive) - back
    found[5] += back
    if len(positive):
      found[6].append(positive)
      self._waiting += len(positive)
      if self._waiting >= _PENDING_INTERVALS:
        self._count()

  def _count(self):
    for found in self._found.values():
      if found[6]:
        found[7] = windows.merge_sketches(found[7], windows.interval_sketch(
            np.concatenate(found[6])))
        found[6] = []
    self._waiting = 0

  def stats(self, source):
    """[(entity, EntityStats)] of the file."""
    self._count()
    return [(entity, EntityStats(rows, first, last, source, not back,
                                 sketch, repeats, back))
            for entity, (rows, first, last, _, repeats, back, _, sketch)
            in self._found.items()]


# Intervals that wait to be counted, over a file's entities (8 bytes each).
_PENDING_INTERVALS = 1 << 18


def streamable(stats) -> bool:
  """Windowed while reading: in one file, in strictly increasing time."""
  stats = EntityStats(*stats)
  return stats.source is not None and stats.ordered and not stats.repeats


class MaxGaps:
  """entity -> its max gap (ns; None: never cut), from --max_gap and the
  statistics pass's intervals, worked out once per entity."""

  def __init__(self, setting, entity_stats):
    self._setting, self._stats = setting, entity_stats
    self._known, self._medians = {}, {}

  def get(self, entity):
    if entity not in self._known:
      self._known[entity] = windows.entity_max_gap(self._setting, self.median(
          entity))
    return self._known[entity]

  def median(self, entity):
    if entity not in self._medians:
      self._medians[entity] = windows.sketch_median(
          EntityStats(*self._stats[entity]).intervals)
    return self._medians[entity]


def merge_ranges(values):
  """The EntityStats of one entity from several files as one."""
  merged = None
  for v in values:
    if merged is None:
      merged = EntityStats(*v)
      continue
    v = EntityStats(*v)
    same = merged.source is not None and merged.source == v.source
    merged = EntityStats(
        merged.rows + v.rows, min(merged.first, v.first),
        max(merged.last, v.last), merged.source if same else None,
        merged.ordered and v.ordered,
        windows.merge_sketches(merged.intervals, v.intervals),
        merged.repeats + v.repeats, merged.out_of_order + v.out_of_order)
  return merged
