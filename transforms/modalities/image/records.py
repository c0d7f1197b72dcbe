"""Image example dicts -> their serialized tf.train.Examples.

The columns are those of core/features.feature_spec for images; the bytes
come from the one serializer every modality uses (output/example_encoding).
"""

from typing import List, Sequence

import numpy as np

from transforms.modalities.image import features
from transforms.output import example_encoding


def to_records(examples: Sequence[dict], label_ids: dict,
               with_signature: bool = False) -> List[bytes]:
  """Serializes pipeline examples as tf.train.Examples, in their order.

  Args:
    examples: The pipeline's example dicts (see image/decode.py), all of
      one storage: encoded bytes, or float32 pixels; with a weight each or
      none.
    label_ids: {label name: id}.
    with_signature: Whether to store each example's near-duplicate
      signature (features.NEAR_SIGNATURE; features.signature_stored).

  Returns:
    Deterministically serialized tf.train.Example bytes, one per example.
  """
  n = len(examples)
  images = [ex[features.IMAGE] for ex in examples]
  if all(isinstance(image, bytes) for image in images):
    image_column = ('bytes', images)
  else:
    image_column = ('float32', np.stack(
        [np.asarray(image, np.float32) for image in images]).reshape(n, -1))

  def ints(key):
    return np.array([ex[key] for ex in examples], np.int64).reshape(n, 1)

  columns = {
      features.IMAGE: image_column,
      features.LABEL: ('int64', np.array(
          [label_ids[ex[features.LABEL_TEXT]] for ex in examples],
          np.int64).reshape(n, 1)),
      features.LABEL_TEXT: ('bytes',
                            [ex[features.LABEL_TEXT] for ex in examples]),
      features.ID: ('bytes', [ex[features.ID] for ex in examples]),
      features.ORIGINAL_HEIGHT: ('int64', ints(features.ORIGINAL_HEIGHT)),
      features.ORIGINAL_WIDTH: ('int64', ints(features.ORIGINAL_WIDTH)),
  }
  if with_signature:
    signatures = [ex['signature'] for ex in examples]
    if not all(signatures):
      raise ValueError('an example to be stored with its near-duplicate '
                       'signature has none')
    columns[features.NEAR_SIGNATURE] = ('bytes', signatures)
  if n and features.WEIGHT in examples[0]:
    columns[features.WEIGHT] = ('float32', np.array(
        [ex[features.WEIGHT] for ex in examples], np.float32).reshape(n, 1))
  return example_encoding.encode(columns, n)

