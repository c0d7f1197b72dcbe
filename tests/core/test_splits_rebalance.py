"""Unit tests for transforms/core/splits.py and transforms/core/rebalance.py."""

import collections
import hashlib

import numpy as np
import pytest

from transforms.core import rebalance
from transforms.core import splits

DEFAULT = 'train=0.8,validation=0.1,test=0.1'


def _ids(n, prefix='img'):
  return [f'{prefix}/{i:06d}.jpg' for i in range(n)]


# ------------------------------------------------------------- parse_ratios


def test_parse_ratios_default():
  assert splits.parse_ratios(DEFAULT) == [('train', 0.8), ('validation', 0.1),
                                          ('test', 0.1)]


def test_parse_ratios_keeps_order_and_tolerates_spaces():
  assert splits.parse_ratios(' test = 0.25 , train=0.75, ') == [
      ('test', 0.25), ('train', 0.75)]
  assert splits.parse_ratios('train=1') == [('train', 1.0)]
  assert splits.parse_ratios('train=0.7,validation=0.3,test=0') == [
      ('train', 0.7), ('validation', 0.3), ('test', 0.0)]


@pytest.mark.parametrize('text,match', [
    ('train=0.5,test=0.4', 'add up to 0.9, not 1'),
    ('train=0.8,validation=0.2,test=0.1', 'add up to 1.1, not 1'),
    ('train', 'not of the form name=ratio'),
    ('train:0.8,test:0.2', 'not of the form name=ratio'),
    ('=0.5,test=0.5', 'not of the form name=ratio'),
    ('train=abc,test=0.5', "ratio 'abc' of 'train' is not a number"),
    ('train=0.5,train=0.5', "'train' is given twice"),
    ('train=1.2,test=-0.2', 'between 0 and 1'),
    ('train=-0.1,test=1.1', 'between 0 and 1'),
    ('train=nan,test=1', 'between 0 and 1'),
    ('', 'no splits given'),
    (' , ', 'no splits given'),
])
def test_parse_ratios_rejects(text, match):
  with pytest.raises(ValueError, match=match) as info:
    splits.parse_ratios(text)
  message = str(info.value)
  assert message and '\n' not in message


# ------------------------------------------------------------- assign_split


def _reference_unit_hash(*parts):
  """Independent re-implementation: SHA-256 based, never Python's hash()."""
  digest = hashlib.sha256('\x1f'.join(parts).encode('utf-8')).digest()
  return int.from_bytes(digest[:8], 'big') / 2.0**64


@pytest.mark.parametrize('ratios', [
    [('train', 0.8), ('validation', 0.1), ('test', 0.1)],
    [('train', 0.5), ('validation', 0.0), ('test', 0.5)],
    [('test', 0.3), ('train', 0.7)],
])
def test_hash_splits_gives_assign_split_for_every_id(ratios):
  """Batches as the readers make them: distinct row keys, repeated ids
  (a row the input holds twice), a NumPy object array of entities, odd
  characters and the empty id."""
  names = ['train', 'validation', 'test']
  rows = [f'dev{i % 7}\x1f{1700000000 + i}' for i in range(3000)]
  repeated = rows[:50] * 3 + ['chat noir/é.png', '', 'a,b'] * 4
  entities = np.array([f'dev{i % 11}' for i in range(500)], dtype=object)
  for ids in (rows, repeated, entities, []):
    want = [names.index(splits.assign_split(i, ratios)) for i in list(ids)]
    got = splits.hash_splits(ids, ratios, names)
    assert got.dtype == np.int8
    assert got.tolist() == want
  got = splits.hash_splits(rows, ratios, names)
  shares = np.bincount(got, minlength=3) / len(rows)
  for name, ratio in ratios:
    assert abs(shares[names.index(name)] - ratio) < 0.05


def test_unit_hash_is_sha256_based_and_in_unit_interval():
  for example_id in ['a', 'cat/1.jpg', 'chat noir/é.png', '']:
    u = splits.unit_hash('split', example_id)
    assert u == _reference_unit_hash('split', example_id)
    assert 0.0 <= u < 1.0


def test_assign_split_is_deterministic_and_depends_only_on_the_id():
  ratios = splits.parse_ratios(DEFAULT)
  ids = _ids(500)
  first = [splits.assign_split(i, ratios) for i in ids]
  # Other calls in between and a different order change nothing.
  for i in reversed(ids):
    splits.assign_split(i + 'x', ratios)
  again = {i: splits.assign_split(i, list(ratios)) for i in reversed(ids)}
  assert first == [again[i] for i in ids]
  # The split follows from the id's hash alone (stable across processes).
  for example_id in ids[:50]:
    u = _reference_unit_hash('split', example_id)
    want = 'train' if u < 0.8 else 'validation' if u < 0.9 else 'test'
    assert splits.assign_split(example_id, ratios) == want


def test_assign_split_proportions_within_one_and_a_half_percent():
  ratios = splits.parse_ratios(DEFAULT)
  n = 20_000
  counts = collections.Counter(
      splits.assign_split(i, ratios) for i in _ids(n, 'class_a'))
  assert set(counts) == {'train', 'validation', 'test'}
  for name, ratio in ratios:
    assert abs(counts[name] / n - ratio) <= 0.015, (name, counts[name])


