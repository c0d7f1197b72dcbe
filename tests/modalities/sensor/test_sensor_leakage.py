"""What leakage means for sensor data, checked by the validation pipeline.

A leak is a recording in two splits, not equal values: two days of weather
can have equal values and are still two observations. Real preprocessing
runs (one per fixture, shared by the module's tests) are validated as
written and after records are moved into another split, as a run that
leaked them would have written them.
"""

import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest

import readback
import sensorgen
from pipelines import preprocess
from pipelines import validate
from transforms.modalities.sensor import checks as sensor_checks
from transforms.validation import dataset_checks

BASE = ['--modality', 'sensor', '--direct_running_mode', 'in_memory',
        '--direct_num_workers', '1']
CHANNELS = ['precipitation', 'temp_max', 'temp_min', 'wind']
# The values of a dry, calm day, which several days have exactly.
CALM = [0.0, 10.0, 2.8, 2.5]


def weather_frame(days: int = 60) -> pd.DataFrame:
  """Daily weather rows: date, four channels, the weather as the label.
  Every sixth day has the CALM values, with several labels."""
  rng = np.random.default_rng(11)
  df = pd.DataFrame({
      'date': pd.date_range('2012-01-01', periods=days,
                            freq='D').strftime('%Y-%m-%d'),
      'precipitation': rng.gamma(1.0, 3.0, days).round(1),
      'temp_max': rng.normal(12, 5, days).round(1),
      'temp_min': rng.normal(4, 4, days).round(1),
      'wind': rng.gamma(3.0, 1.2, days).round(1),
      'weather': np.array(['rain', 'sun', 'drizzle'])[np.arange(days) % 3]})
  df.loc[::6, CHANNELS] = CALM
  df.loc[::6, 'weather'] = np.array(['sun', 'drizzle'])[
      np.arange(len(df.loc[::6])) % 2]
  return df


def _checks(report):
  return {c['check']: c for c in report['checks']}


def _split_of(out, manifest):
  """{record id: split} of a published dataset."""
  return {i.decode(): split for split in manifest['splits']
          for i in readback.read_all(out, split).get('id', [])}


# ------------------------------------------------------- daily weather --


@pytest.fixture(scope='module')
def weather(tmp_path_factory):
  """The daily weather rows through a default run (rows, hash split) and
  the validation pipeline."""
  root = tmp_path_factory.mktemp('weather')
  df = weather_frame()
  df.to_csv(root / 'weather.csv', index=False)
  out = root / 'out'
  manifest = preprocess.run(['--input', str(root / 'weather.csv'),
                             '--output', str(out), '--timestamp_column',
                             'date', '--label_column', 'weather'] + BASE)
  return df, out, manifest, readback.validation_run(out)


def test_equal_weather_rows_in_two_splits_are_information(weather):
  df, out, manifest, (code, printed, report) = weather
  assert manifest['sensor']['mode'] == 'row'
  assert manifest['sensor']['split_by'] == 'hash'
  # The fixture does what it says: calm days in several splits, with
  # different labels.
  split_of = _split_of(out, manifest)
  calm = [f'weather.csv:{i}' for i in df.index[::6]]
  assert len({split_of[i] for i in calm}) >= 2
  assert len(set(df.loc[::6, 'weather'])) == 2
  assert code == validate.EXIT_SOUND, printed
  checks = _checks(report)
  info = checks['equal feature rows in two splits (distinct observations, '
                'not leakage)']
  assert info['status'] == 'info'
  assert info['detail'].startswith('1 feature rows (10 records) occur with '
                                   'equal values in more than one split')
  assert any(i in info['detail'] for i in calm)
  assert 'INFO equal feature rows in two splits' in printed
  leak = checks['no observation (entity, time and values) in two splits '
                '(leakage)']
  assert leak['status'] == 'pass'
  assert 'entity and time alone are not a leakage criterion' in (
      leak['detail'])
  # Equal values of two days with two labels are no label conflict, and
  # equal days in one split no duplicates.
  conflicts = checks['same content with different labels (label conflicts)']
  assert conflicts['status'] == 'pass'
  assert conflicts['detail'] == ('no two records with the same values, '
                                 'entity and time have different labels')
  dups = checks['exact duplicates inside a split']
  assert dups['status'] == 'pass'
  assert 'equal content of distinct observations, not copies' in (
      dups['detail'])
  assert 'no example content in two splits (leakage)' not in checks


def test_rows_mode_report_shows_sample_values_in_a_table(weather):
  _, out, _, (_, _, report) = weather
  page = (out / 'validation_report.html').read_text(encoding='utf-8')
  assert '<polyline' not in page and 'Sample windows' not in page
  section = page[page.index('<h2>Sample rows'):]
  section = section[:section.index('</table>')]
  assert re.findall(r'<th>([^<]*)</th>', section) == ['class', 'id'] + (
      CHANNELS)
  samples = report['splits']['train']['samples']
  shown = [(label, x) for label, items in samples.items() for x in items]
  assert len(shown) >= 6
  for label, x in shown:
    cells = ''.join(f'<td class="num">{v:.4g}</td>' for v in x['values'][0])
    assert f'<td>{label}</td><td>{x["id"]}</td>{cells}</tr>' in section


