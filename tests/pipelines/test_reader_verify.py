"""load_dataset(verify=True) names the shard that is corrupt, cut, missing
or has other records than the manifest says; TensorFlow's own error for a
corrupt record does not name the file."""

import json
import shutil
import struct

import pytest
import tensorflow as tf

from pipelines import preprocess
from pipelines import reader

TEXT = ['--modality', 'text', '--direct_running_mode', 'in_memory',
        '--direct_num_workers', '1', '--num_shards', '2']


@pytest.fixture(scope='module')
def dataset(tmp_path_factory):
  root = tmp_path_factory.mktemp('verify')
  lines = ['text,label'] + [f'"word{i % 7} other{i % 5} n{i}",'
                            f'{("a", "b")[i % 2]}' for i in range(400)]
  (root / 'docs.csv').write_text('\n'.join(lines) + '\n')
  out = root / 'out'
  preprocess.run(['--input', str(root / 'docs.csv'), '--output', str(out)] +
                 TEXT)
  return out


def _records(out, **kwargs):
  return sum(int(b['label'].shape[0]) for b in reader.load_dataset(
      str(out), 'train', batch_size=64, **kwargs))


def test_an_intact_split_verifies_and_reads(dataset):
  manifest = json.loads((dataset / 'manifest.json').read_text())
  assert _records(dataset, verify=True) == (
      manifest['splits']['train']['records'])


def _middle_of_middle_record(data: bytes) -> int:
  """The offset of the middle byte of the middle record's data (TFRecord
  framing: 8-byte length, 4-byte CRC, data, 4-byte CRC)."""
  starts, at = [], 0
  while at < len(data):
    starts.append(at)
    at += 12 + struct.unpack_from('<Q', data, at)[0] + 4
  start = starts[len(starts) // 2]
  return start + 12 + struct.unpack_from('<Q', data, start)[0] // 2


@pytest.mark.parametrize('damage', ['flipped', 'cut', 'deleted'])
def test_a_damaged_shard_is_named(dataset, tmp_path, damage):
  out = tmp_path / 'out'
  shutil.copytree(dataset, out)
  manifest = json.loads((out / 'manifest.json').read_text())
  shard = manifest['splits']['train']['shards'][1]['file']
  path = out / shard
  data = bytearray(path.read_bytes())
  # Inside the data of the middle record, never on a record boundary or a
  # length field: where those fall depends on the order of the records in
  # the shard, which the shuffle may change.
  inside = _middle_of_middle_record(bytes(data))
  if damage == 'flipped':
    data[inside] ^= 0xFF
    path.write_bytes(bytes(data))
  elif damage == 'cut':
    path.write_bytes(bytes(data[:inside]))
  else:
    path.unlink()
  with pytest.raises(reader.DatasetError, match=str(path)) as e:
    _records(out, verify=True)
  expected = {'flipped': 'was changed or is corrupt',
              'cut': 'cannot be read whole', 'deleted': 'cannot be read'}
  assert expected[damage] in str(e.value)
  if damage == 'flipped':
    # Without verify, TensorFlow's error says where, not which file.
    with pytest.raises(tf.errors.DataLossError) as tf_error:
      _records(out, shuffle=False)
    assert 'corrupted record' in str(tf_error.value)
    assert shard.split('/')[-1] not in str(tf_error.value)
