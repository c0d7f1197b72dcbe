"""The plain-Python parts of near-duplicate grouping: bands that cannot miss
a pair within the threshold, distances, and groups that do not depend on
the order in which their edges come."""

import itertools
import random

import pytest

from transforms.core import near_duplicates as nd


def _flip(digest: bytes, positions) -> bytes:
  value = int.from_bytes(digest, 'big')
  for p in positions:
    value ^= 1 << p
  return value.to_bytes(len(digest), 'big')


@pytest.mark.parametrize('bits, threshold', [(64, 0), (64, 4), (64, 10),
                                             (256, 24), (16, 15)])
def test_bands_cover_the_hash_evenly(bits, threshold):
  bounds = nd.band_bounds(bits, threshold)
  assert len(bounds) == threshold + 1
  assert bounds[0][0] == 0 and bounds[-1][1] == bits
  assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
  sizes = {end - start for start, end in bounds}
  assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_a_threshold_the_hash_cannot_band_is_refused():
  with pytest.raises(ValueError, match='needs at most 63 for a 64-bit hash'):
    nd.band_bounds(64, 64)
  with pytest.raises(ValueError):
    nd.band_bounds(64, -1)


def test_every_pair_within_the_threshold_shares_a_band():
  """The pigeonhole guarantee, tried on random hashes and flips."""
  rng = random.Random(7)
  for threshold in (0, 3, 8, 12):
    bounds = nd.band_bounds(64, threshold)
    for _ in range(300):
      a = rng.getrandbits(64).to_bytes(8, 'big')
      flips = rng.sample(range(64), rng.randint(0, threshold))
      b = _flip(a, flips)
      assert nd.hamming(a, b) == len(flips)
      assert set(nd.band_keys(a, bounds)) & set(nd.band_keys(b, bounds))


def test_band_keys_read_the_bits_in_order():
  bounds = nd.band_bounds(16, 3)  # four bands of 4 bits
  assert nd.band_keys(bytes([0x12, 0x34]), bounds) == [
      (0, 0x1), (1, 0x2), (2, 0x3), (3, 0x4)]


def test_pairs_within_keep_only_close_pairs_once():
  h = bytes(8)
  members = [('b', h), ('a', h), ('c', _flip(h, [1, 2, 3])),
             ('d', _flip(h, range(10))), ('a', h)]
  assert nd.pairs_within(members, 3) == [('a', 'b', 0), ('a', 'c', 3),
                                         ('b', 'c', 3)]


def test_groups_are_connected_components_whatever_the_edge_order():
  edges = [('a', 'b', 1), ('c', 'd', 2), ('b', 'c', 4), ('x', 'y', 0)]
  expected = {'a': 'a', 'b': 'a', 'c': 'a', 'd': 'a', 'x': 'x', 'y': 'x'}
  for order in itertools.permutations(edges):
    assert nd.components(order) == expected


def test_a_group_key_is_its_smallest_content_key():
  edges = [('p1', 'p2', 3), ('p2', 'p3', 5), ('q1', 'q2', 0)]
  keys = {'p1': 'c9', 'p2': 'c1', 'p3': 'c5', 'q1': 'c7', 'q2': 'c7'}
  assert nd.group_keys(edges, keys) == {
      'p1': 'c1', 'p2': 'c1', 'p3': 'c1', 'q1': 'c7', 'q2': 'c7'}
  assert nd.group_keys([], keys) == {}
