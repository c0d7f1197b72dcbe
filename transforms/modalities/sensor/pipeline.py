"""Assembles the sensor preprocessing pipeline (time series and table rows).

The input files are read twice, so nothing waits in memory for the
full-pass statistics:

    statistics pass:  RowStatisticsFn --(bad rows)--> dead letter
        -> per-entity row counts and time range, row counts per split,
           label names, class counts (one-row-per-example mode)
        -> training rows, in blocks -> tf.Transform AnalyzeDataset
           -> WriteTransformFn; exact float64 channel statistics
    example pass:     RowExamplesFn (good rows only)
        rows:    -> examples
        windows: entities in one file in time order: windowed while the
                 file is read; the others: key by (entity, time chunk)
                 -> GroupByKey -> sort -> windows inside each chunk;
                 fragments of windows that cross a chunk boundary
                 -> GroupByKey -> assemble
        -> exported transform (normalize, impute, bucketize) per batch
        -> [rebalance] -> tf.train.Example, grouped by shuffle bucket
        -> GroupByKey -> per split: WriteSplit, fingerprint
        (transforms/core/batches.py)
    FinalizeDataset (quality gate, publish, manifest last)

Elements are NumPy batches (a block of rows, a chunk's windows), never one
Python object per row; the only per-record elements are the serialized
records on their way to the shuffle and the writer. See transforms/modalities/sensor/windows.py
for how windows are cut without holding an entity's whole history.
"""

import functools
import glob
import posixpath
from typing import Dict, List, NamedTuple, Optional

import apache_beam as beam
import numpy as np
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems

from transforms.core import batches
from transforms.core import metrics
from transforms.core import processes
from transforms.core import progress
from transforms.core import shuffle
from transforms.core import skeleton
from transforms.core.skeleton import records_key
from transforms.modalities.sensor import preprocessing
from transforms.modalities.sensor import ranges as sensor_ranges
from transforms.sources import files as files_lib
from transforms.sources import tables
from transforms.modalities.sensor import windows
from transforms.core.errors import UsageError
from transforms.core.dead_letters import dead_letter

DEAD = 'dead'
# Outputs of the statistics pass.
ENTITY_STATS, COUNTS, LABELS, ANALYSIS, TRAIN_VALUES, ROW_CLASSES = (
    'entity_stats', 'counts', 'labels', 'analysis', 'train_values',
    'row_classes')


# What the local worker processes that parse CSV ranges import.
WORKER_MODULES = (sensor_ranges.__name__,)


def worker_modules(cfg, plan: 'SensorInput'):
  """WORKER_MODULES when the run will parse a file in ranges with local
  worker processes (a large local CSV or TSV file), else ()."""
  if cfg.local_processes <= 0 or '://' in plan.pattern:
    return ()
  files = glob.glob(plan.pattern) if glob.has_magic(plan.pattern) else [
      plan.pattern]
  return (WORKER_MODULES if any(map(tables.ranges_possible, files))
          else ())


class SensorInput(NamedTuple):
  """What the launch-time input check found."""
  pattern: str  # file pattern listed in the pipeline
  root: str  # folder example ids are relative to
  columns: tables.Columns


def _listing_pattern(path: str):
  """(pattern, root) for a file, a folder or a glob."""
  if any(c in path for c in '*?['):
    return path, posixpath.dirname(path.split('*')[0].split('?')[0])
  if files_lib.exists(path) and not _is_file(path):
    root = path.rstrip('/')
    return FileSystems.join(root, '*'), root
  return path, posixpath.dirname(path)


def _is_file(path: str) -> bool:
  try:
    matched = FileSystems.match([path])[0].metadata_list
  except Exception:  # pylint: disable=broad-except
    return False
  return len(matched) == 1 and matched[0].path.rstrip('/') == path.rstrip(
      '/') and tables.format_of(path) is not None


def list_files(pattern: str) -> List[str]:
  try:
    matched = FileSystems.match([pattern])[0].metadata_list
  except Exception:  # pylint: disable=broad-except
    return []
  return sorted(m.path for m in matched
                if tables.format_of(m.path) and m.size_in_bytes > 0)


