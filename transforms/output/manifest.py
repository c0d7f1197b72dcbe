"""The manifest, the quality gate, and publishing a finished dataset.

A run writes its whole dataset (shards, index files, dead letters, the
tf.Transform output, the TFDS files) into its own run folder,
`<output>/run-<run id>/`, under names no other run uses. When everything
is written, `FinalizeDataset` (the pipeline's last step) checks the counts
(the quality gate) and publishes:

  1. check that every file the new manifest names is in place, that no
     other run published meanwhile (unless --overwrite) and that this run
     still holds the output's lease (transforms/output/lease.py);
  2. write `<output>/manifest.json`: the commit, one atomic write (a
     rename on local disk, one object on GCS, which has no atomic rename);
  3. copy the TFDS files beside the manifest, then remove what the new
     manifest does not name: the previous dataset's run folder, folders of
     crashed runs, a validation report of another run, temporary files.

Readers and the validation pipeline trust only what a manifest names, so
a run that fails or is killed before step 2 leaves the previous dataset as
it was, and one killed after it has published. Publishing again (a
runner's retry of the step, or the launcher finishing a publish whose step
failed after the commit) repeats only what is left: steps 1-2 are skipped
when the manifest already names the run, and step 3 is idempotent. Nothing
is ever moved, so publishing costs the same on an object store as on a
local disk.
"""

import datetime
import hashlib
import importlib.metadata
import json
import logging
import os
import platform
import posixpath
import re
import threading
import time
from typing import Dict, List, Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms.core import label_text
from transforms.core.dead_letters import DEAD_LETTER_PREFIX
from transforms.core.errors import DataQualityError
from transforms.output.paths import join
from transforms.output import shards as shards_lib
from transforms.output import tfds_metadata as tfds_lib

_LOG = logging.getLogger(__name__)

MANIFEST = 'manifest.json'
FAILURE = 'FAILED.json'
FORMAT_VERSION = 1
TRANSFORM_DIRS = ('transform_fn', 'transformed_metadata')
# A file of each that tf.Transform always writes (object stores have files,
# not folders, to check for).
TRANSFORM_FILES = ('transform_fn/saved_model.pb',
                   'transformed_metadata/schema.pbtxt')
# A run writes its dataset into <output>/run-<run id>/; the manifest names
# the folder of the published one.
RUN_FOLDER_PREFIX = 'run-'
RUN_FOLDER = re.compile(r'^run-(\d{8}T\d{6})-[0-9a-f]+$')
# Inside a run folder: tf.Transform's temporary files, and the TFDS files
# until they are published beside the manifest.
TFT_TEMP = 'tft_tmp'
# The shuffle's records on a local run (core/shuffle.py), inside the run's
# folder; removed once the shards are written.
SHUFFLE_TEMP = 'shuffle_tmp'
# Examples waiting for the near-duplicate groups (runtime/hold.py), inside the
# run's folder; removed once the shards are written.
HOLD_TEMP = 'hold_tmp'
# The text reader's kept content digests and splits (text/ranges.py), in a
# local run's folder; removed once the shards are written.
KEYS_TEMP = 'keys_tmp'
TFDS_FOLDER = 'tfds'
VALIDATION_REPORT = 'validation_report.json'
_VERSIONED = ('apache-beam', 'tensorflow', 'tensorflow-transform', 'tfx-bsl',
              'tensorflow-datasets', 'pillow', 'numpy', 'pyarrow')


def library_versions() -> Dict[str, str]:
  versions = {'python': platform.python_version()}
  for name in _VERSIONED:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      versions[name] = None
  return versions


def read_manifest(output: str) -> Optional[dict]:
  """The published manifest of `output`, or None when there is none."""
  path = join(output, MANIFEST)
  if not FileSystems.exists(path):
    return None
  with FileSystems.open(path, compression_type='uncompressed') as f:
    return json.loads(f.read().decode('utf-8'))


