"""Steps both row-shaped modalities (sensor, text) share, on batches.

An example batch is a dict of equally long columns (NumPy arrays or lists)
with at least 'id', 'label_text' and 'split' (split index; -1 for an
example to leave out, such as a window that crosses a time cut-off).

    ApplyTransform   the exported tf.Transform graph on each batch
    ToRecords        rebalancing copies, class counts, serialized records,
                     grouped by (split, shuffle bucket)
    WriteShuffled    group the buckets, write each bucket in hash order,
                     per split: WriteSplit and a fingerprint

Elements are batches until the records meet the writer, so Beam's cost per
element is paid a few times per batch, not per example.
"""

import itertools
from typing import Callable, Dict, List

import apache_beam as beam
import numpy as np

from transforms.core import rebalance as rebalance_lib
from transforms.output import shards as sinks
from transforms.core.splits import unit_hash

# Examples per call of the exported transform.
TRANSFORM_BATCH = 4096
# Records per shuffle bucket the bucket count aims at (a bucket is grouped
# and sorted on one worker).
RECORDS_PER_BUCKET = 2000
ID, LABEL_TEXT, SPLIT = 'id', 'label_text', 'split'


def source_name(root: str, path: str) -> str:
  """An input file's name in example ids: its path below `root`."""
  root = root.rstrip('/')
  if root and path.startswith(root + '/'):
    return path[len(root) + 1:]
  return path.rsplit('/', 1)[-1]


def sum_counts(pcoll, label: str):
  """(key, n) pairs summed per key."""
  return pcoll | label >> beam.CombinePerKey(sum)


class LabelNames(beam.PTransform):
  """Lists of label names -> (sorted distinct names, {name: id})."""

  def expand(self, name_lists):
    names = name_lists | 'Distinct' >> beam.CombineGlobally(
        lambda lists: sorted(set().union(*map(set, lists))))
    ids = names | 'Ids' >> beam.Map(
        lambda ls: {n: i for i, n in enumerate(ls)})
    return names, ids


def concat_batches(batches: List[dict]) -> dict:
  """Joins example batches (lists and arrays key by key)."""
  if len(batches) == 1:
    return batches[0]
  out = {}
  for key, first in batches[0].items():
    parts = [b[key] for b in batches]
    out[key] = (list(itertools.chain.from_iterable(parts))
                if isinstance(first, list) else np.concatenate(parts))
  return out


def take(batch: dict, keep: np.ndarray) -> dict:
  """The examples of a batch where `keep` is True."""
  index = np.flatnonzero(keep)
  return {k: ([v[i] for i in index] if isinstance(v, list) else v[keep])
          for k, v in batch.items()}


