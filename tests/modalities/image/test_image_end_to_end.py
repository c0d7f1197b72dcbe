"""End-to-end runs of the image pipeline on small generated image trees.

Each run is a real Beam pipeline on the DirectRunner with a real
tf.Transform analysis; the output is read back by the validation pipeline
and by the tf.data reader.
"""

import json
import os
import shutil

import numpy as np
import pytest

import imagegen
from pipelines import outcome
from pipelines import preprocess
from pipelines import reader
from pipelines import validate
from transforms.output import tfrecord_files

BASE_ARGS = ['--max_pixels', '1000000', '--max_bad_fraction', '0.5',
             '--direct_running_mode', 'in_memory', '--direct_num_workers',
             '1']


def _args(src, out, *extra):
  return ['--input', str(src), '--output', str(out)] + BASE_ARGS + list(extra)


@pytest.fixture(scope='module')
def tree(tmp_path_factory):
  root = tmp_path_factory.mktemp('images')
  good = imagegen.write_good_images(str(root))
  bad = imagegen.write_bad_images(str(root))
  return root, good, bad


@pytest.fixture(scope='module')
def dataset(tree, tmp_path_factory):
  root, good, bad = tree
  out = tmp_path_factory.mktemp('out') / 'dataset'
  manifest = preprocess.run(_args(root, out))
  return out, manifest, good, bad


def _records(out, manifest, split):
  from tensorflow.core.example import example_pb2  # pylint: disable=import-outside-toplevel
  records = []
  compressed = manifest['compression'] == 'gzip'
  for shard in manifest['splits'][split]['shards']:
    with tfrecord_files.open_records(str(out / shard['file']),
                                     compressed) as f:
      for r in tfrecord_files.iter_records(f):
        records.append(example_pb2.Example.FromString(r))
  return records


def test_counts_add_up_and_bad_inputs_are_dead_lettered(dataset):
  out, manifest, good, bad = dataset
  totals = manifest['totals']
  assert totals['inputs'] == sum(good.values()) + len(bad)
  assert totals['dead_lettered'] == len(bad)
  assert totals['examples'] == sum(good.values())
  assert totals['records'] == sum(good.values())  # no rebalancing
  assert totals['skipped_files'] == 1  # README.txt
  for split in manifest['splits'].values():
    assert split['inputs'] == split['examples'] + split['dead_lettered']
    assert split['records'] == sum(s['records'] for s in split['shards'])
  [dead_file] = manifest['dead_letter']['files']
  with open(out / dead_file, encoding='utf-8') as f:
    dead = [json.loads(line) for line in f]
  by_name = {os.path.basename(d['input']): d for d in dead}
  assert set(by_name) == set(bad)
  for name, reason in bad.items():
    assert by_name[name]['stage'] == 'decode'
    assert reason in by_name[name]['reason'], by_name[name]
    # Splits are keyed by the decoded pixels: an image that cannot be
    # decoded has no split.
    assert by_name[name]['split'] is None


def test_manifest_records_what_a_training_job_needs(dataset):
  _, manifest, good, _ = dataset
  assert manifest['labels'] == sorted(good)
  assert manifest['image'] == {
      'height': 224, 'width': 224, 'channels': 3, 'storage': 'jpeg',
      'resize_mode': 'fit', 'color': 'rgb', 'background': '#ffffff',
      # The decoded inputs' formats (of their content); every file here is
      # what its extension says.
      'formats': {'BMP': 1, 'GIF': 1, 'JPEG': 17, 'PNG': 9, 'WEBP': 1},
      'format_mismatches': {}}
  assert manifest['normalization']['method'] == 'zscore'
  assert len(manifest['normalization']['mean']) == 3
  assert set(manifest['splits']) == {'train', 'validation', 'test'}
  assert manifest['compression'] == 'none'
  assert manifest['versions']['apache-beam'].startswith('2.')
  assert len(manifest['fingerprint']) == 32
  assert manifest['config']['splits_from_input'] is False
  counted = {}
  for split in manifest['splits'].values():
    for label, n in split['class_counts'].items():
      counted[label] = counted.get(label, 0) + n
  assert counted == good


