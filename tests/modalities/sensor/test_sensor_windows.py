"""Windowing, chunking and split functions of the sensor modality."""

import numpy as np
import pytest

from transforms.core import splits as split_lib
from transforms.modalities.sensor import config
from transforms.modalities.sensor import stream_windower
from transforms.modalities.sensor import windows


def _brute_force(times, values, labels, length, stride, rule):
  """Windows of one entity's rows, all in memory (the reference)."""
  order = np.lexsort((np.arange(len(times)), times))
  t, v, lab = times[order], values[order], labels[order]
  out = []
  for start in range(0, len(t) - length + 1, stride):
    seg = lab[start:start + length]
    if rule == 'last':
      label = seg[-1]
    else:
      names, counts = np.unique(seg, return_counts=True)
      label = names[np.argmax(counts)]
    out.append((start, t[start], t[start + length - 1],
                v[start:start + length], label))
  return out


def _chunked(times, values, labels, length, stride, rule, chunk_rows):
  """The same windows, built chunk by chunk as the pipeline does."""
  n = len(times)
  chunk = windows.chunk_index(times, int(times.min()), int(times.max()), n,
                              chunk_rows)
  counts = {int(c): int((chunk == c).sum()) for c in np.unique(chunk)}
  offsets = dict(zip(sorted(counts), np.cumsum(
      [0] + [counts[c] for c in sorted(counts)]).tolist()))
  rows = np.arange(n)
  built, fragments = [], {}
  split = np.zeros(n, np.int8)
  for c in counts:
    mask = chunk == c
    order = windows.sort_rows(times[mask], np.zeros(mask.sum(), np.int64),
                              rows[mask])
    offset = offsets[c]
    t, v, lab, sp = (times[mask][order], values[mask][order],
                     labels[mask][order], split[mask][order])
    starts, frags = windows.segment_windows([0, n], offset, offset + len(t),
                                            length, stride)
    local = starts - offset
    names, codes = np.unique(lab, return_inverse=True)
    chosen = windows.window_labels(codes, local, length, rule, len(names))
    for s, l in zip(local.tolist(), chosen.tolist()):
      built.append((offset + s, t[s], t[s + length - 1],
                    v[s:s + length], names[l]))
    for k, pos, lo, hi in frags:
      fragments.setdefault(k, []).append(
          (pos, t[lo:hi], v[lo:hi], lab[lo:hi], sp[lo:hi]))
  for k, pieces in fragments.items():
    whole = windows.assemble(pieces, length)
    assert whole is not None, f'window {k} has a gap'
    t, v, lab, _ = whole
    names, codes = np.unique(lab, return_inverse=True)
    [l] = windows.window_labels(codes, np.array([0]), length, rule, len(names))
    built.append((k, t[0], t[-1], v, names[l]))
  return sorted(built, key=lambda w: w[0])


@pytest.mark.parametrize('length,stride,chunk_rows', [
    (50, 25, 1000), (50, 25, 60), (7, 3, 10), (5, 5, 1000), (10, 1, 25),
    (30, 40, 45), (200, 25, 60)])
@pytest.mark.parametrize('rule', ['last', 'majority'])
def test_chunked_windows_equal_the_in_memory_windows(length, stride,
                                                    chunk_rows, rule):
  rng = np.random.default_rng(length * 1000 + stride)
  n = 1237
  # Irregular sampling with repeated timestamps, shuffled input order.
  times = np.cumsum(rng.integers(0, 3, n)).astype(np.int64) * 10**9
  perm = rng.permutation(n)
  times = times[perm]
  values = rng.normal(size=(n, 3))
  labels = np.array(['a', 'b', 'c'])[rng.integers(0, 3, n)]
  expected = _brute_force(times, values, labels, length, stride, rule)
  got = _chunked(times, values, labels, length, stride, rule, chunk_rows)
  assert len(got) == len(expected) == windows.window_count(n, length, stride)
  for (s1, a1, b1, v1, l1), (s2, a2, b2, v2, l2) in zip(got, expected):
    assert (s1, a1, b1, l1) == (s2, a2, b2, l2)
    np.testing.assert_array_equal(v1, v2)


def test_window_count():
  assert windows.window_count(100, 50, 25) == 3
  assert windows.window_count(49, 50, 25) == 0
  assert windows.window_count(50, 50, 25) == 1
  assert windows.window_count(10, 3, 3) == 3


