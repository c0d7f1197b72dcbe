"""The image modality's side of reading a published dataset back.

The validation pipeline and the reader call these through the plug-in (see
transforms/modalities/base.py): each stored image is decoded (or, stored as
float32, range-checked) and its per-channel sums kept, so that the dataset
check can recompute the normalization statistics from the stored training
images.
"""

import base64
import io
from typing import Dict, List

import numpy as np

from transforms.modalities.image import features as image_features
from transforms.modalities.image import preprocessing
from transforms.modalities.image import encoding
from transforms.modalities.image import processing
from transforms.modalities.image import signatures
from transforms.output import manifest as manifest_lib
from transforms.validation import dataset_checks as dataset_checks_lib
from transforms.validation import html_report
from transforms.validation import entries
from transforms.validation import report as report_lib

# Features whose statistics are kept per channel here (the picture), or
# not at all (its near-duplicate signature), not as a whole.
_OWN_STATS = frozenset({image_features.IMAGE, image_features.NEAR_SIGNATURE})
# Sample images in the report are thumbnails at most this wide and high.
THUMBNAIL = 64
# Tolerance between the manifest's normalization statistics and the ones
# recomputed from the stored (JPEG-compressed) training images.
STATS_TOLERANCE = 0.02


def channel_names(channels: int) -> List[str]:
  """The statistics' names of an image's channels."""
  return ['grey'] if channels == 1 else ['red', 'green', 'blue'][:channels]


# ------------------------------------------------------------ records --


def check_values(values: Dict[str, list], manifest: dict, out: dict,
                 stats) -> None:
  """Checks a record's image and adds its statistics.

  Float32 images must be finite and within the range the normalization
  can give. Encoded images must decode to the manifest's shape; their
  pixels go into `out` ('image', 'pixels' and the per-channel sums the
  statistics check adds up). An image of one colour all over is flagged
  'blank' in `out['flags']`.

  Args:
    values: Feature name -> the record's values.
    manifest: The dataset's manifest.
    out: The record's summary, completed here.
    stats: The shard's FeatureStats, or None.

  Raises:
    ValueError: The image is wrong; the message says how.
  """
  if manifest['image']['storage'] == 'float32':
    _check_float32(values, manifest, out, stats)
  else:
    _check_encoded(values, manifest, out, stats)


def _check_float32(values: Dict[str, list], manifest: dict, out: dict,
                   stats) -> None:
  """A normalized float32 image: finite and in the plausible range."""
  img = manifest['image']
  h, w, c = img['height'], img['width'], img['channels']
  norm = manifest['normalization']
  arr = np.asarray(values[image_features.IMAGE], np.float32)
  if not np.all(np.isfinite(arr)):
    raise ValueError('image has NaN or infinite values')
  low, high = preprocessing.plausible_range(norm['method'], norm)
  if arr.min() < low or arr.max() > high:
    raise ValueError(f'image values [{arr.min():.3f}, {arr.max():.3f}] '
                     f'are outside the plausible range [{low:.3f}, '
                     f'{high:.3f}] for {norm["method"]} normalization')
  pixels = arr.reshape(h * w, c)
  if _one_colour(_content(arr.reshape(h, w, c), values, manifest)):
    out['flags'] = ('blank',)
  if stats is not None:
    dataset_checks_lib.add_record_stats(stats, values, manifest, _OWN_STATS)
    stats.add_channels('image', pixels, channel_names(c))


def _check_encoded(values: Dict[str, list], manifest: dict, out: dict,
                   stats) -> None:
  """An encoded (or raw uint8) image: decodes to the manifest's shape."""
  img = manifest['image']
  h, w, c = img['height'], img['width'], img['channels']
  arr = encoding.decode_stored(values[image_features.IMAGE][0],
                               img['storage'], h, w, c)
  # Channel-major and contiguous: per-channel reductions over rows of an
  # [h * w, c] array are some 20 times slower.
  channels = np.ascontiguousarray(arr.reshape(-1, c).T)
  wide = channels.astype(np.float64)
  sums = wide.sum(axis=1)
  squares = np.einsum('ij,ij->i', wide, wide)
  out['channel_sum'] = sums.tolist()
  out['channel_sum_squares'] = squares.tolist()
  out['pixels'] = h * w
  out['image'] = arr
  # What near-duplicates are found by (core/near_duplicates.py): the
  # signature the run grouped the picture by. A JPEG-stored picture
  # carries it (features.NEAR_SIGNATURE: JPEG's noise moves a drawing's
  # pHash); other storages give back the pixels the run signed.
  recorded = values.get(image_features.NEAR_SIGNATURE)
  if recorded:
    if len(recorded[0]) != signatures.SIGNATURE_BYTES:
      raise ValueError(f'{image_features.NEAR_SIGNATURE} has '
                       f'{len(recorded[0])} bytes, not '
                       f'{signatures.SIGNATURE_BYTES}')
    out['signature'] = recorded[0]
  else:
    out['signature'] = signatures.signature_of_pixels(arr[..., 0] if c == 1
                                                      else arr)
  low, high = channels.min(axis=1), channels.max(axis=1)
  if np.all(low == high) or (
      manifest['image'].get('resize_mode') == 'fit' and
      _one_colour(_content(arr, values, manifest))):
    out['flags'] = ('blank',)
  if stats is not None:
    dataset_checks_lib.add_record_stats(stats, values, manifest, _OWN_STATS)
    stats.add_channel_sums('image', channel_names(c), h * w, low, high, sums,
                           squares)