def test_records_carry_every_feature(dataset):
  out, manifest, _, _ = dataset
  ids = set()
  for split in manifest['splits']:
    for ex in _records(out, manifest, split):
      f = ex.features.feature
      assert set(f) == set(manifest['feature_spec'])
      label = f['label'].int64_list.value[0]
      assert manifest['labels'][label] == f['label_text'].bytes_list.value[
          0].decode()
      assert f['image'].bytes_list.value[0][:2] == b'\xff\xd8'  # JPEG
      ids.add(f['id'].bytes_list.value[0].decode())
  assert 'cat/rotated.jpg' in ids
  assert 'chat noir é/anim.gif' in ids
  rotated = [ex for s in manifest['splits'] for ex in _records(
      out, manifest, s) if ex.features.feature['id'].bytes_list.value[0] ==
             b'cat/rotated.jpg'][0].features.feature
  # 300x200 with EXIF orientation 6 is a 200-wide, 300-high picture.
  assert rotated['original_height'].int64_list.value[0] == 300
  assert rotated['original_width'].int64_list.value[0] == 200


def test_validation_passes_on_a_fresh_dataset(dataset, capsys):
  out = dataset[0]
  assert validate.main(['--output', str(out)]) == 0
  report = json.loads((out / 'validation_report.json').read_text())
  assert report['verdict'] == 'pass'
  names = {c['check'] for c in report['checks']}
  assert 'exported transform' in names
  assert 'normalization statistics reproduce' in names
  assert 'PASS' in capsys.readouterr().out


def test_reader_normalizes_like_the_analysis(dataset):
  out, manifest, _, _ = dataset
  batches = list(reader.load_dataset(str(out), 'train', batch_size=8,
                                     shuffle=False))
  images = np.concatenate([b['image'].numpy() for b in batches])
  labels = np.concatenate([b['label'].numpy() for b in batches])
  assert images.shape == (manifest['splits']['train']['records'], 224, 224, 3)
  assert images.dtype == np.float32
  # z-scored with the training split's own statistics: mean ~0, std ~1.
  assert np.all(np.abs(images.mean(axis=(0, 1, 2))) < 0.05)
  assert np.all(np.abs(images.std(axis=(0, 1, 2)) - 1) < 0.05)
  assert np.bincount(labels, minlength=len(manifest['labels'])).tolist() == [
      manifest['splits']['train']['class_counts'].get(l, 0)
      for l in manifest['labels']]
  x, y = next(iter(reader.load_dataset(str(out), 'train', batch_size=2,
                                       as_supervised=True)))
  assert x.shape[1:] == (224, 224, 3) and y.dtype.name == 'int64'


def test_reader_rejects_unknown_split_and_non_dataset(dataset, tmp_path):
  out = dataset[0]
  with pytest.raises(reader.DatasetError, match='not in the dataset'):
    reader.load_dataset(str(out), 'holdout')
  with pytest.raises(reader.DatasetError, match='not a published dataset'):
    reader.load_dataset(str(tmp_path), 'train')


def test_same_fingerprint_with_multithreading_and_multiprocessing(
    tree, dataset, tmp_path):
  root = tree[0]
  reference = dataset[1]['fingerprint']
  for mode in ('multi_threading', 'multi_processing'):
    out = tmp_path / mode
    args = _args(root, out)
    args[args.index('in_memory')] = mode
    args[args.index('--direct_num_workers') + 1] = '2'
    manifest = preprocess.run(args)
    assert manifest['fingerprint'] == reference, mode
    for split, info in manifest['splits'].items():
      assert info['fingerprint'] == dataset[1]['splits'][split]['fingerprint']


