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

On a local run the runner keeps every grouping in memory until the group
is read, so grouping the records themselves would make memory grow with
the dataset. There the records go to files in a folder on the machine
(`SpillGroups`), a few tens of MB per file, and only references to them
are grouped; each bucket is then read back and put in position order
(`ReadSpilledGroups`). The buckets and their order are the same either
way; distributed runners keep grouping the records (their shuffle does
not hold them in memory).
"""

import hashlib
import os
import struct
from typing import Dict, Iterable, List, Optional, Tuple
import uuid

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue
import numpy as np

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


def positions(seed, keys: Iterable[str]) -> np.ndarray:
  """`position` of each key, as float64: the same numbers, about half the
  time (the hash of the seed's prefix is computed once, and the digests
  become numbers in one NumPy step)."""
  prefix = hashlib.sha256(f'shuffle\x1f{seed}\x1f'.encode('utf-8'))

  def first_bytes(key: str) -> bytes:
    h = prefix.copy()
    h.update(key.encode('utf-8'))
    return h.digest()[:8]

  data = b''.join(map(first_bytes, keys))
  return np.frombuffer(data, '>u8').astype(np.float64) / 2.0**64


def buckets_of(places: np.ndarray, buckets: int) -> np.ndarray:
  """`bucket` of each place (int64)."""
  return np.minimum((places * buckets).astype(np.int64), buckets - 1)


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

  Input: ((tag, bucket), [(position, value), ...]), one PCollection or a
  tuple of them; a producer may emit several groups for one key (say, one
  per input batch). Output: (tag, [values of one bucket, in position
  order]).

  With `spill_folder` (a folder on the local file system; values must be
  bytes), the values wait in files there instead of in the grouping (see
  the module docstring); the output is the same. Each input is spilled
  before the inputs are flattened: the local runner holds a Flatten of
  inputs made in different stages in memory too.
  """

  def __init__(self, spill_folder: Optional[str] = None):
    super().__init__()
    self._spill = spill_folder

  def expand(self, keyed):
    parts = list(keyed) if isinstance(keyed, (list, tuple)) else [keyed]
    if self._spill:
      parts = [part | (f'SpillBuckets[{i}]' if len(parts) > 1 else
                       'SpillBuckets') >> beam.ParDo(SpillGroups(self._spill))
               for i, part in enumerate(parts)]
    if len(parts) > 1:
      keyed = tuple(parts) | 'AllGroups' >> beam.Flatten()
    else:
      keyed = parts[0]
    grouped = keyed | 'GroupBuckets' >> beam.GroupByKey()
    if self._spill:
      return grouped | 'BucketInOrder' >> beam.ParDo(
          ReadSpilledGroups(self._spill))
    return grouped | 'BucketInOrder' >> beam.Map(_in_position_order)


# Values a SpillGroups instance holds before writing them to a file.
SPILL_BYTES = 32 << 20
# Each value in a spill file: its position (float64), its length (uint32),
# then its bytes.
_ENTRY = struct.Struct('<dI')
# A reference to one group in a spill file: (file name, offset, length,
# values).
SpillRef = Tuple[str, int, int, int]


class SpillGroups(beam.DoFn):
  """((tag, bucket), [(position, bytes)]) -> ((tag, bucket), SpillRef).

  Gathers the groups of a bundle and writes them to a new file in `folder`
  whenever they reach SPILL_BYTES (and at the end of the bundle), the
  groups of one key together; emits one reference per key and file. Files
  have names no other writer uses, so a retried bundle only leaves files
  nothing refers to (the folder is removed with the run's temporary
  files).
  """

  def __init__(self, folder: str):
    super().__init__()
    self._folder = folder
    self._groups: Dict[tuple, list] = {}
    self._bytes = 0

  def start_bundle(self):
    self._groups, self._bytes = {}, 0

  def process(self, item):
    key, pairs = item
    self._groups.setdefault(key, []).extend(pairs)
    self._bytes += sum(len(value) for _, value in pairs) + (
        _ENTRY.size * len(pairs))
    if self._bytes >= SPILL_BYTES:
      yield from self._write()

  def finish_bundle(self):
    for item in self._write():
      yield WindowedValue(item, MIN_TIMESTAMP, (GlobalWindow(),))

  def _write(self):
    groups, self._groups, self._bytes = self._groups, {}, 0
    if not groups:
      return
    os.makedirs(self._folder, exist_ok=True)
    name = uuid.uuid4().hex + '.records'
    refs = []
    with open(os.path.join(self._folder, name), 'wb') as f:
      offset = 0
      for key in sorted(groups):
        pairs = groups[key]
        parts = []
        for place, value in pairs:
          parts.append(_ENTRY.pack(place, len(value)))
          parts.append(value)
        data = b''.join(parts)
        f.write(data)
        refs.append((key, (name, offset, len(data), len(pairs))))
        offset += len(data)
    yield from refs


class ReadSpilledGroups(beam.DoFn):
  """((tag, bucket), [SpillRef]) -> (tag, [values in position order])."""

  def __init__(self, folder: str):
    super().__init__()
    self._folder = folder

  def process(self, item):
    (tag, _), refs = item
    pairs: List[Tuple[float, bytes]] = []
    # The grouping hands references over in any order; positions decide
    # the order (ids are unique, so no two records share a position).
    for ref in sorted(refs):
      pairs.extend(read_spilled(self._folder, ref))
    pairs.sort(key=lambda p: p[0])
    yield tag, [value for _, value in pairs]


def read_spilled(folder: str, ref: SpillRef) -> List[Tuple[float, bytes]]:
  """The (position, value) pairs a reference names.

  Raises:
    IOError: The file is missing, shorter than the reference, or its bytes
      do not hold the values the reference counts.
  """
  name, offset, length, count = ref
  path = os.path.join(folder, name)
  with open(path, 'rb') as f:
    f.seek(offset)
    data = f.read(length)
  if len(data) != length:
    raise IOError(f'the shuffle file {path} ends {length - len(data)} bytes '
                  f'before the group at byte {offset} does')
  pairs, at = [], 0
  for _ in range(count):
    if at + _ENTRY.size > length:
      break
    place, size = _ENTRY.unpack_from(data, at)
    at += _ENTRY.size
    pairs.append((place, data[at:at + size]))
    at += size
  if at != length or len(pairs) != count:
    raise IOError(f'the shuffle file {path} does not hold the {count} '
                  f'values of the group at byte {offset}')
  return pairs


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
