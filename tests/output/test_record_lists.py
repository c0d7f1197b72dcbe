"""Record lists written a list per element (RecordListSink) against
WriteToTFRecord writing the same records one element each.

Real pipelines on the DirectRunner. The files are compared byte for byte,
plain and GZIP; a fixed shard count still spreads records (not lists)
evenly; an empty list adds no file; TensorFlow reads what the sink wrote.
The framing and the fingerprint of a list are those of Beam's TFRecord
writer and of the records one at a time.
"""

import glob
import gzip
import io
import os
import random

import apache_beam as beam
from apache_beam.io.tfrecordio import _TFRecordUtil
import pytest

from transforms.output import shards
from transforms.output import tfrecord_files


def _lists():
  """Uneven lists of records of many sizes, empty records included."""
  out, n = [], 0
  for size in [1, 7, 0, 90, 3, 1, 1, 25, 0, 12]:
    out.append([bytes([n % 251]) * (n * 37 % 300) + f'#{n}'.encode()
                if n % 11 else b'' for n in range(n, n + size)])
    n += size
  return out


def _files(prefix):
  return sorted(glob.glob(prefix + '*'))


def _read(path, compressed):
  with open(path, 'rb') as f:
    data = f.read()
  if compressed:
    data = gzip.decompress(data)
  return list(tfrecord_files.iter_records(io.BytesIO(data)))


def _write_both(tmp_path, compressed, num_shards=0):
  """(paths from WriteSplit, paths from WriteToTFRecord), one pipeline
  each, the same lists in one bundle."""
  lists = _lists()
  ours = str(tmp_path / 'ours')
  theirs = str(tmp_path / 'theirs' / 'ds-train.tfrecord')
  with beam.Pipeline() as p:
    (p | beam.Create(lists, reshuffle=False)
     | beam.ParDo(shards._CountRecords('text'))  # as in WriteSplits
     | shards.WriteSplit(ours, 'ds', 'train', num_shards, compressed))
  with beam.Pipeline() as p:
    (p | beam.Create(lists, reshuffle=False)
     | beam.FlatMap(lambda records: records)
     | beam.io.WriteToTFRecord(
         theirs, file_name_suffix='.gz' if compressed else '',
         num_shards=num_shards, shard_name_template='-SSSSS-of-NNNNN',
         compression_type='gzip' if compressed else 'uncompressed'))
  return (_files(shards.shard_prefix(ours, 'ds', 'train')),
          _files(theirs))


@pytest.mark.parametrize('compressed', [False, True])
def test_same_bytes_as_write_to_tfrecord(tmp_path, compressed):
  ours, theirs = _write_both(tmp_path, compressed)
  assert len(ours) == len(theirs) == 1
  assert [os.path.basename(p) for p in ours] == [
      'ds-train.tfrecord-00000-of-00001' + ('.gz' if compressed else '')]
  with open(ours[0], 'rb') as a, open(theirs[0], 'rb') as b:
    mine, beams = a.read(), b.read()
  if compressed:
    mine, beams = gzip.decompress(mine), gzip.decompress(beams)
  assert mine == beams
  want = [r for records in _lists() for r in records]
  assert _read(ours[0], compressed) == want


def test_frame_records_is_the_tfrecord_framing():
  records = [b'', b'a', bytes(range(256)) * 40]
  framed = tfrecord_files.frame_records(records)
  assert list(tfrecord_files.iter_records(io.BytesIO(framed))) == records
  assert tfrecord_files.frame_records([]) == b''
  # TensorFlow's own reader agrees.
  import tensorflow as tf
  path = os.path.join(os.environ.get('TMPDIR', '/tmp'),
                      f'framed-{os.getpid()}.tfrecord')
  try:
    with open(path, 'wb') as f:
      f.write(framed)
    got = [t.numpy() for t in tf.data.TFRecordDataset(path)]
  finally:
    os.remove(path)
  assert got == records


def test_fixed_count_spreads_records_not_lists(tmp_path):
  ours, theirs = _write_both(tmp_path, False, num_shards=4)
  assert len(ours) == len(theirs) == 4
  counts = sorted(len(_read(p, False)) for p in ours)
  total = sum(len(records) for records in _lists())
  assert sum(counts) == total
  # One bundle: Beam's round-robin gives every shard total/4, give or
  # take one. Whole lists per shard could not: one list holds 90 of 140.
  assert counts[-1] - counts[0] <= 1, counts
  mine = sorted(r for p in ours for r in _read(p, False))
  beams = sorted(r for p in theirs for r in _read(p, False))
  assert mine == beams


