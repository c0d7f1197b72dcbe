"""Feature keys and feature specs of the image datasets, in one place.

The preprocessing pipeline writes these features, the manifest records the
spec, and the validation pipeline and the reader parse with it.

Stored features of every example:

  image           bytes (jpeg/png/uint8 storage) or float list (float32)
  label           int64, index into the manifest's label names
  label_text      bytes, the label's name (UTF-8)
  id              bytes, stable example id (relative input path)
  original_height int64, input height after EXIF orientation
  original_width  int64, input width after EXIF orientation
  weight          float, only with --rebalance weight
"""

from typing import Any, Dict

IMAGE = 'image'
LABEL = 'label'
LABEL_TEXT = 'label_text'
ID = 'id'
ORIGINAL_HEIGHT = 'original_height'
ORIGINAL_WIDTH = 'original_width'
WEIGHT = 'weight'

# Inputs of the tf.Transform preprocessing_fn besides IMAGE: per-image
# channel means of the stored pixels and of their squares (scaled to [0, 1]),
# computed while decoding so the full-pass analysis needs no second decode.
CHANNEL_MEAN = 'channel_mean'
CHANNEL_MEAN_SQUARES = 'channel_mean_squares'


def feature_spec(storage: str, height: int, width: int, channels: int,
                 with_weight: bool) -> Dict[str, Dict[str, Any]]:
  """The stored features as a JSON-able spec (recorded in the manifest).

  Args:
    storage: 'jpeg', 'png', 'uint8' or 'float32'.
    height: Stored image height.
    width: Stored image width.
    channels: Stored image channels.
    with_weight: Whether examples carry a WEIGHT feature.

  Returns:
    {key: {'dtype': 'string'|'int64'|'float32', 'shape': [...]}}.
  """
  if storage == 'float32':
    image = {'dtype': 'float32', 'shape': [height, width, channels]}
  else:
    image = {'dtype': 'string', 'shape': []}
  spec = {
      IMAGE: image,
      LABEL: {'dtype': 'int64', 'shape': []},
      LABEL_TEXT: {'dtype': 'string', 'shape': []},
      ID: {'dtype': 'string', 'shape': []},
      ORIGINAL_HEIGHT: {'dtype': 'int64', 'shape': []},
      ORIGINAL_WIDTH: {'dtype': 'int64', 'shape': []},
  }
  if with_weight:
    spec[WEIGHT] = {'dtype': 'float32', 'shape': []}
  return spec


def to_tf_feature_spec(spec: Dict[str, Dict[str, Any]]):
  """The manifest's JSON spec as a `tf.io.parse_example` feature spec
  (shape None: a variable number of values, parsed as a SparseTensor)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  dtypes = {'string': tf.string, 'int64': tf.int64, 'float32': tf.float32}
  return {
      key: (tf.io.VarLenFeature(dtypes[entry['dtype']])
            if entry['shape'] is None else
            tf.io.FixedLenFeature(entry['shape'], dtypes[entry['dtype']]))
      for key, entry in spec.items()
  }
