"""The validation side of sensor time (issue 35): window time spans against
their entity's sampling interval and max gap, the order of each entity's
windows and rows gathered from every shard and split, the row and window
arithmetic with duplicates and gaps, the time shape in the report, and
manifests written before any of it.

The check functions are tested on hand-built manifests and record tuples;
a real run (one preprocessing run shared by the module's tests) is
validated as published, with an older manifest, and with a manifest whose
time section a real window breaks.
"""

import json
import re
import shutil

import pytest

import readback
import sensorgen
from pipelines import preprocess
from pipelines import validate
from transforms import modalities
from transforms.modalities.sensor import checks
from transforms.modalities.sensor import report_sections
from transforms.modalities.sensor import series_checks
from transforms.validation import html_report

SECOND = 10**9
T0 = sensorgen.START
SPAN = 'no window spans more time than its samples and one gap allow'
ENTITIES = "every entity read back is in the manifest's time section"
TWICE = 'no window stored twice'
STRIDE = 'windows of one entity overlap no more than the stride allows'
STARTS = 'window start times increase with their first observation'
ROWS_ONCE = 'no observation (entity and time) twice in a split'


def _shape(median=SECOND, max_gap=3 * SECOND, gaps=0, longest=0,
           duplicates=0, conflicting=0):
  """A sensor.time.entities entry."""
  return {'rows': 100 + duplicates + conflicting, 'observations': 100,
          'median_interval_ns': median, 'max_gap_ns': max_gap,
          'gaps': gaps, 'longest_gap_ns': longest, 'segments': gaps + 1,
          'duplicates_dropped': duplicates, 'conflicting_rows': conflicting,
          'out_of_order_rows': 0}


def _manifest(mode='window', entities=None, length=4, stride=2,
              oversample=()):
  """A manifest's sensor section and splits; sensor.time lists
  `entities` ({entity: shape}), and is absent when they are None (a
  manifest written before it)."""
  window = mode == 'window'
  sensor = {'mode': mode, 'split_by': 'hash',
            'window_length': length if window else 0,
            'window_stride': stride if window else 0}
  if entities is not None:
    sensor['time'] = {'entities': entities, 'total': {}}
  return {'modality': 'sensor', 'sensor': sensor, 'splits': {
      name: {'rebalance': 'oversample' if name in oversample else 'none'}
      for name in ('train', 'test')}}


def _windows(starts, split='train', length=4, interval=SECOND, shift=0):
  """(split, start, start time, end time) of windows of observations
  `interval` apart (after `shift`) starting at each of `starts`."""
  return [(split, s, T0 + shift + s * interval,
           T0 + shift + (s + length - 1) * interval) for s in starts]


def _rows(times, split='train'):
  return [(split, None, T0 + t, T0 + t) for t in times]


def _series(manifest, points):
  """merge_series_findings of series_findings of {entity: points}."""
  return checks.merge_series_findings(
      checks.series_findings(entity, list(p), manifest)
      for entity, p in points.items())


def _checks(manifest, points):
  """(findings, {check name: entry}) of {entity: points}."""
  series = _series(manifest, points)
  return series, {c['check']: c
                  for c in checks.series_checks(manifest, series)}


# ------------------------------------------------------------ spans --


def test_a_window_longer_than_its_samples_and_one_gap_fails():
  shape = _shape(median=15_625_000, max_gap=46_875_000)
  manifest = _manifest(entities={'dev': shape}, length=128, stride=64)
  # Observations 15.625 ms apart, but 10 s lost inside the second window.
  fine = (T0, T0 + 127 * 15_625_000)
  points = [('train', 0, *fine),
            ('test', 64, T0 + 64 * 15_625_000, T0 + 11_980_000_000)]
  series, found = _checks(manifest, {'dev': points})
  assert series['found']['too_long'] == 1
  check = found[SPAN]
  assert check['status'] == 'fail'
  assert check['detail'] == (
      "1 windows span more time than 128 samples at their entity's "
      'interval and one max gap: dev#64 (test): the window spans 10.98 s, '
      'more than the 2.047 s that 128 samples at 15.62 ms and one gap of '
      '46.88 ms allow')
  assert series['examples']['too_long'] == [{
      'entity': 'dev', 'at': 64, 'id': 'dev#64', 'split': 'test',
      'span_ns': 11_980_000_000 - 64 * 15_625_000,
      'bound_ns': 128 * 15_625_000 + 46_875_000,
      'median_interval_ns': 15_625_000, 'max_gap_ns': 46_875_000}]


