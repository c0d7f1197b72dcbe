"""Every modality end to end on gs://, against a real GCS server on
loopback (tests/gcs_server.py), as a user on a cluster would run it.

The input is uploaded to the server; the run reads it and writes its
dataset through Beam's GCS file system and TensorFlow's (tf.Transform's
temp files and exported transform); `pipelines.validate`, our reader
(verify=True, with and without the transform) and TFDS's
builder_from_directory read it back from gs://. The dataset must be the
one a run of the same files on local disk publishes: same fingerprint,
counts, dead letters (the input's path aside) and time shape, one run
folder, and the same examples read back.
"""

import json
import os
import sys

import pytest

from engines_lib import FLAGS
from engines_lib import assert_same_dataset
from engines_lib import dataset_facts
from engines_lib import env as user_env
from engines_lib import preprocess_ok
from engines_lib import run
from gcs_server import BUCKET
from gcs_server import without_server
import repo

READ_BACK = os.path.join(repo.ROOT, 'tests', 'stores', 'read_back.py')


def _read_back(output, environment):
  proc = run([sys.executable, READ_BACK, output], timeout=600,
             environment=environment)
  assert proc.returncode == 0, proc.stderr[-4000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize('modality', ['image', 'text', 'sensor'])
def test_a_run_on_gs_publishes_what_a_local_run_does(gcs, store_samples,
                                                     tmp_path, modality):
  folder, name = store_samples[modality]
  remote = f'gs://{BUCKET}/runs-{modality}'
  assert gcs.upload(str(folder), remote + '/in') > 0
  local = without_server(user_env())
  env = gcs.env(local)
  suffix = f'/{name}' if name else ''
  on_gs, _ = preprocess_ok(FLAGS[modality] + [
      '--input', remote + '/in' + suffix, '--output', remote + '/out'], env)
  local_out = str(tmp_path / 'local')
  on_disk, _ = preprocess_ok(FLAGS[modality] + [
      '--input', str(folder) + suffix, '--output', local_out], local)
  assert on_gs['status'] == on_disk['status'] == 'published'
  assert on_gs['output'] == remote + '/out'

  # What was written, object by object: the same dataset as on disk.
  copy = str(tmp_path / 'copy')
  assert gcs.download(remote + '/out', copy) > 0
  assert_same_dataset(dataset_facts(copy, (remote + '/in', str(folder))),
                      dataset_facts(local_out))
  assert not [n for n in gcs.names(remote + '/out')
              if '.lease.json' in n or '/tft_tmp/' in n]

  validated = run([sys.executable, '-m', 'pipelines.validate', '--output',
                   remote + '/out'], timeout=600, environment=env)
  assert validated.returncode == 0, validated.stdout[-3000:]
  assert 'validation_report.json' in ' '.join(gcs.names(remote + '/out'))

  got, want = _read_back(remote + '/out', env), _read_back(local_out, local)
  assert got == want
  for split, read in got.items():
    assert read['reader'] == read['tfds'], split
    assert read['transformed'] == len(read['reader']) > 0, split
