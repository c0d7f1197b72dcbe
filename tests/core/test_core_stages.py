"""The stages every modality shares (transforms/core/skeleton.py), one at a
time: rebalancing decisions (core/rebalance.Plan), the seeded shuffle
(core/shuffle.py), label names (core/labels.py), dead letters
(core/dead_letters.py), the shuffle of record batches and the exported
transform (core/batches.py), the per-split writer with its shard summaries,
fingerprints and `serialized` counter (output/shards.py), and the two ways
output/example_encoding.encode builds records.

The Beam stages run in a TestPipeline on the DirectRunner; Plan and encode
have no Beam in them and are called directly. Expected outputs are computed
here from the inputs (the shuffle tests take an element's place from
shuffle.position, which defines it).
"""

# pylint: disable=import-outside-toplevel

import collections
import glob
import hashlib
import json
import math
import os

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
from apache_beam.transforms.window import GlobalWindows
import numpy as np
import pytest

from pipelines import options as options_lib
from transforms.core import batches
from transforms.core import dead_letters
from transforms.core import labels as labels_lib
from transforms.core import rebalance
from transforms.core import shuffle
from transforms.output import example_encoding
from transforms.output import shards
from transforms.output import tfrecord_files


def counter_sum(result, namespace: str, name: str) -> int:
  """A counter's committed sum (attempted where committed is not kept)."""
  found = result.metrics().query(
      MetricsFilter().with_namespace(namespace).with_name(name))['counters']
  assert found, f'no counter {namespace}/{name}'
  try:
    committed = [c.committed for c in found]
  except (AttributeError, NotImplementedError):
    committed = [None]
  if any(v is None for v in committed):
    return sum(c.attempted for c in found)
  return sum(committed)


# ------------------------------------------------------- rebalance.Plan

TRAIN = {'a': 400, 'b': 150, 'c': 30}
VALIDATION = {'a': 40, 'b': 10}


def _class_counts():
  return ([(('train', k), n) for k, n in TRAIN.items()] +
          [(('validation', k), n) for k, n in VALIDATION.items()])


def _copies_per_class(plan, split, counts):
  """{label: [copies of each of its examples]} under `plan`."""
  return {label: [plan.copies(split, f'{split}/{label}/{i}', label)
                  for i in range(n)]
          for label, n in counts.items()}


def _binomial_tolerance(trials: int, p: float) -> float:
  # Extra copies (oversample) or kept examples (undersample) are a
  # Binomial(trials, p) draw of independent seeded hashes. Four standard
  # deviations: a sound hash misses that band with probability below 1e-4
  # per class, and the hash is fixed per seed, so the test is deterministic.
  return 4 * math.sqrt(trials * p * (1 - p))


@pytest.mark.parametrize('seed', [1, 42, 2026])
def test_plan_oversample_grows_each_class_to_the_largest(seed):
  plan = rebalance.Plan('oversample', ['train'], seed, _class_counts())
  assert plan.mode('train') == 'oversample'
  assert plan.mode('validation') == 'none'
  target = max(TRAIN.values())
  copies = _copies_per_class(plan, 'train', TRAIN)
  for label, n in TRAIN.items():
    whole, rest = divmod(target, n)
    # Each example: floor(target / n) copies, or one more.
    assert set(copies[label]) <= {whole, whole + 1}, label
    total = sum(copies[label])
    if rest:
      assert abs(total - target) <= _binomial_tolerance(n, rest / n), (
          label, total)
      assert whole + 1 in copies[label]
    else:
      assert total == target, label
  # The split that is not rebalanced keeps every example once, even though
  # its classes are just as unequal.
  for label, per_example in _copies_per_class(plan, 'validation',
                                              VALIDATION).items():
    assert per_example == [1] * VALIDATION[label], label
    assert plan.weight('validation', label) == 1.0
  assert plan.weight('train', 'b') == 1.0