def test_counting_step_counts_records_and_drops_empty_lists(tmp_path):
  # An empty list alone in a bundle would open a writer, and leave an
  # empty file, of its own: the counting step keeps it from the sink.
  count = shards._CountRecords('text')
  assert list(count.process([])) == []
  assert list(count.process([b'a', b'b'])) == [[b'a', b'b']]
  out = str(tmp_path / 'counted')
  p = beam.Pipeline()
  (p | beam.Create([[], [b'x'], [], [b'y', b'z']], reshuffle=False)
   | beam.ParDo(shards._CountRecords('text'))
   | shards.WriteSplit(out, 'ds', 'train', 0, False))
  result = p.run()
  result.wait_until_finish()
  serialized = result.metrics().query(
      beam.metrics.MetricsFilter().with_name('serialized'))['counters']
  assert [c.committed for c in serialized] == [3]
  files = _files(shards.shard_prefix(out, 'ds', 'train'))
  assert [r for f in files for r in _read(f, False)] == [b'x', b'y', b'z']


def _beams_framing(records) -> bytes:
  """The records as Beam's TFRecord writer frames them, one at a time."""
  buf = io.BytesIO()
  for record in records:
    _TFRecordUtil.write_record(buf, bytes(record))
  return buf.getvalue()


def _random_records(rng, n, lengths):
  return [rng.randbytes(rng.choice(lengths)) for _ in range(n)]


@pytest.mark.parametrize('n', [1, 2, 2047, 2048, 2049, 5000])
def test_frame_records_matches_beams_writer(n):
  # Across the chunk boundary (2048 records), with repeated and one-off
  # lengths, empty records, and large ones.
  rng = random.Random(n)
  lengths = [0, 1, 7, 300, 301, 302, 4095, 70_000] + [
      rng.randrange(20_000) for _ in range(50)]
  records = _random_records(rng, n, lengths)
  assert tfrecord_files.frame_records(records) == _beams_framing(records)
  # Any iterable of records.
  assert tfrecord_files.frame_records(iter(records)) == _beams_framing(
      records)


def test_frame_records_past_its_header_table(monkeypatch):
  # More distinct lengths than the table of length headers keeps: the
  # table stops growing and the framing stays right.
  monkeypatch.setattr(tfrecord_files, '_LENGTH_HEADERS', {})
  monkeypatch.setattr(tfrecord_files, '_MAX_LENGTH_HEADERS', 5)
  records = [b'x' * n for n in range(40)] * 2
  assert tfrecord_files.frame_records(records) == _beams_framing(records)
  assert len(tfrecord_files._LENGTH_HEADERS) == 5


def test_digest_sum_is_the_sum_of_record_digests():
  rng = random.Random(7)
  for n in [0, 1, 3, 1000]:
    records = _random_records(rng, n, [0, 5, 320, 15_000])
    assert shards.digest_sum(records) == sum(
        shards.record_digest(r) for r in records)
    assert shards.digest_sum(iter(records)) == shards.digest_sum(records)
  # Digests near 2**128 - 1: the column sums carry into the next word.
  high = [r for r in (rng.randbytes(8) for _ in range(20000))
          if shards.record_digest(r) >= 0xff << 120][:8]
  assert len(high) == 8
  assert shards.digest_sum(high) == sum(shards.record_digest(r) for r in high)


def test_fingerprint_of_lists_is_the_fingerprint_of_records():
  lists = _lists()
  by_record, by_list = shards.FingerprintFn(), shards.FingerprintListsFn()
  acc = by_record.create_accumulator()
  for record in (r for records in lists for r in records):
    acc = by_record.add_input(acc, record)
  accs = [by_list.add_input(by_list.create_accumulator(), records)
          for records in lists]
  merged = by_list.merge_accumulators(accs)
  assert by_list.extract_output(merged) == by_record.extract_output(acc)
  assert by_list.extract_output(merged)['records'] == sum(map(len, lists))
