"""Image inputs as they are found on disk, through real pipeline runs:
images in folders nested inside the class folders, symbolic links (good,
broken, looping), names that are not valid UTF-8, folder names holding
pattern characters, and CSV manifests whose quoted fields hold line breaks.

Every file becomes an example, a dead letter or a skipped file, and the
manifest's counts say which; validation passes on each dataset.
"""

import json
import os

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import numpy as np
import pytest
from PIL import Image

import readback
from pipelines import preprocess
from pipelines import validate
from transforms.core import splits as split_lib
from transforms.modalities.image import inputs

WIDTH, HEIGHT = 40, 30
ARGS = ['--storage', 'png', '--image_size', f'{WIDTH}x{HEIGHT}',
        '--max_bad_fraction', '0.5', '--direct_running_mode', 'in_memory',
        '--direct_num_workers', '1']
RATIOS = split_lib.parse_ratios('train=0.8,validation=0.1,test=0.1')


def _image(path, seed: int) -> str:
  """Writes a small image no other test image looks like."""
  rng = np.random.default_rng(seed)
  pixels = (rng.random((HEIGHT, WIDTH, 3)) * 255).astype(np.uint8)
  os.makedirs(os.path.dirname(str(path)), exist_ok=True)
  Image.fromarray(pixels).save(str(path))
  return str(path)


def _images(root, names, first_seed: int):
  for seed, name in enumerate(names, first_seed):
    _image(os.path.join(str(root), name), seed)


def _ids_and_labels(out, manifest):
  """{example id: label} over every split."""
  found = {}
  for split in manifest['splits']:
    records = readback.read_all(out, split)
    for example_id, label in zip(records.get('id', []),
                                 records.get('label_text', [])):
      found[example_id.decode()] = label.decode()
  return found


# ----------------------------------------------- a folder of class folders


@pytest.fixture(scope='module')
def folder_run(tmp_path_factory):
  """One run over `photos [2019]`: class folders, nested folders, links."""
  base = tmp_path_factory.mktemp('disk')
  root = base / 'photos [2019]'
  _images(root, ['cat/c0.jpg', 'cat/c1.jpg', 'cat/2019/n0.jpg',
                 'cat/2019/06/n1.png', 'dog/d0.png', 'dog/d1.png'], 0)
  _images(base, ['elsewhere/real.jpg', 'birds/b0.jpg', 'birds/b1.png'], 10)
  # What the folder name would match as a pattern, and must not be read.
  _images(base, ['photos 2/cat/x.jpg'], 20)
  os.symlink(base / 'elsewhere' / 'real.jpg', root / 'dog' / 'link.jpg')
  os.symlink(base / 'birds', root / 'bird')  # a class folder elsewhere
  os.symlink(base / 'nowhere.jpg', root / 'dog' / 'gone.jpg')
  os.symlink('..', root / 'dog' / 'up')  # a loop back to the root
  with open(os.fsencode(str(root / 'dog')) + b'/caf\xe9.jpg', 'wb') as f:
    with open(root / 'dog' / 'd0.png', 'rb') as good:
      f.write(good.read())
  (root / 'dog' / 'notes.txt').write_text('not an image')
  out = base / 'out'
  manifest = preprocess.run(['--input', str(root), '--output', str(out)] +
                            ARGS)
  return root, out, manifest


def test_folder_every_file_is_counted_once(folder_run):
  _, _, manifest = folder_run
  totals = manifest['totals']
  # 9 images (3 through links, 2 nested); 2 dead letters; notes.txt and
  # the loop skipped; nothing from `photos 2`.
  assert {k: totals[k] for k in ('inputs', 'examples', 'records',
                                 'dead_lettered', 'skipped_files')} == {
                                     'inputs': 11, 'examples': 9,
                                     'records': 9, 'dead_lettered': 2,
                                     'skipped_files': 2}
  assert manifest['labels'] == ['bird', 'cat', 'dog']
  assert manifest['config']['image']['nested_folders'] == 'include'


