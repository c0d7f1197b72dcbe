"""Checks of a published dataset: per record, per shard, per split.

`check_shard` reads one shard and checks every record in it; the validation
pipeline runs it on every shard in parallel and `build_report` compares the
totals with the manifest. Nothing here trusts the manifest's numbers: counts,
checksums, fingerprints and class counts are all recomputed from the files.
"""

import dataclasses
import math
from typing import Dict, List, Optional

import numpy as np

from transforms import modalities
from transforms.modalities.image import processing as images
from transforms.output import manifest as manifest_lib
from transforms.validation import dataset_checks as quality_checks
from transforms.validation import report_samples
from transforms.output import record_index
from transforms.core import features as schema
from transforms.output import shards as sinks
from transforms.output import tfrecord_files

# Per shard, at most this many record-level problems are kept verbatim.
MAX_ERRORS_PER_SHARD = 20
# Tolerance between the manifest's normalization statistics and the ones
# recomputed from the stored (JPEG-compressed) training images.
STATS_TOLERANCE = 0.02


def _feature_values(feature, dtype: str):
  kind = feature.WhichOneof('kind')
  expected = {'string': 'bytes_list', 'int64': 'int64_list',
              'float32': 'float_list'}[dtype]
  if kind != expected:
    raise ValueError(f'is {kind or "empty"}, expected {expected}')
  return getattr(feature, kind).value


def check_record(record: bytes, manifest: dict,
                 stats: Optional[quality_checks.FeatureStats] = None) -> Dict:
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
    'channel_sum', 'channel_sum_squares', 'pixels', 'image': decoded
    pixels or None, 'values': the sensor values or None} for the
    aggregates; what a modality does not set keeps its default here.

  Raises:
    ValueError: The record is wrong; the message says how.
  """
  feats, values = _parse(record, manifest)
  _check_label(values, manifest)
  out = {'label': values[schema.LABEL_TEXT][0].decode('utf-8', 'replace'),
         'channel_sum': None, 'channel_sum_squares': None, 'pixels': 0,
         'image': None, 'values': None,
         'id': values[schema.ID][0].decode('utf-8', 'replace'), 'exact': True,
         'content': quality_checks.record_content_hash(feats)}
  modalities.of_manifest(manifest).check_values(values, manifest, out, stats)
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
  label_id = values[schema.LABEL][0]
  if not 0 <= label_id < len(labels):
    raise ValueError(f'label id {label_id} is not one of the '
                     f'{len(labels)} labels')
  label_text = values[schema.LABEL_TEXT][0].decode('utf-8', 'replace')
  if labels[label_id] != label_text:
    raise ValueError(f'label id {label_id} is {labels[label_id]!r} but '
                     f'label_text is {label_text!r}')
  if schema.WEIGHT in values:
    w = values[schema.WEIGHT][0]
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
    A shard result: counts, class counts, fingerprint, pixel sums and the
    problems found (each naming the file).
  """
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  path = manifest_lib.join(output, shard['file'])
  result = {'split': shard['split'], 'file': shard['file'], 'records': 0,
            'bad_records': 0, 'shard_errors': [], 'record_errors': [],
            'class_counts': {},
            'fingerprint': format(0, '032x'), 'channel_sum': None,
            'channel_sum_squares': None, 'pixels': 0, 'sha256': None,
            'readable': True, 'bytes': None, 'largest_record': 0,
            'stats': {}, 'content': [], 'samples': {}}
  if not FileSystems.exists(path):
    result['readable'] = False
    result['shard_errors'].append(f'{shard["file"]}: file is missing')
    return result
  result['bytes'] = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
  stats = quality_checks.FeatureStats()
  hashing = tfrecord_files.open_hashing(path)
  stream = tfrecord_files.open_records(
      path, manifest.get('compression') == 'gzip', hashing)
  sizes = []  # data bytes of each record, for the index check
  fingerprint = 0
  try:
    for record in tfrecord_files.iter_records(stream, verify=True):
      sizes.append(len(record))
      result['records'] += 1
      result['largest_record'] = max(result['largest_record'], len(record))
      fingerprint = (fingerprint + sinks.record_digest(record)) % (1 << 128)
      try:
        info = check_record(record, manifest, stats)
      except ValueError as e:
        result['bad_records'] += 1
        if len(result['record_errors']) < MAX_ERRORS_PER_SHARD:
          result['record_errors'].append(
              f'{shard["file"]}: record {result["records"] - 1}: {e}')
        continue
      result['content'].append((info['content'], info['id'], info['exact']))
      report_samples.keep(result['samples'], info, manifest)
      counts = result['class_counts']
      counts[info['label']] = counts.get(info['label'], 0) + 1
      if info['pixels']:
        for key in ('channel_sum', 'channel_sum_squares'):
          prev = result[key]
          result[key] = info[key] if prev is None else [
              a + b for a, b in zip(prev, info[key])]
        result['pixels'] += info['pixels']
    hashing.drain()
  except (tfrecord_files.CorruptRecordError, EOFError, OSError) as e:
    result['readable'] = False
    result['shard_errors'].append(f'{shard["file"]}: corrupt or truncated after '
                            f'{result["records"]} records: {e}')
  finally:
    hashing.close()
  result['sha256'] = hashing.digest.hexdigest()
  if result['readable'] and result['sha256'] != shard['sha256']:
    result['shard_errors'].append(f'{shard["file"]}: checksum does not match the '
                            'manifest (the file was changed after writing)')
  if result['readable'] and result['records'] != shard['records']:
    result['shard_errors'].append(f'{shard["file"]}: has {result["records"]} '
                            f'records, the manifest says {shard["records"]}')
  if result['readable'] and shard.get('index'):
    problem = record_index.check_index(
        manifest_lib.join(output, shard['index']), shard, sizes,
        manifest.get('compression') == 'gzip')
    if problem:
      result['shard_errors'].append(problem)
  result['fingerprint'] = format(fingerprint, '032x')
  result['stats'] = stats.stats
  result['hists'] = stats.hists
  return result


