"""The seeded, memory-bounded shuffle every modality's records go through.

One rule: an element's place is a seeded hash in [0, 1) of its key
(`position`); elements are grouped into a fixed number of buckets by that
position (`bucket`) and each bucket is emitted in position order
(`ShuffleGroups`). Every bucket is then a uniform sample, so wherever the
runner puts bundle and shard boundaries, no shard holds one class and no
stretch of a shard is in input order, and the order depends only on the
seed and the keys: reruns and other runners shuffle alike.

Images shuffle their (small) input references before decoding
(`SeededShuffle`), so image bytes are never grouped; row modalities group
their serialized records a batch at a time (see core/batches.ToRecords).
"""

import apache_beam as beam

from transforms.core.splits import unit_hash

# Records per bucket the bucket count aims at (a bucket is grouped and
# sorted on one worker).
RECORDS_PER_BUCKET = 2000


def position(seed, key: str) -> float:
  """An element's place in the shuffled order, in [0, 1)."""
  return unit_hash('shuffle', str(seed), key)


def bucket(place: float, buckets: int) -> int:
  """The bucket of an element at `place` (0..buckets-1)."""
  return min(int(place * buckets), buckets - 1)


def shuffle_buckets(expected_examples: int) -> int:
  """Shuffle buckets for the expected number of examples (a function of the
  data only, so reruns shuffle alike)."""
  return int(min(max(expected_examples // RECORDS_PER_BUCKET, 16), 1 << 16))


def _in_position_order(item):
  (tag, _), groups = item
  pairs = sorted((p for group in groups for p in group), key=lambda p: p[0])
  return tag, [value for _, value in pairs]


class ShuffleGroups(beam.PTransform):
  """Groups bucketed elements and emits each bucket in position order.

  Input: ((tag, bucket), [(position, value), ...]); a producer may emit
  several groups for one key (say, one per input batch). Output: (tag,
  [values of one bucket, in position order]).
  """

  def expand(self, keyed):
    return (keyed
            | 'GroupBuckets' >> beam.GroupByKey()
            | 'BucketInOrder' >> beam.Map(_in_position_order))


class SeededShuffle(beam.PTransform):
  """Seeded shuffle of (key, value) pairs, emitting the values.

  Keys should be unique (example id plus copy index). A fixed bucket count
  keeps this to one grouping step; with 4096 buckets, a bucket of input
  references holds about 25,000 of them at 100 million inputs.
  """

  def __init__(self, seed: int, buckets: int = 4096):
    super().__init__()
    self._seed = str(seed)
    self._buckets = buckets

  def expand(self, keyed):
    seed, buckets = self._seed, self._buckets

    def to_bucket(item):
      key, value = item
      u = position(seed, key)
      return (0, bucket(u, buckets)), [(u, value)]

    return (keyed
            | 'AssignBucket' >> beam.Map(to_bucket)
            # -> ((0, bucket), [(position, value)])
            | 'ShuffleGroups' >> ShuffleGroups()
            | 'EmitInOrder' >> beam.FlatMap(lambda group: group[1]))
