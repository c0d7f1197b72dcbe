"""A few example records per class, kept while validation reads a shard,
for the HTML report: small JPEG thumbnails of images (base64) and the
values of sensor windows (cut to a plottable size).
"""

import base64
import io
from typing import Dict, List

import numpy as np

# Per class, per shard and in the merged report.
PER_CLASS = 4
THUMBNAIL = 64
# Classes with samples in the report (the first by name).
MAX_CLASSES = 40
# Samples kept from one shard, whatever the number of classes, so that the
# shard results gathered for the report stay small with many shards.
MAX_PER_SHARD = 32
# Sensor samples are cut to this many rows and channels.
MAX_ROWS = 400
MAX_CHANNELS = 8


def _thumbnail(arr: np.ndarray) -> str:
  from PIL import Image  # pylint: disable=import-outside-toplevel
  if arr.dtype != np.uint8:  # float32 storage: stretch to 0..255 to show
    lo, hi = float(arr.min()), float(arr.max())
    arr = ((arr - lo) / (hi - lo or 1.0) * 255).round().astype(np.uint8)
  img = Image.fromarray(arr[..., 0] if arr.shape[-1] == 1 else arr)
  img.thumbnail((THUMBNAIL, THUMBNAIL))
  buf = io.BytesIO()
  img.convert('L' if arr.shape[-1] == 1 else 'RGB').save(
      buf, format='JPEG', quality=80)
  return base64.b64encode(buf.getvalue()).decode('ascii')


def keep(samples: Dict[str, List], info: dict, manifest: dict) -> None:
  """Adds the record described by `info` (check_record's result) to
  `samples` ({label: [sample]}) while its class has fewer than PER_CLASS."""
  if sum(len(v) for v in samples.values()) >= MAX_PER_SHARD:
    return
  kept = samples.setdefault(info['label'], [])
  if len(kept) >= PER_CLASS:
    return
  modality = manifest.get('modality', 'image')
  if modality == 'image' and info.get('image') is not None:
    img = manifest['image']
    arr = np.asarray(info['image']).reshape(img['height'], img['width'],
                                             img['channels'])
    kept.append({'id': info['id'], 'jpeg_base64': _thumbnail(arr)})
  elif modality == 'sensor' and info.get('values') is not None:
    channels = manifest['sensor']['channels']
    arr = np.asarray(info['values'], np.float64).reshape(-1, len(channels))
    kept.append({'id': info['id'], 'channels': channels[:MAX_CHANNELS],
                 'values': np.round(arr[:MAX_ROWS, :MAX_CHANNELS],
                                    4).tolist()})
  else:
    kept.append({'id': info['id']})


def merge(parts) -> Dict[str, List]:
  """Merges per-shard samples, keeping PER_CLASS per class (by id order,
  so the result does not depend on the order shards were read in)."""
  out: Dict[str, List] = {}
  for part in parts:
    for label, items in part.items():
      out.setdefault(label, []).extend(items)
  return {label: sorted(items, key=lambda x: x['id'])[:PER_CLASS]
          for label, items in sorted(out.items())[:MAX_CLASSES]}