def test_a_time_split_that_the_records_do_not_follow_fails(weather,
                                                           tmp_path):
  # The hash-split rows under a manifest that claims a time split: every
  # split spans the 60 days.
  _, out, _, _ = weather
  edited = tmp_path / 'out'
  shutil.copytree(out, edited)
  manifest = json.loads((edited / 'manifest.json').read_text())
  manifest['sensor'].update(split_by='time', time_cutoffs=[
      '2012-02-01T00:00:00+00:00', '2012-02-15T00:00:00+00:00'])
  (edited / 'manifest.json').write_text(json.dumps(manifest))
  code, printed, report = readback.validation_run(edited)
  assert code == validate.EXIT_UNSOUND
  leak = _checks(report)['no time range in two splits (leakage)']
  assert leak['status'] == 'fail'
  assert re.search(r'validation record weather\.csv:\d+ starts at '
                   r'2012-01-\d\dT00:00:00\+00:00, not after train record '
                   r'weather\.csv:\d+ ends at 2012-02-\d\dT00:00:00\+00:00: '
                   'the time ranges of train and validation overlap',
                   leak['detail']), leak['detail']
  assert ('before the cut-off 2012-02-01T00:00:00+00:00 where validation '
          'begins') in leak['detail']
  assert 'FAILED no time range in two splits (leakage)' in printed


# ------------------------------------------------- windows, by entity --


@pytest.fixture(scope='module')
def entity_windows(tmp_path_factory):
  """Windows of 10 rows of 8 devices, split by entity."""
  root = tmp_path_factory.mktemp('entity_windows')
  sensorgen.frame(devices=8, rows_per_device=40, seed=2).to_csv(
      root / 'log.csv', index=False)
  out = root / 'out'
  manifest = preprocess.run(
      ['--input', str(root / 'log.csv'), '--output', str(out),
       '--timestamp_column', 'time', '--entity_column', 'device',
       '--window_length', '10', '--splits',
       'train=0.5,validation=0.25,test=0.25'] + BASE)
  return out, manifest, readback.validation_run(out)


def test_windows_split_by_entity_pass_and_keep_line_charts(entity_windows):
  out, manifest, (code, printed, report) = entity_windows
  assert manifest['sensor']['split_by'] == 'entity'
  assert code == validate.EXIT_SOUND, printed
  leak = _checks(report)['no recording (entity) in two splits (leakage)']
  assert leak == {'check': 'no recording (entity) in two splits (leakage)',
                  'status': 'pass', 'detail': "every entity's records are in "
                  'one split (--split_by entity)'}
  assert report['recordings']['recordings_in_splits'] == 0
  assert 'equal windows in two splits (distinct observations, not ' \
         'leakage)' in _checks(report)
  page = (out / 'validation_report.html').read_text(encoding='utf-8')
  assert 'Sample windows' in page and '<polyline' in page
  assert 'Sample rows' not in page


def test_an_entity_in_two_splits_fails_naming_it(entity_windows, tmp_path):
  out, manifest, _ = entity_windows
  leaked = tmp_path / 'out'
  shutil.copytree(out, leaked)
  train = readback.read_all(out, 'train')
  entity = sorted({e.decode() for e in train['entity']})[0]
  first = f'{entity}#0'
  moved = readback.move_records(
      leaked, 'train', 'test',
      lambda ex: ex.features.feature['id'].bytes_list.value[0].decode() ==
      first)
  assert len(moved) == 1
  code, printed, report = readback.validation_run(leaked)
  assert code == validate.EXIT_UNSOUND
  failed = [c['check'] for c in report['checks'] if c['status'] == 'fail']
  # Only the leak: the manifest was rewritten to match the moved record.
  assert failed == ['no recording (entity) in two splits (leakage)'], failed
  detail = _checks(report)[failed[0]]['detail']
  windows = manifest['sensor']['windows']['formed'] // 8
  assert detail == (
      f'1 entities ({windows} records) have records in more than one split, '
      "though --split_by entity keeps each entity's records in one; records "
      f'per split: {entity}: test 1, train {windows - 1}')
  assert report['recordings']['examples'] == [
      {'recording': entity, 'records': {'test': 1, 'train': windows - 1}}]
  assert f'FAILED no recording (entity) in two splits (leakage): {detail}' in (
      printed)


# --------------------------------------------------- windows, by time --


CUT = pd.Timestamp(sensorgen.START, tz='UTC') + pd.Timedelta(seconds=120)


@pytest.fixture(scope='module')
def time_windows(tmp_path_factory):
  """Windows of 10 rows of 2 devices, split at CUT (train, then test)."""
  root = tmp_path_factory.mktemp('time_windows')
  sensorgen.frame(devices=2, rows_per_device=200, seed=4).to_csv(
      root / 'log.csv', index=False)
  out = root / 'out'
  manifest = preprocess.run(
      ['--input', str(root / 'log.csv'), '--output', str(out),
       '--timestamp_column', 'time', '--entity_column', 'device',
       '--window_length', '10', '--split_by', 'time', '--time_cutoffs',
       CUT.isoformat()] + BASE)
  return out, manifest, readback.validation_run(out)


