"""The validation report: the shards' results compared with the manifest,
and the dataset checked as a whole.

`build_report` gathers the results of `shard_checks.check_shard` per split
and applies the checks of CHECKS in order. Each is a small function of the
gathered inputs (`ReportInputs`) that returns its entries, each
{'check', 'status', 'detail'} with status 'pass', 'info' (something worth
knowing that is not a problem), 'warn' or 'fail'. The modality that wrote
the dataset adds its own (its `dataset_checks`, which may use
`entries.entry` and `examples_add_up` from here) and says what leakage
means for its data (its `leakage_checks`; `entries.content_leakage` is the
default).
"""

import dataclasses
import hashlib
import math
from typing import Callable, Dict, List, Optional, Sequence

from transforms import modalities
from transforms.output import shards
from transforms.validation import dataset_checks
from transforms.validation.entries import entry
from transforms.validation.entries import listed_ids
from transforms.validation import report_samples


def _leveled(name: str, warnings: List[str], failures: List[str],
             passed: str) -> dict:
  """A check entry that fails on `failures`, else warns on `warnings`."""
  status = 'fail' if failures else 'warn' if warnings else 'pass'
  return {'check': name, 'status': status,
          'detail': '; '.join(failures + warnings) or passed}


@dataclasses.dataclass(frozen=True)
class ReportInputs:
  """What the checks of a report look at.

  Attributes:
    manifest: The manifest.
    results: check_shard results of every shard in the manifest.
    by_split: The same results by split.
    splits: The report's summary of each split (the drift checks add their
      measures to it).
    extra_files: Shard-like files the manifest does not list, or None when
      not looked for.
    transform_check: Result of checking the exported transform, if run.
    content: dataset_checks.content_findings of all records, if computed.
    thresholds: When drift, shard and record sizes warn or fail.
    dead_letters: dead_letter_findings of the dead-letter files, if read.
    recordings: dataset_checks.recording_findings of the records'
      recordings, if computed.
    series: The modality's findings of each recording's records in order
      (sensor: checks.merge_series_findings), if gathered.
  """
  manifest: dict
  results: List[dict]
  by_split: Dict[str, List[dict]]
  splits: Dict[str, dict]
  extra_files: Optional[List[str]]
  transform_check: Optional[dict]
  content: Optional[dict]
  thresholds: dataset_checks.Thresholds
  dead_letters: Optional[dict] = None
  recordings: Optional[dict] = None
  series: Optional[dict] = None


def _split_summary(info: dict, results: List[dict]) -> dict:
  """A split's totals recomputed from its shards' results."""
  counts: Dict[str, int] = {}
  for r in results:
    for k, v in r['class_counts'].items():
      counts[k] = counts.get(k, 0) + v
  return {
      'records': sum(r['records'] for r in results),
      'bad_records': sum(r['bad_records'] for r in results),
      'class_counts': dict(sorted(counts.items())),
      'class_counts_before_rebalance': info.get(
          'class_counts_before_rebalance'),
      'fingerprint': shards.combine_fingerprints(
          r['fingerprint'] for r in results),
      'shards': len(results),
      'statistics': dataset_checks.summarize_stats(
          dataset_checks.merge_stats(r.get('stats', {}) for r in results)),
      'histograms': dataset_checks.merge_hists(
          r.get('hists', {}) for r in results),
      'samples': report_samples.merge(r.get('samples', {}) for r in results),
      # The earliest start and latest end of its records, where they have
      # times (see dataset_checks.widen_time_range).
      'time_range': dataset_checks.merge_time_ranges(
          r.get('time_range') for r in results)}


# ------------------------------------------------------------- checks --


def _split_checks(run: ReportInputs) -> List[dict]:
  """Per split: record count, record checks, class counts, fingerprint."""
  checks = []
  for split, info in run.manifest['splits'].items():
    rep = run.splits[split]
    records, bad, fp = rep['records'], rep['bad_records'], rep['fingerprint']
    checks += [
        entry(f'{split}: record count', records == info['records'],
              f'{records} records read, manifest says {info["records"]}'),
        entry(f'{split}: records parse and match the spec', bad == 0,
              f'{bad} of {records} records failed the record checks'),
        entry(f'{split}: class counts',
              rep['class_counts'] == info['class_counts'],
              f'read {rep["class_counts"]}, manifest says '
              f'{info["class_counts"]}'),
        entry(f'{split}: fingerprint', fp == info['fingerprint'],
              f'recomputed {fp}, manifest says {info["fingerprint"]}')]
  return checks


