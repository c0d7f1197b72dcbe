"""Publishing is retry-safe: interrupted at any step and done again, it
ends with exactly the new run's dataset, or with the previous one intact.

Two real runs make the states: run A is published (and validated, so a
validation report of A sits beside its manifest); run B, over it with
--overwrite, is stopped at the point where it would publish, its run
folder kept. Each test copies that state and calls publish with B's
manifest, as the pipeline's last step does, with one step made to fail;
the last tests do the same on an object store (an in-memory stand-in for
GCS registered with Beam's FileSystems: no bucket is reachable here).
"""

import hashlib
import io
import json
import shutil

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystem import FileMetadata
from apache_beam.io.filesystem import FileSystem
import pytest

import imagegen
from pipelines import preprocess
from pipelines import run_folders
from pipelines import validate
from transforms.output import lease as lease_lib
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
    mp.setattr(run_folders, 'remove_tree', lambda path: None)
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


class ObjectStore(FileSystem):
  """An object store in memory, shaped like GCS as Beam sees it: objects
  under names, no folders, a prefix deleted only when it ends in '/', and
  no rename (publishing must not need one)."""

  objects = {}

  @classmethod
  def scheme(cls):
    return 'objstore'

  def join(self, basepath, *paths):
    return '/'.join([basepath.rstrip('/')] + [p.strip('/') for p in paths])

  def split(self, path):
    head, _, tail = path.rstrip('/').rpartition('/')
    return head, tail

  def mkdirs(self, path):
    pass

  def has_dirs(self):
    return False

  def _list(self, dir_or_prefix):
    for name in sorted(self.objects):
      if name.startswith(dir_or_prefix):
        yield FileMetadata(name, len(self.objects[name]), 0.0)

  def create(self, path, mime_type='application/octet-stream',
             compression_type=CompressionTypes.AUTO):
    store = self.objects

    class Upload(io.BytesIO):
      # The object appears, whole, when the upload is closed.
      def close(self):
        store[path] = self.getvalue()
        super().close()

    return Upload()

  def open(self, path, mime_type='application/octet-stream',
           compression_type=CompressionTypes.AUTO):
    return io.BytesIO(self.objects[path])

  def copy(self, source_file_names, destination_file_names):
    for source, target in zip(source_file_names, destination_file_names):
      self.objects[target] = self.objects[source]

  def rename(self, source_file_names, destination_file_names):
    raise AssertionError('an object store has no rename')

  def exists(self, path):
    return path in self.objects

  def size(self, path):
    return len(self.objects[path])

  def last_updated(self, path):
    return 0.0

  def checksum(self, path):
    return hashlib.md5(self.objects[path]).hexdigest()

  def metadata(self, path):
    return FileMetadata(path, self.size(path), 0.0)

  def delete(self, paths):
    for path in paths:
      if path.endswith('/'):
        for name in [n for n in self.objects if n.startswith(path)]:
          del self.objects[name]
      else:
        self.objects.pop(path, None)


def _upload(folder, prefix):
  ObjectStore.objects.clear()
  for path in folder.rglob('*'):
    if path.is_file():
      ObjectStore.objects[f'{prefix}/{path.relative_to(folder)}'] = (
          path.read_bytes())


def _names(prefix):
  return sorted(n[len(prefix) + 1:] for n in ObjectStore.objects
                if n.startswith(prefix + '/'))


@pytest.mark.parametrize('stop', [None, '_write_json', '_publish_tfds_files',
                                  'remove_tree'])
def test_publishing_on_an_object_store(states, monkeypatch, stop):
  out, first, second = states
  prefix = 'objstore://bucket/datasets/nightly'
  _upload(out, prefix)
  if stop:
    original = getattr(manifest_lib, stop)

    def crash(*args, **kwargs):
      del args, kwargs
      raise _Stop(stop)

    monkeypatch.setattr(manifest_lib, stop, crash)
    with pytest.raises(_Stop):
      manifest_lib.publish(prefix, second)
    monkeypatch.setattr(manifest_lib, stop, original)
    expected = first if stop == '_write_json' else second
    assert manifest_lib.read_manifest(prefix)['run_id'] == expected['run_id']
    assert not manifest_lib.missing_files(prefix, expected)
  manifest_lib.publish(prefix, second)
  names = _names(prefix)
  assert manifest_lib.read_manifest(prefix)['run_id'] == second['run_id']
  assert not manifest_lib.missing_files(prefix, second)
  for split in second['splits'].values():
    for shard in split['shards']:
      data = ObjectStore.objects[f'{prefix}/{shard["file"]}']
      assert hashlib.sha256(data).hexdigest() == shard['sha256']
  # Only the new run's folder, and no temporary folder in it, is left.
  assert {n.split('/')[0] for n in names if '/' in n} == {second['data_dir']}
  assert not [n for n in names if f'/{manifest_lib.TFDS_FOLDER}/' in n or
              f'/{manifest_lib.TFT_TEMP}/' in n]
  # Beside it: the manifest and the TFDS files (A's validation report
  # went with A).
  assert sorted(n for n in names if '/' not in n and not n.startswith(
      '.lease')) == sorted(['manifest.json'] + second['tfds']['files'])
  info = json.loads(ObjectStore.objects[f'{prefix}/dataset_info.json'])
  assert info['splits'][0]['filepathTemplate'].startswith(
      second['data_dir'] + '/')


def test_the_lease_through_beams_file_systems():
  ObjectStore.objects.clear()
  prefix = 'objstore://bucket/datasets/nightly'
  first = lease_lib.Lease(prefix, 'first', seconds=60)
  second = lease_lib.Lease(prefix, 'second', seconds=60)
  first.acquire()
  assert json.loads(ObjectStore.objects[prefix + '/.lease.json'])[
      'run_id'] == 'first'
  with pytest.raises(lease_lib.OutputBusy, match='run first'):
    second.acquire()
  first.check_held()
  first.release()
  assert prefix + '/.lease.json' not in ObjectStore.objects
  second.acquire()
  with pytest.raises(lease_lib.LeaseLost):
    first.check_held()
  second.release()
