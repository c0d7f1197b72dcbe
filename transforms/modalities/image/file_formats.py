"""What a file holds: the format its name promises, the format its content
is (Pillow's name, or a guess from its first bytes when Pillow does not
recognise it), and opening it with Pillow, with the dead letter's reason
when it does not open or decode.
"""

import io
import posixpath
from typing import Optional

from PIL import Image
from PIL import UnidentifiedImageError

from transforms.modalities.image import config


# We enforce our own, configurable pixel limit (ImageConfig.max_pixels) on
# every image before it is decoded, and report it as a dead letter. Pillow's
# global check would otherwise warn or raise with its own fixed limit.
Image.MAX_IMAGE_PIXELS = None


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


def _not_readable(data: bytes, name: str) -> config.BadImageError:
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
    return config.BadImageError('decode',
                                f'not a readable image: {what} ({why})')
  if found == expected:
    return config.BadImageError('decode', f'corrupt {expected}: its header '
                                'is not readable')
  return config.BadImageError('decode', f'not a {expected}: {what} ({why})')


def decode_error(fmt: str, e: Exception) -> config.BadImageError:
  """A decoding exception as a dead letter: 'truncated <fmt>: ...' when
  the file ends inside its image data, else 'corrupt or truncated image
  data: ...'."""
  if isinstance(e, OSError) and 'truncated' in str(e):
    return config.BadImageError(
        'decode', f'truncated {fmt or "image"}: the file ends inside its '
        f'image data ({e})')
  return config.BadImageError('decode', f'corrupt or truncated image data: '
                       f'{type(e).__name__}: {e}')


def open_image(data: bytes, name: str = '') -> Image.Image:
  if not data:
    raise config.BadImageError('decode', 'empty file (0 bytes)')
  try:
    img = Image.open(io.BytesIO(data))
  except UnidentifiedImageError:
    raise _not_readable(data, name) from None
  except (OSError, ValueError, SyntaxError) as e:
    raise config.BadImageError('decode', f'cannot open image: {e}') from None
  if img.format == 'PNG':
    # Pillow's PNG decoder stops once it has the pixels and checks no chunk
    # CRC, so damaged image data can decode to garbage; verify() checks them.
    try:
      Image.open(io.BytesIO(data)).verify()
    except Exception as e:  # pylint: disable=broad-except
      raise decode_error(content_format(img.format), e) from None
  return img
