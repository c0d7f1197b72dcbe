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
from typing import Any, List, Optional, Tuple

from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions

from transforms.core.errors import UsageError

from transforms import modalities
from transforms.core import contents as contents_lib
from transforms.core import near_duplicates as near_lib
from transforms.core import flags
from transforms.runtime import processes as processes_lib
from transforms.core import rebalance
from transforms.core import splits as split_lib
from transforms.output import tfds_metadata as tfds_lib
from transforms.sources import files

COMPRESSIONS = ('auto', 'none', 'gzip')
# The runners this pipeline has been run on end to end (see README, Runners).
VERIFIED_RUNNERS = ('DirectRunner', 'PortableRunner', 'FlinkRunner',
                    'SparkRunner', 'DataflowRunner')
DEFAULT_SPLITS = 'train=0.8,validation=0.1,test=0.1'
SPLITS_FROM_INPUT = 'from_input'


class BeamOptions(PipelineOptions):
  """PipelineOptions that make each view once.

  Beam asks the options for a view (`view_as(TypeOptions)`, ...) several
  times for every transform it applies and runs, and each view parses the
  whole command line again with a new argparse parser: about 1 ms, 1,800
  times in a run of 20 images, a second of every run's fixed cost. A view
  holds no values of its own (they are in `_all_options`, which every view
  shares), so one view per class is the same view made once. Views are not
  pickled: they are made again where the options are unpickled.
  """

  def view_as(self, cls):
    views = self.__dict__.setdefault('_views', {})
    view = views.get(cls)
    if view is None:
      view = views[cls] = super().view_as(cls)
    return view

  def __getstate__(self):
    state = super().__getstate__()
    if '_views' in state:
      state = {k: v for k, v in state.items() if k != '_views'}
    return state


# Flink's data exchange modes for batch jobs (org.apache.flink.api.common.
# ExecutionMode), as Beam's Flink runner takes them.
FLINK_EXECUTION_MODES = ('PIPELINED', 'PIPELINED_FORCED', 'BATCH',
                         'BATCH_FORCED')


class FlinkBatchOptions(PipelineOptions):
  """A flag of Beam's Java FlinkPipelineOptions (executionModeForBatch).

  Beam's Python SDK learns the Java runner's flags from the job server
  only when it submits the job; pipelines.preprocess refuses flags that no
  options class declares before that (a typo is a bad invocation), so the
  flag is declared here. docs/flink.md says when to use it.
  """

  @classmethod
  def _add_argparse_args(cls, parser):
    parser.add_argument(
        '--execution_mode_for_batch', default=None,
        choices=FLINK_EXECUTION_MODES,
        help='Flink runner only: how the tasks of a batch job exchange '
        'data (Beam\'s default: PIPELINED). BATCH_FORCED stores each '
        'result in full before its consumers start, so a job can have '
        'more subtasks than the cluster has slots.')


class PreprocessOptions(PipelineOptions):
  """Options of `python -m pipelines.preprocess`."""

  @classmethod
  def _add_argparse_args(cls, parser):
    add_preprocess_flags(parser)


def add_preprocess_flags(parser) -> None:
  """Declares the flags of `python -m pipelines.preprocess` on `parser`.

  The groups of --help are the groups of the guide's option tables
  (docs/command-line.md); tests/docs checks they agree.
  """
  def group(title):
    return parser.add_argument_group(title).add_argument

  _input_and_output_flags(group('input and output'))
  _split_and_label_flags(group('splits and labels'))
  _normalization_flags(group('normalization, rebalancing and shuffling'))
  _output_format_flags(group('output format'))
  _quality_gate_flags(group('quality gate'))
  _scheduled_run_flags(group('scheduled and concurrent runs'))
  _local_run_flags(group('local runs (DirectRunner)'))
  _runner_flags(group('runners and diagnostics'))
  for name in modalities.names():
    modalities.get(name).add_arguments(group(f'{name} options'))