def _dead_letters(out, manifest):
  [dead_file] = manifest['dead_letter']['files']
  with open(out / dead_file, encoding='utf-8') as f:
    return sorted((d['input'], d['stage'], d['reason'], d['split'])
                  for d in map(json.loads, f))


def test_decoding_in_worker_processes_or_in_line_writes_the_same(
    tree, dataset, tmp_path):
  # The fixture's run decodes in local worker processes (--local_processes
  # auto: one per core); in-line decoding must write the same records and
  # the same dead letters, also for the bad images (truncated, empty, not
  # an image, corrupt, over the pixel limit), and so must a first pass
  # (dropping duplicates) in worker processes.
  out, manifest = dataset[0], dataset[1]
  assert manifest['config']['local_processes'] == (os.cpu_count() or 1)
  inline = preprocess.run(_args(tree[0], tmp_path / 'inline',
                                '--local_processes', '0'))
  assert inline['config']['local_processes'] == 0
  assert inline['fingerprint'] == manifest['fingerprint']
  assert (_dead_letters(tmp_path / 'inline', inline) ==
          _dead_letters(out, manifest))
  dropped = {}
  for processes in ('0', '2'):
    dest = tmp_path / f'drop{processes}'
    dropped[processes] = preprocess.run(_args(
        tree[0], dest, '--drop_duplicates', '--local_processes', processes))
  assert dropped['0']['fingerprint'] == dropped['2']['fingerprint']
  assert dropped['0']['contents'] == dropped['2']['contents']
  assert (_dead_letters(tmp_path / 'drop0', dropped['0']) ==
          _dead_letters(tmp_path / 'drop2', dropped['2']))


@pytest.mark.parametrize('step', [1, 2], ids=['all', 'every-other'])
def test_images_decoded_while_the_pipeline_starts_write_the_same(
    tree, tmp_path, monkeypatch, step):
  # The worker processes start decoding the listed images before the
  # pipeline runs (a head start). Here the pipeline waits until the head
  # start has decoded every listed input (or every other one: then each
  # batch of the decoding pass mixes results taken from it with inputs
  # decoded then), bad images included; the records, their order, the
  # statistics and the dead letters must be those of in-line decoding.
  from transforms.runtime import processes  # pylint: disable=import-outside-toplevel
  heads = []
  start_head = processes.start_head

  def start_and_finish(processes_, preload, tag, fn, calls, **kwargs):
    def kept():  # the head start's calls, with every step-th input
      for names, (kernel, _, cfg) in calls:
        names = names[::step]
        yield names, (kernel, [(name, None) for name in names], cfg)

    head = start_head(processes_, preload, tag, fn, kept(), **kwargs)
    head._thread.join(60)  # pylint: disable=protected-access
    heads.append(head)
    return head

  monkeypatch.setattr(processes, 'start_head', start_and_finish)
  ahead = preprocess.run(_args(tree[0], tmp_path / 'ahead',
                               '--local_processes', '2'))
  inline = preprocess.run(_args(tree[0], tmp_path / 'inline',
                                '--local_processes', '0'))
  [head] = heads  # none for the in-line run
  assert processes.head_start() is None  # it ended with its run
  # Every input the listing found (or every other), good or bad.
  inputs = ahead['totals']['inputs']
  assert head.submitted == head.taken == (inputs + step - 1) // step
  assert ahead['totals']['dead_lettered'] == len(tree[2])
  assert ahead['fingerprint'] == inline['fingerprint']
  assert ahead['normalization'] == inline['normalization']
  assert (_dead_letters(tmp_path / 'ahead', ahead) ==
          _dead_letters(tmp_path / 'inline', inline))


