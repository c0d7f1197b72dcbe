"""Reading a published dataset in a training job.

    from pipelines.reader import load_dataset

    train = load_dataset('gs://bucket/dataset', 'train', batch_size=64)
    for batch in train.take(1):
        batch['image']   # float32 [64, 224, 224, 3], normalized as analyzed
        batch['label']   # int64 [64]

    model.fit(load_dataset(out, 'train', 64, as_supervised=True), ...)

The reader parses records with the manifest's feature spec and applies the
exported tf.Transform graph (`transform_fn/`) to the stored image, so
training normalizes exactly as the analysis did. Shards are interleaved with
at most `max_open_files` open at once, and batches are prefetched.
"""

from typing import Optional

from transforms.output import manifest as manifest_lib
from transforms.core import features as schema


class DatasetError(ValueError):
  """The folder is not a published dataset, or the split does not exist."""


def load_manifest(output: str) -> dict:
  """The manifest of a published dataset.

  Raises:
    DatasetError: No manifest (not a dataset, or an unfinished run), or a
      manifest that does not parse.
  """
  path = manifest_lib.join(output, manifest_lib.MANIFEST)
  try:
    manifest = manifest_lib.read_manifest(output)
  except ValueError as e:
    raise DatasetError(f'the manifest {path} does not parse: {e}') from None
  if manifest is None:
    raise DatasetError(f'{output} is not a published dataset (it has no '
                       f'{manifest_lib.MANIFEST}; an unfinished run never '
                       'writes one)')
  problem = _manifest_problem(manifest)
  if problem:
    raise DatasetError(f'the manifest {path} is not a dataset manifest: '
                       f'{problem}')
  return manifest


# What every reader of a manifest relies on: key -> type.
_MANIFEST_KEYS = {'feature_spec': dict, 'labels': list, 'splits': dict,
                  'totals': dict, 'normalization': dict}
_SPLIT_KEYS = {'records': int, 'class_counts': dict, 'fingerprint': str,
               'shards': list}
_SHARD_KEYS = {'file': str, 'records': int, 'sha256': str}


def _manifest_problem(manifest) -> Optional[str]:
  """What is missing or malformed in a parsed manifest, or None."""
  if not isinstance(manifest, dict):
    return f'it holds a JSON {type(manifest).__name__}, not an object'
  for key, kind in _MANIFEST_KEYS.items():
    if not isinstance(manifest.get(key), kind):
      return f'"{key}" is missing or not a JSON {kind.__name__}'
  for name, split in manifest['splits'].items():
    if not isinstance(split, dict):
      return f'split "{name}" is not a JSON object'
    for key, kind in _SPLIT_KEYS.items():
      if not isinstance(split.get(key), kind):
        return f'split "{name}" has no valid "{key}"'
    for i, shard in enumerate(split['shards']):
      if not isinstance(shard, dict) or not all(
          isinstance(shard.get(k), t) for k, t in _SHARD_KEYS.items()):
        return (f'shard {i} of split "{name}" needs "file", "records" and '
                '"sha256"')
  return None


def shard_paths(output: str, manifest: dict, split: str):
  if split not in manifest['splits']:
    raise DatasetError(f'split {split!r} is not in the dataset (splits: '
                       f'{", ".join(manifest["splits"])})')
  return [manifest_lib.join(output, s['file'])
          for s in manifest['splits'][split]['shards']]