def test_the_span_message_shows_the_span_above_the_bound():
  shape = _shape(median=15_625_000, max_gap=46_875_000)
  assert series_checks.span_problem(11_980_000_000, shape, 128) == (
      'the window spans 11.98 s, more than the 2.047 s that 128 samples at '
      '15.62 ms and one gap of 46.88 ms allow')
  bound = 128 * 15_625_000 + 46_875_000
  assert series_checks.span_problem(bound, shape, 128) is None
  # One ns over the bound: enough digits to tell them apart.
  assert series_checks.span_problem(bound + 1, shape, 128) == (
      'the window spans 2.046875001 s, more than the 2.046875 s that 128 '
      'samples at 15.62 ms and one gap of 46.88 ms allow')
  # --max_gap none (or no sampling interval): no bound.
  assert series_checks.span_problem(10**15, _shape(max_gap=None), 128) is None
  assert series_checks.span_problem(10**15, _shape(median=None), 128) is None


def test_an_entity_without_a_max_gap_is_not_bounded():
  manifest = _manifest(entities={'a': _shape(max_gap=None),
                                 'b': _shape()})
  series, found = _checks(manifest, {
      'a': _windows([0, 2], interval=3600 * SECOND),
      'b': _windows([0, 2])})
  assert series['unbounded_entities'] == 1
  assert found[SPAN]['status'] == 'pass'
  assert found[SPAN]['detail'] == (
      "no window spans more than 4 samples at its entity's interval (the "
      'median, or the --resample period) and one max gap; 1 entities have '
      'no max gap (--max_gap none) or no sampling interval, and their '
      'windows no such bound')


def test_an_entity_missing_from_the_time_section_fails():
  manifest = _manifest(entities={'a': _shape()})
  _, found = _checks(manifest, {'a': _windows([0, 2]),
                                'ghost': _windows([0, 2, 4])})
  check = found[ENTITIES]
  assert check['status'] == 'fail'
  assert check['detail'] == (
      "1 entities of the records are not in the manifest's "
      'sensor.time.entities, which lists every entity the run read: ghost '
      '(3 records)')
  # Its windows are not measured against a bound it does not have.
  assert found[SPAN]['status'] == 'pass'


# ------------------------------------------------------------ order --


def test_a_correct_series_passes_every_check():
  # Length 3, stride 5: after the gap (observations 4 on, an hour later)
  # the next window starts 4 observations after the last one, fewer than
  # the stride but after that window ended.
  manifest = _manifest(entities={'a': _shape(), 'b': _shape(), '': _shape()},
                       length=3, stride=5)
  points = {
      'a': _windows([0, 5, 10], length=3) + _windows([15], 'test', 3),
      'b': (_windows([0], length=3) +
            _windows([4, 9], 'test', length=3, shift=3600 * SECOND -
                     4 * SECOND)),
      '': _windows([0], length=3)}
  series, found = _checks(manifest, points)
  assert series['entities'] == 3 and series['records'] == 8
  assert not any(series['found'].values()), series['found']
  assert list(found) == [ENTITIES, SPAN, TWICE, STRIDE, STARTS]
  assert all(c['status'] == 'pass' for c in found.values()), found
  assert found[TWICE]['detail'] == (
      'each of the 8 windows read back starts at another observation of '
      'its entity')
  assert found[STRIDE]['detail'] == (
      'consecutive windows of each entity start 3 or more observations '
      'apart (windows start every 5 observations of a segment, and after a '
      'gap once the window before has ended (3 observations))')
  assert found[ENTITIES]['detail'] == (
      'the 3 entities of the records are all in sensor.time.entities')