def _shards_check(run: ReportInputs) -> List[dict]:
  """Every shard is readable, has its records and its checksum."""
  errors = [e for r in run.results for e in r['shard_errors']]
  return [entry('shards readable, complete and unchanged', not errors,
                '; '.join(errors) if errors else
                f'{len(run.results)} shards read, checksums and counts '
                'match')]


def _unlisted_check(run: ReportInputs) -> List[dict]:
  """No shard file in the folder that the manifest does not list."""
  extra = run.extra_files
  if extra is None:
    return []
  return [entry('no unlisted shard files', not extra,
                ('files not in the manifest: ' + ', '.join(extra))
                if extra else 'every shard file is in the manifest')]


def dead_letter_findings(output: str, manifest: dict) -> dict:
  """Reads the dead-letter files the manifest names: {'missing': names,
  'changed': names whose SHA-256 differs from the manifest's, 'records':
  dead letters in the files that are there}."""
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  from transforms.output import manifest as manifest_lib  # pylint: disable=import-outside-toplevel
  info = manifest.get('dead_letter') or {}
  sums = info.get('sha256') or {}
  found = {'missing': [], 'changed': [], 'records': 0}
  for name in info.get('files', []):
    path = manifest_lib.join(output, name)
    if not FileSystems.exists(path):
      found['missing'].append(name)
      continue
    digest, records = hashlib.sha256(), 0
    with FileSystems.open(path, compression_type='uncompressed') as f:
      for line in f:  # one read for the checksum and the count
        digest.update(line)
        records += bool(line.strip())
    if name in sums and digest.hexdigest() != sums[name]:
      found['changed'].append(name)
    found['records'] += records
  return found


def _dead_letter_check(run: ReportInputs) -> List[dict]:
  """The dead-letter files are there, unchanged, and hold as many dead
  letters as the manifest counts."""
  found = run.dead_letters
  if found is None:
    return []
  info = run.manifest.get('dead_letter') or {}
  problems = [f'{n} is missing' for n in found['missing']]
  problems += [f'{n} was changed (its SHA-256 is not the manifest\'s)'
               for n in found['changed']]
  if not found['missing'] and found['records'] != info.get('count'):
    problems.append(f'the files hold {found["records"]} dead letters, the '
                    f'manifest counts {info.get("count")}')
  return [entry('dead-letter files complete and unchanged', not problems,
                '; '.join(problems) if problems else
                f'{info.get("count")} dead letters in '
                f'{len(info.get("files", []))} file(s), as the manifest says')]


def _modality_checks(run: ReportInputs) -> List[dict]:
  """The checks of the modality that wrote the dataset."""
  modality = modalities.of_manifest(run.manifest)
  return modality.dataset_checks(run.manifest, run.by_split)


def _series_checks(run: ReportInputs) -> List[dict]:
  """The modality's checks of each recording's records in order (sensor:
  an entity's windows or rows), if the validation pipeline gathered
  them."""
  modality = modalities.of_manifest(run.manifest)
  return modality.series_checks(run.manifest, run.series)


def _transform_check(run: ReportInputs) -> List[dict]:
  """The exported transform does what the manifest says (if probed)."""
  if run.transform_check is None:
    return []
  return [entry('exported transform', run.transform_check['ok'],
                run.transform_check['detail'])]


def _shard_health_checks(run: ReportInputs) -> List[dict]:
  """Per split: no empty, outsized or single-class shards, no records
  too large."""
  checks = []
  for split in run.manifest['splits']:
    warnings, failures = dataset_checks.shard_health(
        run.by_split.get(split, []), run.splits[split]['class_counts'],
        run.thresholds.record_warn_bytes)
    checks.append(_leveled(
        f'{split}: shard health', warnings, failures,
        'no empty shards, no size outliers, no oversized records, no '
        'single-class shards'))
  return checks


def _content_checks(run: ReportInputs) -> List[dict]:
  """Leakage as the modality means it, label conflicts, copies inside a
  split."""
  content = run.content
  if content is None:
    return []
  modality = modalities.of_manifest(run.manifest)
  checks = modality.leakage_checks(run.manifest, run.by_split, content,
                                   run.recordings)
  checks.append(_label_conflicts_check(content, modality.same_example))
  checks.append(_duplicates_check(content, run.manifest,
                                  modality.same_example))
  return checks


