"""Large sensor CSV files are parsed in byte ranges by local worker
processes, with the same records, dead letters and row ids as when one
thread reads them whole.

Real runs on the DirectRunner with a tiny range size, on files with what
exports have: bad cells, a row with a field too many, empty lines, one
device out of time order across two files, and in one file a quoted label
holding a newline in the middle (the ranges then stop there and the rest
is read in one piece).
"""


import pytest

import range_runs
import readback
import sensorgen
from transforms.runtime import processes
from transforms.modalities.sensor import ranges as sensor_ranges
from transforms.sources import table_ranges

LOCAL = ['--direct_running_mode', 'in_memory', '--direct_num_workers', '1']
SENSOR = ['--modality', 'sensor', '--timestamp_column', 'time',
          '--entity_column', 'device', '--window_length', '20',
          '--window_stride', '10', '--chunk_rows', '1000',
          '--max_bad_fraction', '0.5',
          '--splits', 'train=0.6,validation=0.2,test=0.2']


def _input(folder, quoted: bool):
  df = sensorgen.frame(devices=6, rows_per_device=1100, seed=11)
  ordered = df.sort_values('time', kind='stable')
  folder.mkdir()
  first = ordered[ordered['device'] <= 'dev02'].to_csv(index=False)
  second = ordered[ordered['device'] > 'dev02'].sample(
      frac=1.0, random_state=3).to_csv(index=False)
  lines = second.splitlines()
  cells = lines[100].split(',')
  cells[2] = 'not-a-number'  # channel ch0
  lines[100] = ','.join(cells)
  lines[200] += ',extra'
  lines[300] = ''
  if quoted:
    lines[2000] = lines[2000].rsplit(',', 1)[0] + ',"walk\nslowly"'
  (folder / 'a.csv').write_text(first)
  (folder / 'b.csv').write_text('\n'.join(lines) + '\n')
  return folder


@pytest.mark.parametrize('quoted', [False, True], ids=['plain', 'quoted'])
def test_ranges_give_the_records_and_dead_letters_of_one_piece(
    tmp_path, monkeypatch, quoted):
  src = _input(tmp_path / 'logs', quoted)
  monkeypatch.setattr(table_ranges, 'RANGE_BYTES', 4096)
  ranged, whole = range_runs.run_with_and_without_workers(
      src, tmp_path, SENSOR + LOCAL)
  # Both files, in both passes, were cut; none without workers.
  assert ranged[1] == 4 and whole[1] == 0
  assert (2, (sensor_ranges.__name__,)) in processes._POOLS  # pylint: disable=protected-access
  assert ranged[0]['fingerprint'] == whole[0]['fingerprint']
  assert ranged[0]['totals'] == whole[0]['totals']
  assert ranged[2] == whole[2]
  # What the fixture is about: the bad rows, by their row in the file.
  reasons = {i: r for i, r, _ in ranged[2]}
  assert any(i.startswith('b.csv:') and 'fields' in r
             for i, r in reasons.items()), ranged[2]
  assert any('not-a-number' in r for r in reasons.values()), ranged[2]
  readback.assert_valid(tmp_path / 'out_2')


def test_without_worker_processes_the_file_is_read_in_one_piece(
    tmp_path, monkeypatch, caplog):
  """Workers that cannot start: a warning, and the same records."""
  src = _input(tmp_path / 'logs', quoted=False)
  monkeypatch.setattr(table_ranges, 'RANGE_BYTES', 4096)
  range_runs.assert_same_without_workers(src, tmp_path, monkeypatch, caplog,
                                         SENSOR + LOCAL, 'parse CSV ranges')
