"""Sensor logs as loggers write them: rotated files that repeat rows, a
dropout, a clock that jumps back, a retransmitted row with another value,
jittered times and entities interleaved in one file (tests/sensorlogs.py).

Real Beam pipelines (the DirectRunner, and the portable runner once) on
those files; every dataset is compared, window by window and row by row,
with the rules read plainly by `sensorlogs.reference`, and checked by the
validation pipeline.
"""

import json

import numpy as np
import pandas as pd
import pytest

import readback
import sensorlogs
from pipelines import preprocess

LOCAL = ['--direct_running_mode', 'in_memory', '--direct_num_workers', '1']
# Windows of 2 s (128 samples at 64 Hz), every 1 s; train before 09:01:00,
# test after; raw values, so records compare with the written ones.
WINDOWS = ['--window_length', '128', '--window_stride', '64']
SPLIT = ['--time_cutoffs', '2026-01-01T09:01:00Z', '--normalization', 'none']
CUTOFF = sensorlogs.START + 60 * 10**9


def _run(src, out, *extra):
  return preprocess.run(
      ['--modality', 'sensor', '--input', str(src), '--output', str(out)] +
      sensorlogs.pipeline_flags() + SPLIT + LOCAL + list(extra))


def _records(out):
  """{id: (split, features)} of every record of the dataset."""
  manifest = json.loads((out / 'manifest.json').read_text())
  found = {}
  for split in manifest['splits']:
    data = readback.read_all(out, split)
    for i, record_id in enumerate(data.get('id', [])):
      found[record_id.decode('utf-8')] = (
          split, {k: v[i] for k, v in data.items()})
  return found


def _check_shapes(manifest, ref, exact_median=True):
  """The manifest's sensor.time against the reference, entity by entity."""
  got = manifest['sensor']['time']['entities']
  assert sorted(got) == sorted(ref.entities)
  for entity, want in ref.entities.items():
    shape = dict(got[entity])
    shape.pop('longest_segment')
    median, want_median = shape.pop('median_interval_ns'), want[
        'median_interval_ns']
    max_gap = shape.pop('max_gap_ns')
    want = {k: v for k, v in want.items()
            if k not in ('median_interval_ns', 'max_gap_ns')}
    assert shape == want, entity
    if exact_median:
      assert median == want_median and max_gap == 3 * want_median
    else:  # jittered times: the median's sketch is within about 1%
      assert abs(median / want_median - 1) < 0.011, (median, want_median)


def _check_windows(out, ref):
  """Every window of the dataset is the reference's, with its times, label
  and values; the reference's windows that cross the cut-off are the only
  ones missing."""
  records = _records(out)
  crossing = {w for w, (_, _, start, end) in ref.windows.items()
              if start < CUTOFF <= end}
  assert crossing, 'no window crosses the cut-off: the test is too easy'
  assert set(records) == set(ref.windows) - crossing
  for window_id, (split, f) in records.items():
    values, label, start, end = ref.windows[window_id]
    assert split == ('train' if end < CUTOFF else 'test'), window_id
    assert (int(f['start_time']), int(f['end_time'])) == (start, end)
    assert f['label_text'].decode('utf-8') == label, window_id
    np.testing.assert_array_equal(
        f['values'].reshape(values.shape), values.astype(np.float32),
        err_msg=window_id)
  return records


def _dead_conflicts(out):
  return {d['input']: d['reason'] for d in readback.dead_letters(out)
          if d['stage'] == 'time'}


@pytest.fixture(scope='module')
def logger(tmp_path_factory):
  """Two subjects' logs, each rotated into three files that repeat 5
  rows, with a 10 s dropout in the second file, a clock that jumps back
  2 s, and a retransmitted row with another value; windowed."""
  src = tmp_path_factory.mktemp('logs')
  rows = sensorlogs.write_logs(src, rotated=True, dropout=True,
                               clock_jump=True, conflict=True)
  out = tmp_path_factory.mktemp('out') / 'ds'
  manifest = _run(src, out, *WINDOWS)
  return src, rows, out, manifest


