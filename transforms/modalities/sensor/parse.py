"""The two passes over each input file, as DoFns that read it in row
batches: `RowStatisticsFn` (the statistics pass: dead letters, counts,
per-entity ranges, the analysis input) and `RowExamplesFn` (the example
pass: rows, or the windows of entities in time order in one file, and the
other rows for the (entity, time chunk) grouping of time_chunks.py).
"""

import apache_beam as beam
import numpy as np

from transforms.core import batches
from transforms.core import metrics
from transforms.runtime import processes
from transforms.runtime import progress
from transforms.modalities.sensor import entity_statistics
from transforms.modalities.sensor import example_batches
from transforms.modalities.sensor import inputs
from transforms.modalities.sensor import preprocessing
from transforms.modalities.sensor import ranges as sensor_ranges
from transforms.modalities.sensor import stream_windower
from transforms.sources import files as files_lib
from transforms.sources import tables
from transforms.modalities.sensor import windows
from transforms.core.dead_letters import dead_letter

DEAD = 'dead'
# Outputs of the statistics pass.
ENTITY_STATS, COUNTS, LABELS, ANALYSIS, TRAIN_VALUES, ROW_CLASSES = (
    'entity_stats', 'counts', 'labels', 'analysis', 'train_values',
    'row_classes')


class _ReadRowsFn(beam.DoFn):
  """Reads one input file in row batches, counting the bytes read for the
  progress line; what both passes share."""

  def __init__(self, cfg, plan: inputs.SensorInput):
    super().__init__()
    self._cfg, self._plan = cfg, plan
    self._rule = sensor_ranges.split_rule(cfg)
    workers = cfg.local_processes
    self._workers = processes.MaybeAhead(
        workers, inputs.WORKER_MODULES, 2 * workers, 'parse CSV ranges')
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
  at the file's end (entity_statistics.FileEntities), counts per (split, kind),
  label names, tf.Transform analysis batches and exact statistics inputs of
  the training rows, and class counts (one example per row)."""

  def __init__(self, cfg, plan: inputs.SensorInput):
    super().__init__(cfg, plan)
    self._parsed = metrics.counter('sensor', 'parsed')
    self._rows = progress.counter('sensor', 'rows')

  def process(self, path):
    source = batches.source_name(self._plan.root, path)
    # What this file shows of each entity, emitted once at its end.
    seen = entity_statistics.FileEntities()
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
    gaps = entity_statistics.MaxGaps(sc.max_gap, entity_stats)
    streamer = stream_windower.StreamWindower(
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
      if not entity_statistics.streamable(entity_stats[entity]):
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
        batch, lost = example_batches.window_batch(
            entity, global_starts, starts, time, vals, label, sp, sc,
            labels.names, example_batches.span_bound(
                sc, gaps.median(entity), gaps.get(entity)))
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