def test_assign_split_never_picks_a_zero_ratio():
  ratios = splits.parse_ratios('train=0.5,validation=0.5,test=0')
  got = {splits.assign_split(i, ratios) for i in _ids(2000)}
  assert got == {'train', 'validation'}
  only = splits.parse_ratios('train=1')
  assert {splits.assign_split(i, only) for i in _ids(200)} == {'train'}


# ---------------------------------------------------------- canonical_split


@pytest.mark.parametrize('name,want', [
    ('train', 'train'), ('training', 'train'), ('Train', 'train'),
    (' TRAIN ', 'train'),
    ('validation', 'validation'), ('valid', 'validation'),
    ('val', 'validation'), ('dev', 'validation'), ('VAL', 'validation'),
    ('test', 'test'), ('testing', 'test'), ('Test', 'test'),
])
def test_canonical_split_aliases(name, want):
  assert splits.canonical_split(name) == want


@pytest.mark.parametrize('name', ['holdout', 'eval', '', 'trains'])
def test_canonical_split_rejects_unknown(name):
  with pytest.raises(ValueError, match='unknown split') as info:
    splits.canonical_split(name)
  assert 'train, validation, test' in str(info.value)


# ------------------------------------------------------------ rebalance


COUNTS = {'big': 20_000, 'mid': 7_000, 'small': 3_000}


def _ids_by_class(counts):
  return {label: _ids(n, label) for label, n in counts.items()}


@pytest.mark.parametrize('mode', ['oversample', 'undersample'])
def test_copies_is_deterministic_per_seed_and_id(mode):
  for example_id in _ids(200, 'mid'):
    a = rebalance.copies(mode, example_id, 'mid', dict(COUNTS), 42)
    b = rebalance.copies(mode, example_id, 'mid', dict(reversed(
        COUNTS.items())), 42)
    assert a == b
    assert a >= 0


@pytest.mark.parametrize('mode', ['oversample', 'undersample'])
def test_copies_totals_match_expected_after(mode):
  expected = rebalance.expected_after(mode, COUNTS)
  target = (max if mode == 'oversample' else min)(COUNTS.values())
  assert expected == {label: float(target) for label in COUNTS}
  for label, ids in _ids_by_class(COUNTS).items():
    total = sum(rebalance.copies(mode, i, label, COUNTS, 7) for i in ids)
    assert abs(total - expected[label]) <= 0.04 * expected[label], (
        label, total, expected[label])


def test_oversample_copies_are_floor_or_ceil_of_the_ratio():
  for label, ids in _ids_by_class(COUNTS).items():
    ratio = max(COUNTS.values()) / COUNTS[label]
    got = {rebalance.copies('oversample', i, label, COUNTS, 1)
           for i in ids[:2000]}
    assert got <= {int(ratio), int(ratio) + 1}
  # The largest class is kept exactly once.
  assert {rebalance.copies('oversample', i, 'big', COUNTS, 1)
          for i in _ids(500, 'big')} == {1}


def test_undersample_keeps_each_example_at_most_once():
  got = {rebalance.copies('undersample', i, 'big', COUNTS, 1)
         for i in _ids(2000, 'big')}
  assert got == {0, 1}
  assert {rebalance.copies('undersample', i, 'small', COUNTS, 1)
          for i in _ids(500, 'small')} == {1}


@pytest.mark.parametrize('mode', ['oversample', 'undersample'])
def test_a_different_seed_changes_the_choice(mode):
  # Chosen so that P(extra copy) and P(keep) are both 0.5.
  if mode == 'oversample':
    counts, label = {'a': 3000, 'b': 2000}, 'b'
  else:
    counts, label = {'a': 2000, 'b': 1000}, 'a'
  ids = _ids(counts[label], label)
  one = [rebalance.copies(mode, i, label, counts, 1) for i in ids]
  two = [rebalance.copies(mode, i, label, counts, 2) for i in ids]
  assert one != two
  changed = sum(x != y for x, y in zip(one, two)) / len(ids)
  assert 0.35 < changed < 0.65  # independent coin flips: about half differ


@pytest.mark.parametrize('mode', ['none', 'weight'])
def test_copies_is_one_without_resampling(mode):
  assert {rebalance.copies(mode, i, 'big', COUNTS, 3)
          for i in _ids(100, 'big')} == {1}
  assert rebalance.expected_after(mode, COUNTS) == {
      k: float(v) for k, v in COUNTS.items()}


def test_copies_with_no_counts_is_one():
  assert rebalance.copies('oversample', 'x.jpg', 'cat', {}, 0) == 1


def test_class_weight_equalises_total_weight():
  total = sum(COUNTS.values())
  per_class = {label: rebalance.class_weight(label, COUNTS) * n
               for label, n in COUNTS.items()}
  for w in per_class.values():
    assert w == pytest.approx(total / len(COUNTS))
  assert sum(per_class.values()) == pytest.approx(total)
  assert rebalance.class_weight('big', COUNTS) < rebalance.class_weight(
      'small', COUNTS)


def test_class_weight_of_empty_class_is_zero():
  assert rebalance.class_weight('none', {'none': 0, 'some': 5}) == 0.0