def test_windows_follow_the_rules_on_rotated_logs_with_a_dropout(logger):
  _, rows, out, manifest = logger
  ref = sensorlogs.reference(rows, 128, 64, label_rule='last')
  _check_shapes(manifest, ref)
  # Per subject: 10 repeated rows dropped, 2 x 128 clock-jump rows and the
  # retransmitted pair dead-lettered, the dropout and the jump are gaps.
  for shape in manifest['sensor']['time']['entities'].values():
    assert (shape['duplicates_dropped'], shape['conflicting_rows'],
            shape['gaps'], shape['segments']) == (10, 258, 2, 3)
    assert shape['longest_gap_ns'] == 641 * sensorlogs.PERIOD_NS
  total = manifest['sensor']['time']['total']
  assert total['median_interval_ns'] == sensorlogs.PERIOD_NS
  assert {k: v for k, v in total.items() if k not in (
      'median_interval_ns', 'longest_segment')} == ref.total
  w = manifest['sensor']['windows']
  assert (w['expected'], w['lost_to_gaps'], w['too_long']) == (
      ref.counts['expected'], ref.counts['lost_to_gaps'], 0)
  assert w['lost_to_gaps'] > 0
  records = _check_windows(out, ref)
  # No window spans more than 128 samples and one allowed gap.
  bound = 128 * sensorlogs.PERIOD_NS + 3 * sensorlogs.PERIOD_NS
  assert max(int(f['end_time']) - int(f['start_time'])
             for _, f in records.values()) <= bound
  readback.assert_valid(out)


def test_conflicting_rows_are_dead_letters_naming_each_other(logger):
  _, rows, out, manifest = logger
  ref = sensorlogs.reference(rows, 128, 64)
  dead = _dead_conflicts(out)
  assert set(dead) == ref.dead
  for row_id, reason in dead.items():
    assert reason.startswith('conflicting rows at the same time of entity')
    others = set(ref.reasons[row_id].split(': ', 1)[1].split(', ')) - {
        row_id}
    assert others and all(o in reason for o in others), reason
  totals = manifest['totals']
  assert totals['dead_lettered'] == len(ref.dead)
  used = sum(s['rows_used'] for s in manifest['splits'].values())
  dropped = sum(s['duplicates_dropped'] for s in manifest['splits'].values())
  assert used == ref.total['observations'] and dropped == 20
  assert totals['inputs'] == len(rows) == used + dropped + len(ref.dead)


def test_the_issues_recording_no_window_spans_the_dropout(tmp_path):
  """The report's case: one 64 Hz recording rotated into three files,
  each repeating the last 5 rows of the one before, a 10 s dropout in the
  second; 128-row windows."""
  src = tmp_path / 'logs'
  rows = sensorlogs.write_logs(src, entities=('S06',), rotated=True,
                               dropout=True)
  out = tmp_path / 'ds'
  manifest = _run(src, out, *WINDOWS)
  [shape] = manifest['sensor']['time']['entities'].values()
  assert manifest['totals']['inputs'] == len(rows) == 5770
  assert shape['observations'] == 5760 and shape['duplicates_dropped'] == 10
  assert (shape['gaps'], shape['segments']) == (1, 2)
  times = np.sort(rows['time'].unique())
  hole = int(np.argmax(np.diff(times)))
  hole_start, hole_end = times[hole], times[hole + 1]
  assert hole_end - hole_start > 10 * 10**9
  for _, f in _records(out).values():
    assert not int(f['start_time']) <= hole_start < int(f['end_time'])
  readback.assert_valid(out)


@pytest.fixture(scope='module')
def interleaved(tmp_path_factory):
  """One file that two subjects' rows are interleaved in, in time order
  (each subject windowed while the file is read), with jittered times and
  a dropout."""
  src = tmp_path_factory.mktemp('one_log')
  rows = sensorlogs.write_logs(src, interleaved=True, jitter=True,
                               dropout=True)
  out = tmp_path_factory.mktemp('out') / 'ds'
  return rows, out, _run(src, out, *WINDOWS)


def test_an_interleaved_file_in_time_order_is_cut_at_its_gaps(interleaved):
  rows, out, manifest = interleaved
  ref = sensorlogs.reference(rows, 128, 64)
  assert manifest['sensor']['entities_in_time_order'] == 2
  _check_shapes(manifest, ref, exact_median=False)
  assert manifest['sensor']['time']['total']['gaps'] == 2
  _check_windows(out, ref)
  readback.assert_valid(out)


