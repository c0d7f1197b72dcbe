"""TensorFlow Datasets reads what the pipelines publish.

Real runs of all three modalities on small generated inputs; each output is
loaded with exactly `tfds.builder_from_directory(OUT).as_dataset(...)` from
the `tensorflow-datasets` package, and every feature of every record is
compared with what our reader parses from the same record (by `id`).
"""

import json
import logging

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import imagegen
import sensorgen
from pipelines import outcome
from pipelines import preprocess
from pipelines import reader
from pipelines import validate
from transforms.modalities.image import features

TFDS_FILES = ['dataset_info.json', 'features.json', 'label.labels.txt']
ONE_WORKER = ['--direct_running_mode', 'in_memory', '--direct_num_workers',
              '1']
IMAGE = ['--max_pixels', '1000000', '--max_bad_fraction', '0.5',
         '--image_size', '40x32']


def _ours(out, split):
  """{id: {feature: value}} of a split as our reader parses it (records as
  stored: no transform; variable-length features as their values)."""
  ds = reader.load_dataset(str(out), split, batch_size=1, shuffle=False,
                           apply_transform=False)
  rows = {}
  for batch in ds:
    row = {}
    for key, value in batch.items():
      if isinstance(value, tf.sparse.SparseTensor):
        value = value.values
      else:
        value = value[0]
      row[key] = value.numpy()
    rows[row['id'].decode('utf-8')] = row
  return rows


def _theirs(out, split):
  """{id: {feature: value}} of a split as TFDS yields it."""
  builder = tfds.builder_from_directory(str(out))
  ds = builder.as_dataset(split=split)
  rows = {}
  for ex in tfds.as_numpy(ds):
    rows[ex['id'].decode('utf-8')] = ex
  return builder, rows


def _tfds_files(out):
  return sorted(p.name for p in out.iterdir()
                if p.name in ('dataset_info.json', 'features.json') or
                p.name.endswith('.labels.txt'))


def _stored_image_decoder(manifest):
  """Stored image bytes -> the uint8 pixels TFDS should give."""
  image = manifest.get('image')
  if image is None or image['storage'] == 'float32':
    return None
  shape = (image['height'], image['width'], image['channels'])
  if image['storage'] == 'uint8':
    return lambda b: np.frombuffer(b, np.uint8).reshape(shape)
  return lambda b: tf.io.decode_image(b, channels=shape[-1]).numpy()


def _compare_split(out, manifest, split):
  """TFDS's view of a split equals ours, feature by feature."""
  decode_image = _stored_image_decoder(manifest)
  builder, theirs = _theirs(out, split)
  ours = _ours(out, split)
  assert len(theirs) == manifest['splits'][split]['records'] > 0
  assert set(theirs) == set(ours)
  spec = manifest['feature_spec']
  assert set(builder.info.features.keys()) == set(spec)
  for key, row in ours.items():
    got = theirs[key]
    assert set(got) == set(spec)
    for name, entry in spec.items():
      mine, tfds_value = row[name], got[name]
      decoded = name == features.IMAGE and decode_image is not None
      if decoded:
        mine = decode_image(mine)
      if entry['dtype'] == 'string' and not decoded:
        assert tfds_value == mine, (key, name)
      else:
        want = np.asarray(mine)
        assert tfds_value.dtype == want.dtype, (name, tfds_value.dtype)
        np.testing.assert_array_equal(tfds_value, want, err_msg=name)
  return builder, theirs


@pytest.fixture(scope='module')
def image_run(tmp_path_factory):
  root = tmp_path_factory.mktemp('tfds_images')
  imagegen.write_good_images(str(root / 'photos'))
  out = root / 'out'
  manifest = preprocess.run(['--input', str(root / 'photos'), '--output',
                             str(out), '--num_shards', '2', '--rebalance',
                             'weight'] + IMAGE + ONE_WORKER)
  return out, manifest


