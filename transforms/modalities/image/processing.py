"""Per-image work: decode, orient, convert, resize, encode. No Beam in here.

Everything here is a plain function of bytes and options, so the pipeline's
DoFn, the benchmark's single-process baseline and the tests all call the same
code.

A YCbCr, RGB or grey JPEG is decoded by simplejpeg (_decode_jpeg), any other
image, or a JPEG that path declines, by Pillow (_decode_with_pillow); both
give a uint8 numpy array, which _resize_to resizes and the rest (sums,
content digest, encoding) reads as it is.

Example:

    >>> cfg = ImageConfig(height=224, width=224)
    >>> out = process_image(open('cat.jpg', 'rb').read(), cfg)
    >>> out.data[:2], out.original_height, out.channel_sum
"""

import dataclasses
import hashlib
import io
import posixpath
import re
from typing import Optional, Sequence, Tuple, Union

import cv2
import numpy as np
from PIL import Image
from PIL import ImageOps
from PIL import JpegImagePlugin
from PIL import UnidentifiedImageError
import simplejpeg

# We enforce our own, configurable pixel limit (ImageConfig.max_pixels) on
# every image before it is decoded, and report it as a dead letter. Pillow's
# global check would otherwise warn or raise with its own fixed limit.
Image.MAX_IMAGE_PIXELS = None
# The pipeline runs one image per core itself (worker processes or threads);
# OpenCV's own thread pool inside each resize would only compete with them.
cv2.setNumThreads(1)

RESIZE_MODES = ('fit', 'crop', 'stretch')
STORAGE_FORMATS = ('jpeg', 'png', 'uint8', 'float32')
COLOR_MODES = ('rgb', 'grey')
IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.jpe', '.png', '.gif', '.bmp', '.webp')

_EXIF_ORIENTATION = 0x0112
# EXIF orientations that swap width and height.
_TRANSPOSED_ORIENTATIONS = (5, 6, 7, 8)
_SIXTEEN_BIT_MODES = ('I;16', 'I;16B', 'I;16L', 'I;16N', 'I')
# Modes with an alpha channel ('RGBa' and 'La' premultiplied).
_ALPHA_MODES = ('RGBA', 'LA', 'PA', 'RGBa', 'La')
BACKGROUND_NAMES = {'white': '#ffffff', 'black': '#000000'}
# ImageConfig.nested_folders (--nested_folders).
NESTED_FOLDERS = ('include', 'skip')


class BadImageError(ValueError):
  """An input that cannot become an example; carries the stage and reason."""

  def __init__(self, stage: str, reason: str):
    super().__init__(reason)
    self.stage = stage
    self.reason = reason

  def __reduce__(self):
    # Comes back whole from a worker process (core/processes.py).
    return BadImageError, (self.stage, self.reason)


@dataclasses.dataclass(frozen=True)
class ImageConfig:
  """How every image is turned into its stored form.

  Attributes:
    height: Target height in pixels.
    width: Target width in pixels.
    resize_mode: 'fit' (scale to fit, pad the rest with black), 'crop'
      (scale to cover, cut the centre) or 'stretch' (ignore aspect ratio).
    storage: 'jpeg' or 'png' (encoded at the target size), 'uint8' (raw
      pixel bytes) or 'float32' (pixels, normalized in the pipeline).
    color: 'rgb' (3 channels) or 'grey' (1 channel).
    jpeg_quality: Quality of the stored JPEG (1-95).
    max_pixels: Images with more pixels than this are rejected before
      decoding (decompression bombs).
    draft: Use the JPEG decoder's reduced-size (DCT-scaled) decoding when the
      image is at least twice the size it is resized to.
    background: '#rrggbb': the colour transparent images are composited
      onto before they lose their alpha channel.
    nested_folders: 'include' or 'skip': whether an image in a folder
      nested inside its class folder (`cat/2019/x.jpg`) is an input of that
      class. It decides which images are listed, not how they are
      processed; it is here to be in the run's config and config hash.
  """
  height: int = 224
  width: int = 224
  resize_mode: str = 'fit'
  storage: str = 'jpeg'
  color: str = 'rgb'
  jpeg_quality: int = 90
  max_pixels: int = 100_000_000
  draft: bool = True
  background: str = '#ffffff'
  nested_folders: str = 'include'
  # Whether process_image also computes the near-duplicate signature (set
  # by the pipeline from the run's content rules, which the config holds).
  signature: bool = False

  @property
  def channels(self) -> int:
    return 1 if self.color == 'grey' else 3

  @property
  def background_rgb(self) -> Tuple[int, int, int]:
    return parse_background(self.background)

  def to_json(self) -> dict:
    d = dataclasses.asdict(self)
    d.pop('signature')
    return d


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