def test_plan_undersample_shrinks_each_class_to_the_smallest():
  plan = rebalance.Plan('undersample', ['train'], 7, _class_counts())
  target = min(TRAIN.values())
  copies = _copies_per_class(plan, 'train', TRAIN)
  for label, n in TRAIN.items():
    assert set(copies[label]) <= {0, 1}, label
    kept = sum(copies[label])
    if n == target:
      assert kept == n
    else:
      assert abs(kept - target) <= _binomial_tolerance(n, target / n), (
          label, kept)
  assert all(c == [1] * VALIDATION[k] for k, c in _copies_per_class(
      plan, 'validation', VALIDATION).items())


def test_plan_weight_mode_weighs_every_class_the_same():
  plan = rebalance.Plan('weight', ['train'], 3, _class_counts())
  total, k = sum(TRAIN.values()), len(TRAIN)
  for label, n in TRAIN.items():
    assert plan.copies('train', f'x{label}', label) == 1
    assert plan.weight('train', label) == pytest.approx(total / (k * n))
    # Every class weighs total / k in all.
    assert n * plan.weight('train', label) == pytest.approx(total / k)
  for label in VALIDATION:
    assert plan.weight('validation', label) == 1.0
    assert plan.copies('validation', f'v{label}', label) == 1


def test_plan_decisions_depend_on_seed_and_counts_not_on_their_order():
  counts = _class_counts()
  plan = rebalance.Plan('oversample', ['train'], 5, counts)
  same = rebalance.Plan('oversample', ('train',), 5, list(reversed(counts)))
  other_seed = rebalance.Plan('oversample', ['train'], 6, counts)
  first = _copies_per_class(plan, 'train', TRAIN)
  assert first == _copies_per_class(same, 'train', TRAIN)
  assert first['b'] != _copies_per_class(other_seed, 'train', TRAIN)['b']
  # A split without counts (nothing listed there) keeps examples once.
  empty = rebalance.Plan('oversample', ['test'], 5, counts)
  assert empty.copies('test', 'id', 'a') == 1


# -------------------------------------------------------------- shuffle


class _ArrivalOrder(beam.DoFn):
  """Emits, once per bundle, the elements in the order they arrived (fused
  behind the shuffle's last step, it sees that step's output order)."""

  def start_bundle(self):
    self._seen = []  # pylint: disable=attribute-defined-outside-init

  def process(self, element):
    self._seen.append(element)

  def finish_bundle(self):
    if self._seen:
      yield GlobalWindows.windowed_value(self._seen)


def _check_bucket_order(seed, buckets, keys):
  """Matcher of the arrival lists of SeededShuffle's output (values are
  indices into `keys`): each bucket comes out in one piece, in ascending
  position; the buckets put in bucket order are the seeded order."""
  place = [shuffle.position(str(seed), key) for key in keys]

  def check(arrivals):
    runs = []  # (bucket, [values], arrival list) in arrival order
    for arrived in arrivals:
      for value in arrived:
        b = shuffle.bucket(place[value], buckets)
        if runs and runs[-1][0] == b and runs[-1][2] is arrived:
          runs[-1][1].append(value)
        else:
          runs.append((b, [value], arrived))
    seen_buckets = [b for b, _, _ in runs]
    assert len(seen_buckets) == len(set(seen_buckets)), (
        'a bucket came out in pieces')
    for b, values, _ in runs:
      positions = [place[v] for v in values]
      assert positions == sorted(positions), f'bucket {b} out of order'
    in_bucket_order = [v for _, values, _ in sorted(runs, key=lambda r: r[0])
                       for v in values]
    assert in_bucket_order == sorted(range(len(keys)),
                                     key=lambda v: place[v])
  return check


def test_seeded_shuffle_emits_each_element_once_in_seeded_order():
  n, buckets = 400, 8
  keys = [f'img/{i:04d}.jpg#0' for i in range(n)]
  seeds = (7, 8)
  orders = [sorted(range(n), key=lambda v, s=s: shuffle.position(
      str(s), keys[v])) for s in seeds]
  assert orders[0] != orders[1]  # so each branch below checks its seed
  with TestPipeline() as p:
    keyed = p | beam.Create([(k, i) for i, k in enumerate(keys)])
    for seed in seeds:
      out = keyed | f'Shuffle{seed}' >> shuffle.SeededShuffle(seed, buckets)
      assert_that(out, equal_to(list(range(n))), label=f'Once{seed}')
      assert_that(out | f'Arrival{seed}' >> beam.ParDo(_ArrivalOrder()),
                  _check_bucket_order(seed, buckets, keys),
                  label=f'Order{seed}')


