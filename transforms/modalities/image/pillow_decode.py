"""Pillow's path: any image Pillow opens, decoded, checked for truncation
(a JPEG), oriented, composited onto the background (transparency) and made
8-bit RGB or grey. Every image the JPEG fast path (jpeg.py) declines goes
this way.
"""

from typing import Tuple

import numpy as np
from PIL import Image
from PIL import ImageOps
from PIL import JpegImagePlugin

from transforms.modalities.image import config
from transforms.modalities.image import exif
from transforms.modalities.image import jpeg


_SIXTEEN_BIT_MODES = ('I;16', 'I;16B', 'I;16L', 'I;16N', 'I')
# Modes with an alpha channel ('RGBa' and 'La' premultiplied).
_ALPHA_MODES = ('RGBA', 'LA', 'PA', 'RGBa', 'La')


# ------------------------------------------------------- transparency --


def _flatten_alpha(img: Image.Image, background: Tuple[int, int, int]
                   ) -> Image.Image:
  """An image with transparency composited onto `background` ('RGB').

  Covers alpha channels (RGBA, LA, PA, premultiplied RGBa/La; 16-bit
  RGBA and LA PNGs, which Pillow opens as RGBA) and transparent colour
  keys (a palette entry, an 8-bit or 16-bit grey value or an RGB colour:
  `info['transparency']`). An image without transparency, or whose every
  pixel is opaque, is returned unchanged, so it converts exactly as
  before.
  """
  key = img.info.get('transparency')
  if img.mode in _SIXTEEN_BIT_MODES:
    if not isinstance(key, int):
      return img
    mask = np.asarray(img) == key
    if not mask.any():
      return img
    rgba = _to_8bit(img, 'rgb').convert('RGBA')
    rgba.putalpha(Image.fromarray(np.where(mask, 0, 255).astype(np.uint8),
                                  'L'))
  elif img.mode in _ALPHA_MODES or key is not None:
    rgba = img if img.mode == 'RGBA' else img.convert('RGBA')
  else:
    return img
  if rgba.getchannel('A').getextrema()[0] == 255:
    return img
  canvas = Image.new('RGBA', rgba.size, tuple(background) + (255,))
  return Image.alpha_composite(canvas, rgba).convert('RGB')


def _to_8bit(img: Image.Image, color: str) -> Image.Image:
  """Converts any Pillow mode to 8-bit 'RGB' or 'L'."""
  target = 'L' if color == 'grey' else 'RGB'
  if img.mode in _SIXTEEN_BIT_MODES:
    arr = np.asarray(img, dtype=np.uint32)
    arr = (arr // 257).clip(0, 255).astype(np.uint8)
    img = Image.fromarray(arr, mode='L')
  elif img.mode == 'F':
    arr = np.nan_to_num(np.asarray(img, dtype=np.float32)).clip(0, 255)
    img = Image.fromarray(arr.astype(np.uint8), mode='L')
  elif img.mode == 'P' and 'transparency' in img.info:
    img = img.convert('RGBA')
  if img.mode != target:
    img = img.convert(target)
  return img


def decode_with_pillow(img: Image.Image, data: bytes, cfg: config.ImageConfig,
                       orientation: int) -> Tuple[np.ndarray, int]:
  """Any image Pillow opens, decoded (DCT-scaled for a JPEG), checked for
  truncation (a JPEG), oriented, composited onto the background (alpha)
  and made 8-bit in cfg.color.

  Returns:
    The uint8 pixels ([h, w] for grey, [h, w, 3] for RGB) and the EXIF
    orientation that was applied.
  """
  declared = img.size  # before draft() makes it the reduced size
  if img.format == 'JPEG' and cfg.draft:
    jpeg.draft(img, cfg, orientation)
  img.load()
  if isinstance(img, JpegImagePlugin.JpegImageFile):
    jpeg.check_jpeg_complete(img, data, declared)
  if img.format != 'JPEG':
    # Other formats may keep EXIF after the pixel data; read it only after
    # a successful decode, so a decoding error is never swallowed here.
    orientation = exif.orientation(img)
  if orientation != 1:
    img = ImageOps.exif_transpose(img)  # keeps info['transparency']
  img = _flatten_alpha(img, cfg.background_rgb)
  img = _to_8bit(img, cfg.color)
  return np.asarray(img), orientation
