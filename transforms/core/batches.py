"""Steps both row-shaped modalities (sensor, text) share, on batches.

An example batch is a dict of equally long columns (NumPy arrays or lists)
with at least 'id', 'label_text' and 'split' (split index; -1 for an
example to leave out, such as a window that crosses a time cut-off).

    ApplyTransform   the exported tf.Transform graph on each batch
    ToRecords        rebalancing copies, class counts, serialized records,
                     grouped by (split, shuffle bucket)
    ShuffleRecords   group the buckets (core/shuffle.py), one record list
                     per split, for output/shards.WriteSplits

Elements are batches until the records meet the writer, so Beam's cost per
element is paid a few times per batch, not per example.
"""

import itertools
from typing import Callable, Dict, List

import apache_beam as beam
from apache_beam.utils import shared
from apache_beam.utils.windowed_value import WindowedValue
import numpy as np

from transforms.core import rebalance as rebalance_lib
from transforms.core import shuffle
from transforms.runtime import progress
from transforms.runtime import threads

# Examples per call of the exported transform.
TRANSFORM_BATCH = 4096
ID, LABEL_TEXT, SPLIT = 'id', 'label_text', 'split'
# The progress counter of the records encoded (runtime/progress.py).
ENCODED = 'encoded'


def source_name(root: str, path: str) -> str:
  """An input file's name in example ids: its path below `root`."""
  root = root.rstrip('/')
  if root and path.startswith(root + '/'):
    return path[len(root) + 1:]
  return path.rsplit('/', 1)[-1]


def sum_counts(pcoll, label: str):
  """(key, n) pairs summed per key."""
  return pcoll | label >> beam.CombinePerKey(sum)


def inputs_per_split(counts, label: str):
  """(split, inputs) from a statistics pass's ((split, kind), n) sums."""
  return counts | label >> beam.FlatMap(
      lambda kv: [(kv[0][0], kv[1])] if kv[0][1] == 'inputs' else [])


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


class _TransformGraph:
  """The exported transform's Keras layer (a holder Shared can refer to)."""

  def __init__(self, layer):
    self.layer = layer


class ApplyTransform(beam.DoFn):
  """Runs the exported tf.Transform graph on each batch.

  `make_inputs(batch, lo, hi)` returns the graph's inputs for examples
  [lo, hi) of a batch; the outputs are added to the batch under their
  names (dense outputs as arrays, sparse ones as lists of arrays).

  The graph runs on a thread of its own, one batch ahead: TensorFlow
  releases the interpreter lock while it runs, so the next batch is
  transformed on the second core while this thread reads, encodes and
  shuffles the one before. A batch's result is handed on when the next
  batch arrives, or at the end of the bundle; a graph error fails the
  bundle as before.
  """

  # Batches handed to the graph thread and not yet handed on.
  AHEAD = 1

  def __init__(self, transform_dir: str, make_inputs: Callable,
               size_key: str):
    super().__init__()
    self._dir, self._make_inputs, self._size_key = (transform_dir,
                                                    make_inputs, size_key)
    # One loaded graph per worker process, shared by its threads.
    self._shared = shared.Shared()
    self._graph = None
    self._ahead = None

  def setup(self):
    self._graph = None
    self._ahead = threads.ThreadAhead('apply-transform', self.AHEAD)

  def start_bundle(self):
    self._ahead.start_bundle()

  def _load(self) -> '_TransformGraph':
    import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel
    return _TransformGraph(
        tft.TFTransformOutput(self._dir).transform_features_layer())

  def _apply(self, batch) -> dict:
    n = len(batch[self._size_key])
    outs: Dict[str, list] = {}
    for lo in range(0, n, TRANSFORM_BATCH):
      result = self._graph.layer(self._make_inputs(
          batch, lo, min(n, lo + TRANSFORM_BATCH)))
      for key, tensor in result.items():
        outs.setdefault(key, []).append(_numpy(tensor))
    out = dict(batch)
    for key, parts in outs.items():
      out[key] = (list(itertools.chain.from_iterable(parts))
                  if isinstance(parts[0], list) else np.concatenate(parts))
    return out

  def process(self, batch, transform_done, window=beam.DoFn.WindowParam,
              timestamp=beam.DoFn.TimestampParam):
    del transform_done  # only orders this step after the transform write
    if self._graph is None:
      # Loaded on first use, not in setup(): the graph is written by the
      # analysis, which this step's side input waits for.
      self._graph = self._shared.acquire(self._load, tag=self._dir)
    for result, _ in self._ahead.submit(self._apply, batch,
                                        (window, timestamp)):
      yield result

  def finish_bundle(self):
    for result, (window, timestamp) in self._ahead.drain():
      yield WindowedValue(result, timestamp, (window,))

  def teardown(self):
    self._ahead.close()