@pytest.mark.parametrize('seed', [0, 7, 'x'])
def test_positions_and_buckets_of_many_keys_are_those_of_one_key(seed):
  # Odd keys (non-ASCII, empty, separators) and enough of them that the
  # places come close to bucket edges.
  keys = ['', '#0', '\x1f', 'été/ü.txt#3', '数据.csv:12#0'] + [
      f'file.csv:{i}#{i % 3}' for i in range(20000)]
  places = shuffle.positions(seed, iter(keys))
  assert places.dtype == np.float64
  assert places.tolist() == [shuffle.position(seed, k) for k in keys]
  for buckets in (1, 16, 1000, 1 << 16):
    assert shuffle.buckets_of(places, buckets).tolist() == [
        shuffle.bucket(u, buckets) for u in places.tolist()]
  # The edges: a place of exactly 1.0 (a digest of all ones rounds up) and
  # places just below a bucket boundary.
  edges = np.array([0.0, 1.0, np.nextafter(0.5, 0), 0.5,
                    np.nextafter(1.0, 0)])
  for buckets in (2, 3, 1 << 16):
    assert shuffle.buckets_of(edges, buckets).tolist() == [
        shuffle.bucket(u, buckets) for u in edges.tolist()]
  assert len(shuffle.positions(seed, [])) == 0


def _bucketed_groups(seed, keys=((0, 0), (0, 3), (1, 3), (2, 1)),
                     name=''):
  """(groups as producers emit them, in random order; expected output)."""
  rng = np.random.default_rng(seed)
  keyed, expected = [], []
  for tag, b in keys:
    values = [(float(u), f'{name}{tag}/{b}/{i}'.encode()) for i, u in
              enumerate(rng.random(int(rng.integers(5, 40))))]
    expected.append((tag, [v for _, v in sorted(values)]))
    # Several groups per key, as one per input batch.
    cuts = sorted(rng.choice(np.arange(1, len(values)), 3, replace=False))
    for part in np.split(np.arange(len(values)), cuts):
      keyed.append(((tag, b), [values[i] for i in part]))
  rng.shuffle(keyed)
  return keyed, expected


@pytest.mark.parametrize('spill', [False, True], ids=['memory', 'disk'])
def test_shuffle_groups_merges_the_groups_of_a_key_in_position_order(
    spill, tmp_path):
  keyed, expected = _bucketed_groups(3)
  folder = str(tmp_path / 'shuffle') if spill else None
  with TestPipeline() as p:
    out = p | beam.Create(keyed) | shuffle.ShuffleGroups(folder)
    assert_that(out, equal_to(expected))
  if spill:
    assert os.listdir(folder), 'nothing was written to the spill folder'


def test_spilled_shuffle_of_several_inputs_in_many_files_loses_nothing(
    tmp_path, monkeypatch):
  """Each input is written to files of at most a few groups (a tiny
  SPILL_BYTES), and every group comes back whole, in position order."""
  monkeypatch.setattr(shuffle, 'SPILL_BYTES', 200)
  first, _ = _bucketed_groups(5, keys=((0, 0), (1, 1)), name='a')
  second, _ = _bucketed_groups(6, keys=((0, 0), (2, 2)), name='b')
  # Key (0, 0) has values from both inputs: one bucket.
  pairs = collections.defaultdict(list)
  for key, group in first + second:
    pairs[key].extend(group)
  want = [(key[0], [v for _, v in sorted(group)])
          for key, group in pairs.items()]
  folder = str(tmp_path / 'shuffle')
  with TestPipeline() as p:
    a = p | 'First' >> beam.Create(first)
    b = p | 'Second' >> beam.Create(second)
    out = (a, b) | shuffle.ShuffleGroups(folder)
    assert_that(out, equal_to(want))
  assert len(os.listdir(folder)) > 4, os.listdir(folder)


