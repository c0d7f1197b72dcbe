"""Submits the preprocessing job to Google Cloud Dataflow (run_dataflow.sh).

    python -m pipelines.dataflow --modality image \\
        --input gs://B/raw --output gs://B/datasets/cats \\
        --project my-project --region europe-west1 --bucket my-bucket \\
        [--machine_type n1-standard-4] [--max_workers 10] [--num_workers N] \\
        [--job_name tfrecord-image] [--labels team=vision,env=prod] \\
        [--service_account EMAIL] [--dry-run [--job_file F]] \\
        [any preprocess option] [any Beam option]

The launcher turns its own flags into Beam's Dataflow options and then runs
`pipelines.preprocess` with them, so exit codes and the JSON summary line are
the same as for a local run. Project, region, bucket, machine type, worker
limit and labels may also come from the environment (DATAFLOW_PROJECT or
GOOGLE_CLOUD_PROJECT, DATAFLOW_REGION, DATAFLOW_BUCKET, DATAFLOW_MACHINE_TYPE,
DATAFLOW_MAX_WORKERS, DATAFLOW_LABELS, DATAFLOW_SERVICE_ACCOUNT); a flag
wins over the environment, and a Beam option given as such (for example
--temp_location) wins over what the launcher would derive.

`--dry-run` builds and translates the whole job for Dataflow without
submitting it and without touching Google Cloud (Beam's --dry_run): the
project's package is built as Dataflow would stage it, and the job
description is written to --job_file (default dataflow_job.json) with the
staged files beside it (in <job_file>.staged/).
"""

import datetime
import hashlib
import json
import os
import re
import shutil
import sys
import tarfile
from typing import Dict, List, Mapping, Optional, Tuple

from pipelines import launch
from pipelines.options import UsageError
from transforms import modalities
from transforms.compat import beam as compat_beam

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETUP_FILE = os.path.join(ROOT, 'setup.py')

DEFAULT_MACHINE_TYPE = 'n1-standard-4'
DEFAULT_MAX_WORKERS = 10
DEFAULT_JOB_FILE = 'dataflow_job.json'

# Google Cloud's naming rules, checked here so a typo gets one sentence
# instead of a Beam validation error (or, for a bucket Beam cannot parse,
# an attempt to create a default bucket).
_PROJECT = re.compile(r'^([a-z0-9.-]+:)?[a-z][-a-z0-9]{4,28}[a-z0-9]$')
_REGION = re.compile(r'^[a-z]+-[a-z]+[0-9]+$')
_BUCKET = re.compile(r'^[a-z0-9][-_a-z0-9.]{1,61}[a-z0-9]$')
_JOB_NAME = re.compile(r'^[a-z]([-a-z0-9]*[a-z0-9])?$')
_LABEL_KEY = re.compile(r'^[a-z][-_a-z0-9]{0,62}$')
_LABEL_VALUE = re.compile(r'^[-_a-z0-9]{0,63}$')
_MACHINE_TYPE = re.compile(r'^[a-z][-a-z0-9]*$')

# The launcher's flags -> the environment variables that stand in for them.
FLAGS = {
    '--project': ('DATAFLOW_PROJECT', 'GOOGLE_CLOUD_PROJECT'),
    '--region': ('DATAFLOW_REGION',),
    '--bucket': ('DATAFLOW_BUCKET',),
    '--machine_type': ('DATAFLOW_MACHINE_TYPE',),
    '--max_workers': ('DATAFLOW_MAX_WORKERS',),
    '--num_workers': (),
    '--job_name': (),
    '--labels': ('DATAFLOW_LABELS',),
    '--service_account': ('DATAFLOW_SERVICE_ACCOUNT',),
    '--job_file': (),
}
DRY_RUN = ('--dry-run', '--dry_run')
_JOB = 'a Dataflow submission'


def parse_labels(text: str) -> Dict[str, str]:
  """'k=v,k2=v2' -> dict, checked against Google Cloud's label rules."""
  labels = {}
  for item in filter(None, (p.strip() for p in text.split(','))):
    key, eq, value = item.partition('=')
    if not eq or not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
      raise UsageError(
          f'the label "{item}" is not key=value with a lower-case key '
          '(letters, digits, - and _; starting with a letter) and a '
          'lower-case value, each at most 63 characters.')
    labels[key] = value
  return labels


