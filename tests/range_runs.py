"""What the tests of CSV files read in byte ranges (sensor and text) share:
counting the files the reader cut, and a run's dead letters."""

import glob
import json

from transforms.sources import tables


class CountRanges:
  """Counts the files the reader cut into ranges (tables.csv_ranges)."""

  def __init__(self):
    self.files = 0
    self._original = tables.csv_ranges

  def __enter__(self):
    def counting(*args, **kwargs):
      found = self._original(*args, **kwargs)
      self.files += found is not None
      return found
    tables.csv_ranges = counting
    return self

  def __exit__(self, *exc):
    tables.csv_ranges = self._original


def dead_letters(out):
  """(input, reason, split) of every dead letter of the published run,
  sorted (none: [])."""
  found = []
  for path in glob.glob(str(out / 'run-*' / 'dead_letter-*.jsonl')):
    with open(path, encoding='utf-8') as f:
      found += [(d['input'], d['reason'], d['split']) for d in map(
          json.loads, filter(None, f.read().splitlines()))]
  return sorted(found)


def assert_same_without_workers(src, tmp_path, monkeypatch, caplog, args,
                                work):
  """Worker processes that cannot start: a warning naming `work`, and the
  fingerprint and dead letters of a run with --local_processes 0."""
  from pipelines import preprocess  # pylint: disable=import-outside-toplevel
  from transforms.runtime import processes  # pylint: disable=import-outside-toplevel

  def no_processes(*unused_args, **unused_kwargs):
    raise OSError('no processes here')

  monkeypatch.setattr(processes, 'Ahead', no_processes)
  out, whole_out = tmp_path / 'out_fallback', tmp_path / 'out_whole'
  with caplog.at_level('WARNING'):
    manifest = preprocess.run(['--input', str(src), '--output', str(out),
                               '--local_processes', '2'] + args)
  assert f'could not start 2 processes to {work}' in caplog.text
  whole = preprocess.run(['--input', str(src), '--output', str(whole_out),
                          '--local_processes', '0'] + args)
  assert manifest['fingerprint'] == whole['fingerprint']
  assert dead_letters(out) == dead_letters(whole_out)


def run_with_and_without_workers(src, tmp_path, args):
  """(ranged, whole): (manifest, files cut into ranges, dead letters) of a
  run with 2 worker processes (output in tmp_path/out_2) and of one with
  none (tmp_path/out_0)."""
  from pipelines import preprocess  # pylint: disable=import-outside-toplevel
  results = {}
  for workers in ('2', '0'):
    out = tmp_path / f'out_{workers}'
    with CountRanges() as ranges:
      manifest = preprocess.run(['--input', str(src), '--output', str(out),
                                 '--local_processes', workers] + args)
    results[workers] = (manifest, ranges.files, dead_letters(out))
  return results['2'], results['0']