def test_a_damaged_spill_file_fails_with_its_name(tmp_path):
  folder = str(tmp_path)
  fn = shuffle.SpillGroups(folder)
  fn.start_bundle()
  assert not list(fn.process(((0, 1), [(0.5, b'abc'), (0.25, b'de')])))
  [(key, ref)] = [wv.value for wv in fn.finish_bundle()]
  assert key == (0, 1)
  assert shuffle.read_spilled(folder, ref) == [(0.5, b'abc'), (0.25, b'de')]
  name, offset, length, count = ref
  with pytest.raises(IOError, match=f'{name} does not hold the 3 values'):
    shuffle.read_spilled(folder, (name, offset, length, count + 1))
  with open(os.path.join(folder, name), 'r+b') as f:
    f.truncate(length - 1)
  with pytest.raises(IOError, match=f'{name} ends 1 bytes before'):
    shuffle.read_spilled(folder, ref)
  os.remove(os.path.join(folder, name))
  with pytest.raises(IOError):
    shuffle.read_spilled(folder, ref)


# --------------------------------------------------------------- labels


def test_label_names_are_sorted_distinct_and_ids_are_their_indices():
  lists = [['dog', 'cat'], ['cat'], [], ['Zebra', 'chat noir é', 'dog'],
           ['bird']]
  names = sorted({'dog', 'cat', 'Zebra', 'chat noir é', 'bird'})
  assert names[0] == 'Zebra'  # code point order, upper case first
  with TestPipeline() as p:
    got_names, got_ids = (p | beam.Create(lists, reshuffle=False)
                          | labels_lib.LabelNames())
    assert_that(got_names, equal_to([names]), label='Names')
    assert_that(got_ids, equal_to([{n: i for i, n in enumerate(names)}]),
                label='Ids')


def test_label_names_of_no_input_are_empty():
  with TestPipeline() as p:
    got_names, got_ids = (p | beam.Create([]).with_output_types(list)
                          | labels_lib.LabelNames())
    assert_that(got_names, equal_to([[]]), label='Names')
    assert_that(got_ids, equal_to([{}]), label='Ids')


# --------------------------------------------------------- dead letters


def test_dead_letters_are_written_one_json_line_each_and_counted(tmp_path):
  dead = ([dead_letters.dead_letter(f'train/{i}.jpg', 'decode', 'empty file',
                                    'train') for i in range(3)] +
          [dead_letters.dead_letter('test/x.png', 'read', 'chat noir é',
                                    'test')] +
          [dead_letters.dead_letter(f'listing:{i}', 'list', 'no label')
           for i in range(2)])
  staging = str(tmp_path)
  p = TestPipeline()
  per_split, files = (p | beam.Create(dead)
                      | dead_letters.DeadLetters(staging, 'image'))
  assert_that(per_split, equal_to([('train', 3), ('test', 1), ('', 2)]),
              label='PerSplit')
  assert_that(files, equal_to([os.path.join(
      staging, 'dead_letter-00000-of-00001.jsonl')]), label='Files')
  result = p.run()
  result.wait_until_finish()
  [path] = glob.glob(os.path.join(staging, 'dead_letter-*.jsonl'))
  with open(path, encoding='utf-8') as f:
    lines = f.read().splitlines()
  assert len(lines) == len(dead)
  key = lambda d: d['input']
  assert sorted((json.loads(line) for line in lines), key=key) == sorted(
      dead, key=key)
  assert any('chat noir é' in line for line in lines)  # not \u-escaped
  assert counter_sum(result, 'tfrecord.image', 'dead_lettered') == len(dead)


# -------------------------------------------------------- ShuffleRecords