def test_rows_mode_keeps_one_row_per_observation(logger, tmp_path):
  src, rows, _, _ = logger
  ref = sensorlogs.reference(rows, 0)
  out = tmp_path / 'rows'
  manifest = _run(src, out)
  _check_shapes(manifest, ref)
  records = _records(out)
  assert set(records) == set(ref.observations)
  for row_id, (_, f) in records.items():
    values, label, time = ref.observations[row_id]
    assert int(f['time']) == time and f['label_text'].decode() == label
    np.testing.assert_array_equal(f['values'], values.astype(np.float32))
  assert set(_dead_conflicts(out)) == ref.dead
  readback.assert_valid(out)


def test_max_gap_as_a_duration_or_none(logger, tmp_path):
  src, rows, _, _ = logger
  # 5 s: the 10 s dropout is a gap, the clock jump's 2 s hole is not.
  out = tmp_path / 'five'
  manifest = _run(src, out, *WINDOWS, '--max_gap', '5s')
  ref = sensorlogs.reference(rows, 128, 64, max_gap_ns=5 * 10**9)
  assert manifest['sensor']['max_gap'] == '5s'
  for entity, shape in manifest['sensor']['time']['entities'].items():
    assert shape['max_gap_ns'] == 5 * 10**9
    assert (shape['gaps'], shape['segments']) == (1, 2)
    assert shape['windows'] == ref.entities[entity]['windows']
  # A window may now span the 2 s hole, but not more than 128 samples and
  # 5 s; none is that long here.
  assert manifest['sensor']['windows']['too_long'] == 0
  readback.assert_valid(out)
  # none: series are never cut, and windows span the dropout.
  out = tmp_path / 'none'
  manifest = _run(src, out, *WINDOWS, '--max_gap', 'none')
  total = manifest['sensor']['time']['total']
  assert total['gaps'] == 0 and total['segments'] == 2
  assert total['windows']['in_segments'] == total['windows']['without_gaps']
  readback.assert_valid(out)


def test_the_portable_runner_writes_the_same_dataset(logger, tmp_path):
  src, _, direct, manifest = logger
  out = tmp_path / 'portable'
  got = preprocess.run(
      ['--modality', 'sensor', '--input', str(src), '--output', str(out)] +
      sensorlogs.pipeline_flags() + SPLIT + WINDOWS +
      ['--runner', 'PortableRunner', '--job_endpoint', 'embed',
       '--environment_type', 'LOOPBACK'])
  assert got['fingerprint'] == manifest['fingerprint']
  assert got['sensor']['time'] == manifest['sensor']['time']
  assert _dead_conflicts(out) == _dead_conflicts(direct)


@pytest.mark.parametrize('value, message', [
    ('soon', r"--max_gap: 'soon' is not a duration such as 2s, 500ms or "
             r'1min, or auto or none\.'),
    ('-2s', r"--max_gap: '-2s' is not a positive duration, or auto or "
            r'none\.'),
])
def test_a_bad_max_gap_is_one_sentence(logger, tmp_path, value, message):
  src = logger[0]
  with pytest.raises(preprocess.UsageError, match=message):
    _run(src, tmp_path / 'out', *WINDOWS, f'--max_gap={value}')


