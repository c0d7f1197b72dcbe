"""Serialize, shuffle, write and summarize the examples of one split.

- `to_example_bytes`: a pipeline example -> serialized tf.train.Example
  (deterministic: map keys sorted), so equal inputs give equal bytes.
- `SeededShuffle`: a seeded, memory-bounded shuffle. Each element gets a
  hash in [0, 1) of its key; elements are grouped into a fixed number of
  buckets by that hash and each bucket is emitted in hash order. Every
  bucket is a uniform sample, so wherever the runner puts bundle and shard
  boundaries, no shard holds one class and no stretch of a shard is ordered
  by input path. The pipeline shuffles the (small) input references before
  decoding, so image bytes are never grouped.
- `WriteSplit`: WriteToTFRecord with TFDS-style names
  (`<name>-<split>.tfrecord-00000-of-00004`), then one summary per shard
  (records, bytes, SHA-256) read back from the written files; with
  `index=True` the same read writes each shard's index file
  (`<shard>.idx`, DALI's tfrecord2idx format) beside it.
- `FingerprintFn`: an order-independent fingerprint of a split's records
  (the sum of their SHA-256 digests modulo 2**128), equal on every runner
  and for every shard count.
"""

import hashlib

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes

from transforms.core import features as schema
from transforms.output import tfrecord_files
from transforms.core.splits import unit_hash

_MOD = 1 << 128


def record_digest(record: bytes) -> int:
  return int.from_bytes(hashlib.sha256(record).digest()[:16], 'big')


def combine_fingerprints(values) -> str:
  return format(sum(int(v, 16) for v in values) % _MOD, '032x')


class FingerprintFn(beam.CombineFn):
  """Order-independent fingerprint and count of serialized records."""

  def create_accumulator(self):
    return (0, 0)

  def add_input(self, acc, record):
    return ((acc[0] + record_digest(record)) % _MOD, acc[1] + 1)

  def merge_accumulators(self, accs):
    total, count = 0, 0
    for t, c in accs:
      total, count = (total + t) % _MOD, count + c
    return (total, count)

  def extract_output(self, acc):
    return {'fingerprint': format(acc[0], '032x'), 'records': acc[1]}


class FingerprintListsFn(FingerprintFn):
  """FingerprintFn over lists of records (the same result)."""

  def add_input(self, acc, records):
    total, count = acc
    for record in records:
      total += record_digest(record)
    return (total % _MOD, count + len(records))


def to_example_bytes(example: dict, label_ids: dict) -> bytes:
  """Serializes a pipeline example as a tf.train.Example.

  Args:
    example: The pipeline's example dict (see transforms.decode).
    label_ids: {label name: id}.

  Returns:
    Deterministically serialized tf.train.Example bytes.
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  train = tf.train

  def b(v):
    return train.Feature(bytes_list=train.BytesList(value=[v]))

  def i(v):
    return train.Feature(int64_list=train.Int64List(value=[int(v)]))

  image = example[schema.IMAGE]
  if isinstance(image, bytes):
    image_feature = b(image)
  else:
    image_feature = train.Feature(float_list=train.FloatList(
        value=image.reshape(-1)))
  features = {
      schema.IMAGE: image_feature,
      schema.LABEL: i(label_ids[example[schema.LABEL_TEXT]]),
      schema.LABEL_TEXT: b(example[schema.LABEL_TEXT].encode('utf-8')),
      schema.ID: b(example[schema.ID].encode('utf-8')),
      schema.ORIGINAL_HEIGHT: i(example[schema.ORIGINAL_HEIGHT]),
      schema.ORIGINAL_WIDTH: i(example[schema.ORIGINAL_WIDTH]),
  }
  if schema.WEIGHT in example:
    features[schema.WEIGHT] = train.Feature(float_list=train.FloatList(
        value=[example[schema.WEIGHT]]))
  return train.Example(features=train.Features(
      feature=features)).SerializeToString(deterministic=True)


class SeededShuffle(beam.PTransform):
  """Seeded, memory-bounded shuffle of (key, value) pairs.

  Input: (key string, value); keys should be unique (example id plus copy
  index). Output: the values, grouped into `buckets` buckets by a seeded
  hash of the key, each bucket emitted in hash order. A fixed bucket count
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
      u = unit_hash('shuffle', seed, key)
      return min(int(u * buckets), buckets - 1), (u, value)

    def emit(item):
      _, values = item
      for _, value in sorted(values, key=lambda v: v[0]):
        yield value

    return (keyed
            | 'AssignBucket' >> beam.Map(to_bucket)
            # -> (bucket, (u, value))
            | 'GroupBuckets' >> beam.GroupByKey()
            | 'EmitInHashOrder' >> beam.FlatMap(emit))


def shard_prefix(output_dir: str, name: str, split: str) -> str:
  return f'{output_dir.rstrip("/")}/{name}-{split}.tfrecord'


class WriteSplit(beam.PTransform):
  """Writes one split's records and summarizes every shard written.

  Output: one dict per shard, {'path', 'records', 'bytes', 'sha256'}, and
  'index' (the index file's path) with `index=True`.
  """

  def __init__(self, output_dir: str, name: str, split: str, num_shards: int,
               compressed: bool, index: bool = False):
    super().__init__()
    self._prefix = shard_prefix(output_dir, name, split)
    self._num_shards = num_shards
    self._compressed = compressed
    self._index = index

  def expand(self, records):
    compressed, index = self._compressed, self._index
    written = records | 'WriteToTFRecord' >> beam.io.WriteToTFRecord(
        self._prefix,
        file_name_suffix='.gz' if compressed else '',
        num_shards=self._num_shards,
        shard_name_template='-SSSSS-of-NNNNN',
        compression_type=(CompressionTypes.GZIP if compressed else
                          CompressionTypes.UNCOMPRESSED))
    # -> shard path per written file
    return (written
            | 'SpreadShards' >> beam.Reshuffle()
            | 'SummarizeShard' >> beam.Map(
                tfrecord_files.shard_summary, compressed=compressed,
                index=index))