def check_input(cfg) -> SensorInput:
  """Checks the input on the launching machine and resolves the columns.

  Raises:
    UsageError: No readable table files, or columns that do not exist; one
      sentence.
  """
  sc = cfg.settings
  if not files_lib.exists(cfg.input) and not any(
      c in cfg.input for c in '*?['):
    raise UsageError(f'the input {cfg.input} does not exist')
  pattern, root = _listing_pattern(cfg.input)
  files = list_files(pattern)
  if not files:
    raise UsageError(f'the input {cfg.input} has no non-empty CSV, TSV, '
                     'JSONL or Parquet file')
  first = files[0]
  try:
    names, numeric = tables.read_header(first, tables.format_of(first))
    columns = tables.resolve_columns(
        names, numeric, sc.timestamp_column, sc.entity_column,
        sc.label_column, sc.channels or None)
  except tables.ColumnError as e:
    raise UsageError(f'{posixpath.basename(first)}: {e}') from None
  return SensorInput(pattern, root, columns)


def progress_measure(cfg, plan: SensorInput) -> progress.BytesMeasure:
  """The progress line's measure: bytes of the input read, over the
  statistics and example passes."""
  del cfg
  return progress.BytesMeasure('sensor', input_bytes(plan.pattern), 2,
                               ('rows', 'rows'))


def input_bytes(pattern: str) -> Optional[int]:
  """The total size of the table files the pipeline lists (None when they
  cannot be listed)."""
  try:
    matched = FileSystems.match([pattern])[0].metadata_list
  except Exception:  # pylint: disable=broad-except
    return None
  return sum(m.size_in_bytes for m in matched
             if tables.format_of(m.path)) or None


class _ReadRowsFn(beam.DoFn):
  """Reads one input file in row batches, counting the bytes read for the
  progress line; what both passes share."""

  def __init__(self, cfg, plan: SensorInput):
    super().__init__()
    self._cfg, self._plan = cfg, plan
    self._rule = sensor_ranges.split_rule(cfg)
    workers = cfg.local_processes
    self._workers = processes.MaybeAhead(
        workers, WORKER_MODULES, 2 * workers, 'parse CSV ranges')
    self._bytes_read = progress.counter('sensor', 'bytes_read')

  def _batches(self, path):
    """(good rows, bad rows, the good rows' splits) of one file, in file
    order. A large local CSV or TSV file is parsed in byte ranges by the
    local worker processes (--local_processes), which also find the rows'
    splits, while this thread works on the rows before."""
    fmt = tables.format_of(path)
    ranges = (tables.csv_ranges(path, fmt)
              if self._cfg.local_processes > 0 else None)
    ahead = self._workers.start() if ranges is not None else None
    if ahead is not None:
      yield from self._range_batches(path, fmt, ranges, ahead)
      return
    reads = files_lib.ReadCount()
    for rows, bad in tables.iter_batches(path, fmt, self._plan.columns,
                                         self._cfg.settings.timestamp_unit,
                                         reads=reads):
      self._bytes_read.inc(reads.take())
      yield rows, bad, sensor_ranges.row_splits(rows, self._rule)
    self._bytes_read.inc(reads.take())

  def _range_batches(self, path, fmt, ranges, ahead):
    """The file's ranges, read by worker processes, results in order;
    from the first range with a quote (or an error) on, the rest of the
    file in one piece, here (tables.csv_ranges)."""
    unit, columns = self._cfg.settings.timestamp_unit, self._plan.columns
    offset = 0  # records of the ranges before
    rest_from = None

    def results():
      for start, end in ranges.spans:
        yield from ahead.submit((start, end), sensor_ranges.read_range, path,
                                fmt, columns, unit, ranges.header, start, end,
                                self._rule)
      yield from ahead.drain()

    for (start, end), result, error in results():
      if error is not None or result[0].quoted:
        rest_from = start
        ahead.discard()
        break
      found, splits = result
      for (rows, bad), split in zip(found.batches, splits):
        yield tables.shift_rows(rows, bad, offset) + (split,)
      offset += found.records
      self._bytes_read.inc(end - start)
    if rest_from is None:
      return
    reads = files_lib.ReadCount()
    for rows, bad in tables.iter_csv_from(path, fmt, columns, unit,
                                          ranges.header, rest_from, offset,
                                          reads=reads):
      self._bytes_read.inc(reads.take())
      yield rows, bad, sensor_ranges.row_splits(rows, self._rule)
    self._bytes_read.inc(reads.take())

  def _missing(self, rows):
    """(rows with a missing value, rows kept: all with --missing impute)."""
    missing = ~np.isfinite(rows.values).all(axis=1)
    if self._cfg.settings.missing == 'impute':
      return missing, np.ones(len(rows.row), bool)
    return missing, ~missing


def _take_rows(rows, keep):
  return tables.RowBatch(rows.row[keep], rows.time[keep], rows.entity[keep],
                         rows.label[keep], rows.values[keep])


