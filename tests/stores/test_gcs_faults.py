"""Faults object stores really show, injected by the front of the GCS
server (tests/gcs_server.py) into real runs on gs://:

- requests that fail once with 503 (a listing, an input's read, a write
  by Beam, a write and a read by TensorFlow, the manifest's write) and
  listings that are slow: the run retries, publishes, and its dataset is
  the one a run without faults publishes;
- an input object deleted between the listing and its read: a dead letter
  naming it, not a crash, and the rest published.
"""

import json

from engines_lib import FLAGS
from engines_lib import dataset_facts
from engines_lib import env as user_env
from engines_lib import preprocess_ok
from gcs_server import BUCKET
from gcs_server import encoded_name
from gcs_server import without_server
from transforms.sources import files


def _preprocess(gcs, argv):
  return preprocess_ok(argv, gcs.env(without_server(user_env())))


def test_transient_errors_and_slow_listings_are_retried(gcs, store_samples,
                                                        tmp_path):
  folder, _ = store_samples['image']
  source = f'gs://{BUCKET}/faults-in'
  output = f'gs://{BUCKET}/faults-out'
  gcs.upload(str(folder), source)
  clean = _preprocess(gcs, FLAGS['image'] + ['--input', source, '--output',
                                             str(tmp_path / 'clean')])[0]
  inp, out = encoded_name(source), encoded_name(output)
  faults = gcs.faults
  # Each fails once: the input's listing, one image's read, Beam's first
  # upload into the output, TensorFlow's first upload and first read,
  # the manifest's write.
  faults.fail('GET', rf'/storage/v1/b/{BUCKET}/o\?.*prefix={inp}')
  faults.fail('GET', rf'/o/{inp}%2Fcat%2F[^?/]+\?alt=media')
  faults.fail('PUT', rf'name={out}%2F.*upload_id=')
  faults.fail('POST', rf'/upload/storage/v1/b/{BUCKET}/o\?uploadType='
              rf'resumable&name={out}%2F')
  faults.fail('GET', rf'^/{BUCKET}/{out}%2F')
  faults.fail('PUT', rf'name={out}%2Fmanifest\.json&')
  # Every later listing of the input waits 3 s.
  faults.delay('GET', rf'/storage/v1/b/{BUCKET}/o\?.*prefix={inp}', 3.0)
  faulty, _ = _preprocess(gcs, FLAGS['image'] + ['--input', source,
                                                  '--output', output])
  applied = [what for _, _, what in faults.applied]
  assert applied.count(503) == 6, faults.applied
  assert applied.count('delay 3.0s') > 0
  assert faulty['status'] == 'published'
  assert faulty['fingerprint'] == clean['fingerprint']
  assert faulty['splits'] == clean['splits']
  assert faulty['dead_lettered'] == clean['dead_lettered']


def test_an_input_deleted_before_its_read_is_a_dead_letter(gcs,
                                                           store_samples,
                                                           tmp_path):
  folder, _ = store_samples['image']
  source = f'gs://{BUCKET}/vanish-in'
  gcs.upload(str(folder), source)
  victim = sorted((folder / 'dog').iterdir())[0].name
  victim_url = f'{source}/dog/{victim}'
  gcs.faults.vanish('GET', rf'/o/{encoded_name(victim_url)}\?alt=media')
  out = tmp_path / 'out'
  result, log = _preprocess(gcs, FLAGS['image'] + ['--input', source,
                                                   '--output', str(out)])
  assert [what for _, _, what in gcs.faults.applied] == ['vanish']
  assert result['status'] == 'published'
  assert 'Traceback' not in log
  facts = dataset_facts(str(out))
  letters = [json.loads(d) for d in facts['dead_letters']]
  gone = [d for d in letters if d['input'] == victim_url]
  assert len(gone) == 1, letters
  assert gone[0]['stage'] == 'read'
  assert gone[0]['reason'] == files.VANISHED
  # Everything else is there: the clean run's count less that one image.
  assert result['inputs'] == sum(1 for p in folder.rglob('*')
                                 if p.is_file())
  assert result['examples'] + result['dead_lettered'] == result['inputs']
