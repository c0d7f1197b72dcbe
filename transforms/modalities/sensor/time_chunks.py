"""The rows of the entities not windowed while reading (not in one file
in strictly increasing time): grouped by (entity, time chunk), sorted,
made one row per observation, cut at gaps and, in window mode, windowed
inside each chunk, with the windows that cross a chunk boundary put
together from their fragments (see windows.py for the arithmetic).
"""

import apache_beam as beam
import numpy as np

from transforms.modalities.sensor import example_batches
from transforms.modalities.sensor import windows
from transforms.core.dead_letters import dead_letter


def _key_by_chunk(batch, entity_stats, chunk_rows):
  """Splits a row batch into pieces keyed by (entity, time chunk).

  A piece holds only what windowing needs, compactly (the runner may keep
  every piece in memory while grouping): times, row numbers, float32
  values, split codes and label codes; the entity is the key, and the
  source file and label names are stored once per piece.
  """
  label_names, label_codes = np.unique(batch['label'].astype(str),
                                       return_inverse=True)
  code_type = np.uint16 if len(label_names) < 1 << 16 else np.int64
  for entity, idx in windows.group_rows(batch['entity']):
    count, t_min, t_max = entity_stats[entity][:3]
    chunk = windows.chunk_index(batch['time'][idx], t_min, t_max, count,
                                chunk_rows)
    for c in np.unique(chunk).tolist():
      part = idx[chunk == c]
      yield ((entity, int(c)), {
          'source': batch['source'], 'label_names': label_names.tolist(),
          'row': batch['row'][part], 'time': batch['time'][part],
          'values': batch['values'][part], 'split': batch['split'][part],
          'label': label_codes[part].astype(code_type)})


class SortChunks(beam.DoFn):
  """(entity, chunk) pieces -> the chunk's observations: its rows sorted
  (by time, then input file and row), each time once.

  Rows at one time that are all equal are one observation (the first
  kept, the others counted as duplicates); rows at one time that differ
  are all dead-lettered, each naming the others (tagged 'dead'). Main
  output: ((entity, chunk), ({'time', 'values', 'label' (names), 'split'
  and in row mode 'id' (source:row)}, duplicates dropped, conflicting
  rows)); tagged 'intervals': (entity, (chunk, first time, last time,
  interval sketch)) and 'counts': ((split, 'duplicates' | 'conflicts'),
  rows)."""

  def __init__(self, sc, split_names):
    super().__init__()
    self._sc, self._names = sc, split_names

  def process(self, item):
    (entity, chunk), pieces = item
    pieces = list(pieces)
    cat = {k: np.concatenate([p[k] for p in pieces])
           for k in ('row', 'time', 'values', 'split')}
    cat['label'] = np.concatenate([np.asarray(p['label_names'])[p['label']]
                                   for p in pieces]).astype(str)
    sources = np.concatenate([np.full(len(p['row']), p['source'], object)
                              for p in pieces]).astype(str)
    source_names, source_codes = np.unique(sources, return_inverse=True)
    order = windows.sort_rows(cat['time'], source_codes, cat['row'])
    cat = {k: v[order] for k, v in cat.items()}
    source_codes = source_codes[order]
    kept, conflicting, duplicates, runs = windows.duplicate_runs(
        cat['time'], cat['values'], cat['label'],
        source_codes if self._sc.same_time == 'file_order' else None)
    ids = None
    if runs or not self._sc.windowed:
      ids = np.char.add(np.char.add(source_names[source_codes], ':'),
                        cat['row'].astype(str))
    for lo, hi in runs:
      yield from self._conflicts(entity, ids[lo:hi], cat['split'][lo])
    lost = ~kept
    if lost.any():
      dup = lost & ~conflicting
      for code, n in zip(*np.unique(cat['split'][dup], return_counts=True)):
        yield beam.pvalue.TaggedOutput('counts', (
            (self._names[code], 'duplicates'), int(n)))
      for code, n in zip(*np.unique(cat['split'][conflicting],
                                    return_counts=True)):
        yield beam.pvalue.TaggedOutput('counts', (
            (self._names[code], 'conflicts'), int(n)))
      cat = {k: v[kept] for k, v in cat.items()}
      ids = None if ids is None else ids[kept]
    time = cat['time']
    steps = np.diff(time)
    steps = steps[steps > 0]  # times repeat with --same_time file_order
    yield beam.pvalue.TaggedOutput('intervals', (entity, (
        chunk, int(time[0]) if len(time) else None,
        int(time[-1]) if len(time) else None,
        windows.interval_sketch(steps) if len(steps) else None)))
    if ids is not None:
      cat['id'] = ids
    yield (entity, chunk), (cat, duplicates, int(conflicting.sum()))

  def _conflicts(self, entity, ids, split_code):
    ids = ids.tolist()
    series = (f'of entity {entity!r}' if self._sc.entity_column else
              '(without --entity_column all rows are one series)')
    for i, row_id in enumerate(ids):
      others = ', '.join(ids[:i] + ids[i + 1:])
      yield beam.pvalue.TaggedOutput('dead', dead_letter(
          row_id, 'time', f'conflicting rows at the same time {series}: '
          f'its values or label differ from {others}',
          self._names[split_code]))