def test_folder_broken_link_and_undecodable_name_are_dead_letters(
    folder_run):
  root, out, _ = folder_run
  dead = sorted(readback.dead_letters(out), key=lambda d: d['input'])
  assert dead == [
      {'input': f'{root}/dog/caf\\xe9.jpg', 'stage': 'list',
       'reason': f'the path is not valid UTF-8: {root}/dog/caf\\xe9.jpg '
                 '(undecodable bytes shown as \\xNN)', 'split': None},
      {'input': f'{root}/dog/gone.jpg', 'stage': 'list',
       'reason': f'broken symbolic link: target {root.parent}/nowhere.jpg '
                 'does not exist', 'split': None},
  ]


def test_folder_nested_and_linked_images_are_examples_of_their_class(
    folder_run):
  _, out, manifest = folder_run
  assert _ids_and_labels(out, manifest) == {
      'cat/c0.jpg': 'cat', 'cat/c1.jpg': 'cat', 'cat/2019/n0.jpg': 'cat',
      'cat/2019/06/n1.png': 'cat', 'dog/d0.png': 'dog', 'dog/d1.png': 'dog',
      'dog/link.jpg': 'dog', 'bird/b0.jpg': 'bird', 'bird/b1.png': 'bird'}
  totals = {}
  for info in manifest['splits'].values():
    for label, n in info['class_counts'].items():
      totals[label] = totals.get(label, 0) + n
  assert totals == {'cat': 4, 'dog': 3, 'bird': 2}


def test_folder_dataset_validates(folder_run):
  assert validate.main(['--output', str(folder_run[1])]) == 0


# ---------------------------------------------------- split folders, skip


@pytest.fixture(scope='module')
def split_tree(tmp_path_factory):
  root = tmp_path_factory.mktemp('splits') / 'what?'
  _images(root, ['train/cat/a.jpg', 'train/cat/b.jpg', 'train/cat/2019/c.jpg',
                 'train/dog/d.png', 'train/dog/e.png', 'validation/cat/f.jpg',
                 'test/dog/g.png', 'test/dog/2020/01/h.png'], 30)
  return root


def test_split_folders_nested_images_are_listed_with_their_class(split_tree):
  with TestPipeline() as p:
    listed = p | inputs.ListImageInputs(str(split_tree), True, (), None)
    assert_that(listed.refs | beam.Map(lambda r: (r.example_id, r.label,
                                                  r.split)),
                equal_to([
                    ('train/cat/a.jpg', 'cat', 'train'),
                    ('train/cat/b.jpg', 'cat', 'train'),
                    ('train/cat/2019/c.jpg', 'cat', 'train'),
                    ('train/dog/d.png', 'dog', 'train'),
                    ('train/dog/e.png', 'dog', 'train'),
                    ('validation/cat/f.jpg', 'cat', 'validation'),
                    ('test/dog/g.png', 'dog', 'test'),
                    ('test/dog/2020/01/h.png', 'dog', 'test')]))
    assert_that(listed[inputs.SKIPPED], equal_to([]), label='NoneSkipped')


def test_split_folders_with_nested_folders_skip(split_tree, tmp_path):
  out = tmp_path / 'out'
  manifest = preprocess.run(['--input', str(split_tree), '--output',
                             str(out), '--splits', 'from_input',
                             '--nested_folders', 'skip'] + ARGS)
  totals = manifest['totals']
  assert {k: totals[k] for k in ('inputs', 'examples', 'dead_lettered',
                                 'skipped_files')} == {
                                     'inputs': 6, 'examples': 6,
                                     'dead_lettered': 0, 'skipped_files': 2}
  assert {s: info['class_counts'] for s, info in
          manifest['splits'].items()} == {
              'train': {'cat': 2, 'dog': 2}, 'validation': {'cat': 1},
              'test': {'dog': 1}}
  assert manifest['config']['image']['nested_folders'] == 'skip'
  assert validate.main(['--output', str(out)]) == 0


