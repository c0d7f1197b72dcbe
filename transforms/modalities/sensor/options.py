"""The sensor flags and their checks (--label_column is shared with text
and declared in pipelines/options.py)."""

from typing import Tuple

from transforms.core import flags
from transforms.core.errors import UsageError
from transforms.modalities.sensor import config


def add_arguments(add) -> None:
  """Declares the sensor flags (`add` is argparse's add_argument)."""
  add('--timestamp_column', default='timestamp',
      help='Sensor: the timestamp column (ISO-8601 strings or epoch '
      'numbers). Default: timestamp.')
  add('--timestamp_unit', default='s',
      help='Sensor: unit of numeric timestamps: s, ms, us or ns. '
      'Default: s.')
  add('--entity_column', default='',
      help='Sensor: the column naming the recording (device, subject). '
      'Default: none (all rows are one series).')
  add('--channels', default='',
      help='Sensor: comma-separated numeric channel columns. Default: '
      'every numeric column that is not the timestamp, entity or label.')
  add('--window_length', default='0',
      help='Sensor: rows per window (each entity\'s rows in time order); '
      '0 makes one example per row. Default: 0.')
  add('--window_stride', default='0',
      help='Sensor: rows between window starts; 0 means the window length '
      '(no overlap). Default: 0.')
  add('--window_label', default='last',
      help='Sensor: a window\'s label: last (its last row\'s) or '
      'majority (the most frequent; ties go to the first label name in '
      'sorted order). Default: last.')
  add('--missing', default='dead_letter',
      help='Sensor: rows with missing channel values (empty, NaN, inf): '
      'dead_letter, drop (counted in the manifest) or impute (with the '
      'training mean, inside the exported transform). '
      'Default: dead_letter.')
  add('--split_by', default='auto',
      help='Sensor: hash (of each row\'s entity and time, so a row the '
      'input holds twice stays in one split; one example per row only), entity '
      '(all of a recording in one split, by a hash of the entity with '
      '--splits ratios) or time (by --time_cutoffs). auto: entity when '
      'there is an entity column, time when --time_cutoffs are given, '
      'else hash (rows only). Default: auto.')
  add('--time_cutoffs', default='',
      help='Sensor, --split_by time: one or two ISO-8601 times (or epoch '
      'numbers); rows before the first are train, then validation (with '
      'two), the rest test. Windows that cross a cut-off are dropped and '
      'counted.')
  add('--bucketize', default='0',
      help='Sensor: also store each value\'s quantile bucket (0..N-1, '
      'boundaries from a tf.Transform quantiles pass over the training '
      'split) as an int64 feature; 0 turns it off. Default: 0.')
  add('--max_gap', default='auto',
      help='Sensor: consecutive rows of an entity further apart than this '
      'are a gap, and windows never span one: a duration such as 2s, '
      '500ms or 1min (a bare number is in --timestamp_unit); auto: 3 times '
      'each entity\'s median sampling interval; none: never cut. '
      'Default: auto.')
  add('--same_time', default='conflict',
      help='Sensor: rows of one entity at one time. conflict: one '
      'observation (equal rows: one kept, the others dropped and counted; '
      'rows that differ: all dead-lettered). file_order: rows of one time '
      'are successive samples of a logger whose clock ticks slower than it '
      'samples, kept in the order of file and row, except a row equal to '
      'one of that time in an earlier file (a repeat, dropped); nothing '
      'conflicts. Default: conflict.')
  add('--resample', default='',
      help='Sensor windows: put each gap-free segment on a regular grid of '
      'this period (such as 20ms; a bare number is in --timestamp_unit), '
      'from its first observation: values interpolated linearly between '
      'the observations around each grid time, label of the one at or '
      'before it; windows are then made of grid rows. Default: off (the '
      'observations as sampled).')
  add('--chunk_rows', default='100000',
      help='Sensor windows: about this many rows of one entity are '
      'grouped and windowed together (bounds worker memory). '
      'Default: 100000.')


def settings(o) -> config.SensorConfig:
  """Checks the sensor flags (the columns are checked against the input
  later, by the pipeline's input check)."""
  length = flags.whole_number('window_length', o.window_length, 0, 1_000_000)
  stride = flags.whole_number('window_stride', o.window_stride, 0, 1_000_000)
  if length == 0 and stride:
    raise UsageError('--window_stride needs --window_length above 0.')
  entity = str(o.entity_column or '').strip() or None
  split_by = flags.choice('split_by', o.split_by, config.SPLIT_BY)
  cutoffs_text = flags.names(o.time_cutoffs)
  unit = flags.choice('timestamp_unit', o.timestamp_unit, config.TIME_UNITS)
  if split_by == 'auto':
    split_by = 'time' if cutoffs_text else ('entity' if entity else 'hash')
    if split_by == 'hash' and length:
      raise UsageError('windows without --entity_column need --split_by '
                       'time with --time_cutoffs, since all rows are one '
                       'recording and its windows overlap.')
  if split_by == 'entity' and not entity:
    raise UsageError('--split_by entity needs --entity_column.')
  if split_by == 'hash' and length:
    raise UsageError('--split_by hash would put overlapping windows of one '
                     'recording into different splits; use --split_by '
                     'entity (with --entity_column) or time.')
  cutoffs: Tuple[int, ...] = ()
  if split_by == 'time':
    if not 1 <= len(cutoffs_text) <= 2:
      raise UsageError('--split_by time needs --time_cutoffs with one or two '
                       'times, such as 2024-03-01 or 2024-03-01,2024-03-15.')
    try:
      cutoffs = tuple(config.parse_time(t, unit) for t in cutoffs_text)
    except ValueError as e:
      raise UsageError(f'--time_cutoffs: {e}.') from None
    if list(cutoffs) != sorted(set(cutoffs)):
      raise UsageError('--time_cutoffs must be in increasing order.')
  elif cutoffs_text:
    raise UsageError('--time_cutoffs needs --split_by time.')
  gap_text = str(o.max_gap).strip() or 'auto'
  if gap_text.lower() in ('auto', 'none'):
    gap_text = gap_text.lower()
    max_gap = config.AUTO_GAP if gap_text == 'auto' else None
  else:
    try:
      max_gap = config.parse_duration(gap_text, unit)
    except ValueError as e:
      raise UsageError(f'--max_gap: {e}, or auto or none.') from None
  resample_text = str(o.resample or '').strip()
  resample = None
  if resample_text:
    if not length:
      raise UsageError('--resample needs --window_length above 0 (windows '
                       'are made of the resampled rows).')
    try:
      resample = config.parse_duration(resample_text, unit)
    except ValueError as e:
      raise UsageError(f'--resample: {e}.') from None
  return config.SensorConfig(
      timestamp_column=str(o.timestamp_column).strip(),
      timestamp_unit=unit, entity_column=entity,
      label_column=str(o.label_column).strip(),
      channels=flags.names(o.channels),
      window_length=length, window_stride=stride or length,
      window_label=flags.choice('window_label', o.window_label,
                           config.LABEL_RULES),
      missing=flags.choice('missing', o.missing, config.MISSING_POLICIES),
      split_by=split_by, time_cutoffs=cutoffs,
      bucketize=flags.whole_number('bucketize', o.bucketize, 0, 10000),
      chunk_rows=flags.whole_number('chunk_rows', o.chunk_rows, 1000),
      max_gap=max_gap, max_gap_text=gap_text, resample=resample,
      resample_text=resample_text,
      same_time=flags.choice('same_time', o.same_time, config.SAME_TIME))
