"""Generates a labelled multi-device sensor log (CSV) for benchmarks.

Nothing is downloaded: every value comes from a seeded random number
generator, so the same arguments always give the same file.

    python benchmarks/sensor_data.py --rows 1000000 --out /tmp/sensor.csv

writes one CSV with the columns

    time,device,ch0,...,ch7,label
    2026-01-01T00:00:00.412Z,dev017,0.31287,-0.51022,9.36871,...,walk

- time: ISO-8601 UTC with milliseconds and 'Z'. Every device is sampled
  about once a second (1000 ms +- a little jitter) from its own random start
  in the first second; the rows of all devices are interleaved in time
  order, like one log file that all devices append to.
- device: dev000 .. dev099; each device has rows/devices rows (the first
  rows % devices devices get one more).
- ch0..ch7: accelerometer-like (ch0..ch2, ch2 around 9.81), gyroscope-like
  (ch3..ch5, scale 50), pressure-like (ch6, around 1013) and
  temperature-like (ch7, around 300, std about 0.5) channels, written with
  fixed decimals chosen per channel for about 6 significant digits. More
  channels cycle through these eight profiles. Each value is the channel's
  base plus a per-class shift, a per-device calibration offset, a slow
  oscillation whose amplitude depends on the class and noise whose spread
  depends on the class, so the channels have very different scales (which
  is what normalization is for) and the classes are separable.
- label: walk / sit / run / fall in bouts (a label holds for 20..400
  consecutive rows of a device; two bouts in a row may draw the same label
  and then form one longer run), drawn so that about 55% / 25% / 15% / 5%
  of the rows get each label.

The class and channel profiles are fixed (the same for every seed); the seed
decides start times, jitter, bouts, device offsets and noise. Values are
made and written in chunks of rows, so memory stays at a few dozen bytes per
row (times, devices, labels and the time order) plus one chunk's text.
"""

import argparse
import os
import sys
import time
from typing import Dict, List

import numpy as np

LABELS = ('walk', 'sit', 'run', 'fall')
# Share of the rows each label gets, in the order above (imbalanced).
LABEL_WEIGHTS = (0.55, 0.25, 0.15, 0.05)
MIN_BOUT, MAX_BOUT = 20, 400
START = np.datetime64('2026-01-01T00:00:00', 'ms')
PERIOD_MS = 1000
JITTER_MS = 20  # standard deviation of the sampling interval
CHUNK_ROWS = 50_000

# (base, scale, oscillation period in seconds) of the eight channel profiles:
# accelerometer x/y/z, gyroscope x/y/z, pressure, temperature.
_PROFILES = np.array([
    [0.0, 1.0, 7.0],
    [0.0, 1.0, 11.0],
    [9.81, 1.0, 13.0],
    [0.0, 50.0, 17.0],
    [0.0, 50.0, 19.0],
    [0.0, 50.0, 23.0],
    [1013.25, 2.0, 600.0],
    [300.0, 0.5, 3600.0],
])
# Per class (order of LABELS), in units of the channel's scale: spread of the
# class's mean shift, oscillation amplitude and noise standard deviation.
_CLASS_SHIFT = np.array([0.5, 0.8, 1.0, 1.5])
_CLASS_AMPLITUDE = np.array([0.8, 0.05, 1.5, 0.5])
_CLASS_NOISE = np.array([0.5, 0.15, 1.2, 2.5])
_DEVICE_OFFSET = 0.2
_PROFILE_SEED = 20260101  # fixed: the classes mean the same for every seed


def _channel_params(channels: int) -> Dict[str, np.ndarray]:
  """Base, scale, period, decimals and class shifts of every channel."""
  prof = _PROFILES[np.arange(channels) % len(_PROFILES)]
  base, scale, period = prof[:, 0], prof[:, 1], prof[:, 2]
  # Enough decimals for about 6 significant digits at base + 3 scales.
  magnitude = np.floor(np.log10(np.abs(base) + 3 * scale)).astype(int)
  decimals = np.clip(5 - magnitude, 0, 8)
  rng = np.random.default_rng(_PROFILE_SEED)
  shift = rng.normal(0.0, 1.0, (len(LABELS), channels)) * _CLASS_SHIFT[:, None]
  return {'base': base, 'scale': scale, 'period': period,
          'decimals': decimals, 'shift': shift}


