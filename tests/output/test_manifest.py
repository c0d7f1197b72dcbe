"""The manifest's arithmetic and the quality gate, as plain functions."""

import time

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import options as options_lib
from transforms.output import manifest as manifest_lib


def _cfg(*flags):
  return options_lib.resolve_config(PipelineOptions(
      ['--input', 'in', '--output', 'out', '--splits',
       'train=0.5,test=0.5'] + list(flags)))


def _manifest(cfg, written=None, serialized=None, dead=None):
  """A manifest for 10 train + 10 test inputs (cats and dogs)."""
  dead = dead or {}
  before = [(('train', 'cat'), 6 - dead.get('train', 0)), (('train', 'dog'), 4),
            (('test', 'cat'), 5), (('test', 'dog'), 5)]
  written = written if written is not None else {'train': 10 - dead.get(
      'train', 0), 'test': 10}
  serialized = serialized if serialized is not None else written
  shards = [(split, {'path': f'/s/images-{split}.tfrecord-00000-of-00001',
                     'records': n, 'bytes': 100, 'sha256': 'x'})
            for split, n in written.items()]
  fps = [(split, {'fingerprint': format(7, '032x'), 'records': n})
         for split, n in serialized.items()]
  return manifest_lib.build_manifest(
      cfg, {'run_id': 'r', 'started': time.time()},
      {'image': {'dtype': 'string', 'shape': []}},
      {'labels': ['cat', 'dog'], 'inputs': {'train': 10, 'test': 10},
       'dead': dead, 'before': before, 'after': before, 'shards': shards,
       'fingerprints': fps,
       'channel_stats': {'count': 10, 'mean': [0.5] * 3, 'std': [0.2] * 3},
       'formats': {'formats': {'JPEG': 20}, 'format_mismatches': {}},
       'skipped': [0], 'dead_files': []})


def test_a_sound_run_passes_the_gate():
  cfg = _cfg()
  m = _manifest(cfg)
  assert manifest_lib.quality_failures(cfg, m) == []
  assert m['totals'] == {'inputs': 20, 'examples': 20, 'dead_lettered': 0,
                         'dropped_by_content_rules': 0, 'records': 20,
                         'skipped_files': 0, 'bad_fraction': 0.0}
  assert m['splits']['train']['class_counts'] == {'cat': 6, 'dog': 4}
  assert m['fingerprint'] == format(14, '032x')  # sum of the splits'


def test_too_many_bad_inputs_fail_the_gate():
  cfg = _cfg('--max_bad_fraction', '0.04')
  m = _manifest(cfg, dead={'train': 1})
  [problem] = manifest_lib.quality_failures(cfg, m)
  assert '1 of 20 inputs (5.0%)' in problem and '0.04' in problem
  assert manifest_lib.quality_failures(_cfg(), m) == []  # 0.05 allows it


def test_records_lost_in_writing_fail_the_gate():
  cfg = _cfg()
  m = _manifest(cfg, written={'train': 9, 'test': 10},
                serialized={'train': 10, 'test': 10})
  problems = manifest_lib.quality_failures(cfg, m)
  assert any('lost records between serializing (10) and the written shards '
             '(9)' in p for p in problems)


def test_examples_lost_before_writing_fail_the_gate():
  cfg = _cfg()
  m = _manifest(cfg, written={'train': 9, 'test': 10})
  problems = manifest_lib.quality_failures(cfg, m)
  assert any('has 10 examples but 9 records were written' in p
             for p in problems)


def test_inputs_not_accounted_for_fail_the_gate():
  cfg = _cfg()
  m = _manifest(cfg)
  m['splits']['test']['examples'] = 9  # one input neither written nor dead
  problems = manifest_lib.quality_failures(cfg, m)
  assert any('10 inputs but 9 examples and 0 dead letters' in p
             for p in problems)


def test_nothing_written_fails_the_gate():
  cfg = _cfg()
  m = _manifest(cfg, written={'train': 0, 'test': 0})
  assert any('no example could be written' in p
             for p in manifest_lib.quality_failures(cfg, m))
