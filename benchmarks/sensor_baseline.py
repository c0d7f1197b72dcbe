"""Baseline: a plain single-process script that windows a sensor CSV.

    python benchmarks/sensor_baseline.py --input data.csv --output OUT_DIR \
        [--window 50] [--stride 25]

What an engineer would write by hand with pandas, NumPy and
tf.io.TFRecordWriter, for the CSV of benchmarks/sensor_data.py (columns
time, device, label and any number of channel columns):

1. Reads the whole file with pandas.read_csv and parses `time` to int64
   nanoseconds since the epoch (UTC).
2. Puts every device in train / validation / test (80/10/10) with
   transforms.core.splits.assign_split, i.e. by the SHA-256 of its name.
3. Z-scores every channel with the mean and population standard deviation
   (float64) of the train rows (a standard deviation of 0 counts as 1).
4. Per device, sorts the rows by time (ties keep file order) and cuts
   complete windows of --window rows every --stride rows from row 0; a
   window's label is the label of its last row.
5. Writes one tf.train.Example per window to <output>/<split>.tfrecord:
   values (window x channels float32, time-major), label (index in the
   sorted label names), label_text, entity, start_time, end_time (ns) and
   id ('<device>#<first row index within the device>').

No dead-letter output, no manifest, no input validation (a bad row makes it
fail or write NaNs), and the whole file is held in memory. Prints one JSON
line at the end: {"records": N, "splits": {...}, "rows": R, "seconds": S},
S being the wall time since the script started (its imports included).
"""

import time

_START = time.perf_counter()

# pylint: disable=g-import-not-at-top,wrong-import-position
import argparse
import json
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
  sys.path.insert(0, _ROOT)

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
import pandas as pd
import tensorflow as tf

from transforms.core.splits import assign_split
# pylint: enable=g-import-not-at-top,wrong-import-position

TIME, ENTITY, LABEL = 'time', 'device', 'label'
SPLITS = [('train', 0.8), ('validation', 0.1), ('test', 0.1)]


def _bytes(value):
  return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int64(value):
  return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--input', required=True, help='Sensor CSV file.')
  parser.add_argument('--output', required=True,
                      help='Folder for <split>.tfrecord files.')
  parser.add_argument('--window', type=int, default=50,
                      help='Rows per window (default 50).')
  parser.add_argument('--stride', type=int, default=25,
                      help='Rows between window starts (default 25).')
  args = parser.parse_args(argv)
  if args.window < 1 or args.stride < 1:
    parser.error('--window and --stride must be at least 1')

  df = pd.read_csv(args.input, dtype={ENTITY: str, LABEL: str})
  rows = len(df)
  channels = [c for c in df.columns if c not in (TIME, ENTITY, LABEL)]
  times = (pd.to_datetime(df[TIME], utc=True, format='ISO8601')
           .dt.as_unit('ns').astype('int64').to_numpy())
  device_codes, devices = pd.factorize(df[ENTITY], sort=True)
  labels = df[LABEL].to_numpy(dtype=object)
  label_names = sorted(set(labels))
  label_ids = {name: i for i, name in enumerate(label_names)}
  values = df[channels].to_numpy(dtype=np.float64)
  del df

  # Split by entity, then statistics over the train rows only.
  device_split = [assign_split(d, SPLITS) for d in devices]
  is_train = np.array([s == 'train' for s in device_split])[device_codes]
  train = values[is_train]
  mean = train.mean(axis=0)
  std = train.std(axis=0)
  std[std == 0] = 1.0
  normalized = ((values - mean) / std).astype(np.float32)
  del values, train

  # Rows by device, then time, then position in the file.
  order = np.lexsort((np.arange(rows), times, device_codes))
  bounds = np.searchsorted(device_codes[order], np.arange(len(devices) + 1))

  os.makedirs(args.output, exist_ok=True)
  writers = {name: tf.io.TFRecordWriter(
      os.path.join(args.output, f'{name}.tfrecord')) for name, _ in SPLITS}
  counts = {name: 0 for name, _ in SPLITS}
  width = len(channels)
  for code, device in enumerate(devices):
    idx = order[bounds[code]:bounds[code + 1]]
    if len(idx) < args.window:
      continue
    seg = normalized[idx]
    windows = sliding_window_view(seg, (args.window, width))[::args.stride, 0]
    # Plain lists: protobuf copies them far faster than NumPy rows.
    windows = windows.reshape(len(windows), args.window * width).tolist()
    starts = np.arange(len(windows)) * args.stride
    ends = starts + args.window - 1
    split = device_split[code]
    writer = writers[split]
    entity = device.encode('utf-8')
    for i, start in enumerate(starts):
      label = labels[idx[ends[i]]]
      example = tf.train.Example(features=tf.train.Features(feature={
          'values': tf.train.Feature(
              float_list=tf.train.FloatList(value=windows[i])),
          'label': _int64(label_ids[label]),
          'label_text': _bytes(label.encode('utf-8')),
          'entity': _bytes(entity),
          'start_time': _int64(int(times[idx[start]])),
          'end_time': _int64(int(times[idx[ends[i]]])),
          'id': _bytes(f'{device}#{start}'.encode('utf-8')),
      }))
      writer.write(example.SerializeToString())
    counts[split] += len(starts)
  for writer in writers.values():
    writer.close()

  print(json.dumps({'records': sum(counts.values()), 'splits': counts,
                    'rows': rows,
                    'seconds': round(time.perf_counter() - _START, 3)}))
  return 0


if __name__ == '__main__':
  sys.exit(main())