def _write_json(path: str, data: dict) -> None:
  """Writes JSON in one atomic step: on local disk a temporary file
  renamed over the target; on an object store one object write (an object
  appears only once its upload is complete)."""
  payload = json.dumps(data, indent=2, sort_keys=False,
                       ensure_ascii=False).encode('utf-8')
  if '://' in path:
    with FileSystems.create(path, compression_type='uncompressed') as f:
      f.write(payload)
    return
  tmp = f'{path}.tmp-{os.getpid()}'
  with open(tmp, 'wb') as f:
    f.write(payload)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def _delete_matching(patterns: List[str]) -> None:
  paths = []
  for result in FileSystems.match(patterns):
    paths.extend(m.path for m in result.metadata_list)
  if paths:
    FileSystems.delete(paths)


def remove_tree(path: str) -> None:
  """Deletes a folder and everything in it (every object under the prefix
  on an object store); nothing happens when it does not exist."""
  if '://' in path:
    prefix = path.rstrip('/') + '/'
    if not FileSystems.match([prefix + '**'])[0].metadata_list:
      return
    # Beam deletes a prefix recursively only when it ends with '/'.
    FileSystems.delete([prefix])
  elif os.path.lexists(path):
    FileSystems.delete([path])


def run_folder(run_id: str) -> str:
  """The folder (inside the output) a run writes its dataset into."""
  return RUN_FOLDER_PREFIX + run_id


def run_folders(output: str) -> List[str]:
  """The names of the run folders in `output` (finished or not)."""
  if '://' not in output:
    # Listed directly: a folder holding only empty folders has no file a
    # match would find.
    names = os.listdir(output) if os.path.isdir(output) else []
    return sorted(n for n in names if RUN_FOLDER.match(n))
  try:
    found = FileSystems.match([join(output, RUN_FOLDER_PREFIX + '*', '**')]
                             )[0].metadata_list
  except Exception:  # pylint: disable=broad-except
    return []  # no output, or nothing in it
  prefix = join(output, '')
  names = {m.path[len(prefix):].split('/', 1)[0] for m in found
           if m.path.startswith(prefix)}
  return sorted(n for n in names if RUN_FOLDER.match(n))


def transform_path(output: str, manifest: dict) -> str:
  """Where a published dataset's tf.Transform output is (the folder
  holding transform_fn/ and transformed_metadata/)."""
  folder = manifest.get('transform_dir') or '.'
  return output if folder == '.' else join(output, folder)


def _remove_flat_dataset(output: str) -> None:
  """Removes a dataset published before run folders existed (its files
  sat directly in the output)."""
  # '*.tfrecord*' also takes the shards' index files ('<shard>.idx').
  _delete_matching([join(output, '*.tfrecord*'),
                    join(output, DEAD_LETTER_PREFIX + '*')])
  for d in TRANSFORM_DIRS:
    remove_tree(join(output, d))


def _remove_stale_reports(output: str, run_id: str) -> None:
  """Removes a validation report that is not about run `run_id`."""
  path = join(output, VALIDATION_REPORT)
  if FileSystems.exists(path):
    try:
      with FileSystems.open(path, compression_type='uncompressed') as f:
        about = json.loads(f.read().decode('utf-8')).get('run_id')
    except (ValueError, AttributeError):
      about = None
    if about == run_id:
      return
  _delete_matching([join(output, 'validation_report*')])


def _publish_tfds_files(output: str, manifest: dict) -> None:
  """Puts the run's TFDS metadata files beside the manifest (TFDS reads
  them from the output folder; their shard templates point into the run
  folder), or removes the previous ones when the run has none."""
  tfds = manifest.get('tfds')
  folder = join(output, manifest['data_dir'], TFDS_FOLDER)
  if not tfds:
    _delete_matching([join(output, p) for p in tfds_lib.PATTERNS])
    return
  for name in tfds['files']:
    source, target = join(folder, name), join(output, name)
    if FileSystems.exists(source):
      FileSystems.copy([source], [target])