def _input_and_output_flags(add) -> None:
  """The flags of --help's group "input and output"."""
  # Every registered modality, so that a new plug-in is listed too.
  *first, last = modalities.names()
  kinds = f'{", ".join(first)} or {last}' if first else last
  add('--modality', default=modalities.DEFAULT,
      help=f'Kind of input: {kinds}. Default: {modalities.DEFAULT}.')
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
  add('--partition', default=None,
      help='A partition value (such as a run date, 2026-11-20) put in '
      'place of {partition} in --input and --output, so a nightly job '
      'names one partition per run.')
  add('--overwrite', default=False, action='store_true',
      help='Replace a dataset already published in --output.')


def _split_and_label_flags(add) -> None:
  """The flags of --help's group "splits and labels"."""
  add('--splits', default=DEFAULT_SPLITS,
      help='Split ratios such as train=0.8,validation=0.1,test=0.1 '
      '(assigned by a hash of each example\'s --split_key), or '
      'from_input to take them from split folders or the manifest\'s '
      'split column. '
      f'Default: {DEFAULT_SPLITS}.')
  add('--split_key', default=None,
      help='Images and text, with --splits ratios: content (a hash of the '
      'example\'s content: the decoded pixels at the stored size, or the '
      'text as the transform normalizes it, so that copies of one content '
      'are always in one split) or id (a hash of the image\'s relative '
      'path or the document\'s file:row, as before). Default: content.')
  add('--label_conflicts', default=None,
      help='Images and text: what to do with examples of the same content '
      'but different labels: keep (all, counted and listed in the '
      'manifest), drop (all, as dead letters) or majority (keep those of '
      'the most frequent label; a tie drops them all). Default: keep.')
  add('--drop_duplicates', default=False, action='store_true',
      help='Images and text: drop further copies of a content with the '
      'same label in the same split (dead-lettered "duplicate of <id>"). '
      'Duplicates are counted in the manifest either way.')
  add('--near_duplicates', default=None,
      help='Images and text: what to do with near-duplicates (the same '
      'picture saved again, resized, slightly cropped or brightened; the '
      'same text with other punctuation, case or a word changed; see '
      'docs/splits.md): group (every member of a group in the '
      'split of the group, none straddling splits), drop (keep one '
      'content per group, dead-letter the others "near-duplicate of '
      '<id>") or off. Default: group.')
  add('--near_duplicate_hash_distance', default=None,
      help='Images: the largest number of bits, of 64, in which the pHashes '
      f'of near-duplicates differ, 0-16. Default: {near_lib.HASH_DISTANCE}.')
  add('--near_duplicate_thumb_distance', default=None,
      help='Images: the largest mean difference between the normalized 4x4 '
      'colour thumbnails of near-duplicates, 0-2. Default: '
      f'{near_lib.THUMB_DISTANCE}.')
  add('--near_duplicate_similarity', default=None,
      help='Text: the smallest estimated Jaccard similarity of the word '
      'pairs of near-duplicate documents, 0.3-1. Default: '
      f'{near_lib.SIMILARITY}.')
  add('--label_column', default='label',
      help='Text and sensor: the label column. Default: label.')


def _normalization_flags(add) -> None:
  """The flags of --help's group "normalization, rebalancing and shuffling"."""
  add('--normalization', default=None,
      help='zscore (per-channel mean/std from a tf.Transform full pass '
      'over the training split), scale (images: to [0, 1]), minmax '
      '(sensor: to [0, 1] by the training min/max) or none. Images: '
      'applied by the exported transform when reading (jpeg/png/uint8 '
      'storage) or stored (float32); sensor values are stored normalized. '
      'Default: zscore (none for text, which has no normalization).')
  add('--rebalance', default='none',
      help='none, oversample, undersample or weight (a per-example '
      'weight feature instead of resampling). Default: none.')
  add('--rebalance_splits', default='train',
      help='Comma-separated splits to rebalance. Default: train.')
  add('--seed', default='42',
      help='Seed for rebalancing and shuffling. Default: 42.')


