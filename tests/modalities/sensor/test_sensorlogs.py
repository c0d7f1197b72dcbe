"""The logger-shaped fixtures of tests/sensorlogs.py and its reference
implementation of the issue-35 rules, checked on their own (no pipeline):
what each oddity writes and what the rules make of it."""

import os
import unicodedata

import numpy as np
import pandas as pd
import pytest

import sensorlogs

P = sensorlogs.PERIOD_NS
N = 6400  # rows per entity at the default 100 s


@pytest.fixture(scope='module')
def cases(tmp_path_factory):
  """{case: (folder, rows written, reference at L=128, S=64)}."""
  out = {}
  for name in list(sensorlogs.CASES) + ['everything', 'interleaved_rotated']:
    folder = tmp_path_factory.mktemp(name)
    if name == 'everything':
      df = sensorlogs.write_logs(folder, rotated=True, dropout=True,
                                 clock_jump=True, conflict=True)
    elif name == 'interleaved_rotated':
      df = sensorlogs.write_logs(folder, interleaved=True, rotated=True)
    else:
      df = sensorlogs.write_case(folder, name)
    out[name] = (folder, df, sensorlogs.reference(df, 128, 64))
  return out


def _frame(df):
  """A frame with plain object text columns, rows by file and row."""
  df = df.sort_values(['file', 'row'], ignore_index=True)
  return df.astype({'entity': object, 'label': object, 'file': object})


# What each case gives per entity at L=128, S=64 (both entities alike):
# rows, observations, duplicates, conflicting, out of order, gaps,
# windows without gaps, in segments, formed.
EXPECTED = {
    'regular': (N, N, 0, 0, 0, 0, 99, 99, 99),
    'rotated': (N + 10, N, 10, 0, 0, 0, 99, 99, 99),
    'dropout': (N - 640, N - 640, 0, 0, 0, 1, 89, 88, 88),
    'clock_jump': (N, N - 256, 0, 256, 1, 1, 95, 94, 94),
    'conflict': (N + 1, N - 1, 0, 2, 0, 0, 98, 98, 98),
    'jitter': (N, N, 0, 0, 0, 0, 99, 99, 99),
    'interleaved': (N, N, 0, 0, 0, 0, 99, 99, 99),
    'everything': (N - 640 + 10 + 1, N - 640 - 256 - 1, 10, 258, 1, 2, 84,
                   82, 82),
}


@pytest.mark.parametrize('name', sorted(EXPECTED))
def test_counts_of_each_case(cases, name):
  _, _, ref = cases[name]
  assert sorted(ref.entities) == ['S01', 'S02']
  for shape in ref.entities.values():
    w = shape['windows']
    got = (shape['rows'], shape['observations'], shape['duplicates_dropped'],
           shape['conflicting_rows'], shape['out_of_order_rows'],
           shape['gaps'], w['without_gaps'], w['in_segments'], w['formed'])
    assert got == EXPECTED[name]
    assert shape['segments'] == shape['gaps'] + 1
    assert w['too_long'] == 0
  assert len(ref.windows) == 2 * EXPECTED[name][-1]
  assert ref.counts['expected'] == len(ref.windows)
  assert len(ref.dead) == 2 * EXPECTED[name][3]
  # Every row is kept, dropped as a duplicate or dead-lettered.
  total = ref.total
  assert total['rows'] == (total['observations'] + total['duplicates_dropped']
                           + total['conflicting_rows'])
  assert len(ref.observations) == total['observations']


def test_files_hold_what_the_frame_says(cases):
  for name, (folder, df, _) in cases.items():
    pd.testing.assert_frame_equal(_frame(df),
                                  _frame(sensorlogs.read_logs(folder)),
                                  check_dtype=False, obj=name)
    # Rows count from 0 in each file, the header not counted.
    for _, in_file in df.groupby('file'):
      assert in_file['row'].tolist() == list(range(len(in_file)))
    assert list(df.columns) == ['time', 'entity', *sensorlogs.CHANNELS, 'label',
                                'file', 'row']
    assert df['time'].dtype == np.int64


def test_the_same_arguments_write_the_same_files(tmp_path, cases):
  again = sensorlogs.write_case(tmp_path, 'rotated')
  pd.testing.assert_frame_equal(again, cases['rotated'][1])
  folder = cases['rotated'][0]
  for f in again['file'].unique():
    assert (tmp_path / f).read_bytes() == (folder / f).read_bytes()


