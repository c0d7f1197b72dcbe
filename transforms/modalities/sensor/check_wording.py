"""What the sensor checks and the report's sections share: the manifest's
time section (sensor.time) and how their details write times, durations
and entities.
"""

from typing import Optional

from transforms.modalities.sensor import config


def time_text(ns: int) -> str:
  """ns since the epoch as ISO-8601 UTC text."""
  return config.format_time(ns)


NOT_RECORDED = ('not recorded: the manifest has no sensor.time (it was '
                'written before preprocessing recorded sampling intervals '
                'and gaps)')


def time_section(manifest: dict) -> Optional[dict]:
  """The manifest's sensor.time, or None (written before it existed)."""
  return manifest['sensor'].get('time')


_DURATION_UNITS = ((86_400 * 10**9, 'd'), (3_600 * 10**9, 'h'),
                   (60 * 10**9, 'min'), (10**9, 's'), (10**6, 'ms'),
                   (10**3, 'us'))


def duration(ns: Optional[int], digits: int = 4) -> str:
  """ns as readable text (11.98 s, 15.62 ms; 'none' for None)."""
  if ns is None:
    return 'none'
  for size, unit in _DURATION_UNITS:
    if abs(ns) >= size:
      return f'{ns / size:.{digits}g} {unit}'
  return f'{ns} ns'


def entity_name(entity: str) -> str:
  """An entity as a detail names it ('' has no entity column)."""
  return entity or "'' (no entity column)"