def _output_format_flags(add) -> None:
  """The flags of --help's group "output format"."""
  add('--num_shards', default='0',
      help='Shards per split; 0 lets the runner decide. Default: 0.')
  add('--compression', default='auto',
      help='auto (none for jpeg/png, whose bytes do not compress; gzip for '
      'uint8/float32), none or gzip. Default: auto.')
  add('--tfds_metadata', default='auto',
      help='Also write the files TensorFlow Datasets reads the dataset '
      'with (dataset_info.json, features.json, label names), so that '
      'tfds.builder_from_directory(OUT) loads it: auto (when the records '
      'are uncompressed; TFDS cannot read gzip TFRecords), on, or off. '
      'Default: auto.')
  add('--index_files', default=False, action='store_true',
      help='Also write <shard>.idx beside every shard: the byte offset '
      'and length of each record (the format of DALI\'s tfrecord2idx), '
      'for DALI\'s TFRecord reader and the tfrecord package\'s PyTorch '
      'reader. Needs uncompressed shards (not with --compression gzip).')


def _quality_gate_flags(add) -> None:
  """The flags of --help's group "quality gate"."""
  add('--max_bad_fraction', default='0.05',
      help='Fail the job (and publish nothing) when more than this share '
      'of the inputs is dead-lettered. Default: 0.05.')


def _scheduled_run_flags(add) -> None:
  """The flags of --help's group "scheduled and concurrent runs"."""
  add('--wait_for_output', default='0',
      help='When another run is writing --output (it holds the output\'s '
      'lease), wait up to this many seconds for it to finish instead of '
      'refusing at once. Default: 0 (refuse).')
  add('--lease_seconds', default='600',
      help='How long a run\'s lease on --output lasts without renewal; a '
      'live run renews it every third of that, so only a killed run\'s '
      'lease runs out, and another run may then take the output over. '
      'Default: 600.')
  add('--stale_staging_hours', default='72',
      help='Staging folders that failed or killed runs left in --output '
      '(a refused run keeps its dead letters there) are deleted by the '
      'next run into that output once older than this many hours.')
  add('--detach', default=False, action='store_true',
      help='DataflowRunner only: return once the job is submitted instead '
      'of waiting for it (for Flex Template launches). The job still '
      'publishes the dataset itself, atomically, when it finishes.')


def _local_run_flags(add) -> None:
  """The flags of --help's group "local runs (DirectRunner)"."""
  add('--workers', default=None,
      help='Workers on the DirectRunner (threads; --direct_num_workers '
      'and --direct_running_mode still win). Default: 1 (for images, one '
      'per core with --local_processes 0), which was fastest.')
  add('--local_processes', default='auto',
      help='Processes beside the DirectRunner\'s threads, which share one '
      'interpreter lock: images are decoded there, and large local sensor '
      'CSV/TSV files parsed in byte ranges. auto (default): one per core '
      'on the DirectRunner (in_memory and multi_threading modes), 0 on '
      'other runners, which run a process per core themselves; 0 does '
      'that work in the runner\'s own workers.')
  add('--local_shuffle', default='auto',
      help='Text and sensor: where the shuffle keeps the records while it '
      'groups them on the DirectRunner, which holds every grouping in '
      'memory: disk (a folder in the run\'s folder, removed once the '
      'shards are written; memory then stays flat as the data grows) or '
      'memory. auto (default): disk on the DirectRunner when --output is '
      'on the local file system, else memory. Other runners group in '
      'their own shuffle.')