def finish_publish(output: str, manifest: dict) -> None:
  """What follows the commit (the manifest write); safe to repeat.

  Puts the TFDS files in place, then removes what the new manifest does
  not name: the previous dataset's run folder, run folders of runs that
  crashed, a dataset from before run folders, a validation report of
  another run, and the run's own temporary folders. A run folder holding
  FAILED.json (a run the quality gate refused) stays for inspection until
  --stale_staging_hours. Only one run writes an output at a time (the
  lease), so no other run's live folder can be here.
  """
  data_dir = manifest['data_dir']
  _publish_tfds_files(output, manifest)
  for name in run_folders(output):
    if name == data_dir or FileSystems.exists(join(output, name, FAILURE)):
      continue
    remove_tree(join(output, name))
  _remove_flat_dataset(output)
  _remove_stale_reports(output, manifest['run_id'])
  for temporary in (TFDS_FOLDER, TFT_TEMP):
    remove_tree(join(output, data_dir, temporary))


class PublishRefused(RuntimeError):
  """Publishing would replace a dataset it must not replace."""


def missing_files(output: str, manifest: dict) -> List[str]:
  """The files `manifest` names that are not in `output`."""
  named = [s[key] for split in manifest['splits'].values()
           for s in split['shards'] for key in ('file', 'index')
           if s.get(key)]
  named += manifest['dead_letter']['files']
  named += [join(manifest['transform_dir'], f) for f in TRANSFORM_FILES]
  return [n for n in named if not FileSystems.exists(join(output, n))]


def publish(output: str, manifest: dict, overwrite: bool = True,
            check_writer=None) -> None:
  """Publishes the run `manifest` describes; safe to repeat or resume.

  The run's files are already in their run folder inside `output`, under
  names no other run uses. Publishing writes `manifest.json` (the commit:
  one atomic write, on local disk and on object stores), then removes the
  previous dataset (finish_publish). A crash before the commit leaves the
  previous dataset untouched; a crash after it leaves the new dataset
  published and some old files behind, which a repeat of publish (a
  retry, or the run's own recovery) removes.

  Args:
    output: The dataset folder.
    manifest: The run's manifest (names its run folder, 'data_dir').
    overwrite: Whether the run may replace a dataset it did not find at
      its start (another run published meanwhile); False refuses.
    check_writer: Called just before the commit; raises if this run no
      longer holds the output (see transforms/output/lease.py).

  Raises:
    PublishRefused: A file the manifest names is missing, or another run
      published into the output and `overwrite` is False.
  """
  current = read_manifest(output)
  if current is None or current.get('run_id') != manifest['run_id']:
    missing = missing_files(output, manifest)
    if missing:
      raise PublishRefused(
          f'{len(missing)} file(s) the manifest names are missing from '
          f'{output} ({", ".join(missing[:3])}); nothing was published')
    if current is not None and not overwrite:
      raise PublishRefused(
          f'{output} received a dataset (run {current.get("run_id")}) while '
          'this run was going; nothing was published (pass --overwrite to '
          'replace it)')
    with _COMMIT_LOCK:
      if _STOPPED.is_set():
        raise PublishRefused('the run was cancelled; nothing was published')
      if check_writer is not None:
        check_writer()
      _write_json(join(output, MANIFEST), manifest)
  finish_publish(output, manifest)


# A run that is told to stop (SIGTERM) must not publish after it decided
# to clean up: the commit happens under this lock, and never once stopped
# (for the workers in this process; those in other processes are stopped
# by the lease, see lease.Lease.cancel).
_COMMIT_LOCK = threading.Lock()
_STOPPED = threading.Event()


def stop_publishing() -> None:
  """No publish in this process commits from now on; returns once a
  commit in progress has finished."""
  with _COMMIT_LOCK:
    _STOPPED.set()


def file_sha256(path: str) -> str:
  """The SHA-256 of a file (local or on an object store)."""
  digest = hashlib.sha256()
  with FileSystems.open(path, compression_type='uncompressed') as f:
    for block in iter(lambda: f.read(1 << 20), b''):
      digest.update(block)
  return digest.hexdigest()


def bad_fraction(dead: int, inputs: int) -> float:
  return dead / inputs if inputs else 0.0


def _counts_by_split(pairs) -> Dict[str, Dict[str, int]]:
  out: Dict[str, Dict[str, int]] = {}
  for (split, label), n in pairs:
    out.setdefault(split, {})[label] = out.get(split, {}).get(label, 0) + n
  return out