def test_a_window_stored_twice_fails():
  manifest = _manifest(entities={'a': _shape()})
  # The window at 2 in two splits, the one at 4 twice in train.
  points = _windows([0, 2, 4]) + _windows([2], 'test') + _windows([4])
  series, found = _checks(manifest, {'a': points})
  assert series['found']['stored_twice'] == 2
  check = found[TWICE]
  assert check['status'] == 'fail'
  assert check['detail'] == ('2 windows are stored more than once: a#2 '
                             '(test 1, train 1); a#4 (train 2)')
  # Copies stay unremarked elsewhere: not closer than the stride, starts
  # increasing.
  assert found[STRIDE]['status'] == found[STARTS]['status'] == 'pass'


def test_copies_in_an_oversampled_split_are_no_window_stored_twice():
  manifest = _manifest(entities={'a': _shape()}, oversample=('train',))
  points = _windows([0, 2, 4]) + _windows([4, 4])
  _, found = _checks(manifest, {'a': points})
  assert found[TWICE]['status'] == 'pass'
  assert found[TWICE]['detail'] == (
      'each of the 5 windows read back starts at another observation of '
      'its entity (copies in train, which --rebalance oversample copied '
      'records in, aside)')
  # A copy in another split is still a window stored twice.
  _, found = _checks(manifest, {'a': points + _windows([2], 'test')})
  assert found[TWICE]['status'] == 'fail'
  assert 'a#2 (test 1, train 1)' in found[TWICE]['detail']


def test_windows_closer_than_the_stride_fail():
  manifest = _manifest(entities={'a': _shape()}, length=4, stride=2)
  _, found = _checks(manifest, {'a': _windows([0, 1, 3, 5, 6])})
  check = found[STRIDE]
  assert check['status'] == 'fail'
  assert check['detail'] == (
      '2 pairs of consecutive windows of one entity start fewer than 2 '
      'observations apart, so they overlap more than the stride allows '
      '(windows start every 2 observations of a segment, and after a gap '
      'once the window before has ended (4 observations)): a#0 and a#1 (1 '
      'apart); a#5 and a#6 (1 apart)')


def test_start_times_that_do_not_increase_fail():
  manifest = _manifest(entities={'a': _shape(), 'b': _shape()})
  # a#4 starts before a#2; b#2 at the time of b#0.
  a = _windows([0, 2]) + _windows([4], shift=-10 * SECOND)
  b = _windows([0]) + _windows([2], shift=-2 * SECOND)
  series, found = _checks(manifest, {'a': a, 'b': b})
  assert series['found']['earlier_start'] == 1
  assert series['found']['same_start'] == 1
  check = found[STARTS]
  assert check['status'] == 'fail'
  assert check['detail'] == (
      '2 windows start no later than the window of their entity before '
      'them: a#4 starts at 2025-12-31T23:59:54+00:00, not after a#2 at '
      '2026-01-01T00:00:02+00:00; b#2 starts at 2026-01-01T00:00:00+00:00, '
      'not after b#0 at 2026-01-01T00:00:00+00:00')


def test_repeated_start_times_only_inform_under_an_older_manifest():
  # Before sensor.time, rows the input repeated were kept: two windows
  # could start at one time. Earlier starts still fail.
  manifest = _manifest(entities=None)
  b = _windows([0]) + _windows([2], shift=-2 * SECOND)
  _, found = _checks(manifest, {'b': b})
  check = found[STARTS]
  assert check['status'] == 'info'
  assert check['detail'].startswith(
      '1 windows start at the time of the window before them, as the input '
      'repeats times; the manifest has no sensor.time: it was written '
      'before preprocessing kept one row per entity and time')
  a = _windows([0, 2]) + _windows([4], shift=-10 * SECOND)
  _, found = _checks(manifest, {'a': a, 'b': b})
  assert found[STARTS]['status'] == 'fail'


# ------------------------------------------------------------- rows --


def test_a_row_observation_twice_in_a_split_fails():
  manifest = _manifest('row', entities={'st': _shape(), '': _shape()})
  points = {'st': _rows([0, SECOND, SECOND, 2 * SECOND]),
            '': _rows([5 * SECOND]) + _rows([5 * SECOND])}
  series, found = _checks(manifest, points)
  assert list(found) == [ENTITIES, ROWS_ONCE]
  assert series['found']['repeated_observation'] == 2
  check = found[ROWS_ONCE]
  assert check['status'] == 'fail'
  assert check['detail'] == (
      '2 observations (an entity at one time) are in a split more than '
      'once, though preprocessing keeps one row per entity and time (and '
      "dead-letters rows that disagree): '' (no entity column) at "
      '2026-01-01T00:00:05+00:00: 2 records in train; st at '
      '2026-01-01T00:00:01+00:00: 2 records in train')