def _runner_flags(add) -> None:
  """The flags of --help's group "runners and diagnostics"."""
  add('--allow_unverified_runner', default=False, action='store_true',
      help='Run on a Beam runner this pipeline has not been verified on '
      f'(verified: {", ".join(VERIFIED_RUNNERS)}; DaskRunner is refused '
      'even so, as it loses records).')
  add('--progress', default='auto',
      help='While the run goes, show every few seconds how much is done '
      'of the total, the rate and the time left, on stderr: bar (one '
      'line redrawn in place), log (a log line each time), off, or auto '
      '(bar when stderr is a terminal, else log). Changes no record and '
      'not the config hash. Default: auto.')
  add('--verbose', default=False, action='store_true',
      help='When the run fails, also print the full traceback on stderr '
      '(it is always written to the log file the error names). Changes '
      'no record and not the config hash.')
  add('--pipeline_type_check', dest='type_check_on_direct_runner',
      default=False, action='store_true',
      help='DirectRunner: have Beam check and infer the types of every '
      'step while the pipeline is built, as it does by default (and does '
      'here on other runners). Off by default on the DirectRunner: it '
      'costs a fixed 0.3-0.5 s a run and changes no record. For '
      'developing a modality.')


@dataclasses.dataclass(frozen=True)
class PreprocessConfig:
  """The checked settings of one preprocessing run."""
  modality: str
  input: str
  output: str
  name: str
  # The modality's own settings (its options.settings()).
  settings: Any
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
  partition: Optional[str] = None
  # Write TensorFlow Datasets' metadata files (adds files; the records are
  # the same either way).
  tfds_metadata: bool = False
  # Index files beside the shards change the files, not the records.
  index_files: bool = False
  # Split key and equal-content rules (core/contents.py); None for
  # modalities without a content key (left out of the config JSON, so
  # their config hashes are what they were).
  contents: Optional[contents_lib.ContentRules] = None
  # Local worker processes for the modality's CPU-heavy step (images:
  # decoding; runtime/processes.py); 0: in the runner's own workers. How the
  # work is spread, not what it makes: not part of the config hash.
  local_processes: int = 0
  # The shuffle's records wait in files in the run's folder while they are
  # grouped (core/shuffle.py; DirectRunner, local output). Where the
  # records wait, not what they are: not part of the config hash.
  local_shuffle: bool = False

  @property
  def plugin(self) -> modalities.Modality:
    """The modality plug-in of this run."""
    return modalities.get(self.modality)

  @property
  def split_names(self) -> List[str]:
    if self.splits_from_input:
      return list(split_lib.KNOWN_SPLITS)
    return self.plugin.split_names(self.settings,
                                   [name for name, _ in self.split_ratios])

  def to_json(self) -> dict:
    d = {}
    for field in dataclasses.fields(self):
      if field.name == 'settings':
        d.update({name: None for name in sorted(modalities.names())
                  if modalities.get(name).config_section_always})
        d[self.modality] = self.settings.to_json()
      elif field.name == 'contents':
        if self.contents is not None:
          d['contents'] = self.contents.to_json()
      else:
        d[field.name] = getattr(self, field.name)
    d['split_ratios'] = [list(p) for p in self.split_ratios]
    d['rebalance_splits'] = list(self.rebalance_splits)
    return d

  def config_hash(self) -> str:
    """Hash of everything that decides the records (not where they go,
    nor the TFDS metadata or index files written beside them)."""
    d = self.to_json()
    for key in ('output', 'overwrite', 'tfds_metadata', 'index_files',
                'local_processes', 'local_shuffle'):
      d.pop(key)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def check_workers(value) -> int:
  """--workers as a number of workers (raises UsageError)."""
  return flags.whole_number('workers', value, 1, 256)


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


