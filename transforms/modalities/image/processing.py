"""Per-image work: decode, orient, convert, resize, encode. No Beam in here.

Everything here is a plain function of bytes and options, so the pipeline's
DoFn, the benchmark's single-process baseline and the tests all call the same
code. This module is the kernel that puts the steps together; each step has
its own module beside it: config.py (the options), file_formats.py (what a
file holds, opening it), jpeg.py (JPEG's fast path, cut files and
reduced-size decoding), pillow_decode.py (every other image), exif.py
(orientation), resize.py, encoding.py (the stored bytes) and signatures.py
(the near-duplicate signature).

A YCbCr, RGB or grey JPEG is decoded by simplejpeg (jpeg.py), any other
image, or a JPEG that path declines, by Pillow (pillow_decode.py); both
give a uint8 numpy array, which resize.py resizes and the rest (sums,
content digest, encoding) reads as it is.

Example:

    >>> cfg = config.ImageConfig(height=224, width=224)
    >>> out = process_image(open('cat.jpg', 'rb').read(), cfg)
    >>> out.data[:2], out.original_height, out.channel_sum
"""

import dataclasses
import hashlib
from typing import Sequence, Tuple, Union

import cv2
import numpy as np
from PIL import Image

from transforms.modalities.image import config
from transforms.modalities.image import encoding
from transforms.modalities.image import exif
from transforms.modalities.image import file_formats
from transforms.modalities.image import jpeg
from transforms.modalities.image import pillow_decode
from transforms.modalities.image import resize
from transforms.modalities.image import signatures


@dataclasses.dataclass(frozen=True)
class ProcessedImage:
  """One image in its stored form, with what the statistics need.

  Attributes:
    data: The stored bytes (encoded image, or raw uint8 pixels in HWC order);
      for 'float32' storage the raw uint8 pixels too (the pipeline turns
      them into floats after normalization statistics are known).
    original_height: Height of the input after EXIF orientation.
    original_width: Width of the input after EXIF orientation.
    channel_sum: Per channel, the sum of the stored pixel values (0-255).
    channel_sum_squares: Per channel, the sum of squared pixel values.
    pixel_count: Pixels per channel (height * width of the stored image).
    source_format: The format of the file's content as Pillow names it
      ('JPEG', 'PNG', 'TIFF', ...), whatever its name says.
    content: The digest of the pixels at the stored size, before encoding
      (see content_digest): equal for the same picture in any file format
      or bit depth.
    signature: The near-duplicate signature (signature_of_pixels) when the
      config asks for it, else empty.
  """
  data: bytes
  original_height: int
  original_width: int
  channel_sum: Tuple[float, ...]
  channel_sum_squares: Tuple[float, ...]
  pixel_count: int
  source_format: str = ''
  content: str = ''
  signature: bytes = b''


def _channel_sums(arr: np.ndarray) -> Tuple[Tuple[float, ...],
                                             Tuple[float, ...], int]:
  """Exact per-channel sums and sums of squares of uint8 pixels ([h, w] or
  [h, w, c], c at most 4).

  OpenCV adds uint8 pixels in integers, and its squared L2 norm is exact
  or, where it takes the square of the L2 norm, within a few units in the
  last place of a double: less than 0.002 for the largest output (8192 x
  8192 pixels of 255), so the nearest whole number is exact. About a
  third of the time of a histogram per channel.
  """
  h, w = arr.shape[:2]
  planes = cv2.split(arr) if arr.ndim == 3 else [arr]
  sums = cv2.sumElems(arr)[:len(planes)]
  squares = [cv2.norm(p, cv2.NORM_L2SQR) for p in planes]
  return (tuple(float(round(v)) for v in sums),
          tuple(float(round(v)) for v in squares), h * w)


# ------------------------------------------------------------ the kernel --


def _decode_pixels(data: bytes, cfg: config.ImageConfig, name: str = ''
                   ) -> Tuple[np.ndarray, int, int, str]:
  """The work of decode_resize_and_identify, on numpy arrays: the resized
  uint8 pixels ([h, w] for grey, [h, w, 3] for RGB, C-contiguous), the
  original height and width after EXIF orientation and the content's
  format."""
  img = file_formats.open_image(data, name)
  source_format = file_formats.content_format(img.format or '')
  w, h = img.size
  if w * h > cfg.max_pixels:
    raise config.BadImageError(
        'decode', f'image of {w}x{h} = {w * h} pixels is over the limit of '
        f'{cfg.max_pixels} pixels (possible decompression bomb)')
  if w <= 0 or h <= 0:
    raise config.BadImageError('decode', f'image has no pixels ({w}x{h})')
  orientation = 1
  try:
    arr = None
    if img.format == 'JPEG':
      # EXIF sits before the pixels in a JPEG: read it without decoding, so
      # the reduced-size decode can take the rotation into account.
      orientation = exif.orientation(img)
      arr = jpeg.decode_jpeg(img, data, cfg, orientation)
    if arr is None:
      arr, orientation = pillow_decode.decode_with_pillow(img, data, cfg,
                                                          orientation)
  except config.BadImageError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    # Pillow reports truncated and corrupt data with OSError, SyntaxError,
    # ValueError and, for some formats, other types; all mean the same here.
    raise file_formats.decode_error(source_format, e) from None
  # Fewer pixels than the file has: a reduced-size (DCT-scaled) decode.
  reduced = arr.shape[0] * arr.shape[1] < w * h
  if orientation in exif.TRANSPOSED_ORIENTATIONS:
    w, h = h, w
  arr = resize.resize_pixels(arr, cfg, reduced)
  if cfg.color != 'grey' and arr.ndim == 2:
    arr = cv2.cvtColor(arr, cv2.COLOR_GRAY2RGB)  # a grey JPEG, resized grey
  return np.ascontiguousarray(arr), h, w, source_format


