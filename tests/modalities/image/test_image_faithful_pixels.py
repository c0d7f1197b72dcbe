"""What is stored is what the source shows, through real pipeline runs:
transparency composited onto --background, JPEGs cut short (or declaring
more pixels than they hold) dead-lettered as truncated, content behind
another format's name decoded and counted or named, and blank images
warned about by validation."""

import io
import json
import os
import struct
import zlib

import numpy as np
import pytest
from PIL import Image
from PIL import features
from tensorflow.core.example import example_pb2

import imagegen
import readback
from pipelines import outcome
from pipelines import preprocess
from pipelines import validate
from transforms.modalities.image import encoding
from transforms.output import tfrecord_files

LOCAL = ['--direct_running_mode', 'in_memory', '--direct_num_workers', '1']
WIDTH, HEIGHT = 40, 30
AVIF = features.check('avif')


def _save(img, path, **kwargs):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  img.save(path, **kwargs)


def _write(path, data: bytes):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'wb') as f:
    f.write(data)


def _photo(seed, w=WIDTH, h=HEIGHT):
  rng = np.random.default_rng(seed)
  base = Image.fromarray((rng.random((3, 4, 3)) * 255).astype(np.uint8))
  arr = np.asarray(base.resize((w, h), Image.Resampling.BICUBIC), float)
  arr = arr + rng.normal(0, 10, arr.shape)
  return Image.fromarray(arr.clip(0, 255).astype(np.uint8))


def _jpeg(img, **kwargs) -> bytes:
  buf = io.BytesIO()
  img.save(buf, format='JPEG', quality=90, **kwargs)
  return buf.getvalue()


def _plus(w=WIDTH, h=HEIGHT):
  """Where a plus-shaped glyph is."""
  mask = np.zeros((h, w), bool)
  mask[h // 2 - 2:h // 2 + 2, 4:w - 4] = True
  mask[4:h - 4, w // 2 - 2:w // 2 + 2] = True
  return mask


def _ring(w=WIDTH, h=HEIGHT):
  """Where a square ring glyph is."""
  mask = np.zeros((h, w), bool)
  mask[5:h - 5, 8:w - 8] = True
  mask[9:h - 9, 12:w - 12] = False
  return mask


def _sixteen_bit_rgba_png(arr) -> bytes:
  """A 16-bit RGBA PNG written by hand (Pillow does not write one)."""

  def chunk(kind, payload):
    return (struct.pack('>I', len(payload)) + kind + payload +
            struct.pack('>I', zlib.crc32(kind + payload) & 0xFFFFFFFF))

  h, w = arr.shape[:2]
  rows = arr.astype('>u2').reshape(h, -1)
  raw = b''.join(b'\x00' + r.tobytes() for r in rows)
  return (b'\x89PNG\r\n\x1a\n' +
          chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 16, 6, 0, 0, 0)) +
          chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))


def _transparent_images(root, folder='shapes'):
  """Writes the transparent inputs; returns {name: expected RGB pixels on
  a white background}."""
  d = os.path.join(root, folder)
  expected = {}
  # A black glyph on full transparency that is black underneath too: it
  # used to be stored all black.
  plus = _plus()
  rgba = np.zeros((HEIGHT, WIDTH, 4), np.uint8)
  rgba[..., 3] = np.where(plus, 255, 0)
  _save(Image.fromarray(rgba, 'RGBA'), os.path.join(d, 'glyph.png'))
  expected['glyph.png'] = np.where(plus[..., None], [0, 0, 0],
                                   [255, 255, 255])
  # Half-transparent red beside an opaque black column.
  rgba = np.zeros((HEIGHT, WIDTH, 4), np.uint8)
  rgba[..., 0], rgba[..., 3] = 255, 128
  rgba[:, 0] = (0, 0, 0, 255)
  _save(Image.fromarray(rgba, 'RGBA'), os.path.join(d, 'pink.png'))
  pink = np.empty((HEIGHT, WIDTH, 3))
  pink[:] = (255, 127, 127)
  pink[:, 0] = 0
  expected['pink.png'] = pink
  # 16-bit RGBA (Pillow opens it as 8-bit RGBA): half-transparent green
  # under an opaque blue row.
  sixteen = np.zeros((HEIGHT, WIDTH, 4), np.uint32)
  sixteen[..., 1], sixteen[..., 3] = 65535, 32896
  sixteen[0] = (0, 0, 65535, 65535)
  _write(os.path.join(d, 'green16.png'), _sixteen_bit_rgba_png(sixteen))
  green = np.empty((HEIGHT, WIDTH, 3))
  green[:] = (127, 255, 127)
  green[0] = (0, 0, 255)
  expected['green16.png'] = green
  # A palette GIF whose entry 0 is transparent (and black).
  ring = _ring()
  pal = Image.fromarray(np.where(ring, 1, 0).astype(np.uint8), 'P')
  pal.putpalette([0, 0, 0, 0, 0, 200] + [0] * 762)
  _save(pal, os.path.join(d, 'ring.gif'), transparency=0)
  expected['ring.gif'] = np.where(ring[..., None], [0, 0, 200],
                                  [255, 255, 255])
  return expected


