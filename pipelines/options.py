"""Command-line options of the preprocessing job, and their checks.

`PreprocessOptions` is a Beam `PipelineOptions` subclass, so the same flags
work from the command line, from a Dataflow template and from tests; every
flag Beam knows (`--runner`, `--direct_num_workers`, ...) passes through.

`resolve_config` turns the flags into a checked, immutable `PreprocessConfig`
or raises `UsageError` with one sentence that says what to change.
"""

import dataclasses
import hashlib
import json
from typing import List, Optional, Tuple

from apache_beam.options.pipeline_options import PipelineOptions

from transforms.core.errors import UsageError

from transforms.modalities.image import processing as images
from transforms.modalities.image import preprocessing as normalize
from transforms.core import rebalance
from transforms.core import splits as split_lib
from transforms.modalities.text import preprocessing as text_transform
from transforms.output import tfds_metadata as tfds_lib
from transforms.modalities.sensor import windows

MODALITIES = ('image', 'text', 'sensor')
COMPRESSIONS = ('auto', 'none', 'gzip')
DEFAULT_SPLITS = 'train=0.8,validation=0.1,test=0.1'
SPLITS_FROM_INPUT = 'from_input'


class PreprocessOptions(PipelineOptions):
  """Options of `python -m pipelines.preprocess`."""

  @classmethod
  def _add_argparse_args(cls, parser):
    add = parser.add_argument
    add('--modality', default='image',
        help='Kind of input: image, text or sensor. Default: image.')
    add('--input', default=None,
        help='Input. Images: a folder of class folders '
        '(<input>/<label>/*.jpg), of split folders '
        '(<input>/train/<label>/*.jpg), or a manifest file '
        '(.csv/.tsv with path,label[,split] columns, or .jsonl). Text: a '
        'CSV/TSV/JSONL file or pattern, or a folder of class folders of '
        '.txt files. Sensor: a CSV/TSV/JSONL/Parquet file, folder or '
        'pattern. Local or any path Beam can open (gs://...). Required.')
    add('--output', default=None,
        help='Output folder for the dataset. Required.')
    add('--name', default=None,
        help='Dataset name, used in shard file names '
        '(<name>-<split>.tfrecord-00000-of-00004). Default: images or '
        'text or sensor (the modality).')
    add('--image_size', default='224x224',
        help='Target size WIDTHxHEIGHT, or one number for a square. '
        'Default: 224x224.')
    add('--resize_mode', default='fit',
        help='fit (keep aspect ratio, pad with black), crop (keep aspect '
        'ratio, cut the centre) or stretch. Default: fit.')
    add('--storage', default='jpeg',
        help='How images are stored: jpeg or png (encoded at the target '
        'size), uint8 (raw pixels) or float32 (normalized pixels). '
        'Default: jpeg.')
    add('--jpeg_quality', default='90',
        help='JPEG quality for --storage jpeg, 1-95. Default: 90.')
    add('--color', default='rgb',
        help='rgb (3 channels; grey, palette, CMYK, RGBA and 16-bit inputs '
        'are converted) or grey (1 channel). Default: rgb.')
    add('--normalization', default=None,
        help='zscore (per-channel mean/std from a tf.Transform full pass '
        'over the training split), scale (images: to [0, 1]), minmax '
        '(sensor: to [0, 1] by the training min/max) or none. Images: '
        'applied by the exported transform when reading (jpeg/png/uint8 '
        'storage) or stored (float32); sensor values are stored normalized. '
        'Default: zscore (none for text, which has no normalization).')
    add('--splits', default=DEFAULT_SPLITS,
        help='Split ratios such as train=0.8,validation=0.1,test=0.1 '
        '(assigned by a hash of each image\'s relative path), or from_input '
        'to take them from split folders or the manifest\'s split column. '
        f'Default: {DEFAULT_SPLITS}.')
    add('--rebalance', default='none',
        help='none, oversample, undersample or weight (a per-example '
        'weight feature instead of resampling). Default: none.')
    add('--rebalance_splits', default='train',
        help='Comma-separated splits to rebalance. Default: train.')
    add('--seed', default='42',
        help='Seed for rebalancing and shuffling. Default: 42.')
    add('--num_shards', default='0',
        help='Shards per split; 0 lets the runner decide. Default: 0.')
    add('--tfds_metadata', default='auto',
        help='Also write the files TensorFlow Datasets reads the dataset '
        'with (dataset_info.json, features.json, label names), so that '
        'tfds.builder_from_directory(OUT) loads it: auto (when the records '
        'are uncompressed; TFDS cannot read gzip TFRecords), on, or off. '
        'Default: auto.')
    add('--compression', default='auto',
        help='auto (none for jpeg/png, whose bytes do not compress; gzip for '
        'uint8/float32), none or gzip. Default: auto.')
    add('--index_files', default=False, action='store_true',
        help='Also write <shard>.idx beside every shard: the byte offset '
        'and length of each record (the format of DALI\'s tfrecord2idx), '
        'for DALI\'s TFRecord reader and the tfrecord package\'s PyTorch '
        'reader. Needs uncompressed shards (not with --compression gzip).')
    add('--max_bad_fraction', default='0.05',
        help='Fail the job (and publish nothing) when more than this share '
        'of the inputs is dead-lettered. Default: 0.05.')
    add('--max_pixels', default='100000000',
        help='Reject images with more pixels than this (decompression '
        'bombs). Default: 100000000.')
    # Text.
    add('--text_column', default='text',
        help='Text: the column holding the document (CSV/TSV/JSONL). '
        'Default: text.')
    add('--lowercase', default='true',
        help='Text: lower-case before tokenizing (true or false). '
        'Default: true.')
    add('--strip_punctuation', default=False, action='store_true',
        help='Text: turn punctuation into spaces before tokenizing.')
    add('--max_tokens', default='128',
        help='Text: token ids kept per document (padded with 0 up to it). '
        'Default: 128.')
    add('--vocab_size', default='20000',
        help='Text: the most frequent training tokens kept (top-k); 0 keeps '
        'all. Default: 20000.')
    add('--min_frequency', default='1',
        help='Text: tokens seen fewer times in the training split are '
        'out of vocabulary. Default: 1.')
    add('--oov_buckets', default='1',
        help='Text: hash buckets for out-of-vocabulary tokens; 0 drops them. '
        'Default: 1.')
    add('--ngrams', default='1',
        help='Text: n-gram sizes as n or lo,hi (such as 1,2 for words and '
        'word pairs). Default: 1.')
    add('--text_output', default='ids',
        help='Text: ids (padded token id sequences), bow (term ids and '
        'counts) or tfidf (term ids and tf-idf weights). Default: ids.')
    add('--keep_text', default=False, action='store_true',
        help='Text: also store the raw text.')
    add('--invalid_utf8', default='replace',
        help='Text: documents with invalid UTF-8: replace (U+FFFD) or '
        'dead_letter. Default: replace.')
    # Sensor (time series and tabular rows).
    add('--timestamp_column', default='timestamp',
        help='Sensor: the timestamp column (ISO-8601 strings or epoch '
        'numbers). Default: timestamp.')
    add('--timestamp_unit', default='s',
        help='Sensor: unit of numeric timestamps: s, ms, us or ns. '
        'Default: s.')
    add('--entity_column', default='',
        help='Sensor: the column naming the recording (device, subject). '
        'Default: none (all rows are one series).')
    add('--label_column', default='label',
        help='Text and sensor: the label column. Default: label.')
    add('--channels', default='',
        help='Sensor: comma-separated numeric channel columns. Default: '
        'every numeric column that is not the timestamp, entity or label.')
    add('--window_length', default='0',
        help='Sensor: rows per window (each entity\'s rows in time order); '
        '0 makes one example per row. Default: 0.')
    add('--window_stride', default='0',
        help='Sensor: rows between window starts; 0 means the window length '
        '(no overlap). Default: 0.')
    add('--window_label', default='last',
        help='Sensor: a window\'s label: last (its last row\'s) or '
        'majority (the most frequent; ties go to the first label name in '
        'sorted order). Default: last.')
    add('--missing', default='dead_letter',
        help='Sensor: rows with missing channel values (empty, NaN, inf): '
        'dead_letter, drop (counted in the manifest) or impute (with the '
        'training mean, inside the exported transform). '
        'Default: dead_letter.')
    add('--split_by', default='auto',
        help='Sensor: hash (of each row; one example per row only), entity '
        '(all of a recording in one split, by a hash of the entity with '
        '--splits ratios) or time (by --time_cutoffs). auto: entity when '
        'there is an entity column, time when --time_cutoffs are given, '
        'else hash (rows only). Default: auto.')
    add('--time_cutoffs', default='',
        help='Sensor, --split_by time: one or two ISO-8601 times (or epoch '
        'numbers); rows before the first are train, then validation (with '
        'two), the rest test. Windows that cross a cut-off are dropped and '
        'counted.')
    add('--bucketize', default='0',
        help='Sensor: also store each value\'s quantile bucket (0..N-1, '
        'boundaries from a tf.Transform quantiles pass over the training '
        'split) as an int64 feature; 0 turns it off. Default: 0.')
    add('--chunk_rows', default='100000',
        help='Sensor windows: about this many rows of one entity are '
        'grouped and windowed together (bounds worker memory). '
        'Default: 100000.')
    add('--workers', default=None,
        help='Workers on the DirectRunner (threads; --direct_num_workers '
        'and --direct_running_mode still win). Default: one per core for '
        'images, 1 for text and sensor, which were fastest that way.')
    add('--partition', default=None,
        help='A partition value (such as a run date, 2026-11-20) put in '
        'place of {partition} in --input and --output, so a nightly job '
        'names one partition per run.')
    add('--overwrite', default=False, action='store_true',
        help='Replace a dataset already published in --output.')
    add('--stale_staging_hours', default='72',
        help='Staging folders that failed or killed runs left in --output '
        '(a refused run keeps its dead letters there) are deleted by the '
        'next run into that output once older than this many hours.')
    add('--detach', default=False, action='store_true',
        help='DataflowRunner only: return once the job is submitted instead '
        'of waiting for it (for Flex Template launches). The job still '
        'publishes the dataset itself, atomically, when it finishes.')