def test_decoding_goes_on_in_line_when_processes_cannot_start(
    tree, dataset, tmp_path, caplog):
  import multiprocessing  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  from transforms.runtime import processes  # pylint: disable=import-outside-toplevel
  processes.stop_all()
  # A worker that exits at once, before it can take any work.
  multiprocessing.set_executable('/bin/false')
  try:
    manifest = preprocess.run(_args(tree[0], tmp_path / 'out',
                                    '--local_processes', '2'))
  finally:
    multiprocessing.set_executable(sys.executable)
    processes.stop_all()
  assert manifest['fingerprint'] == dataset[1]['fingerprint']
  assert 'could not start 2 image decoding processes' in caplog.text


def test_local_processes_is_checked():
  with pytest.raises(preprocess.UsageError, match='--local_processes'):
    preprocess.run(_args('/nonexistent', '/tmp/x', '--local_processes',
                         'many'))


def test_rerun_refuses_then_overwrite_replaces_atomically(tree, dataset,
                                                          tmp_path, capsys):
  root = tree[0]
  out = tmp_path / 'again'
  first = preprocess.run(_args(root, out, '--num_shards', '3',
                               '--normalization', 'none'))
  assert preprocess.main(_args(root, out)) == outcome.EXIT_USAGE
  err = capsys.readouterr().err.strip()
  assert err.count('\n') == 0 and 'already holds a dataset' in err
  second = preprocess.run(_args(root, out, '--overwrite', '--num_shards', '2',
                                '--normalization', 'none'))
  assert second['fingerprint'] == first['fingerprint']
  shards = sorted(str(p.relative_to(out))
                  for p in out.glob('**/*.tfrecord*'))
  listed = sorted(s['file'] for sp in second['splits'].values()
                  for s in sp['shards'])
  assert shards == listed  # nothing left from the 3-shard run
  assert all(name.endswith('-of-00002') for name in shards)
  # One run folder, the second run's: the first's went with the publish.
  assert [p.name for p in out.glob('run-*')] == [second['data_dir']]
  assert second['data_dir'] != first['data_dir']
  assert validate.main(['--output', str(out)]) == 0
  batch = next(iter(reader.load_dataset(str(out), 'train', batch_size=4)))
  assert batch['image'].dtype.name == 'float32'
  assert float(batch['image'].numpy().max()) > 1.0  # unnormalized 0-255


def test_bad_fraction_gate_fails_and_publishes_nothing(tree, tmp_path,
                                                       capsys):
  root = tree[0]
  out = tmp_path / 'gated'
  args = _args(root, out)
  args[args.index('0.5')] = '0.01'
  assert preprocess.main(args) == outcome.EXIT_DATA_QUALITY
  err = capsys.readouterr().err
  assert 'max_bad_fraction' in err
  assert not (out / 'manifest.json').exists()
  assert validate.main(['--output', str(out)]) == validate.EXIT_UNSOUND
  # The failed run's dead letters are kept for inspection.
  [staging] = list(out.glob('run-*'))
  assert list(staging.glob('dead_letter*'))
  assert (staging / 'FAILED.json').exists()


def test_split_folders_oversampling_uint8_gzip(tmp_path):
  root = tmp_path / 'splits'
  for split in ('train', 'validation', 'test'):
    imagegen.write_good_images(str(root / split), seed=len(split))
  out = tmp_path / 'out'
  manifest = preprocess.run(_args(
      root, out, '--splits', 'from_input', '--rebalance', 'oversample',
      '--storage', 'uint8', '--num_shards', '2', '--image_size', '64x48',
      '--normalization', 'scale'))
  assert manifest['compression'] == 'gzip'
  train = manifest['splits']['train']
  assert train['class_counts_before_rebalance'] == {
      'cat': 13, 'chat noir é': 7, 'dog': 9}
  # Oversampled to the largest class: exactly 13 for whole multiples, and
  # within the hash-decided remainder for the others.
  assert train['class_counts']['cat'] == 13
  for n in train['class_counts'].values():
    assert 7 <= n <= 14
  assert manifest['splits']['test']['class_counts'] == manifest['splits'][
      'test']['class_counts_before_rebalance']
  assert validate.main(['--output', str(out)]) == 0
  batch = next(iter(reader.load_dataset(str(out), 'train', batch_size=4)))
  assert batch['image'].shape == (4, 48, 64, 3)
  x = batch['image'].numpy()
  assert 0.0 <= x.min() and x.max() <= 1.0


