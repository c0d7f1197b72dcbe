"""Reading a published dataset in a training job.

    from pipelines.reader import load_dataset

    train = load_dataset('gs://bucket/dataset', 'train', batch_size=64)
    for batch in train.take(1):
        batch['image']   # float32 [64, 224, 224, 3], normalized as analyzed
        batch['label']   # int64 [64]

    model.fit(load_dataset(out, 'train', 64, as_supervised=True), ...)

The reader parses records with the manifest's feature spec and, where the
records are stored untransformed (encoded images), applies the exported
tf.Transform graph (`transform_fn/` in the run folder the manifest names,
see transform_dir), so training normalizes exactly as the analysis did; the modality that wrote the dataset says how (its
`read_transform` and `supervised_feature`). Shards are interleaved with
at most `max_open_files` open at once, and batches are prefetched.
"""

from typing import Optional

from transforms import modalities
from transforms.output import manifest as manifest_lib
from transforms.core import features


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


def transform_dir(output: str) -> str:
  """The folder of a published dataset's tf.Transform output (for
  `tft.TFTransformOutput(transform_dir(OUT))`): its run folder."""
  return manifest_lib.transform_path(output, load_manifest(output))


def shard_paths(output: str, manifest: dict, split: str):
  if split not in manifest['splits']:
    raise DatasetError(f'split {split!r} is not in the dataset (splits: '
                       f'{", ".join(manifest["splits"])})')
  return [manifest_lib.join(output, s['file'])
          for s in manifest['splits'][split]['shards']]


def verify_shards(output: str, manifest: dict, split: str) -> None:
  """Checks every shard of `split` against the manifest: there, complete
  (whole records), as many records and the same SHA-256.

  Raises:
    DatasetError: Naming the first shard that differs, and how.
  """
  from transforms.output import tfrecord_files  # pylint: disable=import-outside-toplevel
  compressed = manifest.get('compression') == 'gzip'
  for shard in manifest['splits'][split]['shards']:
    path = manifest_lib.join(output, shard['file'])
    try:
      found = tfrecord_files.shard_summary(path, compressed)
    except (OSError, ValueError) as e:  # missing, or cut inside a record
      raise DatasetError(f'the shard {path} cannot be read whole: '
                         f'{type(e).__name__}: {e}') from None
    if found['records'] != shard['records']:
      raise DatasetError(f'the shard {path} holds {found["records"]} '
                         f'records, the manifest says {shard["records"]}')
    if found['sha256'] != shard['sha256']:
      raise DatasetError(f'the shard {path} was changed or is corrupt: its '
                         'SHA-256 is not the manifest\'s')


def load_dataset(output: str, split: str, batch_size: int = 32,
                 shuffle: bool = True, shuffle_buffer: int = 1024,
                 seed: Optional[int] = None, max_open_files: int = 16,
                 as_supervised: bool = False, repeat: bool = False,
                 drop_remainder: bool = False, apply_transform: bool = True,
                 verify: bool = False):
  """A batched `tf.data.Dataset` of one split.

  Args:
    output: The dataset folder (local or gs://).
    split: 'train', 'validation', 'test' (or another split in the manifest).
    batch_size: Examples per batch.
    shuffle: Shuffle shard order and examples (buffer of `shuffle_buffer`).
    shuffle_buffer: Examples held for shuffling.
    seed: Shuffle seed (None: different every epoch).
    max_open_files: Shards read at the same time (bounds open files).
    as_supervised: Yield (input, label) tuples instead of feature dicts;
      the input is the image, the sensor values, the token ids, or the
      term ids and weights as a dict.
    repeat: Repeat forever.
    drop_remainder: Drop a last batch smaller than batch_size.
    apply_transform: Apply the exported tf.Transform normalization (the
      stored image is returned as stored when False).
    verify: First read every shard of the split once and check its
      SHA-256 and record count against the manifest, naming the shard that
      differs (TensorFlow's own error for a corrupt record, "corrupted
      record at <offset>", does not name the file). Costs one extra read of
      the split.

  Returns:
    A tf.data.Dataset of dicts with the manifest's features ('image' decoded
    to [batch, height, width, channels] and normalized), or of
    (image, label) tuples.

  Raises:
    DatasetError: Not a dataset, an unknown split, or (with `verify`) a
      shard that is missing, cut or changed.
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  manifest = load_manifest(output)
  files = shard_paths(output, manifest, split)
  if verify:
    verify_shards(output, manifest, split)
  spec = features.to_tf_feature_spec(manifest['feature_spec'])
  compression = 'GZIP' if manifest.get('compression') == 'gzip' else ''
  modality = modalities.of_manifest(manifest)

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
  if apply_transform:
    # Only what is stored untransformed (encoded images) needs it.
    transform = modality.read_transform(output, manifest)
    if transform is not None:
      ds = ds.map(transform, num_parallel_calls=tf.data.AUTOTUNE,
                  deterministic=not shuffle)
  if as_supervised:
    feature = modality.supervised_feature(manifest)
    pick = feature if callable(feature) else (lambda f: f[feature])
    ds = ds.map(lambda f: (pick(f), f[features.LABEL]))
  return ds.prefetch(tf.data.AUTOTUNE)


def check_transform(output: str, manifest: dict) -> dict:
  """Feeds the exported transform probes built from the manifest and
  checks what comes out (see the modality's check_transform).

  Returns:
    {'ok': bool, 'detail': str}.
  """
  return modalities.of_manifest(manifest).check_transform(output, manifest)