@pytest.mark.parametrize('spill', [False, True], ids=['memory', 'disk'])
def test_shuffle_records_gives_each_split_its_buckets_in_position_order(
    spill, tmp_path):
  names = ['train', 'validation', 'test', 'unused']
  buckets = 5
  rng = np.random.default_rng(11)
  grouped, expected = [], {s: collections.defaultdict(list) for s in
                           range(len(names))}
  for batch in range(4):  # ToRecords emits one group per key per batch
    groups = collections.defaultdict(list)
    for i in range(int(rng.integers(20, 60))):
      split = int(rng.choice(3, p=[0.6, 0.1, 0.3]))
      u = float(rng.random())
      record = f'{names[split]}/{batch}/{i}'.encode()
      key = (split, shuffle.bucket(u, buckets))
      groups[key].append((u, record))
      expected[split][key[1]].append((u, record))
    grouped += list(groups.items())
  with TestPipeline() as p:
    per_split = (p | beam.Create(grouped)
                 | batches.ShuffleRecords(
                     names, str(tmp_path) if spill else None))
    assert len(per_split) == len(names)
    for index, split in enumerate(names):
      want = [[r for _, r in sorted(pairs)]
              for pairs in expected[index].values()]
      assert_that(per_split[index], equal_to(want), label=f'Check[{split}]')


# ----------------------------------------------------------- WriteSplits


def _digest(record: bytes) -> int:
  return int.from_bytes(hashlib.sha256(record).digest()[:16], 'big')


def _fingerprint(records) -> str:
  return format(sum(_digest(r) for r in records) % (1 << 128), '032x')


def _check_shards(staging, name, records, num_shards):
  """Matcher of WriteSplits' (split, shard summary) output."""

  def check(summaries):
    by_split = collections.defaultdict(list)
    for split, summary in summaries:
      by_split[split].append(summary)
    assert sorted(by_split) == sorted(records)
    for split, want in records.items():
      prefix = os.path.join(staging, f'{name}-{split}.tfrecord')
      paths = sorted(s['path'] for s in by_split[split])
      assert paths == [f'{prefix}-{i:05d}-of-{num_shards:05d}'
                       for i in range(num_shards)]
      got = []
      for summary in by_split[split]:
        with open(summary['path'], 'rb') as f:
          data = f.read()
        with open(summary['path'], 'rb') as f:
          in_shard = list(tfrecord_files.iter_records(f))
        assert summary['records'] == len(in_shard)
        assert summary['bytes'] == len(data) == os.path.getsize(
            summary['path'])
        assert summary['sha256'] == hashlib.sha256(data).hexdigest()
        got += in_shard
      assert sorted(got) == sorted(want), split
  return check


def test_write_splits_round_trip_summaries_fingerprints_and_counter(
    tmp_path):
  staging = str(tmp_path / 'staging')
  os.makedirs(staging)
  cfg = options_lib.resolve_config(PipelineOptions([
      '--input', 'x', '--output', str(tmp_path / 'out'), '--num_shards', '2',
      '--name', 't']))
  assert cfg.split_names == ['train', 'validation', 'test']
  assert cfg.compression == 'none'
  rng = np.random.default_rng(5)
  train = [rng.bytes(int(rng.integers(1, 300))) for _ in range(40)]
  train.append(train[3])  # a duplicate is written (and counted) twice
  lists = {
      'train': [train[:5], [], train[5:17], train[17:18], train[18:]],
      'validation': [[b'v0', b'v1', b''], [b'v2']],  # an empty record too
      'test': [[b'only one']],  # fewer records than shards
  }
  records = {s: [r for group in ls for r in group] for s, ls in lists.items()}
  p = TestPipeline()
  per_split = tuple(p | f'Records[{s}]' >> beam.Create(lists[s])
                    for s in cfg.split_names)
  shard_list, fingerprints = per_split | shards.WriteSplits(cfg, staging)
  assert_that(shard_list, _check_shards(staging, 't', records, 2),
              label='Shards')
  assert_that(fingerprints, equal_to([
      (s, {'fingerprint': _fingerprint(r), 'records': len(r)})
      for s, r in records.items()]), label='Fingerprints')
  result = p.run()
  result.wait_until_finish()
  total = sum(len(r) for r in records.values())
  assert counter_sum(result, 'tfrecord.image', 'serialized') == total
  # The dataset fingerprint combines the split fingerprints into the
  # fingerprint of all records, whatever split they are in.
  everything = [r for rs in records.values() for r in rs]
  assert shards.combine_fingerprints(
      _fingerprint(r) for r in records.values()) == _fingerprint(everything)


# -------------------------------------------------------- ApplyTransform


