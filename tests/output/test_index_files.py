"""--index_files: a DALI tfrecord2idx index beside every shard.

Real image and sensor pipelines on the DirectRunner write the indexes; each
line is checked against the shard's bytes with nothing but struct and
CRC32C, the `tfrecord` package's reader (the one under its PyTorch
dataset) reads the shards through the indexes in a subprocess that never
imports TensorFlow (the two cannot share a process: duplicate protobuf
symbols), and the validation pipeline must name an index file that was
altered, cut, deleted or left unlisted.

The reader test needs the `tfrecord` package (the `test` extra, which
./run_tests.sh installs); without it it fails and says so. torch itself is
not installed: PyPI's Linux build of torch pulls gigabytes of CUDA
libraries. The package's `TFRecordDataset` gives each DataLoader worker
`shard=(worker id, worker count)` of `tfrecord_loader`, and with no
workers a random indexed start; the test calls `tfrecord_loader` the same
ways.
"""

import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap

import google_crc32c
import pytest

import imagegen
import sensorgen
from pipelines import options as options_lib
from pipelines import outcome
from pipelines import preprocess
from pipelines import validate
from transforms.output import tfrecord_files

# Splits large enough that every split's two shards hold two records or
# more (the PyTorch reader test needs four such shards).
IMAGE = ['--max_pixels', '1000000', '--direct_running_mode', 'in_memory',
         '--direct_num_workers', '1', '--image_size', '32x32',
         '--num_shards', '2', '--splits', 'train=0.6,validation=0.2,test=0.2']
SENSOR = ['--modality', 'sensor', '--timestamp_column', 'time',
          '--entity_column', 'device', '--window_length', '20',
          '--window_stride', '10', '--splits',
          'train=0.6,validation=0.2,test=0.2', '--direct_running_mode',
          'in_memory', '--direct_num_workers', '1']
LINE = re.compile(rb'(\d+) (\d+)\n')


@pytest.fixture(scope='module')
def image_src(tmp_path_factory):
  root = tmp_path_factory.mktemp('images')
  good = imagegen.write_good_images(str(root))
  return root, good


@pytest.fixture(scope='module')
def image_run(image_src, tmp_path_factory):
  out = tmp_path_factory.mktemp('image') / 'dataset'
  manifest = preprocess.run(['--input', str(image_src[0]), '--output',
                             str(out), '--index_files'] + IMAGE)
  return out, manifest


@pytest.fixture(scope='module')
def sensor_run(tmp_path_factory):
  root = tmp_path_factory.mktemp('sensor')
  src = root / 'log.csv'
  sensorgen.frame().to_csv(src, index=False)
  out = root / 'dataset'
  manifest = preprocess.run(['--input', str(src), '--output', str(out),
                             '--index_files', '--num_shards', '2'] + SENSOR)
  return out, manifest


def _shards(manifest):
  return [s for split in manifest['splits'].values() for s in split['shards']]


def _masked_crc(data: bytes) -> int:
  crc = google_crc32c.value(data)
  return (((crc >> 15) | (crc << 17)) + 0xa282ead8) & 0xffffffff


def _index_lines(path):
  data = path.read_bytes()
  lines = [LINE.fullmatch(line + b'\n') for line in data.split(b'\n')[:-1]]
  assert (not data or data.endswith(b'\n')) and all(lines), path
  return [(int(m.group(1)), int(m.group(2))) for m in lines]


