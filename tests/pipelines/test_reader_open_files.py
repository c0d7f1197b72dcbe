"""The reader keeps open files bounded: a dataset of 300 shards per split
is read whole with the process's open-file limit at 128, and a naive
reader that opens every shard at once fails under the same limit (so the
limit really bites)."""

import os
import subprocess
import sys

import pytest

import repo
from pipelines import preprocess

ROOT = repo.ROOT
SHARDS = 300
LIMIT = 128

# Runs in a child process: lowers RLIMIT_NOFILE first, then reads the
# training split either with pipelines.reader or by interleaving every
# shard at once, and prints the number of records.
CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit}))
import tensorflow as tf
from pipelines import reader
out, mode = sys.argv[1], sys.argv[2]
if mode == 'reader':
  ds = reader.load_dataset(out, 'train', batch_size=64, max_open_files=16,
                           apply_transform=False)
  n = sum(int(b['label'].shape[0]) for b in ds)
else:
  files = reader.shard_paths(out, reader.load_manifest(out), 'train')
  ds = tf.data.Dataset.from_tensor_slices(files).interleave(
      tf.data.TFRecordDataset, cycle_length=len(files), block_length=1)
  n = sum(1 for _ in ds)
print('records', n)
"""


@pytest.fixture(scope='module')
def many_shards(tmp_path_factory):
  root = tmp_path_factory.mktemp('many_shards')
  lines = ['text,label'] + [f'w{i % 7} w{i % 5} x{i % 3},{"ab"[i % 2]}'
                            for i in range(1200)]
  (root / 'docs.csv').write_text('\n'.join(lines) + '\n')
  out = root / 'out'
  manifest = preprocess.run([
      '--modality', 'text', '--input', str(root / 'docs.csv'), '--output',
      str(out), '--num_shards', str(SHARDS), '--direct_running_mode',
      'in_memory', '--direct_num_workers', '1'])
  assert len(manifest['splits']['train']['shards']) == SHARDS
  return out, manifest['splits']['train']['records']


def _read(out, mode):
  return subprocess.run(
      [sys.executable, '-c', CHILD.format(limit=LIMIT), str(out), mode],
      cwd=ROOT, capture_output=True, text=True, timeout=300,
      env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2'))


def test_reader_reads_every_shard_under_a_low_open_file_limit(many_shards):
  out, records = many_shards
  proc = _read(out, 'reader')
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.strip().splitlines()[-1] == f'records {records}'


def test_opening_every_shard_at_once_fails_under_that_limit(many_shards):
  out, _ = many_shards
  proc = _read(out, 'all_at_once')
  assert proc.returncode != 0
  assert 'Too many open files' in proc.stderr
