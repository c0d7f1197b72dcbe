"""Sensor logs shaped like real loggers' files, and the issue-35 rules
computed with pandas (no pipeline imports, no files from elsewhere).

`write_logs` writes CSV files the way an accelerometer logger leaves them,
modelled on the Daphnet freezing-of-gait recordings (64 Hz; ankle, thigh and
trunk accelerometers, x/y/z in milli-g, gravity on y; labels in bouts of a
few seconds), with the oddities real logs have, each switchable, and returns
every row it wrote. `reference` applies the contract's rules (duplicates,
conflicts, sampling interval, gaps, segments, windows) to those rows,
written from the contract's text: the oracle the pipeline is compared with.

Where the oddities are, in samples of each entity (n of them, `seconds` x
64; every entity the same):

- conflict: sample n // 4 is written twice, the second time with ankle_x
  64 mg higher (a retransmission): both rows are conflicting, the
  observation is missing (a 2-period step, no gap).
- dropout: samples [n // 2 - 320, n // 2 + 320) are not written, a 10 s
  hole in the middle (inside the second file when rotated): one gap of
  641 periods (10.015625 s) and two segments.
- clock_jump: from sample 4 * n // 5 on, the logger's clock reads
  `jump_s` earlier (default 2 s). A whole number of periods (2 s = 128)
  puts each of the next 128 rows at the exact time of one of the 128 rows
  before the jump, with other values: all 256 rows are conflicting, those
  128 observations are missing and the series has one gap of 129 periods;
  the first row after the jump is out of order. A jump that is not a whole
  number of periods (say 2.005 s) gives no conflicts and no gap: the late
  rows sort between the earlier ones (the series silently holds two
  interleaved stretches), and still one row is out of order. 2 s rather
  than 3 s keeps the dead-lettered share (4%) under the pipeline's default
  --max_bad_fraction of 5%.
- rotated: the log is cut into 3 files by sample (thirds); each new file
  first repeats the previous file's last 5 rows (identical rows): 10 rows
  dropped as duplicates per log. Their names sort against the writing
  order: 'S01 Séance 1 (2).csv' < 'S01 Séance 1 (3).csv' <
  'S01 Séance 1.csv', so the kept copy of a repeated row is the one in
  '(2)' at both cuts (the repeat at the first cut, the original at the
  second).
- jitter: each written time is off by a normal error of `jitter_ms`
  (default 1 ms) std, drawn per row; the rows stay in order (a period is
  11 std of a difference).
- interleaved: both entities in the same files, in time order (entity
  S02 samples 5 ms after S01), instead of one log per entity. Rotation
  then repeats the last 5 rows of the merged file: 10 duplicates over both
  entities, not per entity.

Times: `time_format` 'iso' (default) writes ISO-8601 UTC with 'Z' and
microseconds ('2026-01-01T09:00:00.015625Z'), since 64 Hz periods are
15.625 ms and whole milliseconds cannot hold them; 'ms' writes epoch
milliseconds as integers, truncated as Daphnet's files have them (periods
of 15 and 16 ms, median 16 ms); 'ns' epoch nanoseconds. The `time` column
returned is the time as written (what the pipeline reads), in ns;
`pipeline_flags` gives the matching flags. Values are whole milli-g.
"""

import collections
import dataclasses
import itertools
import pathlib
import unicodedata
from typing import Dict, List, Optional, Set, Tuple, Union

import numpy as np
import pandas as pd

RATE_HZ = 64
PERIOD_NS = 10**9 // RATE_HZ  # 15,625,000 ns exactly
SENSORS = ('ankle', 'thigh', 'trunk')
CHANNELS = tuple(f'{s}_{a}' for s in SENSORS for a in 'xyz')
LABELS = ('freeze', 'rest', 'walk')
ENTITIES = ('S01', 'S02')
START = pd.Timestamp('2026-01-01T09:00:00Z').value
ENTITY_OFFSET_NS = 5_000_000  # each further entity samples 5 ms later
OVERLAP = 5  # rows a rotated file repeats from the one before
DROPOUT_S = 10
CONFLICT_DELTA = 64.0  # mg added to ankle_x in the retransmitted row
TIME_FORMATS = {'iso': 1000, 'ms': 10**6, 'ns': 1}  # written resolution, ns
# People name the files: non-ASCII in NFD (as macOS writes it), spaces.
SESSION = unicodedata.normalize('NFD', 'Séance 1')
_COLUMNS = ('time', 'entity') + CHANNELS + ('label',)
_META = ('time', 'entity', 'label', 'file', 'row')