def _entity_intervals(item, setting):
  """(entity, its chunks' (chunk, first, last, sketch)) -> (entity,
  (median sampling interval, max gap)): the intervals between consecutive
  observations in time order, inside chunks and across their bounds."""
  entity, parts = item
  sketch, last = None, None
  for _, first, end, part in sorted(parts, key=lambda x: x[0]):
    if first is None:
      continue
    sketch = windows.merge_sketches(sketch, part)
    if last is not None:
      sketch = windows.merge_sketches(sketch, windows.interval_sketch(
          np.array([first - last])))
    last = end
  median = windows.sketch_median(sketch)
  return entity, (median, windows.entity_max_gap(setting, median))


def _chunk_gaps(item, intervals):
  """A chunk's observations -> (entity, (chunk, observations, first time,
  last time, [(local index, time before, time after)] of its gaps,
  duplicates, conflicting rows, its last observation (time, values,
  label, split) or None))."""
  (entity, chunk), (c, duplicates, conflicts) = item
  time = c['time']
  cuts = windows.gap_positions(time, intervals[entity][1])
  gaps = [(int(i), int(time[i - 1]), int(time[i])) for i in cuts.tolist()]
  last = ((int(time[-1]),) + tuple(c[k][-1] for k in ('values', 'label',
                                                     'split'))
          if len(time) else None)
  yield entity, (chunk, len(time), int(time[0]) if len(time) else None,
                 int(time[-1]) if len(time) else None, gaps, duplicates,
                 conflicts, last)


