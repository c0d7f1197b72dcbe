"""The same inputs and options give the same records as before the redesign.

`golden/fingerprints.json` holds, for each run below, what the code before
the one-skeleton redesign wrote: per split the order-independent record
fingerprint, the record and input counts, the dead letters and the class
counts, plus the labels, the feature spec and the normalization
statistics. A refactoring that changes any record changes a fingerprint
here. Shard checksums are not compared: they depend on the shuffle's order
within a shard, which a redesign may change without changing any record.

To re-record after an intended change of output (say why in the commit):

    GOLDEN_RECORD=1 ./run_tests.sh tests/test_golden_fingerprints.py
"""

import json
import os

import numpy as np
import pytest

import imagegen
import sensorgen
from pipelines import preprocess
from pipelines import runner_setup
import repo

GOLDEN = os.path.join(repo.ROOT, 'tests', 'golden',
                      'fingerprints.json')
LOCAL = ['--direct_running_mode', 'in_memory', '--direct_num_workers', '1']

# (name, modality input kind, extra flags). Each covers a different path
# through the per-modality code: storage formats, rebalancing, from-input
# splits, the text outputs, sensor rows and windows, time splits.
RUNS = [
    ('image_jpeg_default', 'images', []),
    ('image_float32_oversample_grey_crop', 'images',
     ['--storage', 'float32', '--rebalance', 'oversample', '--color', 'grey',
      '--resize_mode', 'crop', '--image_size', '48x32']),
    ('image_uint8_from_input_weight', 'image_splits',
     ['--storage', 'uint8', '--splits', 'from_input', '--rebalance', 'weight',
      '--image_size', '40', '--normalization', 'scale']),
    ('image_png_manifest_undersample', 'image_manifest',
     ['--storage', 'png', '--rebalance', 'undersample', '--image_size',
      '32x24', '--resize_mode', 'stretch']),
    ('text_ids_csv', 'text_csv', ['--max_tokens', '16']),
    ('text_tfidf_folder_ngrams', 'text_folder',
     ['--text_output', 'tfidf', '--ngrams', '1,2', '--keep_text',
      '--rebalance', 'oversample']),
    ('sensor_rows_impute_minmax_buckets', 'sensor_rows',
     ['--missing', 'impute', '--normalization', 'minmax', '--bucketize',
      '4', '--rebalance', 'weight']),
    ('sensor_windows_entity_majority', 'sensor_windows',
     ['--entity_column', 'device', '--window_length', '20',
      '--window_stride', '10', '--window_label', 'majority', '--chunk_rows',
      '1000', '--rebalance', 'undersample']),
    ('sensor_windows_time_split', 'sensor_one_series',
     ['--window_length', '15', '--time_cutoffs',
      '2026-01-01T00:01:20Z,2026-01-01T00:01:40Z']),
]

TEXT_WORDS = ('alpha beta gamma delta epsilon zeta eta theta iota kappa '
              'lambda mu nu xi omicron pi rho sigma tau upsilon').split()


def _text_docs(n, seed=0):
  rng = np.random.default_rng(seed)
  docs = []
  for i in range(n):
    label = ('pos', 'neg', 'neutral')[i % 5 % 3]
    words = rng.choice(TEXT_WORDS[:12] if label == 'pos' else
                       TEXT_WORDS[6:], size=rng.integers(3, 25))
    docs.append((' '.join(words), label))
  return docs


def _make_inputs(root):
  """Every input kind the runs read, written once."""
  paths = {}
  images = root / 'images'
  imagegen.write_good_images(str(images))
  imagegen.write_bad_images(str(images))
  paths['images'] = images
  splits = root / 'image_splits'
  for i, split in enumerate(('train', 'validation', 'test')):
    imagegen.write_good_images(str(splits / split), seed=10 + i)
  paths['image_splits'] = splits
  lines = ['path,label']
  for dirpath, _, files in sorted(os.walk(images)):
    for name in sorted(files):
      rel = os.path.relpath(os.path.join(dirpath, name), images)
      label = rel.split(os.sep)[0]
      lines.append(f'"images/{rel}",{label}')
  lines.append('images/missing.jpg,cat')
  (root / 'manifest.csv').write_text('\n'.join(lines) + '\n',
                                     encoding='utf-8')
  paths['image_manifest'] = root / 'manifest.csv'
  docs = _text_docs(400)
  rows = ['text,label'] + [f'"{t}",{label}' for t, label in docs]
  rows.append(',pos')  # empty text: a dead letter
  (root / 'docs.csv').write_text('\n'.join(rows) + '\n', encoding='utf-8')
  paths['text_csv'] = root / 'docs.csv'
  folder = root / 'text_folder'
  for i, (text, label) in enumerate(_text_docs(300, seed=1)):
    (folder / label).mkdir(parents=True, exist_ok=True)
    (folder / label / f'doc{i:04d}.txt').write_text(text, encoding='utf-8')
  paths['text_folder'] = folder
  # One device's rows: a table without an entity column is one series,
  # where rows of several devices at one time would conflict.
  rows_df = sensorgen.frame(devices=1, rows_per_device=480, seed=3,
                            entity=False)
  rows_df.loc[rows_df.index[::37], 'ch1'] = np.nan
  rows_df.to_csv(root / 'rows.csv', index=False)
  paths['sensor_rows'] = root / 'rows.csv'
  win_dir = root / 'windows'
  win_dir.mkdir()
  frame = sensorgen.frame(devices=8, rows_per_device=100, seed=4)
  frame.iloc[:400].to_csv(win_dir / 'a.csv', index=False)
  frame.iloc[400:].to_csv(win_dir / 'b.csv', index=False)
  paths['sensor_windows'] = win_dir
  sensorgen.frame(devices=1, rows_per_device=150, seed=5,
                  entity=False).to_csv(root / 'series.csv', index=False)
  paths['sensor_one_series'] = root / 'series.csv'
  return paths