def is_image_path(path: str) -> bool:
  """True when the file name has one of the image extensions we read."""
  return path.lower().endswith(IMAGE_EXTENSIONS)


def parse_background(text: str) -> Tuple[int, int, int]:
  """'white', 'black', '#rrggbb' or 'r,g,b' -> (r, g, b).

  Raises:
    ValueError: Not one of those forms, or a value outside 0-255.
  """
  value = BACKGROUND_NAMES.get(str(text).strip().lower(), str(text).strip())
  if re.fullmatch(r'#[0-9a-fA-F]{6}', value):
    return tuple(int(value[i:i + 2], 16) for i in (1, 3, 5))
  parts = value.split(',')
  if len(parts) == 3 and all(p.strip().isdigit() for p in parts):
    rgb = tuple(int(p) for p in parts)
    if max(rgb) <= 255:
      return rgb
  raise ValueError(f'not a colour: {text!r}')


def background_hex(text: str) -> str:
  """The canonical '#rrggbb' of a background colour (see parse_background)."""
  return '#{:02x}{:02x}{:02x}'.format(*parse_background(text))


# What a file's extension says its content is (None: it says nothing).
_EXTENSION_FORMATS = {
    '.jpg': 'JPEG', '.jpeg': 'JPEG', '.jpe': 'JPEG', '.png': 'PNG',
    '.gif': 'GIF', '.bmp': 'BMP', '.webp': 'WEBP'}
# Pillow's names of content an extension's format covers (MPO is a JPEG
# with further pictures after it, DIB a BMP without its file header).
_SAME_FORMAT = {'MPO': 'JPEG', 'DIB': 'BMP'}
# ISO base media file brands (the 'ftyp' box) of still-image formats.
_HEIF_BRANDS = {b'heic': 'HEIC', b'heix': 'HEIC', b'heim': 'HEIC',
                b'heis': 'HEIC', b'hevc': 'HEIC', b'hevx': 'HEIC',
                b'hevm': 'HEIC', b'hevs': 'HEIC', b'avif': 'AVIF',
                b'avis': 'AVIF', b'mif1': 'HEIF', b'msf1': 'HEIF'}


def extension_format(path: str) -> Optional[str]:
  """The format a file name's extension promises ('JPEG' for x.jpg)."""
  return _EXTENSION_FORMATS.get(posixpath.splitext(path.lower())[1])


def content_format(format_name: str) -> str:
  """Pillow's format name, with the variants of one format merged."""
  return _SAME_FORMAT.get(format_name, format_name)


def sniff_format(data: bytes) -> Optional[str]:
  """The format of content Pillow did not recognise, from its first bytes
  (HEIC, AVIF, JPEG XL, PDF, SVG, HTML, ...), or None."""
  head = data[:64]
  if head[4:8] == b'ftyp':
    brands = [head[8:12]] + [head[i:i + 4] for i in range(16, 64, 4)]
    found = [_HEIF_BRANDS[b] for b in brands if b in _HEIF_BRANDS]
    # A generic HEIF brand names the codec among the compatible brands.
    named = [f for f in found if f != 'HEIF']
    return named[0] if named else found[0] if found else 'MP4/QuickTime video'
  if head.startswith(b'\xff\x0a') or head.startswith(
      b'\x00\x00\x00\x0cJXL \r\n\x87\n'):
    return 'JPEG XL'
  if head.startswith(b'%PDF'):
    return 'PDF'
  text = data[:1024].lstrip().lower()
  if text.startswith(b'<?xml') or text.startswith(b'<svg'):
    return 'SVG' if b'<svg' in text else 'XML'
  if text.startswith(b'<!doctype html') or text.startswith(b'<html'):
    return 'HTML'
  for magic, name in ((b'PK\x03\x04', 'ZIP'), (b'\x1f\x8b', 'gzip'),
                      (b'RIFF', 'RIFF')):
    if head.startswith(magic):
      return name
  return None