def test_majority_ties_go_to_the_smallest_code():
  codes = np.array([1, 0, 1, 0])
  assert windows.window_labels(codes, np.array([0]), 4, 'majority', 2) == [0]
  assert windows.window_labels(codes, np.array([0]), 3, 'majority', 2) == [1]
  assert windows.window_labels(codes, np.array([0, 1]), 2, 'last', 2).tolist(
  ) == [0, 1]


def test_assemble_refuses_gaps_and_short_windows():
  piece = lambda pos, n: (pos, np.arange(n), np.zeros((n, 1)),
                          np.array(['a'] * n), np.zeros(n, np.int8))
  assert windows.assemble([piece(0, 3), piece(3, 2)], 5) is not None
  assert windows.assemble([piece(3, 2), piece(0, 3)], 5)[0].tolist() == [
      0, 1, 2, 0, 1]
  assert windows.assemble([piece(0, 3), piece(4, 1)], 5) is None
  assert windows.assemble([piece(0, 3)], 5) is None


def test_chunks_follow_time_and_hold_about_chunk_rows():
  times = np.arange(10_000, dtype=np.int64) * 10**9
  chunk = windows.chunk_index(times, 0, int(times[-1]), 10_000, 1000)
  assert chunk.min() == 0 and chunk.max() == 9
  assert np.all(np.diff(chunk) >= 0)
  assert max(np.bincount(chunk)) <= 1001
  # One chunk when the entity is small or its times are all equal.
  assert windows.chunk_index(times[:5], 0, 4, 5, 1000).tolist() == [0] * 5
  assert windows.chunk_index(np.zeros(5, np.int64), 0, 0, 5000, 1000).tolist(
  ) == [0] * 5


def test_time_splits_and_parse_time():
  cut = [config.parse_time('2024-03-01'),
         config.parse_time('2024-03-15T00:00Z')]
  times = np.array([config.parse_time('2024-02-28T23:59:59'),
                    config.parse_time('2024-03-01T00:00:00+00:00'),
                    config.parse_time('2024-03-20T00:00:00+02:00')])
  assert windows.time_splits(times, cut).tolist() == [0, 1, 2]
  assert config.parse_time('1700000000', 's') == 1700000000 * 10**9
  assert config.parse_time('1.5', 'ms') == 1_500_000
  assert config.parse_time('2024-03-01T02:00:00+02:00') == cut[0]
  with pytest.raises(ValueError, match='not an ISO-8601 time'):
    config.parse_time('yesterday')
  assert config.format_time(cut[0]).startswith('2024-03-01T00:00:00')


def test_hash_splits_are_stable_and_follow_ratios():
  ids = [f'dev{i}' for i in range(2000)]
  ratios = [('train', 0.8), ('validation', 0.1), ('test', 0.1)]
  names = [n for n, _ in ratios]
  a = split_lib.hash_splits(ids, ratios, names)
  assert a.tolist() == split_lib.hash_splits(ids, ratios, names).tolist()
  share = np.bincount(a, minlength=3) / len(ids)
  assert abs(share[0] - 0.8) < 0.04 and abs(share[2] - 0.1) < 0.03


@pytest.mark.parametrize('keys', [
    ['b', 'a', 'b', 'c', 'a', 'b'],
    ['dev\u00e9', 'dev', 'Dev', 'dev\u00e9', '', 'z', '\u732b', 'dev'],
    [3, 1, 3, 2],  # not text: grouped by their text, as numbers' str
    ['1', 1, 'x', None, 'None', 1.5],
    [],
    [f'dev{i % 37:03d}' for i in range(5000)],
])
def test_group_rows_is_a_stable_grouping_in_key_order(keys):
  # The rows of each key, in their order, keys sorted as text (code
  # points): what numpy's unique of the keys as str gives.
  keys = np.array(keys, dtype=object)
  as_text = keys.astype(str)
  want = [(k, np.flatnonzero(as_text == k)) for k in np.unique(as_text)]
  got = windows.group_rows(keys)
  assert [k for k, _ in got] == [str(k) for k, _ in want]
  assert all(isinstance(k, str) for k, _ in got)
  for (_, rows), (_, expected) in zip(got, want):
    assert rows.tolist() == expected.tolist()
  unicode = windows.group_rows(as_text)
  assert [(k, r.tolist()) for k, r in unicode] == [
      (k, r.tolist()) for k, r in got]


