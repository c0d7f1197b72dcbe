"""The features of an image example, in one place.

The image pipeline writes these features, the manifest records the spec,
and the validation pipeline and the reader parse with it.

  image           bytes (jpeg/png/uint8 storage) or float list (float32)
  original_height int64, input height after EXIF orientation
  original_width  int64, input width after EXIF orientation
  near_duplicate_signature
                  bytes, with jpeg storage when the run looks for
                  near-duplicates: the signature the run grouped the
                  picture by, made from its pixels before JPEG encoding

and the keys every record has (core/features.py, imported here too):
label, label_text, id, and weight with --rebalance weight.
"""

from typing import Any, Dict

# pylint: disable=unused-import
from transforms.core.features import ID
from transforms.core.features import LABEL
from transforms.core.features import LABEL_TEXT
from transforms.core.features import WEIGHT
# pylint: enable=unused-import

IMAGE = 'image'
ORIGINAL_HEIGHT = 'original_height'
ORIGINAL_WIDTH = 'original_width'
# A JPEG-stored picture's near-duplicate signature (image/signatures.py
# signature_of_pixels), as the run computed it from the resized pixels:
# JPEG's noise moves the pHash of a drawing whose DCT coefficients tie
# (Tux Paint's l_filled by 13 of 64 bits), so the stored picture does not
# give it back, and validation would judge pairs the run never compared.
NEAR_SIGNATURE = 'near_duplicate_signature'

# Inputs of the tf.Transform preprocessing_fn besides IMAGE: per-image
# channel means of the stored pixels and of their squares (scaled to [0, 1]),
# computed while decoding so the full-pass analysis needs no second decode.
CHANNEL_MEAN = 'channel_mean'
CHANNEL_MEAN_SQUARES = 'channel_mean_squares'


def feature_spec(storage: str, height: int, width: int, channels: int,
                 with_weight: bool, with_signature: bool = False
                 ) -> Dict[str, Dict[str, Any]]:
  """The stored features as a JSON-able spec (recorded in the manifest).

  Args:
    storage: 'jpeg', 'png', 'uint8' or 'float32'.
    height: Stored image height.
    width: Stored image width.
    channels: Stored image channels.
    with_weight: Whether examples carry a WEIGHT feature.
    with_signature: Whether examples carry a NEAR_SIGNATURE feature
      (signature_stored).

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
  if with_signature:
    spec[NEAR_SIGNATURE] = {'dtype': 'string', 'shape': []}
  return spec


def signature_stored(storage: str, near_duplicates: bool) -> bool:
  """Whether records carry NEAR_SIGNATURE: with a lossy storage (jpeg)
  in a run that looks for near-duplicates."""
  return near_duplicates and storage == 'jpeg'