def test_one_time_in_two_splits_is_not_a_repeat_here():
  # The leakage check's business (--split_by hash), not this one's.
  manifest = _manifest('row', entities={'st': _shape()})
  _, found = _checks(manifest, {'st': _rows([0, SECOND]) +
                                _rows([SECOND], 'test')})
  assert found[ROWS_ONCE]['status'] == 'pass'
  assert found[ROWS_ONCE]['detail'] == (
      'no entity has two records of one time in a split')


def test_repeated_rows_in_an_oversampled_split_or_an_older_manifest():
  points = {'st': _rows([0, SECOND, SECOND])}
  _, found = _checks(_manifest('row', entities={'st': _shape()},
                               oversample=('train',)), points)
  assert found[ROWS_ONCE]['status'] == 'pass'
  assert found[ROWS_ONCE]['detail'].endswith(
      '(train aside: --rebalance oversample copied records there)')
  _, found = _checks(_manifest('row', entities=None), points)
  assert found[ROWS_ONCE]['status'] == 'info'
  assert found[ROWS_ONCE]['detail'] == (
      '1 observations (an entity at one time) are in a split more than '
      'once; the manifest has no sensor.time: it was written before '
      'preprocessing kept one row per entity and time, when rows the input '
      'repeats were kept: st at 2026-01-01T00:00:01+00:00: 2 records in '
      'train')


# ------------------------------------------------ older manifests --


def test_an_older_manifest_says_not_recorded_and_passes():
  manifest = _manifest(entities=None)
  series, found = _checks(manifest, {'a': _windows([0, 2, 4]),
                                     'b': _windows([0, 2])})
  assert all(c['status'] == 'pass' for c in found.values()), found
  not_recorded = ('not recorded: the manifest has no sensor.time (it was '
                  'written before preprocessing recorded sampling '
                  'intervals and gaps)')
  assert found[ENTITIES]['detail'] == found[SPAN]['detail'] == not_recorded
  assert series['found']['unknown_entity'] == 0
  assert checks.report_summary(manifest) == {'time': None}


def test_rows_add_up_with_duplicates_dropped():
  def manifest(splits, dead_total, time=None):
    m = {'modality': 'sensor', 'sensor': {'mode': 'row'}, 'splits': splits,
         'totals': {'inputs': sum(s['inputs'] for s in splits.values()),
                    'dead_lettered': dead_total, 'examples': 0}}
    if time is not None:
      m['sensor']['time'] = time
    return m
  time = {'entities': {}, 'total': {'conflicting_rows': 2}}
  splits = {'train': {'inputs': 100, 'rows_used': 80, 'rows_dropped': 5,
                      'duplicates_dropped': 10, 'dead_lettered': 5},
            'test': {'inputs': 20, 'rows_used': 18, 'rows_dropped': 0,
                     'duplicates_dropped': 2, 'dead_lettered': 0}}
  [rows] = [c for c in checks.dataset_checks(manifest(splits, 5, time), {})
            if c['check'].startswith('rows read')]
  assert rows == {
      'check': 'rows read = rows used + dropped + dead letters',
      'status': 'pass',
      'detail': '120 rows read, 98 used, 5 dropped for missing values, 12 '
                'duplicates dropped, 5 dead-lettered (2 of them conflicting '
                'rows at one time)'}
  # Duplicates not counted where they were dropped: the rows do not add up.
  uncounted = {**splits, 'test': dict(splits['test'], duplicates_dropped=0)}
  [rows] = checks.dataset_checks(manifest(uncounted, 5, time), {})
  assert rows['status'] == 'fail'
  # A manifest from before: no duplicates_dropped, no sensor.time.
  for split in splits.values():
    split['rows_used'] += split.pop('duplicates_dropped')
  [rows] = checks.dataset_checks(manifest(splits, 5), {})
  assert rows['status'] == 'pass'
  assert rows['detail'] == (
      '120 rows read, 110 used, 5 dropped for missing values, duplicates '
      'dropped: not recorded, 5 dead-lettered')