def _zscore_fn(inputs):
  import tensorflow as tf
  import tensorflow_transform as tft
  z = tft.scale_to_z_score(inputs['x'])
  # A sparse output too: per example, [z] where z > 0, else nothing.
  return {'x_z': z,
          'x_above': tf.sparse.from_dense(tf.expand_dims(tf.nn.relu(z), 1))}


def _graph_inputs(batch, lo, hi):
  import tensorflow as tf
  return {'x': tf.constant(np.asarray(batch['x'][lo:hi], np.float32))}


def test_apply_transform_runs_the_exported_graph_on_every_batch(tmp_path):
  import tensorflow as tf
  import tensorflow_transform.beam as tft_beam
  from tensorflow_transform.tf_metadata import dataset_metadata
  rng = np.random.default_rng(2)
  analyzed = (rng.normal(size=9) * 4 + 30).astype(np.float32)
  mean = analyzed.astype(np.float64).mean()
  std = analyzed.astype(np.float64).std()  # tft.var is the population one
  transform_dir = str(tmp_path / 'transform')
  metadata = dataset_metadata.DatasetMetadata.from_feature_spec(
      {'x': tf.io.FixedLenFeature([], tf.float32)})
  with TestPipeline() as p:
    with tft_beam.Context(temp_dir=str(tmp_path / 'tft_tmp'),
                          force_tf_compat_v1=False):
      rows = p | beam.Create([{'x': float(v)} for v in analyzed])
      transform_fn = ((rows, metadata)
                      | tft_beam.AnalyzeDataset(_zscore_fn))
      _ = transform_fn | tft_beam.WriteTransformFn(transform_dir)

  # One batch longer than TRANSFORM_BATCH, so the graph runs on it in
  # pieces that are joined again, and two short ones.
  sizes = [3, batches.TRANSFORM_BATCH + 5, 1]
  inputs = [{'id': [f'b{b}/{i}' for i in range(n)],
             'x': rng.normal(30, 4, n).astype(np.float32)}
            for b, n in enumerate(sizes)]

  def check(outputs):
    assert len(outputs) == len(inputs)
    by_first = {out['id'][0]: out for out in outputs}
    for batch in inputs:
      out = by_first[batch['id'][0]]
      assert sorted(out) == ['id', 'x', 'x_above', 'x_z']
      assert out['id'] == batch['id']
      np.testing.assert_array_equal(out['x'], batch['x'])
      want = (batch['x'].astype(np.float64) - mean) / std
      # Dense: an array; sparse: a list of arrays, one per example.
      assert out['x_z'].shape == batch['x'].shape
      np.testing.assert_allclose(out['x_z'], want, rtol=1e-5, atol=1e-5)
      assert isinstance(out['x_above'], list)
      assert len(out['x_above']) == len(want)
      sizes = [len(v) for v in out['x_above']]
      assert sizes == [1 if z > 0 else 0 for z in out['x_z'].tolist()]
      np.testing.assert_allclose(
          [v[0] for v in out['x_above'] if len(v)], want[want > 0],
          rtol=1e-5, atol=1e-5)

  with TestPipeline() as p:
    done = beam.pvalue.AsList(p | 'Done' >> beam.Create([None]))
    out = (p | 'Batches' >> beam.Create(inputs)
           | beam.ParDo(batches.ApplyTransform(transform_dir, _graph_inputs,
                                               'x'), done))
    assert_that(out, check)

  # The graph runs on a thread of its own, a batch ahead: an error there
  # still fails the run, naming what went wrong.
  broken = inputs[:1] + [{'id': ['no-x/0'], 'y': inputs[0]['x'][:1]}]
  with pytest.raises(KeyError, match='x'):
    with TestPipeline() as p:
      done = beam.pvalue.AsList(p | 'Done' >> beam.Create([None]))
      _ = (p | 'Batches' >> beam.Create(broken)
           | beam.ParDo(batches.ApplyTransform(transform_dir, _graph_inputs,
                                               'id'), done))


# --------------------------------------------------------------- encode


