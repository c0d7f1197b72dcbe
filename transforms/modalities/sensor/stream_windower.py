"""`StreamWindower`: the windows of the entities that are in one input file
in strictly increasing time, made while the file is read (see windows.py
for how a series is cut into segments and windows).
"""

from typing import Dict

import numpy as np

from transforms.modalities.sensor import windows


class _Series:
  """What StreamWindower holds of one entity."""
  __slots__ = ('seen', 'start', 'held', 'last', 'segment', 'anchor', 'prev',
               'shape')

  def __init__(self):
    self.seen = 0  # rows of the series so far (grid rows when resampled)
    self.start = 0  # global start of the next window
    self.held = None  # (time, values, label, split) from `start`, or None
    self.last = None  # the last observation's time
    self.segment = 0  # global index where the current segment starts
    self.anchor = None  # the current segment's first observation's time
    self.prev = None  # its last observation (time, values, label, split)
    self.shape = dict(observations=0, gaps=0, longest_gap_ns=0, segments=1,
                      longest_segment=0, in_segments=0, rows_resampled=0,
                      rows_filled=0, first_ns=None, last_ns=None)


class StreamWindower:
  """Windows of entities whose observations arrive in time order (each
  time once).

  For an entity that is in one input file with its rows in strictly
  increasing time, the series is cut at its gaps (`max_gaps[entity]`),
  put on its grid with `period` (--resample, windows.grid_points) and windowed
  while the file is read: per entity only the rows of the next, not yet
  complete windows are held (fewer than `length` when stride <= length),
  never the entity's history. With length 0 only the shape of the series
  is followed.
  """

  def __init__(self, length: int, stride: int, max_gaps, period=None,
               cutoffs=None):
    self._length, self._stride = length, stride
    self._max_gaps = max_gaps  # entity -> ns or None
    self._period, self._cutoffs = period, cutoffs
    self._state: Dict[str, _Series] = {}

  def add(self, entity: str, time, values, label, split):
    """Adds the entity's next rows; returns the windows they complete as
    (global starts, local starts, time, values, label, split) over the
    returned arrays, or None."""
    state = self._state.get(entity)
    if state is None:
      state = self._state[entity] = _Series()
    if not len(time):
      return None
    shape = state.shape
    if state.anchor is None:
      state.anchor = shape['first_ns'] = int(time[0])
    shape['last_ns'] = int(time[-1])
    shape['observations'] += len(time)
    arrays = (time, values, label, split)
    cuts = windows.gap_positions(time, self._max_gaps.get(entity), state.last)
    done = []
    cut_set = set(cuts.tolist())
    edges = sorted(cut_set | {0, len(time)})
    for lo, hi in zip(edges, edges[1:]):
      if lo in cut_set:
        before = time[lo - 1] if lo else state.last
        self._new_segment(state, int(time[lo]) - int(before))
        state.anchor = int(time[lo])
      piece = tuple(a[lo:hi] for a in arrays)
      if self._period:
        piece = self._resampled(state, piece)
        if piece is None:
          continue
      out = self._window(state, piece)
      if out is not None:
        done.append(out)
    state.last = int(time[-1])
    if not done:
      return None
    if len(done) == 1:
      return done[0]
    return tuple(np.concatenate(parts) for parts in zip(*[
        _rebase(d, sum(len(x[2]) for x in done[:i]))
        for i, d in enumerate(done)]))

  def _resampled(self, state, piece):
    """A segment's next observations -> its grid rows up to the last of
    them (windows.grid_points), or None."""
    found = windows.grid_points(*piece, self._period, state.anchor,
                                state.prev, self._cutoffs)
    state.prev = tuple(a[-1] for a in piece)
    if found is None:
      return None
    state.shape['rows_resampled'] += len(found[0])
    state.shape['rows_filled'] += found[4]
    return found[:4]

  def _new_segment(self, state, gap):
    shape = state.shape
    shape['gaps'] += 1
    shape['segments'] += 1
    shape['longest_gap_ns'] = max(shape['longest_gap_ns'], int(gap))
    self._close_segment(state)
    state.start, state.held, state.segment = state.seen, None, state.seen
    state.prev = None

  def _close_segment(self, state):
    rows = state.seen - state.segment
    shape = state.shape
    shape['longest_segment'] = max(shape['longest_segment'], rows)
    if self._length:
      shape['in_segments'] += windows.window_count(rows, self._length,
                                                   self._stride)

  def _window(self, state, arrays):
    """Adds rows of one segment; the windows they complete, or None."""
    length, stride = self._length, self._stride
    seen, start, held = state.seen, state.start, state.held
    n = len(arrays[0])
    state.seen = seen + n
    if not length:
      return None
    if held is not None:
      arrays = tuple(np.concatenate([h, a]) for h, a in zip(held, arrays))
      first = start
    else:
      first = seen
    end = seen + n
    count = (end - length - start) // stride + 1 if end >= start + length \
        else 0
    next_start = start + count * stride
    state.start = next_start
    state.held = (tuple(a[next_start - first:] for a in arrays)
                  if next_start < end else None)
    if not count:
      return None
    global_starts = start + stride * np.arange(count, dtype=np.int64)
    return (global_starts, global_starts - first) + arrays

  def shapes(self):
    """Closes every entity's last segment: [(entity, shape dict)]."""
    out = []
    for entity, state in sorted(self._state.items()):
      self._close_segment(state)
      out.append((entity, state.shape))
    self._state.clear()
    return out


def _rebase(done, offset):
  """A window result's local starts shifted by `offset` rows (when results
  of several segments are joined)."""
  return (done[0], done[1] + offset) + tuple(done[2:])