def test_image_dataset_loads_with_tfds(image_run):
  out, manifest = image_run
  assert manifest['compression'] == 'none'
  assert _tfds_files(out) == TFDS_FILES
  assert manifest['tfds']['files'] == TFDS_FILES
  info = json.loads((out / 'dataset_info.json').read_text())
  assert info['name'] == 'images' and info['fileFormat'] == 'tfrecord'
  for split in info['splits']:
    shards = manifest['splits'][split['name']]['shards']
    assert [int(n) for n in split['shardLengths']] == [
        s['records'] for s in shards]
    assert int(split.get('numBytes', 0)) == sum(s['bytes'] for s in shards)
  h, w, c = 32, 40, 3
  for split in [s for s, v in manifest['splits'].items() if v['records']]:
    builder, rows = _compare_split(out, manifest, split)
    for row in rows.values():
      assert row['image'].shape == (h, w, c)
      assert row['image'].dtype == np.uint8
      assert row['weight'].dtype == np.float32
  label = builder.info.features['label']
  assert label.names == manifest['labels']
  assert 'chat noir é' in label.names  # non-ASCII names survive
  assert builder.info.splits['train'].num_examples == (
      manifest['splits']['train']['records'])
  # as_supervised gives (image, label).
  image, label_id = next(iter(tfds.as_numpy(builder.as_dataset(
      split='train', as_supervised=True))))
  assert image.shape == (h, w, c) and label_id.dtype == np.int64
  # The validator does not take the TFDS files for stray files.
  assert validate.main(['--output', str(out)]) == 0


def test_text_dataset_loads_with_tfds(tmp_path):
  rng = np.random.default_rng(0)
  words = 'alpha beta gamma delta epsilon zeta eta theta iota kappa'.split()
  lines = ['text,label']
  for i in range(120):
    lines.append(' '.join(rng.choice(words, size=rng.integers(3, 20))) +
                 ',' + ('pos', 'neg', 'neutral')[i % 3])
  src = tmp_path / 'docs.csv'
  src.write_text('\n'.join(lines) + '\n', encoding='utf-8')
  out = tmp_path / 'ids'
  manifest = preprocess.run(['--modality', 'text', '--input', str(src),
                             '--output', str(out), '--max_tokens', '12',
                             '--keep_text'] + ONE_WORKER)
  assert _tfds_files(out) == TFDS_FILES
  for split in manifest['splits']:
    _, rows = _compare_split(out, manifest, split)
    for row in rows.values():
      assert row['token_ids'].shape == (12,)
  # Bag of words: variable-length term ids and weights.
  out = tmp_path / 'bow'
  manifest = preprocess.run(['--modality', 'text', '--input', str(src),
                             '--output', str(out), '--text_output', 'tfidf']
                            + ONE_WORKER)
  assert manifest['feature_spec']['term_ids']['shape'] is None
  builder, rows = _compare_split(out, manifest, 'train')
  assert builder.info.features['label'].names == ['neg', 'neutral', 'pos']
  lengths = {len(r['term_ids']) for r in rows.values()}
  assert len(lengths) > 1  # really of variable length
  assert all(r['term_weights'].dtype == np.float32 for r in rows.values())


def test_sensor_windows_load_with_tfds(tmp_path):
  src = tmp_path / 'log.csv'
  sensorgen.frame().to_csv(src, index=False)
  out = tmp_path / 'out'
  manifest = preprocess.run([
      '--modality', 'sensor', '--input', str(src), '--output', str(out),
      '--timestamp_column', 'time', '--entity_column', 'device',
      '--window_length', '20', '--window_stride', '10', '--bucketize', '4',
      '--splits', 'train=0.6,validation=0.2,test=0.2'] + ONE_WORKER)
  assert _tfds_files(out) == TFDS_FILES
  total = 0
  for split in manifest['splits']:
    builder, rows = _compare_split(out, manifest, split)
    total += len(rows)
    for row in rows.values():
      assert row['values'].shape == (20, 3)
      assert row['values'].dtype == np.float32
      assert row['buckets'].shape == (20, 3)
      assert row['start_time'] < row['end_time']
  assert total == manifest['totals']['records'] == 132
  assert builder.info.features['label'].names == list(sensorgen.LABELS)


def _files(out):
  return sorted(p.name for p in out.iterdir()) if out.exists() else []


def test_on_with_gzip_is_a_bad_invocation(image_run, tmp_path, capsys):
  src = image_run[0].parent / 'photos'
  out = tmp_path / 'out'
  code = preprocess.main(['--input', str(src), '--output', str(out),
                          '--tfds_metadata', 'on', '--compression', 'gzip'] +
                         IMAGE + ONE_WORKER)
  assert code == outcome.EXIT_USAGE
  captured = capsys.readouterr()
  err = captured.err.strip()
  assert err.count('\n') == 0, err
  assert err.startswith('error: ') and 'gzip' in err and 'TFDS' in err
  assert json.loads(captured.out.strip().splitlines()[-1])['status'] == (
      'bad_invocation')
  assert _files(out) == []
  # An unknown value is refused the same way.
  assert preprocess.main(['--input', str(src), '--output', str(out),
                          '--tfds_metadata', 'yes'] + IMAGE) == 2
  assert capsys.readouterr().err.strip().count('\n') == 0


