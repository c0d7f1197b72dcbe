"""The manifest, the quality gate, and publishing a finished dataset.

A run writes everything into a staging folder inside the output
(`<output>/.staging-<run id>/`). Only when every shard, the transform and the
dead letters are written does `FinalizeDataset` (the pipeline's last step)
check the counts, write the TFDS metadata files (transforms/tfds_metadata)
into staging, move the files into `<output>/` and write `manifest.json`
last. Readers and the validation pipeline only accept a folder with a
manifest, so a failed or killed run never leaves a dataset that looks
complete, and shards of two runs are never mixed: publishing first removes
every file of the previous dataset.
"""

import datetime
import importlib.metadata
import json
import logging
import platform
import posixpath
import time
from typing import Dict, List, Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms.core.dead_letters import DEAD_LETTER_PREFIX
from transforms.core.errors import DataQualityError
from transforms.output.paths import join
from transforms.output import shards as sinks
from transforms.output import tfds_metadata as tfds_lib

_LOG = logging.getLogger(__name__)

MANIFEST = 'manifest.json'
FAILURE = 'FAILED.json'
FORMAT_VERSION = 1
TRANSFORM_DIRS = ('transform_fn', 'transformed_metadata')
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
  """Writes JSON atomically where the file system allows it."""
  payload = json.dumps(data, indent=2, sort_keys=False,
                       ensure_ascii=False).encode('utf-8')
  tmp = path + '.tmp'
  with FileSystems.create(tmp, compression_type='uncompressed') as f:
    f.write(payload)
  if FileSystems.exists(path):
    FileSystems.delete([path])
  FileSystems.rename([tmp], [path])


def _delete_matching(patterns: List[str]) -> None:
  paths = []
  for result in FileSystems.match(patterns):
    paths.extend(m.path for m in result.metadata_list)
  if paths:
    FileSystems.delete(paths)


def _gfile():
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return tf.io.gfile


def remove_dataset(output: str) -> None:
  """Removes a published dataset: the manifest first, then its files
  (shards, dead letters, validation report, TFDS metadata, transform)."""
  manifest = join(output, MANIFEST)
  if FileSystems.exists(manifest):
    FileSystems.delete([manifest])
  # '*.tfrecord*' also takes the shards' index files ('<shard>.idx').
  _delete_matching([join(output, '*.tfrecord*'),
                    join(output, DEAD_LETTER_PREFIX + '*'),
                    join(output, 'validation_report*')] +
                   [join(output, p) for p in tfds_lib.PATTERNS])
  gfile = _gfile()
  for d in TRANSFORM_DIRS:
    path = join(output, d)
    if gfile.exists(path):
      gfile.rmtree(path)


def publish(staging: str, output: str, files: List[str],
            manifest: dict) -> None:
  """Moves a finished run from staging into `output`; the manifest last.

  Args:
    staging: The run's staging folder.
    output: The dataset folder.
    files: File names (relative to staging) to move.
    manifest: The manifest to write.
  """
  remove_dataset(output)
  sources = [join(staging, f) for f in files]
  present = [s for s in sources if FileSystems.exists(s)]
  targets = [join(output, posixpath.relpath(s, staging)) for s in present]
  if present:
    FileSystems.rename(present, targets)
  gfile = _gfile()
  for d in TRANSFORM_DIRS:
    src = join(staging, d)
    if gfile.exists(src):
      gfile.rename(src, join(output, d), overwrite=True)
  _write_json(join(output, MANIFEST), manifest)
  if gfile.exists(staging):
    gfile.rmtree(staging)


def bad_fraction(dead: int, inputs: int) -> float:
  return dead / inputs if inputs else 0.0


def _counts_by_split(pairs) -> Dict[str, Dict[str, int]]:
  out: Dict[str, Dict[str, int]] = {}
  for (split, label), n in pairs:
    out.setdefault(split, {})[label] = out.get(split, {}).get(label, 0) + n
  return out


