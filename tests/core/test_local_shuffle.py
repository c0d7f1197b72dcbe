"""On the DirectRunner the shuffle's records wait on disk (--local_shuffle).

The local runner holds every grouping in memory until it is read, so the
text and sensor records wait in files in the run's folder while only
references to them are grouped (core/shuffle.py). These runs check that
the records are the same with the records on disk or in memory, that the
files are really used and then removed (from a published run and from a
run the quality gate refused), and that the option is refused where it
cannot work. Real pipelines on the DirectRunner.
"""

import os

import pandas as pd
import pytest

import readback
import sensorgen
from pipelines import outcome
from pipelines import preprocess
from transforms.core import errors
from transforms.core import shuffle
from transforms.output import manifest as manifest_lib

LOCAL = ['--direct_running_mode', 'in_memory', '--direct_num_workers', '1']
SENSOR = ['--modality', 'sensor', '--timestamp_column', 'time',
          '--entity_column', 'device', '--window_length', '20',
          '--window_stride', '10', '--chunk_rows', '1000',
          '--splits', 'train=0.6,validation=0.2,test=0.2']


class _CountReads:
  """Counts the groups read back from spill files during a run (the
  in-memory runner runs the DoFns in this process)."""

  def __init__(self):
    self.groups = 0
    self._original = shuffle.read_spilled

  def __enter__(self):
    def counting(folder, ref):
      self.groups += 1
      return self._original(folder, ref)
    shuffle.read_spilled = counting
    return self

  def __exit__(self, *exc):
    shuffle.read_spilled = self._original


def _leftovers(out):
  """Paths of shuffle folders anywhere under `out`."""
  return [os.path.join(root, d) for root, dirs, _ in os.walk(out)
          for d in dirs if d == manifest_lib.SHUFFLE_TEMP]


def _sensor_input(folder):
  """Two files, one device in both and out of time order: windows made
  while reading, in (device, chunk) groups and across chunk boundaries,
  so each of the three branches gives records."""
  df = sensorgen.frame(devices=6, rows_per_device=1100, seed=7)
  ordered = df.sort_values('time', kind='stable')
  first = ordered[ordered['device'] <= 'dev02']
  second = ordered[ordered['device'] > 'dev02']
  moved = second['device'] == 'dev05'
  folder.mkdir()
  pd.concat([first, second[moved].iloc[:90]]).sort_values(
      'time', kind='stable').to_csv(folder / 'a.csv', index=False)
  later = pd.concat([second[~moved], second[moved].iloc[90:]])
  later.sample(frac=1.0, random_state=1).to_csv(folder / 'b.csv',
                                                index=False)
  return folder


def _run_both(src, tmp_path, argv):
  """{mode: (manifest, groups read back from disk, output)}."""
  results = {}
  for mode in ('disk', 'memory'):
    out = tmp_path / f'out_{mode}'
    with _CountReads() as reads:
      manifest = preprocess.run(['--input', str(src), '--output', str(out),
                                 '--local_shuffle', mode] + argv + LOCAL)
    results[mode] = (manifest, reads.groups, out)
  return results


def _assert_same_records(results):
  """The same records either way; files used only with disk, and none
  left in either output; the disk run's output passes validation."""
  disk, memory = results['disk'][0], results['memory'][0]
  assert disk['fingerprint'] == memory['fingerprint']
  for split, data in memory['splits'].items():
    assert disk['splits'][split]['fingerprint'] == data['fingerprint']
    assert disk['splits'][split]['records'] == data['records']
  assert disk['totals']['records'] == memory['totals']['records'] > 0
  assert disk['config']['local_shuffle'] is True
  assert memory['config']['local_shuffle'] is False
  assert disk['config_hash'] == memory['config_hash']
  assert results['disk'][1] > 0
  assert results['memory'][1] == 0
  for mode in ('disk', 'memory'):
    assert not _leftovers(results[mode][2])
  readback.assert_valid(results['disk'][2])


def test_sensor_records_are_the_same_on_disk_or_in_memory(tmp_path):
  src = _sensor_input(tmp_path / 'logs')
  results = _run_both(src, tmp_path, SENSOR)
  _assert_same_records(results)
  manifest = results['disk'][0]
  # All three ways of forming windows were taken.
  assert 0 < manifest['sensor']['entities_in_time_order'] < 6


def test_text_records_are_the_same_on_disk_or_in_memory(tmp_path):
  src = tmp_path / 'quotes.csv'
  rows = []
  for i in range(300):
    label = ('wisdom', 'humour', 'love')[i % 3]
    # Repeated quotations, as real collections have them.
    rows.append({'text': f'quotation {i % 97} about {label}, take {i % 7}',
                 'label': label})
  pd.DataFrame(rows).to_csv(src, index=False)
  results = _run_both(src, tmp_path, [
      '--modality', 'text', '--text_column', 'text', '--max_tokens', '8',
      '--rebalance', 'oversample'])
  _assert_same_records(results)


def test_a_refused_run_keeps_no_shuffle_files(tmp_path):
  src = _sensor_input(tmp_path / 'logs')
  with open(src / 'a.csv', 'a', encoding='utf-8') as f:
    for i in range(20):
      f.write(f'not a time {i},dev00,1,2,3,run\n')
  out = tmp_path / 'out'
  with _CountReads() as reads:
    with pytest.raises(errors.DataQualityError):
      preprocess.run(['--input', str(src), '--output', str(out),
                      '--max_bad_fraction', '0'] + SENSOR + LOCAL)
  assert reads.groups > 0  # the records had waited on disk
  refused = [d for d in os.listdir(out) if d.startswith('run-')]
  assert len(refused) == 1
  assert os.path.exists(out / refused[0] / manifest_lib.FAILURE)
  assert not _leftovers(out)


@pytest.mark.parametrize('extra,expected', [
    (['--local_shuffle', 'ram'],
     '--local_shuffle must be one of auto, disk, memory'),
    (['--local_shuffle', 'disk', '--output', 'gs://some-bucket/out'],
     '--local_shuffle disk needs the directrunner and an --output on the '
     'local file system'),
])
def test_local_shuffle_refusals(tmp_path, capsys, extra, expected):
  src = _sensor_input(tmp_path / 'logs')
  argv = ['--input', str(src), '--output', str(tmp_path / 'out')]
  assert preprocess.main(argv + SENSOR + LOCAL + extra) == (
      outcome.EXIT_USAGE)
  err = capsys.readouterr().err.strip()
  assert err.count('\n') == 0 and 'Traceback' not in err, err
  assert expected in err.lower()
  assert not (tmp_path / 'out').exists()
