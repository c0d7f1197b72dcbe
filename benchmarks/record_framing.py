"""Framing and fingerprinting records a list at a time, against one record
at a time.

    python benchmarks/record_framing.py [--records 200000] [--repeats 7]
        [--results PATH | --no-results]

A benchmark, not a test. In one process, on the same generated records,
it times the two per-record steps of the end of every run (RecordListSink
writing a shuffle bucket, FingerprintListsFn adding it):

  framing      plain: one record at a time in Python with google-crc32c
               (what frame_records did before; Beam's own
               `_TFRecordUtil.write_record` is slower still);
               ours:  transforms/output/tfrecord_files.frame_records
  fingerprint  plain: the sum of shards.record_digest, one record at a
               time;
               ours:  shards.digest_sum

on text-like records (250-400 bytes, lists of 2,000: a text or sensor
shuffle bucket) and image-like ones (12-18 KB, lists of 20), in
interleaved order (plain, ours, plain, ...). It prints the median
microseconds a record of each over --repeats, with min..max, and
ours / plain; and checks that both give the same bytes and sums. Only the
median of a quiet machine means anything: the spread shows the noise.

A run at the default records with at least the default repeats rewrites its
section of benchmarks/RESULTS.md (harness.write_results: date, commit,
machine, command, the printed table); --no-results keeps it from doing so,
--results PATH writes the section of that file whatever the arguments.
"""

import argparse
import io
import os
import random
import statistics
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (_ROOT, os.path.join(_ROOT, 'benchmarks')):
  if _path not in sys.path:
    sys.path.insert(0, _path)
# pylint: disable=g-import-not-at-top,wrong-import-position
import harness
from apache_beam.io.tfrecordio import _TFRecordUtil  # pylint: disable=protected-access

from transforms.output import shards
from transforms.output import tfrecord_files
# pylint: enable=g-import-not-at-top,wrong-import-position


def _plain_framing(records) -> bytes:
  parts = []
  for record in records:
    length = len(record).to_bytes(8, 'little')
    parts.append(length)
    parts.append(tfrecord_files.masked_crc32c(length).to_bytes(4, 'little'))
    parts.append(record)
    parts.append(tfrecord_files.masked_crc32c(record).to_bytes(4, 'little'))
  return b''.join(parts)


def _beams_framing(records) -> bytes:
  buf = io.BytesIO()
  for record in records:
    _TFRecordUtil.write_record(buf, record)
  return buf.getvalue()


def _plain_digest_sum(records) -> int:
  return sum(shards.record_digest(r) for r in records)


def _lists(rng, records, lo, hi, per_list):
  # Lengths from a small set, as a dataset's records have.
  lengths = [rng.randrange(lo, hi) for _ in range(200)]
  out = [rng.randbytes(rng.choice(lengths)) for _ in range(records)]
  return [out[i:i + per_list] for i in range(0, records, per_list)]


def _time(fn, lists) -> float:
  start = time.perf_counter()
  for records in lists:
    fn(records)
  return time.perf_counter() - start


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--records', type=int, default=200_000,
                      help='text-like records (image-like: a twentieth)')
  parser.add_argument('--repeats', type=int, default=7)
  harness.add_results_flags(parser)
  args = parser.parse_args(argv)
  info = harness.run_info(sys.argv[1:] if argv is None else argv, __file__)
  with harness.printed() as table:
    measure(args)
  harness.write_results(
      args, harness.at_defaults(parser, args, ['records']),
      'record_framing',
      'Framing and fingerprinting records (record_framing.py)', info,
      harness.code_block(table.getvalue()))


def measure(args):
  """Times both steps on both kinds of records and prints the table."""
  rng = random.Random(0)
  kinds = (('text-like, lists of 2,000',
            _lists(rng, args.records, 250, 400, 2000)),
           ('image-like, lists of 20',
            _lists(rng, max(20, args.records // 20), 12_000, 18_000, 20)))
  steps = (('framing', _plain_framing, tfrecord_files.frame_records),
           ('fingerprint', _plain_digest_sum, shards.digest_sum))
  print(f'{"records":28s} {"step":12s} {"plain us/rec":>18s} '
        f'{"ours us/rec":>18s} {"ours/plain":>10s}')
  for kind, lists in kinds:
    n = sum(map(len, lists))
    for step, plain, ours in steps:
      for records in lists[:3]:
        if plain(records) != ours(records) or (
            step == 'framing' and _beams_framing(records) != ours(records)):
          raise SystemExit(f'{step} differs on {kind} records')
      times = {'plain': [], 'ours': []}
      for _ in range(args.repeats):
        times['plain'].append(_time(plain, lists) / n * 1e6)
        times['ours'].append(_time(ours, lists) / n * 1e6)
      med = {k: statistics.median(v) for k, v in times.items()}
      cell = {k: f'{med[k]:.3f} ({min(v):.2f}..{max(v):.2f})'
              for k, v in times.items()}
      print(f'{kind:28s} {step:12s} {cell["plain"]:>18s} '
            f'{cell["ours"]:>18s} {med["ours"] / med["plain"]:10.2f}')


if __name__ == '__main__':
  main()