def test_windows_formed_names_windows_lost_to_gaps_and_too_long():
  windows = {'expected': 40, 'formed': 40, 'crossing_time_cutoff': 2,
             'lost_to_gaps': 7, 'too_long': 1}
  manifest = {'sensor': {'mode': 'window', 'windows': windows},
              'splits': {'train': {'inputs': 10, 'rows_used': 10,
                                   'rows_dropped': 0, 'dead_lettered': 0}},
              'totals': {'inputs': 10, 'dead_lettered': 0, 'examples': 38}}
  _, formed = checks.dataset_checks(manifest, {})
  assert formed == {
      'check': 'every window of every entity was formed', 'status': 'pass',
      'detail': "40 windows follow from the entities' observations (lost to "
                'gaps: 7, too long: 1); 40 formed, 2 crossed a time '
                'cut-off, 38 kept'}
  del windows['lost_to_gaps'], windows['too_long']
  windows['formed'] = 39
  _, formed = checks.dataset_checks(manifest, {})
  assert formed['status'] == 'fail'
  assert formed['detail'].startswith(
      "40 windows follow from the entities' observations (lost to gaps: "
      'not recorded, too long: not recorded); 39 formed')


# ------------------------------------------------ merging, records --


def test_findings_merge_in_any_order_and_keep_a_few_examples():
  manifest = _manifest(entities={f'e{i:02d}': _shape() for i in range(30)})
  parts = [checks.series_findings(f'e{i:02d}', _windows([0, 0]), manifest)
           for i in range(30)]
  one = checks.merge_series_findings(parts)
  # Merged in pieces and in reverse, as a combiner may.
  other = checks.merge_series_findings([
      checks.merge_series_findings(parts[15:][::-1]),
      checks.merge_series_findings(parts[:15])])
  assert one == other
  assert one['found']['stored_twice'] == 30
  assert one['entities'] == 30 and one['records'] == 60
  listed = one['examples']['stored_twice']
  assert len(listed) == series_checks.MAX_SERIES_EXAMPLES == 20
  assert [x['id'] for x in listed] == [f'e{i:02d}#0' for i in range(20)]
  assert checks.merge_series_findings([]) == _series(manifest, {})


def _sensor_record_manifest(mode):
  spec = {'values': {'dtype': 'float32', 'shape': [2]}}
  return {'modality': 'sensor', 'feature_spec': spec,
          'sensor': {'channels': ['a', 'b'], 'bucketize': 0, 'mode': mode}}


def _check_values(manifest, values, ex_id):
  out = {'id': ex_id, 'observation': '', 'time_range': None,
         'recording': None, 'series': None}
  modalities.of_manifest(manifest).check_values(values, manifest, out, None)
  return out


def test_each_record_names_its_place_in_its_series():
  manifest = _sensor_record_manifest('window')
  window = {'values': [0.5, 1.0], 'entity': [b'dev#1'],
            'start_time': [T0], 'end_time': [T0 + SECOND]}
  out = _check_values(manifest, window, 'dev#1#128')
  assert out['series'] == ('dev#1', 128, T0, T0 + SECOND)
  row = {'values': [0.5, 1.0], 'time': [T0]}
  out = _check_values(_sensor_record_manifest('row'), row, 'log.csv:3')
  assert out['series'] == ('', None, T0, T0)


@pytest.mark.parametrize('ex_id', ['dev', 'dev#', 'dev#-1', 'dev#1.5',
                                   'dev#²'])
def test_a_window_id_without_its_first_observation_is_refused(ex_id):
  window = {'values': [0.5, 1.0], 'start_time': [T0], 'end_time': [T0]}
  with pytest.raises(ValueError, match=re.escape(
      f'window id {ex_id!r} does not end in # and the index of its first '
      'observation')):
    _check_values(_sensor_record_manifest('window'), window, ex_id)


# ----------------------------------------------------------- report --


