"""benchmarks/minimal_tft_pipeline.py, the floor that
benchmarks/fixed_cost_floor.py compares our tiny runs with: it must do the
work it stands for (a full-pass analyzer applied, the exported transform
and the records written), or the comparison says nothing. And the
benchmark's table: its ratios are of the right medians."""

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from tensorflow.core.example import example_pb2

import repo
from transforms.output import tfrecord_files

ROOT = repo.ROOT
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))
# pylint: disable=g-import-not-at-top,wrong-import-position
import fixed_cost_floor
import minimal_tft_pipeline
# pylint: enable=g-import-not-at-top,wrong-import-position


def _records(path):
  """The tf.train.Examples of an uncompressed TFRecord file (CRCs checked)."""
  with open(path, 'rb') as f:
    return [example_pb2.Example.FromString(r)
            for r in tfrecord_files.iter_records(f)]


def _minimal(tmp_path, *args):
  out = tmp_path / 'out'
  run = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'benchmarks',
                                    'minimal_tft_pipeline.py'), str(out),
       *args], cwd=tmp_path, capture_output=True, text=True, timeout=300,
      env=dict(os.environ, TMPDIR=str(tmp_path)))
  assert run.returncode == 0, run.stderr[-3000:]
  report = json.loads(run.stdout.strip().splitlines()[-1])
  assert report['output'] == str(out)
  files = glob.glob(str(out / 'train-*'))
  records = [r for path in files for r in _records(path)]
  assert (out / 'transform_fn' / 'saved_model.pb').exists()
  return out, records


@pytest.mark.parametrize('flags', [['--as-ours'], []])
def test_zscore_pipeline_normalizes_over_all_rows(tmp_path, flags):
  _, records = _minimal(tmp_path, '--analyzer', 'zscore', '--rows', '20',
                        *flags)

  assert len(records) == 20
  x = np.array([r.features.feature['x'].float_list.value for r in records])
  assert x.shape == (20, 3)
  # Full-pass z-scores: every column has mean 0 and standard deviation 1
  # over all 20 rows (not per bundle or per row).
  np.testing.assert_allclose(x.mean(axis=0), 0, atol=1e-5)
  np.testing.assert_allclose(x.std(axis=0), 1, atol=1e-4)
  labels = sorted(r.features.feature['label'].bytes_list.value[0]
                  for r in records)
  assert labels == [b'a'] * 10 + [b'b'] * 10


def test_vocabulary_pipeline_indexes_every_token(tmp_path):
  out, records = _minimal(tmp_path, '--analyzer', 'vocabulary', '--rows',
                          '12', '--as-ours')

  assert len(records) == 12
  vocab_files = glob.glob(str(out / 'transform_fn' / 'assets' / '*'))
  assert len(vocab_files) == 1
  with open(vocab_files[0]) as f:
    vocab = [line.strip() for line in f]
  assert sorted(vocab) == sorted(minimal_tft_pipeline.WORDS)
  # Each row's ids are its tokens' places in the vocabulary.
  texts = [' '.join(vocab[i] for i in
                    r.features.feature['ids'].int64_list.value)
           for r in records]
  rows, _ = minimal_tft_pipeline.rows_and_spec('vocabulary', 12)
  assert sorted(texts) == sorted(row['text'] for row in rows)


def test_table_compares_each_run_with_its_floor():
  seconds = {'python': [0.1], 'imports': [4.0, 3.0, 5.0],
             'minimal-z': [7.0, 6.0, 8.0], 'minimal-vocab': [9.0],
             'minimal-z-plain': [10.0], 'ours-image': [7.7],
             'ours-sensor': [5.5], 'ours-text': [9.9]}

  lines = fixed_cost_floor.report(seconds)

  assert '| imports: Beam, TensorFlow, tf.Transform | 4.00 (3.00-5.00) |' in (
      lines)
  rows = {line.split(' | ')[0].strip('| '): line for line in lines
          if line.startswith(('| image ', '| sensor ', '| text '))}
  assert rows['image'] == ('| image | minimal pipeline, z-score | 1.10x | '
                           '+0.70 | 3.00 | no | no |')
  assert rows['sensor'] == ('| sensor | minimal pipeline, z-score | 0.79x | '
                            '-1.50 | 3.00 | yes | no |')
  assert rows['text'] == ('| text | minimal pipeline, vocabulary | 1.10x | '
                          '+0.90 | 5.00 | no | no |')