def test_auto_with_gzip_publishes_without_tfds_files(image_run, tmp_path,
                                                     caplog):
  src = image_run[0].parent / 'photos'
  out = tmp_path / 'out'
  with caplog.at_level(logging.INFO, logger='pipelines.preprocess'):
    manifest = preprocess.run(['--input', str(src), '--output', str(out),
                               '--storage', 'uint8'] + IMAGE + ONE_WORKER)
  assert manifest['compression'] == 'gzip'
  assert manifest['tfds'] is None
  assert _tfds_files(out) == []
  said = [r.getMessage() for r in caplog.records
          if 'TFDS' in r.getMessage()]
  assert len(said) == 1 and 'gzip' in said[0], said
  assert (out / 'manifest.json').exists()


def test_off_writes_none_and_on_turns_auto_gzip_into_none(image_run,
                                                           tmp_path):
  src = image_run[0].parent / 'photos'
  out = tmp_path / 'off'
  manifest = preprocess.run(['--input', str(src), '--output', str(out),
                             '--tfds_metadata', 'off'] + IMAGE + ONE_WORKER)
  assert manifest['tfds'] is None and _tfds_files(out) == []
  # uint8 storage would be gzip by default; asking for TFDS makes it none,
  # and TFDS reads the raw pixels.
  out = tmp_path / 'raw'
  manifest = preprocess.run(['--input', str(src), '--output', str(out),
                             '--storage', 'uint8', '--tfds_metadata', 'on',
                             '--color', 'grey'] + IMAGE + ONE_WORKER)
  assert manifest['compression'] == 'none'
  assert _tfds_files(out) == TFDS_FILES
  _, rows = _compare_split(out, manifest, 'train')
  assert all(r['image'].shape == (32, 40, 1) for r in rows.values())


def test_overwrite_leaves_one_consistent_set(image_run, tmp_path):
  src = image_run[0].parent / 'photos'
  out = tmp_path / 'out'
  first = preprocess.run(['--input', str(src), '--output', str(out),
                          '--num_shards', '3'] + IMAGE + ONE_WORKER)
  assert _tfds_files(out) == TFDS_FILES
  second = preprocess.run(['--input', str(src), '--output', str(out),
                           '--num_shards', '2', '--overwrite'] + IMAGE +
                          ONE_WORKER)
  assert second['fingerprint'] == first['fingerprint']
  assert _tfds_files(out) == TFDS_FILES
  shards = sorted(p.name for p in out.glob('**/*.tfrecord*'))
  assert shards and all(name.endswith('-of-00002') for name in shards)
  # The TFDS files point into the second run's folder, the only one left.
  assert [p.name for p in out.glob('run-*')] == [second['data_dir']]
  assert all(s['filepathTemplate'].startswith(second['data_dir'] + '/')
             for s in json.loads((out / 'dataset_info.json').read_text(
                 ))['splits'])
  info = json.loads((out / 'dataset_info.json').read_text())
  assert {s['name']: len(s['shardLengths']) for s in info['splits']} == {
      name: 2 for name in second['splits']}
  _compare_split(out, second, 'train')
  # An overwrite without TFDS metadata removes the old files; the records
  # (and the hash of the options that decide them) are the same.
  third = preprocess.run(['--input', str(src), '--output', str(out),
                          '--num_shards', '2', '--overwrite',
                          '--tfds_metadata', 'off'] + IMAGE + ONE_WORKER)
  assert _tfds_files(out) == []
  assert third['fingerprint'] == second['fingerprint']
  assert third['config_hash'] == second['config_hash']
  assert third['config']['tfds_metadata'] is False
  assert second['config']['tfds_metadata'] is True
  assert validate.main(['--output', str(out)]) == 0


def test_names_tfds_cannot_use(image_run, tmp_path, capsys):
  src = image_run[0].parent / 'photos'
  out = tmp_path / 'out'
  assert preprocess.main(['--input', str(src), '--output', str(out),
                          '--tfds_metadata', 'on', '--name', '9lives'] +
                         IMAGE) == outcome.EXIT_USAGE
  err = capsys.readouterr().err.strip()
  assert err.count('\n') == 0 and '--name' in err, err
  assert _files(out) == []
