"""The sensor preprocessing_fn with real tf.Transform, exact statistics and
the Example encoder."""

import numpy as np
import pytest

from transforms.modalities.sensor import preprocessing


def _analyze_and_transform(tmp_path, train, values, normalization,
                           impute=False, bucketize=0, length=0):
  """Runs AnalyzeDataset on `train` rows and the exported transform on
  `values`; returns the transform's outputs."""
  import apache_beam as beam
  import tensorflow_transform as tft
  import tensorflow_transform.beam as tft_beam
  channels = train.shape[1]
  config = preprocessing.analysis_adapter_config(length, channels)
  fn = preprocessing.make_preprocessing_fn(channels, normalization, impute,
                                           bucketize)
  out = str(tmp_path / 'tft')
  with beam.Pipeline() as p:
    with tft_beam.Context(temp_dir=str(tmp_path / 'tmp'),
                          force_tf_compat_v1=False):
      batches = p | beam.Create([
          preprocessing.analysis_record_batch(train[:40], length, channels,
                                              block=7),
          preprocessing.analysis_record_batch(train[40:], length, channels,
                                              block=7)])
      transform_fn = (batches, config) | tft_beam.AnalyzeDataset(fn)
      _ = transform_fn | tft_beam.WriteTransformFn(out)
  layer = tft.TFTransformOutput(out).transform_features_layer()
  result = layer(preprocessing.transform_inputs(values))
  return {k: v.numpy() for k, v in result.items()}


def test_zscore_uses_training_mean_and_std_and_imputes(tmp_path):
  rng = np.random.default_rng(0)
  train = np.stack([rng.normal(300.0, 0.5, 100),
                    rng.normal(-2.0, 3.0, 100)], axis=1)
  train[3, 1] = np.nan  # missing values do not enter the statistics
  finite = [train[:, 0], train[:, 1][np.isfinite(train[:, 1])]]
  mean = np.array([c.mean() for c in finite])
  std = np.array([c.std() for c in finite])
  probe = np.array([[300.5, 1.0], [np.nan, -2.0]], np.float32)
  out = _analyze_and_transform(tmp_path, train, probe, 'zscore', impute=True)
  expected = (np.where(np.isnan(probe), mean, probe) - mean) / std
  np.testing.assert_allclose(out[preprocessing.VALUES], expected, rtol=1e-3,
                             atol=1e-3)
  assert out[preprocessing.VALUES][1, 0] == pytest.approx(0.0, abs=1e-3)


def test_minmax_on_windows_and_quantile_buckets(tmp_path):
  train = np.stack([np.arange(100, dtype=np.float64),
                    np.full(100, 5.0)], axis=1)
  window = np.array([[[0.0, 5.0], [99.0, 5.0], [60.0, 7.0]]], np.float32)
  out = _analyze_and_transform(tmp_path, train, window, 'minmax',
                               bucketize=4, length=3)
  # A constant channel keeps x - min instead of dividing by zero.
  np.testing.assert_allclose(out[preprocessing.VALUES][0],
                             [[0.0, 0.0], [1.0, 0.0], [60 / 99, 2.0]],
                             atol=1e-6)
  buckets = out[preprocessing.BUCKETS][0]
  assert buckets.shape == (3, 2)
  assert buckets[:, 0].tolist() == [0, 3, 2]
  assert buckets.min() >= 0 and buckets.max() <= 3


def test_channel_stats_match_numpy_in_any_grouping():
  rng = np.random.default_rng(1)
  data = np.stack([rng.normal(1e6, 0.01, 1000), rng.normal(0, 1, 1000)],
                  axis=1)
  data[::10, 1] = np.nan
  data[5, 1] = np.inf
  fn = preprocessing.ChannelStatsFn()
  accs = [fn.add_input(fn.create_accumulator(), part)
          for part in np.array_split(data, 7)]
  out = fn.extract_output(fn.merge_accumulators(accs))
  col1 = data[:, 1][np.isfinite(data[:, 1])]
  assert out['count'] == [1000, len(col1)]
  np.testing.assert_allclose(out['mean'], [data[:, 0].mean(), col1.mean()],
                             rtol=1e-12)
  np.testing.assert_allclose(out['std'], [data[:, 0].std(), col1.std()],
                             rtol=1e-6)
  assert out['min'][1] == col1.min() and out['max'][0] == data[:, 0].max()
  empty = fn.extract_output(fn.create_accumulator())
  assert empty['count'] == []


def test_records_are_deterministic_and_follow_the_spec():
  import tensorflow as tf
  spec = preprocessing.feature_spec(2, 3, 0, with_entity=True,
                                    with_weight=False)
  batch = {
      preprocessing.VALUES: np.arange(12, dtype=np.float32).reshape(2, 2, 3),
      preprocessing.LABEL_TEXT: ['run', 'walk'],
      preprocessing.ID: ['d1#0', 'd1#2'],
      preprocessing.ENTITY: ['d1', 'd1'],
      preprocessing.START_TIME: np.array([1, 3]),
      preprocessing.END_TIME: np.array([2, 4]),
  }
  ids = {'run': 0, 'walk': 1}
  first = preprocessing.to_example_records(batch, ids, spec)
  assert first == preprocessing.to_example_records(batch, ids, spec)
  parse_spec = {
      preprocessing.VALUES: tf.io.FixedLenFeature([2, 3], tf.float32),
      preprocessing.LABEL: tf.io.FixedLenFeature([], tf.int64),
      preprocessing.LABEL_TEXT: tf.io.FixedLenFeature([], tf.string),
      preprocessing.ID: tf.io.FixedLenFeature([], tf.string),
      preprocessing.ENTITY: tf.io.FixedLenFeature([], tf.string),
      preprocessing.START_TIME: tf.io.FixedLenFeature([], tf.int64),
      preprocessing.END_TIME: tf.io.FixedLenFeature([], tf.int64),
  }
  parsed = tf.io.parse_example(first, parse_spec)
  np.testing.assert_array_equal(parsed[preprocessing.VALUES].numpy(),
                                batch[preprocessing.VALUES])
  assert parsed[preprocessing.LABEL].numpy().tolist() == [0, 1]
  assert parsed[preprocessing.END_TIME].numpy().tolist() == [2, 4]
  example = tf.train.Example.FromString(first[0])
  assert set(example.features.feature) == set(spec)
