"""Equal pictures in a clip-art collection, through real pipeline runs:
splits keyed by the decoded pixels keep every copy of a picture in one
split (the same PNG in two class folders, an 8-bit grey PNG and its 16-bit
copy, a PNG and the same pixels as a BMP), label conflicts are reported and
resolved as asked, duplicates counted and dropped as asked, and every run
ends with a passing validation."""

import os
import shutil

import numpy as np
import pytest
from PIL import Image

import readback
from pipelines import preprocess
from pipelines import validate

LOCAL = ['--direct_running_mode', 'in_memory', '--direct_num_workers', '1']
SIZE = 24
CLASSES = ('arrow', 'heart', 'star')
PER_CLASS = 12


def _glyph(seed: int) -> Image.Image:
  """A black glyph on transparent pixels (RGBA), different per seed."""
  rng = np.random.default_rng(seed)
  arr = np.zeros((SIZE, SIZE, 4), np.uint8)  # black, fully transparent
  for _ in range(3):
    y, x = rng.integers(0, SIZE - 6, 2)
    h, w = rng.integers(3, 7, 2)
    arr[y:y + h, x:x + w, 3] = 255
  return Image.fromarray(arr, 'RGBA')


def _grey(seed: int) -> np.ndarray:
  rng = np.random.default_rng(seed)
  return rng.integers(0, 256, (SIZE, SIZE), dtype=np.uint8)


def _save(img: Image.Image, path):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  img.save(path)


@pytest.fixture(scope='module')
def clipart(tmp_path_factory):
  """A clip-art folder with the copies real collections hold.

  - star/s03.png is also heart/s03.png (same bytes, two labels: a tie);
  - arrow/a05.png is also arrow/a05_copy.png and heart/a05.png (two arrow
    labels against one heart: arrow is the majority);
  - arrow/g01.png is an 8-bit grey PNG and arrow/g01_16bit.png its 16-bit
    copy; star/p01.png a PNG and star/p01.bmp the same pixels as a BMP.
  """
  root = tmp_path_factory.mktemp('clipart')
  for c, label in enumerate(CLASSES):
    for i in range(PER_CLASS):
      _save(_glyph(100 * c + i), str(root / label / f'{label[0]}{i:02d}.png'))
  shutil.copy(root / 'star' / 's03.png', root / 'heart' / 's03.png')
  shutil.copy(root / 'arrow' / 'a05.png', root / 'arrow' / 'a05_copy.png')
  shutil.copy(root / 'arrow' / 'a05.png', root / 'heart' / 'a05.png')
  grey = _grey(7)
  _save(Image.fromarray(grey, 'L'), str(root / 'arrow' / 'g01.png'))
  _save(Image.fromarray(grey.astype(np.uint16) * 257, 'I;16'),
        str(root / 'arrow' / 'g01_16bit.png'))
  rgb = Image.fromarray(np.stack([_grey(8), _grey(9), _grey(10)], -1), 'RGB')
  _save(rgb, str(root / 'star' / 'p01.png'))
  _save(rgb, str(root / 'star' / 'p01.bmp'))
  return root


def _run(src, out, *flags):
  code = preprocess.main(['--input', str(src), '--output', str(out),
                          '--image_size', f'{SIZE}x{SIZE}',
                          '--storage', 'png', *flags, *LOCAL])
  assert code == 0
  return readback.assert_valid(out)


def _split_of_ids(out, manifest):
  where = {}
  for split in manifest['splits']:
    for ex_id in readback.read_all(out, split).get('id', []):
      where.setdefault(ex_id.decode(), []).append(split)
  return where


def _manifest(out):
  from pipelines import reader  # pylint: disable=import-outside-toplevel
  return reader.load_manifest(str(out))


GROUPS = [('star/s03.png', 'heart/s03.png'),
          ('arrow/a05.png', 'arrow/a05_copy.png', 'heart/a05.png'),
          ('arrow/g01.png', 'arrow/g01_16bit.png'),
          ('star/p01.png', 'star/p01.bmp')]


