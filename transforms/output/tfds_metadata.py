"""The files TensorFlow Datasets needs to read a published dataset.

With them, `tfds.builder_from_directory(OUT).as_dataset(split='train')`
reads our shards as they are: `dataset_info.json` (name, version, file
format and, per split, the shard lengths and bytes; TFDS finds the shards
by the file name template `<run folder>/{DATASET}-{SPLIT}.{FILEFORMAT}-
{SHARD_X_OF_Y}`: TFDS's default, which is how output/shards.py names
them, inside the run folder the manifest names),
`features.json` (how each feature of our tf.train.Examples is parsed and
decoded) and `label.labels.txt` (the class names).

The files are built with tensorflow_datasets' own classes
(`tfds.core.DatasetInfo`, `FeaturesDict`, `SplitDict`; about 0.3 s with the
import) by `FinalizeDataset`, once per run, into the run folder's `tfds/`;
publishing copies them beside the manifest right after writing it (see
output/manifest.py). TFDS reads uncompressed TFRecords only, so gzip-compressed
datasets get none of these files.

How the manifest's feature spec becomes TFDS features:

  label (int64)                  ClassLabel(names=manifest['labels'])
  image, jpeg/png storage        Image(shape=(h, w, c)): decoded by TFDS
  image, uint8 storage           Tensor((h, w, c), uint8) from raw bytes
  other strings (id, ...)        Text()
  numbers of a fixed shape       Tensor(shape, int64/float32)
  numbers of variable length     Tensor((None,), int64/float32)

What TFDS yields is the record as stored: images are not normalized (the
exported tf.Transform graph in `transform_fn/` does that, as
`pipelines.reader.load_dataset` does).
"""

import re
from typing import List, Optional, Tuple

from transforms import modalities

DATASET_INFO = 'dataset_info.json'
FEATURES = 'features.json'
LABELS_SUFFIX = '.labels.txt'
# Every file TFDS metadata may consist of, as patterns (for removal).
PATTERNS = (DATASET_INFO, FEATURES, '*' + LABELS_SUFFIX)
VERSION = '1.0.0'
FILE_FORMAT = 'tfrecord'
MODES = ('auto', 'on', 'off')

# TFDS's naming rules (tensorflow_datasets.core.naming): a dataset name is
# a letter then word characters; split names are word characters and '-'.
_NAME = re.compile(r'^[A-Za-z]\w*$')
_SPLIT = re.compile(r'^[\w-]+$')


def unreadable_reason(name: str, split_names, compression: str,
                      num_shards: int = 0) -> Optional[str]:
  """Why TFDS could not read a dataset like this (None when it can).

  Args:
    name: The dataset name (shard file name prefix).
    split_names: The split names.
    compression: 'none' or 'gzip'.
    num_shards: Shards per split (0: the runner decides).

  Returns:
    A clause such as 'TFDS cannot read gzip-compressed TFRecords', or None.
  """
  if compression == 'gzip':
    return 'TFDS cannot read gzip-compressed TFRecords'
  if not _NAME.match(name):
    return (f'TFDS needs a dataset name of a letter followed by letters, '
            f'digits or "_" (--name is {name!r})')
  bad = [s for s in split_names if not _SPLIT.match(s)]
  if bad:
    return (f'TFDS split names hold only letters, digits, "_" and "-" '
            f'(got {", ".join(repr(s) for s in bad)})')
  if num_shards > 99999:
    # Ours are numbered -SSSSS-of-NNNNN with at least 5 digits, TFDS's
    # index has as many digits as the count.
    return f'TFDS numbers {num_shards} shards differently from Beam'
  return None


def _label_names_fit(names: List[str]) -> bool:
  """Whether TFDS's labels file keeps the names as they are: it holds one
  name per line and strips each line."""
  return bool(names) and all(
      n and n == n.strip() and '\n' not in n and '\r' not in n
      for n in names)


