"""The sensor modality's chunked-window path in a TestPipeline.

Entities whose rows are not in time order in one file are windowed by
(entity, time chunk): `_key_by_chunk` cuts row batches into pieces,
GroupByKey gathers each chunk, `ChunkWindows` sorts it and builds the
windows that lie inside it (with each chunk's offset in the entity's rows
from the row counts of the chunks before it), and the fragments of windows
that cross a chunk boundary are grouped and put together by `_assemble`.
This wires those steps the way transforms/modalities/sensor/pipeline.py's
`_window_examples` does, with chunks a few rows long so that most windows
cross boundaries, and compares every window (id, label, times, values,
split) with windows cut by plain NumPy from each entity's sorted rows.
"""

# pylint: disable=protected-access

import collections

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import numpy as np

from transforms.modalities.sensor import pipeline as sensor_pipeline
from transforms.modalities.sensor import preprocessing as st
from transforms.modalities.sensor import windows as win

START = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z in ns
SOURCES = ('a.csv', 'b.csv')  # the files the rows are spread over
LABELS = np.array(['run', 'sit', 'walk'])
SPLIT_NAMES = ['train', 'test']
CHANNELS = 2
# Rows per entity: one shorter than any window, one whose rows all have the
# same time (a single chunk, ordered by file and row number alone).
ENTITY_ROWS = {'dev0': 61, 'dev1': 45, 'dev2': 4, 'dev3': 23}
SAME_TIME = 'dev3'
BATCH_ROWS = 17


def _settings(length, stride, rule, chunk_rows, cutoff):
  return win.SensorConfig(
      timestamp_column='time', timestamp_unit='s', entity_column='device',
      label_column='label', channels=(), window_length=length,
      window_stride=stride, window_label=rule, missing='drop',
      split_by='time', time_cutoffs=(cutoff,), bucketize=0,
      chunk_rows=chunk_rows)


def _series(seed=0):
  """Every row: (entity, time, source, row number in the source, label,
  values); times repeat and rows are out of time order in the files."""
  rng = np.random.default_rng(seed)
  rows = []
  for entity, n in ENTITY_ROWS.items():
    if entity == SAME_TIME:
      times = np.full(n, START + 10**9, np.int64)
    else:
      times = START + np.cumsum(rng.integers(0, 3, n)) * 10**9
    labels = LABELS[rng.integers(0, len(LABELS), n)]
    values = rng.normal(size=(n, CHANNELS)).astype(np.float32)
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
          'split': win.time_splits(time, [cutoff]),
      })
  return out


def _entity_stats(rows):
  """{entity: EntityStats} as the statistics pass finds them (in two
  files, not in time order: every entity goes the chunked way)."""
  stats = {}
  for entity in ENTITY_ROWS:
    times = [r[1] for r in rows if r[0] == entity]
    stats[entity] = sensor_pipeline.EntityStats(
        len(times), min(times), max(times), None, False)
  return stats


def _expected_windows(rows, sc, cutoff):
  """{window id: (entity, label, start, end, values, split)} cut from each
  entity's rows sorted by (time, file, row number)."""
  length, stride = sc.window_length, sc.window_stride
  out = {}
  for entity in ENTITY_ROWS:
    mine = sorted((r for r in rows if r[0] == entity),
                  key=lambda r: (r[1], r[2], r[3]))
    time = np.array([r[1] for r in mine], np.int64)
    labels = [r[4] for r in mine]
    values = np.stack([r[5] for r in mine])
    split = (time >= cutoff).astype(np.int8)
    for start in range(0, len(mine) - length + 1, stride):
      seg = labels[start:start + length]
      if sc.window_label == 'last':
        label = seg[-1]
      else:  # majority; ties go to the smallest name
        counts = collections.Counter(seg)
        label = min(l for l in counts if counts[l] == max(counts.values()))
      first, last = split[start], split[start + length - 1]
      out[f'{entity}#{start}'] = (
          entity, label, int(time[start]), int(time[start + length - 1]),
          values[start:start + length], int(first if first == last else -1))
  return out


