"""Publishing is retry-safe: interrupted at any step and done again, it
ends with exactly the new run's dataset, or with the previous one intact.

Two real runs make the states: run A is published (and validated, so a
validation report of A sits beside its manifest); run B, over it with
--overwrite, is stopped at the point where it would publish, its run
folder kept. Each test copies that state and calls publish with B's
manifest, as the pipeline's last step does, with one step made to fail.
"""

import hashlib
import json
import shutil

import pytest

import imagegen
from pipelines import preprocess
from pipelines import validate
from transforms.output import manifest as manifest_lib

IMAGE = ['--max_pixels', '1000000', '--direct_running_mode', 'in_memory',
         '--direct_num_workers', '1', '--image_size', '24x24',
         '--num_shards', '2', '--index_files']


class _Stop(Exception):
  """Stands for a crash of the publishing step."""


@pytest.fixture(scope='module')
def states(tmp_path_factory):
  """(folder holding A published and B's unpublished run folder, A's
  manifest, B's manifest)."""
  root = tmp_path_factory.mktemp('publish')
  imagegen.write_good_images(str(root / 'photos'))
  out = root / 'out'
  first = preprocess.run(['--input', str(root / 'photos'), '--output',
                          str(out)] + IMAGE)
  assert validate.main(['--output', str(out)]) == validate.EXIT_SOUND
  captured = root / 'second_manifest.json'

  # Runs inside the pipeline (a pickled copy): it leaves the manifest in a
  # file.
  def stop_before_publishing(output, manifest, **kwargs):
    del kwargs
    captured.write_text(json.dumps(manifest))
    raise _Stop(output)

  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(manifest_lib, 'publish', stop_before_publishing)
    # Keep B's run folder, which a failed run removes.
    mp.setattr(preprocess, '_remove_tree', lambda path: None)
    with pytest.raises(Exception):
      preprocess.run(['--input', str(root / 'photos'), '--output', str(out),
                      '--overwrite', '--num_shards', '3'] +
                     IMAGE[:-3] + ['--index_files'])
  second = json.loads(captured.read_text())
  assert second['data_dir'] != first['data_dir']
  return out, first, second


def _sha256(path) -> str:
  return hashlib.sha256(path.read_bytes()).hexdigest()


def _intact(out, manifest, tfds=True) -> None:
  """`out` is exactly `manifest`'s dataset: the manifest on disk is it,
  every shard and index file it names is there with its checksum, and
  (with `tfds`) the TFDS files point into its run folder."""
  on_disk = json.loads((out / 'manifest.json').read_text())
  assert on_disk['run_id'] == manifest['run_id']
  for split in manifest['splits'].values():
    for shard in split['shards']:
      assert _sha256(out / shard['file']) == shard['sha256'], shard['file']
      assert (out / shard['index']).exists()
  assert not manifest_lib.missing_files(str(out), manifest)
  info = json.loads((out / 'dataset_info.json').read_text())
  [folder] = {s['filepathTemplate'].split('/')[0] for s in info['splits']}
  # Between the commit and the copy of the new TFDS files, TFDS still
  # reads the previous run folder, which is still there.
  assert folder == manifest['data_dir'] if tfds else (out / folder).is_dir()


def _published_cleanly(out, manifest) -> None:
  """Nothing but the dataset of `manifest` is left in `out`."""
  _intact(out, manifest)
  assert sorted(p.name for p in out.iterdir() if not p.name.startswith(
      '.lease')) == sorted(['manifest.json', manifest['data_dir']] +
                           manifest['tfds']['files'])
  run = out / manifest['data_dir']
  assert not (run / manifest_lib.TFDS_FOLDER).exists()
  assert not (run / manifest_lib.TFT_TEMP).exists()


def _copy(states, tmp_path):
  out, first, second = states
  target = tmp_path / 'out'
  shutil.copytree(out, target)
  return target, first, second


# The steps of publish, in order: the check of the named files, the
# commit, the TFDS files, removing the old run folder and temporary
# folders, a flat dataset and the old validation report.
STEPS = ['missing_files', '_write_json', '_publish_tfds_files', 'remove_tree',
         '_remove_flat_dataset', '_remove_stale_reports']