@pytest.fixture(scope='module')
def default_run(clipart, tmp_path_factory):
  out = tmp_path_factory.mktemp('default') / 'ds'
  report = _run(clipart, out)
  return out, _manifest(out), report


def test_every_copy_of_a_picture_is_in_one_split(default_run):
  out, manifest, report = default_run
  assert manifest['contents']['split_key'] == 'content'
  where = _split_of_ids(out, manifest)
  assert len(where) == len(CLASSES) * PER_CLASS + 7
  for group in GROUPS:
    splits = {s for ex_id in group for s in where[ex_id]}
    assert len(splits) == 1, (group, splits)
  leak = next(c for c in report['checks'] if 'leakage' in c['check'])
  assert leak['status'] == 'pass', leak


def test_black_glyphs_on_transparent_pixels_are_stored_visible(default_run):
  """Black on transparent black composited onto white: the glyph shows
  (dark pixels on a white background), not an all-black example."""
  out, manifest, _ = default_run
  records = readback.read_all(out, 'train')
  # The glyphs <class initial><nn>.png (not the grey and RGB pictures).
  glyphs = [i for i, ex_id in enumerate(records['id'])
            if ex_id.decode().split('/')[1][0] == ex_id.decode()[0]]
  assert len(glyphs) > 10
  for i in glyphs:
    # The reader decodes and normalizes: back to 0-255 by the manifest's
    # statistics.
    norm = manifest['normalization']
    pixels = (np.asarray(records['image'][i]) * np.asarray(norm['std']) +
              np.asarray(norm['mean'])) * 255
    assert pixels.shape == (SIZE, SIZE, 3)
    assert (pixels > 250).mean() > 0.3  # the white background
    assert (pixels < 32).mean() > 0.02  # the black glyph
  assert manifest['image']['background'] == '#ffffff'


def test_conflicts_and_duplicates_are_counted_and_listed(default_run):
  _, manifest, _ = default_run
  contents = manifest['contents']
  assert contents['label_conflicts'] == 'keep'
  assert contents['conflicting_contents'] == 2
  assert contents['conflicting_examples'] == 5
  listed = sorted(list(zip(c['ids'], c['labels']))
                  for c in contents['conflict_examples'])
  assert listed == sorted([
      [('heart/s03.png', 'heart'), ('star/s03.png', 'star')],
      [('arrow/a05.png', 'arrow'), ('arrow/a05_copy.png', 'arrow'),
       ('heart/a05.png', 'heart')]])
  # a05_copy (same label as a05), g01_16bit and p01.png are further copies.
  assert sum(contents['duplicates'].values()) == 3
  assert sorted(contents['duplicate_examples']) == [
      ['arrow/a05.png', 'arrow/a05_copy.png'],
      ['arrow/g01.png', 'arrow/g01_16bit.png'],
      ['star/p01.bmp', 'star/p01.png']]
  assert contents['dropped'] == {'duplicates': 0, 'label_conflicts': 0}
  assert manifest['totals']['dead_lettered'] == 0


def test_label_conflicts_majority_keeps_the_majority_label(clipart, tmp_path):
  out = tmp_path / 'ds'
  _run(clipart, out, '--label_conflicts', 'majority')
  dead = {d['input'].split(str(clipart) + '/')[1]: d
          for d in readback.dead_letters(out)}
  assert sorted(dead) == ['heart/a05.png', 'heart/s03.png', 'star/s03.png']
  assert dead['heart/a05.png']['reason'] == (
      'label conflict: the same content is labelled arrow (2), heart (1); '
      'the majority label arrow is kept')
  assert dead['star/s03.png']['reason'] == (
      'label conflict with no majority label: the same content is labelled '
      'heart (1), star (1)')
  assert {d['stage'] for d in dead.values()} == {'content'}
  manifest = _manifest(out)
  assert manifest['contents']['dropped'] == {'duplicates': 0,
                                             'label_conflicts': 3}
  where = _split_of_ids(out, manifest)
  assert 'arrow/a05.png' in where and 'arrow/a05_copy.png' in where
  assert not {'heart/a05.png', 'heart/s03.png', 'star/s03.png'} & set(where)
  for split in manifest['splits'].values():
    assert split['inputs'] == split['examples'] + split['dead_lettered']