def _has_decoder(format_name: str) -> bool:
  """Whether Pillow here has a plug-in for the format (HEIC needs one such
  as pillow-heif, which registers 'HEIF')."""
  Image.init()
  name = 'HEIF' if format_name == 'HEIC' else format_name
  return name in Image.OPEN


def _not_readable(data: bytes, name: str) -> BadImageError:
  """The dead letter of content Pillow does not recognise: what the file
  name promised, and what the content is instead (or 'unknown')."""
  found = sniff_format(data)
  expected = extension_format(name)
  what = f'{found} content' if found else 'unknown content'
  if not found:
    why = 'format not recognised'
  elif _has_decoder(found):
    why = f'its {found} data does not decode'
  else:
    why = f'no {found} decoder is installed'
  if expected is None:
    return BadImageError('decode', f'not a readable image: {what} ({why})')
  if found == expected:
    return BadImageError('decode', f'corrupt {expected}: its header is not '
                         'readable')
  return BadImageError('decode', f'not a {expected}: {what} ({why})')


def _decode_error(fmt: str, e: Exception) -> BadImageError:
  """A decoding exception as a dead letter: 'truncated <fmt>: ...' when
  the file ends inside its image data, else 'corrupt or truncated image
  data: ...'."""
  if isinstance(e, OSError) and 'truncated' in str(e):
    return BadImageError(
        'decode', f'truncated {fmt or "image"}: the file ends inside its '
        f'image data ({e})')
  return BadImageError('decode', f'corrupt or truncated image data: '
                       f'{type(e).__name__}: {e}')


def _open(data: bytes, name: str = '') -> Image.Image:
  if not data:
    raise BadImageError('decode', 'empty file (0 bytes)')
  try:
    img = Image.open(io.BytesIO(data))
  except UnidentifiedImageError:
    raise _not_readable(data, name) from None
  except (OSError, ValueError, SyntaxError) as e:
    raise BadImageError('decode', f'cannot open image: {e}') from None
  if img.format == 'PNG':
    # Pillow's PNG decoder stops once it has the pixels and checks no chunk
    # CRC, so damaged image data can decode to garbage; verify() checks them.
    try:
      Image.open(io.BytesIO(data)).verify()
    except Exception as e:  # pylint: disable=broad-except
      raise _decode_error(content_format(img.format), e) from None
  return img


# ---------------------------------------------------- cut JPEG files --

# Start-of-frame markers (not DHT C4, JPG C8, DAC CC) and the progressive
# ones among them.
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_PROGRESSIVE_SOF = frozenset({0xC2, 0xC6, 0xCA, 0xCE})
# The next marker after entropy-coded data: 0xFF not followed by a stuffed
# zero, a restart marker or another fill byte.
_NEXT_MARKER = re.compile(rb'\xff[^\x00\xd0-\xd7\xff]')


