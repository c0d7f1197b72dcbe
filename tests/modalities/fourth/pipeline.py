"""The numbers modality's two skeleton stages (see core/skeleton.py).

    ReadNumbers          each CSV file parsed in one batch; bad rows (no
                         id or label, a value that is not a finite number)
                         -> dead letters; rows split by a hash of their id;
                         inputs, classes and label names counted; the
                         training values -> tf.Transform's analysis
    BuildNumberRecords   the exported transform (z-score) on each batch,
                         rebalancing, the seeded shuffle and serialization
                         (core/batches.py), one record list per bucket

A file is one batch, held while it is parsed: the modality is for tests,
not for files larger than memory.
"""

import collections
import csv
import functools
import io
import math
from typing import List, NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from transforms.core import batches
from transforms.core import label_text
from transforms.core import metrics
from transforms.core import shuffle
from transforms.core import skeleton
from transforms.core import splits as split_lib
from transforms.core.dead_letters import dead_letter
from transforms.core.errors import UsageError
from transforms.sources import files as files_lib

ID, VALUE, LABEL, LABEL_TEXT, WEIGHT, SPLIT = (
    'id', 'value', 'label', 'label_text', 'weight', 'split')
DEAD, COUNTS, LABELS, ANALYSIS, CLASSES, STATS = (
    'dead', 'counts', 'labels', 'analysis', 'classes', 'stats')


class NumbersInput(NamedTuple):
  """What the launch-time input check found: the CSV files."""
  files: List[str]


def _open_text(path: str):
  """A CSV file as text, through Beam's file systems (gs:// too)."""
  return io.TextIOWrapper(FileSystems.open(path), encoding='utf-8',
                          newline='')


def check_input(cfg) -> NumbersInput:
  """Lists the CSV files and checks that they have the three columns.

  Raises:
    UsageError: No file, or a file without one of the columns.
  """
  paths = sorted(files_lib.match_paths(cfg.input))
  if not paths:
    raise UsageError(f'no file matches --input {cfg.input}.')
  nc = cfg.settings
  for path in paths:
    with _open_text(path) as f:
      header = [c.strip() for c in next(csv.reader(f), [])]
    missing = [c for c in (nc.id_column, nc.value_column, nc.label_column)
               if c not in header]
    if missing:
      raise UsageError(f'{path} has no column {", ".join(missing)} (its '
                       f'columns: {", ".join(header)}).')
  return NumbersInput(paths)


def parse_row(cells: dict, nc):
  """(id, value, label) of a CSV row.

  Raises:
    ValueError: The row cannot be an example; the message says why.
  """
  if None in cells:
    raise ValueError('the row has more fields than the header')
  example_id = (cells.get(nc.id_column) or '').strip()
  label = label_text.canonical(cells.get(nc.label_column) or '')
  raw = (cells.get(nc.value_column) or '').strip()
  if not example_id:
    raise ValueError(f'no id in column {nc.id_column!r}')
  if not label:
    raise ValueError(f'no label in column {nc.label_column!r}')
  try:
    value = float(raw)
  except ValueError:
    raise ValueError(f'value {raw!r} in column {nc.value_column!r} is not a '
                     'number') from None
  if not math.isfinite(value):
    raise ValueError(f'value {raw!r} in column {nc.value_column!r} is not a '
                     'finite number')
  return example_id, value, label


class _ParseFileFn(beam.DoFn):
  """A CSV file -> one batch of its good rows ({'id', 'value',
  'label_text', 'split'}), and tagged: dead letters, ((split,
  'inputs'|'used'), n), label names, ((split, label), n), the training
  values as tf.Transform instance dicts, and their (n, sum, sum of
  squares)."""

  def __init__(self, cfg):
    super().__init__()
    self._cfg = cfg
    self._parsed = metrics.counter(cfg.modality, 'parsed')

  def process(self, path):
    cfg = self._cfg
    names = cfg.split_names
    source = path.rsplit('/', 1)[-1]
    good, bad = [], []
    with _open_text(path) as f:
      for row, cells in enumerate(csv.DictReader(f)):
        try:
          good.append(parse_row(cells, cfg.settings))
        except ValueError as e:
          bad.append((f'{source}:{row}',
                      (cells.get(cfg.settings.id_column) or '').strip(),
                      str(e)))
    for where, example_id, reason in bad:
      split = (split_lib.assign_split(example_id, cfg.split_ratios)
               if example_id else '')
      yield beam.pvalue.TaggedOutput(DEAD, dead_letter(where, 'parse',
                                                       reason, split or None))
      yield beam.pvalue.TaggedOutput(COUNTS, ((split, 'inputs'), 1))
    if not good:
      return
    self._parsed.inc(len(good))
    ids, values, labels = (list(c) for c in zip(*good))
    split = split_lib.hash_splits(ids, cfg.split_ratios, names)
    values = np.asarray(values, np.float32)
    yield beam.pvalue.TaggedOutput(LABELS, sorted(set(labels)))
    for s in np.unique(split).tolist():
      n = int((split == s).sum())
      yield beam.pvalue.TaggedOutput(COUNTS, ((names[s], 'inputs'), n))
      yield beam.pvalue.TaggedOutput(COUNTS, ((names[s], 'used'), n))
    for (s, label), n in collections.Counter(zip(split.tolist(),
                                                 labels)).items():
      yield beam.pvalue.TaggedOutput(CLASSES, ((names[s], label), n))
    # There is a train split: the options refuse zscore without one.
    train = values[split == names.index('train')]
    for v in train.tolist():
      yield beam.pvalue.TaggedOutput(ANALYSIS, {VALUE: np.float32(v)})
    wide = train.astype(np.float64)
    yield beam.pvalue.TaggedOutput(STATS, (len(wide), float(wide.sum()),
                                           float((wide * wide).sum())))
    yield {ID: ids, VALUE: values, LABEL_TEXT: labels, SPLIT: split}