@pytest.mark.parametrize('when', ['before', 'after'])
@pytest.mark.parametrize('step', STEPS)
def test_publish_interrupted_at_each_step_then_retried(states, tmp_path,
                                                      monkeypatch, step,
                                                      when):
  out, first, second = _copy(states, tmp_path)
  original = getattr(manifest_lib, step)

  def crash(*args, **kwargs):
    if when == 'after':
      original(*args, **kwargs)
    raise _Stop(step)

  monkeypatch.setattr(manifest_lib, step, crash)
  with pytest.raises(_Stop):
    manifest_lib.publish(str(out), second)
  monkeypatch.setattr(manifest_lib, step, original)
  committed = json.loads((out / 'manifest.json').read_text())['run_id']
  if committed == first['run_id']:
    # Stopped before the commit: the previous dataset is as it was,
    # validation report included.
    assert STEPS.index(step) < 1 or (step == '_write_json' and
                                     when == 'before')
    _intact(out, first)
    assert (out / 'validation_report.json').exists()
    assert (out / first['data_dir']).exists()
  else:
    assert committed == second['run_id']
    _intact(out, second, tfds=False)
  # The retry (a runner repeating the step, or the run's own recovery)
  # finishes the job, and a second retry changes nothing.
  manifest_lib.publish(str(out), second)
  _published_cleanly(out, second)
  before = sorted(str(p) for p in out.rglob('*'))
  manifest_lib.publish(str(out), second)
  assert sorted(str(p) for p in out.rglob('*')) == before


def test_publishing_twice_keeps_the_shards(states, tmp_path):
  # The reported failure: a second attempt deleted the shards the first
  # had moved and wrote a manifest over zero shards.
  out, _, second = _copy(states, tmp_path)
  manifest_lib.publish(str(out), second)
  manifest_lib.publish(str(out), second)
  _published_cleanly(out, second)
  assert validate.main(['--output', str(out)]) == validate.EXIT_SOUND


def test_a_missing_shard_refuses_to_publish(states, tmp_path):
  out, first, second = _copy(states, tmp_path)
  shard = second['splits']['train']['shards'][0]['file']
  (out / shard).unlink()
  with pytest.raises(manifest_lib.PublishRefused, match='missing'):
    manifest_lib.publish(str(out), second)
  _intact(out, first)


def test_without_overwrite_a_dataset_published_meanwhile_is_kept(states,
                                                                 tmp_path):
  out, first, second = _copy(states, tmp_path)
  with pytest.raises(manifest_lib.PublishRefused,
                     match=first['run_id'] + '.*--overwrite'):
    manifest_lib.publish(str(out), second, overwrite=False)
  _intact(out, first)


def test_a_run_that_lost_its_lease_publishes_nothing(states, tmp_path):
  out, first, second = _copy(states, tmp_path)

  def taken():
    raise RuntimeError('run X took over the output')

  with pytest.raises(RuntimeError, match='took over'):
    manifest_lib.publish(str(out), second, check_writer=taken)
  _intact(out, first)


def test_a_stopped_process_publishes_nothing(states, tmp_path, monkeypatch):
  out, first, second = _copy(states, tmp_path)
  monkeypatch.setattr(manifest_lib, '_STOPPED', type(
      manifest_lib._STOPPED)())  # pylint: disable=protected-access
  manifest_lib.stop_publishing()
  with pytest.raises(manifest_lib.PublishRefused, match='cancelled'):
    manifest_lib.publish(str(out), second)
  _intact(out, first)


def test_a_flat_dataset_from_before_run_folders_is_replaced(states,
                                                           tmp_path):
  out, first, second = _copy(states, tmp_path)
  # The layout of datasets published before run folders: everything in
  # the output itself.
  for name in ('images-train.tfrecord-00000-of-00001',
               'images-train.tfrecord-00000-of-00001.idx',
               'dead_letter-00000-of-00001.jsonl',
               'transform_fn/saved_model.pb',
               'transformed_metadata/schema.pbtxt'):
    (out / name).parent.mkdir(exist_ok=True)
    (out / name).write_bytes(b'old')
  del first
  manifest_lib.publish(str(out), second)
  _published_cleanly(out, second)