def test_regular_looks_like_a_daphnet_recording(cases):
  folder, df, ref = cases['regular']
  assert df['time'].diff().dropna().isin([P, -(N - 1) * P + 5 * 10**6]).all()
  values = df[list(sensorlogs.CHANNELS)].to_numpy()
  assert values.min() >= -2000 and values.max() <= 2000
  assert np.array_equal(values, np.rint(values))
  # Gravity on the y axes.
  for sensor in sensorlogs.SENSORS:
    assert 800 < df[f'{sensor}_y'].mean() < 1200
    assert abs(df[f'{sensor}_x'].mean()) < 300
  # Walking moves the ankle most; rest hardly at all.
  moving = df.groupby('label')['ankle_x'].std()
  assert moving['walk'] > moving['freeze'] > 3 * moving['rest']
  # Labels in bouts of 2 to 8 s.
  for _, rows in df.groupby('entity'):
    labels = rows['label'].to_numpy()
    starts = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1], True])
    assert set(labels) == set(sensorlogs.LABELS)
    assert np.diff(starts)[:-1].min() >= 2 * sensorlogs.RATE_HZ
    assert np.diff(starts).max() <= 8 * sensorlogs.RATE_HZ
  shape = ref.entities['S01']
  assert shape['median_interval_ns'] == P == 15_625_000
  assert shape['max_gap_ns'] == 3 * P
  assert shape['longest_gap_ns'] == 0 and not ref.dead
  with open(folder / df['file'][0], encoding='utf-8') as f:
    assert f.readline().startswith('time,entity,ankle_x,ankle_y')
    assert f.readline().startswith('2026-01-01T09:00:00.000000Z,S01,')
    assert f.readline().startswith('2026-01-01T09:00:00.015625Z,S01,')


def test_rotated_logs_repeat_five_rows_at_each_cut(cases):
  _, df, ref = cases['rotated']
  for entity, rows in df.groupby('entity'):
    names = sensorlogs.file_names(True, entity)
    assert sorted(rows['file'].unique()) == sorted(names)
    assert sorted(names) == [names[1], names[2], names[0]]
    key = list(sensorlogs.CHANNELS) + ['time', 'label']
    for older, newer in zip(names, names[1:]):
      tail = rows[rows['file'] == older].iloc[-5:][key].reset_index(drop=True)
      head = rows[rows['file'] == newer].iloc[:5][key].reset_index(drop=True)
      pd.testing.assert_frame_equal(tail, head)
    assert rows.duplicated(key).sum() == 10
    assert rows['time'].duplicated().sum() == 10
    # The copy kept is the first by (time, file, row): at both cuts the one
    # in '(2)', which sorts before the other two names.
    kept = {i.split(':')[0] for i in ref.observations if i.startswith(
        entity) and ref.observations[i][2] in set(
            rows['time'][rows['time'].duplicated()])}
    assert kept == {names[1]}
  assert ref.total['duplicates_dropped'] == 20 and not ref.dead


def test_dropout_is_one_gap_of_ten_seconds_and_two_segments(cases):
  _, df, ref = cases['dropout']
  for entity, shape in ref.entities.items():
    assert shape['gaps'] == 1 and shape['segments'] == 2
    assert shape['longest_gap_ns'] == 641 * P == 10_015_625_000
    times = np.sort(df['time'][df['entity'] == entity].to_numpy())
    hole = np.argmax(np.diff(times))
    before, after = times[hole], times[hole + 1]
    for ex_id, (values, _, start, end) in ref.windows.items():
      if ex_id.startswith(entity + '#'):
        assert values.shape == (128, 9)
        assert end <= before or start >= after, ex_id
        assert end - start == 127 * P
    # The windows of the second segment start at its first observation.
    assert f'{entity}#{N // 2 - 320}' in ref.windows
    assert f'{entity}#{N // 2 - 320 - 64}' not in ref.windows


def test_dropout_is_inside_the_second_file(cases):
  _, df, ref = cases['everything']
  for entity in sensorlogs.ENTITIES:
    second = df[df['file'] == sensorlogs.file_names(True, entity)[1]]
    steps = np.diff(second['time'].to_numpy())
    assert steps.max() == 641 * P
    assert 5 < np.argmax(steps) < len(second) - 5


def test_clock_jump_conflicts_with_the_rows_it_repeats(cases):
  _, df, ref = cases['clock_jump']
  for entity, rows in df.groupby('entity'):
    times = rows['time'].to_numpy()
    back = np.flatnonzero(np.diff(times) < 0)
    assert len(back) == 1
    assert times[back[0]] - times[back[0] + 1] == 2 * 10**9 - P
    dead = rows[rows['file'].str.cat(rows['row'].astype(str), sep=':').isin(
        ref.dead)]
    # 128 times, each held by a row before the jump and one after it.
    assert dead['time'].nunique() == 128
    assert dead.groupby('time').size().eq(2).all()
    shape = ref.entities[entity]
    assert shape['longest_gap_ns'] == 129 * P
  reason = ref.reasons[next(iter(sorted(ref.dead)))]
  assert reason.startswith('conflicting rows at the same time of entity S0')
  assert reason.count(':') == 3  # the entity's and two ids


