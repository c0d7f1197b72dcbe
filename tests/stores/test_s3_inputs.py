"""Inputs on s3:// through Beam's S3 file system (apache-beam[aws]),
against a real S3 server on loopback (tests/s3_server.py: moto's
standalone server), named to boto3 as a user would name an S3-compatible
store: AWS_ENDPOINT_URL_S3 and credentials in the environment.

Each modality's sample, uploaded and read from s3:// onto local disk,
gives the dataset the same files give on local disk. An output on s3://
is refused at once (TensorFlow 2.21 cannot write there; see
docs/object-stores.md).
"""

import sys

import pytest

import s3_server
from engines_lib import FLAGS
from engines_lib import assert_remote_input_reads_as_on_disk
from engines_lib import env as user_env
from engines_lib import run
from gcs_server import without_server

BUCKET = s3_server.BUCKET


@pytest.fixture(scope='module')
def s3(tmp_path_factory):
  server = s3_server.S3Server(str(tmp_path_factory.mktemp('s3')),
                              buckets=[BUCKET])
  yield server
  server.stop()


def _local():
  return without_server(user_env())


@pytest.mark.parametrize('modality', ['image', 'text', 'sensor'])
def test_an_input_on_s3_gives_the_local_inputs_dataset(s3, store_samples,
                                                       tmp_path, modality):
  folder, name = store_samples[modality]
  remote = f's3://{BUCKET}/in-{modality}'
  assert s3.upload(str(folder), remote) > 0
  assert_remote_input_reads_as_on_disk(modality, remote, folder, name,
                                       s3.env(_local()), _local(),
                                       str(tmp_path))


def test_a_folder_in_a_bucket_is_found(s3, store_samples):
  folder, _ = store_samples['image']
  s3.upload(str(folder / 'cat'), f's3://{BUCKET}/photos/cat')
  code = ('from apache_beam.io.filesystems import FileSystems; '
          'from apache_beam.options.pipeline_options import PipelineOptions;'
          ' FileSystems.set_options(PipelineOptions([])); '
          'from transforms.sources import files; '
          f'print(files.exists("s3://{BUCKET}/photos"), '
          f'files.exists("s3://{BUCKET}/photos/cat"), '
          f'files.exists("s3://{BUCKET}/phot"), '
          f'files.exists("s3://{BUCKET}/nothing"))')
  proc = run([sys.executable, '-c', code], timeout=120,
             environment=s3.env(_local()))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.split() == ['True', 'True', 'False', 'False']


def test_an_output_on_s3_is_refused_before_anything_is_read(s3,
                                                            store_samples):
  folder, _ = store_samples['image']
  proc = run([sys.executable, '-m', 'pipelines.preprocess'] +
             FLAGS['image'] + ['--input', str(folder), '--output',
                               f's3://{BUCKET}/out'], timeout=300,
             environment=s3.env(_local()))
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert 'cannot write s3:// paths' in proc.stderr
  assert 'Traceback' not in proc.stderr
  listed = s3.client().list_objects_v2(Bucket=BUCKET, Prefix='out/')
  assert listed.get('KeyCount', 0) == 0