class ToRecords(beam.DoFn):
  """Example batches -> serialized records, grouped for the shuffle.

  Main output: ((split index, bucket), [(hash, record)]) per batch. Each
  record copy gets a seeded hash in [0, 1) of its id and copy number; the
  bucket is that hash times `buckets`, so after grouping every bucket is a
  uniform sample, written in position order (core/shuffle.py).
  Grouping a batch's records per bucket keeps the shuffle to a few
  elements per batch instead of one per record.

  Tagged outputs, counted per batch: 'formed' ((split name, examples), ''
  for examples left out), 'before' and 'after' class counts
  ((split, label), n), and whatever `describe(batch, split names)` yields
  as 'extra'. The records encoded are counted for the progress line.

  Args of the constructor:
    cfg: The PreprocessConfig (splits, rebalancing, seed).
    encode: encode(batch, label_ids, weights) -> records.
    describe: Optional per-batch statistics function.
  """

  def __init__(self, cfg, encode: Callable, describe: Callable = None):
    super().__init__()
    self._cfg, self._encode, self._describe = cfg, encode, describe
    self._encoded = progress.counter(cfg.modality, ENCODED)

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
      plan = rebalance_lib.Plan(cfg.rebalance, cfg.rebalance_splits, cfg.seed,
                                class_counts)
      weights = np.ones(len(labels), np.float32)
      for i, (s, label) in enumerate(zip(split.tolist(), labels)):
        copies[i] = plan.copies(names[s], batch[ID][i], label)
        weights[i] = plan.weight(names[s], label)
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
    self._encoded.inc(len(records))
    ids = batch[ID]
    # Every copy of every record, in order: its record and shuffle key.
    index = np.repeat(np.arange(len(records)), copies)
    places = shuffle.positions(cfg.seed, (
        f'{ids[i]}#{k}' for i, n in enumerate(copies.tolist())
        for k in range(n)))
    groups: Dict[tuple, list] = {}
    for u, s, b, i in zip(places.tolist(), split[index].tolist(),
                          shuffle.buckets_of(places, buckets).tolist(),
                          index.tolist()):
      groups.setdefault((s, b), []).append((u, records[i]))
    yield from groups.items()


class ShuffleRecords(beam.PTransform):
  """ToRecords' main output (one PCollection, or a tuple of them) -> one
  PCollection of record lists per split (in the order of the split names),
  each list a shuffle bucket in position order: the input of
  output/shards.WriteSplits. With `spill_folder`, the records wait there
  while they are grouped (core/shuffle.py; local runs)."""

  def __init__(self, split_names, spill_folder=None):
    super().__init__()
    self._names = list(split_names)
    self._spill = spill_folder

  def expand(self, grouped):
    names = self._names
    by_split = (grouped
                | 'ShuffleGroups' >> shuffle.ShuffleGroups(self._spill)
                # -> (split index, [records])
                | 'PartitionBySplit' >> beam.Partition(
                    lambda group, n: group[0], len(names)))
    return tuple(by_split[index] | f'Records[{split}]' >> beam.Map(
        lambda group: group[1]) for index, split in enumerate(names))
