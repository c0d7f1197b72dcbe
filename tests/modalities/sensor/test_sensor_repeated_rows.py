"""A table of daily rows where the input holds some rows twice (an export
appended to itself): split by entity and time (--split_by hash), each
repeated row is one observation, stored once, and counted as dropped; and
validation passes."""

import csv

import numpy as np
import pytest

import readback
from pipelines import preprocess
from pipelines import reader

LOCAL = ['--direct_running_mode', 'in_memory', '--direct_num_workers', '1']


@pytest.fixture(scope='module')
def published(tmp_path_factory):
  root = tmp_path_factory.mktemp('daily')
  rng = np.random.default_rng(5)
  rows = []
  for day in range(60):
    rows.append([f'2024-03-{1 + day % 30:02d}T00:00:00Z' if day < 30 else
                 f'2024-04-{1 + day % 30:02d}T00:00:00Z',
                 round(float(rng.gamma(1.0, 2.0)), 1),
                 round(float(rng.normal(15, 5)), 1),
                 ('rain', 'sun', 'fog')[day % 3]])
  # The last twelve days again, at the end of the file.
  repeated = rows[-12:]
  with open(root / 'weather.csv', 'w', newline='', encoding='utf-8') as f:
    writer = csv.writer(f)
    writer.writerow(['timestamp', 'precipitation', 'temp_max', 'label'])
    writer.writerows(rows + repeated)
  out = tmp_path_factory.mktemp('out') / 'ds'
  assert preprocess.main(['--modality', 'sensor', '--input',
                          str(root / 'weather.csv'), '--output', str(out),
                          *LOCAL]) == 0
  return out, {r[0] for r in repeated}


def test_each_repeated_row_is_stored_once(published):
  out, repeated = published
  manifest = reader.load_manifest(str(out))
  assert manifest['sensor']['split_by'] == 'hash'
  assert manifest['totals']['examples'] == 60
  assert manifest['totals']['inputs'] == 72
  assert sum(s['duplicates_dropped'] for s in
             manifest['splits'].values()) == 12
  assert manifest['sensor']['time']['total']['duplicates_dropped'] == 12
  # The file is not in time order after its first 60 rows: the repeats go
  # back in time, once.
  assert manifest['sensor']['time']['total']['out_of_order_rows'] == 1
  splits_of_time = {}
  for split in manifest['splits']:
    for t in readback.read_all(out, split).get('time', []):
      splits_of_time.setdefault(int(t), set()).add(split)
  assert len(splits_of_time) == 60
  assert all(len(s) == 1 for s in splits_of_time.values()), splits_of_time
  assert sum(len(s) for s in splits_of_time.values()) == 60
  times = [int(t) for split in manifest['splits']
           for t in readback.read_all(out, split).get('time', [])]
  assert len(times) == len(set(times)) == 60
  assert len(repeated) == 12


def test_validation_passes(published):
  out, _ = published
  readback.assert_valid(out)
