"""Reading a published dataset back in the end-to-end tests: its dead
letters, every record of a split through the reader, and a passing
validation report."""

import json
import os

import numpy as np

from pipelines import reader
from pipelines import validate


def dead_letters(out):
  """Every dead-letter record of a published dataset (the files its
  manifest names)."""
  manifest = reader.load_manifest(str(out))
  files = manifest['dead_letter']['files']
  assert files, 'the manifest names no dead-letter file'
  rows = []
  for name in files:
    with open(os.path.join(out, name), encoding='utf-8') as f:
      rows += [json.loads(line) for line in f if line.strip()]
  assert len(rows) == manifest['dead_letter']['count']
  return rows


def read_all(out, split):
  """{feature: array of all records} of a split, in shard order ({} when
  the split is empty)."""
  ds = reader.load_dataset(str(out), split, batch_size=10000, shuffle=False)
  batches = list(ds.as_numpy_iterator())
  if not batches:
    return {}
  return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def assert_valid(out):
  """Runs the validation pipeline and fails with the failed checks."""
  report = validate.run(['--output', str(out)])
  failed = [c for c in report['checks'] if c['status'] != 'pass']
  assert report['verdict'] == 'pass', failed
  return report