@dataclasses.dataclass(frozen=True)
class PreprocessConfig:
  """The checked settings of one preprocessing run."""
  modality: str
  input: str
  output: str
  name: str
  image: Optional[images.ImageConfig]
  normalization: str
  split_ratios: Tuple[Tuple[str, float], ...]
  splits_from_input: bool
  rebalance: str
  rebalance_splits: Tuple[str, ...]
  seed: int
  num_shards: int
  compression: str  # resolved: 'none' or 'gzip'
  max_bad_fraction: float
  overwrite: bool
  sensor: Optional[windows.SensorConfig] = None
  text: Optional[text_transform.TextConfig] = None
  partition: Optional[str] = None
  # Write TensorFlow Datasets' metadata files (adds files; the records are
  # the same either way).
  tfds_metadata: bool = False
  # Index files beside the shards change the files, not the records.
  index_files: bool = False

  @property
  def split_names(self) -> List[str]:
    if self.splits_from_input:
      return list(split_lib.KNOWN_SPLITS)
    if self.sensor is not None and self.sensor.split_by == 'time':
      return list(self.sensor.time_split_names)
    return [name for name, _ in self.split_ratios]

  def to_json(self) -> dict:
    d = dataclasses.asdict(self)
    d['split_ratios'] = [list(p) for p in self.split_ratios]
    d['rebalance_splits'] = list(self.rebalance_splits)
    if self.sensor is not None:
      d['sensor'] = self.sensor.to_json()
    if self.text is not None:
      d['text'] = self.text.to_json()
    return d

  def config_hash(self) -> str:
    """Hash of everything that decides the records (not where they go,
    nor the TFDS metadata or index files written beside them)."""
    d = self.to_json()
    for key in ('output', 'overwrite', 'tfds_metadata', 'index_files'):
      d.pop(key)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def _choice(flag: str, value: str, choices) -> str:
  v = str(value).strip().lower()
  if v not in choices:
    raise UsageError(f'--{flag} must be one of {", ".join(choices)} '
                     f'(got {value!r}).')
  return v