def _raw_images(out, manifest):
  """{id: stored pixels} of every record (PNG storage)."""
  img = manifest['image']
  found = {}
  for split in manifest['splits'].values():
    for shard in split['shards']:
      with tfrecord_files.open_records(str(out / shard['file']),
                                       False) as f:
        for record in tfrecord_files.iter_records(f):
          feats = example_pb2.Example.FromString(record).features.feature
          ex_id = feats['id'].bytes_list.value[0].decode()
          found[ex_id] = encoding.decode_stored(
              feats['image'].bytes_list.value[0], img['storage'],
              img['height'], img['width'], img['channels'])
  return found


def _check(report, name):
  [check] = [c for c in report['checks'] if c['check'] == name]
  return check


# ---------------------------------------------------- the red-team run --


@pytest.fixture(scope='module')
def faithful(tmp_path_factory):
  """One run over transparent images, cut JPEGs, renamed content and a
  fully transparent (blank) image, beside sound photos."""
  root = tmp_path_factory.mktemp('faithful')
  src = root / 'in'
  expected = _transparent_images(str(src))
  # Fully transparent: white all over once composited, a blank image.
  _save(Image.new('RGBA', (WIDTH, HEIGHT), (0, 0, 0, 0)),
        str(src / 'shapes' / 'clear.png'))
  photos = src / 'photos'
  for i in range(12):
    _save(_photo(i), str(photos / f'p{i:02d}.jpg'), quality=90)
  # A real (baseline) JPEG, cut short with and without a new end marker,
  # and declaring twice its height.
  real = _jpeg(_photo(99, 400, 300))
  dead = {}
  for fraction in (0.5, 0.9):
    cut = real[:int(len(real) * fraction)]
    for suffix, data in (('', cut), ('_eoi', cut + b'\xff\xd9')):
      name = f'cut{int(fraction * 100)}{suffix}.jpg'
      _write(str(photos / name), data)
      dead[f'photos/{name}'] = 'truncated JPEG: '
  _write(str(photos / 'taller.jpg'),
         imagegen.with_frame_size(real, 400, 600))
  dead['photos/taller.jpg'] = (
      'truncated JPEG: its image data ends before the 400x600 pixels its '
      'header declares (libjpeg: Corrupt JPEG data: premature end of data '
      'segment)')
  # Other formats behind a .jpg name.
  buf = io.BytesIO()
  _photo(7).save(buf, format='TIFF')
  _write(str(src / 'shapes' / 'tiff.jpg'), buf.getvalue())
  if AVIF:
    buf = io.BytesIO()
    _photo(8).save(buf, format='AVIF', quality=90)
    _write(str(src / 'shapes' / 'avif.jpg'), buf.getvalue())
  heic = (struct.pack('>I', 24) + b'ftypheic' + b'\x00' * 4 + b'mif1heic' +
          bytes(range(256)) * 4)
  _write(str(src / 'shapes' / 'heic.jpg'), heic)
  dead['shapes/heic.jpg'] = (
      'not a JPEG: HEIC content (no HEIC decoder is installed)')
  out = root / 'out'
  manifest = preprocess.run(
      ['--input', str(src), '--output', str(out), '--storage', 'png',
       '--image_size', f'{WIDTH}x{HEIGHT}', '--max_bad_fraction', '0.5'] +
      LOCAL)
  return out, manifest, expected, dead


def test_every_input_is_an_example_or_a_dead_letter(faithful):
  out, manifest, _, dead = faithful
  totals = manifest['totals']
  good = 12 + 4 + 1 + 1 + (1 if AVIF else 0)  # photos, shapes, clear, tiff
  assert totals['inputs'] == good + len(dead)
  assert totals['examples'] == good
  assert totals['dead_lettered'] == len(dead) == 6
  assert totals['inputs'] == totals['examples'] + totals['dead_lettered']
  letters = readback.dead_letters(out)
  by_input = {os.path.relpath(d['input'], out.parent / 'in'): d
              for d in letters}
  assert set(by_input) == set(dead)
  for name, reason in dead.items():
    assert by_input[name]['stage'] == 'decode'
    assert by_input[name]['reason'].startswith(reason), by_input[name]