def _label_conflicts_check(content: dict, same_example: str) -> dict:
  """Records of one example with different labels warn, listing a few."""
  conflicts = content.get('label_conflicts', 0)
  detail = (
      f'{conflicts} examples ({content["label_conflict_records"]} records '
      f'with {same_example}) have different labels, e.g. '
      f'{listed_ids(content["label_conflict_examples"], "labels")}'
      if conflicts else
      f'no two records with {same_example} have different labels')
  return entry('same content with different labels (label conflicts)',
               not conflicts, detail, problem='warn')


def _duplicates_check(content: dict, manifest: dict,
                      same_example: str) -> dict:
  """Copies of one example inside a split warn (oversampling makes
  them)."""
  dups = content['duplicates']
  oversampled = [s for s, info in manifest['splits'].items()
                 if info.get('rebalance') == 'oversample']
  detail = ('; '.join(f'{split}: {n} extra copies' for split, n in
                      dups.items()) +
            (f' (oversampling copies records in {", ".join(oversampled)} '
             'on purpose)' if oversampled else '')) if dups else (
                 f'no two records of a split have {same_example}')
  # Equal content of different observations (sensor rows of two days).
  distinct = {split: n - dups.get(split, 0) for split, n in
              content.get('equal_in_split', {}).items()
              if n > dups.get(split, 0)}
  if distinct:
    detail += ('; equal content of distinct observations, not copies: ' +
               ', '.join(f'{split} {n} records' for split, n in
                         distinct.items()))
  return entry('exact duplicates inside a split', not dups, detail,
               problem='warn')


def _drift_status(value: float, warn: Optional[float],
                  fail: Optional[float]) -> str:
  if fail is not None and value > fail:
    return 'fail'
  if warn is not None and value > warn:
    return 'warn'
  return 'pass'


def _limits(warn: float, fail: Optional[float]) -> str:
  return f'warn above {warn}' + (f', fail above {fail}'
                                 if fail is not None else '')


def _drift_checks(run: ReportInputs) -> List[dict]:
  """Feature and class drift of every split against the training split;
  each split's summary gets its measures."""
  train = run.splits.get('train')
  if not train or not train['records']:
    return []
  before = run.manifest['splits'].get('train', {}).get(
      'class_counts_before_rebalance') or train['class_counts']
  checks = []
  for split, rep in run.splits.items():
    if split == 'train' or not rep['records']:
      continue
    checks.append(_feature_drift(
        split, rep, train, run.thresholds,
        modalities.of_manifest(run.manifest).drift_exempt))
    checks.append(_class_drift(split, rep, before, run.thresholds))
  return checks


def _feature_drift(split: str, rep: dict, train: dict,
                   th: dataset_checks.Thresholds, exempt) -> dict:
  drift = dataset_checks.feature_drift(train['statistics'],
                                       rep['statistics'], exempt)
  rep['feature_drift'] = {k: (None if math.isinf(v) else round(v, 4))
                          for k, v in sorted(drift.items())}
  worst = sorted(drift.items(), key=lambda kv: -kv[1])
  status = max((_drift_status(v, th.feature_drift_warn,
                              th.feature_drift_fail) for _, v in worst),
               key=('pass', 'warn', 'fail').index, default='pass')
  limits = _limits(th.feature_drift_warn, th.feature_drift_fail)
  shown = ', '.join(f'{k} {v:.2f}' for k, v in worst[:5])
  return {'check': f'{split}: feature drift from train', 'status': status,
          'detail': f'standardized mean difference ({limits}); '
                    f'largest: {shown or "none"}'}


def _class_drift(split: str, rep: dict, before: Dict[str, int],
                 th: dataset_checks.Thresholds) -> dict:
  tvd = dataset_checks.class_drift(before, rep['class_counts'])
  rep['class_drift'] = round(tvd, 4)
  limits = _limits(th.class_drift_warn, th.class_drift_fail)
  return {'check': f'{split}: class drift from train',
          'status': _drift_status(tvd, th.class_drift_warn,
                                  th.class_drift_fail),
          'detail': f'total variation distance of class shares '
                    f'{tvd:.3f} ({limits}; train before rebalancing)'}


def _label_case_check(run: ReportInputs) -> List[dict]:
  """Label names read back that differ only by case ('Cat', 'cat') warn:
  they are separate classes, which is seldom what was meant."""
  from transforms.core import label_text  # pylint: disable=import-outside-toplevel
  names = sorted({label for r in run.results for label in r['class_counts']})
  variants = label_text.case_variants(names)
  return [entry(
      'label names that differ only by case', not variants,
      f'{len(variants)} groups of label names differ only by case and are '
      f'separate classes: ' + '; '.join(', '.join(g) for g in variants[:5])
      if variants else 'no two label names differ only by case',
      problem='warn')]