def _int(flag: str, value, low: int, high: Optional[int] = None) -> int:
  try:
    v = int(str(value).strip())
  except ValueError:
    raise UsageError(f'--{flag} must be a whole number (got {value!r}).'
                     ) from None
  if v < low or (high is not None and v > high):
    bound = f'between {low} and {high}' if high is not None else f'>= {low}'
    raise UsageError(f'--{flag} must be {bound} (got {v}).')
  return v


def check_workers(value) -> int:
  """--workers as a number of workers (raises UsageError)."""
  return _int('workers', value, 1, 256)


def parse_image_size(text: str) -> Tuple[int, int]:
  """'224x160' -> (width 224, height 160); '224' -> (224, 224)."""
  parts = str(text).lower().replace(' ', '').split('x')
  try:
    nums = [int(p) for p in parts]
  except ValueError:
    nums = []
  if len(nums) == 1:
    nums = nums * 2
  if len(nums) != 2 or min(nums) < 1 or max(nums) > 8192:
    raise UsageError(f'--image_size must be WIDTHxHEIGHT with sides from 1 '
                     f'to 8192, such as 224x224 (got {text!r}).')
  return nums[0], nums[1]


def _image_config(o) -> images.ImageConfig:
  width, height = parse_image_size(o.image_size)
  return images.ImageConfig(
      height=height, width=width,
      resize_mode=_choice('resize_mode', o.resize_mode, images.RESIZE_MODES),
      storage=_choice('storage', o.storage, images.STORAGE_FORMATS),
      color=_choice('color', str(o.color).lower().replace('gray', 'grey'),
                    images.COLOR_MODES),
      jpeg_quality=_int('jpeg_quality', o.jpeg_quality, 1, 95),
      max_pixels=_int('max_pixels', o.max_pixels, 1))


