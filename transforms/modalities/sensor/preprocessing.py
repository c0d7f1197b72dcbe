"""Sensor normalization with tf.Transform, exact statistics, and Examples.

The `preprocessing_fn` maps a raw window (or row) of channel values,
`values` [length, channels] (or [channels]), to what is stored:

- missing values (NaN) -> the channel's training mean, with --missing impute;
- 'zscore': (x - mean) / std; 'minmax': (x - min) / (max - min); 'none';
- with --bucketize N, `buckets`: each raw value's quantile bucket (0..N-1).

The analyzers (`tft.mean`, `tft.var`, `tft.min`, `tft.max` per channel with
`reduce_instance_dims=False`, so their number does not grow with the
channels; `tft.quantiles` per channel) run over the training split's rows;
missing values (NaN) are left out. The pipeline feeds them the rows in blocks, as Arrow record
batches (one analysis row per block of rows: `analysis_record_batch`), so
tf.Transform handles a few hundred rows per million input rows instead of
one Python dict per row. Serving needs only `values`: tf.Transform prunes the
analysis-only inputs from the exported graph (the pipeline passes them
empty anyway: see transform_inputs).

`ChannelStatsFn` computes the same statistics exactly (float64, Chan's
parallel variance) for the manifest; the validation pipeline checks that
the exported transform normalizes with them.
"""

import math
from typing import Dict, List, Optional

import apache_beam as beam
import numpy as np

VALUES = 'values'
BUCKETS = 'buckets'
LABEL = 'label'
LABEL_TEXT = 'label_text'
ID = 'id'
ENTITY = 'entity'
TIME = 'time'
START_TIME = 'start_time'
END_TIME = 'end_time'
WEIGHT = 'weight'
# Analysis-only input: a block of training rows, flattened ([rows x
# channels] values, NaN where missing).
ANALYSIS_ROWS = 'analysis_rows'
# Rows per analysis instance.
ANALYSIS_BLOCK = 4096


def value_shape(length: int, channels: int) -> List[int]:
  return [length, channels] if length else [channels]


def feature_spec(length: int, channels: int, bucketize: int,
                 with_entity: bool, with_weight: bool) -> Dict[str, dict]:
  """The stored features as a JSON-able spec (recorded in the manifest)."""
  shape = value_shape(length, channels)
  spec = {
      VALUES: {'dtype': 'float32', 'shape': shape},
      LABEL: {'dtype': 'int64', 'shape': []},
      LABEL_TEXT: {'dtype': 'string', 'shape': []},
      ID: {'dtype': 'string', 'shape': []},
  }
  if with_entity:
    spec[ENTITY] = {'dtype': 'string', 'shape': []}
  if length:
    spec[START_TIME] = {'dtype': 'int64', 'shape': []}
    spec[END_TIME] = {'dtype': 'int64', 'shape': []}
  else:
    spec[TIME] = {'dtype': 'int64', 'shape': []}
  if bucketize:
    spec[BUCKETS] = {'dtype': 'int64', 'shape': shape}
  if with_weight:
    spec[WEIGHT] = {'dtype': 'float32', 'shape': []}
  return spec