def _check(checks: List[dict], name: str, ok: bool, detail: str,
           problem: str = 'fail') -> None:
  checks.append({'check': name, 'status': 'pass' if ok else problem,
                 'detail': detail})


def _leveled(checks: List[dict], name: str, warnings: List[str],
             failures: List[str], passed: str) -> None:
  """A check that fails on `failures`, else warns on `warnings`."""
  status = 'fail' if failures else 'warn' if warnings else 'pass'
  checks.append({'check': name, 'status': status,
                 'detail': '; '.join(failures + warnings) or passed})


def _drift_status(value: float, warn: Optional[float],
                  fail: Optional[float]) -> str:
  if fail is not None and value > fail:
    return 'fail'
  if warn is not None and value > warn:
    return 'warn'
  return 'pass'


def _drift_checks(checks: List[dict], split_reports: dict, manifest: dict,
                  th: quality_checks.Thresholds) -> None:
  """Feature and class drift of every split against the training split."""
  train = split_reports.get('train')
  if not train or not train['records']:
    return
  before = manifest['splits'].get('train', {}).get(
      'class_counts_before_rebalance') or train['class_counts']
  for split, rep in split_reports.items():
    if split == 'train' or not rep['records']:
      continue
    drift = quality_checks.feature_drift(train['statistics'],
                                         rep['statistics'])
    rep['feature_drift'] = {k: (None if math.isinf(v) else round(v, 4))
                            for k, v in sorted(drift.items())}
    worst = sorted(drift.items(), key=lambda kv: -kv[1])
    status = max((_drift_status(v, th.feature_drift_warn,
                                th.feature_drift_fail) for _, v in worst),
                 key=('pass', 'warn', 'fail').index, default='pass')
    limits = (f'warn above {th.feature_drift_warn}' +
              (f', fail above {th.feature_drift_fail}'
               if th.feature_drift_fail is not None else ''))
    shown = ', '.join(f'{k} {v:.2f}' for k, v in worst[:5])
    checks.append({'check': f'{split}: feature drift from train',
                   'status': status,
                   'detail': f'standardized mean difference ({limits}); '
                             f'largest: {shown or "none"}'})
    tvd = quality_checks.class_drift(before, rep['class_counts'])
    rep['class_drift'] = round(tvd, 4)
    limits = (f'warn above {th.class_drift_warn}' +
              (f', fail above {th.class_drift_fail}'
               if th.class_drift_fail is not None else ''))
    checks.append({'check': f'{split}: class drift from train',
                   'status': _drift_status(tvd, th.class_drift_warn,
                                           th.class_drift_fail),
                   'detail': f'total variation distance of class shares '
                             f'{tvd:.3f} ({limits}; train before '
                             'rebalancing)'})