def _jpeg_scans(data: bytes):
  """(progressive, component ids, scans) of a JPEG's first frame, each
  scan (component ids, Ss, Se, Al), from its marker segments only; None
  when its structure is not the plain one read here.

  The usual sequential JPEG has one scan of all components: reading stops
  at its header. Otherwise the entropy-coded data between scans is skipped
  with a regular expression, never decoded.
  """
  pos, n = 2, len(data)
  progressive, components, scans = None, (), []
  while pos + 4 <= n:
    if data[pos] != 0xFF:
      return None
    marker = data[pos + 1]
    if marker == 0xFF:  # fill byte
      pos += 1
      continue
    if marker == 0xD9:  # end of image
      break
    if 0xD0 <= marker <= 0xD7 or marker == 0x01:
      pos += 2
      continue
    length = (data[pos + 2] << 8) | data[pos + 3]
    segment = data[pos + 4:pos + 2 + length]
    if length < 2 or len(segment) != length - 2:
      return None
    pos += 2 + length
    if marker in _SOF_MARKERS and progressive is None:
      if len(segment) < 6 + 3 * segment[5]:
        return None
      progressive = marker in _PROGRESSIVE_SOF
      components = tuple(segment[6 + 3 * i] for i in range(segment[5]))
    elif marker == 0xDA:
      count = segment[0] if segment else 0
      if progressive is None or len(segment) < 4 + 2 * count:
        return None
      ss, se, approximation = segment[1 + 2 * count:4 + 2 * count]
      scans.append((tuple(segment[1 + 2 * i] for i in range(count)), ss, se,
                    approximation & 15))
      if not progressive and len(scans) == 1 and len(scans[0][0]) == len(
          components):
        break  # one interleaved scan of every component
      found = _NEXT_MARKER.search(data, pos)
      pos = found.start() if found else n
  if progressive is None:
    return None
  return progressive, components, scans


def _missing_scans(progressive: bool, components, scans) -> Optional[str]:
  """What the scan headers show is missing, or None.

  A sequential JPEG needs a scan of every component. A progressive one
  sends coefficients in successive passes: every component's DC, and
  every coefficient any scan sent, must reach full precision (Al 0) by its
  last scan. A file cut between scans fails this (libjpeg does not warn).
  """
  scanned = {c for ids, *_ in scans for c in ids}
  missing = [c for c in components if c not in scanned]
  if missing:
    return (f'the file ends before the scans of {len(missing)} of its '
            f'{len(components)} colour components')
  if not progressive:
    return None
  precision = {}  # (component, coefficient) -> Al of its last scan
  for ids, ss, se, al in scans:
    for c in ids:
      for k in range(ss, se + 1):
        precision[c, k] = al
  short = {c for (c, _), al in precision.items() if al}
  if short:
    return (f'the file ends after {len(scans)} progressive scans, before '
            f'{len(short)} of its {len(components)} colour components are '
            'complete')
  return None


def _grey_corner(img: Image.Image) -> bool:
  """Whether the last pixel is the mid-grey a JPEG decoder leaves where
  the entropy-coded data ran out (all coefficients zero: 128, or 127 for
  inverted CMYK)."""
  px = img.getpixel((img.width - 1, img.height - 1))
  return all(v in (127, 128) for v in (px if isinstance(px, tuple) else
                                         (px,)))


def _check_jpeg_complete(img: Image.Image, data: bytes,
                         declared: Tuple[int, int]) -> None:
  """Raises BadImageError('truncated JPEG: ...') for a JPEG whose data
  ends before its picture does, though Pillow decoded it.

  libjpeg fills the blocks after a premature end of the entropy-coded data
  with zeros and only warns, which Pillow ignores: a file cut short and
  given an end-of-image marker again (FF D9), or whose frame header
  declares more pixels than its data holds, decodes without an error,
  padded with grey. The exact test is libjpeg's warning ("premature end of
  data segment"), which a second, strict decode (simplejpeg, at 1/8 scale,
  in grey) raises. It runs only when needed:

  - a sequential JPEG of one scan (what cameras and phones write) cut
    anywhere before its last block has its bottom-right pixel exactly
    mid-grey; only such files are decoded again (a sound one with that
    corner passes);
  - a JPEG of several scans (every progressive one) cut between two scans
    shows in its scan headers, which are read without decoding;
  - but one cut inside its last scan can look sound in every pixel (a
    progressive file's last scan is a refinement, often half of the file,
    and leaves no grey), so every JPEG of several scans is decoded again.
  """
  parsed = _jpeg_scans(data)
  if parsed is not None:
    problem = _missing_scans(*parsed)
    if problem:
      raise BadImageError('decode', f'truncated JPEG: {problem}')
  several_scans = parsed is not None and len(parsed[2]) > 1
  if not (several_scans or _grey_corner(img)):
    return
  try:
    simplejpeg.decode_jpeg(data, colorspace='GRAY', min_height=1,
                           min_width=1, min_factor=8, strict=True)
  except ValueError as e:
    if 'premature end' in str(e).lower():
      w, h = declared
      raise BadImageError(
          'decode', f'truncated JPEG: its image data ends before the {w}x{h} '
          f'pixels its header declares (libjpeg: {e})') from None


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


