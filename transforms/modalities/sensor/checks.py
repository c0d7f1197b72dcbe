"""The sensor modality's side of reading a published dataset back.

The validation pipeline and the reader call these through the plug-in (see
transforms/modalities/base.py). Records hold the normalized values of one
row or one window of rows ('values', [rows, channels] flattened), with
optional bucket ids and the times they cover.
"""

from typing import Dict

import numpy as np

from transforms.validation import dataset_checks as quality_checks
from transforms.validation import html_report

# Features whose statistics are kept per channel here, not as a whole.
_OWN_STATS = frozenset({'values'})
# Sample windows in the report are cut to this many rows and channels.
MAX_ROWS = 400
MAX_CHANNELS = 8


# ------------------------------------------------------------ records --


def check_values(values: Dict[str, list], manifest: dict, out: dict,
                 stats) -> None:
  """Checks a record's values, buckets and times; adds its statistics.

  Sets out['values'] (for the report's sample windows).

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
  if stats is not None:
    quality_checks.add_record_stats(stats, values, manifest, _OWN_STATS)
    if 'values' in values:
      channels = manifest['sensor']['channels']
      arr = np.asarray(values['values'], np.float64).reshape(
          -1, len(channels))
      stats.add_channels('values', arr, channels)


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
  """The report's charts of sample windows, two per class (of the train
  split, or of the first split without one)."""
  del manifest
  split, samples = html_report.sample_split(report)
  charts = [html_report.line_chart(f'{label}: {x["id"]}', x['channels'],
                                   x['values'])
            for label, items in samples.items() for x in items[:2]
            if 'values' in x]
  return (f'<h2>Sample windows ({html_report.escape(split)}, normalized '
          f'values)</h2><div class="charts">{"".join(charts)}</div>'
          if charts else '')