def _names(text: str) -> Tuple[str, ...]:
  return tuple(c.strip() for c in str(text or '').split(',') if c.strip())


def _sensor_config(o) -> windows.SensorConfig:
  """Checks the sensor flags (the columns are checked against the input
  later, by the pipeline's input check)."""
  length = _int('window_length', o.window_length, 0, 1_000_000)
  stride = _int('window_stride', o.window_stride, 0, 1_000_000)
  if length == 0 and stride:
    raise UsageError('--window_stride needs --window_length above 0.')
  entity = str(o.entity_column or '').strip() or None
  split_by = _choice('split_by', o.split_by, windows.SPLIT_BY)
  cutoffs_text = _names(o.time_cutoffs)
  unit = _choice('timestamp_unit', o.timestamp_unit, windows.TIME_UNITS)
  if split_by == 'auto':
    split_by = 'time' if cutoffs_text else ('entity' if entity else 'hash')
    if split_by == 'hash' and length:
      raise UsageError('windows without --entity_column need --split_by '
                       'time with --time_cutoffs, since all rows are one '
                       'recording and its windows overlap.')
  if split_by == 'entity' and not entity:
    raise UsageError('--split_by entity needs --entity_column.')
  if split_by == 'hash' and length:
    raise UsageError('--split_by hash would put overlapping windows of one '
                     'recording into different splits; use --split_by '
                     'entity (with --entity_column) or time.')
  cutoffs: Tuple[int, ...] = ()
  if split_by == 'time':
    if not 1 <= len(cutoffs_text) <= 2:
      raise UsageError('--split_by time needs --time_cutoffs with one or two '
                       'times, such as 2024-03-01 or 2024-03-01,2024-03-15.')
    try:
      cutoffs = tuple(windows.parse_time(t, unit) for t in cutoffs_text)
    except ValueError as e:
      raise UsageError(f'--time_cutoffs: {e}.') from None
    if list(cutoffs) != sorted(set(cutoffs)):
      raise UsageError('--time_cutoffs must be in increasing order.')
  elif cutoffs_text:
    raise UsageError('--time_cutoffs needs --split_by time.')
  return windows.SensorConfig(
      timestamp_column=str(o.timestamp_column).strip(),
      timestamp_unit=unit, entity_column=entity,
      label_column=str(o.label_column).strip(),
      channels=_names(o.channels),
      window_length=length, window_stride=stride or length,
      window_label=_choice('window_label', o.window_label,
                           windows.LABEL_RULES),
      missing=_choice('missing', o.missing, windows.MISSING_POLICIES),
      split_by=split_by, time_cutoffs=cutoffs,
      bucketize=_int('bucketize', o.bucketize, 0, 10000),
      chunk_rows=_int('chunk_rows', o.chunk_rows, 1000))


def _bool(flag: str, value) -> bool:
  v = str(value).strip().lower()
  if v in ('true', '1', 'yes', 'on'):
    return True
  if v in ('false', '0', 'no', 'off'):
    return False
  raise UsageError(f'--{flag} must be true or false (got {value!r}).')


