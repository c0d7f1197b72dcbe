"""The table reader's timestamps: a column as int64 nanoseconds.

Part of the table reader (`sources/tables.py`): a timestamp column of a
batch (an Arrow array, from any format) as nanoseconds since the Unix
epoch, with the reasons of the cells that cannot be read.

Decisions:

- Timestamps: numbers (numeric columns or numeric text) are epoch values in
  `timestamp_unit`; other text is ISO-8601 (naive = UTC), read by Arrow's
  cast when every cell of the batch takes one of its strict forms, else by
  pandas (the same values; text that does not begin with a digit, such as
  the 'now' pandas would read as the clock's time, is a dead letter);
  Parquet timestamp and date columns are converted directly. The result is
  int64 nanoseconds; values outside its range (years 1677-2262) are dead
  letters.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.sources import table_cells

# The units of numeric timestamps (epoch values), in nanoseconds.
UNIT_NS = {'s': 10**9, 'ms': 10**6, 'us': 10**3, 'ns': 1}
_INT64_MAX = np.iinfo(np.int64).max
# Finite numbers only (timestamps), and integers that fit int64.
_FINITE_NUMBER = r'(?i)^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?$'
_INTEGER = r'^-?[0-9]{1,19}$'


def _epoch_ints(ints: np.ndarray, factor: int) -> Tuple[np.ndarray,
                                                        np.ndarray]:
  """int64 epoch values times factor, and where that overflows."""
  limit = _INT64_MAX // factor
  over = (ints > limit) | (ints < -limit)
  return np.where(over, 0, ints) * factor, over


def _epoch_floats(values: np.ndarray, factor: int) -> Tuple[np.ndarray,
                                                            np.ndarray]:
  """float epoch values to int64 ns (nearest), and where that overflows.

  The whole and fractional parts are scaled separately, so epoch seconds
  keep sub-microsecond precision.
  """
  over = ~np.isfinite(values) | (np.abs(values) >= 9.2e18 / factor)
  values = np.where(over, 0.0, values)
  whole = np.trunc(values)
  ns = (whole.astype(np.int64) * factor
        + np.rint((values - whole) * factor).astype(np.int64))
  return ns, over


def _numbers_to_ns(array: pa.Array, factor: int) -> Tuple[np.ndarray,
                                                          np.ndarray]:
  """A numeric array (no nulls) of epoch values to int64 ns and overflow."""
  if pa.types.is_integer(array.type):
    try:
      return _epoch_ints(
          pc.cast(array, pa.int64()).to_numpy(zero_copy_only=False), factor)
    except pa.ArrowInvalid:  # uint64 above the int64 range
      pass
  # Unsafe: huge integers may round; they are out of range anyway.
  return _epoch_floats(pc.cast(array, pa.float64(), safe=False).to_numpy(
      zero_copy_only=False), factor)


def _integer_text_to_ns(texts: pa.Array, factor: int) -> Tuple[np.ndarray,
                                                             np.ndarray]:
  """Integer strings (up to 19 digits) to int64 ns, and where that overflows."""
  try:
    return _epoch_ints(
        pc.cast(texts, pa.int64()).to_numpy(zero_copy_only=False), factor)
  except pa.ArrowInvalid:
    pass
  # Rare: some 19-digit value is beyond int64; go cell by cell.
  values = [int(text) for text in texts.to_pylist()]
  fits = np.array([abs(v) <= _INT64_MAX for v in values], bool)
  ns, over = _epoch_ints(
      np.array([v if ok else 0 for v, ok in zip(values, fits)], np.int64),
      factor)
  return ns, over | ~fits


def _iso_to_ns(texts: np.ndarray) -> Tuple[np.ndarray, np.ndarray,
                                           np.ndarray]:
  """ISO-8601 strings to int64 ns: (ns, unparseable, out of range)."""
  pd = _pandas()
  try:
    parsed = pd.DatetimeIndex(pd.to_datetime(texts, format='ISO8601',
                                             utc=True, errors='coerce'))
  except (ValueError, TypeError, OverflowError):
    # Should not happen with errors='coerce'; parse cell by cell.
    parsed = pd.DatetimeIndex([_parse_one_iso(t) for t in texts]).as_unit(
        'us')
  nat = np.asarray(parsed.isna())
  ticks = np.where(nat, 0, parsed.asi8)
  ns, over = _epoch_ints(ticks, UNIT_NS[parsed.unit])
  return ns, nat, over & ~nat


def _iso_by_arrow(texts: pa.Array) -> Optional[np.ndarray]:
  """Every one of `texts` as int64 ns since the epoch, when Arrow's
  ISO-8601 cast reads them all, else None (pandas then reads them:
  _iso_to_ns).

  Arrow reads the strict forms: a date, then optionally a time (hours,
  minutes, seconds, up to 9 decimals) after 'T' or a space, and either a
  zone on every cell ('Z', +hh, +hhmm, +hh:mm: converted to UTC) or on
  none (naive = UTC). Each value it gives is the one pandas gives (the
  tests hold the two to that on many spellings); what it refuses (a
  leap second, 24:00, a comma, a week date, a mix of zoned and naive cells,
  an empty or null cell, a number) makes the whole array go to pandas. It
  never reads a number as a date: its forms put '-' where a number cannot
  have one (after the 4th and the 7th character). Its speed against
  pandas: benchmarks/TRIED.md.
  """
  if texts.null_count or not len(texts):
    return None
  for target in (pa.timestamp('ns', tz='UTC'), pa.timestamp('ns')):
    try:
      stamps = pc.cast(texts, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
      continue
    return np.asarray(stamps.cast(pa.int64()).to_numpy(
        zero_copy_only=False), np.int64)
  return None


def _pandas():
  """pandas, imported when a timestamp column needs it (not with this
  module: the text reader's worker processes do without it; its import
  time: benchmarks/TRIED.md)."""
  import pandas  # pylint: disable=import-outside-toplevel
  return pandas


def _parse_one_iso(text):
  pd = _pandas()
  try:
    return pd.to_datetime(text, format='ISO8601', utc=True)
  except (ValueError, TypeError, OverflowError):
    return pd.NaT


def _text_to_ns(array: pa.Array, name: str, factor: int
                ) -> Tuple[np.ndarray, table_cells.BadCells]:
  """column_to_ns for a column of text (or of any other type, as text):
  ISO-8601 timestamps and epoch numbers, `factor` ns each."""
  mask = table_cells.as_mask
  n = len(array)
  ns = np.zeros(n, np.int64)
  text, utf8_bad = table_cells.to_text(array, name)
  trimmed = pc.utf8_trim_whitespace(text)
  over = np.zeros(n, bool)
  unparsed = np.zeros(n, bool)
  every_iso = _iso_by_arrow(trimmed)
  if every_iso is not None:
    # The usual column: every cell a timestamp in one ISO-8601 form.
    missing = np.zeros(n, bool)
    ns, over = _epoch_ints(every_iso, 1)
    integer = number = iso = missing
  else:
    missing = mask(pc.is_null(trimmed)) | mask(pc.equal(trimmed, ''))
    integer = mask(pc.match_substring_regex(trimmed, _INTEGER))
    number = (mask(pc.match_substring_regex(trimmed, _FINITE_NUMBER))
              & ~integer)
    iso = ~missing & ~integer & ~number
    # An ISO-8601 time begins with a digit. pandas also reads the words
    # 'now' and 'today' (as the clock's time when it reads them): such a
    # cell is no time of the data.
    word = iso & ~mask(pc.match_substring_regex(trimmed, '^[0-9]'))
    unparsed |= word
    iso &= ~word
  if integer.any():
    part = trimmed if integer.all() else trimmed.filter(pa.array(integer))
    ns[integer], over[integer] = _integer_text_to_ns(part, factor)
  if number.any():
    part = trimmed.filter(pa.array(number))
    ns[number], over[number] = _epoch_floats(
        pc.cast(part, pa.float64()).to_numpy(zero_copy_only=False), factor)
  if iso.any():
    part = trimmed if iso.all() else trimmed.filter(pa.array(iso))
    iso_ns, iso_nat, iso_over = _iso_to_ns(
        part.to_numpy(zero_copy_only=False))
    ns[iso], unparsed[iso], over[iso] = iso_ns, iso_nat, iso_over
  if len(utf8_bad[0]):
    missing[utf8_bad[0]] = False
    unparsed[utf8_bad[0]] = False
  bad = utf8_bad
  for where, template in ((missing, 'missing timestamp'),
                          (unparsed, 'timestamp {} is not ISO-8601 or a '
                                     'number'),
                          (over, 'timestamp {} is out of range')):
    bad = table_cells.merge_bad(
        bad, table_cells.bad_cells(where, template, text))
  return ns, bad


def column_to_ns(array: pa.Array, name: str, unit: str
                 ) -> Tuple[np.ndarray, table_cells.BadCells]:
  """A timestamp column of one batch as nanoseconds since the epoch.

  Args:
    array: The column (timestamps, dates, numbers or text).
    name: Its name, for the reasons.
    unit: The epoch unit of numbers (one of UNIT_NS).

  Returns:
    (int64 ns since the Unix epoch, UTC, per cell; the bad cells).
  """
  mask = table_cells.as_mask
  t = array.type
  factor = UNIT_NS[unit]
  if pa.types.is_timestamp(t) or pa.types.is_date(t):
    if pa.types.is_timestamp(t):
      type_factor = UNIT_NS[t.unit]
    else:
      type_factor = 86400 * 10**9 if pa.types.is_date32(t) else 10**6
    missing = mask(pc.is_null(array))
    # date32 casts only to int32 (days), the others to int64.
    storage = pa.int32() if pa.types.is_date32(t) else pa.int64()
    ints = pc.cast(array, storage).fill_null(0).to_numpy(
        zero_copy_only=False).astype(np.int64)
    ns, over = _epoch_ints(ints, type_factor)
    shown = array
  elif table_cells.is_numeric_type(t):
    missing = mask(pc.is_null(array))
    if pa.types.is_floating(t):
      missing |= mask(pc.is_nan(array))
    filled = array.fill_null(0)
    if pa.types.is_floating(t):
      filled = pc.if_else(pa.array(missing), 0.0, filled)
    ns, over = _numbers_to_ns(filled, factor)
    over &= ~missing
    shown = array
  else:
    return _text_to_ns(array, name, factor)
  bad = table_cells.merge_bad(
      table_cells.bad_cells(missing, 'missing timestamp', shown),
      table_cells.bad_cells(over, 'timestamp {} is out of range', shown))
  return ns, bad