def decode_and_resize(data: bytes, cfg: config.ImageConfig, name: str = ''
                      ) -> Tuple[Image.Image, int, int]:
  """Decodes image bytes and resizes them to the configured size.

  See decode_resize_and_identify, which also returns the content's format.
  """
  img, h, w, _ = decode_resize_and_identify(data, cfg, name)
  return img, h, w


def decode_resize_and_identify(data: bytes, cfg: config.ImageConfig,
                               name: str = ''
                               ) -> Tuple[Image.Image, int, int, str]:
  """Decodes image bytes and resizes them to the configured size.

  Args:
    data: The file's bytes (JPEG, PNG, GIF, BMP, WebP or any other format
      Pillow reads, whatever the file's name says).
    cfg: The image options.
    name: The file's name or path; its extension says what the content
      should be, for the reason of a dead letter.

  Returns:
    The resized 8-bit image ('RGB' or 'L'), the original height and width
    after EXIF orientation, and the format of the content (Pillow's name:
    'JPEG', 'PNG', 'TIFF', ...).

  Raises:
    BadImageError: The bytes are empty, not an image, truncated, corrupt, or
      over the pixel limit.
  """
  arr, h, w, source_format = _decode_pixels(data, cfg, name)
  return Image.fromarray(arr), h, w, source_format


def content_digest(img: Union[Image.Image, np.ndarray]) -> str:
  """The content key of a resized 8-bit image: a SHA-256 of its size,
  mode and pixels (32 hex digits).

  Args:
    img: An 'RGB' or 'L' Pillow image, or its pixels as a uint8 [h, w, 3]
      or [h, w] array (the same digest: the array's bytes are what
      Image.tobytes() gives).
  """
  arr = encoding.pixels(img)
  h, w = arr.shape[:2]
  mode = 'L' if arr.ndim == 2 else 'RGB'
  digest = hashlib.sha256(f'{mode}:{w}x{h}:'.encode())
  digest.update(arr)
  return digest.hexdigest()[:32]


def identify_content(data: bytes, cfg: config.ImageConfig,
                     name: str = '') -> str:
  """The content digest of an image's bytes (decoded and resized as
  process_image does, not encoded).

  Raises:
    BadImageError: The input cannot become an example.
  """
  arr, _, _, _ = _decode_pixels(data, cfg, name)
  return content_digest(arr)


def process_image(data: bytes, cfg: config.ImageConfig,
                  name: str = '') -> ProcessedImage:
  """Decode, orient, convert, resize and encode one image.

  This is the whole per-image cost of the pipeline, and the function the
  benchmark's single-process baseline calls.

  Args:
    data: The file's bytes.
    cfg: The image options.
    name: The file's name or path (its extension names the format the
      reason of a dead letter compares the content with).

  Returns:
    The stored form and the per-channel sums for normalization statistics.

  Raises:
    BadImageError: The input cannot become an example.
  """
  arr, orig_h, orig_w, source_format = _decode_pixels(data, cfg, name)
  sums, squares, count = _channel_sums(arr)
  return ProcessedImage(
      data=encoding.encode(arr, cfg), original_height=orig_h,
      original_width=orig_w,
      channel_sum=sums, channel_sum_squares=squares, pixel_count=count,
      source_format=source_format, content=content_digest(arr),
      signature=signatures.signature_of_pixels(arr) if cfg.signature else b'')


def process_inputs(kernel, inputs, cfg: config.ImageConfig) -> list:
  """[(result, error)] of `kernel(data, cfg, path)` for each (path, data)
  of `inputs`, in their order: `error` is what the kernel (or reading)
  raised, else None, so that a bad input costs only its own result.

  The unit of work of a local worker process (decode.py): a few inputs per
  call, because each call costs the launching process interpreter time
  whatever it carries. `data` None means a local file that is read here,
  in the process that decodes it, with the errors of Python's `open`
  (which Beam's local file system also raises); other files come as their
  bytes, read by the launching process through Beam's FileSystems.
  """
  out = []
  for path, data in inputs:
    try:
      if data is None:
        with open(path, 'rb') as f:
          data = f.read()
      out.append((kernel(data, cfg, path), None))
    except Exception as e:  # pylint: disable=broad-except
      out.append((None, e))
  return out


def zscore_from_sums(sums: Sequence[float], squares: Sequence[float],
                     count: float) -> Tuple[np.ndarray, np.ndarray]:
  """Per-channel mean and std (of pixels scaled to [0, 1]) from sums."""
  sums = np.asarray(sums, np.float64) / 255.0
  squares = np.asarray(squares, np.float64) / (255.0 * 255.0)
  mean = sums / count
  var = np.maximum(squares / count - mean * mean, 0.0)
  return mean, np.sqrt(var)


def identify_content_and_signature(data: bytes, cfg: config.ImageConfig,
                                   name: str = '') -> Tuple[str, bytes]:
  """identify_content and the near-duplicate signature, from one decode
  (the first pass of a two-pass run).

  Raises:
    BadImageError: The input cannot become an example.
  """
  arr, _, _, _ = _decode_pixels(data, cfg, name)
  return content_digest(arr), signatures.signature_of_pixels(arr)