def _random_column(rng, n):
  """(dtype, values, expected value lists) of one random column layout."""
  kind = rng.integers(7)
  if kind == 0:  # str and bytes, empty ones and non-ASCII included
    words = ['', 'a', 'chat noir é', '\u732b', 'x' * 40]
    values = [words[rng.integers(len(words))] if rng.random() < 0.5 else
              rng.bytes(int(rng.integers(0, 12))) for _ in range(n)]
    want = [[v.encode('utf-8') if isinstance(v, str) else v] for v in values]
    return 'bytes', values, want
  if kind == 1:  # an array of str
    values = np.array([f'w{rng.integers(1000)}' for _ in range(n)])
    return 'bytes', values, [[v.encode()] for v in values.tolist()]
  if kind == 2:  # 1-D int64, extremes included
    values = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64,
                          endpoint=True)
    return 'int64', values, [[v] for v in values.tolist()]
  if kind == 3:  # N-D float32 (or float64 to be cast)
    shape = (n,) + tuple(rng.integers(1, 4, int(rng.integers(1, 4))))
    values = rng.normal(0, 1e3, shape)
    values.flat[rng.integers(values.size)] = -0.0
    if rng.random() < 0.5:
      values = values.astype(np.float32)
    want = [list(row) for row in values.astype(np.float32).reshape(n, -1)
            .tolist()]
    return 'float32', values, want
  if kind == 4:  # N-D int64
    values = rng.integers(-5, 5, (n, int(rng.integers(1, 4)), 2))
    return 'int64', values, values.reshape(n, -1).tolist()
  dtype = 'float32' if kind == 5 else 'int64'
  # Variable-length: a list of arrays, empty ones included.
  values = []
  for _ in range(n):
    size = int(rng.integers(0, 5)) if rng.random() < 0.7 else 0
    values.append(rng.normal(size=size).astype(np.float32)
                  if dtype == 'float32' else rng.integers(-9, 9, size))
  want = [v.astype(np.float32 if dtype == 'float32' else np.int64).tolist()
          for v in values]
  return dtype, values, want


def _values(feature):
  kind = feature.WhichOneof('kind')
  return list(getattr(feature, kind).value), kind


def _encode_both_ways(monkeypatch, columns, n):
  """(batch records, proto records) of the same columns."""
  monkeypatch.setattr(example_encoding, 'BATCH_MIN_EXAMPLES', 0)
  monkeypatch.setattr(example_encoding, 'LARGE_EXAMPLE_BYTES', 10**12)
  batch = example_encoding.encode(columns, n)
  monkeypatch.setattr(example_encoding, 'BATCH_MIN_EXAMPLES', 10**9)
  protos = example_encoding.encode(columns, n)
  monkeypatch.undo()
  return batch, protos


def test_encode_batch_and_protos_give_the_same_bytes(monkeypatch):
  from tensorflow.core.example import example_pb2
  rng = np.random.default_rng(20260101)
  kinds = {'bytes': 'bytes_list', 'int64': 'int64_list',
           'float32': 'float_list'}
  for case in range(150):
    n = int(rng.integers(1, 40))
    columns, want = {}, {}
    for c in range(int(rng.integers(1, 5))):
      dtype, values, expected = _random_column(rng, n)
      columns[f'f{c}'] = (dtype, values)
      want[f'f{c}'] = (expected, kinds[dtype])
    batch, protos = _encode_both_ways(monkeypatch, columns, n)
    assert len(batch) == len(protos) == n, case
    assert batch == protos, f'case {case}: {columns}'
    example = example_pb2.Example()
    for i, record in enumerate(batch):
      example.ParseFromString(record)
      features = example.features.feature
      assert sorted(features) == sorted(columns), case
      for name, (expected, kind) in want.items():
        got, got_kind = _values(features[name])
        assert got_kind == kind, (case, name)
        assert got == expected[i], (case, name, i)
  # The default threshold picks each way by batch size: the same bytes.
  threshold = example_encoding.BATCH_MIN_EXAMPLES
  n = threshold + 6
  columns = {'v': ('float32', rng.normal(size=(n, 3))),
             'id': ('bytes', [f'id{i}' for i in range(n)])}
  few = threshold - 1
  assert example_encoding.encode(columns, n)[:few] == (
      example_encoding.encode(
          {k: (d, v[:few]) for k, (d, v) in columns.items()}, few))
  assert example_encoding.encode(columns, 0) == []