def test_transparency_is_composited_onto_white(faithful):
  out, manifest, expected, _ = faithful
  assert manifest['image']['background'] == '#ffffff'
  assert manifest['config']['image']['background'] == '#ffffff'
  stored = _raw_images(out, manifest)
  for name, want in expected.items():
    got = stored[f'shapes/{name}'].astype(int)
    assert got.shape == want.shape == (HEIGHT, WIDTH, 3)
    np.testing.assert_allclose(got, want, atol=2, err_msg=name)
  # The black glyph is visible: black on white, not all black.
  glyph = stored['shapes/glyph.png']
  assert (glyph[_plus()] == 0).all() and (glyph[~_plus()] == 255).all()
  assert (stored['shapes/clear.png'] == 255).all()


def test_formats_are_counted_and_mismatches_named(faithful):
  out, manifest, _, _ = faithful
  formats = {'GIF': 1, 'JPEG': 12, 'PNG': 4, 'TIFF': 1}
  mismatches = {'TIFF in .jpg': 1}
  if AVIF:
    formats['AVIF'] = 1
    mismatches['AVIF in .jpg'] = 1
  assert manifest['image']['formats'] == formats
  assert manifest['image']['format_mismatches'] == mismatches
  stored = _raw_images(out, manifest)
  assert 'shapes/tiff.jpg' in stored
  tiff = stored['shapes/tiff.jpg'].astype(int)
  np.testing.assert_array_equal(tiff, np.asarray(_photo(7)))


def test_validation_warns_about_the_blank_image(faithful, capsys):
  out, manifest, _, _ = faithful
  assert validate.main(['--output', str(out)]) == validate.EXIT_SOUND
  printed = capsys.readouterr().out
  report = json.loads((out / 'validation_report.json').read_text())
  assert report['verdict'] == 'pass'
  blank = _check(report, 'no blank images')
  records = manifest['totals']['records']
  [split] = [s for s in manifest['splits']
             if 'shapes/clear.png' in _ids(out, manifest, s)]
  assert blank == {
      'check': 'no blank images', 'status': 'warn',
      'detail': f'1 of the {records} stored images are one colour all over '
                f'({split} 1), e.g. shapes/clear.png'}
  assert 'WARNING no blank images' in printed


def _ids(out, manifest, split):
  ids = set()
  for shard in manifest['splits'][split]['shards']:
    with tfrecord_files.open_records(str(out / shard['file']), False) as f:
      for record in tfrecord_files.iter_records(f):
        feats = example_pb2.Example.FromString(record).features.feature
        ids.add(feats['id'].bytes_list.value[0].decode())
  return ids


# ------------------------------------- a clean run, another background --


def test_background_and_grey_in_a_run_without_blank_images(tmp_path):
  src = tmp_path / 'in'
  _transparent_images(str(src))
  for i in range(8):
    _save(_photo(i), str(src / 'photos' / f'p{i:02d}.jpg'), quality=90)
  out = tmp_path / 'out'
  manifest = preprocess.run(
      ['--input', str(src), '--output', str(out), '--storage', 'png',
       '--image_size', f'{WIDTH}x{HEIGHT}', '--background', '0,0,255',
       '--color', 'grey'] + LOCAL)
  assert manifest['image']['background'] == '#0000ff'
  assert manifest['image']['channels'] == 1
  assert manifest['totals']['dead_lettered'] == 0
  stored = _raw_images(out, manifest)
  glyph = stored['shapes/glyph.png'][..., 0]
  # Composited onto blue, then grey: L(0, 0, 255) = 29.
  assert (glyph[_plus()] == 0).all() and (glyph[~_plus()] == 29).all()
  # Red at half alpha on blue: (128, 0, 127), grey 0.299 * 128 + 0.114 * 127.
  np.testing.assert_allclose(stored['shapes/pink.png'][:, 1:], 53, atol=2)
  assert validate.main(['--output', str(out)]) == validate.EXIT_SOUND
  report = json.loads((out / 'validation_report.json').read_text())
  assert report['verdict'] == 'pass'
  assert _check(report, 'no blank images') == {
      'check': 'no blank images', 'status': 'pass',
      'detail': f'none of the {manifest["totals"]["records"]} stored images '
                'is one colour all over'}


def test_bad_background_is_a_bad_invocation(tmp_path, capsys):
  src = tmp_path / 'in'
  _save(_photo(0), str(src / 'a' / 'x.jpg'))
  code = preprocess.main(['--input', str(src), '--output',
                          str(tmp_path / 'out'), '--background', 'teal'] +
                         LOCAL)
  err = capsys.readouterr().err.strip()
  assert code == outcome.EXIT_USAGE
  assert err == ("error: --background must be white, black, a #rrggbb "
                 "colour or r,g,b with values from 0 to 255 (got 'teal').")
  assert not (tmp_path / 'out').exists()