def test_group_rows_past_16_bit_key_numbers():
  keys = np.array([f'k{i}' for i in range(40000)] * 2, dtype=object)
  got = windows.group_rows(keys)
  assert len(got) == 40000
  assert got[0][0] == 'k0' and got[0][1].tolist() == [0, 40000]
  assert all(len(rows) == 2 for _, rows in got)


def test_label_codes_over_batches_give_what_unique_of_the_names_gives():
  # Batches of one file: labels that come and go, non-ASCII, empty, a
  # trailing NUL (str arrays drop it, so 'b\x00' is 'b'), numbers.
  batches = [['walk', 'run', 'walk', ''], ['été', 'b', 'run'],
             ['b\x00', 'walk', 'Z', 7], ['zz'] * 3]
  table = windows.LabelCodes()
  held_codes, held_names = [], []
  for batch in batches:
    labels = np.array(batch, dtype=object)
    codes = table.codes(labels)
    assert codes.dtype == np.int32
    assert table.names[codes].tolist() == labels.astype(str).tolist()
    held_codes.append(codes)
    held_names.append(labels.astype(str))
    # Rows held over several batches, as the stream windower joins them.
    codes_so_far = np.concatenate(held_codes)
    names_so_far = np.concatenate(held_names)
    want_names, want_index = np.unique(names_so_far, return_inverse=True)
    got_names, got_index = windows.sorted_labels(codes_so_far, table.names)
    assert got_names.tolist() == want_names.tolist()
    assert got_index.tolist() == want_index.tolist()
  assert sorted(table.names.tolist()) == sorted(
      {'walk', 'run', '', 'été', 'b', 'Z', '7', 'zz'})
  empty = table.codes(np.array([], dtype=object))
  assert empty.dtype == np.int32 and len(empty) == 0


def _segments_brute_force(times, max_gap, length, stride):
  """Global starts of the windows of one entity's sorted times, cut at
  gaps, by plain iteration."""
  cuts = [i for i in range(1, len(times))
          if max_gap is not None and times[i] - times[i - 1] > max_gap]
  starts = []
  for a, b in zip([0] + cuts, cuts + [len(times)]):
    starts += list(range(a, b - length + 1, stride))
  return starts


@pytest.mark.parametrize('seed', range(40))
def test_segment_windows_over_chunks_give_each_window_once(seed):
  rng = np.random.default_rng(seed)
  n = int(rng.integers(0, 90))
  length, stride = int(rng.integers(1, 12)), int(rng.integers(1, 15))
  times = np.cumsum(rng.choice([1, 1, 1, 2, 9], n)).astype(np.int64)
  cuts = windows.gap_positions(times, 3).tolist()
  bounds = [0] + cuts + [n]
  want = _segments_brute_force(times, 3, length, stride)
  edges = sorted({0, n} | set(rng.integers(0, n + 1, 4).tolist()))
  inside, pieces = [], {}
  for lo, hi in zip(edges, edges[1:]):
    starts, fragments = windows.segment_windows(bounds, lo, hi, length, stride)
    assert all(lo <= s and s + length <= hi for s in starts.tolist())
    inside += starts.tolist()
    for start, position, r0, r1 in fragments:
      assert 0 <= r0 < r1 <= hi - lo
      pieces.setdefault(start, []).append(
          (position, np.arange(lo + r0, lo + r1), np.zeros((r1 - r0, 1)),
           np.zeros(r1 - r0), np.zeros(r1 - r0, np.int8)))
  crossing = []
  for start, parts in pieces.items():
    whole = windows.assemble(parts, length)
    assert whole is not None, f'window {start} is not whole'
    assert whole[0].tolist() == list(range(start, start + length))
    crossing.append(start)
  assert sorted(inside + crossing) == want
  assert len(set(inside) & set(crossing)) == 0


