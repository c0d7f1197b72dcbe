"""Beam counters of a whole run (transforms/core/metrics.py) against its
manifest.

The skeleton (core/skeleton.PreprocessDataset) runs in this process on the
DirectRunner over a small image folder with good images, bad ones and a
file that is not an image, and publishes its manifest. The counters of the
image namespace, read from the PipelineResult, must then agree with the
manifest's exact totals and with what the folder holds: `decoded` with the
examples (no rebalancing, so no extra copies are decoded), `dead_lettered`
with the dead letters, `serialized` with the records written and `skipped`
with the files that are not inputs.
"""

import json
import os
import time

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

import imagegen
from pipelines import options as options_lib
from transforms.core import skeleton
from transforms.output import manifest as manifest_lib

NAMESPACE = 'tfrecord.image'


def _counters(result, namespace: str = NAMESPACE) -> dict:
  """{name: committed sum (attempted where committed is not kept)} of the
  namespace's counters."""
  found = result.metrics().query(
      MetricsFilter().with_namespace(namespace))['counters']
  sums = {}
  for c in found:
    try:
      value = c.committed
    except (AttributeError, NotImplementedError):
      value = None
    value = c.attempted if value is None else value
    name = c.key.metric.name
    sums[name] = sums.get(name, 0) + value
  return sums


def test_counters_agree_with_the_manifest(tmp_path):
  root, output = str(tmp_path / 'images'), str(tmp_path / 'out')
  good = imagegen.write_good_images(root)
  bad = imagegen.write_bad_images(root)
  cfg, result, manifest = _run_skeleton([
      '--input', root, '--output', output, '--max_pixels', '1000000',
      '--max_bad_fraction', '0.5', '--image_size', '32'], tmp_path)
  assert cfg.modality == 'image' and cfg.rebalance == 'none'
  assert manifest['run_id'] == 'test'
  totals = manifest['totals']
  # The manifest counts what the folder holds (README.txt is not an image).
  assert totals['examples'] == totals['records'] == sum(good.values())
  assert totals['dead_lettered'] == len(bad)
  assert totals['skipped_files'] == 1
  counters = _counters(result)
  assert sorted(counters) == ['dead_lettered', 'decoded', 'serialized',
                              'skipped']
  assert counters['decoded'] == totals['examples']
  assert counters['dead_lettered'] == totals['dead_lettered']
  assert counters['serialized'] == totals['records']
  assert counters['skipped'] == totals['skipped_files']
  assert counters['serialized'] == sum(
      s['serialized'] for s in manifest['splits'].values())


def _run_skeleton(argv, tmp_path):
  """Runs PreprocessDataset in this process; (cfg, result, published
  manifest)."""
  cfg = options_lib.resolve_config(PipelineOptions(argv))
  plan = cfg.plugin.check_input(cfg)
  staging = os.path.join(cfg.output, manifest_lib.run_folder('test'))
  os.makedirs(staging)
  run = {'run_id': 'test', 'started': time.time(),
         'tft_temp': str(tmp_path / 'tft_tmp')}
  p = beam.Pipeline(options=PipelineOptions(
      ['--direct_running_mode', 'in_memory']))
  _ = p | 'PreprocessDataset' >> skeleton.PreprocessDataset(
      cfg, run, staging, plan)
  result = p.run()
  result.wait_until_finish()
  with open(os.path.join(cfg.output, manifest_lib.MANIFEST),
            encoding='utf-8') as f:
    return cfg, result, json.load(f)


def test_text_counters_agree_with_the_manifest(tmp_path):
  rows = ['text,label'] + [f'"word{i % 7} other{i % 3} more",c{i % 3}'
                           for i in range(120)]
  rows += [',c0', '"no label here",']  # two dead letters
  src = tmp_path / 'docs.csv'
  src.write_text('\n'.join(rows) + '\n', encoding='utf-8')
  _, result, manifest = _run_skeleton(
      ['--modality', 'text', '--input', str(src), '--output',
       str(tmp_path / 'out'), '--max_bad_fraction', '0.5'], tmp_path)
  totals = manifest['totals']
  assert (totals['examples'], totals['dead_lettered']) == (120, 2)
  counters = _counters(result, 'tfrecord.text')
  assert counters == {'parsed': totals['examples'],
                      'dead_lettered': totals['dead_lettered'],
                      'serialized': totals['records']}
