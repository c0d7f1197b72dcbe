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

from transforms.core import batches as batch_examples
from transforms.core import metrics
from transforms.core import processes
from transforms.core import progress
from transforms.core import shuffle
from transforms.core import skeleton
from transforms.core.skeleton import records_key
from transforms.modalities.sensor import preprocessing as st
from transforms.modalities.sensor import ranges as sensor_ranges
from transforms.sources import files as files_lib
from transforms.sources import tables as tabular
from transforms.modalities.sensor import windows as win
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
  return (WORKER_MODULES if any(map(tabular.ranges_possible, files))
          else ())


class SensorInput(NamedTuple):
  """What the launch-time input check found."""
  pattern: str  # file pattern listed in the pipeline
  root: str  # folder example ids are relative to
  columns: tabular.Columns


def _listing_pattern(path: str):
  """(pattern, root) for a file, a folder or a glob."""
  if any(c in path for c in '*?['):
    return path, posixpath.dirname(path.split('*')[0].split('?')[0])
  if FileSystems.exists(path) and not _is_file(path):
    root = path.rstrip('/')
    return FileSystems.join(root, '*'), root
  return path, posixpath.dirname(path)


def _is_file(path: str) -> bool:
  try:
    matched = FileSystems.match([path])[0].metadata_list
  except Exception:  # pylint: disable=broad-except
    return False
  return len(matched) == 1 and matched[0].path.rstrip('/') == path.rstrip(
      '/') and tabular.format_of(path) is not None


def list_files(pattern: str) -> List[str]:
  try:
    matched = FileSystems.match([pattern])[0].metadata_list
  except Exception:  # pylint: disable=broad-except
    return []
  return sorted(m.path for m in matched
                if tabular.format_of(m.path) and m.size_in_bytes > 0)


