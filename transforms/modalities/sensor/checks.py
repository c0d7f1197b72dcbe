"""The sensor modality's side of reading a published dataset back.

The validation pipeline and the reader call these through the plug-in (see
transforms/modalities/base.py). Records hold the normalized values of one
row or one window of rows ('values', [rows, channels] flattened), with
optional bucket ids, the entity and the times they cover.

Leakage (`leakage_checks`) is a recording in two splits, not equal values:
two days of weather can have equal values and are still two observations.
With --split_by entity an entity with records in two splits fails; with
--split_by time split time ranges that overlap or leave their cut-offs
fail; with --split_by hash (rows split one by one) entity and time are no
criterion, and one observation (the same values at the same time of the
same entity) in two splits fails. Equal values in two splits are reported
as information.

Each entity's records, gathered from every shard and split, are checked in
order in series_checks.py; the report's sensor sections are in
report_sections.py. The plug-in finds them through the functions at the
end of this module.
"""

from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np

from transforms.modalities.sensor import check_wording
from transforms.modalities.sensor import config
from transforms.modalities.sensor import report_sections
from transforms.modalities.sensor import series_checks as series_checks_lib
from transforms.output import manifest as manifest_lib
from transforms.validation import dataset_checks as dataset_checks_lib
from transforms.validation import entries

# Features whose statistics are kept per channel here, not as a whole.
_OWN_STATS = frozenset({'values'})


# ------------------------------------------------------------ records --


def check_values(values: Dict[str, list], manifest: dict, out: dict,
                 stats) -> None:
  """Checks a record's values, buckets and times; adds its statistics.

  Sets out['values'] (for the report's samples); for the leakage
  checks out['observation'] (its entity and times), out['time_range'] and,
  with --split_by entity, out['recording'] (its entity); and for the
  series checks out['series'], (entity, the window's global start or None
  for a row, start time, end time).

  Args:
    values: Feature name -> the record's values.
    manifest: The dataset's manifest.
    out: The record's summary, completed here.
    stats: The shard's FeatureStats, or None.

  Raises:
    ValueError: The record is wrong; the message says how.
  """
  _check_sensor_values(values, manifest)
  out['values'] = values['values']
  _identify(values, manifest, out)
  if stats is not None:
    dataset_checks_lib.add_record_stats(stats, values, manifest, _OWN_STATS)
    if 'values' in values:
      channels = manifest['sensor']['channels']
      arr = np.asarray(values['values'], np.float64).reshape(
          -1, len(channels))
      stats.add_channels('values', arr, channels)


def _identify(values: Dict[str, list], manifest: dict, out: dict) -> None:
  """Which observation the record is, the time range it covers, its place
  in its entity's series and, when the splits keep entities whole, its
  recording."""
  entity = values['entity'][0].decode('utf-8', 'replace') if (
      'entity' in values) else ''
  if 'time' in values:
    start = end = int(values['time'][0])
    out['series'] = (entity, None, start, end)
  elif 'start_time' in values:
    start, end = int(values['start_time'][0]), int(values['end_time'][0])
    out['series'] = (entity, _window_start(out['id']), start, end)
  else:
    start = end = None
  out['observation'] = f'{entity}@{start}..{end}'
  if start is not None:
    out['time_range'] = (start, end)
  if manifest['sensor'].get('split_by') == 'entity' and 'entity' in values:
    out['recording'] = entity


def _window_start(ex_id: str) -> int:
  """A window's global start (the index of its first observation among
  its entity's), from its id `<entity>#<start>`."""
  _, sep, start = ex_id.rpartition('#')
  if not (sep and start.isascii() and start.isdigit()):
    raise ValueError(f'window id {ex_id!r} does not end in # and the index '
                     'of its first observation')
  return int(start)


def _check_sensor_values(values: Dict[str, list], manifest: dict) -> None:
  """Stored sensor values are finite; buckets and times are in range."""
  arr = np.asarray(values['values'], np.float32)
  if not np.all(np.isfinite(arr)):
    raise ValueError(f'values hold {int((~np.isfinite(arr)).sum())} NaN or '
                     'infinite numbers')
  buckets = manifest['sensor'].get('bucketize') or 0
  if buckets and 'buckets' in values:
    b = np.asarray(values['buckets'])
    if b.min() < 0 or b.max() >= buckets:
      raise ValueError(f'bucket ids [{b.min()}, {b.max()}] are outside '
                       f'0..{buckets - 1}')
  if 'start_time' in values and values['start_time'][0] > values[
      'end_time'][0]:
    raise ValueError('start_time is after end_time')


# ------------------------------------------------------------ dataset --


