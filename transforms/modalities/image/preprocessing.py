"""Image normalization with tf.Transform: full-pass statistics, one graph.

The `preprocessing_fn` built here decodes the stored image and normalizes it:

- 'none': the decoded pixels as float32 in [0, 255] (tf.Transform outputs
  cannot be uint8);
- 'scale': float32 pixels divided by 255;
- 'zscore': float32 (pixel / 255 - mean) / std per channel, where mean and std
  are tf.Transform analyzers (`tft.mean`) over the training split.

The analyzers read the per-image channel means that the decode step computed
(`features.CHANNEL_MEAN`, `features.CHANNEL_MEAN_SQUARES`), so the full pass
does not decode any image a second time. Every stored image has the same size,
so the mean of per-image means is the mean over all stored pixels, and
std = sqrt(E[x^2] - E[x]^2) exactly.

The exported transform (`transform_fn/`) is what the reader applies to
JPEG/PNG/uint8 records at training time; with float32 storage the pipeline
applies it itself (`tft_beam.TransformDataset`) and stores the result.
"""

import math
import apache_beam as beam
import numpy as np

from transforms.modalities.image import features

NORMALIZATIONS = ('zscore', 'scale', 'none')
# Floor under the standard deviation, so a constant channel does not divide
# by zero (1/255: one grey level).
MIN_STD = 1.0 / 255.0
# Stored features passed through the transform unchanged.
PASSTHROUGH = (features.ID, features.LABEL_TEXT, features.ORIGINAL_HEIGHT,
               features.ORIGINAL_WIDTH)


def raw_feature_spec(channels: int, with_weight: bool = False):
  """tf.Transform input spec: stored image (bytes) plus statistics inputs."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  spec = {
      features.IMAGE: tf.io.FixedLenFeature([], tf.string),
      features.CHANNEL_MEAN: tf.io.FixedLenFeature([channels], tf.float32),
      features.CHANNEL_MEAN_SQUARES: tf.io.FixedLenFeature([channels],
                                                           tf.float32),
      features.ID: tf.io.FixedLenFeature([], tf.string),
      features.LABEL_TEXT: tf.io.FixedLenFeature([], tf.string),
      features.ORIGINAL_HEIGHT: tf.io.FixedLenFeature([], tf.int64),
      features.ORIGINAL_WIDTH: tf.io.FixedLenFeature([], tf.int64),
  }
  if with_weight:
    spec[features.WEIGHT] = tf.io.FixedLenFeature([], tf.float32)
  return spec


def make_preprocessing_fn(stored_format: str, height: int, width: int,
                          channels: int, normalization: str):
  """Builds the tf.Transform preprocessing_fn.

  Args:
    stored_format: How IMAGE is encoded in the transform's input: 'jpeg',
      'png' or 'uint8' (raw HWC bytes; also used for float32 storage).
    height: Image height.
    width: Image width.
    channels: Image channels.
    normalization: One of NORMALIZATIONS.

  Returns:
    preprocessing_fn(inputs) -> outputs, for tft_beam.AnalyzeDataset.
  """

  def preprocessing_fn(inputs):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel

    raw = inputs[features.IMAGE]
    if stored_format == 'uint8':
      image = tf.reshape(tf.io.decode_raw(raw, tf.uint8),
                         [-1, height, width, channels])
    else:
      image = tf.map_fn(
          lambda b: tf.io.decode_image(b, channels=channels,
                                       expand_animations=False),
          raw, fn_output_signature=tf.TensorSpec([None, None, channels],
                                                 tf.uint8))
      image = tf.ensure_shape(image, [None, height, width, channels])
    if normalization == 'none':
      # tf.Transform outputs must be string, int64 or float32.
      out = tf.cast(image, tf.float32)
    else:
      out = tf.cast(image, tf.float32) / 255.0
      if normalization == 'zscore':
        mean = tft.mean(inputs[features.CHANNEL_MEAN],
                        reduce_instance_dims=False)
        mean_sq = tft.mean(inputs[features.CHANNEL_MEAN_SQUARES],
                           reduce_instance_dims=False)
        std = tf.sqrt(tf.maximum(mean_sq - tf.square(mean), MIN_STD**2))
        out = (out - mean) / std
    outputs = {features.IMAGE: out}
    for key in PASSTHROUGH + (features.WEIGHT,):
      if key in inputs:
        outputs[key] = inputs[key]
    return outputs

  return preprocessing_fn


def tft_input(example: dict, with_image: bool = True) -> dict:
  """The tf.Transform input dict of a pipeline example.

  Args:
    example: The pipeline's example dict.
    with_image: False for the analysis input: the analyzers read only the
      statistics, and tf.Transform evaluates only what they need, so the
      image bytes (the bulk of the data) are replaced by b''.
  """
  return {
      features.IMAGE: example[features.IMAGE] if with_image else b'',
      features.CHANNEL_MEAN: np.asarray(example[features.CHANNEL_MEAN],
                                        np.float32),
      features.CHANNEL_MEAN_SQUARES: np.asarray(
          example[features.CHANNEL_MEAN_SQUARES], np.float32),
      features.ID: example[features.ID].encode('utf-8'),
      features.LABEL_TEXT: example[features.LABEL_TEXT].encode('utf-8'),
      features.ORIGINAL_HEIGHT: example[features.ORIGINAL_HEIGHT],
      features.ORIGINAL_WIDTH: example[features.ORIGINAL_WIDTH],
      **({features.WEIGHT: np.float32(example[features.WEIGHT])}
         if features.WEIGHT in example else {}),
  }


class PixelStatsFn(beam.CombineFn):
  """Exact (float64) per-channel mean and std over lists of examples, for
  the manifest.

  The same quantities tf.Transform computes for the graph; the validation
  pipeline checks that the exported transform reproduces them.
  """

  def create_accumulator(self):
    return (0, None, None)

  def add_input(self, acc, examples):
    """Adds a list of examples, one after another (the same sums, to the
    last bit, as adding them one element each)."""
    n, s, sq = acc
    for example in examples:
      m = np.asarray(example[features.CHANNEL_MEAN], np.float64)
      m2 = np.asarray(example[features.CHANNEL_MEAN_SQUARES], np.float64)
      n, s, sq = (n + 1, m if s is None else s + m,
                  m2 if sq is None else sq + m2)
    return n, s, sq

  def merge_accumulators(self, accs):
    n, s, sq = 0, None, None
    for an, asum, asq in accs:
      if an:
        n += an
        s = asum if s is None else s + asum
        sq = asq if sq is None else sq + asq
    return (n, s, sq)

  def extract_output(self, acc):
    n, s, sq = acc
    if not n:
      return {'count': 0, 'mean': None, 'std': None}
    mean = s / n
    std = np.sqrt(np.maximum(sq / n - mean * mean, MIN_STD**2))
    return {'count': int(n), 'mean': [float(v) for v in mean],
            'std': [float(v) for v in std]}


def plausible_range(normalization: str, stats) -> tuple:
  """The range transformed pixel values can take (for validation)."""
  if normalization == 'none':
    return (0.0, 255.0)
  if normalization == 'scale':
    return (0.0, 1.0)
  lows = [(0.0 - m) / s for m, s in zip(stats['mean'], stats['std'])]
  highs = [(1.0 - m) / s for m, s in zip(stats['mean'], stats['std'])]
  return (min(lows) - 1e-3, max(highs) + 1e-3) if lows else (-math.inf,
                                                              math.inf)
