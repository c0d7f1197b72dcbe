"""The sensor modality's chunked path in a TestPipeline.

Entities whose rows are not in strictly increasing time in one file go
the chunked way (`pipeline.chunked_series`): `_key_by_chunk` cuts row
batches into pieces by (entity, time chunk), each chunk is gathered,
sorted and made one row per observation (`SortChunks`: repeated rows
dropped, conflicting ones dead-lettered), the entity's sampling interval
and max gap come from its sorted observations, each chunk finds its gaps,
each entity's plan says where its chunks start and where its segments
are, the windows inside a chunk are built there and the fragments of the
others are put together by `_assemble`. This runs that wiring with chunks
a few rows long, so that most windows and several gaps cross chunk
boundaries, and compares every window (id, label, times, values, split),
the dead letters and the counts with a plain NumPy reading of the rules
on each entity's sorted rows.
"""

# pylint: disable=protected-access

import collections
import dataclasses
import itertools

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import numpy as np

from transforms.modalities.sensor import config
from transforms.modalities.sensor import entity_statistics
from transforms.modalities.sensor import example_batches
from transforms.modalities.sensor import preprocessing
from transforms.modalities.sensor import stream_windower
from transforms.modalities.sensor import time_chunks
from transforms.modalities.sensor import windows as sensor_windows

START = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z in ns
SOURCES = ('a.csv', 'b.csv')  # the files the rows are spread over
LABELS = np.array(['run', 'sit', 'walk'])
SPLIT_NAMES = ['train', 'test']
CHANNELS = 2
# Rows per entity: one shorter than any window, one whose rows all have the
# same time but differ (every row conflicts: no observation at all).
ENTITY_ROWS = {'dev0': 61, 'dev1': 45, 'dev2': 4, 'dev3': 23}
SAME_TIME = 'dev3'
BATCH_ROWS = 17
GAP_S = 30  # the seconds of the dropouts put into the series


def _settings(length, stride, rule, chunk_rows, cutoff):
  return config.SensorConfig(
      timestamp_column='time', timestamp_unit='s', entity_column='device',
      label_column='label', channels=(), window_length=length,
      window_stride=stride, window_label=rule, missing='drop',
      split_by='time', time_cutoffs=(cutoff,), bucketize=0,
      chunk_rows=chunk_rows)


