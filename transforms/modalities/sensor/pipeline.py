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
records on their way to the shuffle and the writer. See windows.py for how
windows are cut without holding an entity's whole history.

This module holds the two stages (ReadRows, BuildSensorRecords); their
parts are in inputs.py (the input checked at launch), parse.py (the two
passes' DoFns), entity_statistics.py (what the statistics pass learns of
each entity), time_chunks.py (the (entity, time chunk) grouping),
example_batches.py (window and row batches) and manifest_section.py.
"""

import functools

import apache_beam as beam
import numpy as np
from apache_beam.io import fileio

from transforms.core import batches
from transforms.core import shuffle
from transforms.core import skeleton
from transforms.core.skeleton import records_key
from transforms.modalities.sensor import entity_statistics
from transforms.modalities.sensor import example_batches
from transforms.modalities.sensor import inputs
from transforms.modalities.sensor import parse
from transforms.modalities.sensor import preprocessing
from transforms.modalities.sensor import time_chunks
from transforms.sources import tables
from transforms.modalities.sensor import windows


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
                     parse.RowStatisticsFn(cfg, plan)).with_outputs(
                         parse.DEAD, parse.ENTITY_STATS, parse.COUNTS,
                         parse.LABELS, parse.ANALYSIS, parse.TRAIN_VALUES,
                         parse.ROW_CLASSES))
    counts = batches.sum_counts(stats_out[parse.COUNTS], 'SumCounts')
    # -> ((split, 'inputs'|'dead'|'dropped'|'used'), rows)
    columns = plan.columns
    return {
        'dead': stats_out[parse.DEAD],
        'inputs': batches.inputs_per_split(counts, 'Inputs'),
        'labels': stats_out[parse.LABELS],
        'analysis': stats_out[parse.ANALYSIS],
        'skipped': pbegin | 'NothingSkipped' >> beam.Create([0]),
        'files': files, 'counts': counts,
        'entity_stats': (stats_out[parse.ENTITY_STATS]
                         | 'EntityRange' >> beam.CombinePerKey(
                             lambda vs: entity_statistics.merge_ranges(vs))),
        # -> (entity, (rows, first time, last time, source, ordered))
        'train_stats': stats_out[parse.TRAIN_VALUES] | 'TrainStats' >> (
            beam.CombineGlobally(preprocessing.ChannelStatsFn())),
        'row_classes': stats_out[parse.ROW_CLASSES],
        'columns': pbegin | 'Columns' >> beam.Create([{
            'timestamp': columns.timestamp, 'entity': columns.entity,
            'label': columns.label, 'channels': list(columns.channels)}]),
    }



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
                parse.RowExamplesFn(cfg, plan), entity_dict).with_outputs(
                    'windows', 'rows', 'shapes', 'unordered', main='ordered'))
  # Entities in strictly increasing time within one file were streamed;
  # the rows of the others go by (entity, time chunk).
  chunked = time_chunks.chunked_series(sc, names, entity_dict, parsed.unordered)
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
            example_batches.row_examples, with_entity)),
        ('ChunkRows', chunked['chunks'] | 'ChunkRowExamples' >> beam.Map(
            example_batches.chunk_rows, with_entity))]
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


def analysis(cfg, plan: inputs.SensorInput):
  """(the analysis input's Arrow schema, the preprocessing_fn)."""
  sc = cfg.settings
  channels = len(plan.columns.channels)
  return (preprocessing.analysis_adapter_config(sc.window_length, channels),
          preprocessing.make_preprocessing_fn(channels, cfg.normalization,
                                              sc.missing == 'impute',
                                              sc.bucketize))


def feature_spec(cfg, plan: inputs.SensorInput) -> dict:
  """The stored features."""
  sc = cfg.settings
  return preprocessing.feature_spec(sc.window_length,
                                    len(plan.columns.channels), sc.bucketize,
                                    plan.columns.entity is not None,
                                    cfg.rebalance == 'weight')


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
