"""Checks of a published dataset: per record and per shard.

`check_shard` reads one shard and checks every record in it; the validation
pipeline runs it on every shard in parallel and `report.build_report`
compares the totals with the manifest. Nothing here trusts the manifest's
numbers: counts, checksums, fingerprints and class counts are all
recomputed from the files.
"""

import bisect
import math
from typing import Dict, List, Optional

import numpy as np

from transforms import modalities
from transforms.output import manifest as manifest_lib
from transforms.validation import dataset_checks
from transforms.validation import report_samples
from transforms.output import record_index
from transforms.core import features
from transforms.output import shards
from transforms.output import tfrecord_files

# Per shard, at most this many record-level problems are kept verbatim.
MAX_ERRORS_PER_SHARD = 20
# Per shard and flag, the ids of at most this many flagged records are kept
# (the smallest, so the merged list does not depend on the shards' order).
MAX_FLAGGED_IDS = 20


def _feature_values(feature, dtype: str):
  kind = feature.WhichOneof('kind')
  expected = {'string': 'bytes_list', 'int64': 'int64_list',
              'float32': 'float_list'}[dtype]
  if kind != expected:
    raise ValueError(f'is {kind or "empty"}, expected {expected}')
  return getattr(feature, kind).value


def check_record(record: bytes, manifest: dict,
                 stats: Optional[dataset_checks.FeatureStats] = None) -> Dict:
  """Parses one record against the manifest and checks its values.

  The features, label and id are checked here; the modality that wrote
  the dataset checks the rest (its `check_values`).

  Args:
    record: Serialized tf.train.Example.
    manifest: The dataset's manifest.
    stats: If given, the record's feature statistics are added to it.

  Returns:
    {'label': str, 'id': str, 'content': content hash, 'exact': whether
    equal hashes mean equal inputs (not for texts with unknown words),
    'observation': which observation the record is where equal content
    can be two ('' where the content says it), 'recording': the recording
    whose records must share a split (a sensor's entity) or None,
    'time_range': (start, end) of the times it covers or None,
    'series': (recording, place, start, end) of a record in a time series
    (a sensor window's global start, None for a row) or None,
    'channel_sum', 'channel_sum_squares', 'pixels', 'image': decoded
    pixels or None, 'values': the sensor values or None} for the
    aggregates; what a modality does not set keeps its default here.

  Raises:
    ValueError: The record is wrong; the message says how.
  """
  feats, values = _parse(record, manifest)
  _check_label(values, manifest)
  modality = modalities.of_manifest(manifest)
  out = {'label': values[features.LABEL_TEXT][0].decode('utf-8', 'replace'),
         'channel_sum': None, 'channel_sum_squares': None, 'pixels': 0,
         'image': None, 'values': None, 'flags': (),
         'id': values[features.ID][0].decode('utf-8', 'replace'), 'exact': True,
         'observation': '', 'recording': None, 'time_range': None,
         'series': None, 'signature': None,
         'content': dataset_checks.record_content_hash(
             feats, modality.identity_features)}
  modality.check_values(values, manifest, out, stats)
  return out


def _parse(record: bytes, manifest: dict):
  """(feature map, {feature name: values}) of a record that has exactly
  the spec's features, each of its dtype and size."""
  from tensorflow.core.example import example_pb2  # pylint: disable=import-outside-toplevel
  example = example_pb2.Example()
  try:
    example.ParseFromString(record)
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f'not a tf.train.Example: {e}') from None
  feats = example.features.feature
  spec = manifest['feature_spec']
  missing = sorted(set(spec) - set(feats))
  extra = sorted(set(feats) - set(spec))
  if missing or extra:
    raise ValueError(f'features differ from the spec (missing: {missing}, '
                     f'unexpected: {extra})')
  values = {}
  for key, entry in spec.items():
    try:
      vals = _feature_values(feats[key], entry['dtype'])
    except ValueError as e:
      raise ValueError(f'feature {key!r} {e}') from None
    size = None if entry['shape'] is None else (
        int(np.prod(entry['shape'])) if entry['shape'] else 1)
    if size is not None and len(vals) != size:
      raise ValueError(f'feature {key!r} has {len(vals)} values, expected '
                       f'{size}')
    values[key] = vals
  return feats, values


def _check_label(values: Dict, manifest: dict) -> None:
  """The label id names the label text; the weight is positive."""
  labels = manifest['labels']
  label_id = values[features.LABEL][0]
  if not 0 <= label_id < len(labels):
    raise ValueError(f'label id {label_id} is not one of the '
                     f'{len(labels)} labels')
  label_text = values[features.LABEL_TEXT][0].decode('utf-8', 'replace')
  if labels[label_id] != label_text:
    raise ValueError(f'label id {label_id} is {labels[label_id]!r} but '
                     f'label_text is {label_text!r}')
  if features.WEIGHT in values:
    w = values[features.WEIGHT][0]
    if not (math.isfinite(w) and w > 0):
      raise ValueError(f'weight {w} is not a positive finite number')


