"""What is particular to JPEG files: the scan headers that show a file cut
short (libjpeg only warns), the reduced-size (DCT-scaled) decoding, and the
fast path that decodes a plain JPEG with simplejpeg instead of Pillow.
"""

import re
from typing import Optional, Tuple

import numpy as np
from PIL import Image
import simplejpeg

from transforms.modalities.image import config
from transforms.modalities.image import exif


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


def check_jpeg_complete(img: Image.Image, data: bytes,
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
      raise config.BadImageError('decode', f'truncated JPEG: {problem}')
  several_scans = parsed is not None and len(parsed[2]) > 1
  if not (several_scans or _grey_corner(img)):
    return
  try:
    simplejpeg.decode_jpeg(data, colorspace='GRAY', min_height=1,
                           min_width=1, min_factor=8, strict=True)
  except ValueError as e:
    if 'premature end' in str(e).lower():
      w, h = declared
      raise config.BadImageError(
          'decode', f'truncated JPEG: its image data ends before the {w}x{h} '
          f'pixels its header declares (libjpeg: {e})') from None


# ------------------------------------------ reduced-size decoding --


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


def _draft_size(cfg: config.ImageConfig, w: int, h: int,
                orientation: int) -> Tuple[int, int]:
  """The smallest size a w x h JPEG may be decoded at, in its own
  (unrotated) orientation: the size its content is resized to."""
  if orientation in exif.TRANSPOSED_ORIENTATIONS:
    dst_w, dst_h = cfg.height, cfg.width  # in the file's own orientation
  else:
    dst_w, dst_h = cfg.width, cfg.height
  sx, sy = _scale_for(cfg.resize_mode, w, h, dst_w, dst_h)
  # For 'crop' only the centre is kept, but at the covering scale, so the
  # whole image needs the same scale as the kept part.
  return max(1, int(np.ceil(w * sx))), max(1, int(np.ceil(h * sy)))


def _draft_reduction(cfg: config.ImageConfig, w: int, h: int,
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


def draft(img: Image.Image, cfg: config.ImageConfig, orientation: int) -> None:
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


# ------------------------------------------------- JPEG fast path --

# Colour spaces of the JPEG files the fast path decodes (as
# simplejpeg.decode_jpeg_header names them); CMYK and YCCK files take
# Pillow's path, which converts them as before.
_FAST_JPEG_COLORSPACES = ('YCbCr', 'RGB', 'Gray')


def decode_jpeg(img: Image.Image, data: bytes, cfg: config.ImageConfig,
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
  return exif.orient(arr, orientation)
