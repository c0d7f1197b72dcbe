"""An image example dict -> its serialized tf.train.Example.

The columns are those of core/features.feature_spec for images; the bytes
come from the one serializer every modality uses (output/example_encoding).
"""

import numpy as np

from transforms.modalities.image import features as schema
from transforms.output import example_encoding


def to_example_bytes(example: dict, label_ids: dict) -> bytes:
  """Serializes a pipeline example as a tf.train.Example.

  Args:
    example: The pipeline's example dict (see image/decode.py).
    label_ids: {label name: id}.

  Returns:
    Deterministically serialized tf.train.Example bytes.
  """
  image = example[schema.IMAGE]
  columns = {
      schema.IMAGE: (('bytes', [image]) if isinstance(image, bytes) else
                     ('float32', np.asarray(image, np.float32)[None])),
      schema.LABEL: ('int64', [[label_ids[example[schema.LABEL_TEXT]]]]),
      schema.LABEL_TEXT: ('bytes', [example[schema.LABEL_TEXT]]),
      schema.ID: ('bytes', [example[schema.ID]]),
      schema.ORIGINAL_HEIGHT: ('int64', [[example[schema.ORIGINAL_HEIGHT]]]),
      schema.ORIGINAL_WIDTH: ('int64', [[example[schema.ORIGINAL_WIDTH]]]),
  }
  if schema.WEIGHT in example:
    columns[schema.WEIGHT] = ('float32', [[example[schema.WEIGHT]]])
  return example_encoding.encode(columns, 1)[0]