def test_windows_split_by_time_pass(time_windows):
  _, manifest, (code, printed, report) = time_windows
  assert list(manifest['splits']) == ['train', 'test']
  assert code == validate.EXIT_SOUND, printed
  leak = _checks(report)['no time range in two splits (leakage)']
  assert leak['status'] == 'pass'
  assert leak['detail'].startswith(
      "the splits' time ranges follow the cut-offs "
      f'({CUT.isoformat()}) in order and do not overlap: train '
      '2026-01-01T00:00:00+00:00 to 2026-01-01T00:01:59+00:00, test '
      '2026-01-01T00:02:00+00:00 to ')
  assert 'no recording (entity) in two splits (leakage)' not in (
      _checks(report))


def test_a_window_before_the_cutoff_in_test_fails_naming_it(time_windows,
                                                           tmp_path):
  out, _, _ = time_windows
  leaked = tmp_path / 'out'
  shutil.copytree(out, leaked)
  readback.move_records(
      leaked, 'train', 'test',
      lambda ex: ex.features.feature['id'].bytes_list.value[0] == b'dev01#0')
  code, printed, report = readback.validation_run(leaked)
  assert code == validate.EXIT_UNSOUND
  failed = [c['check'] for c in report['checks'] if c['status'] == 'fail']
  assert failed == ['no time range in two splits (leakage)'], failed
  detail = _checks(report)[failed[0]]['detail']
  assert detail == (
      'test record dev01#0 starts at 2026-01-01T00:00:00+00:00, not after '
      'train record dev00#110 ends at 2026-01-01T00:01:59+00:00: the time '
      'ranges of train and test overlap; test record dev01#0 starts at '
      '2026-01-01T00:00:00+00:00, before the cut-off '
      f'{CUT.isoformat()} where test begins')
  assert 'FAILED no time range in two splits (leakage)' in printed


# ------------------------------------------------- the rules, directly --


def _content(*groups):
  return dataset_checks.content_findings(groups)


def test_the_same_row_twice_in_two_splits_fails_with_a_hash_split():
  # One row of the input twice (same values, time and entity), its copies
  # split apart; and a row of another day with equal values.
  content = _content(
      ('h1', [('train', 'a.csv:3', True, 'sun', 'st@5..5'),
              ('test', 'a.csv:9', True, 'sun', 'st@5..5'),
              ('test', 'a.csv:12', True, 'rain', 'st@8..8')]))
  manifest = {'sensor': {'split_by': 'hash', 'mode': 'row'},
              'splits': {'train': {}, 'test': {}}}
  leak, info = sensor_checks.leakage_checks(manifest, {}, content, None)
  assert leak['status'] == 'fail'
  assert leak['detail'].startswith(
      '1 rows (2 records) are in more than one split with the same values, '
      'time and entity: the input holds the row more than once and its '
      'copies were split apart, e.g. test a.csv:9 vs train a.csv:3')
  assert info['status'] == 'info'
  assert content['label_conflicts'] == 0


def test_equal_rows_of_one_observation_with_two_labels_conflict():
  content = _content(
      ('h1', [('train', 'a.csv:3', True, 'sun', 'st@5..5'),
              ('train', 'a.csv:9', True, 'rain', 'st@5..5'),
              ('train', 'a.csv:12', True, 'drizzle', 'st@8..8')]))
  assert content['label_conflicts'] == 1
  assert content['label_conflict_examples'] == [{
      'content': 'h1', 'observation': 'st@5..5',
      'labels': {'rain': ['a.csv:9'], 'sun': ['a.csv:3']}}]
  assert content['duplicates'] == {'train': 1}
  assert content['equal_in_split'] == {'train': 2}


def test_time_ranges_against_the_cutoffs():
  def shard(first, last):
    return {'time_range': {'first': [first, f'r{first}'],
                           'last': [last, f'r{last}']}}
  manifest = {'sensor': {'split_by': 'time', 'mode': 'row',
                         'time_cutoffs': ['1970-01-01T00:00:00.000000100'
                                          '+00:00']},
              'splits': {'train': {}, 'test': {}}}
  ok = {'train': [shard(0, 50), shard(10, 99)], 'test': [shard(100, 150)]}
  leak, _ = sensor_checks.leakage_checks(manifest, ok, _content(), None)
  assert leak['status'] == 'pass', leak
  late = {'train': [shard(0, 50), shard(10, 100)], 'test': [shard(100, 150)]}
  leak, _ = sensor_checks.leakage_checks(manifest, late, _content(), None)
  assert leak['status'] == 'fail'
  assert 'test record r100 starts at 1970-01-01T00:00:00.000000100+00:00, ' \
         'not after train record r100 ends at' in leak['detail']
  assert 'train record r100 ends at 1970-01-01T00:00:00.000000100+00:00, ' \
         'not before the cut-off' in leak['detail']