def _text_config(o) -> text_transform.TextConfig:
  try:
    ngrams = text_transform.parse_ngrams(o.ngrams)
  except ValueError as e:
    raise UsageError(f'--ngrams: {e}.') from None
  return text_transform.TextConfig(
      text_column=str(o.text_column).strip(),
      label_column=str(o.label_column).strip(),
      lowercase=_bool('lowercase', o.lowercase),
      strip_punctuation=bool(o.strip_punctuation),
      max_tokens=_int('max_tokens', o.max_tokens, 1, 100000),
      vocab_size=_int('vocab_size', o.vocab_size, 0, 10_000_000),
      min_frequency=_int('min_frequency', o.min_frequency, 1),
      oov_buckets=_int('oov_buckets', o.oov_buckets, 0, 100000),
      ngrams=ngrams,
      output=_choice('text_output', o.text_output, text_transform.OUTPUTS),
      keep_text=bool(o.keep_text),
      invalid_utf8=_choice('invalid_utf8', o.invalid_utf8,
                           ('replace', 'dead_letter')))


PARTITION_PLACEHOLDER = '{partition}'


def fill_partition(input_path: str, output: str, partition):
  """Puts --partition in place of {partition} in the two paths.

  Raises:
    UsageError: A placeholder without a value, a value without a
      placeholder, or a value that is not a plain path segment.
  """
  marked = [p for p in (input_path, output) if PARTITION_PLACEHOLDER in p]
  if partition is None:
    if marked:
      raise UsageError(f'{PARTITION_PLACEHOLDER} is in --input or --output '
                       'but --partition is not given.')
    return input_path, output
  value = str(partition).strip()
  if not value or any(c in value for c in '/\\*?[]{}') or value in ('.',
                                                                  '..'):
    raise UsageError(f'--partition must be a plain path segment such as '
                     f'2026-11-20 (got {partition!r}).')
  if not marked:
    raise UsageError(f'--partition is given but neither --input nor --output '
                     f'contains {PARTITION_PLACEHOLDER}.')
  return (input_path.replace(PARTITION_PLACEHOLDER, value),
          output.replace(PARTITION_PLACEHOLDER, value))