class RowStatisticsFn(_ReadRowsFn):
  """The statistics pass over one input file: tagged outputs only, all
  small but the analysis input: dead letters, per-entity EntityStats once
  at the file's end (_FileEntities), counts per (split, kind),
  label names, tf.Transform analysis batches and exact statistics inputs of
  the training rows, and class counts (one example per row)."""

  def __init__(self, cfg, plan: SensorInput):
    super().__init__(cfg, plan)
    self._parsed = metrics.counter('sensor', 'parsed')
    self._rows = progress.counter('sensor', 'rows')

  def process(self, path):
    source = batches.source_name(self._plan.root, path)
    # What this file shows of each entity, emitted once at its end.
    seen = _FileEntities()
    try:
      for rows, bad, split in self._batches(path):
        self._rows.inc(len(rows.row) + len(bad))
        yield from self._dead(source, bad)
        if len(rows.row):
          self._parsed.inc(len(rows.row))
          yield from self._batch(source, rows, split, seen)
    except tables.ColumnError as e:
      yield beam.pvalue.TaggedOutput(
          DEAD, dead_letter(source, 'read', str(e)))
      yield beam.pvalue.TaggedOutput(COUNTS, (('', 'inputs'), 1))
    for entity, stats in seen.stats(source):
      yield beam.pvalue.TaggedOutput(ENTITY_STATS, (entity, stats))

  @staticmethod
  def _dead(source, bad):
    for row, reason in bad:
      yield beam.pvalue.TaggedOutput(
          DEAD, dead_letter(f'{source}:{row}', 'parse', reason))
    if bad:
      yield beam.pvalue.TaggedOutput(COUNTS, (('', 'inputs'), len(bad)))

  def _batch(self, source, rows, split, seen):
    sc, names = self._cfg.settings, self._cfg.split_names
    missing, keep = self._missing(rows)
    for s, name in enumerate(names):
      in_split = split == s
      total = int(in_split.sum())
      if not total:
        continue
      yield beam.pvalue.TaggedOutput(COUNTS, ((name, 'inputs'), total))
      lost = int((in_split & ~keep).sum())
      if lost:
        kind = 'dead' if sc.missing == 'dead_letter' else 'dropped'
        yield beam.pvalue.TaggedOutput(COUNTS, ((name, kind), lost))
    if sc.missing == 'dead_letter':
      yield from self._missing_dead(source, rows, missing, split)
    if not keep.all():
      rows, split = _take_rows(rows, keep), split[keep]
    if len(rows.row):
      yield from self._summaries(source, rows, split, seen)

  def _missing_dead(self, source, rows, missing, split):
    channels = self._plan.columns.channels
    names = self._cfg.split_names
    for i in np.flatnonzero(missing):
      bad_channels = [channels[c] for c in
                      np.flatnonzero(~np.isfinite(rows.values[i]))]
      yield beam.pvalue.TaggedOutput(DEAD, dead_letter(
          f'{source}:{rows.row[i]}', 'parse',
          'missing value in channel ' + ', '.join(
              repr(c) for c in bad_channels), names[split[i]]))

  def _summaries(self, source, rows, split, seen):
    sc, names = self._cfg.settings, self._cfg.split_names
    for entity, idx in windows.group_rows(rows.entity):
      seen.add(entity, rows.time[idx])
    labels = sorted(set(rows.label.tolist()))
    yield beam.pvalue.TaggedOutput(LABELS, labels)
    for s, name in enumerate(names):
      in_split = split == s
      if not in_split.any():
        continue
      yield beam.pvalue.TaggedOutput(COUNTS, ((name, 'used'),
                                              int(in_split.sum())))
      if not sc.windowed:
        split_labels, counts = np.unique(rows.label[in_split].astype(str),
                                         return_counts=True)
        for label, count in zip(split_labels.tolist(), counts.tolist()):
          yield beam.pvalue.TaggedOutput(ROW_CLASSES,
                                         ((name, label), count))
      if name == 'train':
        train = rows.values[in_split]
        yield beam.pvalue.TaggedOutput(TRAIN_VALUES, train)
        yield beam.pvalue.TaggedOutput(
            ANALYSIS, preprocessing.analysis_record_batch(
                train, sc.window_length, train.shape[1]))