def features_of(manifest: dict):
  """The manifest's stored features as a `tfds.features.FeaturesDict`."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  f = tfds.features
  dtypes = {'int64': np.int64, 'float32': np.float32}
  labels = list(manifest['labels'])
  modality = modalities.of_manifest(manifest)
  out = {}
  for key, entry in manifest['feature_spec'].items():
    dtype, shape = entry['dtype'], entry['shape']
    own = modality.tfds_feature(key, entry, manifest)
    if own is not None:
      out[key] = own
    elif key == 'label' and dtype == 'int64' and shape == []:
      out[key] = (f.ClassLabel(names=labels) if _label_names_fit(labels)
                  else f.ClassLabel(num_classes=len(labels)))
    elif dtype == 'string':
      if shape != []:
        raise ValueError(f'feature {key!r}: only single strings are mapped '
                         f'to TFDS (shape {shape})')
      out[key] = f.Text()
    else:
      out[key] = f.Tensor(shape=(None,) if shape is None else tuple(shape),
                          dtype=dtypes[dtype])
  return f.FeaturesDict(out)


def supervised_keys(manifest: dict):
  """(input, label) keys for `as_supervised=True`, or None."""
  if 'label' not in manifest['feature_spec']:
    return None
  features = modalities.of_manifest(manifest).tfds_input_features(manifest)
  return None if features is None else (features, 'label')


def shard_template(name: str, split: str, data_dir: str = ''):
  """TFDS's file name template of a split's shards: TFDS's default, in
  the folder `data_dir` (relative to the TFDS files) when one is given."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  from tensorflow_datasets.core import naming  # pylint: disable=import-outside-toplevel
  template = naming.DEFAULT_FILENAME_TEMPLATE
  if data_dir:
    template = f'{data_dir}/{template}'
  return tfds.core.ShardedFileTemplate(
      data_dir='.', template=template, dataset_name=name, split=split,
      filetype_suffix=FILE_FORMAT)


def check_shard_names(manifest: dict) -> Optional[str]:
  """Whether the manifest's shard files are the files TFDS will look for
  (None), or which one is not."""
  for split, info in manifest['splits'].items():
    files = [s['file'] for s in info['shards']]
    template = shard_template(manifest['name'], split,
                              manifest.get('data_dir', ''))
    expected = [template.relative_filepath(shard_index=i,
                                           num_shards=len(files))
                for i in range(len(files))]
    if files != expected:
      return (f'the {split} split\'s shards are {files[:2]}..., TFDS would '
              f'look for {expected[:2]}...')
  return None


def dataset_info(manifest: dict, directory: str, data_dir: str = ''):
  """A `tfds.core.DatasetInfo` describing the published dataset, whose
  shards are in `data_dir` (relative to where the files are read from)."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  name = manifest['name']
  identity = tfds.core.DatasetIdentity(
      name=name, version=tfds.core.Version(VERSION), data_dir=directory,
      module_name='')
  info = tfds.core.DatasetInfo(
      builder=identity,
      description=(f'{manifest["modality"]} dataset written by '
                   f'tfrecord-pipelines (run {manifest["run_id"]}, '
                   f'fingerprint {manifest["fingerprint"]}); records as '
                   'stored, see manifest.json.'),
      features=features_of(manifest),
      supervised_keys=supervised_keys(manifest))
  info.set_file_format(FILE_FORMAT)
  splits = []
  for split, s in manifest['splits'].items():
    template = shard_template(name, split, data_dir).replace(
        data_dir=directory)
    splits.append(tfds.core.SplitInfo(
        name=split, shard_lengths=[x['records'] for x in s['shards']],
        num_bytes=sum(x['bytes'] for x in s['shards']),
        filename_template=template))
  info.set_splits(tfds.core.SplitDict(splits))
  return info


def write(manifest: dict, directory: str,
          data_dir: str = '') -> Tuple[List[str], float]:
  """Writes the TFDS metadata of `manifest`'s dataset into `directory`.

  Args:
    manifest: The dataset's manifest.
    directory: Where to write (a folder of the run folder; publishing
      copies the files beside the manifest).
    data_dir: The folder of the shards, relative to where the files will
      be read from (the run folder, seen from the output).

  Returns:
    (the file names written, relative to `directory`; seconds taken).

  Raises:
    ValueError: The shard names are not those TFDS looks for.
  """
  import time  # pylint: disable=import-outside-toplevel
  start = time.time()
  problem = check_shard_names(manifest)
  if problem:
    raise ValueError(problem)
  from etils import epath  # pylint: disable=import-outside-toplevel
  epath.Path(directory).mkdir(parents=True, exist_ok=True)
  dataset_info(manifest, directory, data_dir).write_to_directory(directory)
  candidates = [DATASET_INFO, FEATURES] + [
      key + LABELS_SUFFIX for key in manifest['feature_spec']]
  written = [n for n in candidates if (epath.Path(directory) / n).exists()]
  return written, time.time() - start

