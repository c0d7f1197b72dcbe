"""What near-duplicate pictures are found by (core/near_duplicates.py): a
picture's signature, the pHash of its grey levels and a small colour
thumbnail, from its pixels as they are stored.
"""

from typing import Union

import cv2
import numpy as np
from PIL import Image

from transforms.modalities.image import encoding


# ------------------------------------------------- near-duplicate hashing --

# The side of the small square picture near-duplicate signatures are
# computed from (pHash ignores the aspect ratio anyway), and of the colour
# thumbnail they carry.
SIGNATURE_SIDE = 32
THUMB_SIDE = 4
# Bytes of a signature: the 64-bit pHash, then the thumbnail's RGB pixels.
PHASH_BYTES = 8
SIGNATURE_BYTES = PHASH_BYTES + THUMB_SIDE * THUMB_SIDE * 3


def _dct_scale(side: int, kept: int) -> np.ndarray:
  """[kept, kept] factors from OpenCV's orthonormal 2-D DCT-II of a side x
  side array to SciPy's unnormalized one (2 sum x cos, per axis), which
  imagehash's pHash compares: 2 sqrt(side) for the first coefficient of an
  axis, 2 sqrt(side / 2) for the others."""
  axis = np.full(kept, 2.0 * np.sqrt(side / 2.0))
  axis[0] = 2.0 * np.sqrt(side)
  return np.outer(axis, axis)


_PHASH_SIDE = 8
_PHASH_SCALE = _dct_scale(SIGNATURE_SIDE, _PHASH_SIDE)


def phash_of_grey(grey: np.ndarray) -> bytes:
  """The 64-bit pHash of a uint8 [SIGNATURE_SIDE, SIGNATURE_SIDE] grey
  picture, as imagehash.phash(hash_size=8) computes it (its bits, packed):
  each of the 8x8 lowest-frequency DCT coefficients above their median.

  OpenCV's DCT in doubles does it in a quarter of the time of imagehash's
  SciPy one, and a default run does it for every picture. The bits are
  imagehash's, but for coefficients equal to the median (a drawing's
  symmetries make some coefficients equal): there imagehash's bit is
  decided by rounding noise (1e-13), here the coefficients are rounded to
  1e-6 first, so equal ones are equal and not above their median.
  tests/core/test_near_duplicates.py compares the two on photos, drawings
  and flat pictures.
  """
  coeffs = cv2.dct(grey.astype(np.float64))[:_PHASH_SIDE, :_PHASH_SIDE]
  values = np.round((coeffs * _PHASH_SCALE).ravel(), 6)
  ordered = np.sort(values)
  half = len(ordered) // 2
  median = (ordered[half - 1] + ordered[half]) / 2.0
  return np.packbits(values > median).tobytes()


def signature_of_pixels(img: Union[Image.Image, np.ndarray]) -> bytes:
  """What near-duplicate pictures are found by (core/near_duplicates.py),
  from a picture as it is stored (the resized pixels): the 64-bit DCT hash
  (pHash) of its grey levels at SIGNATURE_SIDE x SIGNATURE_SIDE (the mean
  of each block of pixels), then a 4x4 RGB thumbnail (48 bytes). The
  pipeline computes it from the pixels it has just resized, the validation
  from the stored records, so both see the same picture.

  Args:
    img: An 'RGB' or 'L' Pillow image, or its pixels as a uint8 [h, w, 3]
      or [h, w] array.
  """
  arr = encoding.pixels(img)
  side = (SIGNATURE_SIDE, SIGNATURE_SIDE)
  small = cv2.resize(arr, side, interpolation=cv2.INTER_AREA)
  # (A grey picture's grey levels are its own: OpenCV's grey of three equal
  # channels is that value.)
  grey = small if small.ndim == 2 else cv2.cvtColor(small, cv2.COLOR_RGB2GRAY)
  thumb = cv2.resize(small, (THUMB_SIDE, THUMB_SIDE),
                     interpolation=cv2.INTER_AREA)
  if thumb.ndim == 2:
    thumb = np.repeat(thumb[:, :, None], 3, axis=2)
  return phash_of_grey(grey) + np.ascontiguousarray(thumb).tobytes()