def _in_run_folder(data_dir: str, path: str) -> str:
  """A file of the run folder, relative to the output (as the manifest
  names files)."""
  return f'{data_dir}/{posixpath.basename(path)}'


def _shard_entry(summary: dict, data_dir: str) -> dict:
  """A shard's manifest entry; 'index' names its index file, if any."""
  entry = {'file': _in_run_folder(data_dir, summary['path']),
           'records': summary['records'], 'bytes': summary['bytes'],
           'sha256': summary['sha256']}
  if summary.get('index'):
    entry['index'] = _in_run_folder(data_dir, summary['index'])
  return entry


def _split_entries(cfg, values: dict, inputs: Dict[str, int],
                   dead: Dict[str, int], data_dir: str) -> Dict[str, dict]:
  """The manifest's entry of every split: counts, classes, shards."""
  before_c = _counts_by_split(values['before'])
  after_c = _counts_by_split(values['after'])
  fps = dict(values['fingerprints'])
  shards = values['shards']
  splits = {}
  for split in cfg.split_names:
    split_shards = sorted(
        (_shard_entry(s, data_dir) for sp, s in shards if sp == split),
        key=lambda s: s['file'])
    fp = fps.get(split, {'fingerprint': format(0, '032x'), 'records': 0})
    splits[split] = {
        'inputs': inputs.get(split, 0),
        'dead_lettered': dead.get(split, 0),
        'examples': sum(before_c.get(split, {}).values()),
        'rebalance': cfg.rebalance if split in cfg.rebalance_splits else
                     'none',
        'records': sum(s['records'] for s in split_shards),
        # Records serialized before writing; must equal 'records'.
        'serialized': fp['records'],
        'class_counts_before_rebalance': dict(sorted(
            before_c.get(split, {}).items())),
        'class_counts': dict(sorted(after_c.get(split, {}).items())),
        'fingerprint': fp['fingerprint'],
        'shards': split_shards,
    }
  return splits


def _utc(seconds: float) -> str:
  return datetime.datetime.fromtimestamp(
      seconds, datetime.timezone.utc).isoformat(timespec='seconds')


def build_manifest(cfg, run: dict, feature_spec: dict, values: dict) -> dict:
  """Assembles the manifest from the pipeline's side outputs.

  Args:
    cfg: The PreprocessConfig.
    run: {'run_id', 'started' (epoch seconds)}, and 'data_dir' (the run
      folder's name; by default the run id's).
    feature_spec: The stored features.
    values: The side inputs FinalizeDataset collected:
      labels: Label names; a label's id is its index.
      inputs: [(split, inputs)] ('' for inputs that had no split).
      dead: [(split, dead letters)] ('' for those without one).
      before: [((split, label), count)] before rebalancing.
      after: [((split, label), count)] as written.
      shards: [(split, shard summary)].
      fingerprints: [(split, {'fingerprint', 'records'})].
      skipped: [count] of files listed but not used.
      dead_files: Dead-letter file paths.
      contents: The contents section (core/contents.py), if any.
      and whatever else the modality's manifest_section reads.

  Returns:
    The manifest dict.
  """
  inputs, dead = dict(values['inputs']), dict(values['dead'])
  data_dir = run.get('data_dir') or run_folder(run['run_id'])
  splits = _split_entries(cfg, values, inputs, dead, data_dir)
  section, normalization = cfg.plugin.manifest_section(cfg, values, splits)
  _warn_label_conflicts(values.get('contents'))
  case_variants = _case_variants(values['labels'])
  finished = time.time()
  return {
      'format_version': FORMAT_VERSION,
      'modality': cfg.modality,
      'name': cfg.name,
      'run_id': run['run_id'],
      'created': _utc(finished),
      'labels': values['labels'],
      # Groups of label names that differ only by case ('Cat', 'cat'):
      # separate classes, reported (names that differ by Unicode normal
      # form or surrounding whitespace were merged when read).
      'label_case_variants': case_variants,
      'feature_spec': feature_spec,
      cfg.modality: section,
      'compression': cfg.compression,
      'normalization': normalization,
      # Every file name below is relative to the output folder; the
      # dataset's files are in its run folder.
      'data_dir': data_dir,
      'transform_dir': data_dir,
      'splits': splits,
      'totals': _totals(values, inputs, dead, splits),
      # Split key, label conflicts and duplicates (core/contents.py); None
      # for modalities without a content key.
      'contents': values.get('contents'),
      'fingerprint': shards_lib.combine_fingerprints(
          s['fingerprint'] for s in splits.values()),
      'dead_letter': _dead_letter_entry(values['dead_files'],
                                        sum(dead.values()), data_dir),
      # Filled by FinalizeDataset when TFDS metadata is written.
      'tfds': None,
      'config': cfg.to_json(),
      'config_hash': cfg.config_hash(),
      'versions': library_versions(),
      'timings': {
          'started': _utc(run['started']),
          'finished': _utc(finished),
          'seconds': round(finished - run['started'], 3),
      },
  }