def resolve_config(options: PipelineOptions) -> PreprocessConfig:
  """Checks the flags and builds the run's configuration.

  Raises:
    UsageError: A flag is missing or has a value we cannot use.
  """
  o = options.view_as(PreprocessOptions)
  modality = _choice('modality', o.modality, MODALITIES)
  if not o.input:
    raise UsageError('--input is required: ' + {
        'image': 'a folder of class folders or a manifest file.',
        'text': 'a CSV, TSV or JSONL file (or a pattern of them), or a '
                'folder of class folders of .txt files.',
        'sensor': 'a CSV, TSV, JSONL or Parquet file, or a folder or '
                  'pattern of them.'}[modality])
  if not o.output:
    raise UsageError('--output is required: the folder to write the dataset '
                     'into.')
  input_path, output = fill_partition(str(o.input), str(o.output),
                                      o.partition)
  image = _image_config(o) if modality == 'image' else None
  sensor = _sensor_config(o) if modality == 'sensor' else None
  text = _text_config(o) if modality == 'text' else None
  if text is not None:
    if o.normalization not in (None, 'none'):
      raise UsageError('--normalization does not apply to text (documents '
                       'become token ids).')
    normalization = 'none'
  else:
    normalization = _choice(
        'normalization', o.normalization or 'zscore',
        normalize.NORMALIZATIONS if image else windows.NORMALIZATIONS)
  splits_text = str(o.splits).strip()
  from_input = splits_text.lower() == SPLITS_FROM_INPUT
  if from_input and sensor:
    raise UsageError('--splits from_input is for images; sensor rows are '
                     'split by --split_by hash, entity or time.')
  if from_input and text:
    raise UsageError('--splits from_input is for images; documents are '
                     'split by a hash of their id.')
  ratios: Tuple[Tuple[str, float], ...] = ()
  if not from_input:
    try:
      ratios = tuple(split_lib.parse_ratios(splits_text))
    except ValueError as e:
      raise UsageError(f'--splits: {e}.') from None
  if sensor and sensor.split_by == 'time':
    known: Tuple[str, ...] = sensor.time_split_names
  elif from_input:
    known = split_lib.KNOWN_SPLITS
  else:
    known = tuple(n for n, _ in ratios)
  needs_train = normalization in ('zscore', 'minmax') or text is not None or (
      sensor is not None and (sensor.missing == 'impute' or
                              sensor.bucketize > 0))
  if (needs_train and not from_input and
      not (sensor and sensor.split_by == 'time') and
      dict(ratios).get('train', 0) <= 0):
    what = (f'--normalization {normalization}' if normalization in
            ('zscore', 'minmax') else 'the text vocabulary' if text else
            '--missing impute' if sensor and sensor.missing == 'impute' else
            '--bucketize')
    raise UsageError(f'{what} needs a train split with a ratio above 0 to '
                     'compute its statistics on.')
  mode = _choice('rebalance', o.rebalance, rebalance.MODES)
  rebalance_splits = tuple(
      split_lib.SPLIT_ALIASES.get(s.strip().lower(), s.strip())
      if s.strip() not in known else s.strip()
      for s in str(o.rebalance_splits).split(',') if s.strip())
  unknown = [s for s in rebalance_splits if s not in known]
  if unknown and mode != 'none':
    raise UsageError(f'--rebalance_splits names {", ".join(unknown)}, which '
                     f'is not a split (splits: {", ".join(known)}).')
  compression = _choice('compression', o.compression, COMPRESSIONS)
  tfds_mode = _choice('tfds_metadata', o.tfds_metadata, tfds_lib.MODES)
  index_files = bool(o.index_files)
  if compression == 'auto':
    # JPEG/PNG bytes and normalized float noise barely compress; raw pixels
    # do. TFDS, DALI and the tfrecord reader read uncompressed shards only.
    compression = 'gzip' if image and image.storage in (
        'uint8', 'float32') and tfds_mode != 'on' and not index_files else (
            'none')
  if index_files and compression == 'gzip':
    raise UsageError('--index_files needs uncompressed shards, but '
                     '--compression gzip compresses them, and offsets into a '
                     'compressed shard mean nothing to DALI or the tfrecord '
                     'reader; pass --compression none.')
  try:
    max_bad = float(o.max_bad_fraction)
  except ValueError:
    max_bad = -1.0
  if not 0.0 <= max_bad <= 1.0:
    raise UsageError(f'--max_bad_fraction must be a number from 0 to 1 '
                     f'(got {o.max_bad_fraction!r}).')
  name = str(o.name if o.name is not None else
             {'image': 'images', 'text': 'text', 'sensor': 'sensor'}[
                 modality]).strip()
  if not name or any(c in name for c in '/\\*?[]{}') or '-' in name:
    raise UsageError(f'--name must be a plain name without "-", "/" or '
                     f'wildcards (got {o.name!r}).')
  num_shards = _int('num_shards', o.num_shards, 0, 100000)
  tfds_problem = tfds_lib.unreadable_reason(name, known, compression,
                                            num_shards)
  if tfds_mode == 'on' and compression == 'gzip':
    raise UsageError('--tfds_metadata on needs uncompressed records, since '
                     'TFDS cannot read gzip-compressed TFRecords; drop '
                     '--compression gzip or pass --tfds_metadata off.')
  if tfds_mode == 'on' and tfds_problem:
    raise UsageError(f'--tfds_metadata on cannot be met: {tfds_problem}.')
  return PreprocessConfig(
      modality=modality, input=input_path, output=output.rstrip('/'),
      name=name, image=image, normalization=normalization,
      split_ratios=ratios, splits_from_input=from_input, rebalance=mode,
      rebalance_splits=rebalance_splits, seed=_int('seed', o.seed, 0),
      num_shards=num_shards, compression=compression,
      max_bad_fraction=max_bad,
      overwrite=bool(o.overwrite), sensor=sensor, text=text,
      partition=None if o.partition is None else str(o.partition).strip(),
      tfds_metadata=tfds_mode != 'off' and not tfds_problem,
      index_files=index_files)


def tfds_skip_reason(options: PipelineOptions, cfg: PreprocessConfig
                     ) -> Optional[str]:
  """Why `--tfds_metadata auto` writes no TFDS metadata in this run (None
  when it does, or when it was turned off)."""
  o = options.view_as(PreprocessOptions)
  if cfg.tfds_metadata or str(o.tfds_metadata).strip().lower() != 'auto':
    return None
  return tfds_lib.unreadable_reason(cfg.name, cfg.split_names,
                                    cfg.compression, cfg.num_shards)