def _series(seed=0):
  """Every row: (entity, time, source, row number in the source, label,
  values); times 1 to 3 s apart (mostly 1) with two dropouts of GAP_S per
  entity; a
  time repeats now and then, mostly as an equal row (a duplicate),
  sometimes with other values (a conflict); rows are out of time order
  in the files."""
  rng = np.random.default_rng(seed)
  rows = []
  for entity, n in ENTITY_ROWS.items():
    if entity == SAME_TIME:
      steps = np.zeros(n, np.int64)
    else:
      steps = rng.choice([0, 1, 1, 1, 3], n)
      steps[n // 3] = steps[2 * n // 3] = GAP_S
    times = START + np.cumsum(steps) * 10**9
    labels = LABELS[rng.integers(0, len(LABELS), n)]
    values = rng.normal(size=(n, CHANNELS)).astype(np.float32)
    for i in range(1, n):
      if steps[i] == 0 and entity != SAME_TIME and rng.random() < 0.8:
        labels[i], values[i] = labels[i - 1], values[i - 1]
    for t, label, v in zip(times.tolist(), labels.tolist(), values):
      rows.append([entity, t, SOURCES[rng.integers(len(SOURCES))], label, v])
  order = rng.permutation(len(rows))
  rows = [rows[i] for i in order]
  numbered, next_row = [], collections.Counter()
  for entity, t, source, label, v in rows:
    numbered.append((entity, t, source, next_row[source], label, v))
    next_row[source] += 1
  return numbered


def _batches(rows, cutoff):
  """The rows as ParseRows emits them: per file, batches of arrays."""
  out = []
  for source in SOURCES:
    mine = [r for r in rows if r[2] == source]
    for lo in range(0, len(mine), BATCH_ROWS):
      part = mine[lo:lo + BATCH_ROWS]
      time = np.array([r[1] for r in part], np.int64)
      out.append({
          'source': source,
          'row': np.array([r[3] for r in part], np.int64),
          'time': time,
          'entity': np.array([r[0] for r in part], object),
          'label': np.array([r[4] for r in part], object),
          'values': np.stack([r[5] for r in part]),
          'split': sensor_windows.time_splits(time, [cutoff]),
      })
  return out


def _entity_stats(rows):
  """{entity: EntityStats} as the statistics pass finds them (in two
  files, not in time order: every entity goes the chunked way)."""
  stats = {}
  for entity in ENTITY_ROWS:
    times = [r[1] for r in rows if r[0] == entity]
    stats[entity] = entity_statistics.EntityStats(
        len(times), min(times), max(times), None, False)
  return stats


def _observations(rows, entity):
  """The entity's rows sorted by (time, file, row number), one per time:
  (kept rows, conflicting rows, duplicates dropped)."""
  mine = sorted((r for r in rows if r[0] == entity),
                key=lambda r: (r[1], r[2], r[3]))
  kept, conflicting, duplicates = [], [], 0
  for _, group in itertools.groupby(mine, key=lambda r: r[1]):
    group = list(group)
    if all(r[4] == group[0][4] and np.array_equal(r[5], group[0][5])
           for r in group):
      kept.append(group[0])
      duplicates += len(group) - 1
    else:
      conflicting += group
  return kept, conflicting, duplicates


def _expected(rows, sc, cutoff):
  """({window id: (entity, label, start, end, values, split)}, {entity:
  (duplicates, conflicting rows, gaps, windows too long)}, conflicting row
  ids): the rules read plainly, on each entity's sorted rows."""
  length, stride = sc.window_length, sc.window_stride
  out, counts, dead = {}, {}, set()
  for entity in ENTITY_ROWS:
    mine, conflicting, duplicates = _observations(rows, entity)
    dead |= {f'{r[2]}:{r[3]}' for r in conflicting}
    time = np.array([r[1] for r in mine], np.int64)
    steps = np.diff(time)
    median = int(np.sort(steps)[(len(steps) - 1) // 2]) if len(
        steps) else None
    max_gap = None if median is None else 3 * median
    cuts = ([i + 1 for i, d in enumerate(steps.tolist()) if d > max_gap]
            if max_gap is not None else [])
    too_long = 0
    for a, b in zip([0] + cuts, cuts + [len(mine)]):
      for start in range(a, b - length + 1, stride):
        if time[start + length - 1] - time[start] > (
            length * median + max_gap):
          too_long += 1
          continue
        seg = [r[4] for r in mine[start:start + length]]
        if sc.window_label == 'last':
          label = seg[-1]
        else:  # majority; ties go to the smallest name
          tally = collections.Counter(seg)
          label = min(l for l in tally if tally[l] == max(tally.values()))
        first, last = [int(time[i] >= cutoff) for i in
                       (start, start + length - 1)]
        out[f'{entity}#{start}'] = (
            entity, label, int(time[start]), int(time[start + length - 1]),
            np.stack([r[5] for r in mine[start:start + length]]),
            first if first == last else -1)
    counts[entity] = (duplicates, len(conflicting), len(cuts), too_long)
  return out, counts, dead


def _windows_of(batch):
  """A window batch -> one tuple per window."""
  for i, window_id in enumerate(batch[preprocessing.ID]):
    yield (window_id, batch[preprocessing.ENTITY][i],
           batch[preprocessing.LABEL_TEXT][i],
           int(batch[preprocessing.START_TIME][i]),
           int(batch[preprocessing.END_TIME][i]),
           np.asarray(batch[preprocessing.VALUES][i]), int(batch['split'][i]))


def _check_windows(expected):

  def check(windows):
    ids = [w[0] for w in windows]
    duplicates = [i for i, n in collections.Counter(ids).items() if n > 1]
    assert not duplicates, f'windows built twice: {duplicates}'
    missing = sorted(set(expected) - set(ids))
    extra = sorted(set(ids) - set(expected))
    assert not missing and not extra, f'missing {missing}, extra {extra}'
    for window_id, entity, label, start, end, values, split in windows:
      e_entity, e_label, e_start, e_end, e_values, e_split = expected[
          window_id]
      assert (entity, label, start, end, split) == (
          e_entity, e_label, e_start, e_end, e_split), window_id
      assert values.dtype == np.float32 and values.shape == e_values.shape
      np.testing.assert_array_equal(values, e_values, err_msg=window_id)
  return check


def _at_least_one(what):

  def check(counts):
    assert sum(counts) > 0, f'no {what}: the test does not exercise them'
  return check


def test_chunked_windows_equal_windows_of_the_sorted_series():
  rows = _series()
  times = sorted(r[1] for r in rows)
  cutoff = times[len(times) // 2]
  batches = _batches(rows, cutoff)
  stats = _entity_stats(rows)
  configs = {
      # Overlapping windows of 7 rows over chunks of about 10 rows.
      'Last': _settings(7, 3, 'last', 10, cutoff),
      # Gaps between windows, chunks of about 4 rows: windows over three
      # chunks, majority labels with ties.
      'Majority': _settings(5, 6, 'majority', 4, cutoff),
  }
  with TestPipeline() as p:
    batch_pc = p | beam.Create(batches)
    entity_dict = beam.pvalue.AsDict(
        p | "EntityStats" >> beam.Create(sorted(stats.items())))
    for tag, sc in configs.items():
      expected, counts, dead = _expected(rows, sc, cutoff)
      assert sum(c[0] for c in counts.values()) > 0, 'no duplicates'
      assert sum(c[2] for c in counts.values()) >= 4, 'too few gaps'
      assert counts[SAME_TIME][1] == ENTITY_ROWS[SAME_TIME]
      if tag == 'Last':
        assert sum(c[3] for c in counts.values()) > 0, 'no window too long'
      out = time_chunks.chunked_series(sc, SPLIT_NAMES, entity_dict,
                                           batch_pc, tag)
      windows = ((out['windows'], out['crossing'])
                 | f'AllWindows{tag}' >> beam.Flatten()
                 | f'OneEach{tag}' >> beam.FlatMap(_windows_of))
      assert_that(windows, _check_windows(expected), label=f'Windows{tag}')
      for name in ('windows', 'crossing'):
        assert_that(out[name] | f'Count{name}{tag}' >> beam.Map(
            lambda b: len(b[preprocessing.ID])),
                    _at_least_one(f'{name} windows'),
                    label=f'Some{name}{tag}')
      # Every observation is windowed once, in its split.
      observations = [r for e in ENTITY_ROWS
                      for r in _observations(rows, e)[0]]
      split_rows = np.bincount([int(r[1] >= cutoff) for r in observations],
                               minlength=2).tolist()
      assert_that(out['rows']
                  | f'RowsTotal{tag}' >> beam.Map(
                      lambda r: np.asarray(r[1], np.int64))
                  | f'SumRows{tag}' >> beam.CombineGlobally(
                      lambda arrays: sum(arrays, np.zeros(2, np.int64)))
                  | f'RowsList{tag}' >> beam.Map(lambda a: a.tolist()),
                  equal_to([split_rows]), label=f'Rows{tag}')
      # Every conflicting row is dead-lettered, naming the others.
      assert_that(out['dead'] | f'DeadIds{tag}' >> beam.Map(
          lambda d: d['input']), equal_to(sorted(dead)),
                  label=f'Dead{tag}')
      shapes = (out['shapes'] | f'AllShapes{tag}' >> beam.Flatten()
                | f'Shapes{tag}' >> beam.CombinePerKey(
                    sensor_windows.SeriesShape.merge)
                | f'ShapeCounts{tag}' >> beam.Map(lambda kv: (kv[0], (
                    kv[1]['duplicates_dropped'], kv[1]['conflicting_rows'],
                    kv[1]['gaps'], kv[1]['too_long']))))
      assert_that(shapes, equal_to(sorted(counts.items())),
                  label=f'Counts{tag}')


def _streamed_grid_windows(rows, sc, cutoff):
  """{window id: (entity, label, start, end, values, split)} of each
  entity's observations fed in time order to the stream windower, which
  resamples them while reading: what the chunked way must equal."""
  out = {}
  for entity in ENTITY_ROWS:
    mine = _observations(rows, entity)[0]
    if len(mine) < 2:
      continue
    time = np.array([r[1] for r in mine], np.int64)
    steps = np.sort(np.diff(time))
    max_gap = 3 * int(steps[(len(steps) - 1) // 2])
    names = np.array(sorted({r[4] for r in mine}))
    codes = np.searchsorted(names, [r[4] for r in mine]).astype(np.int32)
    streamer = stream_windower.StreamWindower(sc.window_length, sc.window_stride,
                                             {entity: max_gap}, sc.resample,
                                             (cutoff,))
    done = streamer.add(entity, time, np.stack([r[5] for r in mine]),
                        codes, (time >= cutoff).astype(np.int8))
    if done is None:
      continue
    batch, _ = example_batches.window_batch(entity, *done, sc, names)
    for w in _windows_of(batch):
      out[w[0]] = w[1:]
  return out


def test_chunked_resampled_windows_equal_the_streamed_ones():
  """--resample on the chunked way (each chunk's grid from its segment's
  anchor and the observation before it) against the stream windower on
  each entity's sorted observations, with an entity whose every row
  conflicts (empty chunks) among them."""
  rows = _series()
  times = sorted(r[1] for r in rows)
  cutoff = times[len(times) // 2]
  sc = dataclasses.replace(_settings(7, 3, 'last', 10, cutoff),
                           resample=10**9, resample_text='1s')
  expected = _streamed_grid_windows(rows, sc, cutoff)
  assert len(expected) > 20
  with TestPipeline() as p:
    entity_dict = beam.pvalue.AsDict(
        p | 'EntityStats' >> beam.Create(sorted(_entity_stats(rows).items())))
    out = time_chunks.chunked_series(
        sc, SPLIT_NAMES, entity_dict, p | beam.Create(_batches(rows, cutoff)))
    windows = ((out['windows'], out['crossing'])
               | 'AllWindows' >> beam.Flatten()
               | 'OneEach' >> beam.FlatMap(_windows_of))
    assert_that(windows, _check_windows(expected))