def test_the_report_shows_the_time_shape_with_the_most_gaps_first():
  entities = {f'dev{i:02d}': _shape(gaps=i % 4, longest=i * SECOND)
              for i in range(12)}
  entities['<b>&'] = _shape(gaps=9, longest=90 * SECOND, duplicates=3,
                            max_gap=None)
  manifest = _manifest(entities=entities)
  manifest['sensor']['time']['total'] = {
      'rows': 1303, 'observations': 1300, 'gaps': 27,
      'longest_gap_ns': 90 * SECOND, 'segments': 40,
      'duplicates_dropped': 3, 'conflicting_rows': 0,
      'out_of_order_rows': 0,
      'windows': {'without_gaps': 500, 'in_segments': 480, 'too_long': 2,
                  'formed': 478}}
  [time] = checks.report_summary(manifest).values()
  assert time['entities'] == 13
  assert time['total'] == manifest['sensor']['time']['total']
  most = time['most_gaps']
  assert len(most) == report_sections.MAX_GAP_ROWS == 10
  # Most gaps first, then the longest gap.
  assert [x['entity'] for x in most] == [
      '<b>&', 'dev11', 'dev07', 'dev03', 'dev10', 'dev06', 'dev02', 'dev09',
      'dev05', 'dev01']
  assert most[0] == {'entity': '<b>&', 'median_interval_ns': SECOND,
                     'max_gap_ns': None, 'gaps': 9,
                     'longest_gap_ns': 90 * SECOND, 'segments': 10,
                     'duplicates_dropped': 3, 'conflicting_rows': 0}
  report = {'verdict': 'pass', 'dataset': 'd', 'modality': 'sensor',
            'run_id': 'r', 'checks': [], 'shards': [], 'time': time,
            'splits': {'train': {'records': 0, 'class_counts': {},
                                 'samples': {}}}}
  page = html_report.render(report)
  section = page[page.index('<h2>Time shape'):]
  assert section.startswith('<h2>Time shape (13 entities, from the '
                            'manifest)</h2>')
  assert ('<td class="num">1,303</td><td class="num">1,300</td>'
          '<td class="num">27</td><td class="num">1.5 min</td>') in section
  assert '<th>formed</th>' in section and '<td class="num">478</td>' in (
      section)
  assert 'Entities with the most gaps (10 of 13)' in section
  assert '<b>&' not in page
  assert ('<tr><td>&lt;b&gt;&amp;</td><td class="num">1 s</td>'
          '<td class="num">none</td><td class="num">9</td>'
          '<td class="num">1.5 min</td><td class="num">10</td>'
          '<td class="num">3</td><td class="num">0</td></tr>') in section
  assert section.count('<tr><td>') == 10


def test_the_report_says_when_the_time_shape_is_not_recorded():
  report = {'verdict': 'pass', 'dataset': 'd', 'modality': 'sensor',
            'run_id': 'r', 'checks': [], 'shards': [], 'time': None,
            'splits': {}}
  page = html_report.render(report)
  assert ('<h2>Time shape</h2><p class="small">Not recorded: the manifest '
          'has no sensor.time') in page
  # A report written before the time shape: no section.
  del report['time']
  assert 'Time shape' not in html_report.render(report)


# ------------------------------------------------------- end to end --


LOCAL = ['--direct_running_mode', 'in_memory', '--direct_num_workers', '1']


def _edited(out, tmp_path, edit):
  """A copy of the dataset `out` whose manifest `edit` changed."""
  copy = tmp_path / 'out'
  shutil.copytree(out, copy)
  path = copy / 'manifest.json'
  manifest = json.loads(path.read_text())
  edit(manifest)
  path.write_text(json.dumps(manifest))
  return copy


@pytest.fixture(scope='module')
def published(tmp_path_factory):
  """Windows of 10 observations (stride 5) of 6 devices logging once a
  second, split by entity, and their validation."""
  root = tmp_path_factory.mktemp('time_checks')
  sensorgen.frame(devices=6, rows_per_device=60, seed=7).to_csv(
      root / 'log.csv', index=False)
  out = root / 'out'
  manifest = preprocess.run(
      ['--modality', 'sensor', '--input', str(root / 'log.csv'),
       '--output', str(out), '--timestamp_column', 'time',
       '--entity_column', 'device', '--window_length', '10',
       '--window_stride', '5'] + LOCAL)
  return out, manifest, readback.validation_run(out)