def test_manifest_csv_float32_weights(tree, tmp_path):
  root = tree[0]
  lines = ['path,label,split']
  for label in ('cat', 'dog'):
    for p in sorted((root / label).glob('*.png')) + sorted(
        (root / label).glob('c0*.jpg')):
      split = 'validation' if p.name.startswith(('d05', 'c09')) else 'train'
      lines.append(f'{os.path.relpath(p, tmp_path)},{label},{split}')
  lines.append('missing_label.jpg,,train')
  (tmp_path / 'list.csv').write_text('\n'.join(lines) + '\n')
  out = tmp_path / 'out'
  manifest = preprocess.run(_args(
      tmp_path / 'list.csv', out, '--splits', 'from_input', '--storage',
      'float32', '--rebalance', 'weight', '--image_size', '32',
      '--compression', 'none'))
  assert manifest['normalization']['applied'] == 'stored'
  assert manifest['feature_spec']['image'] == {'dtype': 'float32',
                                               'shape': [32, 32, 3]}
  # The line without a label, corrupt.png and huge.png.
  assert manifest['totals']['dead_lettered'] == 3
  with open(out / manifest['dead_letter']['files'][0], encoding='utf-8') as f:
    stages = sorted(json.loads(line)['stage'] for line in f)
  assert stages == ['decode', 'decode', 'read_manifest']
  records = _records(out, manifest, 'train')
  weights = {}
  for ex in records:
    f = ex.features.feature
    label = f['label_text'].bytes_list.value[0].decode()
    weights.setdefault(label, []).append(f['weight'].float_list.value[0])
  # Weights come from the class counts of the listed inputs (decided before
  # decoding): total / (classes * listed in class).
  listed = {label: sum(1 for line in lines[1:] if line.endswith(
      f',{label},train')) for label in ('cat', 'dog')}
  for label, ws in weights.items():
    expected = sum(listed.values()) / (2 * listed[label])
    assert ws == pytest.approx([expected] * len(ws), rel=1e-6)
  assert validate.main(['--output', str(out)]) == 0
  x = np.concatenate([b['image'].numpy() for b in reader.load_dataset(
      str(out), 'train', batch_size=16, shuffle=False)])
  assert x.shape[1:] == (32, 32, 3)
  assert abs(float(x.mean())) < 0.1


def test_validation_names_a_missing_shard(dataset, tmp_path, capsys):
  src, manifest = dataset[0], dataset[1]
  out = tmp_path / 'missing'
  shutil.copytree(src, out)
  shard = manifest['splits']['validation']['shards'][0]['file']
  os.remove(out / shard)
  assert validate.main(['--output', str(out)]) == validate.EXIT_UNSOUND
  printed = capsys.readouterr().out
  assert f'{shard}: file is missing' in printed
  assert 'Traceback' not in printed


def test_validation_names_a_truncated_or_altered_shard(dataset, tmp_path):
  src, manifest = dataset[0], dataset[1]
  for damage in ('truncate', 'flip'):
    out = tmp_path / damage
    shutil.copytree(src, out)
    shard = manifest['splits']['train']['shards'][0]['file']
    data = bytearray((out / shard).read_bytes())
    if damage == 'truncate':
      data = data[:len(data) // 2]
    else:
      data[len(data) // 2] ^= 0xFF
    (out / shard).write_bytes(bytes(data))
    assert validate.main(['--output', str(out)]) == validate.EXIT_UNSOUND
    report = json.loads((out / 'validation_report.json').read_text())
    failed = [c for c in report['checks'] if c['status'] == 'fail']
    assert any(shard in c['detail'] for c in failed), failed