def _entity_plan(item, intervals, sc):
  """(entity, its chunks' _chunk_gaps) -> (entity, {'offsets': {chunk:
  rows of the series before it}, 'bounds': segment starts and the end, as
  global indices, 'lead': {chunk: (its first segment's first observation's
  time, the observation before the chunk in that segment or None)}}) and,
  tagged 'shapes', (entity, its series shape).

  The series' rows are the observations, or with --resample the grid rows
  (grid_count of each segment's stretch in the chunk).
  """
  entity, summaries = item
  summaries = sorted(summaries, key=lambda x: x[0])
  median, max_gap = intervals[entity]
  period = sc.resample
  offsets, lead, bounds, sizes = {}, {}, [0], []
  total = observations = 0
  anchor = previous = None  # the segment's first and last observation
  first_ns = None
  for chunk, n, first, last, gaps, _, _, last_row in summaries:
    offsets[chunk] = total
    if not n:
      continue
    first_ns = first if first_ns is None else first_ns
    if previous is None or (max_gap is not None and
                            first - previous[0] > max_gap):
      if previous is not None:
        bounds.append(total)
        sizes.append(first - previous[0])
      anchor, previous = first, None
    lead[chunk] = (anchor, previous)
    # The chunk's stretches between its gaps, as (rows, first and last
    # time).
    starts = [0] + [g[0] for g in gaps]
    ends = [g[0] for g in gaps] + [n]
    firsts = [first] + [g[2] for g in gaps]
    lasts = [g[1] for g in gaps] + [last]
    for k in range(len(starts)):
      if k:  # after a gap inside the chunk
        bounds.append(total)
        sizes.append(firsts[k] - lasts[k - 1])
        anchor, previous = firsts[k], None
      if period:
        total += windows.grid_count(lasts[k], anchor, period,
                                    None if previous is None else previous[0])
      else:
        total += ends[k] - starts[k]
      previous = (lasts[k],)
    observations += n
    previous = last_row
  bounds.append(total)
  segment_rows = np.diff(bounds)
  shape = {
      'observations': observations, 'gaps': len(sizes),
      'longest_gap_ns': max(sizes, default=0),
      'segments': len(sizes) + 1 if observations else 0,
      'longest_segment': int(segment_rows.max()) if observations else 0,
      'duplicates_dropped': sum(x[5] for x in summaries),
      'conflicting_rows': sum(x[6] for x in summaries),
      'in_segments': sum(
          windows.window_count(int(r), sc.window_length, sc.window_stride)
          for r in segment_rows.tolist()) if sc.windowed else 0,
      'rows_resampled': total if period else 0,
      'median_interval_ns': median, 'max_gap_ns': max_gap,
      'first_ns': first_ns, 'last_ns': previous[0] if previous else None}
  yield beam.pvalue.TaggedOutput('shapes', (entity, shape))
  yield entity, {'offsets': offsets, 'bounds': np.asarray(bounds, np.int64),
                 'lead': lead}


class WindowChunks(beam.DoFn):
  """A chunk's observations -> window batches of the segments it holds,
  plus fragments of the windows that reach into other chunks (tagged
  'fragments', keyed (entity, global start)), the rows windowed per split
  ('rows') and windows too long in time and grid rows filled ('shapes').
  With --resample the windows are made of the chunk's grid rows."""

  def __init__(self, sc, split_names):
    super().__init__()
    self._sc, self._names = sc, split_names

  def process(self, item, plans, intervals):
    (entity, chunk), (c, _, _) = item
    sc = self._sc
    plan = plans[entity]
    yield beam.pvalue.TaggedOutput('rows', (len(c['time']), np.bincount(
        c['split'], minlength=len(self._names))))
    if not len(c['time']):  # every row of the chunk conflicted
      return
    series = (c['time'], c['values'], c['label'], c['split'])
    if sc.resample:
      series, filled = _chunk_grid(series, plan['lead'][chunk],
                                   intervals[entity][1], sc)
      if filled:
        yield beam.pvalue.TaggedOutput('shapes', (entity,
                                                  {'rows_filled': filled}))
    time, values, label, split = series
    offset, n = plan['offsets'][chunk], len(time)
    starts, fragments = windows.segment_windows(
        plan['bounds'], offset, offset + n, sc.window_length,
        sc.window_stride)
    for start, position, lo, hi in fragments:
      yield beam.pvalue.TaggedOutput('fragments', ((entity, start), (
          position, time[lo:hi], values[lo:hi], label[lo:hi],
          split[lo:hi])))
    if len(starts):
      bound = example_batches.span_bound(sc, *intervals[entity])
      batch, lost = example_batches.window_batch(
          entity, starts, starts - offset, time, values, label, split, sc,
          bound=bound)
      if lost:
        yield beam.pvalue.TaggedOutput('shapes', (entity,
                                                  {'too_long': lost}))
      if batch is not None:
        yield batch


def _chunk_grid(series, lead, max_gap, sc):
  """A chunk's observations (time, values, label, split) -> its grid rows
  (grid_points of each stretch between gaps) and the grid rows filled."""
  time = series[0]
  cuts = [0] + windows.gap_positions(time, max_gap).tolist() + [len(time)]
  anchor, previous = lead
  cutoffs = sc.time_cutoffs if sc.split_by == 'time' else None
  parts, filled = [], 0
  for k, (lo, hi) in enumerate(zip(cuts, cuts[1:])):
    if k:
      anchor, previous = int(time[lo]), None
    piece = tuple(a[lo:hi] for a in series)
    found = windows.grid_points(*piece, sc.resample, anchor, previous, cutoffs)
    previous = tuple(a[-1] for a in piece)
    if found is not None:
      parts.append(found[:4])
      filled += found[4]
  if not parts:
    return tuple(a[:0] for a in series), filled
  return tuple(np.concatenate(p) for p in zip(*parts)), filled