def _orientation(img: Image.Image) -> int:
  try:
    return int(img.getexif().get(_EXIF_ORIENTATION, 1))
  except Exception:  # pylint: disable=broad-except
    # A malformed EXIF block must not cost us the image; treat as upright.
    return 1


def _scale_for(mode: str, src_w: int, src_h: int, dst_w: int,
               dst_h: int) -> Tuple[float, float]:
  """Scale factors (x, y) from the source to the resized content."""
  sx, sy = dst_w / src_w, dst_h / src_h
  if mode == 'fit':
    s = min(sx, sy)
    return s, s
  if mode == 'crop':
    s = max(sx, sy)
    return s, s
  return sx, sy


def _draft_size(cfg: ImageConfig, w: int, h: int,
                orientation: int) -> Tuple[int, int]:
  """The smallest size a w x h JPEG may be decoded at, in its own
  (unrotated) orientation: the size its content is resized to."""
  if orientation in _TRANSPOSED_ORIENTATIONS:
    dst_w, dst_h = cfg.height, cfg.width  # in the file's own orientation
  else:
    dst_w, dst_h = cfg.width, cfg.height
  sx, sy = _scale_for(cfg.resize_mode, w, h, dst_w, dst_h)
  # For 'crop' only the centre is kept, but at the covering scale, so the
  # whole image needs the same scale as the kept part.
  return max(1, int(np.ceil(w * sx))), max(1, int(np.ceil(h * sy)))


