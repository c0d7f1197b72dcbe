"""Reading a published dataset back in the end-to-end tests: its dead
letters, every record of a split through the reader, a passing
validation report, and whether the near-duplicates validation finds are
those the run grouped."""

import contextlib
import io
import json
import os

import numpy as np
import pytest

from pipelines import reader
from pipelines import validate
from transforms.core import near_duplicate_decisions
from transforms.validation import dataset_checks


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
  from transforms.output import shards as shards_lib  # pylint: disable=import-outside-toplevel
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
          digest = (digest + shards_lib.record_digest(record)) % (1 << 128)
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


@contextlib.contextmanager
def near_duplicates_listed_whole():
  """Meanwhile, runs in this process list every near-duplicate group
  whole: the manifest's (core/near_duplicate_decisions.MAX_LISTED groups of
  _IDS_PER_GROUP contents) and validation's report
  (dataset_checks.MAX_NEAR_LISTED groups)."""
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(near_duplicate_decisions, 'MAX_LISTED', 1 << 30)
    patch.setattr(near_duplicate_decisions, '_IDS_PER_GROUP', 1 << 30)
    patch.setattr(dataset_checks, 'MAX_NEAR_LISTED', 1 << 30)
    yield


def assert_near_duplicates_grouped(out, report, content_of):
  """Every near-duplicate pair that validation found (its `report`) in the
  dataset `out` is inside one near-duplicate group of the manifest, or is
  one content of the run (copies, which the run keeps together as one
  content, not as a group); both listed whole (near_duplicates_listed_whole).

  Validation's groups are its pairs joined, so each group is checked: its
  members as the run's contents (`content_of`: id -> the run's content
  digest) are one content or all in one of the manifest's groups.

  Returns:
    (the manifest's groups, validation's), each a list of sets of ids.
  """
  near = reader.load_manifest(str(out))['contents']['near_duplicates']
  found = report['content']['near_duplicates']
  # Listed whole: every group, every content of a group (one id each).
  assert len(near['examples']) == near['groups']
  assert sum(len(g['ids']) for g in near['examples']) == near['contents']
  assert len(found['listed_groups']) == found['groups']
  # (Validation lists up to 10 records of a group, one per content and
  # split.)
  assert all(len(g['members']) < 10 for g in found['listed_groups'])
  grouped = [set(g['ids']) for g in near['examples']]
  validated = [{m['id'] for m in g['members']}
               for g in found['listed_groups']]
  contents = [{content_of(i) for i in g} for g in grouped]
  for members in validated:
    mine = {content_of(i) for i in members}
    assert len(mine) == 1 or any(mine <= c for c in contents), (
        f'validation grouped {sorted(members)}, the run did not')
  return grouped, validated
