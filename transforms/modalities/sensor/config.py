"""The checked sensor settings of a run (`SensorConfig`), the values its
flags accept, and times and durations as the flags give them and the
manifest records them (`parse_time`, `format_time`, `parse_duration`).
"""

import dataclasses
from typing import Optional, Tuple

import pandas as pd


SPLIT_BY = ('auto', 'hash', 'entity', 'time')
# --same_time: rows of one entity at one time are one observation
# (conflict), or in one file successive samples of a coarse clock
# (file_order).
SAME_TIME = ('conflict', 'file_order')
TIME_UNITS = ('s', 'ms', 'us', 'ns')
LABEL_RULES = ('last', 'majority')
MISSING_POLICIES = ('dead_letter', 'drop', 'impute')
NORMALIZATIONS = ('zscore', 'minmax', 'none')
AUTO_GAP = -1  # SensorConfig.max_gap: derived per entity
GAP_FACTOR = 3  # --max_gap auto: this many sampling intervals
_NS_PER_UNIT = {'s': 10**9, 'ms': 10**6, 'us': 10**3, 'ns': 1}


@dataclasses.dataclass(frozen=True)
class SensorConfig:
  """The checked sensor settings of a run."""
  timestamp_column: str
  timestamp_unit: str
  entity_column: Optional[str]
  label_column: str
  channels: Tuple[str, ...]  # as given; empty: every numeric column
  window_length: int  # 0: one example per row
  window_stride: int
  window_label: str
  missing: str
  split_by: str  # 'hash', 'entity' or 'time'
  time_cutoffs: Tuple[int, ...]  # ns since the epoch, increasing
  bucketize: int
  chunk_rows: int
  # ns for every entity; AUTO_GAP: 3x each entity's sampling interval;
  # None: series are never cut.
  max_gap: Optional[int] = -1
  max_gap_text: str = 'auto'
  resample: Optional[int] = None  # ns: the grid's period; None: off
  resample_text: str = ''
  same_time: str = 'conflict'  # one of SAME_TIME

  @property
  def windowed(self) -> bool:
    return self.window_length > 0

  @property
  def time_split_names(self) -> Tuple[str, ...]:
    return (('train', 'test') if len(self.time_cutoffs) == 1 else
            ('train', 'validation', 'test'))

  def to_json(self) -> dict:
    d = dataclasses.asdict(self)
    d['channels'] = list(self.channels)
    d['time_cutoffs'] = [format_time(t) for t in self.time_cutoffs]
    d['max_gap'] = self.max_gap_text
    d['resample'] = self.resample_text or None
    del d['max_gap_text'], d['resample_text']
    return d


def parse_time(text: str, unit: str = 's') -> int:
  """One timestamp (ISO-8601, or an epoch number in `unit`) -> ns (UTC).

  Raises:
    ValueError: Not a time.
  """
  text = str(text).strip()
  try:
    return int(round(float(text) * _NS_PER_UNIT[unit]))
  except ValueError:
    pass
  import pandas as pd  # pylint: disable=import-outside-toplevel
  try:
    value = pd.Timestamp(text)
  except (ValueError, TypeError):
    raise ValueError(f'{text!r} is not an ISO-8601 time or a number'
                     ) from None
  if value is pd.NaT:
    raise ValueError(f'{text!r} is not an ISO-8601 time or a number')
  if value.tzinfo is None:
    value = value.tz_localize('UTC')
  return int(value.value)


def format_time(ns: int) -> str:
  """ns since the epoch -> ISO-8601 UTC text."""
  import pandas as pd  # pylint: disable=import-outside-toplevel
  return pd.Timestamp(int(ns), unit='ns', tz='UTC').isoformat()


def parse_duration(text: str, unit: str = 's') -> int:
  """A duration (pandas Timedelta text such as 2s, 500ms, 1min; or a bare
  number in `unit`) -> ns.

  Raises:
    ValueError: Not a positive duration.
  """
  text = str(text).strip()
  try:
    ns = int(round(float(text) * _NS_PER_UNIT[unit]))
  except ValueError:
    try:
      ns = int(pd.Timedelta(text).value)
    except (ValueError, TypeError):
      raise ValueError(f'{text!r} is not a duration such as 2s, 500ms or '
                       '1min') from None
  if ns <= 0:
    raise ValueError(f'{text!r} is not a positive duration')
  return ns
