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
order (`series_findings`, `series_checks`): windows no longer in time than
their samples and one gap allow (against the manifest's sensor.time), none
stored twice or closer than the stride allows, start times increasing;
rows of one entity and time once per split. Manifests written before
sensor.time pass what needs it as "not recorded".
"""

import collections
import heapq
import itertools
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np

from transforms.modalities.sensor import windows
from transforms.output import manifest as manifest_lib
from transforms.validation import dataset_checks as dataset_checks_lib
from transforms.validation import html_report
from transforms.validation import entries
from transforms.validation import report as report_lib

# Features whose statistics are kept per channel here, not as a whole.
_OWN_STATS = frozenset({'values'})
# Sample windows in the report are cut to this many rows and channels.
MAX_ROWS = 400
MAX_CHANNELS = 8


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
  conflicting = (_time_section(manifest) or {}).get('total', {}).get(
      'conflicting_rows')
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


def _time(ns: int) -> str:
  return windows.format_time(ns)


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
            f'{late} record {b["first"][1]} starts at {_time(b["first"][0])}'
            f', not after {early} record {a["last"][1]} ends at '
            f'{_time(a["last"][0])}: the time ranges of {early} and {late} '
            'overlap')
  cutoffs = list(manifest['sensor'].get('time_cutoffs') or [])
  if len(cutoffs) + 1 == len(names):
    problems += _outside_cutoffs(names, spans, cutoffs)
  else:
    problems.append(f'the manifest records {len(cutoffs)} time cut-offs for '
                    f'{len(names)} splits')
  shown = ', '.join(
      f'{name} {_time(spans[name]["first"][0])} to '
      f'{_time(spans[name]["last"][0])}' for name in names if spans[name])
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
  bounds = [None] + [windows.parse_time(c) for c in cutoffs] + [None]
  problems = []
  for i, name in enumerate(names):
    span = spans[name]
    if not span:
      continue
    low, high = bounds[i], bounds[i + 1]
    if low is not None and span['first'][0] < low:
      problems.append(
          f'{name} record {span["first"][1]} starts at '
          f'{_time(span["first"][0])}, before the cut-off {cutoffs[i - 1]} '
          f'where {name} begins')
    if high is not None and span['last'][0] >= high:
      problems.append(
          f'{name} record {span["last"][1]} ends at '
          f'{_time(span["last"][0])}, not before the cut-off {cutoffs[i]} '
          f'where {name} ends')
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


# ------------------------------------------------------------- series --
#
# The validation pipeline gathers the records of each entity from every
# shard and split (their out['series'], see _identify); series_findings
# checks one entity's against the rules that made them, with nothing of
# the records but these small tuples; merge_series_findings merges the
# entities' findings into counts and the first few examples, and
# series_checks turns them into the report's checks.

# What series_findings counts: an entity sensor.time does not list, a
# window longer in time than its samples and one gap allow, a window
# stored twice, two consecutive windows closer than the stride allows, a
# window starting before (or at the time of) the window before it, an
# observation (entity and time) twice in a split.
SERIES_KINDS = ('unknown_entity', 'too_long', 'stored_twice',
                'closer_than_stride', 'earlier_start', 'same_start',
                'repeated_observation')
# Examples kept per kind (the first by entity and place in its series),
# and shown in a check's detail.
MAX_SERIES_EXAMPLES = dataset_checks_lib.MAX_LISTED
SHOWN_EXAMPLES = 5

_NOT_RECORDED = ('not recorded: the manifest has no sensor.time (it was '
                 'written before preprocessing recorded sampling intervals '
                 'and gaps)')
# Why repeated times pass in a dataset whose manifest has no sensor.time.
_KEPT_THEN = ('the manifest has no sensor.time: it was written before '
              'preprocessing kept one row per entity and time, when rows '
              'the input repeats were kept')


# Why repeated times pass with --same_time file_order.
_FILE_ORDER = ('--same_time file_order keeps the rows of one time as '
               'successive samples (a logger whose clock ticks slower than '
               'it samples)')


def _file_order(manifest: dict) -> bool:
  """Whether rows of one time in one file were kept as successive
  samples (--same_time file_order)."""
  return manifest['sensor'].get('same_time') == 'file_order'


def _time_section(manifest: dict) -> Optional[dict]:
  """The manifest's sensor.time, or None (written before it existed)."""
  return manifest['sensor'].get('time')


def _oversampled(manifest: dict) -> List[str]:
  """The splits --rebalance oversample copied records in."""
  return [name for name, split in manifest['splits'].items()
          if split.get('rebalance') == 'oversample']


def span_bound(shape: dict, length: int) -> Optional[int]:
  """The longest time (ns) a window of `length` observations of an entity
  may span: `length` sampling intervals and one gap of its time shape
  (a sensor.time.entities entry). None when there is no such rule: its
  max_gap_ns is None (--max_gap none) or it has no sampling interval."""
  median, gap = shape.get('median_interval_ns'), shape.get('max_gap_ns')
  if median is None or gap is None:
    return None
  return length * median + gap


def _sampled(shape: dict, sensor: dict) -> dict:
  """An entity's time shape with the interval its windows' rows are
  apart: with --resample the grid's period, not the median interval of
  the observations."""
  period = (sensor.get('resample') or {}).get('period_ns')
  return dict(shape, median_interval_ns=period) if period else shape


def span_problem(span_ns: int, shape: dict, length: int) -> Optional[str]:
  """What is wrong with a window of `length` observations spanning
  `span_ns` (its end time minus its start time) of an entity of time
  shape `shape`, or None when it is within span_bound."""
  bound = span_bound(shape, length)
  if bound is None or span_ns <= bound:
    return None
  # Digits enough to show the span above the bound.
  digits = next(d for d in range(4, 20)
                if _duration(span_ns, d) != _duration(bound, d))
  return (f'the window spans {_duration(span_ns, digits)}, more than the '
          f'{_duration(bound, digits)} that {length} samples at '
          f'{_duration(shape["median_interval_ns"])} and one gap of '
          f'{_duration(shape["max_gap_ns"])} allow')


_DURATION_UNITS = ((86_400 * 10**9, 'd'), (3_600 * 10**9, 'h'),
                   (60 * 10**9, 'min'), (10**9, 's'), (10**6, 'ms'),
                   (10**3, 'us'))


def _duration(ns: Optional[int], digits: int = 4) -> str:
  """ns as readable text (11.98 s, 15.62 ms; 'none' for None)."""
  if ns is None:
    return 'none'
  for size, unit in _DURATION_UNITS:
    if abs(ns) >= size:
      return f'{ns / size:.{digits}g} {unit}'
  return f'{ns} ns'


def _empty_findings() -> dict:
  return {'entities': 0, 'records': 0, 'unbounded_entities': 0,
          'found': dict.fromkeys(SERIES_KINDS, 0),
          'examples': {kind: [] for kind in SERIES_KINDS}}


def _add(found: dict, kind: str, entity: str, at: int, **example) -> None:
  """Counts a finding of `kind` at place `at` of the entity's series (a
  window's global start, a row's time) and keeps it as an example while
  there is room (an entity's come in order of place)."""
  found['found'][kind] += 1
  examples = found['examples'][kind]
  if len(examples) < MAX_SERIES_EXAMPLES:
    examples.append({'entity': entity, 'at': at, **example})


def series_findings(entity: str, points: Iterable[tuple],
                    manifest: dict) -> dict:
  """Checks the records of one entity, gathered from every shard and split.

  Window mode: each window's time span is within span_bound of its entity
  (with sensor.time); no global start occurs twice (copies in an
  oversampled split aside); consecutive global starts are at least
  min(stride, length) apart (windows start every stride observations of
  a segment, and the first window after a gap starts after the last one
  before it ended: either way they overlap no more than the stride
  allows); start times increase with the global start. Row mode: no
  time of the entity occurs twice in a split (oversampled splits aside;
  in two splits is the leakage check's business). With sensor.time, an
  entity it does not list is a finding.

  Args:
    entity: The entity ('' when the records have no entity).
    points: Its records' (split, global start or None for a row, start
      time, end time), as _identify sets them.
    manifest: The manifest.

  Returns:
    The findings of this one entity, as merge_series_findings describes
    them.
  """
  points = sorted(points, key=lambda p: (p[1] or 0, p[2], p[0]))
  found = _empty_findings()
  found['entities'], found['records'] = 1, len(points)
  sensor = manifest['sensor']
  windowed = sensor.get('mode') == 'window'
  time = _time_section(manifest)
  if time is not None:
    shape = (time.get('entities') or {}).get(entity)
    if shape is None:
      _add(found, 'unknown_entity', entity, 0, records=len(points))
    elif windowed:
      _too_long(entity, points, _sampled(shape, sensor),
                sensor['window_length'], found)
  if windowed:
    _window_order(entity, points, manifest, found)
  else:
    _repeated_observations(entity, points, manifest, found)
  return found


def _too_long(entity: str, points: List[tuple], shape: dict, length: int,
              found: dict) -> None:
  """The windows spanning more than span_bound."""
  bound = span_bound(shape, length)
  if bound is None:
    found['unbounded_entities'] += 1
    return
  for split, start, first, last in points:
    if last - first > bound:
      _add(found, 'too_long', entity, start, id=f'{entity}#{start}',
           split=split, span_ns=last - first, bound_ns=bound,
           median_interval_ns=shape['median_interval_ns'],
           max_gap_ns=shape['max_gap_ns'])


def _window_order(entity: str, points: List[tuple], manifest: dict,
                  found: dict) -> None:
  """Windows stored twice, closer than the stride allows, or not later
  than the window before them (`points` sorted by global start)."""
  sensor = manifest['sensor']
  step = min(sensor['window_stride'], sensor['window_length'])
  copies = _oversampled(manifest)
  before = None  # (global start, start time) of the window before
  for start, same in itertools.groupby(points, key=lambda p: p[1]):
    same = list(same)
    splits = collections.Counter(p[0] for p in same)
    if len(same) > 1 and not (len(splits) == 1 and same[0][0] in copies):
      _add(found, 'stored_twice', entity, start, id=f'{entity}#{start}',
           splits=dict(sorted(splits.items())))
    time = same[0][2]
    if before is not None:
      ids = [f'{entity}#{before[0]}', f'{entity}#{start}']
      if start - before[0] < step:
        _add(found, 'closer_than_stride', entity, start, ids=ids,
             apart=start - before[0])
      if time <= before[1]:
        _add(found, 'earlier_start' if time < before[1] else 'same_start',
             entity, start, ids=ids, start_times=[before[1], time])
    before = (start, time)


def _repeated_observations(entity: str, points: List[tuple],
                           manifest: dict, found: dict) -> None:
  """Rows of one time of the entity twice in a split (`points` sorted by
  time)."""
  copies = _oversampled(manifest)
  counts = collections.Counter((p[2], p[0]) for p in points
                               if p[0] not in copies)
  for (time, split), n in sorted(counts.items()):
    if n > 1:
      _add(found, 'repeated_observation', entity, time, split=split,
           records=n)


def merge_series_findings(parts: Iterable[dict]) -> dict:
  """The findings of several entities (or merged findings) as one; the
  order of `parts` does not matter.

  Returns:
    {'entities', 'records', 'unbounded_entities' (entities whose windows
    have no span bound), 'found': {kind: count} for each of SERIES_KINDS,
    'examples': {kind: [{'entity', 'at' (its place: a window's global
    start, a row's time), and what the kind shows}]}}, each list the
    first MAX_SERIES_EXAMPLES by entity and place.
  """
  merged = _empty_findings()
  for part in parts:
    for key in ('entities', 'records', 'unbounded_entities'):
      merged[key] += part[key]
    for kind in SERIES_KINDS:
      merged['found'][kind] += part['found'][kind]
      merged['examples'][kind].extend(part['examples'][kind])
  for examples in merged['examples'].values():
    # Ties (one time in two splits) by the rest, whatever the order.
    examples.sort(key=lambda x: (x['entity'], x['at'], repr(x)))
    del examples[MAX_SERIES_EXAMPLES:]
  return merged


def series_checks(manifest: dict, series: dict) -> List[dict]:
  """The report's checks of the entities' series (see series_findings).

  Args:
    manifest: The manifest.
    series: merge_series_findings of every entity's records.

  Returns:
    The check entries, each {'check', 'status', 'detail'}.
  """
  checks = [_entities_recorded(manifest, series)]
  if manifest['sensor'].get('mode') == 'window':
    return checks + [_spans_bounded(manifest, series),
                     _stored_once(manifest, series),
                     _stride_kept(manifest, series),
                     _starts_increase(manifest, series)]
  return checks + [_observations_once(manifest, series)]


def _listed(series: dict, kinds: Tuple[str, ...], show) -> str:
  """The first examples of `kinds`, each as show(example) says it."""
  examples = sorted((x for kind in kinds for x in series['examples'][kind]),
                    key=lambda x: (x['entity'], x['at']))
  return '; '.join(show(x) for x in examples[:SHOWN_EXAMPLES])


def _entity_name(entity: str) -> str:
  return entity or "'' (no entity column)"


def _entities_recorded(manifest: dict, series: dict) -> dict:
  """With sensor.time: every entity of the records is in it."""
  if _time_section(manifest) is None:
    return entries.entry(
        'every entity read back is in the manifest\'s time section', True,
        _NOT_RECORDED)
  found = series['found']['unknown_entity']
  return entries.entry(
      'every entity read back is in the manifest\'s time section',
      not found,
      f'{found} entities of the records are not in the manifest\'s '
      'sensor.time.entities, which lists every entity the run read: ' +
      _listed(series, ('unknown_entity',), lambda x: (
          f'{_entity_name(x["entity"])} ({x["records"]} records)'))
      if found else
      f'the {series["entities"]} entities of the records are all in '
      'sensor.time.entities')


def _spans_bounded(manifest: dict, series: dict) -> dict:
  """With sensor.time: no window spans more than span_bound."""
  if _time_section(manifest) is None:
    return entries.entry(
        'no window spans more time than its samples and one gap allow',
        True, _NOT_RECORDED)
  length = manifest['sensor']['window_length']
  found = series['found']['too_long']
  unbounded = series['unbounded_entities']
  loose = (f'; {unbounded} entities have no max gap (--max_gap none) or no '
           'sampling interval, and their windows no such bound'
           if unbounded else '')
  return entries.entry(
      'no window spans more time than its samples and one gap allow',
      not found,
      f'{found} windows span more time than {length} samples at their '
      'entity\'s interval and one max gap: ' + _listed(
          series, ('too_long',), lambda x: (
              f'{x["id"]} ({x["split"]}): ' + span_problem(
                  x['span_ns'], x, length))) + loose
      if found else
      f'no window spans more than {length} samples at its entity\'s '
      f'interval (the median, or the --resample period) and one max '
      f'gap{loose}')


def _stored_once(manifest: dict, series: dict) -> dict:
  """No global start of an entity twice (copies in an oversampled split
  aside)."""
  copies = _oversampled(manifest)
  aside = (f' (copies in {", ".join(copies)}, which --rebalance oversample '
           'copied records in, aside)' if copies else '')
  found = series['found']['stored_twice']
  return entries.entry(
      'no window stored twice', not found,
      f'{found} windows are stored more than once{aside}: ' + _listed(
          series, ('stored_twice',), lambda x: f'{x["id"]} (' + ', '.join(
              f'{split} {n}' for split, n in x['splits'].items()) + ')')
      if found else
      f'each of the {series["records"]} windows read back starts at another '
      f'observation of its entity{aside}')


def _stride_kept(manifest: dict, series: dict) -> dict:
  """Consecutive windows of an entity start min(stride, length) or more
  observations apart."""
  stride = manifest['sensor']['window_stride']
  length = manifest['sensor']['window_length']
  step = min(stride, length)
  rule = (f'windows start every {stride} observations of a segment, and '
          f'after a gap once the window before has ended ({length} '
          'observations)')
  found = series['found']['closer_than_stride']
  return entries.entry(
      'windows of one entity overlap no more than the stride allows',
      not found,
      f'{found} pairs of consecutive windows of one entity start fewer '
      f'than {step} observations apart, so they overlap more than the '
      f'stride allows ({rule}): ' + _listed(
          series, ('closer_than_stride',), lambda x: (
              f'{x["ids"][0]} and {x["ids"][1]} ({x["apart"]} apart)'))
      if found else
      f'consecutive windows of each entity start {step} or more '
      f'observations apart ({rule})')


def _starts_increase(manifest: dict, series: dict) -> dict:
  """Start times increase with the global start. Equal ones only inform
  when the manifest predates sensor.time (repeated times were kept)."""
  earlier = series['found']['earlier_start']
  same = series['found']['same_start']
  listed = _listed(series, ('earlier_start', 'same_start'), lambda x: (
      f'{x["ids"][1]} starts at {_time(x["start_times"][1])}, not after '
      f'{x["ids"][0]} at {_time(x["start_times"][0])}'))
  problem = 'fail'
  if not (earlier or same):
    detail = ('the windows of each entity start later the later their '
              'first observation')
  elif _time_section(manifest) is None and not earlier:
    problem = 'info'
    detail = (f'{same} windows start at the time of the window before '
              f'them, as the input repeats times; {_KEPT_THEN}: {listed}')
  elif _file_order(manifest) and not earlier:
    problem = 'info'
    detail = (f'{same} windows start at the time of the window before '
              f'them; {_FILE_ORDER}: {listed}')
  else:
    detail = (f'{earlier + same} windows start no later than the window of '
              f'their entity before them: {listed}')
  return entries.entry(
      'window start times increase with their first observation',
      not (earlier or same), detail, problem=problem)


def _observations_once(manifest: dict, series: dict) -> dict:
  """Row mode: no entity and time twice in a split (oversampled splits
  aside). Only informs when the manifest predates sensor.time (repeated
  rows were kept)."""
  copies = _oversampled(manifest)
  aside = (f' ({", ".join(copies)} aside: --rebalance oversample copied '
           'records there)' if copies else '')
  found = series['found']['repeated_observation']
  listed = _listed(series, ('repeated_observation',), lambda x: (
      f'{_entity_name(x["entity"])} at {_time(x["at"])}: {x["records"]} '
      f'records in {x["split"]}'))
  problem = 'fail'
  if not found:
    detail = f'no entity has two records of one time in a split{aside}'
  elif _time_section(manifest) is None:
    problem = 'info'
    detail = (f'{found} observations (an entity at one time) are in a split '
              f'more than once{aside}; {_KEPT_THEN}: {listed}')
  elif _file_order(manifest):
    problem = 'info'
    detail = (f'{found} times of an entity have several records in a '
              f'split{aside}; {_FILE_ORDER}: {listed}')
  else:
    detail = (f'{found} observations (an entity at one time) are in a split '
              'more than once, though preprocessing keeps one row per '
              f'entity and time (and dead-letters rows that disagree)'
              f'{aside}: {listed}')
  return entries.entry(
      'no observation (entity and time) twice in a split', not found,
      detail, problem=problem)


# The report's table of the entities with the most gaps: this many rows,
# these fields of their sensor.time.entities entry.
MAX_GAP_ROWS = 10
GAP_COLUMNS = ('median_interval_ns', 'max_gap_ns', 'gaps', 'longest_gap_ns',
               'segments', 'duplicates_dropped', 'conflicting_rows')


def report_summary(manifest: dict) -> dict:
  """What the JSON report repeats of the manifest: {'time': None when it
  does not record the time shape, else {'total': sensor.time.total,
  'entities': how many, 'most_gaps': the MAX_GAP_ROWS entities with the
  most gaps (then the longest), each {'entity', and its GAP_COLUMNS}}}."""
  time = _time_section(manifest)
  if time is None:
    return {'time': None}
  entities = time.get('entities') or {}
  most = heapq.nsmallest(MAX_GAP_ROWS, entities.items(), key=lambda kv: (
      -(kv[1].get('gaps') or 0), -(kv[1].get('longest_gap_ns') or 0),
      kv[0]))
  return {'time': {
      'total': time.get('total'), 'entities': len(entities),
      'most_gaps': [dict({'entity': entity},
                         **{key: shape.get(key) for key in GAP_COLUMNS})
                    for entity, shape in most]}}


# ------------------------------------------------------------- report --


def report_sample(info: dict, manifest: dict) -> dict:
  """A sample of the record `info` summarizes: its id, channels and
  values (rounded, cut to MAX_ROWS rows and MAX_CHANNELS channels)."""
  if info.get('values') is None:
    return {'id': info['id']}
  channels = manifest['sensor']['channels']
  arr = np.asarray(info['values'], np.float64).reshape(-1, len(channels))
  return {'id': info['id'], 'channels': channels[:MAX_CHANNELS],
          'values': np.round(arr[:MAX_ROWS, :MAX_CHANNELS], 4).tolist()}


def html_sections(report: dict, manifest) -> str:
  """The time shape the manifest records (see report_summary), then the
  report's samples."""
  return _time_shape_section(report) + _samples_section(report, manifest)


# The time shape's totals as the report shows them: (heading, key of
# sensor.time.total, whether it is a duration); windows come after.
_TOTAL_COLUMNS = (('rows', 'rows', False),
                  ('observations', 'observations', False),
                  ('gaps', 'gaps', False),
                  ('longest gap', 'longest_gap_ns', True),
                  ('segments', 'segments', False),
                  ('duplicates dropped', 'duplicates_dropped', False),
                  ('conflicting rows', 'conflicting_rows', False),
                  ('rows out of order', 'out_of_order_rows', False))
_WINDOW_COLUMNS = (('windows without gaps', 'without_gaps'),
                   ('in segments', 'in_segments'), ('too long', 'too_long'),
                   ('formed', 'formed'))
# The entity table's headings, for GAP_COLUMNS.
_GAP_HEADINGS = ('median interval', 'max gap', 'gaps', 'longest gap',
                 'segments', 'duplicates dropped', 'conflicting rows')


def _time_shape_section(report: dict) -> str:
  """The totals of sensor.time and the entities with the most gaps, or a
  line saying the manifest does not record them ('' for a report written
  before report_summary)."""
  e = html_report.escape
  if 'time' not in report:
    return ''
  time = report['time']
  if time is None:
    return (f'<h2>Time shape</h2><p class="small">'
            f'{e(_NOT_RECORDED.capitalize())}.</p>')
  total = time.get('total') or {}
  windows = total.get('windows') or {}
  heads = [h for h, _, _ in _TOTAL_COLUMNS] + (
      [h for h, _ in _WINDOW_COLUMNS] if windows else [])
  cells = [_cell(total.get(key), duration)
           for _, key, duration in _TOTAL_COLUMNS] + (
               [_cell(windows.get(key), False) for _, key in _WINDOW_COLUMNS]
               if windows else [])
  most = time.get('most_gaps') or []
  rows = ''.join(
      f'<tr><td>{e(_entity_name(x["entity"]))}</td>' + ''.join(
          _cell(x.get(key), key.endswith('_ns')) for key in GAP_COLUMNS) +
      '</tr>' for x in most)
  entities = e(html_report.number(time.get('entities')))
  return (
      f'<h2>Time shape ({entities} entities, from the manifest)</h2>'
      '<table><tr>' + ''.join(f'<th>{e(h)}</th>' for h in heads) +
      f'</tr><tr>{"".join(cells)}</tr></table>'
      f'<h3>Entities with the most gaps ({len(most)} of {entities})</h3>'
      '<table><tr><th>entity</th>' +
      ''.join(f'<th>{e(h)}</th>' for h in _GAP_HEADINGS) +
      f'</tr>{rows}</table>')


def _cell(value, duration: bool) -> str:
  """A number (or a duration in ns) as a table cell."""
  text = _duration(value) if duration else html_report.number(value)
  return f'<td class="num">{html_report.escape(text)}</td>'


def _samples_section(report: dict, manifest) -> str:
  """The report's samples (of the train split, or of the first split
  without one): windows as line charts, two per class; rows (one example
  per row) as a table of their channel values."""
  split, samples = html_report.sample_split(report)
  shown = [(label, x) for label, items in samples.items() for x in items
           if 'values' in x]
  if not shown:
    return ''
  if manifest is not None:
    rows = manifest['sensor'].get('mode') == 'row'
  else:  # a row's sample holds one row of values
    rows = all(len(x['values']) == 1 for _, x in shown)
  if rows:
    return _sample_rows(split, shown, manifest)
  charts = [html_report.line_chart(f'{label}: {x["id"]}', x['channels'],
                                   x['values'])
            for label, items in samples.items() for x in items[:2]
            if 'values' in x]
  return (f'<h2>Sample windows ({html_report.escape(split)}, normalized '
          f'values)</h2><div class="charts">{"".join(charts)}</div>')


def _sample_rows(split: str, shown: List[Tuple[str, dict]],
                 manifest) -> str:
  """The sample rows as one table: class, id and each channel's value."""
  e = html_report.escape
  channels = shown[0][1]['channels']
  total = len(manifest['sensor']['channels']) if manifest else len(channels)
  cut = (f'; the first {len(channels)} of {total} channels'
         if total > len(channels) else '')
  head = ''.join(f'<th>{e(c)}</th>' for c in channels)
  body = ''.join(
      f'<tr><td>{e(label)}</td><td>{e(x["id"])}</td>' + ''.join(
          f'<td class="num">{e(html_report.number(v))}</td>'
          for v in x['values'][0]) + '</tr>' for label, x in shown)
  return (f'<h2>Sample rows ({e(split)}, normalized values{e(cut)})</h2>'
          f'<table class="sample-rows"><tr><th>class</th><th>id</th>{head}'
          f'</tr>{body}</table>')


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