class RowExamplesFn(_ReadRowsFn):
  """The example pass over one input file.

  The entities whose rows are in strictly increasing time in this file
  alone are cut at their gaps and windowed while reading (tagged
  'windows'; in row mode their rows are the main output as examples,
  {'source', 'row', 'time', 'entity', 'label', 'values', 'split'}), with
  the rows windowed per split ('rows') and each one's series shape when
  the file ends ('shapes'). The rows of the other entities go out tagged
  'unordered' (the same dicts), to be grouped by (entity, time chunk)."""

  def process(self, path, entity_stats):
    sc = self._cfg.settings
    source = batches.source_name(self._plan.root, path)
    gaps = _MaxGaps(sc.max_gap, entity_stats)
    streamer = windows.StreamWindower(
        sc.window_length, sc.window_stride, gaps, sc.resample,
        sc.time_cutoffs if sc.split_by == 'time' else None)
    labels = windows.LabelCodes()
    try:
      for rows, _, split in self._batches(path):
        if len(rows.row):
          yield from self._batch(source, rows, split, streamer, labels,
                                 entity_stats, gaps)
    except tables.ColumnError:
      return  # the statistics pass dead-lettered the file
    for entity, shape in streamer.shapes():
      shape.update(median_interval_ns=gaps.median(entity),
                   max_gap_ns=gaps.get(entity))
      yield beam.pvalue.TaggedOutput('shapes', (entity, shape))

  def _batch(self, source, rows, split, streamer, labels, entity_stats,
             gaps):
    _, keep = self._missing(rows)
    if not keep.all():
      rows, split = _take_rows(rows, keep), split[keep]
    if not len(rows.row):
      return
    values = rows.values.astype(np.float32)
    yield from self._stream(source, rows, values, split, streamer, labels,
                            entity_stats, gaps)

  def _stream(self, source, rows, values, split, streamer, labels,
              entity_stats, gaps):
    """Streams the entities in strictly increasing time in this file only;
    the others go to the (entity, chunk) grouping. The streamed rows'
    labels are held as codes (`labels`, a windows.LabelCodes for the file)."""
    sc, names = self._cfg.settings, self._cfg.split_names
    chunked = np.ones(len(rows.row), bool)
    streamed = np.zeros(len(names), np.int64)
    completed, too_long = [], {}
    codes = None
    for entity, idx in windows.group_rows(rows.entity):
      if not _streamable(entity_stats[entity]):
        continue
      chunked[idx] = False
      streamed += np.bincount(split[idx], minlength=len(names))
      if not sc.windowed:
        streamer.add(entity, rows.time[idx], values[idx], split[idx],
                     split[idx])
        continue
      if codes is None:
        codes = labels.codes(rows.label)
      done = streamer.add(entity, rows.time[idx], values[idx], codes[idx],
                          split[idx])
      if done is not None:
        global_starts, starts, time, vals, label, sp = done
        batch, lost = window_batch(
            entity, global_starts, starts, time, vals, label, sp, sc,
            labels.names, _span_bound(sc, gaps.median(entity),
                                      gaps.get(entity)))
        if lost:
          too_long[entity] = too_long.get(entity, 0) + lost
        if batch is not None:
          completed.append(batch)
    for entity, lost in too_long.items():
      yield beam.pvalue.TaggedOutput('shapes', (entity, {'too_long': lost}))
    if streamed.any() and sc.windowed:
      yield beam.pvalue.TaggedOutput('rows', (int(streamed.sum()), streamed))
    if completed:
      # One batch per input batch: normalizing and encoding pay per call.
      yield beam.pvalue.TaggedOutput('windows',
                                     batches.concat_batches(completed))
    if not sc.windowed and not chunked.all():
      keep = ~chunked
      yield {'source': source, 'row': rows.row[keep], 'time': rows.time[keep],
             'entity': rows.entity[keep], 'label': rows.label[keep],
             'values': values[keep], 'split': split[keep]}
    if chunked.any():
      yield beam.pvalue.TaggedOutput('unordered', {
          'source': source, 'row': rows.row[chunked],
          'time': rows.time[chunked], 'entity': rows.entity[chunked],
          'label': rows.label[chunked], 'values': values[chunked],
          'split': split[chunked]})


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
      bound = _span_bound(sc, *intervals[entity])
      batch, lost = window_batch(entity, starts, starts - offset, time,
                                 values, label, split, sc, bound=bound)
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


def _span_bound(sc, median, max_gap):
  """The longest time a window may span: window_length rows at the
  entity's sampling interval (the grid's period with --resample) and one
  gap."""
  return windows.span_bound(sc.window_length, sc.resample or median, max_gap)


