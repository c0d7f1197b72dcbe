"""Images decoded by the local worker processes while the pipeline is
built (decode.start_early): real runs, real processes, real files.

The early results must be taken up only where they are what decoding then
would give: the output must be byte for byte that of a run that decodes
everything in the pipeline, and a file changed after it was listed must be
decoded again.
"""

import hashlib
import logging
import os
import signal

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import numpy as np
from PIL import Image
import pytest

import imagegen
from pipelines import preprocess
from transforms.core import processes
from transforms.core.dead_letters import DEAD
from transforms.modalities.image import decode
from transforms.modalities.image import inputs
from transforms.modalities.image import processing

ARGS = ['--max_pixels', '1000000', '--max_bad_fraction', '0.5',
        '--progress', 'off']
USED = 'transforms.modalities.image.decode'


@pytest.fixture(scope='module')
def tree(tmp_path_factory):
  # Good images of every format, the bad ones (truncated, empty, not an
  # image, corrupt, over the pixel limit), in nested class folders.
  root = tmp_path_factory.mktemp('early')
  imagegen.write_good_images(str(root))
  imagegen.write_bad_images(str(root))
  return root


def _files(out):
  """{name: sha256} of every record and dead-letter file of a dataset."""
  [run] = [d for d in os.listdir(out) if d.startswith('run-')]
  folder = os.path.join(out, run)
  return {name: hashlib.sha256(open(os.path.join(folder, name), 'rb').read()
                               ).hexdigest()
          for name in sorted(os.listdir(folder))
          if os.path.isfile(os.path.join(folder, name))}


def test_a_run_with_early_decoding_writes_the_same_bytes(tree, tmp_path,
                                                         caplog, monkeypatch):
  caplog.set_level(logging.INFO)
  args = ['--input', str(tree), '--local_processes', '2'] + ARGS
  early = preprocess.run(args + ['--output', str(tmp_path / 'early')])
  assert 'started 34 inputs in the local worker processes' in caplog.text
  assert ('used 34 of the 34 images decoded while the pipeline was built'
          in caplog.text)
  caplog.clear()
  # The same run with no memory for early results decodes everything in
  # the pipeline.
  monkeypatch.setattr(decode, 'EARLY_BYTES', 0)
  late = preprocess.run(args + ['--output', str(tmp_path / 'late')])
  assert 'decoded while the pipeline was built' not in caplog.text
  assert early['fingerprint'] == late['fingerprint']
  assert early['totals'] == late['totals']
  assert early['totals']['dead_lettered'] == 5
  files = _files(tmp_path / 'early')
  assert any('.tfrecord' in name for name in files)
  assert files == _files(tmp_path / 'late')


def test_runs_that_read_each_image_twice_start_nothing_early(tree, tmp_path,
                                                              caplog):
  # Dropping duplicates decodes a first pass with another kernel.
  caplog.set_level(logging.INFO)
  preprocess.run(['--input', str(tree), '--output', str(tmp_path / 'out'),
                  '--local_processes', '2', '--drop_duplicates'] + ARGS)
  assert 'local worker processes while the pipeline is built' not in (
      caplog.text)


def _pngs(folder, names, seed):
  rng = np.random.default_rng(seed)
  paths = []
  for name in names:
    path = os.path.join(folder, name)
    Image.fromarray(rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)).save(
        path, format='PNG')
    paths.append(path)
  return paths


def test_a_file_changed_after_listing_is_decoded_again(tmp_path, caplog):
  caplog.set_level(logging.INFO)
  cfg = processing.ImageConfig(height=16, width=16)
  paths = _pngs(str(tmp_path), [f'{i}.png' for i in range(12)], 0)
  assert decode.start_early(paths, cfg, 2) == 12
  for entry in list(decode._EARLY.values()):  # pylint: disable=protected-access
    entry.future.result()  # every early result is there
  # Once listed, one file gets other pixels (another size and time), one
  # is removed, and one is asked for with other options.
  changed, removed = paths[3], paths[7]
  _pngs(str(tmp_path), ['3.png'], 99)
  os.remove(removed)
  assert decode.early_result(paths[0], processing.ImageConfig(
      height=16, width=16, storage='png')) is None

  def digest(path):
    with open(path, 'rb') as f:
      return processing.process_image(f.read(), cfg, path).content

  kept = [p for p in paths if p != removed]
  tasks = [(inputs.InputRef(p, os.path.basename(p), 'cat', 'train'), 0,
            True, None) for p in paths]
  try:
    with TestPipeline() as p:
      out = (p | beam.Create(tasks) | beam.ParDo(
          decode.DecodeImageFn(cfg, processes=2)).with_outputs(
              DEAD, main='examples'))
      assert_that(out.examples | beam.Map(lambda ex: (ex['id'],
                                                      ex['content'])),
                  equal_to([(os.path.basename(p), digest(p)) for p in kept]),
                  label='Contents')
      assert_that(out[DEAD] | beam.Map(lambda d: (d['input'], d['stage'])),
                  equal_to([(removed, 'read')]), label='Dead')
  finally:
    decode.stop_early()
  # The other nine came from the early decoding.
  assert ('used 9 of the 12 images decoded while the pipeline was built'
          in caplog.text)


def test_a_worker_killed_during_early_decoding_loses_nothing(tmp_path,
                                                             caplog):
  # The out-of-memory killer ends a worker while the early calls run: they
  # fail with the pool, and the DoFn decodes those images itself.
  caplog.set_level(logging.INFO)
  cfg = processing.ImageConfig(height=16, width=16)
  names = [f'{i:03d}.png' for i in range(120)]
  paths = _pngs(str(tmp_path), names, 1)
  assert decode.start_early(paths, cfg, 2) == 120
  pool = processes.shared_pool(2, (processing.__name__,))
  os.kill(next(iter(pool._processes)), signal.SIGKILL)  # pylint: disable=protected-access
  tasks = [(inputs.InputRef(p, os.path.basename(p), 'cat', 'train'), 0,
            True, None) for p in paths]
  try:
    with TestPipeline() as p:
      out = (p | beam.Create(tasks) | beam.ParDo(
          decode.DecodeImageFn(cfg, processes=2)).with_outputs(
              DEAD, main='examples'))
      assert_that(out.examples | beam.Map(lambda ex: ex['id']),
                  equal_to(names), label='Ids')
      assert_that(out[DEAD], equal_to([]), label='Dead')
  finally:
    decode.stop_early()
  assert 'of the 120 images decoded while the pipeline was built' in (
      caplog.text)


def test_the_early_budget_follows_the_stored_size():
  jpeg = processing.ImageConfig(height=224, width=224)
  raw = processing.ImageConfig(height=224, width=224, storage='uint8')
  assert decode.early_limit(jpeg) == decode.EARLY_BYTES // (224 * 224 * 3 // 4)
  assert decode.early_limit(raw) == decode.EARLY_BYTES // (224 * 224 * 3)