def test_drop_duplicates_and_conflicts(clipart, tmp_path):
  out = tmp_path / 'ds'
  _run(clipart, out, '--label_conflicts', 'drop', '--drop_duplicates',
       '--rebalance', 'oversample')
  dead = {d['input'].split(str(clipart) + '/')[1]: d['reason']
          for d in readback.dead_letters(out)}
  assert dead == {
      'heart/s03.png': 'label conflict: the same content is labelled '
                       'heart (1), star (1)',
      'star/s03.png': 'label conflict: the same content is labelled '
                      'heart (1), star (1)',
      'arrow/a05.png': 'label conflict: the same content is labelled '
                       'arrow (2), heart (1)',
      'arrow/a05_copy.png': 'label conflict: the same content is labelled '
                            'arrow (2), heart (1)',
      'heart/a05.png': 'label conflict: the same content is labelled '
                       'arrow (2), heart (1)',
      'arrow/g01_16bit.png': 'duplicate of arrow/g01.png',
      'star/p01.png': 'duplicate of star/p01.bmp',
  }
  manifest = _manifest(out)
  assert manifest['contents']['dropped'] == {'duplicates': 2,
                                             'label_conflicts': 5}
  # Still counted: the manifest counts duplicates either way.
  assert sum(manifest['contents']['duplicates'].values()) == 3
  train = manifest['splits']['train']
  assert train['inputs'] == train['examples'] + train['dead_lettered']
  # The two-pass path (content splits with rebalancing): oversampled from
  # the class counts of the examples kept.
  before, after = train['class_counts_before_rebalance'], train['class_counts']
  assert sum(before.values()) == train['examples']
  largest = max(before, key=before.get)
  assert after[largest] == before[largest]
  assert all(after[c] >= before[c] for c in before)
  assert sum(after.values()) == train['records'] > train['examples']


def test_split_key_id_keys_by_path_and_can_leak(clipart, tmp_path):
  """The older keying by path, kept by option, puts copies of a picture
  in different splits here; validation says so."""
  out = tmp_path / 'ds'
  code = preprocess.main(['--input', str(clipart), '--output', str(out),
                          '--image_size', f'{SIZE}x{SIZE}', '--storage',
                          'png', '--split_key', 'id', *LOCAL])
  assert code == 0
  manifest = _manifest(out)
  assert manifest['contents']['split_key'] == 'id'
  assert manifest['config']['contents']['split_key'] == 'id'
  assert manifest['contents']['in_several_splits'] == 2
  report = validate.run(['--output', str(out)])
  leak = next(c for c in report['checks'] if 'leakage' in c['check'])
  assert leak['status'] == 'fail'
  assert '2 contents (5 records) occur in more than one split' in (
      leak['detail'])


def test_sensor_refuses_content_options(tmp_path, capsys):
  src = tmp_path / 'rows.csv'
  src.write_text('time,x,label\n1,0.5,a\n2,0.7,b\n')
  code = preprocess.main(['--modality', 'sensor', '--input', str(src),
                          '--output', str(tmp_path / 'out'),
                          '--drop_duplicates', *LOCAL])
  assert code == 2
  err = capsys.readouterr().err
  assert ('error: --drop_duplicates applies to images and text; sensor rows '
          'and windows are split by --split_by') in err


def test_validate_exit_code_is_sound(default_run):
  out, _, _ = default_run
  assert validate.main(['--output', str(out)]) == validate.EXIT_SOUND
