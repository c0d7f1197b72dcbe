"""Inputs on gs:// read onto local disk, against a real GCS server on
loopback (tests/gcs_server.py), as a user would: the bucket named to the
client libraries by STORAGE_EMULATOR_HOST, the dataset written locally.
(Runs with their output on gs:// too: test_gcs_runs.py.)
"""

import sys

from engines_lib import assert_remote_input_reads_as_on_disk
from engines_lib import env as user_env
from engines_lib import run
from gcs_server import BUCKET
from gcs_server import without_server


def test_an_input_on_gs_gives_the_local_inputs_dataset(gcs, store_samples,
                                                       tmp_path):
  folder, _ = store_samples['image']
  remote = f'gs://{BUCKET}/inputs-image'
  assert gcs.upload(str(folder), remote) > 0
  local = without_server(user_env())
  assert_remote_input_reads_as_on_disk('image', remote, folder, '',
                                       gcs.env(local), local, str(tmp_path))


def test_a_folder_in_a_bucket_is_found(gcs, store_samples):
  """A bucket has no folders, only names with slashes: gs://b/in exists
  when an object's name starts with in/ (the input check asks)."""
  folder, _ = store_samples['image']
  gcs.upload(str(folder / 'cat'), f'gs://{BUCKET}/photos/cat')
  code = ('from transforms.sources import files; '
          f'print(files.exists("gs://{BUCKET}/photos"), '
          f'files.exists("gs://{BUCKET}/photos/cat"), '
          f'files.exists("gs://{BUCKET}/phot"), '
          f'files.exists("gs://{BUCKET}/nothing"))')
  proc = run([sys.executable, '-c', code], timeout=120,
             environment=gcs.env(without_server(user_env())))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.split() == ['True', 'True', 'False', 'False']
