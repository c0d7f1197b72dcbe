"""Which runs start their local worker processes before the pipeline is
built (Modality.worker_modules, pipelines/preprocess._start_workers_early):
every image run that has them; a sensor or text run only when a local CSV
or TSV file is large enough to be read in ranges, so that a small run
starts no process it would not use. The modules are the ones the DoFns
ask for, so the DoFns get the pool started early."""

import types

from transforms import modalities
from transforms.modalities.image import decode
from transforms.modalities.sensor import inputs as sensor_inputs
from transforms.modalities.text import pipeline as text_pipeline
from transforms.sources import tables


def _cfg(processes, near=False):
  return types.SimpleNamespace(local_processes=processes,
                               contents=types.SimpleNamespace(near=near))


def _files(tmp_path):
  """A small CSV, a CSV of two ranges (sparse: only its size is read),
  and a large file that is not a table."""
  small = tmp_path / 'small.csv'
  small.write_text('time,device,value\n1,a,2\n')
  large = tmp_path / 'large.csv'
  with open(large, 'wb') as f:
    f.truncate(2 * tables.RANGE_BYTES)
  other = tmp_path / 'large.parquet'
  with open(other, 'wb') as f:
    f.truncate(2 * tables.RANGE_BYTES)
  return str(small), str(large), str(other)


def test_text_starts_workers_only_for_a_table_read_in_ranges(tmp_path):
  small, large, other = _files(tmp_path)
  text = modalities.get('text')

  def plan(kind, files):
    return text_pipeline.TextInput(kind, files, str(tmp_path), None)

  assert text.worker_modules(_cfg(2), plan('table', [small])) == ()
  assert text.worker_modules(_cfg(2), plan('table', [other])) == ()
  assert text.worker_modules(_cfg(2), plan('folder', [large])) == ()
  assert text.worker_modules(_cfg(0), plan('table', [large])) == ()
  assert text.worker_modules(_cfg(2), plan('table', [small, large])) == (
      text_pipeline.WORKER_MODULES)
  assert text_pipeline.WORKER_MODULES == ('transforms.modalities.text.ranges',)
  # A run that signs its documents loads the signatures' compiled loops
  # in its workers as they start (reader_modules: what the reading DoFn
  # asks its pool for).
  assert text.worker_modules(_cfg(2, near=True), plan('table', [large])) == (
      'transforms.modalities.text.ranges',
      'transforms.modalities.text.signature_kernels') == (
          text_pipeline.reader_modules(_cfg(2, near=True)))
  assert text.worker_modules(_cfg(2, near=True), plan('table', [small])) == ()


def test_sensor_starts_workers_only_for_a_file_read_in_ranges(tmp_path):
  small, large, _ = _files(tmp_path)
  sensor = modalities.get('sensor')

  def plan(pattern):
    return sensor_inputs.SensorInput(pattern, str(tmp_path), None)

  assert sensor.worker_modules(_cfg(2), plan(small)) == ()
  assert sensor.worker_modules(_cfg(0), plan(large)) == ()
  assert sensor.worker_modules(_cfg(2), plan('gs://bucket/large.csv')) == ()
  assert sensor.worker_modules(_cfg(2), plan(large)) == (
      sensor_inputs.WORKER_MODULES)
  # A folder's files, listed by a pattern.
  assert sensor.worker_modules(_cfg(2), plan(str(tmp_path / '*.csv'))) == (
      sensor_inputs.WORKER_MODULES)
  assert sensor.worker_modules(_cfg(2), plan(str(tmp_path / 's*.csv'))) == ()


def test_images_start_workers_whenever_they_have_them():
  image = modalities.get('image')
  assert image.worker_modules(_cfg(2), None) == decode.WORKER_MODULES
  assert image.worker_modules(_cfg(0), None) == ()
  assert decode.WORKER_MODULES == ('transforms.modalities.image.processing',)