def check_output_outside_input(input_path: str, output: str) -> None:
  """Refuses an output equal to the input folder or inside it: a rerun
  would read the tool's own manifest, shards and metadata as data. (An
  input that is a file, or a pattern of files, has no inside.)

  Raises:
    UsageError: It is.
  """
  import os  # pylint: disable=import-outside-toplevel
  if any(c in input_path for c in '*?[') and not (
      files.is_local(input_path) and os.path.exists(input_path)):
    return  # a pattern (a folder named `photos [2019]` is not one)
  if '://' in input_path or '://' in output:
    folder, target = input_path, output
  elif os.path.isdir(input_path):
    folder, target = os.path.realpath(input_path), os.path.realpath(output)
  else:
    return
  folder, target = folder.rstrip('/'), target.rstrip('/')
  if target == folder or target.startswith(folder + '/'):
    raise UsageError(f'--output {output} is inside --input {input_path}: a '
                     'later run would read this run\'s own files as input; '
                     'write the dataset somewhere else.')


def _splits(o, modality, settings):
  """(from_input, ratios, split names) from --splits."""
  splits_text = str(o.splits).strip()
  from_input = splits_text.lower() == SPLITS_FROM_INPUT
  if from_input and modality.from_input_refusal:
    raise UsageError(modality.from_input_refusal)
  ratios: Tuple[Tuple[str, float], ...] = ()
  if not from_input:
    try:
      ratios = tuple(split_lib.parse_ratios(splits_text))
    except ValueError as e:
      raise UsageError(f'--splits: {e}.') from None
  if from_input:
    known: Tuple[str, ...] = split_lib.KNOWN_SPLITS
  else:
    known = tuple(modality.split_names(settings, [n for n, _ in ratios]))
  return from_input, ratios, known


def _check_train_split(modality, settings, normalization, from_input,
                       ratios) -> None:
  """Refuses statistics (normalization, vocabulary, ...) without a train
  split to compute them on."""
  what = modality.train_statistics_need(settings, normalization)
  if (what and not from_input and modality.ratios_decide_splits(settings)
      and dict(ratios).get('train', 0) <= 0):
    raise UsageError(f'{what} needs a train split with a ratio above 0 to '
                     'compute its statistics on.')


def _rebalancing(o, known):
  """(mode, splits to rebalance) from --rebalance and --rebalance_splits."""
  mode = flags.choice('rebalance', o.rebalance, rebalance.MODES)
  rebalance_splits = tuple(
      split_lib.SPLIT_ALIASES.get(s.strip().lower(), s.strip())
      if s.strip() not in known else s.strip()
      for s in str(o.rebalance_splits).split(',') if s.strip())
  unknown = [s for s in rebalance_splits if s not in known]
  if unknown and mode != 'none':
    raise UsageError(f'--rebalance_splits names {", ".join(unknown)}, which '
                     f'is not a split (splits: {", ".join(known)}).')
  return mode, rebalance_splits


def _record_format(o, modality, settings):
  """(compression, TFDS metadata mode, index files)."""
  compression = flags.choice('compression', o.compression, COMPRESSIONS)
  tfds_mode = flags.choice('tfds_metadata', o.tfds_metadata, tfds_lib.MODES)
  index_files = bool(o.index_files)
  if compression == 'auto':
    # JPEG/PNG bytes and normalized float noise barely compress; raw pixels
    # do. TFDS, DALI and the tfrecord reader read uncompressed shards only.
    compression = ('gzip' if modality.default_compression(settings) == 'gzip'
                   and tfds_mode != 'on' and not index_files else 'none')
  if index_files and compression == 'gzip':
    raise UsageError('--index_files needs uncompressed shards, but '
                     '--compression gzip compresses them, and offsets into a '
                     'compressed shard mean nothing to DALI or the tfrecord '
                     'reader; pass --compression none.')
  return compression, tfds_mode, index_files


def _max_bad_fraction(o) -> float:
  return flags.number('max_bad_fraction', o.max_bad_fraction, 0.0, 1.0)


def _dataset_name(o, modality) -> str:
  name = str(o.name if o.name is not None else
             modality.default_dataset_name).strip()
  if not name or any(c in name for c in '/\\*?[]{}') or '-' in name:
    raise UsageError(f'--name must be a plain name without "-", "/" or '
                     f'wildcards (got {o.name!r}).')
  return name