def window_batch(entity, global_starts, starts, time, values, label, split,
                 sc, label_names=None, bound=None):
  """The windows starting at `starts` of a sorted series, as a batch, and
  how many were left out for spanning more than `bound` ns (None: no
  bound) -> (batch or None, left out). `label` holds the rows' label names,
  or with `label_names` their codes (windows.LabelCodes)."""
  length = sc.window_length
  lost = 0
  if bound is not None:
    fits = time[starts + length - 1] - time[starts] <= bound
    if not fits.all():
      lost = int(np.count_nonzero(~fits))
      global_starts, starts = global_starts[fits], starts[fits]
      if not len(starts):
        return None, lost
  index = starts[:, None] + np.arange(length)
  if label_names is None:
    names, codes = np.unique(label, return_inverse=True)
  else:
    names, codes = windows.sorted_labels(label, label_names)
  label_codes = windows.window_labels(codes, starts, length, sc.window_label,
                                      len(names))
  first, last = split[starts], split[starts + length - 1]
  return {
      preprocessing.ID: [f'{entity}#{s}' for s in global_starts.tolist()],
      preprocessing.ENTITY: [entity] * len(starts),
      preprocessing.LABEL_TEXT: names[label_codes].tolist(),
      preprocessing.START_TIME: time[starts],
      preprocessing.END_TIME: time[starts + length - 1],
      preprocessing.VALUES: values[index],
      'split': np.where(first == last, first, -1).astype(np.int8),
  }, lost


def _assemble(item, intervals, sc):
  (entity, start), pieces = item
  whole = windows.assemble(list(pieces), sc.window_length)
  # An incomplete window (None) is left out; the windows-formed check of
  # the quality gate reports it.
  if whole is None:
    return
  time, values, label, split = whole
  bound = _span_bound(sc, *intervals[entity])
  batch, lost = window_batch(entity, np.array([start]), np.array([0]), time,
                             values, label, split, sc, bound=bound)
  if lost:
    yield beam.pvalue.TaggedOutput('shapes', (entity, {'too_long': lost}))
  if batch is not None:
    yield batch


def _chunk_rows(item, with_entity):
  """A chunk's observations as row examples."""
  (entity, _), (c, _, _) = item
  return {
      preprocessing.ID: c['id'].tolist(),
      preprocessing.ENTITY: [entity if with_entity else ''] * len(c['time']),
      preprocessing.LABEL_TEXT: c['label'].tolist(),
      preprocessing.TIME: c['time'], preprocessing.VALUES: c['values'],
      'split': c['split'],
  }


def _row_examples(batch, with_entity):
  ids = [f'{batch["source"]}:{r}' for r in batch['row'].tolist()]
  return {
      preprocessing.ID: ids,
      preprocessing.ENTITY: (batch['entity'].astype(str).tolist()
                             if with_entity else [''] * len(ids)),
      preprocessing.LABEL_TEXT: batch['label'].astype(str).tolist(),
      preprocessing.TIME: batch['time'], preprocessing.VALUES: batch['values'],
      'split': batch['split'],
  }


def manifest_section(cfg, values, splits):
  """The manifest's sensor section and normalization."""
  sc = cfg.settings
  counts = dict(values['counts'])
  time_counts = dict(values.get('time_counts') or ())
  for name, split in splits.items():
    # Rows used: the observations, after repeated rows were dropped and
    # conflicting ones dead-lettered (they are in dead_lettered).
    duplicates = time_counts.get((name, 'duplicates'), 0)
    split['rows_used'] = counts.get((name, 'used'), 0) - duplicates - (
        time_counts.get((name, 'conflicts'), 0))
    split['rows_dropped'] = counts.get((name, 'dropped'), 0)
    split['duplicates_dropped'] = duplicates
    if sc.windowed:
      split['rows_windowed'] = int(sum(
          r[s] for r in values['rows_windowed']
          for s in [cfg.split_names.index(name)]))
  entity_rows = dict((e, es[0]) for e, es in values['entity_stats'])
  time_shape = _time_shape(sc, values['entity_stats'], values['shapes'])
  stats = values['train_stats']
  section = {
      'columns': values['columns'],
      'channels': list(values['columns']['channels']),
      'mode': 'window' if sc.windowed else 'row',
      'window_length': sc.window_length,
      'window_stride': sc.window_stride if sc.windowed else 0,
      'window_label': sc.window_label if sc.windowed else None,
      'value_shape': preprocessing.value_shape(
          sc.window_length, len(values['columns']['channels'])),
      'time_unit': 'ns since 1970-01-01T00:00:00Z',
      'missing': sc.missing,
      'split_by': sc.split_by,
      'time_cutoffs': [windows.format_time(t) for t in sc.time_cutoffs],
      'entities': len(entity_rows),
      # Windowed while reading (in one file, in time order); the others
      # were grouped by (entity, time chunk).
      'entities_in_time_order': sum(
          1 for _, es in values['entity_stats'] if _streamable(
              EntityStats(*es))) if sc.windowed else None,
      'longest_entity_rows': max(entity_rows.values(), default=0),
      'longest_segment': time_shape['total']['longest_segment'],
      'max_gap': sc.max_gap_text,
      'same_time': sc.same_time,
      'resample': {
          'period': sc.resample_text, 'period_ns': sc.resample,
          'fill': 'linear between the observations around each grid time; '
                  'label of the observation at or before it'}
                  if sc.resample else None,
      'time': time_shape,
      'rows_dropped': sum(counts.get((n, 'dropped'), 0)
                          for n in cfg.split_names),
      'bucketize': sc.bucketize,
  }
  if sc.windowed:
    formed = dict(values['formed'])
    w = time_shape['total']['windows']
    section['windows'] = {
        'expected': w['in_segments'] - w['too_long'],
        'formed': sum(formed.values()),
        'crossing_time_cutoff': formed.get('', 0),
        'lost_to_gaps': w['without_gaps'] - w['in_segments'],
        'too_long': w['too_long'],
    }
  normalization = {
      'method': cfg.normalization,
      'applied': 'stored',
      'statistics_split': 'train',
      'rows_analyzed': max(stats['count'], default=0),
      'per_channel': {
          name: {k: stats[k][i] for k in ('count', 'mean', 'std', 'min',
                                          'max')}
          for i, name in enumerate(values['columns']['channels'])
      } if stats['count'] else {},
  }
  return section, normalization