def test_large_examples_are_built_as_protos_however_many(monkeypatch):
  """Pictures (more than LARGE_EXAMPLE_BYTES each on average) skip the
  byte grid at any batch size, and the bytes are the grid's."""
  rng = np.random.default_rng(11)
  n = 3 * example_encoding.BATCH_MIN_EXAMPLES
  columns = {'image': ('bytes', [rng.bytes(int(rng.integers(6000, 12000)))
                                 for _ in range(n)]),
             'label': ('int64', rng.integers(0, 5, n)),
             'id': ('bytes', [f'cat/{i}.jpg' for i in range(n)])}
  batch, _ = _encode_both_ways(monkeypatch, columns, n)

  def no_grid(*args):
    raise AssertionError('laid out in the grid')

  monkeypatch.setattr(example_encoding, '_encode_batch', no_grid)
  assert example_encoding.encode(columns, n) == batch
  # Small examples of the same count still take the grid.
  monkeypatch.undo()
  small = {k: (d, v[:n]) for k, (d, v) in columns.items() if k != 'image'}
  monkeypatch.setattr(example_encoding, '_encode_batch', no_grid)
  with pytest.raises(AssertionError, match='grid'):
    example_encoding.encode(small, n)


def test_encode_batch_bytes_on_odd_names_and_values(monkeypatch):
  """What the batch way writes by itself (protobuf's wire format) is held
  to protobuf's own deterministic bytes where it is easiest to get wrong:
  names that begin other names (protobuf puts the longer first), names
  that are empty or not ASCII or longer than 127 bytes, ints that take 1
  to 10 bytes (negatives take 10), NaN and -0.0, empty lists and strings,
  values longer than 127 and 16,383 bytes, and one long string among
  short ones (not padded: laid out between two grids)."""
  rng = np.random.default_rng(7)
  n = 70
  names = ['label', 'label_text', 'labels', 'a', '', '\u00e9t\u00e9',
           'x' * 130, 'id', 'i']
  rng.shuffle(names)
  widths = rng.integers(0, 64, (n, 5))
  ints = (rng.integers(0, 2**62, (n, 5)) >> widths).astype(np.int64)
  ints[::7] *= -1
  ints[3] = [0, 127, 128, 2**63 - 1, -2**63]
  floats = rng.normal(size=(n, 40)).astype(np.float32)
  floats[1, :3] = [np.nan, -0.0, np.inf]
  short = [rng.bytes(int(rng.integers(0, 30))) for _ in range(n)]
  long_one = list(short)
  long_one[5] = rng.bytes(70_000)
  ragged = [rng.integers(-300, 300, int(rng.integers(0, 3)) * 80)
            for _ in range(n)]
  columns_list = [
      ('int64', ints), ('float32', floats), ('bytes', short),
      ('bytes', long_one), ('int64', ragged),
      ('float32', [r.astype(np.float32) for r in ragged]),
      ('bytes', [str(v) * (i % 3) for i, v in enumerate(ints[:, 0])]),
      ('int64', ints[:, 0]), ('bytes', ['chat noir \u00e9'] * n)]
  columns = dict(zip(names, columns_list))
  batch, protos = _encode_both_ways(monkeypatch, columns, n)
  assert batch == protos
  # Every layout alone, and the long string alone (its own grid on each
  # side is empty then).
  for name, column in columns.items():
    batch, protos = _encode_both_ways(monkeypatch, {name: column}, n)
    assert batch == protos, name
  # A batch laid out a chunk at a time (16 examples; with no minimum for
  # a batch, the last 6 are a chunk of their own).
  chunks = []
  lay_out = example_encoding._encode_batch  # pylint: disable=protected-access

  def recorded(chunk, size):
    chunks.append(size)
    return lay_out(chunk, size)

  monkeypatch.setattr(example_encoding, 'BATCH_CHUNK', 16)
  monkeypatch.setattr(example_encoding, '_encode_batch', recorded)
  batch, protos = _encode_both_ways(monkeypatch, columns, n)
  assert chunks == [16, 16, 16, 16, 6]
  assert batch == protos
