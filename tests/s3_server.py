"""A real S3 server on loopback: moto's standalone server (PyPI
`moto[server]`, the test extra), which speaks S3's REST API, keeps the
objects in memory and enforces conditional writes (If-None-Match).

`S3Server(folder)` starts it on a free port; `env()` names it to boto3
(and Beam's S3 file system with it) through AWS_ENDPOINT_URL_S3 and test
credentials, as a user points a run at an S3-compatible store.
"""

import os
import sys

from gcs_server import free_port
from gcs_server import start_server
from gcs_server import stop_server

BUCKET = 'tfrp-s3-bucket'
_NAMING = {'AWS_ACCESS_KEY_ID': 'test', 'AWS_SECRET_ACCESS_KEY': 'test',
           'AWS_DEFAULT_REGION': 'us-east-1'}


class S3Server:

  def __init__(self, folder: str, buckets=()):
    os.makedirs(folder, exist_ok=True)
    self.url = f'http://127.0.0.1:{free_port()}'
    server = os.path.join(os.path.dirname(sys.executable), 'moto_server')
    self._server = start_server(
        [server, '-H', '127.0.0.1', '-p', self.url.rsplit(':', 1)[1]],
        os.path.join(folder, 'moto.log'), f'{self.url}/moto-api/',
        seconds=60)
    for bucket in buckets:
      self.client().create_bucket(Bucket=bucket)

  def env(self, base=None) -> dict:
    env = dict(os.environ if base is None else base)
    env.update(_NAMING, AWS_ENDPOINT_URL_S3=self.url)
    return env

  def client(self):
    import boto3  # pylint: disable=import-outside-toplevel
    return boto3.client('s3', endpoint_url=self.url,
                        aws_access_key_id='test',
                        aws_secret_access_key='test',
                        region_name='us-east-1')

  def upload(self, local: str, url: str) -> int:
    """Every file below the folder `local` to s3://BUCKET/PREFIX/<its
    relative path>; how many."""
    bucket, _, prefix = url[len('s3://'):].partition('/')
    client = self.client()
    count = 0
    for folder, _, names in os.walk(local):
      for name in names:
        path = os.path.join(folder, name)
        rel = os.path.relpath(path, local).replace(os.sep, '/')
        client.upload_file(path, bucket, f'{prefix}/{rel}' if prefix else rel)
        count += 1
    return count

  def stop(self):
    stop_server(self._server)