def _modality_flags(kind):
  if kind.startswith('image'):
    return ['--modality', 'image', '--max_pixels', '1000000',
            '--max_bad_fraction', '0.5']
  if kind.startswith('text'):
    return ['--modality', 'text', '--max_bad_fraction', '0.2']
  return ['--modality', 'sensor', '--timestamp_column', 'time',
          '--max_bad_fraction', '0.2']


def _rounded(value):
  if isinstance(value, float):
    return round(value, 5)
  if isinstance(value, list):
    return [_rounded(v) for v in value]
  if isinstance(value, dict):
    return {k: _rounded(v) for k, v in value.items()}
  return value


def summarize(manifest):
  """What must not change: the records and the counts behind them."""
  norm = {k: v for k, v in manifest['normalization'].items()
          if k in ('method', 'applied', 'mean', 'std', 'per_channel',
                   'images_analyzed', 'rows_analyzed')}
  return _rounded({
      'fingerprint': manifest['fingerprint'],
      'labels': manifest['labels'],
      'feature_spec': manifest['feature_spec'],
      'normalization': norm,
      'totals': {k: manifest['totals'][k] for k in (
          'inputs', 'examples', 'dead_lettered', 'records',
          'skipped_files')},
      'splits': {
          name: {k: s[k] for k in (
              'fingerprint', 'records', 'inputs', 'examples',
              'dead_lettered', 'class_counts',
              'class_counts_before_rebalance')}
          for name, s in manifest['splits'].items()},
  })


@pytest.fixture(scope='module')
def inputs(tmp_path_factory):
  return _make_inputs(tmp_path_factory.mktemp('golden_inputs'))


@pytest.fixture(scope='module')
def golden():
  if os.environ.get('GOLDEN_RECORD'):
    return {}
  with open(GOLDEN, encoding='utf-8') as f:
    return json.load(f)


_RECORDED = {}


@pytest.mark.parametrize('name,kind,extra', RUNS, ids=[r[0] for r in RUNS])
def test_records_equal_the_recorded_ones(name, kind, extra, inputs, golden,
                                         tmp_path):
  manifest = preprocess.run(
      ['--input', str(inputs[kind]), '--output', str(tmp_path / 'out')] +
      _modality_flags(kind) + LOCAL + extra)
  got = summarize(manifest)
  if os.environ.get('GOLDEN_RECORD'):
    _RECORDED[name] = got
    os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
    with open(GOLDEN, 'w', encoding='utf-8') as f:
      json.dump(_RECORDED, f, indent=1, sort_keys=True, ensure_ascii=False)
      f.write('\n')
    return
  assert name in golden, f'no recorded output for {name}'
  assert got == golden[name]


# One run of each modality again, built with Beam's type checks, which the
# DirectRunner skips by default (runner_setup.skip_type_checks): the pipeline
# passes them, and the records are the same.
CHECKED = ('image_png_manifest_undersample', 'text_tfidf_folder_ngrams',
           'sensor_windows_entity_majority')
CHECKED_RUNS = [run for run in RUNS if run[0] in CHECKED]


@pytest.mark.parametrize('name,kind,extra', CHECKED_RUNS,
                         ids=[run[0] for run in CHECKED_RUNS])
def test_records_are_the_same_with_beams_type_checks(name, kind, extra,
                                                     inputs, golden,
                                                     tmp_path):
  if os.environ.get('GOLDEN_RECORD'):
    pytest.skip('recording')
  manifest = preprocess.run(
      ['--input', str(inputs[kind]), '--output', str(tmp_path / 'out'),
       '--pipeline_type_check'] + _modality_flags(kind) + LOCAL + extra)
  assert summarize(manifest) == golden[name]