def make_preprocessing_fn(channels: int, normalization: str, impute: bool,
                          bucketize: int):
  """Builds the preprocessing_fn (see the module docstring)."""

  def preprocessing_fn(inputs):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel

    x = inputs[VALUES]
    # The training rows, one row per line: the analyzers reduce over the
    # first axis, per channel, whatever the number of rows per instance.
    # Accumulated in float64: a float32 sum of a million values around 300
    # is off by more than a std of 0.5 can absorb.
    rows = tf.cast(tf.reshape(inputs[ANALYSIS_ROWS].values, [-1, channels]),
                   tf.float64)
    missing = tf.math.is_nan(rows)
    outputs = {}
    if impute or normalization == 'zscore':
      # tft.mean and tft.var leave NaN out.
      mean = tf.cast(tft.mean(rows, reduce_instance_dims=False, name='mean'),
                     tf.float32)
    if impute:
      x = tf.where(tf.math.is_nan(x), tf.broadcast_to(mean, tf.shape(x)), x)
    if bucketize:
      boundaries = [
          tft.quantiles(tf.cast(tf.boolean_mask(rows[:, c], ~missing[:, c]),
                                tf.float32),
                        num_buckets=bucketize, epsilon=0.001,
                        name=f'quantiles_{c}')
          for c in range(channels)]
      outputs[BUCKETS] = tf.stack(
          [tft.apply_buckets(x[..., c], boundaries[c])
           for c in range(channels)], axis=-1)
    if normalization == 'zscore':
      std = tf.cast(tf.sqrt(tft.var(rows, reduce_instance_dims=False,
                                    name='var')), tf.float32)
      x = (x - mean) / tf.where(std > 0, std, tf.ones_like(std))
    elif normalization == 'minmax':
      # tft.min and tft.max would keep NaN: they see +-inf instead.
      inf = tf.fill(tf.shape(rows), tf.constant(float('inf'), tf.float64))
      low = tft.min(tf.where(missing, inf, rows), reduce_instance_dims=False,
                    name='min')
      high = tft.max(tf.where(missing, -inf, rows),
                     reduce_instance_dims=False, name='max')
      low, span = tf.cast(low, tf.float32), tf.cast(high - low, tf.float32)
      x = (x - low) / tf.where(span > 0, span, tf.ones_like(span))
    outputs[VALUES] = x
    return outputs

  return preprocessing_fn


