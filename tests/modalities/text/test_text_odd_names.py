"""Text inputs whose file names are not valid UTF-8: one dead letter each,
naming the path with the bad bytes as \\xNN, and the other documents
become examples (the run used to fail on the first such name)."""

import os

import readback
from pipelines import preprocess
from pipelines import reader

LOCAL = ['--direct_running_mode', 'in_memory', '--direct_num_workers', '1']


def test_a_name_that_is_not_utf8_is_one_dead_letter(tmp_path):
  src = tmp_path / 'reviews'
  for label in ('neg', 'pos'):
    os.makedirs(src / label)
    for i in range(10):
      (src / label / f'd{i}.txt').write_text(
          f'{label} review number {i} says {label} things')
  with open(os.path.join(os.fsencode(src), b'pos', b'caf\xe9.txt'),
            'wb') as f:
    f.write(b'a review of a cafe')
  out = tmp_path / 'ds'
  assert preprocess.main(['--modality', 'text', '--input', str(src),
                          '--output', str(out), *LOCAL]) == 0
  manifest = reader.load_manifest(str(out))
  assert manifest['totals']['inputs'] == 21
  assert manifest['totals']['examples'] == 20
  [dead] = readback.dead_letters(out)
  assert dead['stage'] == 'list'
  assert dead['split'] is None
  assert dead['reason'] == (
      f'the path is not valid UTF-8: {src}/pos/caf\\xe9.txt (undecodable '
      'bytes shown as \\xNN); the file is not read')
  readback.assert_valid(out)