@pytest.mark.parametrize('seed', range(20))
def test_the_stream_windower_cuts_at_gaps_like_the_sorted_series(seed):
  rng = np.random.default_rng(seed)
  n = int(rng.integers(1, 200))
  length, stride = int(rng.integers(1, 12)), int(rng.integers(1, 15))
  times = np.cumsum(rng.choice([1, 1, 1, 2, 9], n)).astype(np.int64)
  values = np.arange(n, dtype=np.float32)[:, None]
  streamer = stream_windower.StreamWindower(length, stride, {'e': 3})
  got = []
  edges = sorted({0, n} | set(rng.integers(0, n + 1, 5).tolist()))
  for lo, hi in zip(edges, edges[1:]):
    done = streamer.add('e', times[lo:hi], values[lo:hi],
                        np.zeros(hi - lo, np.int32), np.zeros(hi - lo,
                                                              np.int8))
    if done is not None:
      global_starts, starts, _, vals, _, _ = done
      for g, s in zip(global_starts.tolist(), starts.tolist()):
        # The window's rows are the observations g .. g + length - 1.
        assert vals[s:s + length, 0].tolist() == list(range(g, g + length))
      got += global_starts.tolist()
  want = _segments_brute_force(times, 3, length, stride)
  assert got == want
  [(entity, shape)] = streamer.shapes()
  gaps = int(np.sum(np.diff(times) > 3))
  assert entity == 'e'
  assert (shape['observations'], shape['gaps'], shape['segments'],
          shape['in_segments']) == (n, gaps, gaps + 1, len(want))
  assert shape['longest_gap_ns'] == (9 if gaps else 0)


def test_rows_at_one_time_are_one_observation_or_all_conflicting():
  times = np.array([1, 2, 2, 2, 3, 3, 4, 4, 5])
  values = np.array([[0.], [1], [1], [1], [2], [2.5], [np.nan], [np.nan],
                     [3]])
  labels = np.array(['a', 'a', 'a', 'a', 'a', 'a', 'b', 'b', 'b'])
  kept, conflicting, duplicates, runs = windows.duplicate_runs(times, values,
                                                               labels)
  # Time 2: three equal rows (one kept); 3: values differ (both out);
  # 4: NaN equals NaN (one kept).
  assert kept.tolist() == [1, 1, 0, 0, 0, 0, 1, 0, 1]
  assert conflicting.tolist() == [0, 0, 0, 0, 1, 1, 0, 0, 0]
  assert duplicates == 3 and runs == [(4, 6)]
  # A label that differs is a conflict too.
  labels[3] = 'b'
  kept, conflicting, duplicates, runs = windows.duplicate_runs(times, values,
                                                               labels)
  assert conflicting[1:4].all() and not kept[1:4].any()
  assert duplicates == 1 and runs == [(1, 4), (4, 6)]


def test_the_median_interval_is_exact_for_loggers_and_close_for_jitter():
  regular = np.full(1000, 15_625_000)
  assert windows.sketch_median(windows.interval_sketch(regular)) == 15_625_000
  # Lower middle of an even count, over merged sketches.
  a, b = windows.interval_sketch(np.array([1, 2])), windows.interval_sketch(
      np.array([3, 4]))
  assert windows.sketch_median(windows.merge_sketches(a, b)) == 2
  assert windows.sketch_median(windows.merge_sketches(None, None)) is None
  rng = np.random.default_rng(0)
  jittered = rng.normal(15_625_000, 1_000_000, 20_000).astype(np.int64)
  parts = [windows.interval_sketch(p) for p in np.array_split(jittered, 7)]
  merged = parts[0]
  for part in parts[1:]:
    merged = windows.merge_sketches(merged, part)
  assert merged[0] == 'bins'  # too many distinct intervals to count
  assert abs(windows.sketch_median(merged) / np.median(jittered) - 1) < 0.011


def test_max_gap_and_window_span_bound():
  assert windows.entity_max_gap(config.AUTO_GAP, 100) == 300
  assert windows.entity_max_gap(config.AUTO_GAP, None) is None
  assert windows.entity_max_gap(None, 100) is None
  assert windows.entity_max_gap(5_000, 100) == 5_000
  assert windows.span_bound(128, 100, 300) == 128 * 100 + 300
  assert windows.span_bound(128, 100, None) is None
  assert config.parse_duration('2s') == 2 * 10**9
  assert config.parse_duration('500ms') == 500 * 10**6
  assert config.parse_duration('1.5', 'ms') == 1_500_000
  assert config.parse_duration('1min') == 60 * 10**9
  for bad in ('soon', '-2s', '0'):
    with pytest.raises(ValueError):
      config.parse_duration(bad)


