"""EXIF orientation: read from a Pillow image, applied to an array of
pixels, and which orientations swap width and height.
"""

import numpy as np
from PIL import Image


_EXIF_ORIENTATION = 0x0112
# EXIF orientations that swap width and height.
TRANSPOSED_ORIENTATIONS = (5, 6, 7, 8)


def orientation(img: Image.Image) -> int:
  try:
    return int(img.getexif().get(_EXIF_ORIENTATION, 1))
  except Exception:  # pylint: disable=broad-except
    # A malformed EXIF block must not cost us the image; treat as upright.
    return 1


def orient(arr: np.ndarray, orientation: int) -> np.ndarray:
  """The pixels of an array as EXIF `orientation` says to show them, as
  ImageOps.exif_transpose turns an image (a view where numpy allows)."""
  if orientation == 2:
    return arr[:, ::-1]
  if orientation == 3:
    return arr[::-1, ::-1]
  if orientation == 4:
    return arr[::-1]
  if orientation == 5:
    return arr.swapaxes(0, 1)
  if orientation == 6:
    return arr.swapaxes(0, 1)[:, ::-1]
  if orientation == 7:
    return arr[::-1, ::-1].swapaxes(0, 1)
  if orientation == 8:
    return arr.swapaxes(0, 1)[::-1]
  return arr
