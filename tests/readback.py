"""Reading a published dataset back in the end-to-end tests: its dead
letters, every record of a split through the reader, and a passing
validation report."""

import contextlib
import io
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


def splits_of(out):
  """{id: split} of every record of a published dataset."""
  manifest = reader.load_manifest(str(out))
  found = {}
  for split in manifest['splits']:
    for ex_id in read_all(out, split).get('id', []):
      found[ex_id.decode('utf-8')] = split
  return found


def validation_run(out):
  """(exit code, printed summary, JSON report) of validating `out`."""
  printed = io.StringIO()
  with contextlib.redirect_stdout(printed):
    code = validate.main(['--output', str(out)])
  with open(out / 'validation_report.json', encoding='utf-8') as f:
    report = json.load(f)
  return code, printed.getvalue(), report


def assert_valid(out):
  """Runs the validation pipeline and fails with the failed checks."""
  report = validate.run(['--output', str(out)])
  failed = [c for c in report['checks'] if c['status'] != 'pass']
  assert report['verdict'] == 'pass', failed
  return report


def move_records(out, source, target, choose):
  """Moves the records of split `source` that `choose` (a parsed
  tf.train.Example -> bool) picks into the first shard of split `target`,
  as a run that leaked them would have written them: both splits' shards
  are rewritten and their manifest entries (shards, record and class
  counts, fingerprints) recomputed, so only the leak itself differs.

  Returns:
    The moved records, parsed.
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from tensorflow.core.example import example_pb2  # pylint: disable=import-outside-toplevel
  from transforms.output import shards as sinks  # pylint: disable=import-outside-toplevel
  from transforms.output import tfrecord_files  # pylint: disable=import-outside-toplevel
  path = os.path.join(out, 'manifest.json')
  with open(path, encoding='utf-8') as f:
    manifest = json.load(f)
  compressed = manifest.get('compression') == 'gzip'
  options = tf.io.TFRecordOptions('GZIP' if compressed else '')

  def parse(record):
    example = example_pb2.Example()
    example.ParseFromString(record)
    return example

  def read(shard):
    return [r.numpy() for r in tf.data.TFRecordDataset(
        os.path.join(out, shard['file']),
        compression_type=options.compression_type)]

  moved = []
  shards = {split: [(s, read(s)) for s in manifest['splits'][split]['shards']]
            for split in (source, target)}
  for i, (shard, records) in enumerate(shards[source]):
    kept = [r for r in records if not choose(parse(r))]
    moved += [r for r in records if choose(parse(r))]
    shards[source][i] = (shard, kept)
  assert moved, f'no record of {source} was chosen'
  first, records = shards[target][0]
  shards[target][0] = (first, records + moved)
  for split, parts in shards.items():
    entry = manifest['splits'][split]
    counts, digest = {}, 0
    for shard, records in parts:
      file = os.path.join(out, shard['file'])
      with tf.io.TFRecordWriter(file, options) as writer:
        for record in records:
          writer.write(record)
          label = parse(record).features.feature['label_text'].bytes_list
          name = label.value[0].decode('utf-8')
          counts[name] = counts.get(name, 0) + 1
          digest = (digest + sinks.record_digest(record)) % (1 << 128)
      summary = tfrecord_files.shard_summary(file, compressed,
                                             index=bool(shard.get('index')))
      shard.update(records=summary['records'], bytes=summary['bytes'],
                   sha256=summary['sha256'])
    entry['records'] = entry['examples'] = entry['serialized'] = sum(
        len(records) for _, records in parts)
    entry['class_counts'] = dict(sorted(counts.items()))
    entry['class_counts_before_rebalance'] = entry['class_counts']
    entry['fingerprint'] = format(digest, '032x')
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(manifest, f, indent=2)
  return [parse(r) for r in moved]