def test_nested_folders_skip_names_the_reason(split_tree):
  with TestPipeline() as p:
    listed = p | inputs.ListImageInputs(str(split_tree), True, (), None,
                                        'skip')
    assert_that(listed[inputs.SKIPPED], equal_to([
        {'input': f'{split_tree}/train/cat/2019/c.jpg',
         'reason': 'in a folder nested inside the class folder cat '
                   '(--nested_folders skip)'},
        {'input': f'{split_tree}/test/dog/2020/01/h.png',
         'reason': 'in a folder nested inside the class folder dog '
                   '(--nested_folders skip)'}]))


# --------------------------------------------------------------- manifests


def test_csv_manifest_quoted_line_breaks(tmp_path):
  folder = tmp_path / 'lists [1]'
  _images(folder, ['photos [2019]/cat/a.jpg', 'photos [2019]/cat/b.jpg',
                   'photos [2019]/dog/c.png', 'what?/d.png'], 40)
  (folder / 'm.csv').write_text(
      'path,label,caption\n'
      'photos [2019]/cat/a.jpg,cat,"a cat\non two lines"\n'
      '"photos [2019]/cat/b.jpg",cat,plain\n'
      '\n'
      '"photos [2019]/dog/c.png,dog,a quote left open\n'
      'photos [2019]/dog/c.png,dog,"three\nshort\nlines"\n'
      'what?/d.png,"dog",\n'
      ',cat,no path\n', encoding='utf-8')
  out = tmp_path / 'out'
  manifest = preprocess.run(['--input', str(folder / 'm.csv'), '--output',
                             str(out)] + ARGS)
  totals = manifest['totals']
  assert {k: totals[k] for k in ('inputs', 'examples', 'dead_lettered',
                                 'skipped_files')} == {
                                     'inputs': 6, 'examples': 4,
                                     'dead_lettered': 2, 'skipped_files': 0}
  assert sorted(readback.dead_letters(out), key=lambda d: d['input']) == [
      {'input': f'{folder}/m.csv:11: ,cat,no path', 'stage': 'read_manifest',
       'reason': 'manifest line has no path', 'split': None},
      {'input': f'{folder}/m.csv:6: "photos [2019]/dog/c.png,dog,a quote '
                'left open', 'stage': 'read_manifest',
       'reason': 'a quote opened on this line is not closed on it (only '
                 'columns other than path, label and split may hold line '
                 'breaks)', 'split': None},
  ]
  assert _ids_and_labels(out, manifest) == {
      'photos [2019]/cat/a.jpg': 'cat', 'photos [2019]/cat/b.jpg': 'cat',
      'photos [2019]/dog/c.png': 'dog', 'what?/d.png': 'dog'}
  assert validate.main(['--output', str(out)]) == 0


def test_jsonl_manifest_named_with_pattern_characters(tmp_path):
  folder = tmp_path / 'lists [1]'
  _images(folder, ['cat/a.jpg'], 50)
  path = folder / 'what?.jsonl'
  path.write_text(
      json.dumps({'path': 'cat/a.jpg', 'label': 'cat'}) + '\n' +
      '{"path": "b.jpg", "label": \n', encoding='utf-8')
  fmt = inputs.check_input(str(path), False)
  with TestPipeline() as p:
    listed = p | inputs.ListImageInputs(str(path), False, RATIOS, fmt)
    assert_that(listed.refs | beam.Map(lambda r: (r.path, r.label)),
                equal_to([(f'{folder}/cat/a.jpg', 'cat')]))
    assert_that(listed[inputs.DEAD] | beam.Map(lambda d: d['input']),
                equal_to([f'{path}: {{"path": "b.jpg", "label": ']),
                label='Dead')