# The report's checks, in the order it lists them.
CHECKS: Sequence[Callable[[ReportInputs], List[dict]]] = (
    _split_checks, _shards_check, _unlisted_check, _dead_letter_check,
    _modality_checks, _series_checks,
    _transform_check, _shard_health_checks, _content_checks,
    _label_case_check, _drift_checks)


def flagged(results: List[dict], flag: str, listed: int = 5):
  """(records flagged `flag` in the shard results, the first `listed` of
  their ids in sorted order)."""
  count, ids = 0, set()
  for r in results:
    found = r.get('flagged', {}).get(flag)
    if found:
      count += found['count']
      ids.update(found['ids'])
  return count, sorted(ids)[:listed]


def examples_add_up(manifest: dict) -> List[dict]:
  """The check that every input became an example or a dead letter, in
  every split and in total (for modalities with one example per input)."""
  totals = manifest['totals']
  ok = all(s['inputs'] == s['examples'] + s['dead_lettered']
           for s in manifest['splits'].values()) and (
               totals['inputs'] == totals['examples'] +
               totals['dead_lettered'])
  return [entry('inputs = examples + dead letters', ok,
                f'{totals["inputs"]} inputs, {totals["examples"]} examples, '
                f'{totals["dead_lettered"]} dead-lettered')]


# ------------------------------------------------------------- report --


def build_report(manifest: dict, results: List[dict],
                 extra_files: Optional[List[str]] = None,
                 transform_check: Optional[dict] = None,
                 content: Optional[dict] = None,
                 thresholds: Optional[dataset_checks.Thresholds] = None,
                 dead_letters: Optional[dict] = None,
                 recordings: Optional[dict] = None,
                 series: Optional[dict] = None) -> dict:
  """Compares recomputed totals with the manifest and checks the
  dataset as a whole.

  Args:
    manifest: The manifest.
    results: check_shard results of every shard in the manifest.
    extra_files: Shard-like files in the folder the manifest does not list.
    transform_check: Result of checking the exported transform, if run.
    content: dataset_checks.content_findings of all records, if computed.
    thresholds: When drift, shard and record sizes warn or fail.
    dead_letters: dead_letter_findings of the dead-letter files, if read.
    recordings: dataset_checks.recording_findings, if computed.
    series: The modality's findings of each recording's records in
      order, if gathered (see ReportInputs).

  Returns:
    The machine-readable report: {'verdict', 'checks', 'splits', ...};
    each check's status is 'pass', 'warn' or 'fail', and the verdict is
    'fail' when any check failed.
  """
  th = thresholds or dataset_checks.Thresholds()
  by_split: Dict[str, List[dict]] = {}
  for r in results:
    by_split.setdefault(r['split'], []).append(r)
  splits = {split: _split_summary(info, by_split.get(split, []))
            for split, info in manifest['splits'].items()}
  run = ReportInputs(manifest, results, by_split, splits, extra_files,
                     transform_check, content, th, dead_letters,
                     recordings, series)
  checks = [c for check in CHECKS for c in check(run)]
  if th.strict:
    for c in checks:
      if c['status'] == 'warn':
        c['status'] = 'fail'
  return _assemble(run, checks)


def _assemble(run: ReportInputs, checks: List[dict]) -> dict:
  """The report of `run` with its checks."""
  manifest = run.manifest
  verdict = 'pass' if all(c['status'] != 'fail' for c in checks) else 'fail'
  record_errors = [e for r in run.results for e in r['record_errors']]
  modality = modalities.of_manifest(manifest)
  return {'verdict': verdict, 'dataset': manifest.get('name'),
          'modality': modality.name,
          'run_id': manifest.get('run_id'), 'checks': checks,
          'warnings': sum(c['status'] == 'warn' for c in checks),
          'splits': run.splits, 'record_errors': record_errors[:200],
          'content': run.content, 'recordings': run.recordings,
          'series': run.series, **modality.report_summary(manifest),
          'thresholds': dataclasses.asdict(run.thresholds),
          'shards': [{k: r.get(k) for k in (
              'split', 'file', 'records', 'bad_records', 'readable',
              'sha256', 'bytes', 'largest_record', 'class_counts')}
                     for r in run.results]}