def label_value(text: str) -> str:
  """Any text as a valid label value (lower case, at most 63 characters)."""
  return re.sub(r'[^-_a-z0-9]', '-', text.lower())[:63]


def job_name(prefix: str, partition: Optional[str],
             now: datetime.datetime) -> str:
  """prefix[-partition]-YYYYMMDD-HHMMSS, within Dataflow's 63 characters."""
  stamp = now.strftime('%Y%m%d-%H%M%S')
  middle = f'-{label_value(partition)}' if partition else ''
  name = re.sub(r'-+', '-', f'{prefix}{middle}').strip('-')
  name = name[:63 - len(stamp) - 1].rstrip('-')
  return f'{name}-{stamp}'


def beam_args(args: List[str], env: Mapping[str, str],
              now: Optional[datetime.datetime] = None
              ) -> Tuple[List[str], bool, Optional[str]]:
  """Turns the launcher's command line into preprocess's (with Beam's
  Dataflow options).

  Returns:
    (arguments for pipelines.preprocess, whether it is a dry run, the job
    description file of a dry run or None).

  Raises:
    UsageError: Something required is missing or malformed.
  """
  cmd = launch.Command(args, FLAGS, DRY_RUN)
  dry_run = cmd.switch
  if cmd.given('--runner') and cmd.value('--runner') not in (
      'DataflowRunner', 'dataflow'):
    raise UsageError('run_dataflow.sh submits to Dataflow; leave out '
                     '--runner (use run_local.sh or run_flink.sh for other '
                     'runners).')
  out = (['--runner', 'DataflowRunner'] + _place(cmd, env) +
         _storage(cmd, env) + _workers(cmd, env) +
         _naming(cmd, env, now or datetime.datetime.now(
             datetime.timezone.utc)))
  job_file = None
  if dry_run:
    job_file = cmd.own.get('--job_file') or DEFAULT_JOB_FILE
    out += ['--dry_run=True', '--dataflow_job_file', job_file]
  elif cmd.own.get('--job_file'):
    out += ['--dataflow_job_file', cmd.own['--job_file']]
  _check_paths(cmd, dry_run)
  return cmd.rest + out, dry_run, job_file


def _place(cmd: launch.Command, env: Mapping[str, str]) -> List[str]:
  """--project and --region, checked."""
  project = cmd.require('--project', env, 'a Google Cloud project', _JOB)
  if not _PROJECT.match(project):
    raise UsageError(f'"{project}" is not a Google Cloud project id (6 to '
                     '30 lower-case letters, digits or hyphens, starting '
                     'with a letter).')
  region = cmd.require('--region', env, 'a region', _JOB)
  if not _REGION.match(region):
    raise UsageError(f'"{region}" is not a Dataflow region (like '
                     'europe-west1 or us-central1).')
  return ['--project', project, '--region', region]


def _storage(cmd: launch.Command, env: Mapping[str, str]) -> List[str]:
  """Temp and staging locations in the bucket (unless both are given)."""
  if cmd.given('--temp_location') and cmd.given('--staging_location'):
    return []
  bucket = cmd.require(
      '--bucket', env,
      'a Cloud Storage bucket for temporary and staged files', _JOB)
  bucket = bucket[len('gs://'):] if bucket.startswith('gs://') else bucket
  bucket = bucket.rstrip('/')
  if not _BUCKET.match(bucket):
    raise UsageError(f'"{bucket}" is not a Cloud Storage bucket name (3 to '
                     '63 lower-case letters, digits, -, _ or ., starting '
                     'and ending with a letter or digit).')
  out = []
  for flag, folder in (('--temp_location', 'tmp'),
                       ('--staging_location', 'staging')):
    if not cmd.given(flag):
      out += [flag, f'gs://{bucket}/dataflow/{folder}']
  return out