def _grid_reference(rows, length, stride, period):
  """{window id: (values, label, start, end)} and {entity: (grid rows,
  filled)} of --resample `period`, read plainly: each entity's
  observations (sensorlogs.reference), cut at its gaps; each segment's
  grid from its first observation every `period` up to its last; values
  interpolated with np.interp per channel, label of the observation at or
  before the grid time; windows over the grid rows of each segment,
  numbered over the entity's grid rows."""
  ref = sensorlogs.reference(rows, 0)
  entity_of = dict(zip(rows['file'] + ':' + rows['row'].astype(str),
                       rows['entity']))
  by_entity = {}
  for row_id, (values, label, time) in ref.observations.items():
    by_entity.setdefault(entity_of[row_id], []).append((time, values, label))
  windows, counts = {}, {}
  for entity, obs in by_entity.items():
    obs.sort(key=lambda o: o[0])
    time = np.array([o[0] for o in obs], np.int64)
    values = np.stack([o[1] for o in obs])
    labels = [o[2] for o in obs]
    max_gap = ref.entities[entity]['max_gap_ns']
    cuts = [i for i in range(1, len(time)) if time[i] - time[i - 1] > max_gap]
    offset = grid_rows = filled = 0
    for a, b in zip([0] + cuts, cuts + [len(time)]):
      grid = np.arange(time[a], time[b - 1] + 1, period, dtype=np.int64)
      # Times from the segment's start: ns since 1970 lose digits as
      # float64, which np.interp works in.
      grid_values = np.stack([
          np.interp(grid - time[a], time[a:b] - time[a], values[a:b, c])
          for c in range(values.shape[1])], axis=1)
      at = np.searchsorted(time[a:b], grid, side='right') - 1
      nearest = np.min(np.abs(time[a:b][None, :] - grid[:, None]), axis=1)
      filled += int(np.sum(2 * nearest >= period))
      for k in range(0, len(grid) - length + 1, stride):
        windows[f'{entity}#{offset + k}'] = (
            grid_values[k:k + length], labels[a + at[k + length - 1]],
            int(grid[k]), int(grid[k + length - 1]))
      offset += len(grid)
      grid_rows += len(grid)
    counts[entity] = (grid_rows, filled)
  return windows, counts


@pytest.mark.parametrize('case, period', [('chunked', '20ms'),
                                          ('streamed', '15.625ms')])
def test_resampled_windows_are_on_each_segments_grid(logger, interleaved,
                                                     tmp_path, case, period):
  if case == 'chunked':
    src, rows = logger[0], logger[1]
  else:
    rows = interleaved[0]
    src = tmp_path / 'one_log'
    src.mkdir()
    sensorlogs.write_logs(src, interleaved=True, jitter=True, dropout=True)
  out = tmp_path / 'grid'
  manifest = _run(src, out, *WINDOWS, '--resample', period)
  ns = int(float(period[:-2]) * 10**6)
  assert manifest['sensor']['resample']['period_ns'] == ns
  windows, counts = _grid_reference(rows, 128, 64, ns)
  for entity, (grid_rows, filled) in counts.items():
    shape = manifest['sensor']['time']['entities'][entity]
    assert (shape['rows_resampled'], shape['rows_filled']) == (
        grid_rows, filled), entity
  records = _records(out)
  crossing = {w for w, (_, _, start, end) in windows.items()
              if start < CUTOFF <= end}
  assert set(records) == set(windows) - crossing
  for window_id, (split, f) in records.items():
    values, label, start, end = windows[window_id]
    assert (int(f['start_time']), int(f['end_time'])) == (start, end)
    assert end - start == 127 * ns
    assert split == ('train' if end < CUTOFF else 'test')
    assert f['label_text'].decode('utf-8') == label, window_id
    np.testing.assert_allclose(f['values'].reshape(values.shape), values,
                               rtol=1e-5, atol=1e-3, err_msg=window_id)
  readback.assert_valid(out)


def test_resample_needs_windows_and_a_duration(logger, tmp_path):
  src = logger[0]
  with pytest.raises(preprocess.UsageError,
                     match=r'^--resample needs --window_length above 0'):
    _run(src, tmp_path / 'out', '--resample', '20ms')
  with pytest.raises(preprocess.UsageError,
                     match=r"^--resample: 'often' is not a duration"):
    _run(src, tmp_path / 'out', *WINDOWS, '--resample', 'often')