# Pixels of a stored JPEG next to the black bars of 'fit' that the bars'
# edge may have changed (a 4:2:0 chroma block of 16 and its upsampling).
JPEG_EDGE = 24


def _one_colour(arr: np.ndarray) -> bool:
  """Every pixel of an [h, w, c] array (with at least one) is one colour.

  A few pixels are compared first, which settles it for almost every
  image in microseconds; only an image they agree on is compared whole.
  """
  if not arr.size:
    return False
  h, w = arr.shape[:2]
  first = arr[0, 0]
  for y, x in ((h // 2, w // 2), (h - 1, w - 1), (0, w - 1), (h - 1, 0)):
    if not np.array_equal(arr[y, x], first):
      return False
  return bool(np.all(arr == first))


def _content(arr: np.ndarray, values: Dict[str, list], manifest: dict
             ) -> np.ndarray:
  """The part of a stored [h, w, c] image that shows the input: without
  the black bars --resize_mode fit adds to an input of another aspect
  ratio (placed as resize.resize_pixels places them, from the record's
  original size), and, for JPEG storage, without the pixels next to them
  that compression blurred into the bars."""
  img = manifest['image']
  if img.get('resize_mode') != 'fit':
    return arr
  height, width = img['height'], img['width']
  orig_h = values[image_features.ORIGINAL_HEIGHT][0]
  orig_w = values[image_features.ORIGINAL_WIDTH][0]
  if orig_h < 1 or orig_w < 1:
    return arr
  scale = min(width / orig_w, height / orig_h)
  new_w = max(1, min(width, round(orig_w * scale)))
  new_h = max(1, min(height, round(orig_h * scale)))
  left, top = (width - new_w) // 2, (height - new_h) // 2
  box = arr[top:top + new_h, left:left + new_w]
  if img['storage'] == 'jpeg':
    dy = JPEG_EDGE if new_h < height else 0
    dx = JPEG_EDGE if new_w < width else 0
    inner = box[dy:new_h - dy, dx:new_w - dx]
    if inner.size:
      return inner
  return box


# ------------------------------------------------------------ dataset --


def dataset_checks(manifest: dict, by_split: Dict[str, List[dict]]
                   ) -> List[dict]:
  """Every input became an example or a dead letter; no stored image is
  blank (a warning); zscore statistics reproduce from the stored training
  images.

  Args:
    manifest: The manifest.
    by_split: Split -> its shards' check_shard results.

  Returns:
    The check entries, each {'check', 'status', 'detail'}.
  """
  return (report_lib.examples_add_up(manifest) +
          _blank_images(by_split) +
          _statistics_reproduce(manifest, by_split))


def _blank_images(by_split: Dict[str, List[dict]]) -> List[dict]:
  """A warning when stored images are one colour all over (all pixels
  equal, the black bars of --resize_mode fit aside): an empty scan, a
  fully transparent file, a placeholder."""
  results = [r for split in by_split.values() for r in split]
  records = sum(r['records'] for r in results)
  per_split = {split: report_lib.flagged(rs, 'blank')[0]
               for split, rs in sorted(by_split.items())}
  count, ids = report_lib.flagged(results, 'blank')
  if not count:
    return [entries.entry('no blank images', True,
                             f'none of the {records} stored images is one '
                             'colour all over')]
  where = ', '.join(f'{split} {n}' for split, n in per_split.items() if n)
  return [entries.entry(
      'no blank images', False,
      f'{count} of the {records} stored images are one colour all over '
      f'({where}), e.g. {", ".join(ids)}', problem='warn')]


def _statistics_reproduce(manifest: dict, by_split: Dict[str, List[dict]]
                          ) -> List[dict]:
  """The zscore mean and std recomputed from the decoded training images
  match the manifest's (when train was not oversampled or undersampled,
  which would change them)."""
  norm = manifest['normalization']
  train = [r for r in by_split.get('train', []) if r['pixels']]
  train_info = manifest['splits'].get('train', {})
  if not (norm['method'] == 'zscore' and norm.get('mean') and train and
          train_info.get('rebalance') in ('none', 'weight')):
    return []
  pixels = sum(r['pixels'] for r in train)
  sums = np.sum([r['channel_sum'] for r in train], axis=0)
  squares = np.sum([r['channel_sum_squares'] for r in train], axis=0)
  mean, std = processing.zscore_from_sums(sums, squares, pixels)
  diff = max(np.max(np.abs(mean - norm['mean'])),
             np.max(np.abs(std - norm['std'])))
  return [entries.entry(
      'normalization statistics reproduce', diff <= STATS_TOLERANCE,
      f'mean {np.round(mean, 4).tolist()} std {np.round(std, 4).tolist()} '
      'recomputed from the stored train images; largest difference from '
      f'the manifest {diff:.4f} (tolerance {STATS_TOLERANCE})')]


# ------------------------------------------------------------- report --


def report_sample(info: dict, manifest: dict) -> dict:
  """A sample of the record `info` summarizes: its id and, when it was
  decoded (not float32 storage), a JPEG thumbnail in base64."""
  if info.get('image') is None:
    return {'id': info['id']}
  img = manifest['image']
  arr = np.asarray(info['image']).reshape(img['height'], img['width'],
                                          img['channels'])
  return {'id': info['id'], 'jpeg_base64': _thumbnail(arr)}


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


def html_sections(report: dict, manifest) -> str:
  """The report's grid of sample images per class (of the train split, or
  of the first split without one)."""
  del manifest
  e = html_report.escape
  split, samples = html_report.sample_split(report)
  rows = []
  for label, items in samples.items():
    figs = ''.join(
        f'<figure><img alt="{e(x["id"])}" width="64" '
        f'src="data:image/jpeg;base64,{x["jpeg_base64"]}">'
        f'<figcaption>{e(x["id"].rsplit("/", 1)[-1])}</figcaption>'
        '</figure>' for x in items if 'jpeg_base64' in x)
    rows.append(f'<h3>{e(label)}</h3><div class="grid">{figs}</div>')
  samples_html = (f'<h2>Sample images per class ({e(split)})</h2>' +
                  ''.join(rows) if rows else '')
  return samples_html + _near_duplicate_html(report)


# Near-duplicate groups shown as pictures in the HTML report.
GROUPS_SHOWN = 5


def compares_near_duplicates(manifest: dict) -> bool:
  """Whether validation decodes the dataset's pictures to find their
  near-duplicates again (images stored encoded or as uint8; float32 ones
  are normalized, and not compared)."""
  return (manifest.get('image') or {}).get('storage') != 'float32'


def near_duplicate_report(near: dict, output: str, manifest: dict) -> dict:
  """The near-duplicate findings with a thumbnail ('jpeg_base64') of each
  member of the first GROUPS_SHOWN listed groups, read back from their
  shards (only those records are decoded)."""
  from transforms.output import tfrecord_files  # pylint: disable=import-outside-toplevel
  from transforms.validation import shard_checks  # pylint: disable=import-outside-toplevel
  wanted: Dict[str, set] = {}
  for group in near['listed_groups'][:GROUPS_SHOWN]:
    for m in group['members']:
      wanted.setdefault(m['file'], set()).add(m['record'])
  pictures = {}
  for name, numbers in sorted(wanted.items()):
    stream = tfrecord_files.open_records(manifest_lib.join(output, name),
                                         manifest.get('compression') == 'gzip')
    try:
      for number, record in enumerate(tfrecord_files.iter_records(stream)):
        if number in numbers:
          info = shard_checks.check_record(record, manifest)
          pictures[(name, number)] = report_sample(info, manifest).get(
              'jpeg_base64')
        if number >= max(numbers):
          break
    finally:
      stream.close()
  groups = []
  for i, group in enumerate(near['listed_groups']):
    members = [dict(m, jpeg_base64=pictures.get((m['file'], m['record'])))
               if i < GROUPS_SHOWN else m for m in group['members']]
    groups.append({**group, 'members': members})
  return {**near, 'listed_groups': groups}


def _near_duplicate_html(report: dict) -> str:
  """The first near-duplicate groups, side by side, with split and label
  under each picture."""
  e = html_report.escape
  near = (report.get('content') or {}).get('near_duplicates')
  if not near or not near['listed_groups']:
    return ''
  rows = []
  for group in near['listed_groups'][:GROUPS_SHOWN]:
    figs = ''.join(
        f'<figure><img alt="{e(m["id"])}" width="64" '
        f'src="data:image/jpeg;base64,{m["jpeg_base64"]}">'
        f'<figcaption>{e(m["id"].rsplit("/", 1)[-1])}<br>{e(m["split"])}, '
        f'{e(m["label"])}</figcaption></figure>'
        for m in group['members'] if m.get('jpeg_base64'))
    rows.append(f'<div class="grid">{figs}</div>')
  return (f'<h2>Near-duplicate groups ({near["groups"]}; the first '
          f'{len(rows)})</h2>' + ''.join(rows))


# ------------------------------------------------------------- reading --


def check_transform(output: str, manifest: dict) -> dict:
  """Feeds the exported transform two flat images and checks what it does.

  A black and a white image go through the transform; their outputs must
  have the stored shape, and for 'zscore' they recover the mean and std the
  manifest records ((0 - mean) / std and (1 - mean) / std).

  Returns:
    {'ok': bool, 'detail': str}.
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel
  img = manifest['image']
  h, w, c = img['height'], img['width'], img['channels']
  stored = 'uint8' if img['storage'] == 'float32' else img['storage']
  inputs = [_flat_image(value, h, w, c, stored) for value in (0, 255)]
  try:
    layer = tft.TFTransformOutput(
        manifest_lib.transform_path(output, manifest)
    ).transform_features_layer()
    out = layer({image_features.IMAGE: tf.constant(inputs)})[
        image_features.IMAGE].numpy()
  except Exception as e:  # pylint: disable=broad-except
    return {'ok': False, 'detail': f'the transform does not load or run: '
                                   f'{type(e).__name__}: {e}'}
  if out.shape != (2, h, w, c):
    return {'ok': False, 'detail': f'transform output shape {out.shape}, '
                                   f'expected {(2, h, w, c)}'}
  black = out[0].reshape(-1, c).mean(axis=0).astype(np.float64)
  white = out[1].reshape(-1, c).mean(axis=0).astype(np.float64)
  return _compare_flat(black, white, manifest['normalization'])


def _flat_image(value: int, h: int, w: int, c: int, stored: str) -> bytes:
  """An image of one grey `value`, stored as `stored` stores it."""
  from PIL import Image  # pylint: disable=import-outside-toplevel
  arr = np.full((h, w, c), value, np.uint8)
  if stored == 'uint8':
    return arr.tobytes()
  buf = io.BytesIO()
  pil = Image.fromarray(arr[:, :, 0] if c == 1 else arr)
  pil.save(buf, format='JPEG' if stored == 'jpeg' else 'PNG', quality=95)
  return buf.getvalue()


def _compare_flat(black: np.ndarray, white: np.ndarray, norm: dict) -> dict:
  """What the transform made of black and white, against what the
  normalization should make of them."""
  method = norm['method']
  if method == 'zscore':
    std = 1.0 / (white - black)
    mean = -black * std
    diff = max(np.max(np.abs(mean - norm['mean'])),
               np.max(np.abs(std - norm['std'])))
    return {'ok': bool(diff < 1e-3),
            'detail': f'transform normalizes with mean '
                      f'{np.round(mean, 4).tolist()} std '
                      f'{np.round(std, 4).tolist()}; largest difference from '
                      f'the manifest {diff:.2e}'}
  expected = (0.0, 1.0) if method == 'scale' else (0.0, 255.0)
  ok = (np.allclose(black, expected[0], atol=1e-3) and
        np.allclose(white, expected[1], atol=1e-3))
  return {'ok': bool(ok), 'detail': f'black -> {black.round(4).tolist()}, '
                                    f'white -> {white.round(4).tolist()} '
                                    f'({method}, expected {expected})'}


def supervised_feature(manifest: dict) -> str:
  """The image."""
  del manifest
  return image_features.IMAGE


def read_transform(output: str, manifest: dict):
  """Applies the exported transform to the stored image when the dataset
  is normalized at read time (encoded storage), else None.

  Returns:
    A function of a batch of parsed features that replaces 'image' with
    the normalized float32 [batch, height, width, channels], or None.
  """
  if manifest['normalization']['applied'] != 'at_read':
    return None
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel
  layer = tft.TFTransformOutput(
      manifest_lib.transform_path(output, manifest)
  ).transform_features_layer()
  image = manifest['image']
  h, w, c = image['height'], image['width'], image['channels']

  def transform(features):
    out = dict(features)
    out[image_features.IMAGE] = tf.ensure_shape(
        layer({image_features.IMAGE: features[image_features.IMAGE]})[
            image_features.IMAGE],
        [None, h, w, c])
    return out

  return transform