def _tfds_wanted(tfds_mode, name, known, compression, num_shards) -> bool:
  """Whether TFDS metadata is written (refuses `on` when it cannot be)."""
  tfds_problem = tfds_lib.unreadable_reason(name, known, compression,
                                            num_shards)
  if tfds_mode == 'on' and compression == 'gzip':
    raise UsageError('--tfds_metadata on needs uncompressed records, since '
                     'TFDS cannot read gzip-compressed TFRecords; drop '
                     '--compression gzip or pass --tfds_metadata off.')
  if tfds_mode == 'on' and tfds_problem:
    raise UsageError(f'--tfds_metadata on cannot be met: {tfds_problem}.')
  return tfds_mode != 'off' and not tfds_problem


def resolve_config(options: PipelineOptions) -> PreprocessConfig:
  """Checks the flags and builds the run's configuration.

  Raises:
    UsageError: A flag is missing or has a value we cannot use.
  """
  o = options.view_as(PreprocessOptions)
  modality = modalities.get(
      flags.choice('modality', o.modality, modalities.names()))
  if not o.input:
    raise UsageError('--input is required: ' + modality.input_help)
  if not o.output:
    raise UsageError('--output is required: the folder to write the dataset '
                     'into.')
  input_path, output = fill_partition(str(o.input), str(o.output),
                                      o.partition)
  check_output_outside_input(input_path, output)
  settings = modality.settings(o)
  normalization = modality.normalization(o.normalization)
  from_input, ratios, known = _splits(o, modality, settings)
  _check_train_split(modality, settings, normalization, from_input, ratios)
  mode, rebalance_splits = _rebalancing(o, known)
  content_rules = _content_rules(o, modality, from_input)
  compression, tfds_mode, index_files = _record_format(o, modality, settings)
  max_bad = _max_bad_fraction(o)
  name = _dataset_name(o, modality)
  num_shards = flags.whole_number('num_shards', o.num_shards, 0, 100000)
  return PreprocessConfig(
      modality=modality.name, input=input_path, output=output.rstrip('/'),
      name=name, settings=settings, normalization=normalization,
      split_ratios=ratios, splits_from_input=from_input, rebalance=mode,
      rebalance_splits=rebalance_splits,
      seed=flags.whole_number('seed', o.seed, 0), num_shards=num_shards,
      compression=compression, max_bad_fraction=max_bad,
      overwrite=bool(o.overwrite),
      partition=None if o.partition is None else str(o.partition).strip(),
      tfds_metadata=_tfds_wanted(tfds_mode, name, known, compression,
                                 num_shards),
      index_files=index_files, contents=content_rules,
      local_processes=local_processes(options),
      local_shuffle=local_shuffle(options, output))


def direct_runner(options: PipelineOptions) -> bool:
  """Whether the job runs on the DirectRunner (the default runner)."""
  return options.view_as(StandardOptions).runner in (None, 'DirectRunner',
                                                     'direct')


def local_shuffle(options: PipelineOptions, output: str) -> bool:
  """--local_shuffle as a bool (True: the records wait on disk).

  Raises:
    UsageError: disk asked for where it cannot be (another runner, or an
      output that is not on the local file system).
  """
  value = flags.choice('local_shuffle',
                       options.view_as(PreprocessOptions).local_shuffle,
                       ('auto', 'disk', 'memory'))
  possible = direct_runner(options) and '://' not in output
  if value == 'disk' and not possible:
    raise UsageError(
        '--local_shuffle disk needs the DirectRunner and an --output on the '
        'local file system; other runners group records in their own '
        'shuffle.')
  return value != 'memory' and possible


