"""Write and summarize the records of every split.

- `WriteSplits`: per split, the fingerprint of the records and their
  shards; the one place every modality writes through.
- `WriteSplit`: lists of records to TFRecord files with TFDS-style names
  (`<name>-<split>.tfrecord-00000-of-00004`), then one summary per shard
  (records, bytes, SHA-256) read back from the written files; with
  `index=True` the same read writes each shard's index file
  (`<shard>.idx`, DALI's tfrecord2idx format) beside it.
- `RecordListSink`: Beam's file sink (what WriteToTFRecord writes
  through) taking a whole list of records per element.
- `FingerprintFn`: an order-independent fingerprint of a split's records
  (the sum of their SHA-256 digests modulo 2**128), equal on every runner
  and for every shard count.
"""

import hashlib
import operator

import apache_beam as beam
from apache_beam import coders
from apache_beam.io import filebasedsink
from apache_beam.io import iobase
from apache_beam.io.filesystem import CompressionTypes
import numpy as np

from transforms.core import metrics
from transforms.runtime import progress
from transforms.output import tfrecord_files

_MOD = 1 << 128
# Shard file names after the prefix (TFDS's numbering).
_SHARD_NAMES = '-SSSSS-of-NNNNN'


def record_digest(record: bytes) -> int:
  return int.from_bytes(hashlib.sha256(record).digest()[:16], 'big')


_DIGEST = operator.methodcaller('digest')


def digest_sum(records) -> int:
  """sum(record_digest(r) for r in records), not reduced: each digest's
  first 16 bytes are read as four 32-bit words and the words are summed
  column by column in NumPy (exact below 2**32 records)."""
  if not isinstance(records, list):
    records = list(records)
  if not records:
    return 0
  digests = b''.join(map(_DIGEST, map(hashlib.sha256, records)))
  words = np.frombuffer(digests, dtype='>u4').reshape(len(records), 8)
  columns = words[:, :4].astype(np.uint64).sum(axis=0)
  return sum(int(v) << (32 * (3 - k)) for k, v in enumerate(columns))


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
    return ((total + digest_sum(records)) % _MOD, count + len(records))


def shard_prefix(output_dir: str, name: str, split: str) -> str:
  return f'{output_dir.rstrip("/")}/{name}-{split}.tfrecord'


class RecordListSink(filebasedsink.FileBasedSink):
  """TFRecord files written through Beam's file sink, a list per element.

  The same sink WriteToTFRecord uses (temporary files per bundle, renamed
  to `-SSSSS-of-NNNNN` names when every bundle is done, sharding by the
  runner), but each element is a list of records written in one call:
  the files' bytes are those of writing the records one element each, in
  the same order, without the runner's per-element work for each record.
  """

  def __init__(self, file_path_prefix: str, file_name_suffix: str,
               shard_name_template: str, compression_type):
    super().__init__(file_path_prefix, coder=coders.BytesCoder(),
                     file_name_suffix=file_name_suffix, num_shards=0,
                     shard_name_template=shard_name_template,
                     mime_type='application/octet-stream',
                     compression_type=compression_type)

  def write_record(self, file_handle, records):
    file_handle.write(tfrecord_files.frame_records(records))


class WriteSplit(beam.PTransform):
  """Writes one split's record lists and summarizes every shard written.

  With the runner choosing the shards (`num_shards` 0), each list is one
  element of `RecordListSink`. A fixed count goes through WriteToTFRecord
  one record per element, so that Beam's round-robin spreads records, not
  lists, evenly over the shards.

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

  def expand(self, lists):
    compressed, index = self._compressed, self._index
    suffix = '.gz' if compressed else ''
    compression = (CompressionTypes.GZIP if compressed else
                   CompressionTypes.UNCOMPRESSED)
    if self._num_shards:
      written = (lists
                 | 'OneRecordEach' >> beam.FlatMap(lambda records: records)
                 | 'WriteToTFRecord' >> beam.io.WriteToTFRecord(
                     self._prefix, file_name_suffix=suffix,
                     num_shards=self._num_shards,
                     shard_name_template=_SHARD_NAMES,
                     compression_type=compression))
    else:
      written = lists | 'WriteRecordLists' >> iobase.Write(RecordListSink(
          self._prefix, suffix, _SHARD_NAMES, compression))
    # -> shard path per written file
    return (written
            | 'SpreadShards' >> beam.Reshuffle()
            | 'SummarizeShard' >> beam.Map(
                tfrecord_files.shard_summary, compressed=compressed,
                index=index))


# The progress counter of the records handed to the writer
# (runtime/progress.py).
WRITTEN = 'written'


class _CountRecords(beam.DoFn):
  """Counts the records of each list (also for the progress line). An
  empty list goes no further: alone in a bundle, it would open a writer,
  and leave a file, of its own."""

  def __init__(self, modality: str):
    super().__init__()
    self._serialized = metrics.counter(modality, 'serialized')
    self._written = progress.counter(modality, WRITTEN)

  def process(self, records):
    if records:
      self._serialized.inc(len(records))
      self._written.inc(len(records))
      yield records


class WriteSplits(beam.PTransform):
  """Writes every split's records; the last step before the manifest.

  Input: one PCollection per split (in `split_names` order) of record
  lists (a list is whatever a producer had at hand: one record, or a
  shuffle bucket). Output: (shards, fingerprints), as FinalizeDataset reads
  them: (split, shard summary) per written shard and (split,
  {'fingerprint', 'records'}) per split.
  """

  def __init__(self, cfg, staging: str):
    super().__init__()
    self._cfg, self._staging = cfg, staging

  def expand(self, per_split):
    cfg = self._cfg
    shards_all, fps_all = [], []
    for split, lists in zip(cfg.split_names, per_split):
      fps_all.append(
          lists
          | f'Fingerprint[{split}]' >> beam.CombineGlobally(
              FingerprintListsFn())
          | f'TagFingerprint[{split}]' >> beam.Map(
              lambda fp, s=split: (s, fp)))
      shards = (lists
                | f'CountRecords[{split}]' >> beam.ParDo(
                    _CountRecords(cfg.modality))
                | f'WriteSplit[{split}]' >> WriteSplit(
                    self._staging, cfg.name, split, cfg.num_shards,
                    cfg.compression == 'gzip', cfg.index_files))
      shards_all.append(shards | f'TagShards[{split}]' >> beam.Map(
          lambda s, sp=split: (sp, s)))
    return (tuple(shards_all) | 'AllShards' >> beam.Flatten(),
            tuple(fps_all) | 'AllFingerprints' >> beam.Flatten())
