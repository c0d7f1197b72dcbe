"""The object-store tests: the session's GCS server (tests/conftest.py)
with no fault rules left between tests, and the sample inputs as folders
to upload."""

import os

import pytest


@pytest.fixture(autouse=True)
def _no_faults_left(request):
  """Each test starts and ends with no fault rules in the front."""
  if 'gcs' in request.fixturenames:
    server = request.getfixturevalue('gcs')
    server.faults.clear()
    yield
    server.faults.clear()
  else:
    yield


@pytest.fixture(scope='session')
def store_samples(sample_inputs):
  """{modality: (folder to upload, the input below it or '')}."""
  from pathlib import Path  # pylint: disable=import-outside-toplevel
  image = sample_inputs['image']
  return {'image': (Path(image), ''),
          **{m: (Path(os.path.dirname(sample_inputs[m])),
                 os.path.basename(sample_inputs[m]))
             for m in ('text', 'sensor')}}