def _assemble(item, intervals, sc):
  (entity, start), pieces = item
  whole = windows.assemble(list(pieces), sc.window_length)
  # An incomplete window (None) is left out; the windows-formed check of
  # the quality gate reports it.
  if whole is None:
    return
  time, values, label, split = whole
  bound = example_batches.span_bound(sc, *intervals[entity])
  batch, lost = example_batches.window_batch(
      entity, np.array([start]), np.array([0]), time, values, label, split,
      sc, bound=bound)
  if lost:
    yield beam.pvalue.TaggedOutput('shapes', (entity, {'too_long': lost}))
  if batch is not None:
    yield batch


def chunked_series(sc, names, entity_dict, unordered, tag=''):
  """The rows of entities not streamed -> grouped by (entity, time chunk),
  sorted, one row per observation, cut at gaps and windowed.

  Args:
    sc: The SensorConfig.
    names: The split names.
    entity_dict: The statistics pass's EntityStats per entity (AsDict).
    unordered: RowExamplesFn's 'unordered' row batches.
    tag: Appended to the step names (to wire it twice in one pipeline).

  Returns:
    {'chunks': each chunk's observations (SortChunks' main output),
     'dead', 'counts' (SortChunks'), 'shapes': [PCollections of (entity,
     series shape part)], and in window mode 'windows' (inside chunks),
     'crossing' (assembled from fragments) and 'rows' (windowed per
     split)}.
  """
  sorted_chunks = (unordered
                   | f'KeyByEntityChunk{tag}' >> beam.FlatMap(
                       _key_by_chunk, entity_dict, sc.chunk_rows)
                   | f'GroupChunks{tag}' >> beam.GroupByKey()
                   | f'SortChunks{tag}' >> beam.ParDo(
                       SortChunks(sc, names)).with_outputs(
                           'intervals', 'dead', 'counts', main='chunks'))
  # The sampling interval (and so the max gap) of these entities comes
  # from their sorted observations; then each chunk's gaps, then where
  # each chunk starts in its entity's observations and its segments.
  intervals = beam.pvalue.AsDict(
      sorted_chunks.intervals
      | f'IntervalsOfEntity{tag}' >> beam.GroupByKey()
      | f'EntityIntervals{tag}' >> beam.Map(_entity_intervals, sc.max_gap))
  plans = (sorted_chunks.chunks
           | f'ChunkGaps{tag}' >> beam.FlatMap(_chunk_gaps, intervals)
           | f'ChunksOfEntity{tag}' >> beam.GroupByKey()
           | f'PlanEntities{tag}' >> beam.FlatMap(
               _entity_plan, intervals, sc).with_outputs(
                   'shapes', main='plans'))
  out = {'chunks': sorted_chunks.chunks, 'dead': sorted_chunks.dead,
         'counts': sorted_chunks.counts, 'shapes': [plans.shapes]}
  if not sc.windowed:
    return out
  windowed = (sorted_chunks.chunks
              | f'WindowChunks{tag}' >> beam.ParDo(
                  WindowChunks(sc, names), beam.pvalue.AsDict(plans.plans),
                  intervals).with_outputs('fragments', 'rows', 'shapes',
                                          main='windows'))
  assembled = (windowed.fragments
               | f'GroupFragments{tag}' >> beam.GroupByKey()
               | f'AssembleWindows{tag}' >> beam.FlatMap(
                   _assemble, intervals, sc).with_outputs(
                       'shapes', main='windows'))
  out.update(windows=windowed.windows, crossing=assembled.windows,
             rows=windowed.rows)
  out['shapes'] += [windowed.shapes, assembled.shapes]
  return out