def test_a_jump_off_the_sample_grid_only_interleaves(tmp_path):
  df = sensorlogs.write_logs(tmp_path, clock_jump=True, jump_s=2.005)
  ref = sensorlogs.reference(df, 128, 64)
  for shape in ref.entities.values():
    assert shape['conflicting_rows'] == 0 and shape['gaps'] == 0
    assert shape['out_of_order_rows'] == 1
    assert shape['observations'] == N
  assert not ref.dead


def test_conflict_dead_letters_both_rows(cases):
  _, df, ref = cases['conflict']
  assert len(ref.dead) == 4
  for entity in sensorlogs.ENTITIES:
    ids = sorted(i for i in ref.dead if i.startswith(entity + ' '))
    rows = [int(i.rsplit(':', 1)[1]) for i in ids]
    assert rows == [N // 4, N // 4 + 1]
    pair = df[(df['entity'] == entity) & df['row'].isin(rows)]
    assert pair['time'].nunique() == 1
    changed = pair[list(sensorlogs.CHANNELS)].diff().iloc[1]
    assert changed['ankle_x'] == sensorlogs.CONFLICT_DELTA
    assert (changed.drop('ankle_x') == 0).all()
    assert ref.reasons[ids[0]] == ref.reasons[ids[1]] == (
        f'conflicting rows at the same time of entity {entity}: '
        f'{ids[0]}, {ids[1]}')
    assert not set(ids) & set(ref.observations)


def test_jitter_keeps_the_median_interval(cases):
  _, df, ref = cases['jitter']
  assert not (df['time'] % P == 0).all()
  assert (df['time'] % 1000 == 0).all()  # written in microseconds
  for shape in ref.entities.values():
    assert abs(shape['median_interval_ns'] - P) <= 0.02 * P
    assert shape['out_of_order_rows'] == 0 and shape['gaps'] == 0


def test_interleaved_entities_share_a_file(cases):
  _, df, ref = cases['interleaved']
  assert df['file'].unique().tolist() == [sensorlogs.file_names(False)[0]]
  assert df['entity'].tolist()[:4] == ['S01', 'S02', 'S01', 'S02']
  assert df['time'].is_monotonic_increasing
  assert ref.entities['S01']['median_interval_ns'] == P
  _, df, ref = cases['interleaved_rotated']
  assert df.groupby('file')['entity'].nunique().eq(2).all()
  assert ref.total['duplicates_dropped'] == 10


def test_the_nfd_file_name_survives(cases):
  folder, df, _ = cases['regular']
  name = sensorlogs.file_names(False, 'S01')[0]
  assert name == unicodedata.normalize('NFD', 'S01 Séance 1.csv') != (
      unicodedata.normalize('NFC', name))
  assert name in os.listdir(folder)
  assert unicodedata.normalize('NFC', name) not in os.listdir(folder)
  assert df['file'].iloc[0] == name
  assert all(unicodedata.is_normalized('NFD', f) for f in df['file'])


def test_epoch_milliseconds_as_daphnet_writes_them(tmp_path):
  df = sensorlogs.write_logs(tmp_path, time_format='ms', seconds=40)
  assert (df['time'] % 10**6 == 0).all()
  steps = set(np.diff(df['time'][df['entity'] == 'S01']).tolist())
  assert steps == {15 * 10**6, 16 * 10**6}
  ref = sensorlogs.reference(df, 128, 64)
  assert ref.entities['S01']['median_interval_ns'] == 16 * 10**6
  assert sensorlogs.pipeline_flags('ms')[2:4] == ['--timestamp_unit', 'ms']
  text = (tmp_path / df['file'][0]).read_text(encoding='utf-8')
  assert text.splitlines()[2].startswith('1767258000015,S01,')
  assert text.splitlines()[3].startswith('1767258000031,S01,')
  pd.testing.assert_frame_equal(_frame(df), _frame(sensorlogs.read_logs(
      tmp_path, 'ms')), check_dtype=False)


def test_oddities_need_room(tmp_path):
  with pytest.raises(ValueError):
    sensorlogs.write_logs(tmp_path, dropout=True, seconds=20)
  with pytest.raises(ValueError):
    sensorlogs.write_logs(tmp_path, clock_jump=True, jump_s=20)


# The reference on small hand-made tables.


def _rows(times, values, labels, files=None, rows=None, entity='e'):
  n = len(times)
  return pd.DataFrame({
      'time': np.asarray(times, np.int64), 'entity': entity,
      'a': np.asarray(values, np.float64), 'label': labels,
      'file': files or ['f.csv'] * n, 'row': rows or list(range(n))})


def test_reference_keeps_the_first_duplicate_by_time_file_row():
  df = _rows([0, 10, 10, 20], [1, 2, 2, 3], ['x'] * 4,
             files=['b.csv', 'b.csv', 'a.csv', 'b.csv'], rows=[0, 1, 0, 2])
  ref = sensorlogs.reference(df, 0)
  assert set(ref.observations) == {'b.csv:0', 'a.csv:0', 'b.csv:2'}
  shape = ref.entities['e']
  assert shape['duplicates_dropped'] == 1 and 'windows' not in shape
  # Row numbers compare as numbers, not text.
  df = _rows([5, 5], [1, 1], ['x', 'x'], rows=[10, 9])
  assert set(sensorlogs.reference(df, 0).observations) == {'f.csv:9'}


def test_reference_nan_equals_nan_and_labels_count():
  df = _rows([0, 0, 1, 1], [np.nan, np.nan, 1, 1], ['x', 'x', 'x', 'y'])
  ref = sensorlogs.reference(df, 0)
  assert ref.entities['e']['duplicates_dropped'] == 1
  assert ref.dead == {'f.csv:2', 'f.csv:3'}
  assert ref.entities['e']['observations'] == 1


def test_reference_median_interval_of_the_sorted_observations():
  # File order 0, 30, 10, 20: one row out of order; sorted, the
  # observations are 10 apart (the file's steps 30 and -20 are not).
  df = _rows([0, 30, 10, 20], [0, 0, 0, 0], ['x'] * 4)
  shape = sensorlogs.reference(df, 0).entities['e']
  assert shape['median_interval_ns'] == 10
  assert shape['out_of_order_rows'] == 1
  assert shape['max_gap_ns'] == 30
  one = sensorlogs.reference(_rows([0], [0], ['x']), 0).entities['e']
  assert one['median_interval_ns'] is None and one['max_gap_ns'] is None
  assert one['segments'] == 1 and one['gaps'] == 0
  # Of an even count of intervals, the lower middle one.
  df = _rows([0, 10, 30, 60, 100], [0] * 5, ['x'] * 5)
  assert sensorlogs.reference(df, 0).entities['e']['median_interval_ns'] == 20


def test_reference_windows_gaps_and_too_long():
  # 40 rows 1 apart, then holes of 3 (not a gap at max_gap 3) from row 20.
  times = list(range(20)) + [20 + 3 * i for i in range(20)]
  df = _rows(times, np.arange(40), ['x'] * 14 + ['y'] + ['x'] * 25)
  ref = sensorlogs.reference(df, 10, 5)
  shape = ref.entities['e']
  assert shape['median_interval_ns'] == 1 and shape['gaps'] == 0
  # A window may span 10 * 1 + 3 = 13: those with 3 or more holes inside
  # are too long (from start 15 on).
  spans = {k: v[3] - v[2] for k, v in ref.windows.items()}
  assert all(s <= 13 for s in spans.values())
  assert shape['windows']['without_gaps'] == 7
  assert shape['windows']['too_long'] == 7 - len(ref.windows) > 0
  assert sorted(ref.windows) == ['e#0', 'e#10', 'e#5']
  assert ref.windows['e#5'][1] == 'y' and ref.windows['e#10'][1] == 'x'
  np.testing.assert_array_equal(ref.windows['e#5'][0][:, 0], np.arange(5, 15))
  # A fixed max_gap of 2 cuts at each hole; none never cuts.
  cut = sensorlogs.reference(df, 10, 5, max_gap_ns=2).entities['e']
  assert cut['gaps'] == 19 and cut['segments'] == 20
  assert cut['windows']['in_segments'] == 3
  assert cut['longest_gap_ns'] == 3
  never = sensorlogs.reference(df, 10, 5, max_gap_ns=None)
  assert never.entities['e']['windows']['formed'] == 7
  assert never.entities['e']['max_gap_ns'] is None


def test_reference_majority_label_ties_go_to_the_first_name():
  df = _rows(range(4), range(4), ['walk', 'rest', 'rest', 'walk'])
  assert sensorlogs.reference(
      df, 4, 4, label_rule='majority').windows['e#0'][1] == ('rest')
  assert sensorlogs.reference(df, 4, 4).windows['e#0'][1] == 'walk'


def test_reference_without_an_entity_column():
  df = _rows(range(3), range(3), ['x'] * 3).drop(columns='entity')
  ref = sensorlogs.reference(df, 2, 1)
  assert list(ref.entities) == [''] and set(ref.windows) == {'#0', '#1'}