def dataset_checks(manifest: dict, by_split: Dict[str, List[dict]]
                   ) -> List[dict]:
  """Every row read was used, dropped (missing values, duplicates) or
  dead-lettered; in window mode, every window the entities' observations
  and gaps allow was formed.

  Args:
    manifest: The manifest.
    by_split: Split -> its shards' check_shard results (not used).

  Returns:
    The check entries, each {'check', 'status', 'detail'}.
  """
  del by_split
  checks = [_rows_add_up(manifest)]
  if manifest['sensor']['mode'] == 'window':
    checks.append(_windows_formed(manifest))
  return checks


def _rows_add_up(manifest: dict) -> dict:
  """Per split and in total: rows read = rows used (observations) +
  dropped for missing values + duplicates dropped + dead letters
  (conflicting rows among them). A manifest written before duplicates
  were dropped has no duplicates_dropped: it counts as 0, and the detail
  says it is not recorded."""
  totals = manifest['totals']
  splits = manifest['splits'].values()
  used = sum(s['rows_used'] for s in splits)
  dropped = sum(s['rows_dropped'] for s in splits)
  dups = sum(s.get('duplicates_dropped', 0) for s in splits)
  ok = all(
      s['inputs'] == s['rows_used'] + s['rows_dropped'] + s.get(
          'duplicates_dropped', 0) + s['dead_lettered']
      for s in splits) and totals['inputs'] == used + dropped + dups + (
          totals['dead_lettered'])
  recorded = all('duplicates_dropped' in s for s in splits)
  conflicting = (check_wording.time_section(manifest) or {}).get(
      'total', {}).get('conflicting_rows')
  return entries.entry(
      'rows read = rows used + dropped + dead letters', ok,
      f'{totals["inputs"]} rows read, {used} used, {dropped} dropped for '
      'missing values, ' + (f'{dups} duplicates dropped' if recorded else
                            'duplicates dropped: not recorded') +
      f', {totals["dead_lettered"]} dead-lettered' + (
          f' ({conflicting} of them conflicting rows at one time)'
          if conflicting else ''))


def _windows_formed(manifest: dict) -> dict:
  """The windows the entities' observations and gaps allow were formed,
  and all but those crossing a time cut-off kept."""
  w = manifest['sensor']['windows']
  kept = manifest['totals']['examples']
  lost = ', '.join(
      f'{what}: {w[key] if key in w else "not recorded"}'
      for key, what in (('lost_to_gaps', 'lost to gaps'),
                        ('too_long', 'too long')))
  return entries.entry(
      'every window of every entity was formed',
      w['expected'] == w['formed'] and kept == w['formed'] - w[
          'crossing_time_cutoff'],
      f'{w["expected"]} windows follow from the entities\' observations '
      f'({lost}); {w["formed"]} formed, {w["crossing_time_cutoff"]} '
      f'crossed a time cut-off, {kept} kept')


# ------------------------------------------------------------ leakage --


def leakage_checks(manifest: dict, by_split: Dict[str, List[dict]],
                   content: dict, recordings: Optional[dict]) -> List[dict]:
  """What a leak is for sensor data, as --split_by split it (see the
  module docstring), and the equal values in two splits as information.

  Args:
    manifest: The manifest.
    by_split: Split -> its shards' check_shard results (their
      'time_range').
    content: dataset_checks.content_findings of all records.
    recordings: dataset_checks.recording_findings of the entities (with
      --split_by entity), or None when not computed.

  Returns:
    The check entries, each {'check', 'status', 'detail'}.
  """
  split_by = manifest['sensor'].get('split_by', 'hash')
  if split_by == 'entity':
    checks = _entity_leakage(recordings)
  elif split_by == 'time':
    checks = [_time_leakage(manifest, by_split)]
  else:
    checks = [_observation_leakage(content)]
  return checks + [_equal_values(manifest, content)]


def _entity_leakage(recordings: Optional[dict]) -> List[dict]:
  """--split_by entity: no entity has records in two splits."""
  if recordings is None:
    return []
  found = recordings['recordings_in_splits']
  listed = '; '.join(
      f'{x["recording"]}: ' + ', '.join(f'{split} {n}' for split, n in
                                       x['records'].items())
      for x in recordings['examples'][:5])
  return [entries.entry(
      'no recording (entity) in two splits (leakage)', not found,
      f'{found} entities ({recordings["records"]} records) have records in '
      'more than one split, though --split_by entity keeps each entity\'s '
      f'records in one; records per split: {listed}' if found else
      'every entity\'s records are in one split (--split_by entity)')]