def _dropped_by_content_rules(contents: Optional[dict]) -> int:
  """Examples the content rules dropped on request: dead letters too, but
  not bad inputs, so they do not count against --max_bad_fraction."""
  dropped = sum(contents['dropped'].values()) if contents else 0
  # And near-duplicates dropped by --near_duplicates drop or their label
  # conflicts (core/near_duplicates.py).
  near = (contents or {}).get('near_duplicates') or {}
  return dropped + sum(near.get('dropped', {}).values())


def _totals(values: dict, inputs: Dict[str, int], dead: Dict[str, int],
            splits: Dict[str, dict]) -> dict:
  """The manifest's 'totals': counts over every split."""
  total_inputs = sum(inputs.values())
  total_dead = sum(dead.values())
  dropped = _dropped_by_content_rules(values.get('contents'))
  return {
      'inputs': total_inputs,
      'examples': sum(s['examples'] for s in splits.values()),
      'dead_lettered': total_dead,
      # Of those, dropped by --label_conflicts, --drop_duplicates or
      # --near_duplicates drop.
      'dropped_by_content_rules': dropped,
      'records': sum(s['records'] for s in splits.values()),
      'skipped_files': sum(values['skipped']),
      'bad_fraction': bad_fraction(total_dead - dropped, total_inputs),
  }


def _dead_letter_entry(dead_files: List[str], count: int,
                       data_dir: str) -> dict:
  """The manifest's 'dead_letter': the files, the count and each file's
  SHA-256."""
  return {
      'files': sorted(_in_run_folder(data_dir, p) for p in dead_files),
      'count': count,
      # What validation checks the files against (one may be deleted
      # or emptied by hand).
      'sha256': {_in_run_folder(data_dir, p): file_sha256(p)
                 for p in sorted(dead_files)},
  }


def _warn_label_conflicts(contents: Optional[dict]) -> None:
  """Logs contents, and groups of near-duplicates, that have more than one
  label (a few of each as examples)."""
  near = (contents or {}).get('near_duplicates') or {}
  if contents and contents['conflicting_contents']:
    _LOG.warning(
        '%d contents have more than one label (%d examples; '
        '--label_conflicts %s), e.g. %s', contents['conflicting_contents'],
        contents['conflicting_examples'], contents['label_conflicts'],
        '; '.join(', '.join(f'{i} ({label})' for i, label in
                            zip(c['ids'], c['labels']))
                  for c in contents['conflict_examples'][:3]))
  if near.get('label_conflicts'):
    listed = [g for g in near.get('examples', []) if len(g['labels']) > 1]
    _LOG.warning(
        '%d near-duplicate groups have more than one label (%d examples; '
        '--label_conflicts %s)%s', near['label_conflicts'],
        near['conflicting_examples'], contents['label_conflicts'],
        ', e.g. ' + '; '.join(
            ', '.join(g['ids']) + ' (' + ', '.join(
                f'{label} {n}' for label, n in g['labels'].items()) + ')'
            for g in listed[:3]) if listed else '')


def _case_variants(labels: List[str]) -> List[List[str]]:
  """Groups of label names that differ only by case (logged if any)."""
  case_variants = label_text.case_variants(labels)
  if case_variants:
    _LOG.warning(
        'label names that differ only by case stay separate classes: %s',
        '; '.join(', '.join(g) for g in case_variants[:5]))
  return case_variants