def file_names(rotated: bool, entity: str = '') -> List[str]:
  """A log's file names in writing order (NFD): 'S01 Séance 1.csv', or
  without the entity for the interleaved log."""
  stem = f'{entity} {SESSION}' if entity else SESSION
  if not rotated:
    return [f'{stem}.csv']
  return [f'{stem}.csv', f'{stem} (2).csv', f'{stem} (3).csv']


def pipeline_flags(time_format: str = 'iso') -> List[str]:
  """The pipeline's column flags for files of `write_logs`."""
  unit = {'iso': [], 'ms': ['--timestamp_unit', 'ms'],
          'ns': ['--timestamp_unit', 'ns']}[time_format]
  return ['--timestamp_column', 'time', *unit, '--entity_column', 'entity',
          '--label_column', 'label']


def _bouts(n: int, rng) -> np.ndarray:
  """A label per sample, in bouts of 2 to 8 s (walking the most often,
  never the same label twice in a row)."""
  out = np.empty(n, object)
  at, label = 0, 'rest'
  weights = {'walk': 0.5, 'rest': 0.3, 'freeze': 0.2}
  while at < n:
    length = int(rng.uniform(2, 8) * RATE_HZ)
    out[at:at + length] = label
    at += length
    others = [x for x in LABELS if x != label]
    p = np.array([weights[x] for x in others])
    label = others[rng.choice(len(others), p=p / p.sum())]
  return out


def _smooth(x: np.ndarray, width: int = RATE_HZ // 4) -> np.ndarray:
  """A moving average (edges repeated), so bouts blend over 0.25 s."""
  padded = np.concatenate([np.full(width, x[0]), x, np.full(width, x[-1])])
  return np.convolve(padded, np.ones(width) / width, 'same')[width:-width]


def signal(seconds: float = 100.0, seed: int = 0, entity: int = 0
           ) -> Tuple[np.ndarray, np.ndarray]:
  """One entity's recording as its sensors saw it: (values [n, 9] in
  whole milli-g, labels [n]).

  Walking swings the legs at about 1.8 Hz (ankle most, trunk least, with a
  harmonic), freezing trembles at 4-7 Hz with less amplitude, rest barely
  sways; gravity (about 1000 mg) is on each sensor's y axis, tilted a
  little per entity. Sines plus 12 mg noise, within -2000..2000.
  """
  n = int(round(seconds * RATE_HZ))
  rng = np.random.default_rng([seed, entity, 0])
  labels = _bouts(n, rng)
  bout_start = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]])
  freq, gain = np.empty(n), np.empty(n)
  for a, b in zip(bout_start, list(bout_start[1:]) + [n]):
    kind = labels[a]
    freq[a:b] = {'walk': rng.uniform(1.6, 2.0), 'freeze': rng.uniform(4, 7),
                 'rest': 0.3}[kind]
    gain[a:b] = {'walk': 1.0, 'freeze': 0.4, 'rest': 0.03}[kind]
  phase = 2 * np.pi * np.cumsum(_smooth(freq)) / RATE_HZ
  gain = _smooth(gain)
  values = np.empty((n, len(CHANNELS)))
  for s, amplitude in enumerate((700, 350, 150)):  # ankle, thigh, trunk
    tilt = rng.normal(0, 80, 3)
    for a in range(3):
      shift, weight = rng.uniform(0, 2 * np.pi), (1.0, 0.6, 0.4)[a]
      wave = (np.sin(phase + shift) + 0.4 * np.sin(2 * phase + 2 * shift))
      base = tilt[a] + (1000 if a == 1 else 0)
      values[:, 3 * s + a] = (base + amplitude * weight * gain * wave +
                              rng.normal(0, 12, n))
  return np.clip(np.rint(values), -2000, 2000), labels


