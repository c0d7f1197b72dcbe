"""A resized image's stored bytes (ImageConfig.storage: JPEG, PNG or raw
pixels), and the stored bytes decoded back to pixels for validation.
"""

import io
from typing import Union

import numpy as np
from PIL import Image
import simplejpeg

from transforms.modalities.image import config


def pixels(img: Union[Image.Image, np.ndarray]) -> np.ndarray:
  """The uint8 pixels of an 8-bit 'RGB' or 'L' image or of such an array."""
  if isinstance(img, Image.Image):
    if img.mode not in ('RGB', 'L'):
      raise ValueError(f'not an 8-bit RGB or grey image: mode {img.mode}')
    return np.asarray(img)
  arr = np.ascontiguousarray(img)
  if arr.dtype != np.uint8 or not (
      arr.ndim == 2 or (arr.ndim == 3 and arr.shape[2] == 3)):
    raise ValueError(f'not 8-bit RGB or grey pixels: {arr.dtype} '
                     f'{arr.shape}')
  return arr


def encode(img: Union[Image.Image, np.ndarray],
           cfg: config.ImageConfig) -> bytes:
  """The stored bytes of a resized image (see ImageConfig.storage).

  JPEG goes through simplejpeg (libjpeg-turbo, 4:2:0 like Pillow's default):
  it releases the GIL while encoding, where Pillow's encoder into memory
  holds it, which alone kept two decoding threads from scaling.

  Args:
    img: An 'RGB' or 'L' Pillow image, or its pixels as a uint8 [h, w, 3]
      or [h, w] array.
    cfg: The image options.
  """
  arr = pixels(img)
  if cfg.storage == 'jpeg':
    grey = arr.ndim == 2
    return simplejpeg.encode_jpeg(
        arr[:, :, None] if grey else arr, quality=cfg.jpeg_quality,
        colorspace='GRAY' if grey else 'RGB', colorsubsampling='420')
  if cfg.storage == 'png':
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format='PNG', compress_level=3)
    return buf.getvalue()
  return arr.tobytes()  # uint8 and float32: raw HWC pixels


def decode_stored(data: bytes, storage: str, height: int, width: int,
                  channels: int) -> np.ndarray:
  """Decodes a stored image back to a uint8 HWC array (for validation).

  Args:
    data: The stored bytes.
    storage: 'jpeg', 'png' or 'uint8'.
    height: Expected height.
    width: Expected width.
    channels: Expected channels.

  Returns:
    A uint8 array of shape (height, width, channels).

  Raises:
    ValueError: The bytes do not decode to the expected shape.
  """
  if storage == 'uint8':
    expected = height * width * channels
    if len(data) != expected:
      raise ValueError(f'raw image has {len(data)} bytes, expected {expected}')
    return np.frombuffer(data, np.uint8).reshape(height, width, channels)
  try:
    with Image.open(io.BytesIO(data)) as img:
      img.load()
      arr = np.asarray(img)
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f'stored {storage} image does not decode: {e}') from None
  if arr.ndim == 2:
    arr = arr[:, :, None]
  if arr.shape != (height, width, channels):
    raise ValueError(f'stored image has shape {arr.shape}, expected '
                     f'{(height, width, channels)}')
  return arr