def transform_inputs(values: np.ndarray) -> dict:
  """The exported transform's inputs for raw values [n, ...]: the values
  and empty analysis inputs."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  n = len(values)
  inputs = {VALUES: tf.constant(values, tf.float32)}
  inputs[ANALYSIS_ROWS] = tf.sparse.SparseTensor(
      tf.zeros([0, 2], tf.int64), tf.zeros([0], tf.float32), [n, 0])
  return inputs


def analysis_record_batch(values: np.ndarray, length: int, channels: int,
                          block: int = ANALYSIS_BLOCK):
  """tf.Transform analysis input from training rows [n, channels].

  An Arrow record batch with one row per block of rows: the block's values
  flattened (NaN where missing) and a zero `values` (unused by the
  analyzers). Arrow input is what tf.Transform reads natively; instance
  dicts would be encoded as tf.train.Examples first, value by value.
  """
  import pyarrow as pa  # pylint: disable=import-outside-toplevel
  starts = list(range(0, len(values), block))
  size = int(np.prod(value_shape(length, channels)))
  dummy = pa.ListArray.from_arrays(
      np.arange(0, size * len(starts) + 1, size, dtype=np.int32),
      pa.array(np.zeros(size * len(starts), np.float32)))
  offsets = np.asarray([min(lo, len(values)) * channels
                        for lo in starts + [len(values)]], np.int64)
  flat = pa.array(np.ascontiguousarray(values, np.float32).reshape(-1))
  rows = pa.LargeListArray.from_arrays(offsets, flat)
  return pa.RecordBatch.from_arrays([dummy, rows], [VALUES, ANALYSIS_ROWS])


def analysis_adapter_config(length: int, channels: int):
  """How tf.Transform turns analysis_record_batch columns into tensors."""
  import pyarrow as pa  # pylint: disable=import-outside-toplevel
  from tensorflow_metadata.proto.v0 import schema_pb2  # pylint: disable=import-outside-toplevel
  from tfx_bsl.public import tfxio  # pylint: disable=import-outside-toplevel
  rep = schema_pb2.TensorRepresentation
  shape = schema_pb2.FixedShape(dim=[
      schema_pb2.FixedShape.Dim(size=d)
      for d in value_shape(length, channels)])
  reps = {
      VALUES: rep(dense_tensor=rep.DenseTensor(column_name=VALUES,
                                               shape=shape)),
      ANALYSIS_ROWS: rep(varlen_sparse_tensor=rep.VarLenSparseTensor(
          column_name=ANALYSIS_ROWS)),
  }
  schema = pa.schema([pa.field(VALUES, pa.list_(pa.float32())),
                      pa.field(ANALYSIS_ROWS, pa.large_list(pa.float32()))])
  return tfxio.TensorAdapterConfig(schema, reps)


class ChannelStatsFn(beam.CombineFn):
  """Exact per-channel count, mean, std, min and max of finite values.

  Input: float64 arrays [n, channels]. Merging uses Chan et al.'s parallel
  update of the sum of squared deviations, so large offsets (a temperature
  around 300 with a std of 0.01) keep their precision.
  """

  def create_accumulator(self):
    return None

  @staticmethod
  def _block(values):
    finite = np.isfinite(values)
    n = finite.sum(axis=0).astype(np.float64)
    safe = np.where(finite, values, 0.0)
    mean = np.divide(safe.sum(axis=0), n, out=np.zeros_like(n), where=n > 0)
    dev = np.where(finite, values - mean, 0.0)
    m2 = (dev * dev).sum(axis=0)
    low = np.where(finite, values, np.inf).min(axis=0)
    high = np.where(finite, values, -np.inf).max(axis=0)
    return n, mean, m2, low, high

  @staticmethod
  def _merge(a, b):
    if a is None:
      return b
    if b is None:
      return a
    na, ma, m2a, la, ha = a
    nb, mb, m2b, lb, hb = b
    n = na + nb
    delta = mb - ma
    with np.errstate(invalid='ignore', divide='ignore'):
      mean = np.where(n > 0, ma + delta * np.divide(nb, n, where=n > 0,
                                                    out=np.zeros_like(n)), 0)
      m2 = m2a + m2b + delta * delta * np.divide(na * nb, n, where=n > 0,
                                                 out=np.zeros_like(n))
    return n, mean, m2, np.minimum(la, lb), np.maximum(ha, hb)

  def add_input(self, acc, values):
    if len(values) == 0:
      return acc
    return self._merge(acc, self._block(np.asarray(values, np.float64)))

  def merge_accumulators(self, accs):
    out = None
    for a in accs:
      out = self._merge(out, a)
    return out

  def extract_output(self, acc):
    if acc is None:
      return {'count': [], 'mean': [], 'std': [], 'min': [], 'max': []}
    n, mean, m2, low, high = acc

    def finite(v):
      return [float(x) if math.isfinite(x) else None for x in v]

    std = np.sqrt(np.divide(m2, n, out=np.zeros_like(n), where=n > 0))
    return {'count': [int(v) for v in n], 'mean': finite(mean),
            'std': finite(std), 'min': finite(low), 'max': finite(high)}


def to_example_records(batch: dict, label_ids: dict, spec: dict,
                       weights: Optional[np.ndarray] = None) -> List[bytes]:
  """Serializes a batch of examples as deterministic tf.train.Examples.

  Args:
    batch: Arrays of one batch: VALUES [n, ...] float32, BUCKETS (optional)
      int64 like VALUES, LABEL_TEXT, ID, ENTITY (str), START_TIME/END_TIME
      or TIME (int64).
    label_ids: {label name: id}.
    spec: The stored feature spec (decides which features are written).
    weights: Per-example weights, for --rebalance weight.

  Returns:
    Serialized records (see transforms.example_encoding).
  """
  from transforms.output import example_encoding  # pylint: disable=import-outside-toplevel
  labels = batch[LABEL_TEXT]
  columns = {
      VALUES: ('float32', np.asarray(batch[VALUES], np.float32)),
      LABEL: ('int64', np.array([label_ids[l] for l in labels], np.int64)),
      LABEL_TEXT: ('bytes', labels),
      ID: ('bytes', batch[ID]),
  }
  if ENTITY in spec:
    columns[ENTITY] = ('bytes', batch[ENTITY])
  for key in (START_TIME, END_TIME, TIME):
    if key in spec:
      columns[key] = ('int64', np.asarray(batch[key], np.int64))
  if BUCKETS in spec:
    columns[BUCKETS] = ('int64', np.asarray(batch[BUCKETS], np.int64))
  if WEIGHT in spec:
    columns[WEIGHT] = ('float32', np.asarray(weights, np.float32))
  return example_encoding.encode(columns, len(labels))
