"""Small generated sensor tables for the tests (no files from elsewhere)."""

import numpy as np
import pandas as pd

LABELS = ('run', 'sit', 'walk')
START = pd.Timestamp('2026-01-01T00:00:00Z').value


def frame(devices=12, rows_per_device=120, channels=3, seed=0,
          entity=True) -> pd.DataFrame:
  """Rows of several devices, one per second, in shuffled order.

  Labels come in bouts of 20 rows; channel c has mean 10 * c (channel 0 is
  temperature-like, around 300).
  """
  rng = np.random.default_rng(seed)
  parts = []
  for d in range(devices):
    t = START + np.arange(rows_per_device, dtype=np.int64) * 10**9
    labels = np.array(LABELS)[(np.arange(rows_per_device) // 20 + d) %
                              len(LABELS)]
    values = rng.normal(size=(rows_per_device, channels))
    values[:, 0] = 300 + values[:, 0] * 0.5
    values[:, 1:] += 10 * np.arange(1, channels)
    part = pd.DataFrame({
        'time': pd.to_datetime(t, utc=True).strftime(
            '%Y-%m-%dT%H:%M:%S.%fZ'),
        **({'device': f'dev{d:02d}'} if entity else {}),
        **{f'ch{c}': values[:, c] for c in range(channels)},
        'label': labels,
    })
    parts.append(part)
  return pd.concat(parts).sample(frac=1.0, random_state=seed).reset_index(
      drop=True)


def reference_windows(df: pd.DataFrame, length: int, stride: int,
                      channels, mean, std):
  """{id: (normalized window, label)} computed in memory with pandas."""
  out = {}
  df = df.assign(_t=pd.to_datetime(df['time'], utc=True).astype('int64'),
                 _row=np.arange(len(df)))
  for device, rows in df.groupby('device'):
    rows = rows.sort_values(['_t', '_row'], kind='stable')
    vals = (rows[list(channels)].to_numpy(np.float64) - mean) / std
    labels = rows['label'].to_numpy()
    for start in range(0, len(rows) - length + 1, stride):
      out[f'{device}#{start}'] = (vals[start:start + length],
                                  labels[start + length - 1])
  return out