def _sum_stats(parts) -> tuple:
  """(n, sum, sum of squares) of several, summed (empty: zeros)."""
  n, total, squares = 0, 0.0, 0.0
  for a, b, c in parts:
    n, total, squares = n + a, total + b, squares + c
  return n, total, squares


class ReadNumbers(skeleton.ReadInputs):
  """ReadInputs: the skeleton's dict plus 'rows' (the good rows' batches),
  'counts', 'classes' and 'train_stats' (n, sum, sum of squares of the
  training values, for the manifest)."""

  def expand(self, pbegin):
    parsed = (pbegin
              | 'InputFiles' >> beam.Create(self._plan.files)
              | 'ParseFiles' >> beam.ParDo(_ParseFileFn(self._cfg))
              .with_outputs(DEAD, COUNTS, LABELS, ANALYSIS, CLASSES, STATS,
                            main='rows'))
    counts = batches.sum_counts(parsed[COUNTS], 'SumCounts')
    return {
        'dead': parsed[DEAD],
        'inputs': batches.inputs_per_split(counts, 'Inputs'),
        'labels': parsed[LABELS],
        'analysis': parsed[ANALYSIS],
        'skipped': pbegin | 'NothingSkipped' >> beam.Create([0]),
        'rows': parsed.rows,
        'counts': counts,
        'classes': parsed[CLASSES],
        'train_stats': parsed[STATS] | 'TrainStats' >> (
            beam.CombineGlobally(_sum_stats)),
    }


def _transform_inputs(batch, lo, hi):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return {VALUE: tf.constant(batch[VALUE][lo:hi], tf.float32)}


def _encode(batch, label_ids, weights, spec):
  from transforms.output import example_encoding  # pylint: disable=import-outside-toplevel
  labels = batch[LABEL_TEXT]
  columns = {
      LABEL: ('int64', np.array([label_ids[l] for l in labels], np.int64)),
      LABEL_TEXT: ('bytes', labels),
      ID: ('bytes', batch[ID]),
      VALUE: ('float32', np.asarray(batch[VALUE], np.float32)),
  }
  if WEIGHT in spec:
    columns[WEIGHT] = ('float32', np.asarray(weights, np.float32))
  return example_encoding.encode(columns, len(labels))


class BuildNumberRecords(skeleton.BuildRecords):
  """BuildRecords: the rows' batches through the exported transform ->
  [rebalance] -> records, grouped by shuffle bucket, per split."""

  def expand(self, read):
    cfg, transform = self._cfg, self._transform
    transformed = read['rows'] | 'Transform' >> beam.ParDo(
        batches.ApplyTransform(self._staging, _transform_inputs, ID),
        beam.pvalue.AsList(transform.done))
    class_counts = batches.sum_counts(read['classes'], 'CountClasses')
    buckets = read['counts'] | 'ShuffleBuckets' >> beam.combiners.ToList() | (
        'BucketCount' >> beam.Map(lambda stats: shuffle.shuffle_buckets(
            sum(n for (_, kind), n in stats if kind == 'used'))))
    records = transformed | 'ToRecords' >> beam.ParDo(
        batches.ToRecords(cfg, functools.partial(_encode,
                                                 spec=feature_spec(cfg))),
        beam.pvalue.AsSingleton(transform.label_ids),
        beam.pvalue.AsList(class_counts),
        beam.pvalue.AsSingleton(buckets)).with_outputs(
            'formed', 'before', 'after', 'extra', main='records')
    per_split = records.records | 'ShuffleRecords' >> (
        batches.ShuffleRecords(cfg.split_names, self.spill_folder()))
    out = {skeleton.records_key(s): r
           for s, r in zip(cfg.split_names, per_split)}
    out.update(before=batches.sum_counts(records.before, 'SumBefore'),
               after=batches.sum_counts(records.after, 'SumAfter'))
    return out


def analysis():
  """(the analysis input's schema, the preprocessing_fn): the value
  z-scored by the training split's mean and standard deviation."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from tensorflow_transform.tf_metadata import dataset_metadata  # pylint: disable=import-outside-toplevel

  def preprocessing_fn(inputs):
    import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel
    return {VALUE: tft.scale_to_z_score(inputs[VALUE])}

  return (dataset_metadata.DatasetMetadata.from_feature_spec(
      {VALUE: tf.io.FixedLenFeature([], tf.float32)}), preprocessing_fn)


def feature_spec(cfg) -> dict:
  """The stored features."""
  spec = {LABEL: {'dtype': 'int64', 'shape': []},
          LABEL_TEXT: {'dtype': 'string', 'shape': []},
          ID: {'dtype': 'string', 'shape': []},
          VALUE: {'dtype': 'float32', 'shape': []}}
  if cfg.rebalance == 'weight':
    spec[WEIGHT] = {'dtype': 'float32', 'shape': []}
  return spec


def manifest_section(cfg, values):
  """(the manifest's numbers section, its normalization entry with the
  training mean and standard deviation)."""
  n, total, squares = values['train_stats']
  mean = total / n if n else 0.0
  std = math.sqrt(max(squares / n - mean * mean, 0.0)) if n else 0.0
  nc = cfg.settings
  section = {'columns': {'id': nc.id_column, 'value': nc.value_column,
                         'label': nc.label_column}}
  normalization = {'method': 'zscore', 'applied': 'stored',
                   'statistics_split': 'train', 'rows_analyzed': n,
                   'mean': mean, 'std': std}
  return section, normalization