def _shape_keys(sc):
  """The keys of a sensor.time entry that add up over entities."""
  keys = ('rows', 'observations', 'gaps', 'segments', 'duplicates_dropped',
          'conflicting_rows', 'out_of_order_rows')
  return keys + (('rows_resampled', 'rows_filled') if sc.resample else ())


def _time_shape(sc, entity_stats, shapes) -> dict:
  """The manifest's sensor.time: each entity's series shape and the
  total (see the guide's sensor page)."""
  shapes = dict(shapes)
  entities = {}
  for entity, stats in sorted(entity_stats):
    stats = EntityStats(*stats)
    part = windows.SeriesShape.merge([shapes.get(entity, {})])
    shape = {
        'rows': stats.rows, 'observations': part['observations'],
        'median_interval_ns': part['median_interval_ns'],
        'max_gap_ns': part['max_gap_ns'],
        'gaps': part['gaps'], 'longest_gap_ns': part['longest_gap_ns'],
        'segments': part['segments'],
        'longest_segment': part['longest_segment'],
        'duplicates_dropped': part['duplicates_dropped'],
        'conflicting_rows': part['conflicting_rows'],
        'out_of_order_rows': stats.out_of_order,
    }
    if sc.resample:
      shape['rows_resampled'] = int(part['rows_resampled'])
      shape['rows_filled'] = int(part['rows_filled'])
    if sc.windowed:
      # Without gaps: the observations, or the grid rows of the whole time
      # the entity was observed.
      rows = part['observations']
      if sc.resample and part['first_ns'] is not None:
        rows = (part['last_ns'] - part['first_ns']) // sc.resample + 1
      shape['windows'] = {
          'without_gaps': windows.window_count(
              rows, sc.window_length, sc.window_stride),
          'in_segments': part['in_segments'],
          'too_long': part['too_long'],
          'formed': part['in_segments'] - part['too_long']}
    entities[entity] = shape
  total = {}
  for key in _shape_keys(sc):
    total[key] = sum(e[key] for e in entities.values())
  for key in ('longest_gap_ns', 'longest_segment'):
    total[key] = max((e[key] for e in entities.values()), default=0)
  # The entities' median intervals, their median (the lower middle one).
  medians = sorted(e['median_interval_ns'] for e in entities.values()
                   if e['median_interval_ns'] is not None)
  total['median_interval_ns'] = (medians[(len(medians) - 1) // 2]
                                 if medians else None)
  if sc.windowed:
    total['windows'] = {key: sum(e['windows'][key] for e in entities.values())
                        for key in ('without_gaps', 'in_segments',
                                    'too_long', 'formed')}
  return {'entities': entities, 'total': total}


class ReadRows(skeleton.ReadInputs):
  """The statistics pass (see the module docstring); returns the
  skeleton's ReadInputs dict plus 'files', 'counts' ((split, 'inputs' |
  'dead' | 'dropped' | 'used'), rows), 'entity_stats' (entity,
  EntityStats), 'train_stats' (exact channel statistics), 'row_classes'
  and 'columns'."""

  def expand(self, pbegin):
    cfg, plan = self._cfg, self._plan
    files = (pbegin
             | 'InputPattern' >> beam.Create([plan.pattern])
             | 'ListFiles' >> fileio.MatchAll()
             | 'Paths' >> beam.Map(lambda m: m.path)
             | 'TableFilesOnly' >> beam.Filter(
                 lambda p: tables.format_of(p) is not None))
    stats_out = (files
                 | 'SpreadFilesA' >> beam.Reshuffle()
                 | 'ParseForStatistics' >> beam.ParDo(
                     RowStatisticsFn(cfg, plan)).with_outputs(
                         DEAD, ENTITY_STATS, COUNTS, LABELS, ANALYSIS,
                         TRAIN_VALUES, ROW_CLASSES))
    counts = batches.sum_counts(stats_out[COUNTS], 'SumCounts')
    # -> ((split, 'inputs'|'dead'|'dropped'|'used'), rows)
    columns = plan.columns
    return {
        'dead': stats_out[DEAD],
        'inputs': batches.inputs_per_split(counts, 'Inputs'),
        'labels': stats_out[LABELS],
        'analysis': stats_out[ANALYSIS],
        'skipped': pbegin | 'NothingSkipped' >> beam.Create([0]),
        'files': files, 'counts': counts,
        'entity_stats': (stats_out[ENTITY_STATS]
                         | 'EntityRange' >> beam.CombinePerKey(
                             lambda vs: _merge_ranges(vs))),
        # -> (entity, (rows, first time, last time, source, ordered))
        'train_stats': stats_out[TRAIN_VALUES] | 'TrainStats' >> (
            beam.CombineGlobally(preprocessing.ChannelStatsFn())),
        'row_classes': stats_out[ROW_CLASSES],
        'columns': pbegin | 'Columns' >> beam.Create([{
            'timestamp': columns.timestamp, 'entity': columns.entity,
            'label': columns.label, 'channels': list(columns.channels)}]),
    }


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


def _series_examples(read, cfg, plan):
  """Rows or windows of every entity.

  Returns:
    ([(branch name, example batches)], rows windowed per split (window
    mode), {'dead': conflicting rows' dead letters, 'time_counts':
    ((split, 'duplicates' | 'conflicts'), rows), 'shapes': (entity,
    series shape parts)}).
  """
  sc, names = cfg.settings, cfg.split_names
  entity_dict = beam.pvalue.AsDict(read['entity_stats'])
  parsed = (read['files']
            | 'SpreadFilesB' >> beam.Reshuffle()
            | 'ParseForExamples' >> beam.ParDo(
                RowExamplesFn(cfg, plan), entity_dict).with_outputs(
                    'windows', 'rows', 'shapes', 'unordered', main='ordered'))
  # Entities in strictly increasing time within one file were streamed;
  # the rows of the others go by (entity, time chunk).
  chunked = chunked_series(sc, names, entity_dict, parsed.unordered)
  shape_parts = [parsed.shapes] + chunked['shapes']
  if sc.windowed:
    rows_windowed = (
        (parsed.rows, chunked['rows'])
        | 'AllRowsWindowed' >> beam.Flatten()
        | 'RowsWindowed' >> beam.Map(lambda r: r[1])
        | 'SumRowsWindowed' >> beam.CombineGlobally(
            lambda arrs: [int(v) for v in np.sum(
                [np.asarray(a) for a in arrs] or [np.zeros(len(names))],
                axis=0)]).without_defaults())
    # Three branches, not flattened: a Flatten here would make the local
    # runner hold every window before normalizing them.
    branches = [('Streamed', parsed.windows),
                ('Chunked', chunked['windows']),
                ('Crossing', chunked['crossing'])]
  else:
    with_entity = plan.columns.entity is not None
    branches = [
        ('Rows', parsed.ordered | 'RowExamples' >> beam.Map(
            _row_examples, with_entity)),
        ('ChunkRows', chunked['chunks'] | 'ChunkRowExamples' >> beam.Map(
            _chunk_rows, with_entity))]
    rows_windowed = read['files'] | 'NoRowsWindowed' >> beam.Filter(
        lambda _: False)
  shapes = (shape_parts
            | 'AllShapeParts' >> beam.Flatten()
            | 'SeriesShapes' >> beam.CombinePerKey(windows.SeriesShape.merge))
  time_counts = batches.sum_counts(chunked['counts'],
                                   'SumTimeCounts')
  return branches, rows_windowed, {
      'dead': chunked['dead'], 'time_counts': time_counts, 'shapes': shapes}


def _class_counts(read, cfg, normalized):
  """((split, label), examples) before rebalancing, as rebalancing reads
  them: rows from the statistics pass, windows once they are formed."""
  names = cfg.split_names
  if cfg.rebalance == 'none':
    return read['row_classes'] | 'NoClassCounts' >> beam.Filter(
        lambda _: False)
  if not cfg.settings.windowed:
    return batches.sum_counts(read['row_classes'], 'CountRowClasses')
  return ([part | f'WindowClasses[{name}]' >> beam.FlatMap(
      lambda b: [((names[s], l), 1) for s, l in zip(
          b['split'].tolist(), b[preprocessing.LABEL_TEXT]) if s >= 0])
           for name, part in normalized]
          | 'AllWindowClasses' >> beam.Flatten()
          | 'CountWindowClasses' >> beam.CombinePerKey(sum))


class BuildSensorRecords(skeleton.BuildRecords):
  """The example pass: rows or windows -> the exported transform ->
  [rebalance] -> records, grouped by shuffle bucket, per split."""

  def expand(self, read):
    cfg, plan, transform = self._cfg, self._plan, self._transform
    sc = cfg.settings
    examples, rows_windowed, series = _series_examples(read, cfg, plan)
    normalized = [(name, part | f'Normalize[{name}]' >> beam.ParDo(
        batches.ApplyTransform(self._staging, _transform_inputs,
                               preprocessing.VALUES),
        beam.pvalue.AsList(transform.done))) for name, part in examples]
    class_counts = _class_counts(read, cfg, normalized)
    buckets = (read['entity_stats'] if sc.windowed else read['counts']) | (
        'ShuffleBuckets' >> beam.combiners.ToList()) | 'BucketCount' >> (
            beam.Map(lambda stats: shuffle.shuffle_buckets(
                _expected_examples(stats, sc))))
    spec = feature_spec(cfg, plan)
    parts = [part | f'ToRecords[{name}]' >> beam.ParDo(
        batches.ToRecords(cfg, functools.partial(_encode, spec=spec)),
        beam.pvalue.AsSingleton(transform.label_ids),
        beam.pvalue.AsList(class_counts),
        beam.pvalue.AsSingleton(buckets)).with_outputs(
            'formed', 'before', 'after', main='records')
             for name, part in normalized]

    def tagged(tag):
      return [getattr(p, tag) for p in parts] | f'All[{tag}]' >> (
          beam.Flatten())

    # Not flattened first: ShuffleRecords spills each part on local runs.
    per_split = tuple(p.records for p in parts) | 'ShuffleRecords' >> (
        batches.ShuffleRecords(cfg.split_names,
                               self.spill_folder()))
    out = {records_key(s): r for s, r in zip(cfg.split_names, per_split)}
    out.update(
        before=batches.sum_counts(tagged('before'), 'SumBefore'),
        after=batches.sum_counts(tagged('after'), 'SumAfter'),
        formed=batches.sum_counts(tagged('formed'), 'SumFormed'),
        rows_windowed=rows_windowed, **series)
    return out


def analysis(cfg, plan: SensorInput):
  """(the analysis input's Arrow schema, the preprocessing_fn)."""
  sc = cfg.settings
  channels = len(plan.columns.channels)
  return (preprocessing.analysis_adapter_config(sc.window_length, channels),
          preprocessing.make_preprocessing_fn(channels, cfg.normalization,
                                              sc.missing == 'impute',
                                              sc.bucketize))


def feature_spec(cfg, plan: SensorInput) -> dict:
  """The stored features."""
  sc = cfg.settings
  return preprocessing.feature_spec(sc.window_length,
                                    len(plan.columns.channels), sc.bucketize,
                                    plan.columns.entity is not None,
                                    cfg.rebalance == 'weight')


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


class _FileEntities:
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


def _streamable(stats) -> bool:
  """Windowed while reading: in one file, in strictly increasing time."""
  stats = EntityStats(*stats)
  return stats.source is not None and stats.ordered and not stats.repeats


class _MaxGaps:
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



def _expected_examples(stats, sc) -> int:
  if sc.windowed:
    return sum(windows.window_count(es[0], sc.window_length, sc.window_stride)
               for _, es in stats)
  return sum(n for (_, kind), n in stats if kind == 'used')


def _encode(batch, label_ids, weights, spec):
  return preprocessing.to_example_records(batch, label_ids, spec, weights)


def _transform_inputs(batch, lo, hi):
  # Every input of the graph, the analysis-only ones empty: when one is
  # missing, TensorFlow first tries (and fails) to bind the call and formats
  # every input tensor into an error message, which costs ten times the
  # transform itself.
  return preprocessing.transform_inputs(
      np.asarray(batch[preprocessing.VALUES][lo:hi], np.float32))


def _merge_ranges(values):
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