def _windows_of(batch):
  """A window batch -> one tuple per window."""
  for i, window_id in enumerate(batch[st.ID]):
    yield (window_id, batch[st.ENTITY][i], batch[st.LABEL_TEXT][i],
           int(batch[st.START_TIME][i]), int(batch[st.END_TIME][i]),
           np.asarray(batch[st.VALUES][i]), int(batch['split'][i]))


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


def _chunked_windows(p, batches, entity_stats, sc, tag):
  """_window_examples' chunked branch: (windows built inside a chunk,
  assembled crossing windows, rows windowed per chunk)."""
  entity_dict = beam.pvalue.AsDict(
      p | f'EntityStats{tag}' >> beam.Create(sorted(entity_stats.items())))
  pieces = batches | f'KeyByEntityChunk{tag}' >> beam.FlatMap(
      sensor_pipeline._key_by_chunk, entity_dict, sc.chunk_rows)
  offsets = (pieces
             | f'PieceRows{tag}' >> beam.Map(
                 lambda kv: (kv[0], len(kv[1]['row'])))
             | f'RowsPerChunk{tag}' >> beam.CombinePerKey(sum)
             | f'ByEntity{tag}' >> beam.Map(
                 lambda kv: (kv[0][0], (kv[0][1], kv[1])))
             | f'ChunksOfEntity{tag}' >> beam.GroupByKey()
             | f'Offsets{tag}' >> beam.Map(sensor_pipeline._offsets))
  chunked = (pieces
             | f'GroupChunks{tag}' >> beam.GroupByKey()
             | f'WindowChunks{tag}' >> beam.ParDo(
                 sensor_pipeline.ChunkWindows(sc, SPLIT_NAMES),
                 beam.pvalue.AsDict(offsets), entity_dict).with_outputs(
                     'fragments', 'rows', main='windows'))
  assembled = (chunked.fragments
               | f'GroupFragments{tag}' >> beam.GroupByKey()
               | f'AssembleWindows{tag}' >> beam.FlatMap(
                   sensor_pipeline._assemble, sc))
  return chunked.windows, assembled, chunked.rows


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
  split_rows = np.bincount(
      [1 if r[1] >= cutoff else 0 for r in rows], minlength=2).tolist()
  with TestPipeline() as p:
    batch_pc = p | beam.Create(batches)
    for tag, sc in configs.items():
      inside, crossing, windowed = _chunked_windows(p, batch_pc, stats, sc,
                                                    tag)
      windows = ((inside, crossing)
                 | f'AllWindows{tag}' >> beam.Flatten()
                 | f'OneEach{tag}' >> beam.FlatMap(_windows_of))
      assert_that(windows, _check_windows(_expected_windows(rows, sc,
                                                            cutoff)),
                  label=f'Windows{tag}')
      for name, part in (('inside', inside), ('crossing', crossing)):
        assert_that(part | f'Count{name}{tag}' >> beam.Map(
            lambda b: len(b[st.ID])), _at_least_one(f'{name} windows'),
                    label=f'Some{name}{tag}')
      # Every row is windowed once, in its split.
      assert_that(windowed
                  | f'RowsTotal{tag}' >> beam.Map(
                      lambda r: np.asarray(r[1], np.int64))
                  | f'SumRows{tag}' >> beam.CombineGlobally(
                      lambda arrays: sum(arrays, np.zeros(2, np.int64)))
                  | f'RowsList{tag}' >> beam.Map(lambda a: a.tolist()),
                  equal_to([split_rows]), label=f'Rows{tag}')
      assert_that(windowed
                  | f'RowCount{tag}' >> beam.Map(lambda r: r[0])
                  | f'SumRowCount{tag}' >> beam.CombineGlobally(sum),
                  equal_to([len(rows)]), label=f'RowCount{tag}')