def _draft_reduction(cfg: ImageConfig, w: int, h: int,
                     orientation: int) -> int:
  """The DCT scaling (1, 2, 4 or 8: decode at 1/n size) for a w x h JPEG.

  The rule is Pillow's draft(): the largest reduction that still leaves
  at least the size the content is resized to, so the final, antialiased
  resize always scales down from more pixels than it keeps. Only these
  four reductions: libjpeg's other ones (3/8, 5/8, ...) are cheaper still
  but visibly worse (blocky) when what they give is about the final size.
  """
  if not cfg.draft:
    return 1
  need_w, need_h = _draft_size(cfg, w, h, orientation)
  ratio = min(w // need_w, h // need_h)
  return next((n for n in (8, 4, 2) if ratio >= n), 1)


def _draft(img: Image.Image, cfg: ImageConfig, orientation: int) -> None:
  """Asks Pillow's JPEG decoder for a DCT-scaled decode no smaller than
  needed (see _draft_reduction).

  libjpeg can decode at 1/2, 1/4 or 1/8 size for little more than the cost of
  reading the file.
  """
  if img.format != 'JPEG':
    return
  w, h = img.size
  if _draft_reduction(cfg, w, h, orientation) == 1:
    return  # no reduction possible
  mode = 'L' if cfg.color == 'grey' and img.mode == 'RGB' else img.mode
  img.draft(mode, _draft_size(cfg, w, h, orientation))


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


# ------------------------------------------------- JPEG fast path --

# Colour spaces of the JPEG files the fast path decodes (as
# simplejpeg.decode_jpeg_header names them); CMYK and YCCK files take
# Pillow's path, which converts them as before.
_FAST_JPEG_COLORSPACES = ('YCbCr', 'RGB', 'Gray')


def _orient(arr: np.ndarray, orientation: int) -> np.ndarray:
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


def _decode_jpeg(img: Image.Image, data: bytes, cfg: ImageConfig,
                 orientation: int) -> Optional[np.ndarray]:
  """A plain JPEG decoded by libjpeg-turbo through simplejpeg, at the DCT
  scaling Pillow's draft() would use, and oriented; None for a file this
  path does not decode exactly as Pillow's path would.

  simplejpeg decodes straight into a numpy array and releases the GIL;
  Pillow decodes into its own image memory, which is then copied. Strict
  decoding raises on any libjpeg warning, such as the premature end of a
  cut file, and a progressive file cut between two scans shows in its scan
  headers. Every such file, and every one that is not 8-bit YCbCr, RGB or
  grey (CMYK, YCCK, or what simplejpeg does not read), returns None: it
  goes through Pillow's path, which decodes it or names what is wrong with
  it as before.

  Returns:
    uint8 pixels, [h, w] when the file is grey or grey output is asked
    for, else [h, w, 3] RGB.
  """
  if img.format != 'JPEG' or img.mode not in ('RGB', 'L'):
    return None
  try:
    height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
  except Exception:  # pylint: disable=broad-except
    return None
  if colorspace not in _FAST_JPEG_COLORSPACES or (width, height) != img.size:
    return None
  parsed = _jpeg_scans(data)
  if parsed is None or _missing_scans(*parsed):
    return None
  reduction = _draft_reduction(cfg, width, height, orientation)
  grey = img.mode == 'L' or cfg.color == 'grey'
  try:
    arr = simplejpeg.decode_jpeg(
        data, colorspace='GRAY' if grey else 'RGB',
        min_width=-(-width // reduction), min_height=-(-height // reduction),
        strict=True)
  except Exception:  # pylint: disable=broad-except
    return None
  if grey:
    arr = arr.reshape(arr.shape[:2])
  return _orient(arr, orientation)


def _decode_with_pillow(img: Image.Image, data: bytes, cfg: ImageConfig,
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
    _draft(img, cfg, orientation)
  img.load()
  if isinstance(img, JpegImagePlugin.JpegImageFile):
    _check_jpeg_complete(img, data, declared)
  if img.format != 'JPEG':
    # Other formats may keep EXIF after the pixel data; read it only after
    # a successful decode, so a decoding error is never swallowed here.
    orientation = _orientation(img)
  if orientation != 1:
    img = ImageOps.exif_transpose(img)  # keeps info['transparency']
  img = _flatten_alpha(img, cfg.background_rgb)
  img = _to_8bit(img, cfg.color)
  return np.asarray(img), orientation


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


def _resize(arr: np.ndarray, cfg: ImageConfig,
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


def _decode_pixels(data: bytes, cfg: ImageConfig, name: str = ''
                   ) -> Tuple[np.ndarray, int, int, str]:
  """The work of decode_resize_and_identify, on numpy arrays: the resized
  uint8 pixels ([h, w] for grey, [h, w, 3] for RGB, C-contiguous), the
  original height and width after EXIF orientation and the content's
  format."""
  img = _open(data, name)
  source_format = content_format(img.format or '')
  w, h = img.size
  if w * h > cfg.max_pixels:
    raise BadImageError(
        'decode', f'image of {w}x{h} = {w * h} pixels is over the limit of '
        f'{cfg.max_pixels} pixels (possible decompression bomb)')
  if w <= 0 or h <= 0:
    raise BadImageError('decode', f'image has no pixels ({w}x{h})')
  orientation = 1
  try:
    arr = None
    if img.format == 'JPEG':
      # EXIF sits before the pixels in a JPEG: read it without decoding, so
      # the reduced-size decode can take the rotation into account.
      orientation = _orientation(img)
      arr = _decode_jpeg(img, data, cfg, orientation)
    if arr is None:
      arr, orientation = _decode_with_pillow(img, data, cfg, orientation)
  except BadImageError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    # Pillow reports truncated and corrupt data with OSError, SyntaxError,
    # ValueError and, for some formats, other types; all mean the same here.
    raise _decode_error(source_format, e) from None
  # Fewer pixels than the file has: a reduced-size (DCT-scaled) decode.
  reduced = arr.shape[0] * arr.shape[1] < w * h
  if orientation in _TRANSPOSED_ORIENTATIONS:
    w, h = h, w
  arr = _resize(arr, cfg, reduced)
  if cfg.color != 'grey' and arr.ndim == 2:
    arr = cv2.cvtColor(arr, cv2.COLOR_GRAY2RGB)  # a grey JPEG, resized grey
  return np.ascontiguousarray(arr), h, w, source_format


def decode_and_resize(data: bytes, cfg: ImageConfig, name: str = ''
                      ) -> Tuple[Image.Image, int, int]:
  """Decodes image bytes and resizes them to the configured size.

  See decode_resize_and_identify, which also returns the content's format.
  """
  img, h, w, _ = decode_resize_and_identify(data, cfg, name)
  return img, h, w


def decode_resize_and_identify(data: bytes, cfg: ImageConfig, name: str = ''
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


def _pixels(img: Union[Image.Image, np.ndarray]) -> np.ndarray:
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


def content_digest(img: Union[Image.Image, np.ndarray]) -> str:
  """The content key of a resized 8-bit image: a SHA-256 of its size,
  mode and pixels (32 hex digits).

  Args:
    img: An 'RGB' or 'L' Pillow image, or its pixels as a uint8 [h, w, 3]
      or [h, w] array (the same digest: the array's bytes are what
      Image.tobytes() gives).
  """
  arr = _pixels(img)
  h, w = arr.shape[:2]
  mode = 'L' if arr.ndim == 2 else 'RGB'
  digest = hashlib.sha256(f'{mode}:{w}x{h}:'.encode())
  digest.update(arr)
  return digest.hexdigest()[:32]


def identify_content(data: bytes, cfg: ImageConfig, name: str = '') -> str:
  """The content digest of an image's bytes (decoded and resized as
  process_image does, not encoded).

  Raises:
    BadImageError: The input cannot become an example.
  """
  arr, _, _, _ = _decode_pixels(data, cfg, name)
  return content_digest(arr)


def encode(img: Union[Image.Image, np.ndarray], cfg: ImageConfig) -> bytes:
  """The stored bytes of a resized image (see ImageConfig.storage).

  JPEG goes through simplejpeg (libjpeg-turbo, 4:2:0 like Pillow's default):
  it releases the GIL while encoding, where Pillow's encoder into memory
  holds it, which alone kept two decoding threads from scaling.

  Args:
    img: An 'RGB' or 'L' Pillow image, or its pixels as a uint8 [h, w, 3]
      or [h, w] array.
    cfg: The image options.
  """
  arr = _pixels(img)
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


def process_image(data: bytes, cfg: ImageConfig,
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
      data=encode(arr, cfg), original_height=orig_h, original_width=orig_w,
      channel_sum=sums, channel_sum_squares=squares, pixel_count=count,
      source_format=source_format, content=content_digest(arr),
      signature=signature_of_pixels(arr) if cfg.signature else b'')


def process_inputs(kernel, inputs, cfg: ImageConfig) -> list:
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


def zscore_from_sums(sums: Sequence[float], squares: Sequence[float],
                     count: float) -> Tuple[np.ndarray, np.ndarray]:
  """Per-channel mean and std (of pixels scaled to [0, 1]) from sums."""
  sums = np.asarray(sums, np.float64) / 255.0
  squares = np.asarray(squares, np.float64) / (255.0 * 255.0)
  mean = sums / count
  var = np.maximum(squares / count - mean * mean, 0.0)
  return mean, np.sqrt(var)



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
  arr = _pixels(img)
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


def identify_content_and_signature(data: bytes, cfg: ImageConfig,
                                   name: str = '') -> Tuple[str, bytes]:
  """identify_content and the near-duplicate signature, from one decode
  (the first pass of a two-pass run).

  Raises:
    BadImageError: The input cannot become an example.
  """
  arr, _, _, _ = _decode_pixels(data, cfg, name)
  return content_digest(arr), signature_of_pixels(arr)
