"""Unit tests for transforms/modalities/image/processing.py (pure functions, generated images only)."""

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image
from PIL import ImageOps
from PIL import JpegImagePlugin
from PIL import features
import simplejpeg

import imagegen
from pipelines import sample_data
from transforms.modalities.image import config
from transforms.modalities.image import encoding
from transforms.modalities.image import exif
from transforms.modalities.image import file_formats
from transforms.modalities.image import jpeg
from transforms.modalities.image import pillow_decode
from transforms.modalities.image import processing

RED = (255, 0, 0)
GREEN = (0, 255, 0)
BLUE = (0, 0, 255)
YELLOW = (255, 255, 0)
EXIF_ORIENTATION = 0x0112


# ---------------------------------------------------------------- helpers


def _image_bytes(img: Image.Image, fmt: str, **save_kwargs) -> bytes:
  buf = io.BytesIO()
  img.save(buf, format=fmt, **save_kwargs)
  return buf.getvalue()


def _solid(width, height, color, mode='RGB') -> Image.Image:
  return Image.new(mode, (width, height), color)


def _left_right(width, height, left=RED, right=BLUE) -> np.ndarray:
  arr = np.zeros((height, width, 3), np.uint8)
  arr[:, :width // 2] = left
  arr[:, width // 2:] = right
  return arr


def _quadrants(width, height) -> np.ndarray:
  """Top-left red, top-right green, bottom-left blue, bottom-right yellow."""
  arr = np.zeros((height, width, 3), np.uint8)
  h2, w2 = height // 2, width // 2
  arr[:h2, :w2] = RED
  arr[:h2, w2:] = GREEN
  arr[h2:, :w2] = BLUE
  arr[h2:, w2:] = YELLOW
  return arr


def _smooth_photo(width=640, height=480) -> np.ndarray:
  """A smooth, photo-like RGB image (low-frequency sinusoids)."""
  yy, xx = np.mgrid[0:height, 0:width].astype(np.float64)
  arr = np.stack([
      127 + 100 * np.sin(xx / 37) * np.cos(yy / 53),
      127 + 90 * np.cos((xx + yy) / 61),
      127 + 80 * np.sin(yy / 29 + xx / 97),
  ], axis=-1)
  return np.clip(arr, 0, 255).astype(np.uint8)


def _with_exif_orientation(arr: np.ndarray, orientation: int) -> bytes:
  img = Image.fromarray(arr)
  tags = img.getexif()
  tags[EXIF_ORIENTATION] = orientation
  return _image_bytes(img, 'JPEG', quality=95, exif=tags.tobytes())


def _process_raw(data: bytes, **cfg_kwargs):
  """process_image with uint8 storage; returns (ProcessedImage, HWC array)."""
  cfg = config.ImageConfig(storage='uint8', **cfg_kwargs)
  out = processing.process_image(data, cfg)
  arr = encoding.decode_stored(out.data, 'uint8', cfg.height, cfg.width,
                               cfg.channels)
  return out, arr


def _mean_color(arr: np.ndarray) -> np.ndarray:
  return arr.reshape(-1, arr.shape[-1]).astype(np.float64).mean(axis=0)


def _assert_color(region: np.ndarray, color, tol=12.0):
  np.testing.assert_allclose(_mean_color(region), color, atol=tol)


# ------------------------------------------------------------ resize modes


@pytest.mark.parametrize('mode', config.RESIZE_MODES)
@pytest.mark.parametrize('src_size', [(640, 480), (480, 640), (8, 6), (5, 17)],
                         ids=['landscape', 'portrait', 'small-landscape',
                              'small-portrait'])
@pytest.mark.parametrize('dst_size', [(224, 224), (300, 100), (96, 160)],
                         ids=['square', 'wide', 'tall'])
def test_output_shape_for_every_mode(mode, src_size, dst_size):
  data = _image_bytes(_solid(*src_size, (200, 100, 50)), 'PNG')
  dst_w, dst_h = dst_size
  out, arr = _process_raw(data, width=dst_w, height=dst_h, resize_mode=mode)
  assert arr.shape == (dst_h, dst_w, 3)
  assert out.pixel_count == dst_w * dst_h
  assert (out.original_width, out.original_height) == src_size


@pytest.mark.parametrize('src_size', [(640, 480), (8, 6)],
                         ids=['landscape', 'upscaled-small'])
def test_fit_landscape_pads_top_and_bottom_with_black(src_size):
  data = _image_bytes(_solid(*src_size, (255, 255, 255)), 'PNG')
  _, arr = _process_raw(data, width=224, height=224, resize_mode='fit')
  # 4:3 into 224x224 -> 224x168 content, 28 black rows above and below.
  assert (arr[:28] == 0).all()
  assert (arr[196:] == 0).all()
  assert (arr[28:196] == 255).all()


@pytest.mark.parametrize('src_size', [(480, 640), (6, 8)],
                         ids=['portrait', 'upscaled-small'])
def test_fit_portrait_pads_left_and_right_with_black(src_size):
  data = _image_bytes(_solid(*src_size, (255, 255, 255)), 'PNG')
  _, arr = _process_raw(data, width=224, height=224, resize_mode='fit')
  assert (arr[:, :28] == 0).all()
  assert (arr[:, 196:] == 0).all()
  assert (arr[:, 28:196] == 255).all()


@pytest.mark.parametrize('src_size,dst_size', [
    ((640, 480), (300, 100)),
    ((480, 640), (100, 300)),
    ((1000, 10), (224, 224)),
    ((37, 91), (200, 120)),
])
def test_fit_content_is_centred_and_keeps_aspect_ratio(src_size, dst_size):
  data = _image_bytes(_solid(*src_size, (255, 255, 255)), 'PNG')
  dst_w, dst_h = dst_size
  _, arr = _process_raw(data, width=dst_w, height=dst_h, resize_mode='fit')
  rows = np.flatnonzero(arr.any(axis=(1, 2)))
  cols = np.flatnonzero(arr.any(axis=(0, 2)))
  top, bottom = rows[0], dst_h - 1 - rows[-1]
  left, right = cols[0], dst_w - 1 - cols[-1]
  assert abs(top - bottom) <= 1 and abs(left - right) <= 1
  # One side fills the target exactly.
  assert top + bottom == 0 or left + right == 0
  src_w, src_h = src_size
  scale = min(dst_w / src_w, dst_h / src_h)
  assert abs(cols.size - src_w * scale) <= 1
  assert abs(rows.size - src_h * scale) <= 1
  # Everything inside the content box is the image, nothing outside.
  assert (arr[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1] == 255).all()


def test_crop_landscape_cuts_left_and_right():
  arr = np.zeros((480, 640, 3), np.uint8)
  arr[:] = GREEN
  arr[:, :80] = RED  # the crop keeps columns 80..560
  arr[:, 560:] = BLUE
  data = _image_bytes(Image.fromarray(arr), 'PNG')
  _, out = _process_raw(data, width=224, height=224, resize_mode='crop')
  # Inside (away from the filter's reach at the very edge) only green.
  assert (out[:, 1:-1] == GREEN).all()
  # The edge columns are still mostly green (no padding, no side strips).
  assert (out[:, [0, -1], 1] > 200).all()


def test_crop_portrait_cuts_top_and_bottom():
  arr = np.zeros((640, 480, 3), np.uint8)
  arr[:] = GREEN
  arr[:80] = RED
  arr[560:] = BLUE
  data = _image_bytes(Image.fromarray(arr), 'PNG')
  _, out = _process_raw(data, width=224, height=224, resize_mode='crop')
  assert (out[1:-1] == GREEN).all()
  assert (out[[0, -1], :, 1] > 200).all()


def test_crop_upscales_small_input_without_padding():
  data = _image_bytes(_solid(5, 17, (255, 255, 255)), 'PNG')
  _, out = _process_raw(data, width=224, height=224, resize_mode='crop')
  assert (out == 255).all()


@pytest.mark.parametrize('src_size', [(640, 480), (480, 640), (6, 4),
                                      (300, 80)])
def test_stretch_fills_target_and_keeps_layout(src_size):
  data = _image_bytes(Image.fromarray(_left_right(*src_size)), 'PNG')
  _, out = _process_raw(data, width=200, height=100, resize_mode='stretch')
  assert out.shape == (100, 200, 3)
  assert not (out == 0).all(axis=-1).any()  # no black padding anywhere
  # Away from the (interpolated) boundary in the middle.
  _assert_color(out[:, :70], RED, tol=1)
  _assert_color(out[:, 130:], BLUE, tol=1)


# ----------------------------------------------------------- input formats


def _format_case(fmt):
  arr = _quadrants(40, 30)
  kwargs = {}
  if fmt == 'JPEG':
    kwargs = {'quality': 95}
  if fmt == 'WEBP':
    kwargs = {'lossless': True}
  return arr, _image_bytes(Image.fromarray(arr), fmt, **kwargs)


@pytest.mark.parametrize('fmt,tol', [
    ('JPEG', 8.0),
    ('PNG', 0),
    ('GIF', 0),
    ('BMP', 0),
    pytest.param('WEBP', 0, marks=pytest.mark.skipif(
        not features.check('webp'), reason='Pillow built without WebP')),
])
def test_every_input_format_decodes_to_its_pixels(fmt, tol):
  arr, data = _format_case(fmt)
  out, got = _process_raw(data, width=40, height=30)
  assert (out.original_width, out.original_height) == (40, 30)
  if tol == 0:
    np.testing.assert_array_equal(got, arr)
  else:
    # Compare the quadrants' interiors (JPEG blurs the edges between them).
    for ys, xs in [(slice(2, 13), slice(2, 18)), (slice(2, 13), slice(22, 38)),
                   (slice(17, 28), slice(2, 18)),
                   (slice(17, 28), slice(22, 38))]:
      _assert_color(got[ys, xs], _mean_color(arr[ys, xs]), tol=tol)


def test_animated_gif_uses_first_frame():
  first = _solid(20, 20, RED)
  second = _solid(20, 20, GREEN)
  data = _image_bytes(first, 'GIF', save_all=True, append_images=[second],
                      duration=100, loop=0)
  assert Image.open(io.BytesIO(data)).n_frames == 2
  _, got = _process_raw(data, width=20, height=20)
  assert (got == RED).all()


# ------------------------------------------------------------- pixel modes


def test_greyscale_input_becomes_three_equal_channels():
  grey = np.tile(np.arange(0, 256, 8, dtype=np.uint8), (10, 1))  # 32 wide
  data = _image_bytes(Image.fromarray(grey, 'L'), 'PNG')
  _, got = _process_raw(data, width=32, height=10)
  assert got.shape == (10, 32, 3)
  for c in range(3):
    np.testing.assert_array_equal(got[:, :, c], grey)


def test_opaque_rgba_input_keeps_its_colours():
  data = _image_bytes(_solid(16, 12, (200, 100, 50, 255), mode='RGBA'), 'PNG')
  assert Image.open(io.BytesIO(data)).mode == 'RGBA'
  _, got = _process_raw(data, width=16, height=12)
  assert got.shape == (12, 16, 3)
  assert (got == (200, 100, 50)).all()


# ------------------------------------------------------------ transparency


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
  return (struct.pack('>I', len(payload)) + kind + payload +
          struct.pack('>I', zlib.crc32(kind + payload) & 0xFFFFFFFF))


def _raw_png(arr: np.ndarray, color_type: int, extra: bytes = b'') -> bytes:
  """A PNG of big-endian 16-bit samples `arr` (h, w[, c]), written by hand
  (Pillow cannot write 16-bit RGBA, LA or a 16-bit transparent key)."""
  h, w = arr.shape[:2]
  rows = arr.astype('>u2').reshape(h, -1)
  raw = b''.join(b'\x00' + r.tobytes() for r in rows)
  ihdr = struct.pack('>IIBBBBB', w, h, 16, color_type, 0, 0, 0)
  return (b'\x89PNG\r\n\x1a\n' + _png_chunk(b'IHDR', ihdr) + extra +
          _png_chunk(b'IDAT', zlib.compress(raw)) + _png_chunk(b'IEND', b''))


def _glyph_mask(w=20, h=16) -> np.ndarray:
  """A plus sign: True where the glyph is."""
  mask = np.zeros((h, w), bool)
  mask[h // 2 - 2:h // 2 + 2, 2:w - 2] = True
  mask[2:h - 2, w // 2 - 2:w // 2 + 2] = True
  return mask


def _black_glyph_rgba(fmt='PNG') -> bytes:
  """Black glyph on full transparency whose hidden colour is black too: the
  case that used to become an all-black example."""
  mask = _glyph_mask()
  arr = np.zeros(mask.shape + (4,), np.uint8)
  arr[..., 3] = np.where(mask, 255, 0)
  return _image_bytes(Image.fromarray(arr, 'RGBA'), fmt,
                      **({'lossless': True} if fmt == 'WEBP' else {}))


@pytest.mark.parametrize('fmt', ['PNG', 'WEBP', 'GIF'])
def test_black_glyph_on_transparency_is_black_on_white(fmt):
  data = _black_glyph_rgba(fmt) if fmt != 'GIF' else None
  if fmt == 'GIF':  # a palette with a transparent entry
    mask = _glyph_mask()
    img = Image.fromarray(np.where(mask, 1, 0).astype(np.uint8), 'P')
    img.putpalette([0, 0, 0, 0, 0, 0] + [0] * 762)
    data = _image_bytes(img, 'GIF', transparency=0)
  _, got = _process_raw(data, width=20, height=16)
  mask = _glyph_mask()
  assert (got[mask] == 0).all()
  assert (got[~mask] == 255).all()


def test_half_transparent_red_is_pink_on_white():
  data = _image_bytes(_solid(8, 6, (255, 0, 0, 128), mode='RGBA'), 'PNG')
  _, got = _process_raw(data, width=8, height=6)
  # 255 * 128/255 + 255 * 127/255 = 255; 0 * 128/255 + 255 * 127/255 = 127
  np.testing.assert_allclose(got.reshape(-1, 3), [[255, 127, 127]] * 48,
                             atol=2)


@pytest.mark.parametrize('background,expected', [
    ('#ffffff', (255, 127, 127)), ('#000000', (128, 0, 0)),
    ('#0000ff', (128, 0, 127))])
def test_background_colour(background, expected):
  data = _image_bytes(_solid(8, 6, (255, 0, 0, 128), mode='RGBA'), 'PNG')
  _, got = _process_raw(data, width=8, height=6, background=background)
  np.testing.assert_allclose(got.reshape(-1, 3), [expected] * 48, atol=2)


def test_grey_output_composites_then_converts():
  data = _image_bytes(_solid(8, 6, (255, 0, 0, 128), mode='RGBA'), 'PNG')
  _, got = _process_raw(data, width=8, height=6, color='grey')
  # L of pink (255, 127, 127): 0.299 * 255 + 0.587 * 127 + 0.114 * 127
  assert got.shape == (6, 8, 1)
  np.testing.assert_allclose(got, 165, atol=2)


def test_grey_with_alpha_is_composited():
  arr = np.zeros((6, 8, 2), np.uint8)
  arr[..., 1] = 0  # black, fully transparent
  arr[0, 0] = (0, 255)
  data = _image_bytes(Image.fromarray(arr, 'LA'), 'PNG')
  assert Image.open(io.BytesIO(data)).mode == 'LA'
  _, got = _process_raw(data, width=8, height=6)
  assert (got[0, 0] == 0).all()
  assert (got.reshape(-1, 3)[1:] == 255).all()


@pytest.mark.parametrize('mode,color,key', [
    ('L', 7, 7), ('RGB', (1, 2, 3), (1, 2, 3))])
def test_transparent_colour_key_is_composited(mode, color, key):
  img = Image.new(mode, (8, 6), color)
  img.putpixel((0, 0), 200 if mode == 'L' else (200, 0, 0))
  data = _image_bytes(img, 'PNG', transparency=key)
  _, got = _process_raw(data, width=8, height=6, background='0,128,0')
  assert (got.reshape(-1, 3)[1:] == (0, 128, 0)).all()
  assert tuple(got[0, 0]) == ((200,) * 3 if mode == 'L' else (200, 0, 0))


def test_palette_with_transparency_is_composited():
  data = _palette_image(with_transparency=True)
  _, got = _process_raw(data, width=20, height=20, background='black')
  assert (got[:10] == 0).all()  # entry 0 is transparent
  assert (got[10:] == (200, 100, 50)).all()


def test_sixteen_bit_rgba_png_is_composited():
  arr = np.zeros((6, 8, 4), np.uint32)
  arr[..., 0] = 65535
  arr[..., 3] = 32896  # half
  data = _raw_png(arr, color_type=6)
  assert Image.open(io.BytesIO(data)).mode == 'RGBA'  # Pillow's 16 -> 8
  _, got = _process_raw(data, width=8, height=6)
  np.testing.assert_allclose(got.reshape(-1, 3), [[255, 127, 127]] * 48,
                             atol=2)


def test_sixteen_bit_grey_alpha_png_is_composited():
  arr = np.zeros((6, 8, 2), np.uint32)  # black, transparent
  arr[0, 0] = (0, 65535)  # black, opaque
  data = _raw_png(arr, color_type=4)
  _, got = _process_raw(data, width=8, height=6)
  assert (got[0, 0] == 0).all()
  assert (got.reshape(-1, 3)[1:] == 255).all()


def test_sixteen_bit_grey_with_transparent_key_is_composited():
  arr = np.full((6, 8), 1000, np.uint32)
  arr[0, 0] = 257 * 77
  data = _raw_png(arr, color_type=0,
                  extra=_png_chunk(b'tRNS', struct.pack('>H', 1000)))
  opened = Image.open(io.BytesIO(data))
  assert opened.mode == 'I;16' and opened.info['transparency'] == 1000
  _, got = _process_raw(data, width=8, height=6, background='#102030')
  assert (got[0, 0] == 77).all()
  assert (got.reshape(-1, 3)[1:] == (16, 32, 48)).all()


def test_transparent_image_with_exif_orientation_is_turned():
  arr = np.zeros((4, 6, 4), np.uint8)  # transparent black
  arr[0, 0] = (0, 0, 0, 255)  # opaque black, top-left
  img = Image.fromarray(arr, 'RGBA')
  tags = img.getexif()
  tags[EXIF_ORIENTATION] = 6  # turn 90 degrees clockwise to view
  data = _image_bytes(img, 'PNG', exif=tags.tobytes())
  out, got = _process_raw(data, width=4, height=6, resize_mode='stretch')
  assert (out.original_width, out.original_height) == (4, 6)
  assert (got[0, -1] == 0).all()  # top-left went to top-right
  assert (got == 0).all(axis=-1).sum() == 1


@pytest.mark.parametrize('text,expected', [
    ('white', (255, 255, 255)), ('BLACK', (0, 0, 0)),
    ('#FF8000', (255, 128, 0)), ('10, 20,30', (10, 20, 30))])
def test_parse_background(text, expected):
  assert config.parse_background(text) == expected


@pytest.mark.parametrize('text', ['grey', '#fff', '#gg0000', '1,2',
                                  '256,0,0', '-1,0,0', ''])
def test_parse_background_refuses(text):
  with pytest.raises(ValueError):
    config.parse_background(text)


def _palette_image(with_transparency: bool) -> bytes:
  idx = np.ones((20, 20), np.uint8)
  idx[:10] = 0
  img = Image.fromarray(idx, 'P')
  img.putpalette([10, 20, 30, 200, 100, 50] + [0] * (256 * 3 - 6))
  kwargs = {'transparency': 0} if with_transparency else {}
  return _image_bytes(img, 'PNG', **kwargs)


@pytest.mark.parametrize('with_transparency', [False, True])
def test_palette_input(with_transparency):
  data = _palette_image(with_transparency)
  opened = Image.open(io.BytesIO(data))
  assert opened.mode == 'P'
  assert ('transparency' in opened.info) == with_transparency
  _, got = _process_raw(data, width=20, height=20)
  assert got.shape == (20, 20, 3)
  assert (got[10:] == (200, 100, 50)).all()  # opaque palette entry
  if not with_transparency:
    assert (got[:10] == (10, 20, 30)).all()


def test_cmyk_jpeg_is_converted_to_rgb():
  data = _image_bytes(_solid(32, 32, (0, 255, 255, 0), mode='CMYK'), 'JPEG',
                      quality=95)
  assert Image.open(io.BytesIO(data)).mode == 'CMYK'
  _, got = _process_raw(data, width=32, height=32)
  assert got.shape == (32, 32, 3)
  _assert_color(got, RED, tol=3)


@pytest.mark.parametrize('value,expected', [
    (65535, 255), (32896, 128), (0, 0), (257 * 77, 77)])
def test_sixteen_bit_greyscale_png_is_scaled_by_257(value, expected):
  data = _image_bytes(Image.fromarray(np.full((10, 12), value, np.uint16)),
                      'PNG')
  assert Image.open(io.BytesIO(data)).mode.startswith('I')
  _, got = _process_raw(data, width=12, height=10)
  assert got.shape == (10, 12, 3)
  assert (got == expected).all()
  _, grey = _process_raw(data, width=12, height=10, color='grey')
  assert grey.shape == (10, 12, 1)
  assert (grey == expected).all()


def test_sixteen_bit_gradient_keeps_its_order():
  ramp = (np.arange(64, dtype=np.uint32) * 1040).astype(np.uint16)
  data = _image_bytes(Image.fromarray(np.tile(ramp, (4, 1))), 'PNG')
  _, got = _process_raw(data, width=64, height=4, color='grey')
  np.testing.assert_array_equal(got[0, :, 0], ramp // 257)


@pytest.mark.parametrize('storage', ['jpeg', 'png', 'uint8'])
def test_grey_color_gives_one_channel(storage):
  data = _image_bytes(Image.fromarray(_smooth_photo(64, 48)), 'PNG')
  cfg = config.ImageConfig(height=24, width=32, color='grey',
                           storage=storage)
  assert cfg.channels == 1
  out = processing.process_image(data, cfg)
  arr = encoding.decode_stored(out.data, storage, 24, 32, 1)
  assert arr.shape == (24, 32, 1)
  assert len(out.channel_sum) == 1 and len(out.channel_sum_squares) == 1


# ------------------------------------------------------------------ EXIF


def _assert_fast_path(data, orientation=1, cfg=None):
  """Asserts that the JPEG `data` takes the fast (simplejpeg) path."""
  img = Image.open(io.BytesIO(data))
  assert jpeg.decode_jpeg(img, data, cfg or config.ImageConfig(),
                          orientation) is not None


def test_exif_orientation_6_rotates_clockwise_and_swaps_original_size():
  # 80 wide, 60 high: left half red, right half blue. Orientation 6 means
  # "rotate 90 degrees clockwise to display": left goes to the top.
  data = _with_exif_orientation(_left_right(80, 60), 6)
  out, got = _process_raw(data, width=60, height=80, resize_mode='stretch')
  assert (out.original_height, out.original_width) == (80, 60)
  _assert_color(got[:36], RED)
  _assert_color(got[44:], BLUE)


@pytest.mark.parametrize('orientation,expected', [
    (1, lambda a: a),
    (3, lambda a: np.rot90(a, 2)),
    (6, lambda a: np.rot90(a, -1)),
    (8, lambda a: np.rot90(a, 1)),
])
def test_exif_orientation_matches_numpy_rotation(orientation, expected):
  src = _quadrants(80, 60)
  want = expected(src)
  data = _with_exif_orientation(src, orientation)
  h, w = want.shape[:2]
  _assert_fast_path(data, orientation)
  out, got = _process_raw(data, width=w, height=h, resize_mode='stretch')
  assert (out.original_height, out.original_width) == (h, w)
  h2, w2 = h // 2, w // 2
  for ys, xs in [(slice(3, h2 - 3), slice(3, w2 - 3)),
                 (slice(3, h2 - 3), slice(w2 + 3, w - 3)),
                 (slice(h2 + 3, h - 3), slice(3, w2 - 3)),
                 (slice(h2 + 3, h - 3), slice(w2 + 3, w - 3))]:
    _assert_color(got[ys, xs], _mean_color(want[ys, xs]))


def test_exif_orientation_6_with_draft_decode():
  # Large enough for the DCT-scaled decode; rotated content must still match.
  src = _left_right(640, 480)
  data = _with_exif_orientation(src, 6)
  _assert_fast_path(data, 6)
  out, got = _process_raw(data, width=96, height=128, resize_mode='stretch')
  assert (out.original_height, out.original_width) == (640, 480)
  _assert_color(got[:60], RED)
  _assert_color(got[68:], BLUE)


# ------------------------------------------------------------------ draft


@pytest.fixture
def draft_calls(monkeypatch):
  """Records the sizes passed to the JPEG decoder's draft()."""
  calls = []
  original = JpegImagePlugin.JpegImageFile.draft

  def spy(self, mode, size):
    calls.append((mode, size))
    return original(self, mode, size)

  monkeypatch.setattr(JpegImagePlugin.JpegImageFile, 'draft', spy)
  return calls


@pytest.fixture
def jpeg_decodes(monkeypatch):
  """Records the (height, width) of every simplejpeg decode (the JPEG fast
  path's)."""
  shapes = []
  original = simplejpeg.decode_jpeg

  def spy(*args, **kwargs):
    arr = original(*args, **kwargs)
    shapes.append(arr.shape[:2])
    return arr

  monkeypatch.setattr(simplejpeg, 'decode_jpeg', spy)
  return shapes


@pytest.mark.parametrize('mode', config.RESIZE_MODES)
@pytest.mark.parametrize('color', config.COLOR_MODES)
def test_draft_decode_is_close_to_full_decode(jpeg_decodes, draft_calls,
                                              mode, color):
  data = _image_bytes(Image.fromarray(_smooth_photo(640, 480)), 'JPEG',
                      quality=92)
  kwargs = dict(width=224, height=224, resize_mode=mode, color=color)
  _, drafted = _process_raw(data, **kwargs)
  # The fast path decodes at half size (Pillow's draft() rule), once.
  assert jpeg_decodes == [(240, 320)]
  del jpeg_decodes[:]
  _, full = _process_raw(data, draft=False, **kwargs)
  assert jpeg_decodes == [(480, 640)], 'ImageConfig(draft=False) still scaled'
  assert not draft_calls  # Pillow's decoder was not used at all
  assert drafted.shape == full.shape
  mad = np.abs(drafted.astype(np.int32) - full.astype(np.int32)).mean()
  assert mad < 3.0


@pytest.mark.parametrize('mode', config.RESIZE_MODES)
def test_draft_decode_of_cmyk_jpeg_is_close_to_full_decode(draft_calls, mode):
  # CMYK takes Pillow's path, which still uses its decoder's draft().
  img = Image.fromarray(_smooth_photo(640, 480)).convert('CMYK')
  data = _image_bytes(img, 'JPEG', quality=92)
  kwargs = dict(width=224, height=224, resize_mode=mode)
  _, drafted = _process_raw(data, **kwargs)
  assert draft_calls, 'the draft (DCT-scaled) path was not taken'
  del draft_calls[:]
  _, full = _process_raw(data, draft=False, **kwargs)
  assert not draft_calls, 'ImageConfig(draft=False) still used draft()'
  mad = np.abs(drafted.astype(np.int32) - full.astype(np.int32)).mean()
  assert mad < 3.0


def test_draft_not_used_when_no_reduction_is_possible(draft_calls):
  data = _image_bytes(Image.fromarray(_smooth_photo(300, 200)), 'JPEG',
                      quality=92)
  _, with_draft = _process_raw(data, width=224, height=224)
  _, without = _process_raw(data, width=224, height=224, draft=False)
  np.testing.assert_array_equal(with_draft, without)


# ------------------------------------------------------- JPEG fast path


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
  mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
  return float('inf') if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


_FAST_KINDS = {'baseline': {}, '444': {'subsampling': 0},
               'progressive': {'progressive': True}, 'grey': {'mode': 'L'}}


@pytest.mark.parametrize('kind', sorted(_FAST_KINDS))
@pytest.mark.parametrize('mode,color', [('fit', 'rgb'), ('crop', 'grey'),
                                        ('stretch', 'rgb'), ('fit', 'grey')])
@pytest.mark.parametrize('size', [(224, 224), (400, 300)],
                         ids=['reduced', 'full-size'])
def test_fast_path_decodes_as_pillows_path_does(kind, mode, color, size):
  data = _noisy_jpeg(640, 480, **dict(_FAST_KINDS[kind]))
  cfg = config.ImageConfig(width=size[0], height=size[1], resize_mode=mode,
                           color=color)
  fast = jpeg.decode_jpeg(Image.open(io.BytesIO(data)), data, cfg, 1)
  assert fast is not None
  slow, _ = pillow_decode.decode_with_pillow(Image.open(io.BytesIO(data)),
                                             data, cfg, 1)
  if fast.ndim == 2 and slow.ndim == 3:  # a grey file, for RGB output
    fast = np.repeat(fast[:, :, None], 3, axis=2)
  assert fast.shape == slow.shape
  # Grey from colour: the decoder's luma against Pillow's conversion.
  assert _psnr(fast, slow) > 45


@pytest.mark.parametrize('orientation', range(1, 9))
def test_fast_path_orients_as_exif_transpose(orientation):
  data = _with_exif_orientation(_quadrants(640, 480), orientation)
  cfg = config.ImageConfig(width=96, height=128)  # reduced 4x either way
  img = Image.open(io.BytesIO(data))
  assert exif.orientation(img) == orientation
  fast = jpeg.decode_jpeg(img, data, cfg, orientation)
  slow, applied = pillow_decode.decode_with_pillow(
      Image.open(io.BytesIO(data)), data, cfg, orientation)
  assert applied == orientation
  assert fast.shape == slow.shape == (
      (160, 120, 3) if orientation > 4 else (120, 160, 3))
  np.testing.assert_array_equal(fast, slow)
  full = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))))
  out = processing.process_image(data, cfg)
  assert (out.original_height, out.original_width) == full.shape[:2]


def test_fast_path_leaves_other_jpegs_to_pillows_path():
  sound = _noisy_jpeg()
  progressive = _noisy_jpeg(progressive=True)
  cut = sound[:len(sound) // 2]
  declined = {
      'cmyk': _noisy_jpeg(mode='CMYK'),
      'cut': cut,
      'cut, end marker': cut + b'\xff\xd9',
      'cut between scans': (progressive[:_scan_starts(progressive)[3]] +
                            b'\xff\xd9'),
      'cut in last scan': (progressive[:int(len(progressive) * 0.9)] +
                           b'\xff\xd9'),
      'taller than its data': imagegen.with_frame_size(sound, 400, 600),
  }
  cfg = config.ImageConfig(width=64, height=64)
  for name, data in declined.items():
    img = Image.open(io.BytesIO(data))
    assert jpeg.decode_jpeg(img, data, cfg, 1) is None, name
  for data in (sound, progressive):
    assert jpeg.decode_jpeg(Image.open(io.BytesIO(data)), data, cfg,
                            1) is not None


# ---------------------------------------------------------- resize quality


def _previous_fit(data: bytes, width: int, height: int) -> np.ndarray:
  """The previous method, for comparison: Pillow's reduced-size decode
  (draft(), asked for the fitted size) and its antialiased BILINEAR resize
  to the fitted size (without the padding)."""
  img = Image.open(io.BytesIO(data))
  w, h = img.size
  if img.format == 'JPEG':
    s = min(width / w, height / h)
    need = (max(1, int(np.ceil(w * s))), max(1, int(np.ceil(h * s))))
    if need[0] * 2 <= w and need[1] * 2 <= h:
      img.draft('RGB', need)
  img = img.convert('RGB')
  s = min(width / img.width, height / img.height)
  size = (max(1, min(width, round(img.width * s))),
          max(1, min(height, round(img.height * s))))
  return np.asarray(img.resize(size, Image.Resampling.BILINEAR))


def _lanczos(data: bytes, size) -> np.ndarray:
  """The reference: the full-size decode, resized with LANCZOS."""
  img = Image.open(io.BytesIO(data)).convert('RGB')
  return np.asarray(img.resize(size, Image.Resampling.LANCZOS))


@pytest.mark.parametrize('fmt', ['JPEG', 'PNG'])
@pytest.mark.parametrize('target', [224, 128])
def test_resize_is_as_close_to_lanczos_as_the_previous_method(fmt, target):
  rng = np.random.default_rng(5)
  tint = np.array([1.0, 0.9, 0.75])
  cfg = config.ImageConfig(width=target, height=target)
  new_db, old_db = [], []
  for w, h in [(640, 480), (500, 375), (433, 301), (360, 270), (300, 200),
               (620, 330), (250, 240)]:
    photo = sample_data.photo_like(rng, w, h, tint)
    data = _image_bytes(photo, fmt, **({'quality': 90} if fmt == 'JPEG'
                                       else {}))
    old = _previous_fit(data, target, target)
    ref = _lanczos(data, old.shape[1::-1])
    resized, _, _ = processing.decode_and_resize(data, cfg)
    left = (target - old.shape[1]) // 2
    top = (target - old.shape[0]) // 2
    new = np.asarray(resized)[top:top + old.shape[0],
                              left:left + old.shape[1]]
    new_db.append(_psnr(new, ref))
    old_db.append(_psnr(old, ref))
    assert new_db[-1] > 30, (w, h, new_db[-1])
    assert new_db[-1] >= old_db[-1] - 0.5, (w, h, new_db[-1], old_db[-1])
  assert np.mean(new_db) >= np.mean(old_db) - 0.1, (new_db, old_db)


# --------------------------------------------------------- storage / sums


@pytest.mark.parametrize('storage', ['jpeg', 'png', 'uint8'])
@pytest.mark.parametrize('color', config.COLOR_MODES)
def test_storage_round_trip(storage, color):
  data = _image_bytes(Image.fromarray(_smooth_photo(160, 120)), 'PNG')
  cfg = config.ImageConfig(height=48, width=64, storage=storage,
                           color=color)
  resized, _, _ = processing.decode_and_resize(data, cfg)
  want = np.asarray(resized)
  if want.ndim == 2:
    want = want[:, :, None]
  out = processing.process_image(data, cfg)
  got = encoding.decode_stored(out.data, storage, 48, 64, cfg.channels)
  assert got.dtype == np.uint8
  assert got.shape == (48, 64, cfg.channels)
  if storage == 'jpeg':
    assert out.data[:2] == b'\xff\xd8'
    assert np.abs(got.astype(int) - want.astype(int)).mean() < 3
  else:
    np.testing.assert_array_equal(got, want)
  if storage == 'png':
    assert out.data[:8] == b'\x89PNG\r\n\x1a\n'
  if storage == 'uint8':
    assert len(out.data) == 48 * 64 * cfg.channels


def test_decode_stored_rejects_wrong_shapes():
  cfg = config.ImageConfig(height=10, width=20, storage='png')
  out = processing.process_image(
      _image_bytes(_solid(20, 10, (1, 2, 3)), 'PNG'), cfg)
  with pytest.raises(ValueError, match='shape'):
    encoding.decode_stored(out.data, 'png', 20, 10, 3)
  with pytest.raises(ValueError, match='expected'):
    encoding.decode_stored(b'\x00' * 599, 'uint8', 10, 20, 3)
  with pytest.raises(ValueError, match='does not decode'):
    encoding.decode_stored(b'not an image', 'jpeg', 10, 20, 3)


@pytest.mark.parametrize('storage', ['jpeg', 'uint8'])
@pytest.mark.parametrize('color', config.COLOR_MODES)
@pytest.mark.parametrize('mode', config.RESIZE_MODES)
def test_channel_sums_are_exact(storage, color, mode):
  rng = np.random.default_rng(7)
  src = rng.integers(0, 256, (90, 70, 3), dtype=np.uint8)
  data = _image_bytes(Image.fromarray(src), 'PNG')
  cfg = config.ImageConfig(height=50, width=60, storage=storage,
                           color=color, resize_mode=mode)
  resized, _, _ = processing.decode_and_resize(data, cfg)
  arr = np.asarray(resized, dtype=np.int64)
  if arr.ndim == 2:
    arr = arr[:, :, None]
  out = processing.process_image(data, cfg)
  assert out.pixel_count == 50 * 60
  assert list(out.channel_sum) == arr.sum(axis=(0, 1)).tolist()
  assert list(out.channel_sum_squares) == (arr * arr).sum(axis=(0, 1)).tolist()


@pytest.mark.parametrize('shape', [(4200, 4100), (8192, 8192, 3)])
def test_channel_sums_are_exact_on_the_largest_outputs(shape):
  # Sums of squares past 2**32 (and, at the largest output, 8192x8192, past
  # 2**42), where a float32 count or a rounded norm would be off.
  arr = np.full(shape, 255, np.uint8)
  arr[0, :7] = 3
  arr[-1, -5:] = 200
  sums, squares, count = processing._channel_sums(arr)
  n = shape[0] * shape[1]
  assert count == n
  channels = 1 if len(shape) == 2 else shape[2]
  assert sums == (float(255 * (n - 12) + 3 * 7 + 200 * 5),) * channels
  assert squares == (float(255**2 * (n - 12) + 9 * 7 + 200**2 * 5),) * channels
  rng = np.random.default_rng(3)
  noise = rng.integers(0, 256, (333, 517, 3), dtype=np.uint8)
  sums, squares, _ = processing._channel_sums(noise)
  values = noise.astype(np.int64)
  assert list(sums) == values.sum(axis=(0, 1)).tolist()
  assert list(squares) == (values * values).sum(axis=(0, 1)).tolist()


def test_content_digest_of_pixels_is_that_of_the_image():
  rgb = _smooth_photo(40, 30)
  grey = np.ascontiguousarray(rgb[:, :, 1])
  assert processing.content_digest(rgb) == processing.content_digest(
      Image.fromarray(rgb, 'RGB'))
  assert processing.content_digest(grey) == processing.content_digest(
      Image.fromarray(grey, 'L'))
  assert processing.content_digest(rgb) != processing.content_digest(rgb[::-1])
  with pytest.raises(ValueError):
    processing.content_digest(np.zeros((3, 4, 4), np.uint8))


def test_png_and_bmp_of_the_same_pixels_are_one_content():
  img = Image.fromarray(_smooth_photo(90, 70))
  cfg = config.ImageConfig(height=48, width=64)
  png, bmp = _image_bytes(img, 'PNG'), _image_bytes(img, 'BMP')
  assert processing.identify_content(png, cfg) == processing.identify_content(
      bmp, cfg) == processing.process_image(png, cfg).content


def test_zscore_from_sums_matches_numpy():
  rng = np.random.default_rng(3)
  arr = rng.integers(0, 256, (30, 40, 3)).astype(np.float64)
  sums = arr.sum(axis=(0, 1))
  squares = (arr * arr).sum(axis=(0, 1))
  mean, std = processing.zscore_from_sums(sums, squares, 30 * 40)
  np.testing.assert_allclose(mean, (arr / 255).mean(axis=(0, 1)), rtol=1e-9)
  np.testing.assert_allclose(std, (arr / 255).std(axis=(0, 1)), rtol=1e-9)


def test_zscore_from_sums_constant_channel_has_zero_std():
  count = 1000
  mean, std = processing.zscore_from_sums([200.0 * count, 0.0],
                                          [200.0 * 200.0 * count, 0.0], count)
  np.testing.assert_allclose(mean, [200 / 255, 0.0])
  assert np.isfinite(std).all()
  np.testing.assert_allclose(std, [0.0, 0.0], atol=1e-6)


def test_zscore_from_processed_image():
  data = _image_bytes(Image.fromarray(_smooth_photo(64, 48)), 'PNG')
  out, arr = _process_raw(data, width=64, height=48)
  mean, std = processing.zscore_from_sums(out.channel_sum,
                                          out.channel_sum_squares,
                                          out.pixel_count)
  np.testing.assert_allclose(mean, (arr / 255).mean(axis=(0, 1)), rtol=1e-9)
  np.testing.assert_allclose(std, (arr / 255).std(axis=(0, 1)), rtol=1e-9)


# ------------------------------------------------------------ bad inputs


def _assert_bad(data, match, cfg=None):
  with pytest.raises(config.BadImageError, match=match) as info:
    processing.process_image(data, cfg or config.ImageConfig())
  assert info.value.stage == 'decode'
  assert info.value.reason == str(info.value)
  assert isinstance(info.value, ValueError)
  return info.value


def test_zero_bytes_is_bad():
  _assert_bad(b'', r'empty file \(0 bytes\)')


def test_text_file_is_bad():
  _assert_bad(b'label,path\ncat,cat/1.jpg\n',
              'not a readable image.*format not recognised')


def test_truncated_jpeg_is_bad():
  data = _image_bytes(Image.fromarray(_smooth_photo(320, 240)), 'JPEG',
                      quality=90)
  _assert_bad(data[:len(data) // 2], '^truncated JPEG')
  _assert_bad(data[:len(data) // 2], '^truncated JPEG',
              config.ImageConfig(draft=False))


def _noisy_jpeg(w=400, h=300, **kwargs) -> bytes:
  rng = np.random.default_rng(3)
  arr = _smooth_photo(w, h).astype(np.float64) + rng.normal(0, 10, (h, w, 3))
  img = Image.fromarray(arr.clip(0, 255).astype(np.uint8))
  mode = kwargs.pop('mode', 'RGB')
  return _image_bytes(img.convert(mode), 'JPEG', quality=90, **kwargs)


@pytest.mark.parametrize('fraction', [0.5, 0.9, 0.99])
@pytest.mark.parametrize('kind', ['baseline', 'progressive', 'grey', 'cmyk'])
@pytest.mark.parametrize('draft', [True, False])
def test_jpeg_cut_short_and_given_an_end_marker_is_truncated(fraction, kind,
                                                             draft):
  kwargs = {'progressive': True} if kind == 'progressive' else {
      'mode': {'grey': 'L', 'cmyk': 'CMYK'}.get(kind, 'RGB')}
  data = _noisy_jpeg(**kwargs)
  cut = data[:int(len(data) * fraction)] + b'\xff\xd9'
  # Pillow decodes it without a word, padding the rest with grey.
  Image.open(io.BytesIO(cut)).load()
  _assert_bad(cut, '^truncated JPEG', config.ImageConfig(
      draft=draft, height=64, width=64))


def _scan_starts(data: bytes):
  return [i for i in range(len(data) - 1) if data[i:i + 2] == b'\xff\xda']


@pytest.mark.parametrize('scan', [1, 3, 6, -1])
def test_progressive_jpeg_cut_between_scans_is_truncated(scan):
  # libjpeg does not even warn: the scan headers show it.
  data = _noisy_jpeg(progressive=True)
  cut = data[:_scan_starts(data)[scan]] + b'\xff\xd9'
  simplejpeg.decode_jpeg(cut, strict=True)
  err = _assert_bad(cut, '^truncated JPEG: the file ends after')
  assert 'progressive scans' in err.reason


@pytest.mark.parametrize('width,height', [(400, 600), (800, 300)])
def test_jpeg_declaring_more_pixels_than_its_data_is_truncated(width,
                                                               height):
  data = imagegen.with_frame_size(_noisy_jpeg(400, 300), width, height)
  Image.open(io.BytesIO(data)).load()  # Pillow pads it with grey
  err = _assert_bad(data, '^truncated JPEG')
  assert f'{width}x{height}' in err.reason


@pytest.mark.parametrize('value', [128, 127])
def test_sound_jpeg_with_mid_grey_corner_is_not_truncated(value):
  # The corner check only leads to the strict second decode.
  arr = _smooth_photo(64, 48)
  arr[-16:, -16:] = value
  for kwargs in ({}, {'progressive': True}, {'mode': 'L'}):
    img = Image.fromarray(arr).convert(kwargs.pop('mode', 'RGB'))
    data = _image_bytes(img, 'JPEG', quality=95, **kwargs)
    processing.process_image(data, config.ImageConfig(height=48, width=64))
  solid = _image_bytes(_solid(40, 30, (128, 128, 128)), 'JPEG', quality=90)
  processing.process_image(solid, config.ImageConfig(height=30, width=40))


def test_sound_jpegs_pass_the_truncation_checks():
  for kwargs in ({}, {'progressive': True}, {'mode': 'L'}, {'mode': 'CMYK'},
                 {'subsampling': 0}, {'progressive': True, 'mode': 'L'}):
    data = _noisy_jpeg(**kwargs)
    out = processing.process_image(data,
                                   config.ImageConfig(height=64, width=64))
    assert out.source_format == 'JPEG'


# --------------------------------------------- content behind a name


def test_tiff_named_jpg_is_decoded_and_identified():
  data = _image_bytes(_solid(16, 12, (10, 200, 30)), 'TIFF')
  out = processing.process_image(
      data, config.ImageConfig(height=12, width=16, storage='uint8'),
      'photos/cat/x.jpg')
  assert out.source_format == 'TIFF'
  got = encoding.decode_stored(out.data, 'uint8', 12, 16, 3)
  assert (got == (10, 200, 30)).all()


@pytest.mark.skipif(not features.check('avif'), reason='no AVIF codec')
def test_avif_named_jpg_is_decoded_and_identified():
  data = _image_bytes(_solid(16, 12, (10, 200, 30)), 'AVIF', quality=95)
  out = processing.process_image(
      data, config.ImageConfig(height=12, width=16, storage='uint8'),
      'x.jpg')
  assert out.source_format == 'AVIF'


def _iso_bmff_head(brand: bytes, compatible=(b'mif1',)) -> bytes:
  box = brand + b'\x00\x00\x00\x00' + b''.join(compatible)
  return struct.pack('>I', 8 + len(box)) + b'ftyp' + box + b'\x00' * 200


@pytest.mark.parametrize('head,name,reason', [
    (_iso_bmff_head(b'heic'), 'a/b/x.jpg',
     'not a JPEG: HEIC content (no HEIC decoder is installed)'),
    (_iso_bmff_head(b'mif1', (b'mif1', b'heic')), 'x.png',
     'not a PNG: HEIC content (no HEIC decoder is installed)'),
    (b'this is not an image\n' * 20, 'x.jpeg',
     'not a JPEG: unknown content (format not recognised)'),
    (b'<!DOCTYPE html><html>403 Forbidden</html>', 'x.webp',
     'not a WEBP: HTML content (no HTML decoder is installed)'),
    (b'this is not an image\n' * 20, 'listed/without/extension',
     'not a readable image: unknown content (format not recognised)'),
])
def test_content_pillow_cannot_read_names_its_format(head, name, reason):
  with pytest.raises(config.BadImageError) as info:
    processing.process_image(head, config.ImageConfig(), name)
  assert info.value.reason == reason


@pytest.mark.skipif(not features.check('avif'), reason='no AVIF codec')
def test_avif_that_does_not_decode_says_so():
  with pytest.raises(config.BadImageError) as info:
    processing.process_image(_iso_bmff_head(b'avif'), config.ImageConfig(),
                             'x.jpg')
  assert info.value.reason == (
      'not a JPEG: AVIF content (its AVIF data does not decode)')


def test_sniff_format():
  assert file_formats.sniff_format(_iso_bmff_head(b'avif')) == 'AVIF'
  assert file_formats.sniff_format(_iso_bmff_head(b'heix')) == 'HEIC'
  assert file_formats.sniff_format(
      _iso_bmff_head(b'mif1', (b'avif',))) == 'AVIF'
  assert file_formats.sniff_format(_iso_bmff_head(b'mif1', ())) == 'HEIF'
  assert file_formats.sniff_format(b'\xff\x0a\x00') == 'JPEG XL'
  assert file_formats.sniff_format(b'%PDF-1.7') == 'PDF'
  assert file_formats.sniff_format(b'  <svg xmlns="..."/>') == 'SVG'
  assert file_formats.sniff_format(b'plain text') is None


def _corrupt_png() -> bytes:
  rng = np.random.default_rng(0)
  data = bytearray(_image_bytes(
      Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)),
      'PNG'))
  start = bytes(data).index(b'IDAT') + 4
  (length,) = struct.unpack('>I', bytes(data[start - 8:start - 4]))
  middle = start + length // 2
  for i in range(middle, middle + 16):
    data[i] ^= 0xFF
  return bytes(data)


def test_corrupt_png_fixture_is_really_corrupt():
  with pytest.raises(OSError):
    Image.open(io.BytesIO(_corrupt_png())).load()


def test_corrupt_png_is_bad():
  _assert_bad(_corrupt_png(), 'corrupt')


def _corrupt_png_with_valid_crc() -> bytes:
  """Damaged IDAT data whose chunk CRC was recomputed (so verify() passes)."""
  data = bytearray(_corrupt_png())
  start = bytes(data).index(b'IDAT')
  (length,) = struct.unpack('>I', bytes(data[start - 4:start]))
  end = start + 4 + length
  data[end:end + 4] = struct.pack(
      '>I', zlib.crc32(bytes(data[start:end])) & 0xFFFFFFFF)
  return bytes(data)


def test_corrupt_png_with_valid_crc_fixture_is_really_corrupt():
  data = _corrupt_png_with_valid_crc()
  Image.open(io.BytesIO(data)).verify()  # chunk CRCs are fine
  with pytest.raises(OSError):
    Image.open(io.BytesIO(data)).load()  # but the pixel data is not


def test_corrupt_png_with_valid_crc_is_bad():
  _assert_bad(_corrupt_png_with_valid_crc(), 'corrupt')


def test_truncated_png_is_bad():
  data = _image_bytes(Image.fromarray(_smooth_photo(64, 48)), 'PNG')
  _assert_bad(data[:len(data) // 2], 'truncated')


def test_over_pixel_limit_is_bad_and_names_the_limit():
  data = _image_bytes(_solid(40, 25, RED), 'PNG')  # 1000 pixels
  err = _assert_bad(data, 'limit', config.ImageConfig(max_pixels=999))
  assert '999' in err.reason
  assert '40x25' in err.reason
  # Exactly at the limit is fine.
  processing.process_image(data, config.ImageConfig(max_pixels=1000))


def _png_header_only(width, height) -> bytes:
  """A PNG that claims width x height pixels but has almost no data."""

  def chunk(kind, payload):
    return (struct.pack('>I', len(payload)) + kind + payload +
            struct.pack('>I', zlib.crc32(kind + payload) & 0xFFFFFFFF))

  ihdr = struct.pack('>IIBBBBB', width, height, 8, 0, 0, 0, 0)
  return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', ihdr) +
          chunk(b'IDAT', zlib.compress(b'\x00' * 16)) + chunk(b'IEND', b''))


def test_pixel_limit_is_checked_before_decoding():
  # 100000 x 100000 would need 10 GB to decode; it must be refused first.
  err = _assert_bad(_png_header_only(100_000, 100_000), 'limit')
  assert str(config.ImageConfig().max_pixels) in err.reason


def test_is_image_path():
  assert config.is_image_path('a/b/C.JPG')
  assert config.is_image_path('x.webp')
  assert not config.is_image_path('notes.txt')
  assert not config.is_image_path('image.jpg.tmp')