def local_processes(options: PipelineOptions) -> int:
  """--local_processes as a number: `auto` is one per core on the
  DirectRunner's in-process modes (its threads share one GIL) and 0 on any
  other runner, which runs a worker process per core itself."""
  value = options.view_as(PreprocessOptions).local_processes
  if str(value).strip().lower() != 'auto':
    return flags.whole_number('local_processes', value, 0, 256)
  mode = options.view_as(DirectOptions).direct_running_mode
  if not direct_runner(options) or mode == 'multi_processing':
    return 0
  return processes_lib.default_processes()


def _content_rules(o, modality, from_input):
  """The ContentRules from --split_key, --label_conflicts,
  --drop_duplicates and (images) --near_duplicates and its distances (None
  for a modality without content keys)."""
  near_flags = [f'--{name}' for name, value in (
      ('near_duplicates', o.near_duplicates),
      ('near_duplicate_hash_distance', o.near_duplicate_hash_distance),
      ('near_duplicate_thumb_distance', o.near_duplicate_thumb_distance),
      ('near_duplicate_similarity', o.near_duplicate_similarity))
                if value is not None]
  given = [f'--{name}' for name, value in (
      ('split_key', o.split_key), ('label_conflicts', o.label_conflicts),
      ('drop_duplicates', o.drop_duplicates or None)) if value is not None]
  for name in near_flags:
    if _near_flag_applies(name, modality) or (
        name == '--near_duplicates'
        and str(o.near_duplicates).strip().lower() == 'off'):
      continue
    where = ' and '.join(
        m.data_noun for m in map(modalities.get, modalities.names())
        if _near_flag_applies(name, m))
    if modality.groups_near_duplicates:
      raise UsageError(f'{name} applies to {where} only.')
    raise UsageError(f'{name} applies to {where} only: near-duplicate '
                     f'{modality.name} data is not grouped yet.')
  if not modality.content_keyed:
    if given:
      verb = 'apply' if len(given) > 1 else 'applies'
      raise UsageError(f'{" and ".join(given)} {verb} to images and text; '
                       f'{modality.content_refusal}')
    return None
  split_key = flags.choice('split_key', o.split_key or 'content',
                           contents_lib.SPLIT_KEYS)
  if from_input:
    if o.split_key is not None:
      raise UsageError('--split_key applies to --splits ratios; with --splits '
                       'from_input the input names each example\'s split.')
    split_key = 'input'
  return contents_lib.ContentRules(
      split_key=split_key,
      label_conflicts=flags.choice('label_conflicts',
                                   o.label_conflicts or 'keep',
                                   contents_lib.CONFLICT_POLICIES),
      drop_duplicates=bool(o.drop_duplicates),
      near_duplicates=modality.near_duplicate_rules(
          flags.choice('near_duplicates', o.near_duplicates or 'group',
                       near_lib.MODES), o)
      if modality.groups_near_duplicates else None)


def _near_flag_applies(name: str, modality) -> bool:
  """Whether a near-duplicate flag applies to a modality: --near_duplicates
  to every modality that groups near-duplicates, a distance flag to the
  one that reads it."""
  return modality.groups_near_duplicates and (
      name == '--near_duplicates' or name in modality.near_duplicate_flags)


def tfds_skip_reason(options: PipelineOptions, cfg: PreprocessConfig
                     ) -> Optional[str]:
  """Why `--tfds_metadata auto` writes no TFDS metadata in this run (None
  when it does, or when it was turned off)."""
  o = options.view_as(PreprocessOptions)
  if cfg.tfds_metadata or str(o.tfds_metadata).strip().lower() != 'auto':
    return None
  return tfds_lib.unreadable_reason(cfg.name, cfg.split_names,
                                    cfg.compression, cfg.num_shards)


def absolute_local_path(path):
  """A local path made absolute against the current folder (so workers
  started in another folder read and write the same files); a path with a
  scheme (gs://, s3://, ...) or none at all unchanged."""
  if not path or not files.is_local(str(path)):
    return path
  import os  # pylint: disable=import-outside-toplevel
  return os.path.abspath(str(path))