def quality_failures(cfg, manifest: dict) -> List[str]:
  """Reasons the run must not be published (empty when it may be)."""
  modality = cfg.plugin
  problems = []
  totals = manifest['totals']
  if totals['bad_fraction'] > cfg.max_bad_fraction:
    bad = totals['dead_lettered'] - totals.get('dropped_by_content_rules', 0)
    problems.append(
        f'{bad} of {totals["inputs"]} inputs '
        f'({totals["bad_fraction"]:.1%}) were dead-lettered, more than '
        f'--max_bad_fraction {cfg.max_bad_fraction:g} allows')
  for name, split in manifest['splits'].items():
    problems += modality.split_failures(name, split)
    if split['serialized'] != split['records']:
      problems.append(
          f'the {name} split lost records between serializing '
          f'({split["serialized"]}) and the written shards '
          f'({split["records"]})')
    if split['rebalance'] == 'none' and split['records'] != split['examples']:
      problems.append(
          f'the {name} split has {split["examples"]} examples but '
          f'{split["records"]} records were written')
  problems += modality.dataset_failures(manifest)
  if totals['records'] == 0:
    problems.append('no example could be written')
  elif (cfg.normalization in ('zscore', 'minmax') and
        not modality.statistics_analyzed(manifest)):
    problems.append('the train split has no examples to compute the '
                    'normalization statistics on')
  return problems


class FinalizeDataset(beam.PTransform):
  """Checks the run, then publishes it; runs once, after everything else.

  All inputs arrive as side inputs, so this step starts only when every
  shard, the transform and the dead letters are written.
  """

  def __init__(self, cfg, run: dict, staging: str, feature_spec: dict,
               singletons=('labels',), **side_inputs):
    """See build_manifest for the side inputs; `singletons` names those
    that hold one value (the others are lists)."""
    super().__init__()
    self._cfg, self._run, self._staging = cfg, run, staging
    self._spec = feature_spec
    self._singletons = set(singletons)
    self._side = side_inputs

  def expand(self, pbegin):
    cfg, run, staging, spec = self._cfg, self._run, self._staging, self._spec

    def finalize(_, **values):
      values.pop('transform_done', None)  # only orders this step
      # Every shard is written: the shuffle's files are not needed again
      # (kept neither in a published dataset nor in a refused run's folder).
      if getattr(cfg, 'local_shuffle', False):
        remove_tree(join(staging, SHUFFLE_TEMP))
      rules = getattr(cfg, 'contents', None)
      if rules is not None and rules.near:
        remove_tree(join(staging, HOLD_TEMP))
      if '://' not in staging:
        remove_tree(join(staging, KEYS_TEMP))
      # The manifest names the folder the files were written into.
      manifest = build_manifest(
          cfg, dict(run, data_dir=posixpath.basename(staging.rstrip('/'))),
          spec, values)
      problems = quality_failures(cfg, manifest)
      if problems:
        manifest['failures'] = problems
        _write_json(join(staging, FAILURE), manifest)
        raise DataQualityError('; '.join(problems))
      if getattr(cfg, 'tfds_metadata', False):
        written, seconds = tfds_lib.write(
            manifest, join(staging, TFDS_FOLDER), manifest['data_dir'])
        manifest['tfds'] = {'files': written, 'version': tfds_lib.VERSION,
                            'file_format': tfds_lib.FILE_FORMAT}
        _LOG.info('wrote the TFDS metadata (%s) in %.2f s', ', '.join(
            written), seconds)
      lease = run.get('lease')
      publish(cfg.output, manifest, overwrite=cfg.overwrite,
              check_writer=lease.check_held if lease else None)
      _LOG.info('published %d records to %s', manifest['totals']['records'],
                cfg.output)
      return manifest['totals']

    side = {name: (beam.pvalue.AsSingleton(pcoll) if name in self._singletons
                   else beam.pvalue.AsList(pcoll))
            for name, pcoll in self._side.items()}
    return (pbegin
            | 'Once' >> beam.Create([None])
            | 'CheckAndPublish' >> beam.Map(finalize, **side))