def _workers(cmd: launch.Command, env: Mapping[str, str]) -> List[str]:
  """What the workers run and on how many machines of which type."""
  out = []
  if not (cmd.given('--setup_file') or cmd.given('--sdk_container_image')):
    # With a custom SDK image, the project is expected to be installed in it.
    if not os.path.isfile(SETUP_FILE):
      raise UsageError(f'there is no {SETUP_FILE} to package this project '
                       'for the workers (an installed copy, not a checkout); '
                       'pass --setup_file, or --sdk_container_image with an '
                       'image that has the project installed.')
    out += ['--setup_file', SETUP_FILE]
  if not (cmd.given('--machine_type') or cmd.given('--worker_machine_type')):
    machine = cmd.setting('--machine_type', env) or DEFAULT_MACHINE_TYPE
    if not _MACHINE_TYPE.match(machine):
      raise UsageError(f'"{machine}" is not a Compute Engine machine type '
                       '(like n1-standard-4).')
    out += ['--machine_type', machine]
  if not cmd.given('--max_num_workers'):
    max_workers = launch.positive(
        cmd.setting('--max_workers', env) or str(DEFAULT_MAX_WORKERS),
        '--max_workers')
    out += ['--max_num_workers', str(max_workers)]
  else:
    max_workers = launch.positive(cmd.value('--max_num_workers') or '',
                                  '--max_num_workers')
  if cmd.own.get('--num_workers'):
    num = launch.positive(cmd.own['--num_workers'], '--num_workers')
    if num > max_workers:
      raise UsageError(f'--num_workers {num} is more than --max_workers '
                       f'{max_workers}.')
    out += ['--num_workers', str(num)]
  if not cmd.given('--autoscaling_algorithm'):
    out += ['--autoscaling_algorithm', 'THROUGHPUT_BASED']
  account = cmd.setting('--service_account', env)
  if account and not cmd.given('--service_account_email'):
    out += ['--service_account_email', account]
  return out


def _naming(cmd: launch.Command, env: Mapping[str, str],
            now: datetime.datetime) -> List[str]:
  """The job name (prefix, partition, UTC time) and labels."""
  out = []
  modality = cmd.value('--modality') or modalities.DEFAULT
  partition = cmd.value('--partition')
  if not cmd.given('--job_name'):
    prefix = cmd.own.get('--job_name') or (
        f'tfrecord-{label_value(modality)}')
    if not _JOB_NAME.match(prefix):
      raise UsageError(f'the job name "{prefix}" must be lower-case letters, '
                       'digits and hyphens, starting with a letter.')
    out += ['--job_name', job_name(prefix, partition, now)]
  labels = {'app': 'tfrecord-pipelines', 'modality': label_value(modality)}
  if partition:
    labels['partition'] = label_value(partition)
  labels.update(parse_labels(cmd.setting('--labels', env) or ''))
  for key, value in labels.items():
    out += ['--labels', f'{key}={value}']
  return out


def _check_paths(cmd: launch.Command, dry_run: bool) -> None:
  """A submission needs gs:// input and output; a dry run only notes
  local ones."""
  for flag in ('--input', '--output'):
    path = cmd.value(flag)
    if path and not path.startswith('gs://'):
      if not dry_run:
        raise UsageError(f'{flag} {path} is not a gs:// path; Dataflow '
                         'workers cannot read or write this machine\'s '
                         'files (a --dry-run accepts local paths).')
      print(f'note: {flag} {path} is local; that is fine for a dry run, '
            'but a submission needs a gs:// path.', file=sys.stderr)


def _artifacts(proto_pipeline) -> List[dict]:
  """The files each environment of the translated job would stage."""
  from apache_beam.portability import common_urns  # pylint: disable=import-outside-toplevel
  from apache_beam.portability.api import beam_runner_api_pb2  # pylint: disable=import-outside-toplevel
  found = []
  for env_id, env in sorted(proto_pipeline.components.environments.items()):
    for dep in env.dependencies:
      path = beam_runner_api_pb2.ArtifactFilePayload.FromString(
          dep.type_payload).path
      if dep.role_urn == common_urns.artifact_roles.STAGING_TO.urn:
        staged = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(
            dep.role_payload).staged_name
      else:
        staged = os.path.basename(path)
      found.append({'environment': env_id, 'path': path,
                    'staged_name': staged})
  return found