def check_shard(shard: dict, output: str, manifest: dict) -> dict:
  """Reads one shard and checks its bytes and every record in it.

  Args:
    shard: {'split', 'file', 'records', 'sha256'[, 'index']} from the
      manifest.
    output: The dataset folder.
    manifest: The manifest.

  Returns:
    A shard result: counts, class counts, fingerprint, pixel sums, the
    flagged records ({flag: {'count', 'ids'}}), the problems found (each
    naming the file), each record's (content hash, (split, id, exact,
    label, observation)) in 'content',
    the records of each recording in 'recordings' ({recording: n}),
    each record's (recording, (split, place, start, end)) in 'series'
    (records in a time series) and the time range the records cover in
    'time_range' (see dataset_checks.widen_time_range; None without
    times).
  """
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  path = manifest_lib.join(output, shard['file'])
  result = {'split': shard['split'], 'file': shard['file'], 'records': 0,
            'bad_records': 0, 'shard_errors': [], 'record_errors': [],
            'class_counts': {},
            'fingerprint': format(0, '032x'), 'channel_sum': None,
            'channel_sum_squares': None, 'pixels': 0, 'sha256': None,
            'readable': True, 'bytes': None, 'largest_record': 0,
            'stats': {}, 'content': [], 'samples': {}, 'flagged': {},
            'recordings': {}, 'series': [], 'time_range': None,
            'near': []}
  if not FileSystems.exists(path):
    result['readable'] = False
    result['shard_errors'].append(f'{shard["file"]}: file is missing')
    return result
  result['bytes'] = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
  stats = dataset_checks.FeatureStats()
  sizes = _read_records(path, shard, manifest, result, stats)
  if result['readable']:
    result['shard_errors'].extend(
        _shard_problems(shard, output, manifest, result, sizes))
  result['stats'] = stats.stats
  result['hists'] = stats.hists
  if result['near']:
    result['near'] = modalities.of_manifest(
        manifest).signed_near_duplicates(result['near'], manifest)
  return result


def _read_records(path: str, shard: dict, manifest: dict, result: dict,
                  stats: dataset_checks.FeatureStats) -> List[int]:
  """Reads the shard at `path` and checks each record into `result`
  (counts, fingerprint, checksum, whether it reads to its end).

  Returns:
    The data bytes of each record, for the index check.
  """
  hashing = tfrecord_files.open_hashing(path)
  stream = tfrecord_files.open_records(
      path, manifest.get('compression') == 'gzip', hashing)
  sizes = []
  fingerprint = 0
  try:
    for record in tfrecord_files.iter_records(stream, verify=True):
      sizes.append(len(record))
      result['records'] += 1
      result['largest_record'] = max(result['largest_record'], len(record))
      fingerprint = (fingerprint + shards.record_digest(record)) % (1 << 128)
      _add_record(result, record, shard['file'], manifest, stats)
    hashing.drain()
  except (tfrecord_files.CorruptRecordError, EOFError, OSError) as e:
    result['readable'] = False
    result['shard_errors'].append(f'{shard["file"]}: corrupt or truncated '
                                  f'after {result["records"]} records: {e}')
  finally:
    hashing.close()
  result['sha256'] = hashing.digest.hexdigest()
  result['fingerprint'] = format(fingerprint, '032x')
  return sizes


def _add_record(result: dict, record: bytes, name: str, manifest: dict,
                stats: dataset_checks.FeatureStats) -> None:
  """Checks the shard's next record and adds it to the shard's result (or
  its problem, naming the shard file `name`)."""
  try:
    info = check_record(record, manifest, stats)
  except ValueError as e:
    result['bad_records'] += 1
    if len(result['record_errors']) < MAX_ERRORS_PER_SHARD:
      result['record_errors'].append(
          f'{name}: record {result["records"] - 1}: {e}')
    return
  # (content, the fields of a dataset_checks.Member): a plain tuple, which
  # Beam encodes without pickling.
  result['content'].append((info['content'], (
      result['split'], info['id'], info['exact'], info['label'],
      info['observation'])))
  if info['signature'] is not None:
    # (id, content, label, split, signature) as core/near_duplicates reads
    # them; the id is (id, shard file, record number), so that the report
    # can show the pictures of a group. A document's signature is made
    # from its text with the shard's others (check_shard).
    result['near'].append(((info['id'], name, result['records'] - 1),
                           info['content'], info['label'], result['split'],
                           info['signature']))
  if info['recording'] is not None:
    recordings = result['recordings']
    recordings[info['recording']] = recordings.get(info['recording'], 0) + 1
  if info['series'] is not None:
    recording, place, start, end = info['series']
    result['series'].append((recording, (result['split'], place, start,
                                         end)))
  if info['time_range'] is not None:
    result['time_range'] = dataset_checks.widen_time_range(
        result['time_range'], *info['time_range'], info['id'])
  report_samples.keep(result['samples'], info, manifest)
  counts = result['class_counts']
  counts[info['label']] = counts.get(info['label'], 0) + 1
  for flag in info.get('flags', ()):
    flagged = result['flagged'].setdefault(flag, {'count': 0, 'ids': []})
    flagged['count'] += 1
    if info['id'] not in flagged['ids']:
      bisect.insort(flagged['ids'], info['id'])
      del flagged['ids'][MAX_FLAGGED_IDS:]
  if info['pixels']:
    for key in ('channel_sum', 'channel_sum_squares'):
      prev = result[key]
      result[key] = info[key] if prev is None else [
          a + b for a, b in zip(prev, info[key])]
    result['pixels'] += info['pixels']


def _shard_problems(shard: dict, output: str, manifest: dict, result: dict,
                    sizes: List[int]) -> List[str]:
  """How a shard that read to its end differs from the manifest: its
  checksum, its record count, its index file."""
  name = shard['file']
  problems = []
  if result['sha256'] != shard['sha256']:
    problems.append(f'{name}: checksum does not match the manifest (the '
                    'file was changed after writing)')
  if result['records'] != shard['records']:
    problems.append(f'{name}: has {result["records"]} records, the '
                    f'manifest says {shard["records"]}')
  if shard.get('index'):
    problem = record_index.check_index(
        manifest_lib.join(output, shard['index']), shard, sizes,
        manifest.get('compression') == 'gzip')
    if problem:
      problems.append(problem)
  return problems
