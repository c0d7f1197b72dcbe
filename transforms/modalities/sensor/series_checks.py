"""The checks of each entity's records in order, gathered from every shard
and split: windows no longer in time than their samples and one gap allow
(against the manifest's sensor.time), none stored twice or closer than the
stride allows, start times increasing; rows of one entity and time once per
split. Manifests written before sensor.time pass what needs it as "not
recorded". The plug-in reaches them through checks.py.
"""

import collections
import itertools
from typing import Iterable, List, Optional, Tuple

from transforms.modalities.sensor import check_wording
from transforms.validation import dataset_checks as dataset_checks_lib
from transforms.validation import entries


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
                if check_wording.duration(span_ns, d)
                != check_wording.duration(bound, d))
  return (f'the window spans {check_wording.duration(span_ns, digits)}, more '
          f'than the {check_wording.duration(bound, digits)} that {length} '
          'samples at '
          f'{check_wording.duration(shape["median_interval_ns"])} and one gap '
          f'of {check_wording.duration(shape["max_gap_ns"])} allow')


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
  time = check_wording.time_section(manifest)
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


def _entities_recorded(manifest: dict, series: dict) -> dict:
  """With sensor.time: every entity of the records is in it."""
  if check_wording.time_section(manifest) is None:
    return entries.entry(
        'every entity read back is in the manifest\'s time section', True,
        check_wording.NOT_RECORDED)
  found = series['found']['unknown_entity']
  return entries.entry(
      'every entity read back is in the manifest\'s time section',
      not found,
      f'{found} entities of the records are not in the manifest\'s '
      'sensor.time.entities, which lists every entity the run read: ' +
      _listed(series, ('unknown_entity',), lambda x: (
          f'{check_wording.entity_name(x["entity"])} ({x["records"]} records)'))
      if found else
      f'the {series["entities"]} entities of the records are all in '
      'sensor.time.entities')


def _spans_bounded(manifest: dict, series: dict) -> dict:
  """With sensor.time: no window spans more than span_bound."""
  if check_wording.time_section(manifest) is None:
    return entries.entry(
        'no window spans more time than its samples and one gap allow',
        True, check_wording.NOT_RECORDED)
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
      f'{x["ids"][1]} starts at '
      f'{check_wording.time_text(x["start_times"][1])}, not after '
      f'{x["ids"][0]} at {check_wording.time_text(x["start_times"][0])}'))
  problem = 'fail'
  if not (earlier or same):
    detail = ('the windows of each entity start later the later their '
              'first observation')
  elif check_wording.time_section(manifest) is None and not earlier:
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
      f'{check_wording.entity_name(x["entity"])} at '
      f'{check_wording.time_text(x["at"])}: {x["records"]} records in '
      f'{x["split"]}'))
  problem = 'fail'
  if not found:
    detail = f'no entity has two records of one time in a split{aside}'
  elif check_wording.time_section(manifest) is None:
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