def _time_leakage(manifest: dict, by_split: Dict[str, List[dict]]) -> dict:
  """--split_by time: the splits' time ranges follow the cut-offs in
  order and do not overlap."""
  names = list(manifest['splits'])
  spans = {name: dataset_checks_lib.merge_time_ranges(
      r.get('time_range') for r in by_split.get(name, [])) for name in names}
  problems = []
  for i, early in enumerate(names):
    for late in names[i + 1:]:
      a, b = spans[early], spans[late]
      if a and b and b['first'][0] <= a['last'][0]:
        problems.append(
            f'{late} record {b["first"][1]} starts at '
            f'{check_wording.time_text(b["first"][0])}, not after {early} '
            f'record {a["last"][1]} ends at '
            f'{check_wording.time_text(a["last"][0])}: the time ranges of '
            f'{early} and {late} overlap')
  cutoffs = list(manifest['sensor'].get('time_cutoffs') or [])
  if len(cutoffs) + 1 == len(names):
    problems += _outside_cutoffs(names, spans, cutoffs)
  else:
    problems.append(f'the manifest records {len(cutoffs)} time cut-offs for '
                    f'{len(names)} splits')
  shown = ', '.join(
      f'{name} {check_wording.time_text(spans[name]["first"][0])} to '
      f'{check_wording.time_text(spans[name]["last"][0])}'
      for name in names if spans[name])
  return entries.entry(
      'no time range in two splits (leakage)', not problems,
      '; '.join(problems[:10]) if problems else
      f'the splits\' time ranges follow the cut-offs '
      f'({", ".join(cutoffs)}) in order and do not overlap: {shown}')


def _outside_cutoffs(names: List[str], spans: Dict[str, Optional[dict]],
                     cutoffs: List[str]) -> List[str]:
  """The splits with records outside their cut-offs (split i holds the
  times from cut-off i - 1 up to, not including, cut-off i; the manifest
  records the cut-offs as ISO-8601 times)."""
  bounds = [None] + [config.parse_time(c) for c in cutoffs] + [None]
  problems = []
  for i, name in enumerate(names):
    span = spans[name]
    if not span:
      continue
    low, high = bounds[i], bounds[i + 1]
    if low is not None and span['first'][0] < low:
      problems.append(
          f'{name} record {span["first"][1]} starts at '
          f'{check_wording.time_text(span["first"][0])}, before the cut-off '
          f'{cutoffs[i - 1]} where {name} begins')
    if high is not None and span['last'][0] >= high:
      problems.append(
          f'{name} record {span["last"][1]} ends at '
          f'{check_wording.time_text(span["last"][0])}, not before the '
          f'cut-off {cutoffs[i]} where {name} ends')
  return problems


def _observation_leakage(content: dict) -> dict:
  """--split_by hash: no observation (a row's values at its time, of its
  entity) in two splits."""
  found = content.get('leaked_observations', 0)
  why = ('--split_by hash splits rows one by one (by row id), so an '
         'entity\'s rows and a time range are in several splits by design: '
         'entity and time alone are not a leakage criterion')
  return entries.entry(
      'no observation (entity, time and values) in two splits (leakage)',
      not found,
      f'{found} rows ({content["leaked_observation_records"]} records) are '
      'in more than one split with the same values, time and entity: the '
      'input holds the row more than once and its copies were split apart, '
      f'e.g. {entries.listed_ids(content["observation_leaks"])} ({why})'
      if found else
      f'{why}; no row (the same values at the same time of the same '
      'entity) is in two splits')


def _equal_values(manifest: dict, content: dict) -> dict:
  """Equal rows (or windows) in two splits: information, not a leak."""
  what = 'windows' if manifest['sensor'].get('mode') == 'window' else (
      'feature rows')
  found = content['leaked_contents']
  return {
      'check': f'equal {what} in two splits (distinct observations, not '
               'leakage)',
      'status': 'info' if found else 'pass',
      'detail': f'{found} {what} ({content["leaked_records"]} records) '
                'occur with equal values in more than one split; records '
                'of other times or entities are distinct observations (two '
                'days of weather can have equal values), e.g. '
                f'{entries.listed_ids(content["leaks"])}' if found else
                f'no {what} with equal values are in two splits'}


# ------------------------------------------------------------- reading --