def _content_checks(checks: List[dict], content: dict,
                    manifest: dict) -> None:
  leaks = content['leaks']
  shown = '; '.join(
      ' vs '.join(f'{split} {", ".join(ids)}' for split, ids in
                  leak['ids'].items()) for leak in leaks[:5])
  _check(checks, 'no example content in two splits (leakage)',
         not content['leaked_contents'],
         f'{content["leaked_contents"]} contents ({content["leaked_records"]} '
         f'records) occur in more than one split, e.g. {shown}'
         if content['leaked_contents'] else
         'every content hash occurs in one split only')
  if content.get('possible_leaks'):
    shown = '; '.join(
        ' vs '.join(f'{split} {", ".join(ids)}' for split, ids in
                    leak['ids'].items())
        for leak in content['possible_leak_examples'][:5])
    checks.append({
        'check': 'texts with unknown words in two splits (possible leakage)',
        'status': 'warn',
        'detail': f'{content["possible_leaks"]} token sequences with '
                  'out-of-vocabulary ids occur in more than one split; '
                  'unknown words share ids, so the texts may differ, e.g. '
                  f'{shown}'})
  dups = content['duplicates']
  oversampled = [s for s, info in manifest['splits'].items()
                 if info.get('rebalance') == 'oversample']
  detail = ('; '.join(f'{split}: {n} extra copies' for split, n in
                      dups.items()) +
            (f' (oversampling copies records in {", ".join(oversampled)} '
             'on purpose)' if oversampled else '')) if dups else (
                 'no two records of a split have the same content')
  _check(checks, 'exact duplicates inside a split', not dups, detail,
         problem='warn')