def shuffle_buckets(expected_examples: int) -> int:
  """Shuffle buckets for the expected number of examples (a function of the
  data only, so reruns shuffle alike)."""
  return int(min(max(expected_examples // RECORDS_PER_BUCKET, 16), 1 << 16))


def _numpy(tensor):
  """A dense output as an array; a sparse one as a list of rows."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  if isinstance(tensor, tf.SparseTensor):
    n = int(tensor.dense_shape[0])
    rows = tensor.indices[:, 0].numpy()
    values = tensor.values.numpy()
    bounds = np.searchsorted(rows, np.arange(n + 1))
    return [values[bounds[i]:bounds[i + 1]] for i in range(n)]
  if isinstance(tensor, tf.RaggedTensor):
    return [np.asarray(r) for r in tensor.numpy()]
  return tensor.numpy()


class ApplyTransform(beam.DoFn):
  """Runs the exported tf.Transform graph on each batch.

  `make_inputs(batch, lo, hi)` returns the graph's inputs for examples
  [lo, hi) of a batch; the outputs are added to the batch under their
  names (dense outputs as arrays, sparse ones as lists of arrays).
  """

  def __init__(self, transform_dir: str, make_inputs: Callable,
               size_key: str):
    super().__init__()
    self._dir, self._make_inputs, self._size_key = (transform_dir,
                                                    make_inputs, size_key)
    self._layer = None

  def setup(self):
    self._layer = None

  def process(self, batch, transform_done):
    del transform_done  # only orders this step after the transform write
    if self._layer is None:
      import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel
      self._layer = tft.TFTransformOutput(
          self._dir).transform_features_layer()
    n = len(batch[self._size_key])
    outs: Dict[str, list] = {}
    for lo in range(0, n, TRANSFORM_BATCH):
      result = self._layer(self._make_inputs(batch, lo,
                                             min(n, lo + TRANSFORM_BATCH)))
      for key, tensor in result.items():
        outs.setdefault(key, []).append(_numpy(tensor))
    out = dict(batch)
    for key, parts in outs.items():
      out[key] = (list(itertools.chain.from_iterable(parts))
                  if isinstance(parts[0], list) else np.concatenate(parts))
    yield out


class ToRecords(beam.DoFn):
  """Example batches -> serialized records, grouped for the shuffle.

  Main output: ((split index, bucket), [(hash, record)]) per batch. Each
  record copy gets a seeded hash in [0, 1) of its id and copy number; the
  bucket is that hash times `buckets`, so after grouping every bucket is a
  uniform sample, written in hash order (as in sinks.SeededShuffle).
  Grouping a batch's records per bucket keeps the shuffle to a few
  elements per batch instead of one per record.

  Tagged outputs, counted per batch: 'formed' ((split name, examples), ''
  for examples left out), 'before' and 'after' class counts
  ((split, label), n), and whatever `describe(batch, split names)` yields
  as 'extra'.

  Args of the constructor:
    cfg: The PreprocessConfig (splits, rebalancing, seed).
    encode: encode(batch, label_ids, weights) -> records.
    describe: Optional per-batch statistics function.
  """

  def __init__(self, cfg, encode: Callable, describe: Callable = None):
    super().__init__()
    self._cfg, self._encode, self._describe = cfg, encode, describe

  def process(self, batch, label_ids, class_counts, buckets):
    cfg, names = self._cfg, self._cfg.split_names
    split = np.asarray(batch[SPLIT])
    left_out = int((split < 0).sum())
    if left_out:
      yield beam.pvalue.TaggedOutput('formed', ('', left_out))
      batch = take(batch, split >= 0)
      split = split[split >= 0]
    if not len(split):
      return
    labels = batch[LABEL_TEXT]
    for s in np.unique(split).tolist():
      yield beam.pvalue.TaggedOutput('formed', (names[s],
                                                int((split == s).sum())))
    if self._describe is not None:
      for item in self._describe(batch, names):
        yield beam.pvalue.TaggedOutput('extra', item)
    copies = np.ones(len(labels), np.int64)
    weights = None
    if cfg.rebalance != 'none':
      per_split: Dict[str, dict] = {}
      for (sp, label), n in class_counts:
        per_split.setdefault(sp, {})[label] = n
      weights = np.ones(len(labels), np.float32)
      for i, (s, label) in enumerate(zip(split.tolist(), labels)):
        name = names[s]
        mode = cfg.rebalance if name in cfg.rebalance_splits else 'none'
        copies[i] = rebalance_lib.copies(mode, batch[ID][i], label,
                                         per_split.get(name, {}), cfg.seed)
        if mode == 'weight':
          weights[i] = rebalance_lib.class_weight(label,
                                                  per_split.get(name, {}))
    before: Dict[tuple, int] = {}
    after: Dict[tuple, int] = {}
    for s, label, n in zip(split.tolist(), labels, copies.tolist()):
      key = (names[s], label)
      before[key] = before.get(key, 0) + 1
      after[key] = after.get(key, 0) + n
    for key, n in before.items():
      yield beam.pvalue.TaggedOutput('before', (key, n))
    for key, n in after.items():
      if n:
        yield beam.pvalue.TaggedOutput('after', (key, n))
    records = self._encode(batch, label_ids, weights)
    ids, seed = batch[ID], str(cfg.seed)
    groups: Dict[tuple, list] = {}
    for i, record in enumerate(records):
      for k in range(copies[i]):
        u = unit_hash('shuffle', seed, f'{ids[i]}#{k}')
        key = (int(split[i]), min(int(u * buckets), buckets - 1))
        groups.setdefault(key, []).append((u, record))
    yield from groups.items()


def _in_hash_order(item):
  (split, _), groups = item
  pairs = sorted((p for group in groups for p in group), key=lambda p: p[0])
  return split, [record for _, record in pairs]


class WriteShuffled(beam.PTransform):
  """Grouped records -> written splits.

  Input: ToRecords' main output. Output: (shards, fingerprints), the
  PCollections FinalizeDataset reads: (split, shard summary) and
  (split, {'fingerprint', 'records'}).
  """

  def __init__(self, cfg, staging: str):
    super().__init__()
    self._cfg, self._staging = cfg, staging

  def expand(self, grouped):
    cfg, names = self._cfg, self._cfg.split_names
    by_split = (grouped
                | 'GroupBuckets' >> beam.GroupByKey()
                | 'BucketInHashOrder' >> beam.Map(_in_hash_order)
                # -> (split index, [records])
                | 'PartitionBySplit' >> beam.Partition(
                    lambda group, n: group[0], len(names)))
    shards_all, fps_all = [], []
    for index, split in enumerate(names):
      groups = by_split[index] | f'Records[{split}]' >> beam.Map(
          lambda group: group[1])
      fps_all.append(
          groups
          | f'Fingerprint[{split}]' >> beam.CombineGlobally(
              sinks.FingerprintListsFn())
          | f'TagFingerprint[{split}]' >> beam.Map(
              lambda fp, s=split: (s, fp)))
      shards = (groups
                | f'OneRecordEach[{split}]' >> beam.FlatMap(lambda g: g)
                | f'WriteSplit[{split}]' >> sinks.WriteSplit(
                    self._staging, cfg.name, split, cfg.num_shards,
                    cfg.compression == 'gzip', cfg.index_files))
      shards_all.append(shards | f'TagShards[{split}]' >> beam.Map(
          lambda s, sp=split: (sp, s)))
    return (tuple(shards_all) | 'AllShards' >> beam.Flatten(),
            tuple(fps_all) | 'AllFingerprints' >> beam.Flatten())
