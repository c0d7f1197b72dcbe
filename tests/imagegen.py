"""Builds small image trees for the pipeline tests: every format and mode
the pipeline must read, and every kind of bad input it must dead-letter."""

import io
import os
import struct
from typing import Dict

import numpy as np
from PIL import Image

# (label, file name) -> why the file is bad; filled by make_tree.
BAD_STAGE = 'decode'


def _photo(rng, w, h, mode='RGB'):
  base = rng.random((4, 4, 3)) * 255
  img = Image.fromarray(base.astype(np.uint8), 'RGB').resize(
      (w, h), Image.Resampling.BICUBIC)
  return img.convert(mode) if mode != 'RGB' else img


def _save(img, path, **kw):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  img.save(path, **kw)


def jpeg_bytes(img, **kw) -> bytes:
  buf = io.BytesIO()
  img.save(buf, format='JPEG', **kw)
  return buf.getvalue()


def write_good_images(root: str, seed: int = 0) -> Dict[str, int]:
  """Writes images of every supported format and mode; returns per label."""
  rng = np.random.default_rng(seed)
  counts = {}

  def put(label, name, img, **kw):
    _save(img, os.path.join(root, label, name), **kw)
    counts[label] = counts.get(label, 0) + 1

  for i in range(10):
    put('cat', f'c{i:02d}.jpg', _photo(rng, 320 + 16 * i, 240), quality=90)
  put('cat', 'cmyk.jpg', _photo(rng, 200, 150, 'CMYK'), quality=90)
  put('cat', 'grey.jpg', _photo(rng, 200, 300, 'L'), quality=90)
  exif = Image.Exif()
  exif[0x0112] = 6
  put('cat', 'rotated.jpg', _photo(rng, 300, 200), exif=exif, quality=90)
  for i in range(6):
    put('dog', f'd{i:02d}.png', _photo(rng, 250, 250 + 10 * i))
  put('dog', 'rgba.png', _photo(rng, 180, 120, 'RGBA'))
  put('dog', 'palette.png', _photo(rng, 180, 120).quantize(16))
  # A gradient, offset by the seed so that folders written with different
  # seeds share no image (validation reports the same content in two
  # splits as leakage).
  sixteen = (np.linspace(0, 60000, 160 * 120).reshape(120, 160) +
             rng.integers(0, 5000)).astype(np.uint16)
  put('dog', 'sixteen.png', Image.fromarray(sixteen, 'I;16'))
  # A label with a space and non-ASCII letters.
  label = 'chat noir é'
  frames = [_photo(rng, 150, 100, 'RGB').quantize(32) for _ in range(3)]
  _save(frames[0], os.path.join(root, label, 'anim.gif'), save_all=True,
        append_images=frames[1:])
  counts[label] = 1
  put(label, 'b.bmp', _photo(rng, 128, 96))
  put(label, 'w.webp', _photo(rng, 128, 96), quality=80)
  for i in range(4):
    put(label, f'n{i}.jpeg', _photo(rng, 300, 300), quality=85)
  return counts


def write_bad_images(root: str, label: str = 'cat') -> Dict[str, str]:
  """Writes one file of every bad kind; returns name -> expected reason."""
  rng = np.random.default_rng(1)
  folder = os.path.join(root, label)
  os.makedirs(folder, exist_ok=True)
  good = jpeg_bytes(_photo(rng, 400, 300), quality=90)
  with open(os.path.join(folder, 'truncated.jpg'), 'wb') as f:
    f.write(good[:len(good) // 3])
  open(os.path.join(folder, 'empty.jpg'), 'wb').close()
  with open(os.path.join(folder, 'notes.jpg'), 'w', encoding='utf-8') as f:
    f.write('this is not an image\n' * 20)
  png = io.BytesIO()
  _photo(rng, 200, 200).save(png, format='PNG')
  data = bytearray(png.getvalue())
  mid = len(data) // 2
  data[mid:mid + 64] = bytes(64)
  with open(os.path.join(folder, 'corrupt.png'), 'wb') as f:
    f.write(bytes(data))
  # Over the pixel limit the tests set (--max_pixels 1000000).
  _save(Image.new('L', (1300, 1000), 128),
        os.path.join(folder, 'huge.png'))
  # Not an image extension: skipped, not dead-lettered.
  with open(os.path.join(folder, 'README.txt'), 'w', encoding='utf-8') as f:
    f.write('not an input')
  return {
      'truncated.jpg': 'truncated JPEG: the file ends inside its image data',
      'empty.jpg': 'empty file',
      'notes.jpg': 'not a JPEG: unknown content',
      'corrupt.png': 'corrupt or truncated',
      'huge.png': 'over the limit',
  }


def with_frame_size(data: bytes, width: int, height: int) -> bytes:
  """The JPEG with its frame header (SOF) declaring another size."""
  out = bytearray(data)
  pos = 2
  while out[pos + 1] not in (0xC0, 0xC1, 0xC2):
    pos += 2 + struct.unpack('>H', bytes(out[pos + 2:pos + 4]))[0]
  out[pos + 5:pos + 9] = struct.pack('>HH', height, width)
  return bytes(out)
