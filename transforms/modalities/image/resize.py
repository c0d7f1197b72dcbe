"""Decoded pixels resized to the configured size, by the resize mode
('fit', 'crop' or 'stretch'), with the filter that suits how much they
shrink.
"""

from typing import Optional, Tuple

import cv2
import numpy as np
from PIL import Image

from transforms.modalities.image import config


# The pipeline runs one image per core itself (worker processes or threads);
# OpenCV's own thread pool inside each resize would only compete with them.
cv2.setNumThreads(1)


# ------------------------------------------------------------- resize --


# Below these shrink factors OpenCV resizes (see _resize_to); at or above,
# Pillow's antialiased bilinear filter does, as before.
_SUPERSAMPLE_BELOW = 2.0
_SUPERSAMPLE_BELOW_REDUCED = 1.4
# Below this shrink factor a full-size decode is resized by plain bilinear
# interpolation.
_INTERPOLATE_BELOW = 1.2


def _resize_to(arr: np.ndarray, size: Tuple[int, int],
               box: Optional[Tuple[float, float, float, float]] = None,
               reduced: bool = False) -> np.ndarray:
  """The pixels of `box` (left, top, right, bottom; default: all) of a
  uint8 [h, w] or [h, w, c] array, resized to `size` (width, height).

  The filter depends on r, how much the more shrunk axis shrinks, and on
  whether the pixels come from a reduced-size (DCT-scaled) JPEG decode,
  which is softer and shows its 8x8 blocks more. Each choice is the one
  that, on photo-like JPEGs resized to 128..299 pixels, came closest to a
  Lanczos resize of the full-size decode: on average as close as the
  previous filter (Pillow's bilinear) or closer, and never more than about
  0.6 dB further than it on one image.

  - r <= 1 (enlarged or kept), or r < 1.2 from a full-size decode:
    bilinear interpolation (OpenCV INTER_LINEAR);
  - r < 2 from a full-size decode, r < 1.4 from a reduced one: bilinear
    interpolation to twice the size, then the mean of each 2x2 block
    (OpenCV INTER_LINEAR, then its integer INTER_AREA): antialiased, a
    little sharper than Pillow's bilinear filter, in about a third of its
    time, with the GIL released;
  - else Pillow's antialiased bilinear filter (the previous one).

  Args:
    arr: The pixels.
    size: (width, height) of the result.
    box: The part of `arr` to resize, in pixels; OpenCV takes whole ones,
      so there it is rounded.
    reduced: Whether `arr` is a reduced-size JPEG decode.

  Returns:
    The resized pixels (`arr` itself when nothing changes).
  """
  h, w = arr.shape[:2]
  left, top, right, bottom = box or (0, 0, w, h)
  dst_w, dst_h = size
  shrink = max((right - left) / dst_w, (bottom - top) / dst_h)
  if shrink >= (_SUPERSAMPLE_BELOW_REDUCED if reduced else _SUPERSAMPLE_BELOW):
    img = Image.fromarray(np.ascontiguousarray(arr))
    return np.asarray(img.resize(size, Image.Resampling.BILINEAR,
                                 box=(left, top, right, bottom)))
  if box is not None:
    left, top = min(int(round(left)), w - 1), min(int(round(top)), h - 1)
    right = max(left + 1, min(int(round(right)), w))
    bottom = max(top + 1, min(int(round(bottom)), h))
    arr = arr[top:bottom, left:right]
    h, w = arr.shape[:2]
  if (w, h) == (dst_w, dst_h):
    return arr
  if (w <= dst_w and h <= dst_h) or (
      not reduced and shrink < _INTERPOLATE_BELOW):
    return cv2.resize(arr, size, interpolation=cv2.INTER_LINEAR)
  fine = (dst_w * 2 if w > dst_w else dst_w, dst_h * 2 if h > dst_h else dst_h)
  if (w, h) != fine:
    arr = cv2.resize(arr, fine, interpolation=cv2.INTER_LINEAR)
  return cv2.resize(arr, size, interpolation=cv2.INTER_AREA)


def resize_pixels(arr: np.ndarray, cfg: config.ImageConfig,
                  reduced: bool = False) -> np.ndarray:
  """Decoded pixels at the configured size, by cfg.resize_mode.

  Args:
    arr: uint8 pixels, [h, w] or [h, w, c].
    cfg: The image options.
    reduced: Whether `arr` is a reduced-size (DCT-scaled) JPEG decode
      (see _resize_to).
  """
  h, w = arr.shape[:2]
  dst = (cfg.width, cfg.height)
  if cfg.resize_mode == 'stretch':
    return _resize_to(arr, dst, reduced=reduced)
  if cfg.resize_mode == 'crop':
    s = max(cfg.width / w, cfg.height / h)
    box_w, box_h = cfg.width / s, cfg.height / s
    left, top = (w - box_w) / 2, (h - box_h) / 2
    return _resize_to(arr, dst, (left, top, left + box_w, top + box_h),
                      reduced)
  # fit: scale to fit inside, pad the rest with black, content centred.
  s = min(cfg.width / w, cfg.height / h)
  new = (max(1, min(cfg.width, round(w * s))),
         max(1, min(cfg.height, round(h * s))))
  content = _resize_to(arr, new, reduced=reduced)
  if new == dst:
    return content
  canvas = np.zeros((cfg.height, cfg.width) + arr.shape[2:], np.uint8)
  left, top = (cfg.width - new[0]) // 2, (cfg.height - new[1]) // 2
  canvas[top:top + new[1], left:left + new[0]] = content
  return canvas