def device_names(devices: int) -> List[str]:
  """dev000, dev001, ... (wider when there are more than 1000 devices)."""
  width = max(3, len(str(devices - 1)))
  return [f'dev{d:0{width}d}' for d in range(devices)]


def device_rows(rows: int, devices: int) -> np.ndarray:
  """Rows of each device: rows // devices, one more for the first few."""
  counts = np.full(devices, rows // devices, np.int64)
  counts[:rows % devices] += 1
  return counts


def _sample_times(rng: np.random.Generator,
                  counts: np.ndarray) -> np.ndarray:
  """Milliseconds since START of every row, device after device."""
  rows = int(counts.sum())
  steps = np.rint(rng.normal(PERIOD_MS, JITTER_MS, rows)).astype(np.int64)
  np.clip(steps, PERIOD_MS - 5 * JITTER_MS, PERIOD_MS + 5 * JITTER_MS,
          out=steps)
  firsts = np.cumsum(counts) - counts  # index of each device's first row
  has_rows = counts > 0
  steps[firsts[has_rows]] = rng.integers(0, PERIOD_MS, int(has_rows.sum()))
  total = np.cumsum(steps)
  # Restart the running sum at every device's first row.
  before = np.zeros(len(counts), np.int64)
  before[has_rows] = total[firsts[has_rows]] - steps[firsts[has_rows]]
  return total - np.repeat(before, counts)


def _bout_labels(rng: np.random.Generator, counts: np.ndarray) -> np.ndarray:
  """Label index of every row, device after device, in bouts."""
  out = np.empty(int(counts.sum()), np.int8)
  at = 0
  for n in counts:
    n = int(n)
    lengths = rng.integers(MIN_BOUT, MAX_BOUT + 1, n // MIN_BOUT + 1)
    classes = rng.choice(len(LABELS), len(lengths), p=LABEL_WEIGHTS)
    out[at:at + n] = np.repeat(classes, lengths)[:n]
    at += n
  return out


# ------------------------------------------------------- text formatting --
# Each field becomes a block of bytes per row, padded with NUL bytes; the
# blocks are laid side by side and the NULs dropped, which gives the CSV text
# of many rows without a Python loop per row.


def _digits(values: np.ndarray, width: int) -> np.ndarray:
  """Zero-padded decimal digits of non-negative ints, (n, width) uint8."""
  out = np.empty((len(values), width), np.uint8)
  q = values.copy()
  for col in range(width - 1, -1, -1):
    out[:, col] = q % 10 + ord('0')
    q //= 10
  return out


def _constant(n: int, text: str) -> np.ndarray:
  return np.broadcast_to(np.frombuffer(text.encode('ascii'), np.uint8),
                         (n, len(text)))


def _fixed_point(x: np.ndarray, decimals: int) -> np.ndarray:
  """'-12.345' style text of floats, NUL-padded on the left."""
  k = np.rint(x * 10.0**decimals).astype(np.int64)
  a = np.abs(k)
  whole = a // 10**decimals
  int_width = len(str(int(whole.max()))) if len(a) else 1
  digits = _digits(a, int_width + decimals)
  ints = digits[:, :int_width]
  # Leading zeros of the whole part (all but its last digit) become padding.
  for col in range(int_width - 1):
    ints[whole < 10**(int_width - 1 - col), col] = 0
  sign = np.where(k < 0, ord('-'), 0).astype(np.uint8)[:, None]
  parts = [sign, ints]
  if decimals:
    parts += [_constant(len(x), '.'), digits[:, int_width:]]
  return np.hstack(parts)


def _iso_times(ms: np.ndarray) -> np.ndarray:
  """'2026-01-01T00:00:00.000Z' of milliseconds since START, (n, 24) uint8."""
  day, in_day = np.divmod(ms, 86_400_000)
  first = int(day.min())
  dates = np.datetime_as_string(
      START.astype('datetime64[D]') + np.arange(first, int(day.max()) + 1),
      unit='D')
  table = np.frombuffer(''.join(d + 'T' for d in dates).encode('ascii'),
                        np.uint8).reshape(len(dates), 11)
  hours, rest = np.divmod(in_day, 3_600_000)
  minutes, rest = np.divmod(rest, 60_000)
  seconds, millis = np.divmod(rest, 1000)
  n = len(ms)
  return np.hstack([table[day - first], _digits(hours, 2), _constant(n, ':'),
                    _digits(minutes, 2), _constant(n, ':'),
                    _digits(seconds, 2), _constant(n, '.'),
                    _digits(millis, 3), _constant(n, 'Z')])


def _name_table(names) -> np.ndarray:
  width = max(len(n) for n in names)
  table = np.zeros((len(names), width), np.uint8)
  for i, name in enumerate(names):
    table[i, :len(name)] = np.frombuffer(name.encode('ascii'), np.uint8)
  return table


def _csv_text(blocks) -> bytes:
  matrix = np.hstack(blocks).ravel()
  return matrix[matrix != 0].tobytes()


# --------------------------------------------------------------- generate --


def generate(path: str, rows: int = 1_000_000, devices: int = 100,
             channels: int = 8, seed: int = 0) -> Dict[str, int]:
  """Writes the sensor log CSV described in the module docstring.

  The file is written under a temporary name next to `path` and renamed
  when complete, so `path` never holds a partial file.

  Args:
    path: CSV file to write (its folder must exist).
    rows: Total number of data rows.
    devices: Number of devices (entities).
    channels: Number of value columns ch0..ch<channels-1>.
    seed: Random seed; equal arguments give equal files.

  Returns:
    {label: number of rows} over the whole file.

  Raises:
    ValueError: A count is not positive.
  """
  if rows < 1 or devices < 1 or channels < 1:
    raise ValueError('rows, devices and channels must be at least 1')
  rng = np.random.default_rng(seed)
  counts = device_rows(rows, devices)
  ms = _sample_times(rng, counts)
  labels = _bout_labels(rng, counts)
  device = np.repeat(np.arange(devices, dtype=np.int32), counts)
  # Time order of the whole log; ties keep device order.
  order = np.argsort(ms, kind='stable')
  params = _channel_params(channels)
  offsets = rng.normal(0.0, _DEVICE_OFFSET, (devices, channels))
  phases = rng.uniform(0.0, 2 * np.pi, (devices, channels))
  noise_rng = np.random.default_rng([seed, 1])

  device_table = _name_table(device_names(devices))
  label_table = _name_table(LABELS)
  header = ','.join(['time', 'device'] +
                    [f'ch{c}' for c in range(channels)] + ['label']) + '\n'
  tmp = f'{path}.tmp-{os.getpid()}'
  try:
    with open(tmp, 'wb') as f:
      f.write(header.encode('ascii'))
      for lo in range(0, rows, CHUNK_ROWS):
        idx = order[lo:lo + CHUNK_ROWS]
        n = len(idx)
        lab, dev, t = labels[idx], device[idx], ms[idx]
        noise = noise_rng.standard_normal((n, channels))
        seconds = (t / 1000.0)[:, None]
        wave = np.sin(2 * np.pi * seconds / params['period'] + phases[dev])
        units = (params['shift'][lab] + offsets[dev] +
                 _CLASS_AMPLITUDE[lab][:, None] * wave +
                 _CLASS_NOISE[lab][:, None] * noise)
        values = params['base'] + params['scale'] * units
        comma = _constant(n, ',')
        blocks = [_iso_times(t), comma, device_table[dev]]
        for c in range(channels):
          blocks += [comma, _fixed_point(values[:, c],
                                         int(params['decimals'][c]))]
        blocks += [comma, label_table[lab], _constant(n, '\n')]
        f.write(_csv_text(blocks))
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.unlink(tmp)
  per_label = np.bincount(labels, minlength=len(LABELS))
  return {name: int(c) for name, c in zip(LABELS, per_label)}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--rows', type=int, default=1_000_000,
                      help='Data rows (default 1000000).')
  parser.add_argument('--devices', type=int, default=100,
                      help='Devices (default 100).')
  parser.add_argument('--channels', type=int, default=8,
                      help='Value columns ch0.. (default 8).')
  parser.add_argument('--seed', type=int, default=0,
                      help='Random seed (default 0).')
  parser.add_argument('--out', required=True, help='CSV file to write.')
  args = parser.parse_args(argv)
  start = time.perf_counter()
  try:
    per_label = generate(args.out, args.rows, args.devices, args.channels,
                         args.seed)
  except ValueError as e:
    parser.error(str(e))
  shares = ', '.join(f'{k} {v / args.rows:.1%}' for k, v in per_label.items())
  print(f'wrote {args.rows} rows ({args.devices} devices, {args.channels} '
        f'channels) to {args.out} in {time.perf_counter() - start:.1f} s; '
        f'labels: {shares}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