def check_transform(output: str, manifest: dict) -> dict:
  """Feeds the exported transform probe values built from the manifest's
  training statistics and checks what comes out.

  zscore: mean -> 0 and mean + std -> 1; minmax: min -> 0 and max -> 1;
  none: unchanged. With --missing impute, NaN -> what the mean becomes.

  Returns:
    {'ok': bool, 'detail': str}.
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel
  sensor, norm = manifest['sensor'], manifest['normalization']
  stats = norm.get('per_channel') or {}
  channels = sensor['channels']
  if not stats:
    return {'ok': False, 'detail': 'the manifest has no training statistics'}
  col = lambda k: np.array([stats[c][k] for c in channels], np.float64)
  method = norm['method']
  probes, expected = _probes(method, col, len(channels),
                             sensor['missing'] == 'impute')
  shape = [len(probes)] + sensor['value_shape']
  # Every row of a window gets the probe (rows mode: the probe itself).
  batch = np.stack([np.broadcast_to(p, sensor['value_shape'])
                    for p in probes]).astype(np.float32)
  try:
    layer = tft.TFTransformOutput(
        manifest_lib.transform_path(output, manifest)
    ).transform_features_layer()
    out = layer({'values': tf.constant(batch)})['values'].numpy()
  except Exception as e:  # pylint: disable=broad-except
    return {'ok': False, 'detail': f'the transform does not load or run: '
                                   f'{type(e).__name__}: {e}'}
  if list(out.shape) != shape:
    return {'ok': False, 'detail': f'transform output shape '
                                   f'{list(out.shape)}, expected {shape}'}
  want = np.stack([np.broadcast_to(e, sensor['value_shape'])
                   for e in expected])
  # The transform reads float32: allow a few float32 steps of the probe,
  # measured in units of the scale it is divided by.
  denom = _scale(method, col, len(channels))
  tol = 1e-3 + 4 * np.finfo(np.float32).eps * np.nan_to_num(
      np.abs(batch)) / np.broadcast_to(denom, batch.shape)
  diff = np.abs(out - want) - tol
  worst = float(np.max(diff))
  return {'ok': bool(worst < 1e-3),
          'detail': f'{method} transform of probes built from the '
                    f'manifest\'s statistics; largest difference from the '
                    f'expected output {max(worst, 0.0):.2e}'}


def _probes(method: str, col, n: int, impute: bool
            ) -> Tuple[List[np.ndarray], List[np.ndarray]]:
  """(probe rows, the rows the transform must make of them), from the
  training statistics `col(name)` of the n channels."""
  if method == 'zscore':
    mean, std = col('mean'), col('std')
    probes = [mean, mean + np.where(std > 0, std, 1.0)]
    expected = [np.zeros(n), np.ones(n)]
  elif method == 'minmax':
    low, high = col('min'), col('max')
    probes = [low, np.where(high > low, high, low + 1.0)]
    expected = [np.zeros(n), np.ones(n)]
  else:
    probes = [col('mean'), col('mean') + 1.0]
    expected = list(probes)
  if impute:
    probes.append(np.full(n, np.nan))
    mean = col('mean')
    if method == 'zscore':
      expected.append(np.zeros(n))
    elif method == 'minmax':
      span = col('max') - col('min')
      expected.append((mean - col('min')) / np.where(span > 0, span, 1.0))
    else:
      expected.append(mean)
  return probes, expected


def _scale(method: str, col, n: int) -> np.ndarray:
  """What the transform divides each channel by (1 where that is 0)."""
  if method == 'zscore':
    denom = col('std')
  elif method == 'minmax':
    denom = col('max') - col('min')
  else:
    denom = np.ones(n)
  return np.where(denom > 0, denom, 1.0)


def supervised_feature(manifest: dict) -> str:
  """The normalized values."""
  del manifest
  return 'values'


def read_transform(output: str, manifest: dict):
  """None: the values are stored normalized."""
  del output, manifest
  return None

# ---------------------------------------------------- series and report --
#
# The plug-in finds each function of the checks module here, by its name
# (Modality.checks_module): the series checks and the report's sections,
# in series_checks.py and report_sections.py, are reached through these.


def series_findings(entity: str, points: Iterable[tuple],
                    manifest: dict) -> dict:
  """One entity's records checked in order (series_checks.py)."""
  return series_checks_lib.series_findings(entity, points, manifest)


def merge_series_findings(parts: Iterable[dict]) -> dict:
  """The findings of several entities as one (series_checks.py)."""
  return series_checks_lib.merge_series_findings(parts)


def series_checks(manifest: dict, series: dict) -> List[dict]:
  """The report's checks of the entities' series (series_checks.py)."""
  return series_checks_lib.series_checks(manifest, series)


def report_summary(manifest: dict) -> dict:
  """What the JSON report repeats of the manifest (report_sections.py)."""
  return report_sections.report_summary(manifest)


def report_sample(info: dict, manifest: dict) -> dict:
  """A sample of a record for the report (report_sections.py)."""
  return report_sections.report_sample(info, manifest)


def html_sections(report: dict, manifest) -> str:
  """The HTML report's sensor sections (report_sections.py)."""
  return report_sections.html_sections(report, manifest)
