"""Per-image work: decode, orient, convert, resize, encode. No Beam in here.

Everything here is a plain function of bytes and options, so the pipeline's
DoFn, the benchmark's single-process baseline and the tests all call the same
code.

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
from typing import Optional, Sequence, Tuple

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

  @property
  def channels(self) -> int:
    return 1 if self.color == 'grey' else 3

  @property
  def background_rgb(self) -> Tuple[int, int, int]:
    return parse_background(self.background)

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


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
  """
  data: bytes
  original_height: int
  original_width: int
  channel_sum: Tuple[float, ...]
  channel_sum_squares: Tuple[float, ...]
  pixel_count: int
  source_format: str = ''
  content: str = ''


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


def _draft(img: Image.Image, cfg: ImageConfig, orientation: int) -> None:
  """Asks the JPEG decoder for a DCT-scaled decode no smaller than needed.

  libjpeg can decode at 1/2, 1/4 or 1/8 size for little more than the cost of
  reading the file. Pillow picks the largest such reduction that still leaves
  the decoded image at least as large as the size requested, so the final
  (antialiased) resize always scales down from more pixels than it keeps.
  """
  if img.format != 'JPEG':
    return
  w, h = img.size
  if orientation in _TRANSPOSED_ORIENTATIONS:
    dst_w, dst_h = cfg.height, cfg.width  # in the file's own orientation
  else:
    dst_w, dst_h = cfg.width, cfg.height
  sx, sy = _scale_for(cfg.resize_mode, w, h, dst_w, dst_h)
  # For 'crop' only the centre is kept, but at the covering scale, so the
  # whole image needs the same scale as the kept part.
  need = (max(1, int(np.ceil(w * sx))), max(1, int(np.ceil(h * sy))))
  if need[0] * 2 > w or need[1] * 2 > h:
    return  # no reduction possible
  mode = 'L' if cfg.color == 'grey' and img.mode == 'RGB' else img.mode
  img.draft(mode, need)


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


def _resize(img: Image.Image, cfg: ImageConfig) -> Image.Image:
  w, h = img.size
  dst = (cfg.width, cfg.height)
  resample = Image.Resampling.BILINEAR  # antialiased when scaling down
  if cfg.resize_mode == 'stretch':
    return img.resize(dst, resample) if img.size != dst else img
  if cfg.resize_mode == 'crop':
    s = max(cfg.width / w, cfg.height / h)
    box_w, box_h = cfg.width / s, cfg.height / s
    left, top = (w - box_w) / 2, (h - box_h) / 2
    return img.resize(dst, resample, box=(left, top, left + box_w,
                                          top + box_h))
  # fit: scale to fit inside, pad the rest with black, content centred.
  s = min(cfg.width / w, cfg.height / h)
  new = (max(1, min(cfg.width, round(w * s))),
         max(1, min(cfg.height, round(h * s))))
  content = img.resize(new, resample) if new != img.size else img
  if new == dst:
    return content
  canvas = Image.new(img.mode, dst, 0)
  canvas.paste(content, ((cfg.width - new[0]) // 2, (cfg.height - new[1]) // 2))
  return canvas


def _channel_sums(img: Image.Image) -> Tuple[Tuple[float, ...],
                                              Tuple[float, ...], int]:
  """Exact per-channel sums and sums of squares from the histogram."""
  hist = np.asarray(img.histogram(), dtype=np.float64).reshape(-1, 256)
  values = np.arange(256, dtype=np.float64)
  sums = hist @ values
  squares = hist @ (values * values)
  return (tuple(float(v) for v in sums), tuple(float(v) for v in squares),
          img.size[0] * img.size[1])


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
    if img.format == 'JPEG':
      # EXIF sits before the pixels in a JPEG: read it without decoding, so
      # the reduced-size decode can take the rotation into account.
      orientation = _orientation(img)
      if cfg.draft:
        _draft(img, cfg, orientation)
    img.load()
    if isinstance(img, JpegImagePlugin.JpegImageFile):
      _check_jpeg_complete(img, data, (w, h))
    if img.format != 'JPEG':
      # Other formats may keep EXIF after the pixel data; read it only after
      # a successful decode, so a decoding error is never swallowed here.
      orientation = _orientation(img)
    if orientation != 1:
      img = ImageOps.exif_transpose(img)  # keeps info['transparency']
    img = _flatten_alpha(img, cfg.background_rgb)
    img = _to_8bit(img, cfg.color)
  except BadImageError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    # Pillow reports truncated and corrupt data with OSError, SyntaxError,
    # ValueError and, for some formats, other types; all mean the same here.
    raise _decode_error(source_format, e) from None
  if orientation in _TRANSPOSED_ORIENTATIONS:
    w, h = h, w
  return _resize(img, cfg), h, w, source_format


def content_digest(img: Image.Image) -> str:
  """The content key of a resized 8-bit image: a SHA-256 of its size,
  mode and pixels (32 hex digits)."""
  digest = hashlib.sha256(f'{img.mode}:{img.size[0]}x{img.size[1]}:'.encode())
  digest.update(img.tobytes())
  return digest.hexdigest()[:32]


def identify_content(data: bytes, cfg: ImageConfig, name: str = '') -> str:
  """The content digest of an image's bytes (decoded and resized as
  process_image does, not encoded).

  Raises:
    BadImageError: The input cannot become an example.
  """
  img, _, _, _ = decode_resize_and_identify(data, cfg, name)
  return content_digest(img)


def encode(img: Image.Image, cfg: ImageConfig) -> bytes:
  """The stored bytes of a resized image (see ImageConfig.storage).

  JPEG goes through simplejpeg (libjpeg-turbo, 4:2:0 like Pillow's default):
  it releases the GIL while encoding, where Pillow's encoder into memory
  holds it, which alone kept two decoding threads from scaling.
  """
  if cfg.storage == 'jpeg':
    arr = np.asarray(img)
    if arr.ndim == 2:
      arr = arr[:, :, None]
    return simplejpeg.encode_jpeg(
        np.ascontiguousarray(arr), quality=cfg.jpeg_quality,
        colorspace='GRAY' if arr.shape[2] == 1 else 'RGB',
        colorsubsampling='420')
  if cfg.storage == 'png':
    buf = io.BytesIO()
    img.save(buf, format='PNG', compress_level=3)
    return buf.getvalue()
  return img.tobytes()  # uint8 and float32: raw HWC pixels


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
  img, orig_h, orig_w, source_format = decode_resize_and_identify(
      data, cfg, name)
  sums, squares, count = _channel_sums(img)
  return ProcessedImage(
      data=encode(img, cfg), original_height=orig_h, original_width=orig_w,
      channel_sum=sums, channel_sum_squares=squares, pixel_count=count,
      source_format=source_format, content=content_digest(img))


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