def _shard_entry(summary: dict) -> dict:
  """A shard's manifest entry; 'index' names its index file, if any."""
  entry = {'file': posixpath.basename(summary['path']),
           'records': summary['records'], 'bytes': summary['bytes'],
           'sha256': summary['sha256']}
  if summary.get('index'):
    entry['index'] = posixpath.basename(summary['index'])
  return entry


def _split_entries(cfg, values: dict, inputs: Dict[str, int],
                   dead: Dict[str, int]) -> Dict[str, dict]:
  """The manifest's entry of every split: counts, classes, shards."""
  before_c = _counts_by_split(values['before'])
  after_c = _counts_by_split(values['after'])
  fps = dict(values['fingerprints'])
  shards = values['shards']
  splits = {}
  for split in cfg.split_names:
    split_shards = sorted(
        (_shard_entry(s) for sp, s in shards if sp == split),
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
    run: {'run_id', 'started' (epoch seconds)}.
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
      and whatever else the modality's manifest_section reads.

  Returns:
    The manifest dict.
  """
  inputs, dead = dict(values['inputs']), dict(values['dead'])
  splits = _split_entries(cfg, values, inputs, dead)
  section, normalization = cfg.plugin.manifest_section(cfg, values, splits)
  total_inputs = sum(inputs.values())
  total_dead = sum(dead.values())
  finished = time.time()
  dead_files = values['dead_files']
  return {
      'format_version': FORMAT_VERSION,
      'modality': cfg.modality,
      'name': cfg.name,
      'run_id': run['run_id'],
      'created': _utc(finished),
      'labels': values['labels'],
      'feature_spec': feature_spec,
      cfg.modality: section,
      'compression': cfg.compression,
      'normalization': normalization,
      'transform_dir': '.',
      'splits': splits,
      'totals': {
          'inputs': total_inputs,
          'examples': sum(s['examples'] for s in splits.values()),
          'dead_lettered': total_dead,
          'records': sum(s['records'] for s in splits.values()),
          'skipped_files': sum(values['skipped']),
          'bad_fraction': bad_fraction(total_dead, total_inputs),
      },
      'fingerprint': sinks.combine_fingerprints(
          s['fingerprint'] for s in splits.values()),
      'dead_letter': {
          'files': sorted(posixpath.basename(p) for p in dead_files),
          'count': total_dead,
      },
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


def quality_failures(cfg, manifest: dict) -> List[str]:
  """Reasons the run must not be published (empty when it may be)."""
  modality = cfg.plugin
  problems = []
  totals = manifest['totals']
  if totals['bad_fraction'] > cfg.max_bad_fraction:
    problems.append(
        f'{totals["dead_lettered"]} of {totals["inputs"]} inputs '
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
      manifest = build_manifest(cfg, run, spec, values)
      problems = quality_failures(cfg, manifest)
      if problems:
        manifest['failures'] = problems
        _write_json(join(staging, FAILURE), manifest)
        raise DataQualityError('; '.join(problems))
      files = [posixpath.basename(s[key]) for _, s in values['shards']
               for key in ('path', 'index') if s.get(key)]
      files += [posixpath.basename(p) for p in values['dead_files']]
      if getattr(cfg, 'tfds_metadata', False):
        written, seconds = tfds_lib.write(manifest, staging)
        manifest['tfds'] = {'files': written, 'version': tfds_lib.VERSION,
                            'file_format': tfds_lib.FILE_FORMAT}
        files += written
        _LOG.info('wrote the TFDS metadata (%s) in %.2f s', ', '.join(
            written), seconds)
      publish(staging, cfg.output, files, manifest)
      _LOG.info('published %d records to %s', manifest['totals']['records'],
                cfg.output)
      return manifest['totals']

    side = {name: (beam.pvalue.AsSingleton(pcoll) if name in self._singletons
                   else beam.pvalue.AsList(pcoll))
            for name, pcoll in self._side.items()}
    return (pbegin
            | 'Once' >> beam.Create([None])
            | 'CheckAndPublish' >> beam.Map(finalize, **side))