def _tf_records(path):
  """The shard's records as TensorFlow reads them, in file order."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return [r.numpy() for r in tf.data.TFRecordDataset(str(path))]


@pytest.mark.parametrize('run', ['image_run', 'sensor_run'])
def test_every_index_line_points_at_a_valid_record(run, request):
  out, manifest = request.getfixturevalue(run)
  assert manifest['config']['index_files'] is True
  assert manifest['compression'] == 'none'
  shards = _shards(manifest)
  assert len(shards) >= 4  # two per split at least for train
  assert sorted(str(p.relative_to(out)) for p in out.glob('**/*.idx')) == (
      sorted(s['index'] for s in shards))
  assert [p.name for p in out.glob('run-*')] == [manifest['data_dir']]
  for shard in shards:
    assert shard['index'] == shard['file'] + '.idx'
    data = (out / shard['file']).read_bytes()
    entries = _index_lines(out / shard['index'])
    assert len(entries) == shard['records']  # none for an empty shard
    expected_offset = 0
    payloads = []
    for offset, length in entries:
      # Records follow each other with nothing between or after them.
      assert offset == expected_offset
      expected_offset += length
      size, size_crc = struct.unpack_from('<QI', data, offset)
      assert size_crc == _masked_crc(data[offset:offset + 8])
      assert length == 8 + 4 + size + 4
      payload = data[offset + 12:offset + 12 + size]
      assert struct.unpack_from('<I', data, offset + 12 + size)[0] == (
          _masked_crc(payload))
      payloads.append(payload)
    assert expected_offset == len(data)
    assert payloads == _tf_records(out / shard['file'])


def test_count_records_indexes_across_block_boundaries(image_run):
  out, manifest = image_run
  shard = _shards(manifest)[0]
  data = (out / shard['file']).read_bytes()
  for block in (7, 100, 1 << 20):  # headers and records cut by blocks
    entries = []
    n = tfrecord_files.count_records(io.BytesIO(data), block, entries)
    assert n == shard['records']
    assert entries == _index_lines(out / shard['index'])


def test_index_files_leave_records_fingerprint_and_hash_alone(
    image_src, image_run, tmp_path):
  src, _ = image_src
  _, indexed = image_run
  out = tmp_path / 'dataset'
  plain = preprocess.run(['--input', str(src), '--output', str(out)] + IMAGE)
  assert plain['fingerprint'] == indexed['fingerprint']
  assert plain['config_hash'] == indexed['config_hash']
  assert plain['config']['index_files'] is False
  assert all('index' not in s for s in _shards(plain))
  assert not list(out.glob('**/*.idx'))
  # --overwrite with indexes, then without: no index file is left behind.
  again = preprocess.run(['--input', str(src), '--output', str(out),
                          '--overwrite', '--index_files'] + IMAGE)
  assert len(list(out.glob('**/*.idx'))) == len(_shards(again))
  preprocess.run(['--input', str(src), '--output', str(out),
                  '--overwrite'] + IMAGE)
  assert not list(out.glob('**/*.idx'))
  assert validate.main(['--output', str(out)]) == validate.EXIT_SOUND


def test_index_files_make_compression_auto_choose_none():
  argv = ['--input', 'x', '--output', 'y', '--storage', 'uint8']
  plain = options_lib.resolve_config(preprocess.PipelineOptions(argv))
  indexed = options_lib.resolve_config(preprocess.PipelineOptions(
      argv + ['--index_files']))
  assert (plain.compression, indexed.compression) == ('gzip', 'none')


def test_index_files_with_gzip_is_a_bad_invocation(image_src, tmp_path,
                                                   capsys):
  out = tmp_path / 'dataset'
  why = '--compression gzip'
  code = preprocess.main(['--input', str(image_src[0]), '--output', str(out),
                          '--index_files'] + IMAGE + ['--compression',
                                                      'gzip'])
  assert code == outcome.EXIT_USAGE
  captured = capsys.readouterr()
  err = captured.err.strip()
  assert err.count('\n') == 0, err
  assert err.startswith('error: --index_files needs uncompressed shards')
  assert why in err and err.endswith('pass --compression none.')
  assert json.loads(captured.out.strip().splitlines()[-1])['status'] == (
      'bad_invocation')
  assert not out.exists()


def test_config_hash_ignores_index_files():
  argv = ['--input', 'x', '--output', 'y']
  plain = options_lib.resolve_config(preprocess.PipelineOptions(argv))
  indexed = options_lib.resolve_config(preprocess.PipelineOptions(
      argv + ['--index_files']))
  assert indexed.index_files and not plain.index_files
  assert indexed.config_hash() == plain.config_hash()


# --- The tfrecord package's reader, without TensorFlow ---------------------

_READER = textwrap.dedent('''
    import json, sys
    from tfrecord.reader import tfrecord_loader

    def text(value):
      # bytes, or a uint8 array, depending on the version.
      return (value if isinstance(value, bytes) else
              bytes(value.tolist())).decode()

    def pairs(shard, index, part=None):
      spec = {'id': 'byte', 'label': 'int'}
      return [[text(r['id']), int(r['label'][0])]
              for r in tfrecord_loader(shard, index, spec, shard=part)]

    out = {}
    for shard, index in json.loads(sys.argv[1]):
      out[shard] = {
          # Two workers, as a DataLoader with num_workers=2 gives them:
          # the index gives each its own byte range.
          'indexed_2_workers': [pairs(shard, index, (w, 2))
                                for w in range(2)],
          # The same without an index: each worker reads the whole shard.
          'plain_2_workers': [pairs(shard, None, (w, 2)) for w in range(2)],
          # One process: the index gives a random record to start from.
          'indexed_random_start': pairs(shard, index),
      }
    out['tensorflow_imported'] = 'tensorflow' in sys.modules
    print(json.dumps(out))
''')


def _reader_env():
  env = dict(os.environ)
  probe = subprocess.run(
      [sys.executable, '-c', 'import tfrecord.reader'],
      env=env, capture_output=True, text=True, timeout=300, check=False)
  if probe.returncode:
    pytest.fail('the tfrecord package is not installed (it is in the '
                'test extra: ./run_tests.sh installs it): ' +
                probe.stderr.strip().splitlines()[-1])
  return env


def _tf_pairs(path):
  from tensorflow.core.example import example_pb2
  out = []
  for record in _tf_records(path):
    f = example_pb2.Example.FromString(record).features.feature
    out.append([f['id'].bytes_list.value[0].decode(),
                f['label'].int64_list.value[0]])
  return out


@pytest.mark.parametrize('run', ['image_run', 'sensor_run'])
def test_tfrecord_reader_splits_shards_by_their_index(run, request):
  out, manifest = request.getfixturevalue(run)
  env = _reader_env()
  # The package cannot load an index of one line or none (numpy's loadtxt
  # then gives no 2-D array; vahidk/tfrecord#9): readers skip such shards.
  shards = [s for s in _shards(manifest) if s['records'] >= 2]
  assert len(shards) >= 4
  jobs = [[str(out / s['file']), str(out / s['index'])] for s in shards]
  proc = subprocess.run([sys.executable, '-c', _READER, json.dumps(jobs)],
                        env=env, capture_output=True, text=True,
                        timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  got = json.loads(proc.stdout.strip().splitlines()[-1])
  assert got.pop('tensorflow_imported') is False
  total = 0
  for shard in shards:
    read = got[str(out / shard['file'])]
    expected = _tf_pairs(out / shard['file'])
    assert len(expected) == shard['records']
    total += len(expected)
    # With the index each record is read once, by one of the two workers,
    # and each worker reads a part.
    first, second = read['indexed_2_workers']
    assert first and second
    assert sorted(first + second) == sorted(expected)
    # Without it both workers read everything: the index is what splits.
    plain = read['plain_2_workers']
    assert [sorted(w) for w in plain] == [sorted(expected)] * 2
    # Starting at a random indexed record and wrapping around.
    start = read['indexed_random_start']
    assert sorted(start) == sorted(expected)
    at = expected.index(start[0])
    assert start == expected[at:] + expected[:at]
  assert total == sum(s['records'] for s in shards)


# --- Validation ------------------------------------------------------------

def _failed(out):
  report = json.loads((out / 'validation_report.json').read_text())
  return [c for c in report['checks'] if c['status'] == 'fail']


def test_validation_passes_with_index_files(image_run, sensor_run):
  for out, _ in (image_run, sensor_run):
    assert validate.main(['--output', str(out)]) == validate.EXIT_SOUND
    assert not _failed(out)


@pytest.mark.parametrize('damage', ['alter', 'cut', 'delete', 'unlisted',
                                    'garble'])
def test_validation_names_a_damaged_index_file(image_run, tmp_path, damage):
  src, manifest = image_run
  out = tmp_path / 'dataset'
  shutil.copytree(src, out)
  shard = manifest['splits']['train']['shards'][0]
  index = out / shard['index']
  data = index.read_bytes()
  lines = data.split(b'\n')[:-1]
  assert len(lines) >= 3
  name = shard['index']
  if damage == 'alter':
    # Lengths of two records swapped: still well-formed, but wrong.
    (o1, l1), (o2, l2) = (l.split() for l in lines[:2])
    if l1 == l2:
      l2 = str(int(l2) + 1).encode()
    lines[:2] = [o1 + b' ' + l2, o2 + b' ' + l1]
    index.write_bytes(b'\n'.join(lines) + b'\n')
  elif damage == 'cut':
    index.write_bytes(b'\n'.join(lines[:-1]) + b'\n')
  elif damage == 'garble':
    index.write_bytes(data[:len(data) - 3])
  elif damage == 'delete':
    index.unlink()
  else:
    name = shard['file'].replace('-00000-of-', '-00007-of-') + '.idx'
    shutil.copy(index, out / name)
  assert validate.main(['--output', str(out)]) == validate.EXIT_UNSOUND
  failed = _failed(out)
  assert failed and all(name in c['detail'] for c in failed), failed
  if damage == 'unlisted':
    assert [c['check'] for c in failed] == ['no unlisted shard files']