def test_the_statistics_pass_counts_intervals_the_same_in_any_batches(
    monkeypatch):
  """Intervals wait and are counted when enough wait (or at the file's
  end); how often does not change what is found."""
  from transforms.modalities.sensor import entity_statistics  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  times = np.cumsum(rng.choice([0, 10, 10, 11, -5, 300], 5000)).astype(
      np.int64)
  found = []
  for pending in (1 << 18, 7):
    monkeypatch.setattr(entity_statistics, '_PENDING_INTERVALS', pending)
    seen = entity_statistics.FileEntities()
    for lo in range(0, len(times), 333):
      seen.add('e', times[lo:lo + 333])
    [(_, stats)] = seen.stats('f.csv')
    found.append(stats)
  assert found[0] == found[1]
  steps = np.diff(times)
  stats = found[0]
  assert (stats.rows, stats.first, stats.last) == (
      5000, times.min(), times.max())
  assert stats.repeats == int((steps == 0).sum())
  assert stats.out_of_order == int((steps < 0).sum()) and not stats.ordered
  want = np.sort(steps[steps > 0])
  from transforms.modalities.sensor import windows as sensor_windows  # pylint: disable=import-outside-toplevel
  assert (sensor_windows.sketch_median(stats.intervals)
          == want[(len(want) - 1) // 2])


def test_the_sample_logs_repeat_rows_and_have_a_dropout(tmp_path):
  """The generated sample (README, the engine tests) has what the rules
  are for: rotated files that repeat 5 rows each, a 5 s dropout."""
  from pipelines import sample_data  # pylint: disable=import-outside-toplevel
  sample_data.generate_sensor(str(tmp_path))
  out = tmp_path / 'ds'
  manifest = preprocess.run(
      ['--modality', 'sensor', '--input', str(tmp_path / 'logs'),
       '--output', str(out), '--timestamp_column', 'time',
       '--entity_column', 'device', '--label_column', 'activity',
       '--window_length', '40', '--window_stride', '20'] + LOCAL)
  total = manifest['sensor']['time']['total']
  assert total['duplicates_dropped'] == 10 and total['conflicting_rows'] == 0
  assert total['gaps'] == 1 and total['longest_gap_ns'] > 5 * 10**9
  assert manifest['sensor']['windows']['lost_to_gaps'] > 0
  readback.assert_valid(out)


def _coarse_clock_logs(src):
  """One subject's 64 Hz log rotated into three files that repeat 5 rows,
  its times read from a clock that ticks every 50 ms (three or four
  samples share each time, as with loggers that stamp samples with a
  coarse system timer)."""
  rows = sensorlogs.write_logs(src, entities=('S01',), rotated=True,
                               time_format='ns')
  tick = 50 * 10**6
  for name in rows['file'].unique():
    path = src / name
    table = pd.read_csv(path)
    table['time'] = table['time'] // tick * tick
    table.to_csv(path, index=False)
  return rows.assign(time=rows['time'] // tick * tick)


def test_a_coarse_clock_conflicts_unless_times_keep_file_order(tmp_path):
  src = tmp_path / 'logs'
  rows = _coarse_clock_logs(src)
  assert rows.duplicated(['time']).sum() > len(rows) // 2
  flags = ['--modality', 'sensor', '--input', str(src)] + (
      sensorlogs.pipeline_flags('ns')) + WINDOWS + SPLIT + LOCAL
  # Rows of one time that differ are conflicts by default: refused.
  with pytest.raises(preprocess.DataQualityError, match='dead-lettered'):
    preprocess.run(flags + ['--output', str(tmp_path / 'refused')])
  out = tmp_path / 'ds'
  manifest = preprocess.run(flags + ['--output', str(out), '--same_time',
                                     'file_order'])
  assert manifest['sensor']['same_time'] == 'file_order'
  [shape] = manifest['sensor']['time']['entities'].values()
  # The rotations' 10 repeated rows dropped, every sample else kept.
  assert (shape['rows'], shape['observations']) == (6410, 6400)
  assert shape['duplicates_dropped'] == 10 and shape['conflicting_rows'] == 0
  assert shape['median_interval_ns'] == 50 * 10**6 and shape['gaps'] == 0
  assert shape['windows']['formed'] == 99
  # Windows hold the samples in the order of time, file name and row
  # (within a 50 ms tick that two files share, file names decide), less
  # the rows that repeat one of their time in an earlier file.
  records = _records(out)
  ordered = rows.sort_values(['time', 'file', 'row'], kind='stable')
  repeat = ordered.duplicated(['time', 'label'] + list(sensorlogs.CHANNELS))
  assert repeat.sum() == 10
  values = ordered[~repeat][list(sensorlogs.CHANNELS)].to_numpy(np.float32)
  for window_id, (_, f) in records.items():
    start = int(window_id.rsplit('#', 1)[1])
    np.testing.assert_array_equal(f['values'].reshape(128, -1),
                                  values[start:start + 128])
  readback.assert_valid(out)