def build_report(manifest: dict, results: List[dict],
                 extra_files: Optional[List[str]] = None,
                 transform_check: Optional[dict] = None,
                 content: Optional[dict] = None,
                 thresholds: Optional[quality_checks.Thresholds] = None
                 ) -> dict:
  """Compares recomputed totals with the manifest and checks the
  dataset as a whole.

  Args:
    manifest: The manifest.
    results: check_shard results of every shard in the manifest.
    extra_files: Shard-like files in the folder the manifest does not list.
    transform_check: Result of checking the exported transform, if run.
    content: quality_checks.content_findings of all records, if computed.
    thresholds: When drift, shard and record sizes warn or fail.

  Returns:
    The machine-readable report: {'verdict', 'checks', 'splits', ...};
    each check's status is 'pass', 'warn' or 'fail', and the verdict is
    'fail' when any check failed.
  """
  th = thresholds or quality_checks.Thresholds()
  checks: List[dict] = []
  by_split: Dict[str, List[dict]] = {}
  for r in results:
    by_split.setdefault(r['split'], []).append(r)
  split_reports = {}
  for split, info in manifest['splits'].items():
    rs = by_split.get(split, [])
    records = sum(r['records'] for r in rs)
    bad = sum(r['bad_records'] for r in rs)
    counts: Dict[str, int] = {}
    for r in rs:
      for k, v in r['class_counts'].items():
        counts[k] = counts.get(k, 0) + v
    fp = sinks.combine_fingerprints(r['fingerprint'] for r in rs)
    split_reports[split] = {
        'records': records, 'bad_records': bad,
        'class_counts': dict(sorted(counts.items())),
        'class_counts_before_rebalance': info.get(
            'class_counts_before_rebalance'),
        'fingerprint': fp, 'shards': len(rs),
        'statistics': quality_checks.summarize_stats(
            quality_checks.merge_stats(r.get('stats', {}) for r in rs)),
        'histograms': quality_checks.merge_hists(
            r.get('hists', {}) for r in rs),
        'samples': report_samples.merge(r.get('samples', {}) for r in rs)}
    _check(checks, f'{split}: record count', records == info['records'],
           f'{records} records read, manifest says {info["records"]}')
    _check(checks, f'{split}: records parse and match the spec', bad == 0,
           f'{bad} of {records} records failed the record checks')
    _check(checks, f'{split}: class counts',
           counts == info['class_counts'],
           f'read {dict(sorted(counts.items()))}, manifest says '
           f'{info["class_counts"]}')
    _check(checks, f'{split}: fingerprint', fp == info['fingerprint'],
           f'recomputed {fp}, manifest says {info["fingerprint"]}')
  shard_errors = [e for r in results for e in r['shard_errors']]
  _check(checks, 'shards readable, complete and unchanged', not shard_errors,
         '; '.join(shard_errors) if shard_errors else
         f'{len(results)} shards read, checksums and counts match')
  record_errors = [e for r in results for e in r['record_errors']]
  if extra_files is not None:
    _check(checks, 'no unlisted shard files', not extra_files,
           ('files not in the manifest: ' + ', '.join(extra_files))
           if extra_files else 'every shard file is in the manifest')
  total_inputs = manifest['totals']['inputs']
  totals = manifest['totals']
  sensor = manifest.get('sensor')
  if sensor is None:
    arithmetic_ok = all(
        s['inputs'] == s['examples'] + s['dead_lettered']
        for s in manifest['splits'].values()) and (
            totals['inputs'] == totals['examples'] + totals['dead_lettered'])
    _check(checks, 'inputs = examples + dead letters', arithmetic_ok,
           f'{total_inputs} inputs, {totals["examples"]} examples, '
           f'{totals["dead_lettered"]} dead-lettered')
  else:
    splits = manifest['splits'].values()
    used = sum(s['rows_used'] for s in splits)
    dropped = sum(s['rows_dropped'] for s in splits)
    arithmetic_ok = all(
        s['inputs'] == s['rows_used'] + s['rows_dropped'] + s['dead_lettered']
        for s in splits) and total_inputs == used + dropped + totals[
            'dead_lettered']
    _check(checks, 'rows read = rows used + dropped + dead letters',
           arithmetic_ok, f'{total_inputs} rows read, {used} used, '
           f'{dropped} dropped for missing values, '
           f'{totals["dead_lettered"]} dead-lettered')
    if sensor['mode'] == 'window':
      w = sensor['windows']
      _check(checks, 'every window of every entity was formed',
             w['expected'] == w['formed'] and totals['examples'] == w[
                 'formed'] - w['crossing_time_cutoff'],
             f'{w["expected"]} windows follow from the entities\' row '
             f'counts; {w["formed"]} formed, {w["crossing_time_cutoff"]} '
             f'crossed a time cut-off, {totals["examples"]} kept')
  norm = manifest['normalization']
  train = [r for r in by_split.get('train', []) if r['pixels']]
  train_info = manifest['splits'].get('train', {})
  if (norm['method'] == 'zscore' and norm.get('mean') and train and
      train_info.get('rebalance') in ('none', 'weight')):
    pixels = sum(r['pixels'] for r in train)
    sums = np.sum([r['channel_sum'] for r in train], axis=0)
    squares = np.sum([r['channel_sum_squares'] for r in train], axis=0)
    mean, std = images.zscore_from_sums(sums, squares, pixels)
    diff = max(np.max(np.abs(mean - norm['mean'])),
               np.max(np.abs(std - norm['std'])))
    _check(checks, 'normalization statistics reproduce', diff <=
           STATS_TOLERANCE,
           f'mean {np.round(mean, 4).tolist()} std {np.round(std, 4).tolist()} '
           f'recomputed from the stored train images; largest difference '
           f'from the manifest {diff:.4f} (tolerance {STATS_TOLERANCE})')
  if transform_check is not None:
    _check(checks, 'exported transform', transform_check['ok'],
           transform_check['detail'])
  for split in manifest['splits']:
    warnings, failures = quality_checks.shard_health(
        by_split.get(split, []), split_reports[split]['class_counts'],
        th.record_warn_bytes)
    _leveled(checks, f'{split}: shard health', warnings, failures,
             'no empty shards, no size outliers, no oversized records, no '
             'single-class shards')
  if content is not None:
    _content_checks(checks, content, manifest)
  _drift_checks(checks, split_reports, manifest, th)
  if th.strict:
    for c in checks:
      if c['status'] == 'warn':
        c['status'] = 'fail'
  verdict = 'pass' if all(c['status'] != 'fail' for c in checks) else 'fail'
  return {'verdict': verdict, 'dataset': manifest.get('name'),
          'modality': manifest.get('modality', 'image'),
          'run_id': manifest.get('run_id'), 'checks': checks,
          'warnings': sum(c['status'] == 'warn' for c in checks),
          'splits': split_reports, 'record_errors': record_errors[:200],
          'content': content,
          'thresholds': dataclasses.asdict(th),
          'shards': [{k: r.get(k) for k in (
              'split', 'file', 'records', 'bad_records', 'readable',
              'sha256', 'bytes', 'largest_record', 'class_counts')}
                     for r in results]}