def load_dataset(output: str, split: str, batch_size: int = 32,
                 shuffle: bool = True, shuffle_buffer: int = 1024,
                 seed: Optional[int] = None, max_open_files: int = 16,
                 as_supervised: bool = False, repeat: bool = False,
                 drop_remainder: bool = False, apply_transform: bool = True):
  """A batched `tf.data.Dataset` of one split.

  Args:
    output: The dataset folder (local or gs://).
    split: 'train', 'validation', 'test' (or another split in the manifest).
    batch_size: Examples per batch.
    shuffle: Shuffle shard order and examples (buffer of `shuffle_buffer`).
    shuffle_buffer: Examples held for shuffling.
    seed: Shuffle seed (None: different every epoch).
    max_open_files: Shards read at the same time (bounds open files).
    as_supervised: Yield (image, label) tuples instead of feature dicts.
    repeat: Repeat forever.
    drop_remainder: Drop a last batch smaller than batch_size.
    apply_transform: Apply the exported tf.Transform normalization (the
      stored image is returned as stored when False).

  Returns:
    A tf.data.Dataset of dicts with the manifest's features ('image' decoded
    to [batch, height, width, channels] and normalized), or of
    (image, label) tuples.

  Raises:
    DatasetError: Not a dataset, or an unknown split.
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  manifest = load_manifest(output)
  files = shard_paths(output, manifest, split)
  spec = schema.to_tf_feature_spec(manifest['feature_spec'])
  compression = 'GZIP' if manifest.get('compression') == 'gzip' else ''
  # Sensor values and text ids are stored transformed; images may need the
  # transform.
  key = {'sensor': 'values', 'text': 'token_ids'}.get(
      manifest.get('modality'), schema.IMAGE)
  transform_at_read = (manifest['normalization']['applied'] == 'at_read')

  ds = tf.data.Dataset.from_tensor_slices(tf.constant(files, tf.string))
  if shuffle:
    ds = ds.shuffle(max(1, len(files)), seed=seed,
                    reshuffle_each_iteration=True)
  ds = ds.interleave(
      lambda f: tf.data.TFRecordDataset(f, compression_type=compression),
      cycle_length=max(1, min(max_open_files, len(files))), block_length=1,
      num_parallel_calls=tf.data.AUTOTUNE, deterministic=not shuffle)
  if shuffle:
    ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
  if repeat:
    ds = ds.repeat()
  ds = ds.batch(batch_size, drop_remainder=drop_remainder)
  ds = ds.map(lambda records: tf.io.parse_example(records, spec),
              num_parallel_calls=tf.data.AUTOTUNE, deterministic=not shuffle)
  if apply_transform and transform_at_read:
    import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel
    layer = tft.TFTransformOutput(output).transform_features_layer()
    image = manifest['image']
    h, w, c = image['height'], image['width'], image['channels']

    def transform(features):
      out = dict(features)
      out[schema.IMAGE] = tf.ensure_shape(
          layer({schema.IMAGE: features[schema.IMAGE]})[schema.IMAGE],
          [None, h, w, c])
      return out

    ds = ds.map(transform, num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=not shuffle)
  if as_supervised:
    if key == 'token_ids' and key not in manifest['feature_spec']:
      # bag-of-words / tf-idf: the term ids and weights (sparse).
      ds = ds.map(lambda f: ({k: f[k] for k in ('term_ids', 'term_weights')},
                             f[schema.LABEL]))
    else:
      ds = ds.map(lambda f: (f[key], f[schema.LABEL]))
  return ds.prefetch(tf.data.AUTOTUNE)


def check_transform(output: str, manifest: dict) -> dict:
  """Checks the exported transform against the manifest (see below)."""
  if manifest.get('modality') == 'sensor':
    return check_sensor_transform(output, manifest)
  if manifest.get('modality') == 'text':
    return check_text_transform(output, manifest)
  return check_image_transform(output, manifest)


def check_text_transform(output: str, manifest: dict) -> dict:
  """Feeds the exported transform two probe documents.

  One holds a single token that is in no vocabulary: with unigrams it must
  count as one unknown token and get the first OOV id (or be dropped
  without OOV buckets), followed by padding. The other holds the
  vocabulary's first three single-word tokens: they must get ids 1, 2, 3
  (0 is padding) in that order, or be among the term ids for bag-of-words
  and tf-idf. The vocabulary file must have the manifest's size.

  Returns:
    {'ok': bool, 'detail': str}.
  """
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel
  from transforms.modalities.text import preprocessing as tt  # pylint: disable=import-outside-toplevel
  text = manifest['text']
  vocab = text['vocabulary']
  try:
    out = tft.TFTransformOutput(output)
    tokens = out.vocabulary_by_name(tt.TOKENS_VOCABULARY)
    layer = out.transform_features_layer()
  except Exception as e:  # pylint: disable=broad-except
    return {'ok': False, 'detail': f'the transform does not load: '
                                   f'{type(e).__name__}: {e}'}
  if len(tokens) != vocab['size']:
    return {'ok': False, 'detail': f'the vocabulary file has {len(tokens)} '
                                   f'tokens, the manifest says '
                                   f'{vocab["size"]}'}
  unigrams = text['ngrams'][0] == 1
  known = [t.decode('utf-8') for t in tokens[:3]
           if b' ' not in t and (not text['lowercase'] or t.lower() == t)]
  known = known if unigrams and len(known) == min(3, len(tokens)) else []
  unknown = 'qq' + 'x' * 40 + 'notatoken'
  try:
    result = layer(tt.transform_inputs([unknown, ' '.join(known)]))
  except Exception as e:  # pylint: disable=broad-except
    return {'ok': False, 'detail': f'the transform does not run: '
                                   f'{type(e).__name__}: {e}'}
  problems = []
  oov = result[tt.OOV_TOKENS].numpy().tolist()
  if oov[0] != (1 if unigrams else 0):
    problems.append(f'an unknown word counted {oov[0]} unknown tokens')
  first_oov, buckets = vocab['size'] + 1, vocab['oov_buckets']
  expected = list(range(1, len(known) + 1))
  if text['output'] == 'ids':
    ids = np.asarray(result[tt.TOKEN_IDS].numpy()).tolist()
    if len(ids[0]) != text['max_tokens']:
      problems.append(f'{len(ids[0])} ids per document, not '
                      f'{text["max_tokens"]}')
    if unigrams and buckets and not first_oov <= ids[0][0] < (
        first_oov + buckets):
      problems.append(f'the unknown word got id {ids[0][0]}, not an OOV id '
                      f'from {first_oov}')
    if any(ids[0][1 if unigrams and buckets else 0:]):
      problems.append('no padding after the unknown word')
    if ids[1][:len(known)] != expected:
      problems.append(f'{known} got ids {ids[1][:len(known)]}, not '
                      f'{expected}')
    detail = f'unknown word -> {ids[0][:2]}, {known} -> {ids[1][:4]}'
  else:
    terms = tf.sparse.to_dense(result[tt.TERM_IDS]).numpy()
    weights = tf.sparse.to_dense(result[tt.TERM_WEIGHTS]).numpy()
    got = set(terms[1][weights[1] > 0].tolist())
    if not set(expected) <= got:
      problems.append(f'{known} did not give term ids {expected} ({sorted(got)})')
    detail = f'{known} -> term ids {sorted(got)}'
  if problems:
    return {'ok': False, 'detail': '; '.join(problems)}
  return {'ok': True, 'detail': f'vocabulary of {len(tokens)} tokens; '
                                f'{detail}'}


def check_sensor_transform(output: str, manifest: dict) -> dict:
  """Feeds the exported transform probe values built from the manifest's
  training statistics and checks what comes out.

  zscore: mean -> 0 and mean + std -> 1; minmax: min -> 0 and max -> 1;
  none: unchanged. With --missing impute, NaN -> what the mean becomes.

  Returns:
    {'ok': bool, 'detail': str}.
  """
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel
  sensor, norm = manifest['sensor'], manifest['normalization']
  stats = norm.get('per_channel') or {}
  channels = sensor['channels']
  if not stats:
    return {'ok': False, 'detail': 'the manifest has no training statistics'}
  col = lambda k: np.array([stats[c][k] for c in channels], np.float64)
  method = norm['method']
  if method == 'zscore':
    mean, std = col('mean'), col('std')
    probes = [mean, mean + np.where(std > 0, std, 1.0)]
    expected = [np.zeros(len(channels)), np.ones(len(channels))]
  elif method == 'minmax':
    low, high = col('min'), col('max')
    probes = [low, np.where(high > low, high, low + 1.0)]
    expected = [np.zeros(len(channels)), np.ones(len(channels))]
  else:
    probes = [col('mean'), col('mean') + 1.0]
    expected = list(probes)
  if sensor['missing'] == 'impute':
    probes.append(np.full(len(channels), np.nan))
    mean = col('mean')
    if method == 'zscore':
      expected.append(np.zeros(len(channels)))
    elif method == 'minmax':
      span = col('max') - col('min')
      expected.append((mean - col('min')) / np.where(span > 0, span, 1.0))
    else:
      expected.append(mean)
  shape = [len(probes)] + sensor['value_shape']
  # Every row of a window gets the probe (rows mode: the probe itself).
  batch = np.stack([np.broadcast_to(p, sensor['value_shape'])
                    for p in probes]).astype(np.float32)
  try:
    layer = tft.TFTransformOutput(output).transform_features_layer()
    out = layer({'values': tf.constant(batch)})['values'].numpy()
  except Exception as e:  # pylint: disable=broad-except
    return {'ok': False, 'detail': f'the transform does not load or run: '
                                   f'{type(e).__name__}: {e}'}
  if list(out.shape) != shape:
    return {'ok': False, 'detail': f'transform output shape '
                                   f'{list(out.shape)}, expected {shape}'}
  want = np.stack([np.broadcast_to(e, sensor['value_shape'])
                   for e in expected])
  # The transform reads float32: allow a few float32 steps of the probe,
  # measured in units of the scale it is divided by.
  if method == 'zscore':
    denom = col('std')
  elif method == 'minmax':
    denom = col('max') - col('min')
  else:
    denom = np.ones(len(channels))
  denom = np.where(denom > 0, denom, 1.0)
  tol = 1e-3 + 4 * np.finfo(np.float32).eps * np.nan_to_num(
      np.abs(batch)) / np.broadcast_to(denom, batch.shape)
  diff = np.abs(out - want) - tol
  worst = float(np.max(diff))
  return {'ok': bool(worst < 1e-3),
          'detail': f'{method} transform of probes built from the '
                    f'manifest\'s statistics; largest difference from the '
                    f'expected output {max(worst, 0.0):.2e}'}


def check_image_transform(output: str, manifest: dict) -> dict:
  """Feeds the exported transform two flat images and checks what it does.

  A black and a white image go through the transform; their outputs must
  have the stored shape, and for 'zscore' they recover the mean and std the
  manifest records ((0 - mean) / std and (1 - mean) / std).

  Returns:
    {'ok': bool, 'detail': str}.
  """
  import io  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel
  from PIL import Image  # pylint: disable=import-outside-toplevel
  img = manifest['image']
  h, w, c = img['height'], img['width'], img['channels']
  stored = 'uint8' if img['storage'] == 'float32' else img['storage']
  norm = manifest['normalization']
  inputs = []
  for value in (0, 255):
    arr = np.full((h, w, c), value, np.uint8)
    if stored == 'uint8':
      inputs.append(arr.tobytes())
    else:
      buf = io.BytesIO()
      pil = Image.fromarray(arr[:, :, 0] if c == 1 else arr)
      pil.save(buf, format='JPEG' if stored == 'jpeg' else 'PNG', quality=95)
      inputs.append(buf.getvalue())
  try:
    layer = tft.TFTransformOutput(output).transform_features_layer()
    out = layer({schema.IMAGE: tf.constant(inputs)})[schema.IMAGE].numpy()
  except Exception as e:  # pylint: disable=broad-except
    return {'ok': False, 'detail': f'the transform does not load or run: '
                                   f'{type(e).__name__}: {e}'}
  if out.shape != (2, h, w, c):
    return {'ok': False, 'detail': f'transform output shape {out.shape}, '
                                   f'expected {(2, h, w, c)}'}
  black = out[0].reshape(-1, c).mean(axis=0).astype(np.float64)
  white = out[1].reshape(-1, c).mean(axis=0).astype(np.float64)
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