def check_input(cfg) -> SensorInput:
  """Checks the input on the launching machine and resolves the columns.

  Raises:
    UsageError: No readable table files, or columns that do not exist; one
      sentence.
  """
  sc = cfg.settings
  if not FileSystems.exists(cfg.input) and not any(
      c in cfg.input for c in '*?['):
    raise UsageError(f'the input {cfg.input} does not exist')
  pattern, root = _listing_pattern(cfg.input)
  files = list_files(pattern)
  if not files:
    raise UsageError(f'the input {cfg.input} has no non-empty CSV, TSV, '
                     'JSONL or Parquet file')
  first = files[0]
  try:
    names, numeric = tabular.read_header(first, tabular.format_of(first))
    columns = tabular.resolve_columns(
        names, numeric, sc.timestamp_column, sc.entity_column,
        sc.label_column, sc.channels or None)
  except tabular.ColumnError as e:
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
             if tabular.format_of(m.path)) or None


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
    fmt = tabular.format_of(path)
    ranges = (tabular.csv_ranges(path, fmt)
              if self._cfg.local_processes > 0 else None)
    ahead = self._workers.start() if ranges is not None else None
    if ahead is not None:
      yield from self._range_batches(path, fmt, ranges, ahead)
      return
    reads = files_lib.ReadCount()
    for rows, bad in tabular.iter_batches(path, fmt, self._plan.columns,
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
        yield tabular.shift_rows(rows, bad, offset) + (split,)
      offset += found.records
      self._bytes_read.inc(end - start)
    if rest_from is None:
      return
    reads = files_lib.ReadCount()
    for rows, bad in tabular.iter_csv_from(path, fmt, columns, unit,
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
  return tabular.RowBatch(rows.row[keep], rows.time[keep], rows.entity[keep],
                          rows.label[keep], rows.values[keep])


class RowStatisticsFn(_ReadRowsFn):
  """The statistics pass over one input file: tagged outputs only, all
  small but the analysis input: dead letters, per-entity (rows, first and
  last time, its file, whether in time order), counts per (split, kind),
  label names, tf.Transform analysis batches and exact statistics inputs of
  the training rows, and class counts (one example per row)."""

  def __init__(self, cfg, plan: SensorInput):
    super().__init__(cfg, plan)
    self._parsed = metrics.counter('sensor', 'parsed')
    self._rows = progress.counter('sensor', 'rows')

  def process(self, path):
    source = batch_examples.source_name(self._plan.root, path)
    # Each entity's last time so far in this file (is the file in time
    # order?).
    last_times: Dict[str, int] = {}
    try:
      for rows, bad, split in self._batches(path):
        self._rows.inc(len(rows.row) + len(bad))
        yield from self._dead(source, bad)
        if len(rows.row):
          self._parsed.inc(len(rows.row))
          yield from self._batch(source, rows, split, last_times)
    except tabular.ColumnError as e:
      yield beam.pvalue.TaggedOutput(
          DEAD, dead_letter(source, 'read', str(e)))
      yield beam.pvalue.TaggedOutput(COUNTS, (('', 'inputs'), 1))

  @staticmethod
  def _dead(source, bad):
    for row, reason in bad:
      yield beam.pvalue.TaggedOutput(
          DEAD, dead_letter(f'{source}:{row}', 'parse', reason))
    if bad:
      yield beam.pvalue.TaggedOutput(COUNTS, (('', 'inputs'), len(bad)))

  def _batch(self, source, rows, split, last_times):
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
      yield from self._summaries(source, rows, split, last_times)

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

  def _summaries(self, source, rows, split, last_times):
    sc, names = self._cfg.settings, self._cfg.split_names
    for entity, idx in win.group_rows(rows.entity):
      times = rows.time[idx]
      previous = last_times.get(entity)
      ordered = bool(np.all(times[1:] >= times[:-1])) and (
          previous is None or times[0] >= previous)
      last_times[entity] = int(times[-1])
      yield beam.pvalue.TaggedOutput(ENTITY_STATS, (entity, EntityStats(
          len(times), int(times.min()), int(times.max()), source, ordered)))
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
        yield beam.pvalue.TaggedOutput(ANALYSIS, st.analysis_record_batch(
            train, sc.window_length, train.shape[1]))


class RowExamplesFn(_ReadRowsFn):
  """The example pass over one input file: batches of usable rows with
  their split, {'source', 'row', 'time', 'entity', 'label', 'values',
  'split'} (main output). With `entity_stats` (windows), the entities whose
  rows are in time order in this file alone are windowed while reading
  (tagged 'windows', and the rows windowed per split as 'rows'); the main
  output then holds the rows of the other entities."""

  def process(self, path, entity_stats=None):
    sc = self._cfg.settings
    source = batch_examples.source_name(self._plan.root, path)
    streamer = (win.StreamWindower(sc.window_length, sc.window_stride)
                if entity_stats is not None else None)
    labels = win.LabelCodes()
    try:
      for rows, _, split in self._batches(path):
        if len(rows.row):
          yield from self._batch(source, rows, split, streamer, labels,
                                 entity_stats)
    except tabular.ColumnError:
      return  # the statistics pass dead-lettered the file

  def _batch(self, source, rows, split, streamer, labels, entity_stats):
    _, keep = self._missing(rows)
    if not keep.all():
      rows, split = _take_rows(rows, keep), split[keep]
    if not len(rows.row):
      return
    values = rows.values.astype(np.float32)
    if streamer is None:
      yield {'source': source, 'row': rows.row, 'time': rows.time,
             'entity': rows.entity, 'label': rows.label, 'values': values,
             'split': split}
      return
    yield from self._stream(source, rows, values, split, streamer, labels,
                            entity_stats)

  def _stream(self, source, rows, values, split, streamer, labels,
              entity_stats):
    """Windows the entities in time order in this file only; the others go
    to the (entity, chunk) grouping. The streamed rows' labels are held as
    codes (`labels`, a win.LabelCodes for the file)."""
    sc, names = self._cfg.settings, self._cfg.split_names
    chunked = np.ones(len(rows.row), bool)
    streamed = np.zeros(len(names), np.int64)
    completed = []
    codes = None
    for entity, idx in win.group_rows(rows.entity):
      if not _streamable(entity_stats[entity]):
        continue
      if codes is None:
        codes = labels.codes(rows.label)
      chunked[idx] = False
      streamed += np.bincount(split[idx], minlength=len(names))
      done = streamer.add(entity, rows.time[idx], values[idx], codes[idx],
                          split[idx])
      if done is not None:
        global_starts, starts, time, vals, label, sp = done
        completed.append(window_batch(entity, global_starts, starts, time,
                                      vals, label, sp, sc, labels.names))
    if streamed.any():
      yield beam.pvalue.TaggedOutput('rows', (int(streamed.sum()), streamed))
    if completed:
      # One batch per input batch: normalizing and encoding pay per call.
      yield beam.pvalue.TaggedOutput('windows',
                                     batch_examples.concat_batches(completed))
    if chunked.any():
      yield {'source': source, 'row': rows.row[chunked],
             'time': rows.time[chunked], 'entity': rows.entity[chunked],
             'label': rows.label[chunked], 'values': values[chunked],
             'split': split[chunked]}


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
  for entity, idx in win.group_rows(batch['entity']):
    count, t_min, t_max = entity_stats[entity][:3]
    chunk = win.chunk_index(batch['time'][idx], t_min, t_max, count,
                            chunk_rows)
    for c in np.unique(chunk).tolist():
      part = idx[chunk == c]
      yield ((entity, int(c)), {
          'source': batch['source'], 'label_names': label_names.tolist(),
          'row': batch['row'][part], 'time': batch['time'][part],
          'values': batch['values'][part], 'split': batch['split'][part],
          'label': label_codes[part].astype(code_type)})


def _offsets(item):
  entity, chunk_counts = item
  return entity, win.chunk_offsets(dict(chunk_counts))


class ChunkWindows(beam.DoFn):
  """(entity, chunk) pieces -> window batches, plus fragments of windows
  that cross the chunk's boundaries (tagged 'fragments')."""

  def __init__(self, sc, split_names):
    super().__init__()
    self._sc, self._names = sc, split_names

  def process(self, item, offsets, entity_stats):
    (entity, chunk), pieces = item
    sc = self._sc
    pieces = list(pieces)
    cat = {k: np.concatenate([p[k] for p in pieces])
           for k in ('row', 'time', 'values', 'split')}
    cat['label'] = np.concatenate([np.asarray(p['label_names'])[p['label']]
                                   for p in pieces])
    sources = np.concatenate([np.full(len(p['row']), p['source'], object)
                              for p in pieces])
    _, source_codes = np.unique(sources.astype(str), return_inverse=True)
    order = win.sort_rows(cat['time'], source_codes, cat['row'])
    c = win.Chunk(entity=entity, offset=offsets[entity][chunk],
                  entity_rows=entity_stats[entity][0],
                  time=cat['time'][order], values=cat['values'][order],
                  label=cat['label'][order].astype(str),
                  split=cat['split'][order])
    yield beam.pvalue.TaggedOutput('rows', (len(order), np.bincount(
        c.split, minlength=len(self._names))))
    starts, fragments = win.windows_in_chunk(c, sc.window_length,
                                             sc.window_stride)
    for k, position, lo, hi in fragments:
      yield beam.pvalue.TaggedOutput('fragments', ((entity, k), (
          position, c.time[lo:hi], c.values[lo:hi], c.label[lo:hi],
          c.split[lo:hi])))
    if len(starts):
      yield window_batch(entity, c.offset + starts, starts, c.time, c.values,
                         c.label, c.split, sc)


def window_batch(entity, global_starts, starts, time, values, label, split,
                 sc, label_names=None) -> dict:
  """The windows starting at `starts` of a sorted series, as a batch.
  `label` holds the rows' label names, or with `label_names` their codes
  (win.LabelCodes)."""
  length = sc.window_length
  index = starts[:, None] + np.arange(length)
  if label_names is None:
    names, codes = np.unique(label, return_inverse=True)
  else:
    names, codes = win.sorted_labels(label, label_names)
  label_codes = win.window_labels(codes, starts, length, sc.window_label,
                                  len(names))
  first, last = split[starts], split[starts + length - 1]
  return {
      st.ID: [f'{entity}#{s}' for s in global_starts.tolist()],
      st.ENTITY: [entity] * len(starts),
      st.LABEL_TEXT: names[label_codes].tolist(),
      st.START_TIME: time[starts], st.END_TIME: time[starts + length - 1],
      st.VALUES: values[index],
      'split': np.where(first == last, first, -1).astype(np.int8),
  }


def _assemble(item, sc):
  (entity, k), pieces = item
  whole = win.assemble(list(pieces), sc.window_length)
  # An incomplete window (None) is left out; the windows-formed check of
  # the quality gate reports it.
  if whole is not None:
    time, values, label, split = whole
    yield window_batch(entity, np.array([k * sc.window_stride]),
                       np.array([0]), time, values, label, split, sc)


def _row_examples(batch, with_entity):
  ids = [f'{batch["source"]}:{r}' for r in batch['row'].tolist()]
  return {
      st.ID: ids,
      st.ENTITY: batch['entity'].astype(str).tolist() if with_entity else
                 [''] * len(ids),
      st.LABEL_TEXT: batch['label'].astype(str).tolist(),
      st.TIME: batch['time'], st.VALUES: batch['values'],
      'split': batch['split'],
  }


def manifest_section(cfg, values, splits):
  """The manifest's sensor section and normalization."""
  sc = cfg.settings
  counts = dict(values['counts'])
  for name, split in splits.items():
    split['rows_used'] = counts.get((name, 'used'), 0)
    split['rows_dropped'] = counts.get((name, 'dropped'), 0)
    if sc.windowed:
      split['rows_windowed'] = int(sum(
          r[s] for r in values['rows_windowed']
          for s in [cfg.split_names.index(name)]))
  entity_rows = dict((e, es[0]) for e, es in values['entity_stats'])
  stats = values['train_stats']
  section = {
      'columns': values['columns'],
      'channels': list(values['columns']['channels']),
      'mode': 'window' if sc.windowed else 'row',
      'window_length': sc.window_length,
      'window_stride': sc.window_stride if sc.windowed else 0,
      'window_label': sc.window_label if sc.windowed else None,
      'value_shape': st.value_shape(sc.window_length,
                                    len(values['columns']['channels'])),
      'time_unit': 'ns since 1970-01-01T00:00:00Z',
      'missing': sc.missing,
      'split_by': sc.split_by,
      'time_cutoffs': [win.format_time(t) for t in sc.time_cutoffs],
      'entities': len(entity_rows),
      # Windowed while reading (in one file, in time order); the others
      # were grouped by (entity, time chunk).
      'entities_in_time_order': sum(
          1 for _, es in values['entity_stats'] if _streamable(
              EntityStats(*es))) if sc.windowed else None,
      'longest_entity_rows': max(entity_rows.values(), default=0),
      'rows_dropped': sum(counts.get((n, 'dropped'), 0)
                          for n in cfg.split_names),
      'bucketize': sc.bucketize,
  }
  if sc.windowed:
    formed = dict(values['formed'])
    section['windows'] = {
        'expected': sum(win.window_count(n, sc.window_length,
                                         sc.window_stride)
                        for n in entity_rows.values()),
        'formed': sum(formed.values()),
        'crossing_time_cutoff': formed.get('', 0),
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
                 lambda p: tabular.format_of(p) is not None))
    stats_out = (files
                 | 'SpreadFilesA' >> beam.Reshuffle()
                 | 'ParseForStatistics' >> beam.ParDo(
                     RowStatisticsFn(cfg, plan)).with_outputs(
                         DEAD, ENTITY_STATS, COUNTS, LABELS, ANALYSIS,
                         TRAIN_VALUES, ROW_CLASSES))
    counts = batch_examples.sum_counts(stats_out[COUNTS], 'SumCounts')
    # -> ((split, 'inputs'|'dead'|'dropped'|'used'), rows)
    columns = plan.columns
    return {
        'dead': stats_out[DEAD],
        'inputs': batch_examples.inputs_per_split(counts, 'Inputs'),
        'labels': stats_out[LABELS],
        'analysis': stats_out[ANALYSIS],
        'skipped': pbegin | 'NothingSkipped' >> beam.Create([0]),
        'files': files, 'counts': counts,
        'entity_stats': (stats_out[ENTITY_STATS]
                         | 'EntityRange' >> beam.CombinePerKey(
                             lambda vs: _merge_ranges(vs))),
        # -> (entity, (rows, first time, last time, source, ordered))
        'train_stats': stats_out[TRAIN_VALUES] | 'TrainStats' >> (
            beam.CombineGlobally(st.ChannelStatsFn())),
        'row_classes': stats_out[ROW_CLASSES],
        'columns': pbegin | 'Columns' >> beam.Create([{
            'timestamp': columns.timestamp, 'entity': columns.entity,
            'label': columns.label, 'channels': list(columns.channels)}]),
    }


def _window_examples(read, cfg, plan):
  """Windows of every entity: [(branch name, window batches)] and the rows
  windowed per split."""
  sc, names = cfg.settings, cfg.split_names
  entity_dict = beam.pvalue.AsDict(read['entity_stats'])
  parsed = (read['files']
            | 'SpreadFilesB' >> beam.Reshuffle()
            | 'ParseForExamples' >> beam.ParDo(
                RowExamplesFn(cfg, plan),
                entity_dict).with_outputs('windows', 'rows',
                                          main='unordered'))
  # Entities in time order within one file were windowed while reading;
  # the rows of the others are grouped by (entity, time chunk).
  pieces = parsed.unordered | 'KeyByEntityChunk' >> beam.FlatMap(
      _key_by_chunk, entity_dict, sc.chunk_rows)
  offsets = (pieces
             | 'PieceRows' >> beam.Map(lambda kv: (kv[0], len(kv[1]['row'])))
             | 'RowsPerChunk' >> beam.CombinePerKey(sum)
             | 'ByEntity' >> beam.Map(lambda kv: (kv[0][0], (kv[0][1],
                                                              kv[1])))
             | 'ChunksOfEntity' >> beam.GroupByKey()
             | 'Offsets' >> beam.Map(_offsets))
  chunked = (pieces
             | 'GroupChunks' >> beam.GroupByKey()
             | 'WindowChunks' >> beam.ParDo(
                 ChunkWindows(sc, names), beam.pvalue.AsDict(offsets),
                 entity_dict).with_outputs('fragments', 'rows',
                                           main='windows'))
  assembled = (chunked.fragments
               | 'GroupFragments' >> beam.GroupByKey()
               | 'AssembleWindows' >> beam.FlatMap(_assemble, sc))
  rows_windowed = (
      (parsed.rows, chunked.rows)
      | 'AllRowsWindowed' >> beam.Flatten()
      | 'RowsWindowed' >> beam.Map(lambda r: r[1])
      | 'SumRowsWindowed' >> beam.CombineGlobally(
          lambda arrs: [int(v) for v in np.sum(
              [np.asarray(a) for a in arrs] or [np.zeros(len(names))],
              axis=0)]).without_defaults())
  # Three branches, not flattened: a Flatten here would make the local
  # runner hold every window before normalizing them.
  return [('Streamed', parsed.windows), ('Chunked', chunked.windows),
          ('Crossing', assembled)], rows_windowed


def _class_counts(read, cfg, normalized):
  """((split, label), examples) before rebalancing, as rebalancing reads
  them: rows from the statistics pass, windows once they are formed."""
  names = cfg.split_names
  if cfg.rebalance == 'none':
    return read['row_classes'] | 'NoClassCounts' >> beam.Filter(
        lambda _: False)
  if not cfg.settings.windowed:
    return batch_examples.sum_counts(read['row_classes'], 'CountRowClasses')
  return ([part | f'WindowClasses[{name}]' >> beam.FlatMap(
      lambda b: [((names[s], l), 1) for s, l in zip(
          b['split'].tolist(), b[st.LABEL_TEXT]) if s >= 0])
           for name, part in normalized]
          | 'AllWindowClasses' >> beam.Flatten()
          | 'CountWindowClasses' >> beam.CombinePerKey(sum))


class BuildSensorRecords(skeleton.BuildRecords):
  """The example pass: rows or windows -> the exported transform ->
  [rebalance] -> records, grouped by shuffle bucket, per split."""

  def expand(self, read):
    cfg, plan, transform = self._cfg, self._plan, self._transform
    sc = cfg.settings
    if sc.windowed:
      examples, rows_windowed = _window_examples(read, cfg, plan)
    else:
      rows = read['files'] | 'SpreadFilesB' >> beam.Reshuffle() | (
          'ParseForExamples' >> beam.ParDo(
              RowExamplesFn(cfg, plan)))
      examples = [('Rows', rows | 'RowExamples' >> beam.Map(
          _row_examples, plan.columns.entity is not None))]
      rows_windowed = read['files'] | 'NoRowsWindowed' >> beam.Filter(
          lambda _: False)
    normalized = [(name, part | f'Normalize[{name}]' >> beam.ParDo(
        batch_examples.ApplyTransform(self._staging, _transform_inputs,
                                      st.VALUES),
        beam.pvalue.AsList(transform.done))) for name, part in examples]
    class_counts = _class_counts(read, cfg, normalized)
    buckets = (read['entity_stats'] if sc.windowed else read['counts']) | (
        'ShuffleBuckets' >> beam.combiners.ToList()) | 'BucketCount' >> (
            beam.Map(lambda stats: shuffle.shuffle_buckets(
                _expected_examples(stats, sc))))
    spec = feature_spec(cfg, plan)
    parts = [part | f'ToRecords[{name}]' >> beam.ParDo(
        batch_examples.ToRecords(cfg, functools.partial(_encode, spec=spec)),
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
        batch_examples.ShuffleRecords(cfg.split_names,
                                      self.spill_folder()))
    out = {records_key(s): r for s, r in zip(cfg.split_names, per_split)}
    out.update(
        before=batch_examples.sum_counts(tagged('before'), 'SumBefore'),
        after=batch_examples.sum_counts(tagged('after'), 'SumAfter'),
        formed=batch_examples.sum_counts(tagged('formed'), 'SumFormed'),
        rows_windowed=rows_windowed)
    return out


def analysis(cfg, plan: SensorInput):
  """(the analysis input's Arrow schema, the preprocessing_fn)."""
  sc = cfg.settings
  channels = len(plan.columns.channels)
  return (st.analysis_adapter_config(sc.window_length, channels),
          st.make_preprocessing_fn(channels, cfg.normalization,
                                   sc.missing == 'impute', sc.bucketize))


def feature_spec(cfg, plan: SensorInput) -> dict:
  """The stored features."""
  sc = cfg.settings
  return st.feature_spec(sc.window_length, len(plan.columns.channels),
                         sc.bucketize, plan.columns.entity is not None,
                         cfg.rebalance == 'weight')


class EntityStats(NamedTuple):
  """What the statistics pass learns about one entity."""
  rows: int
  first: int  # ns
  last: int  # ns
  source: Optional[str]  # its only input file; None when in several
  ordered: bool  # its rows are in time order in that file


def _streamable(stats: EntityStats) -> bool:
  """Windowed while reading: in one file, in time order."""
  return stats.source is not None and stats.ordered


def _expected_examples(stats, sc) -> int:
  if sc.windowed:
    return sum(win.window_count(es[0], sc.window_length, sc.window_stride)
               for _, es in stats)
  return sum(n for (_, kind), n in stats if kind == 'used')


def _encode(batch, label_ids, weights, spec):
  return st.to_example_records(batch, label_ids, spec, weights)


def _transform_inputs(batch, lo, hi):
  # Every input of the graph, the analysis-only ones empty: when one is
  # missing, TensorFlow first tries (and fails) to bind the call and formats
  # every input tensor into an error message, which costs ten times the
  # transform itself.
  return st.transform_inputs(np.asarray(batch[st.VALUES][lo:hi], np.float32))


def _merge_ranges(values):
  merged = None
  for v in values:
    if merged is None:
      merged = EntityStats(*v)
      continue
    same = merged.source is not None and merged.source == v[3]
    merged = EntityStats(merged.rows + v[0], min(merged.first, v[1]),
                         max(merged.last, v[2]), merged.source if same
                         else None, merged.ordered and v[4])
  return merged