def test_the_published_windows_pass_the_series_checks(published):
  _, manifest, (code, printed, report) = published
  assert code == validate.EXIT_SOUND, printed
  found = {c['check']: c for c in report['checks']}
  for name in (ENTITIES, SPAN, TWICE, STRIDE, STARTS):
    assert found[name]['status'] == 'pass', found[name]
  series = report['series']
  assert series['entities'] == 6
  assert series['records'] == manifest['totals']['examples'] == 6 * 11
  assert not any(series['found'].values())
  assert found[TWICE]['detail'] == (
      'each of the 66 windows read back starts at another observation of '
      'its entity')


def _older(manifest):
  """The manifest as written before issue 35."""
  sensor = manifest['sensor']
  sensor.pop('time', None)
  for key in ('lost_to_gaps', 'too_long'):
    sensor['windows'].pop(key, None)
  for split in manifest['splits'].values():
    split.pop('duplicates_dropped', None)


def test_an_older_manifest_validates_saying_not_recorded(published,
                                                         tmp_path):
  out, _, _ = published
  code, printed, report = readback.validation_run(_edited(out, tmp_path, _older))
  assert code == validate.EXIT_SOUND, printed
  found = {c['check']: c for c in report['checks']}
  for name in (ENTITIES, SPAN):
    assert found[name] == {'check': name, 'status': 'pass', 'detail': (
        'not recorded: the manifest has no sensor.time (it was written '
        'before preprocessing recorded sampling intervals and gaps)')}
  assert 'duplicates dropped: not recorded' in found[
      'rows read = rows used + dropped + dead letters']['detail']
  assert '(lost to gaps: not recorded, too long: not recorded)' in found[
      'every window of every entity was formed']['detail']
  assert report['time'] is None
  page = (tmp_path / 'out' / 'validation_report.html').read_text()
  assert '<h2>Time shape</h2><p class="small">Not recorded:' in page


def _time_of_devices(manifest):
  """A time section of dev00 to dev04 (dev05 left out): dev00 said to log
  ten times a second, so its windows of ten seconds' rows are too long;
  the others once a second, as they do."""
  entities = {f'dev{d:02d}': _shape() for d in range(1, 5)}
  entities['dev00'] = _shape(median=SECOND // 10, max_gap=3 * SECOND // 10)
  manifest['sensor']['time'] = {'entities': entities, 'total': {
      'rows': 360, 'observations': 360, 'gaps': 0, 'longest_gap_ns': 0,
      'segments': 6, 'duplicates_dropped': 0, 'conflicting_rows': 0,
      'out_of_order_rows': 0}}


def test_windows_longer_than_the_manifest_allows_fail(published, tmp_path):
  out, _, _ = published
  code, printed, report = readback.validation_run(
      _edited(out, tmp_path, _time_of_devices))
  assert code == validate.EXIT_UNSOUND
  failed = {c['check']: c['detail'] for c in report['checks']
            if c['status'] == 'fail'}
  assert sorted(failed) == sorted([SPAN, ENTITIES]), failed
  # Each of dev00's 11 windows spans 9 s; the bound is 1.3 s.
  assert re.fullmatch(
      r"11 windows span more time than 10 samples at their entity's "
      r'interval and one max gap: dev00#0 \((train|validation|test)\): the '
      r'window spans 9 s, more than the 1\.3 s that 10 samples at 100 ms '
      r'and one gap of 300 ms allow; dev00#5 \(\1\): .*', failed[SPAN]), (
          failed[SPAN])
  assert failed[ENTITIES] == (
      "1 entities of the records are not in the manifest's "
      'sensor.time.entities, which lists every entity the run read: dev05 '
      '(11 records)')
  assert f'FAILED {SPAN}: 11 windows span more time' in printed
  assert f'FAILED {ENTITIES}: 1 entities' in printed
  page = (tmp_path / 'out' / 'validation_report.html').read_text()
  assert 'Time shape (5 entities, from the manifest)' in page
  assert '<tr><td>dev00</td><td class="num">100 ms</td>' in page