def describe_dry_run(result, options) -> dict:
  """Writes the job description of a Beam --dry_run and returns a summary.

  The description holds what Dataflow would receive: the Dataflow job
  (name, type, labels and the worker environment Beam builds from the
  options: machine type, autoscaling, container image, staged packages),
  the names of the pipeline's transforms and the staged files, which are
  copied beside the description (Beam builds them in a temporary folder).
  Nothing is uploaded; staged locations are where a submission would put
  them.
  """
  from google.protobuf import json_format  # pylint: disable=import-outside-toplevel
  from apache_beam.options.pipeline_options import DebugOptions  # pylint: disable=import-outside-toplevel
  from apache_beam.options.pipeline_options import GoogleCloudOptions  # pylint: disable=import-outside-toplevel
  from apache_beam.runners.dataflow.internal import apiclient  # pylint: disable=import-outside-toplevel
  from apache_beam.runners.internal import names  # pylint: disable=import-outside-toplevel

  result.wait_until_finish()
  job = result.job
  gcloud = options.view_as(GoogleCloudOptions)
  job_file = options.view_as(DebugOptions).dataflow_job_file or DEFAULT_JOB_FILE
  staged_dir = job_file + '.staged'
  shutil.rmtree(staged_dir, ignore_errors=True)
  os.makedirs(staged_dir)
  artifacts = _artifacts(job.proto_pipeline)
  for a in artifacts:
    with open(a['path'], 'rb') as f:
      data = f.read()
    a['sha256'] = hashlib.sha256(data).hexdigest()
    a['bytes'] = len(data)
    a['local_copy'] = os.path.abspath(os.path.join(staged_dir,
                                                   a['staged_name']))
    shutil.copyfile(a['path'], a['local_copy'])
    if a['staged_name'].endswith('.tar.gz'):
      with tarfile.open(a['path']) as tar:
        a['contents'] = sorted(m.name for m in tar.getmembers() if m.isfile())
  for folder in {os.path.dirname(a['path']) for a in artifacts}:
    # Beam's own temporary folder for the staged files; removed once empty.
    for a in artifacts:
      if os.path.dirname(a['path']) == folder and os.path.exists(a['path']):
        os.remove(a['path'])
    try:
      os.rmdir(folder)
    except OSError:
      pass

  serialized = job.proto_pipeline.SerializeToString()
  environment = apiclient.Environment(
      packages=[a['staged_name'] for a in artifacts],
      options=options,
      environment_version=compat_beam.dataflow_environment_version(),
      proto_pipeline_staged_url=(f'{gcloud.staging_location}/'
                                 f'{names.STAGED_PIPELINE_FILENAME}'),
      proto_pipeline=job.proto_pipeline,
      pipeline_proto_hash=hashlib.sha256(serialized).hexdigest())
  job.proto.environment = environment.proto
  transforms = sorted(t.unique_name for t in
                      job.proto_pipeline.components.transforms.values()
                      if t.unique_name and not t.subtransforms)
  images = sorted(env.payload.decode('utf-8', 'replace').strip('\n\x00 ')
                  for env in
                  job.proto_pipeline.components.environments.values())
  description = {
      'dry_run': True,
      'job': json.loads(json_format.MessageToJson(type(job.proto).pb(
          job.proto))),
      'project': gcloud.project,
      'region': gcloud.region,
      'temp_location': gcloud.temp_location,
      'staging_location': gcloud.staging_location,
      'transforms': transforms,
      'environment_payloads': images,
      'artifacts': artifacts,
  }
  os.makedirs(os.path.dirname(os.path.abspath(job_file)), exist_ok=True)
  with open(job_file, 'w', encoding='utf-8') as f:
    json.dump(description, f, indent=1, sort_keys=True)
  return {'dry_run': True, 'job_file': job_file, 'job_name': job.proto.name,
          'transforms': len(transforms),
          'staged': [a['staged_name'] for a in artifacts]}


def main(argv: Optional[List[str]] = None,
         env: Optional[Mapping[str, str]] = None) -> int:
  """Command-line entry point; returns preprocess's exit code."""
  return launch.main(argv, env, lambda a, e: beam_args(a, e)[0], __doc__)


if __name__ == '__main__':
  from pipelines import quiet  # pylint: disable=ungrouped-imports
  quiet.start()  # before TensorFlow is imported (see pipelines/quiet.py)
  from pipelines.outcome import exit_now  # pylint: disable=ungrouped-imports
  exit_now(main())