def _entity_rows(k: int, name: str, seconds: float, seed: int, *,
                 dropout: bool, clock_jump: bool, conflict: bool,
                 jitter: bool, jump_s: float, jitter_ms: float,
                 rotated: bool) -> pd.DataFrame:
  """Entity k's rows in the order its logger writes them: sample, true
  and written time (ns, full resolution), file index, values, label."""
  values, labels = signal(seconds, seed, k)
  n = len(labels)
  sample = np.arange(n)
  true = START + k * ENTITY_OFFSET_NS + sample * PERIOD_NS
  written = true.copy()
  if jitter:
    noise = np.random.default_rng([seed, k, 1]).normal(0, jitter_ms, n)
    written += np.rint(noise * 10**6).astype(np.int64)
  jump_at, jump_ns = 4 * n // 5, int(round(jump_s * 10**9))
  if clock_jump:
    written[jump_at:] -= jump_ns
  df = pd.DataFrame({'sample': sample, 'true': true, 'written': written,
                     'file': 3 * sample // n if rotated else 0,
                     'entity': name, 'label': labels, 'copy': 0})
  df[list(CHANNELS)] = values
  if dropout:
    half = DROPOUT_S * RATE_HZ // 2
    hole = (n // 2 - half, n // 2 + half)
    if hole[0] < -(-n // 3) + OVERLAP or hole[1] > 2 * n // 3 - OVERLAP:
      raise ValueError('the dropout needs more than 30 s to be inside the '
                       'second third of the log')
    df = df[(df['sample'] < hole[0]) | (df['sample'] >= hole[1])]
  if clock_jump:
    reach = jump_at - (jump_ns // PERIOD_NS + 1)
    if jump_ns <= 0 or reach < -(-2 * n // 3) + OVERLAP or (
        dropout and reach < n // 2 + DROPOUT_S * RATE_HZ // 2):
      raise ValueError('the clock jump must be positive and reach back only '
                       'into the third of the log it happens in')
  if conflict:
    again = df[df['sample'] == n // 4].assign(copy=1)
    again['ankle_x'] += CONFLICT_DELTA
    df = pd.concat([df, again])
  return df.sort_values(['sample', 'copy'], kind='stable')


def write_logs(folder, *, seconds: float = 100.0,
               entities: Tuple[str, ...] = ENTITIES, seed: int = 0,
               time_format: str = 'iso', rotated: bool = False,
               dropout: bool = False, clock_jump: bool = False,
               conflict: bool = False, jitter: bool = False,
               interleaved: bool = False, jump_s: float = 2.0,
               jitter_ms: float = 1.0) -> pd.DataFrame:
  """Writes the entities' logs as CSV files under `folder` and returns
  every row written (see the module's docstring for each oddity).

  Every file is at the top of `folder` (the pipeline reads a folder's
  top level): one log per entity ('S01 Séance 1.csv'), or with
  `interleaved` one log of the entities' rows merged in time order
  ('Séance 1.csv'). Columns: time, entity, the 9 channels, label.

  Returns:
    A DataFrame of the rows in writing order: `time` (int64 ns as written),
    `entity`, the channels (float64), `label`, `file` (path below
    `folder`, posix, NFD as on disk) and `row` (the row's 0-based index
    among the file's data rows, the header not counted: the `<row>` of the
    pipeline's `<source>:<row>` ids, transforms/sources/tables.py).
  """
  if time_format not in TIME_FORMATS:
    raise ValueError(f'time_format {time_format!r} is not one of '
                     f'{sorted(TIME_FORMATS)}')
  streams = []
  parts = [_entity_rows(k, name, seconds, seed, dropout=dropout,
                        clock_jump=clock_jump, conflict=conflict,
                        jitter=jitter, jump_s=jump_s, jitter_ms=jitter_ms,
                        rotated=rotated).assign(order=k)
           for k, name in enumerate(entities)]
  if interleaved:
    merged = pd.concat(parts).sort_values(['true', 'order', 'copy'],
                                          kind='stable')
    streams.append((file_names(rotated), merged))
  else:
    streams += [(file_names(rotated, name), part)
                for name, part in zip(entities, parts)]
  written = []
  resolution = TIME_FORMATS[time_format]
  for names, stream in streams:
    previous = None
    for index, name in enumerate(names):
      rows = stream[stream['file'] == index]
      if previous is not None:
        rows = pd.concat([previous.iloc[-OVERLAP:], rows])
      previous = rows
      # `row` counts the file's data rows from 0, the header not counted,
      # as the pipeline's `<source>:<row>` ids do.
      rows = rows.assign(time=rows['written'] // resolution * resolution,
                         file=name, row=np.arange(len(rows)))
      path = pathlib.Path(folder, name)
      path.parent.mkdir(parents=True, exist_ok=True)
      _write_csv(path, rows, time_format)
      written.append(rows)
  out = pd.concat(written, ignore_index=True)
  return out[list(_COLUMNS) + ['file', 'row']]


def _time_text(ns: np.ndarray, time_format: str) -> np.ndarray:
  if time_format == 'iso':
    text = np.datetime_as_string(ns.astype('datetime64[ns]'), unit='us')
    return np.char.add(text.astype(str), 'Z')
  return (ns // TIME_FORMATS[time_format]).astype(str)


def _write_csv(path, rows: pd.DataFrame, time_format: str) -> None:
  table = pd.DataFrame({
      'time': _time_text(rows['time'].to_numpy(np.int64), time_format),
      'entity': rows['entity'].to_numpy(),
      **{c: rows[c].to_numpy().astype(np.int64) for c in CHANNELS},
      'label': rows['label'].to_numpy()})
  table.to_csv(path, index=False, lineterminator='\n', encoding='utf-8')


def read_logs(folder, time_format: str = 'iso') -> pd.DataFrame:
  """Every CSV file under `folder` read back with pandas, as `write_logs`
  returns them (sorted by file and row): a check that the frame is what is
  on disk."""
  parts = []
  root = pathlib.Path(folder)
  for path in sorted(root.rglob('*.csv')):
    df = pd.read_csv(path, dtype={'time': str, 'entity': str, 'label': str},
                     keep_default_na=False)
    text = df['time'].to_numpy(str)
    if time_format == 'iso':
      ns = np.array([t.rstrip('Z') for t in text], 'datetime64[ns]').astype(
          np.int64)
    else:
      ns = np.array([int(t) for t in text], np.int64) * TIME_FORMATS[
          time_format]
    df['time'] = ns
    df[list(CHANNELS)] = df[list(CHANNELS)].astype(np.float64)
    df['file'] = path.relative_to(root).as_posix()
    df['row'] = np.arange(len(df))
    parts.append(df)
  out = pd.concat(parts, ignore_index=True)
  return out.sort_values(['file', 'row'], ignore_index=True)[
      list(_COLUMNS) + ['file', 'row']]


CASES = {
    'regular': {},
    'rotated': {'rotated': True},
    'dropout': {'dropout': True},
    'clock_jump': {'clock_jump': True},
    'conflict': {'conflict': True},
    'jitter': {'jitter': True},
    'interleaved': {'interleaved': True},
}


def write_case(folder, name: str, **kwargs) -> pd.DataFrame:
  """`write_logs` with one of CASES' oddities (others by keyword)."""
  return write_logs(folder, **{**CASES[name], **kwargs})


# The reference implementation of the rules.


@dataclasses.dataclass
class Reference:
  """What the contract's rules make of a set of rows."""
  entities: Dict[str, dict]  # entity -> SHAPE of the contract
  total: dict  # SHAPE without median_interval_ns/max_gap_ns, summed
  dead: Set[str]  # ids `<file>:<row>` of the conflicting rows
  reasons: Dict[str, str]  # id -> the dead letter's reason
  # id `<entity>#<global start>` -> (values [L, C] float64, label,
  # start_time, end_time); window mode only, too-long windows left out.
  windows: Dict[str, tuple]
  # id `<file>:<row>` -> (values [C] float64, label, time) of every kept
  # observation (the examples of row mode; filled in window mode too).
  observations: Dict[str, tuple]
  # The manifest's sensor.windows without time cut-offs (window mode).
  counts: Optional[dict]


def _canonical(text) -> str:
  """Entity and label text as the pipeline keeps it: stripped, NFC."""
  return unicodedata.normalize('NFC', str(text).strip())


def _count(n: int, length: int, stride: int) -> int:
  return (n - length) // stride + 1 if n >= length else 0


def _same(a: np.ndarray, b: np.ndarray) -> bool:
  return bool(np.array_equal(a, b, equal_nan=True))


def _out_of_order(rows: pd.DataFrame) -> int:
  """Rows whose time is earlier than the entity's row before them in the
  same file."""
  late = 0
  for _, in_file in rows.groupby('file', sort=True):
    steps = np.diff(in_file.sort_values('row')['time'].to_numpy(np.int64))
    late += int((steps < 0).sum())
  return late


def _median_interval(times: np.ndarray) -> Optional[int]:
  """Rule 2: the median of the intervals between consecutive observations
  (sorted, each time once); of an even count the lower middle one."""
  steps = np.sort(np.diff(times))
  return int(steps[(len(steps) - 1) // 2]) if len(steps) else None


def _label(labels: List[str], rule: str) -> str:
  if rule == 'last':
    return labels[-1]
  counts = collections.Counter(labels)
  top = max(counts.values())
  return min(x for x, c in counts.items() if c == top)


def reference(df: pd.DataFrame, window_length: int, window_stride: int = 0,
              max_gap_ns: Union[str, int, None] = 'auto',
              label_rule: str = 'last',
              channels: Optional[List[str]] = None) -> Reference:
  """The contract's rules applied to usable rows (a frame like
  `write_logs`'s: time ns, entity (optional: one entity ''), channels,
  label, file, row).

  Args:
    df: The rows; channels are the columns other than time, entity, label,
      file and row unless given.
    window_length: L (0: row mode).
    window_stride: S (0: L).
    max_gap_ns: 'auto' (3 x the entity's median interval), ns for every
      entity, or None (never cut).
    label_rule: 'last' or 'majority' (ties: the first label in sorted
      order).
  """
  channels = list(channels or [c for c in df.columns if c not in _META])
  length, stride = window_length, window_stride or window_length
  df = df.assign(
      entity=[_canonical(e) for e in df['entity']] if 'entity' in df
      else '', label=[_canonical(x) for x in df['label']])
  ref = Reference({}, {}, set(), {}, {}, {}, None)
  for entity, rows in df.groupby('entity', sort=True):
    ref.entities[entity] = _entity(entity, rows, channels, length, stride,
                                   max_gap_ns, label_rule, ref)
  shapes = list(ref.entities.values())
  total = {}
  for key in ('rows', 'observations', 'gaps', 'segments',
              'duplicates_dropped', 'conflicting_rows', 'out_of_order_rows'):
    total[key] = sum(s[key] for s in shapes)
  total['longest_gap_ns'] = max([s['longest_gap_ns'] for s in shapes] + [0])
  if length:
    total['windows'] = {k: sum(s['windows'][k] for s in shapes) for k in (
        'without_gaps', 'in_segments', 'too_long', 'formed')}
    w = total['windows']
    ref.counts = {'expected': w['formed'],
                  'lost_to_gaps': w['without_gaps'] - w['in_segments'],
                  'too_long': w['too_long']}
  ref.total = total
  return ref


def _entity(entity: str, rows: pd.DataFrame, channels, length: int,
            stride: int, max_gap_setting, rule: str, ref: Reference) -> dict:
  """One entity's SHAPE; its dead letters, windows and observations go to
  `ref`."""
  late = _out_of_order(rows)
  # Rule 1, in the order (time, file, row).
  keys = list(zip(rows['time'].tolist(), rows['file'].tolist(),
                  rows['row'].tolist()))
  rows = rows.iloc[sorted(range(len(rows)), key=keys.__getitem__)]
  time = rows['time'].to_numpy(np.int64)
  values = rows[channels].to_numpy(np.float64)
  labels = rows['label'].tolist()
  ids = [f'{f}:{r}' for f, r in zip(rows['file'], rows['row'])]
  kept, duplicates, conflicting = [], 0, 0
  for _, run in itertools.groupby(range(len(rows)), key=lambda i: time[i]):
    run = list(run)
    first = run[0]
    if all(_same(values[i], values[first]) and labels[i] == labels[first]
           for i in run[1:]):
      kept.append(first)
      duplicates += len(run) - 1
      continue
    conflicting += len(run)
    reason = (f'conflicting rows at the same time of entity {entity}: ' +
              ', '.join(ids[i] for i in run))
    for i in run:
      ref.dead.add(ids[i])
      ref.reasons[ids[i]] = reason
  t = time[kept]
  median = _median_interval(t)
  for i in kept:
    ref.observations[ids[i]] = (values[i], labels[i], int(time[i]))
  # Rules 3 and 4.
  if max_gap_setting == 'auto':
    max_gap = None if median is None else 3 * median
  else:
    max_gap = max_gap_setting
  steps = np.diff(t)
  cuts = (np.flatnonzero(steps > max_gap) + 1 if max_gap is not None
          else np.zeros(0, np.int64))
  shape = {
      'rows': len(rows), 'observations': len(kept),
      'median_interval_ns': median, 'max_gap_ns': max_gap,
      'gaps': len(cuts),
      'longest_gap_ns': int(steps[cuts - 1].max()) if len(cuts) else 0,
      'segments': len(cuts) + 1 if len(kept) else 0,
      'duplicates_dropped': duplicates, 'conflicting_rows': conflicting,
      'out_of_order_rows': late,
  }
  if not length:
    return shape
  # Rule 5.
  bounds = [0] + cuts.tolist() + [len(kept)]
  bound = (None if max_gap is None or median is None
           else length * median + max_gap)
  in_segments = too_long = 0
  for a, b in zip(bounds[:-1], bounds[1:]):
    in_segments += _count(b - a, length, stride)
    for start in range(a, b - length + 1, stride):
      end = start + length - 1
      if bound is not None and t[end] - t[start] > bound:
        too_long += 1
        continue
      window = [kept[i] for i in range(start, end + 1)]
      ref.windows[f'{entity}#{start}'] = (
          values[window], _label([labels[i] for i in window], rule),
          int(t[start]), int(t[end]))
  shape['windows'] = {
      'without_gaps': _count(len(kept), length, stride),
      'in_segments': in_segments, 'too_long': too_long,
      'formed': in_segments - too_long}
  return shape