def test_grid_points_interpolate_and_take_the_label_before():
  time = np.array([0, 10, 20, 35, 40])
  values = np.arange(5, dtype=np.float32)[:, None] * 10
  labels = np.array(list('abcde'))
  grid, vals, lab, split, filled = windows.grid_points(
      time, values, labels, np.zeros(5, np.int8), 10, 0)
  assert grid.tolist() == [0, 10, 20, 30, 40]
  np.testing.assert_allclose(vals[:, 0], [0, 10, 20, 20 + 10 * 10 / 15, 40],
                             rtol=1e-6)
  assert lab.tolist() == ['a', 'b', 'c', 'c', 'e']
  # 30 is 5 (half a period) from its nearest observation: filled.
  assert filled == 1 and split.tolist() == [0] * 5
  # Splits by time follow the grid time, not the observation before it.
  _, _, _, split, _ = windows.grid_points(time, values, labels,
                                          np.zeros(5, np.int8), 10, 0,
                                          cutoffs=[25])
  assert split.tolist() == [0, 0, 0, 1, 1]
  # In two pieces, the second knowing the observation before it.
  first = windows.grid_points(time[:3], values[:3], labels[:3],
                              np.zeros(3, np.int8), 10, 0)
  second = windows.grid_points(time[3:], values[3:], labels[3:],
                               np.zeros(2, np.int8), 10, 0,
                               prev=(20, values[2], 'c', 0))
  assert first[0].tolist() + second[0].tolist() == grid.tolist()
  assert windows.grid_count(40, 0, 10, prev=20) == 2
  assert windows.grid_count(20, 0, 10) == 3


@pytest.mark.parametrize('seed', range(20))
def test_the_stream_windower_resamples_like_each_whole_segment(seed):
  rng = np.random.default_rng(seed)
  n = int(rng.integers(1, 120))
  length, stride = int(rng.integers(1, 8)), int(rng.integers(1, 6))
  period, max_gap = int(rng.integers(3, 15)), 40
  times = np.cumsum(rng.choice([7, 10, 10, 13, 60], n)).astype(np.int64)
  values = rng.normal(size=(n, 2)).astype(np.float32)
  labels = rng.integers(0, 3, n).astype(np.int32)
  splits = np.zeros(n, np.int8)
  cuts = windows.gap_positions(times, max_gap).tolist()
  grids, want, offset = [], [], 0
  for a, b in zip([0] + cuts, cuts + [n]):
    grid = windows.grid_points(times[a:b], values[a:b], labels[a:b],
                               splits[a:b], period, int(times[a]))
    grids.append(grid)
    want += [offset + k * stride
             for k in range(windows.window_count(len(grid[0]), length, stride))]
    offset += len(grid[0])
  grid_time = np.concatenate([g[0] for g in grids])
  grid_values = np.concatenate([g[1] for g in grids])
  streamer = stream_windower.StreamWindower(length, stride, {'e': max_gap}, period)
  got = []
  edges = sorted({0, n} | set(rng.integers(0, n + 1, 4).tolist()))
  for lo, hi in zip(edges, edges[1:]):
    done = streamer.add('e', times[lo:hi], values[lo:hi], labels[lo:hi],
                        splits[lo:hi])
    if done is not None:
      global_starts, starts, time, vals, _, _ = done
      for g, s in zip(global_starts.tolist(), starts.tolist()):
        assert time[s:s + length].tolist() == grid_time[
            g:g + length].tolist()
        np.testing.assert_allclose(vals[s:s + length],
                                   grid_values[g:g + length])
      got += global_starts.tolist()
  assert got == want
  [(_, shape)] = streamer.shapes()
  assert shape['rows_resampled'] == len(grid_time)
  assert shape['rows_filled'] == sum(g[4] for g in grids)


def test_same_time_in_file_order_keeps_samples_and_drops_repeats():
  # Time 1: two samples of one file; 2: file 1 repeats file 0's rows;
  # 3: file 1 repeats one row and adds another (kept after file 0's).
  times = np.array([1, 1, 2, 2, 2, 2, 3, 3, 3, 4])
  sources = np.array([0, 0, 0, 0, 1, 1, 0, 1, 1, 0])
  values = np.array([[1.], [2], [3], [4], [3], [4], [5], [5], [6], [7]])
  labels = np.array(['a'] * 10)
  kept, conflicting, duplicates, runs = windows.duplicate_runs(
      times, values, labels, sources)
  assert kept.tolist() == [1, 1, 1, 1, 0, 0, 1, 0, 1, 1]
  assert not conflicting.any() and runs == [] and duplicates == 3
  # Equal rows of one time in one file are two samples (a flat signal).
  kept, _, duplicates, _ = windows.duplicate_runs(
      np.array([5, 5]), np.array([[1.], [1.]]), np.array(['a', 'a']),
      np.array([0, 0]))
  assert kept.tolist() == [1, 1] and duplicates == 0
