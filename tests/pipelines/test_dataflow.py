"""Dataflow submission: the launcher's options and an offline dry run.

The dry runs go through run_dataflow.sh with Beam's --dry_run: the whole
job is built, translated by the DataflowRunner and packaged from setup.py as
a submission would be, and the job description is checked. Nothing reaches
Google Cloud (this machine cannot); whether Dataflow accepts and runs the job
is not proven here.
"""

import datetime
import json
import os
import subprocess
import sys
import tarfile

import pytest

import imagegen
import sensorgen
from pipelines import dataflow
from pipelines.options import UsageError
import repo

ROOT = repo.ROOT
BUCKET = 'tfrecord-pipelines-ci-example-bucket'
CLOUD = ['--project', 'example-project-123', '--region', 'europe-west1',
         '--bucket', BUCKET]
NOW = datetime.datetime(2026, 11, 21, 6, 30, 5, tzinfo=datetime.timezone.utc)


def _args(extra, env=None):
  args, dry_run, job_file = dataflow.beam_args(
      ['--modality', 'image', '--input', 'gs://in-bucket/raw', '--output',
       'gs://out-bucket/ds'] + extra, env or {}, NOW)
  return args, dry_run, job_file


def _flag(args, name):
  return [args[i + 1] for i, a in enumerate(args[:-1]) if a == name]


def test_flags_become_dataflow_options():
  args, dry_run, job_file = _args(CLOUD + [
      '--machine_type', 'n2-highmem-8', '--max_workers', '40',
      '--num_workers', '5', '--labels', 'team=vision,env=prod',
      '--partition', '2026-11-20', '--num_shards', '8'])
  assert not dry_run and job_file is None
  assert _flag(args, '--runner') == ['DataflowRunner']
  assert _flag(args, '--project') == ['example-project-123']
  assert _flag(args, '--region') == ['europe-west1']
  assert _flag(args, '--temp_location') == [f'gs://{BUCKET}/dataflow/tmp']
  assert _flag(args, '--staging_location') == [
      f'gs://{BUCKET}/dataflow/staging']
  assert _flag(args, '--setup_file') == [os.path.join(ROOT, 'setup.py')]
  assert _flag(args, '--machine_type') == ['n2-highmem-8']
  assert _flag(args, '--max_num_workers') == ['40']
  assert _flag(args, '--num_workers') == ['5']
  assert _flag(args, '--autoscaling_algorithm') == ['THROUGHPUT_BASED']
  assert _flag(args, '--job_name') == ['tfrecord-image-2026-11-20-'
                                       '20261121-063005']
  assert sorted(_flag(args, '--labels')) == [
      'app=tfrecord-pipelines', 'env=prod', 'modality=image',
      'partition=2026-11-20', 'team=vision']
  # Everything that is not the launcher's goes on unchanged.
  assert _flag(args, '--num_shards') == ['8']
  assert _flag(args, '--partition') == ['2026-11-20']
  assert '--bucket' not in args and '--max_workers' not in args


def test_environment_fills_what_flags_leave_out():
  env = {'GOOGLE_CLOUD_PROJECT': 'env-project-1',
         'DATAFLOW_REGION': 'us-central1', 'DATAFLOW_BUCKET': f'gs://{BUCKET}/',
         'DATAFLOW_MACHINE_TYPE': 'n1-highmem-4', 'DATAFLOW_MAX_WORKERS': '3',
         'DATAFLOW_LABELS': 'owner=data-eng',
         'DATAFLOW_SERVICE_ACCOUNT': 'runner@env-project-1.iam.gserviceaccount'
                                     '.com'}
  args, _, _ = _args([], env)
  assert _flag(args, '--project') == ['env-project-1']
  assert _flag(args, '--region') == ['us-central1']
  assert _flag(args, '--temp_location') == [f'gs://{BUCKET}/dataflow/tmp']
  assert _flag(args, '--machine_type') == ['n1-highmem-4']
  assert _flag(args, '--max_num_workers') == ['3']
  assert 'owner=data-eng' in _flag(args, '--labels')
  assert _flag(args, '--service_account_email') == [
      env['DATAFLOW_SERVICE_ACCOUNT']]
  # A flag wins over the environment.
  args, _, _ = _args(['--project', 'flag-project-1'], env)
  assert _flag(args, '--project') == ['flag-project-1']
  args, _, _ = _args(['--project', 'example.com:legacy-project'], env)
  assert _flag(args, '--project') == ['example.com:legacy-project']
  # DATAFLOW_PROJECT wins over GOOGLE_CLOUD_PROJECT.
  args, _, _ = _args([], dict(env, DATAFLOW_PROJECT='df-project-1'))
  assert _flag(args, '--project') == ['df-project-1']


def test_defaults_and_beam_options_given_as_such():
  args, _, _ = _args(CLOUD + ['--temp_location', 'gs://other-bucket/t',
                              '--max_num_workers', '7', '--job_name',
                              'nightly-cats'])
  assert _flag(args, '--temp_location') == ['gs://other-bucket/t']
  assert _flag(args, '--staging_location') == [
      f'gs://{BUCKET}/dataflow/staging']
  assert _flag(args, '--max_num_workers') == ['7']
  assert _flag(args, '--job_name') == ['nightly-cats-20261121-063005']
  assert _flag(args, '--machine_type') == [dataflow.DEFAULT_MACHINE_TYPE]
  # A custom SDK image has the project installed: nothing to package.
  args, _, _ = _args(CLOUD + ['--sdk_container_image', 'eu.gcr.io/p/img:1'])
  assert '--setup_file' not in args
  # Both locations given as Beam options: no bucket needed.
  args, _, _ = _args(['--project', 'example-project-123', '--region',
                      'europe-west1', '--temp_location', 'gs://b-one/t',
                      '--staging_location', 'gs://b-one/s'])
  assert _flag(args, '--temp_location') == ['gs://b-one/t']


def test_job_name_stays_within_dataflow_limits():
  name = dataflow.job_name('a' * 70, 'Partition_2026/11', NOW)
  assert len(name) <= 63
  assert name.endswith('-20261121-063005')
  assert dataflow._JOB_NAME.match(name)  # pylint: disable=protected-access
  assert dataflow.job_name('tfrecord-text', 'dt=2026-11-20', NOW) == (
      'tfrecord-text-dt-2026-11-20-20261121-063005')


@pytest.mark.parametrize('extra, env, message', [
    (['--region', 'europe-west1', '--bucket', BUCKET], {},
     'needs a Google Cloud project: pass --project or set DATAFLOW_PROJECT'),
    (['--project', 'example-project-123', '--bucket', BUCKET], {},
     'needs a region: pass --region or set DATAFLOW_REGION'),
    (['--project', 'example-project-123', '--region', 'europe-west1'], {},
     'needs a Cloud Storage bucket'),
    (CLOUD[:4] + ['--bucket', 'b'], {}, '"b" is not a Cloud Storage bucket'),
    (CLOUD[:4] + ['--bucket', 'My_Bucket'], {},
     '"My_Bucket" is not a Cloud Storage bucket'),
    (['--project', 'Proj', '--region', 'europe-west1', '--bucket', BUCKET], {},
     '"Proj" is not a Google Cloud project id'),
    (['--project', 'example-project-123', '--region', 'europe', '--bucket',
      BUCKET], {}, '"europe" is not a Dataflow region'),
    (CLOUD + ['--max_workers', '0'], {}, '--max_workers must be a whole'),
    (CLOUD + ['--max_workers', 'many'], {}, '--max_workers must be a whole'),
    (CLOUD + ['--max_workers', '4', '--num_workers', '9'], {},
     '--num_workers 9 is more than --max_workers 4'),
    (CLOUD + ['--labels', 'Team=x'], {}, 'the label "Team=x" is not'),
    (CLOUD + ['--labels', 'team'], {}, 'the label "team" is not'),
    (CLOUD + ['--job_name', 'Nightly_Job'], {}, 'the job name "Nightly_Job"'),
    (CLOUD + ['--runner', 'DirectRunner'], {}, 'leave out --runner'),
    (CLOUD + ['--project'], {}, '--project needs a value'),
    (CLOUD + ['--dry-run=maybe'], {}, '--dry-run takes no value'),
])
def test_bad_invocations_name_the_problem(extra, env, message):
  with pytest.raises(UsageError, match=message.replace('(', r'\(')):
    _args(extra, env)


def test_a_submission_refuses_local_paths():
  with pytest.raises(UsageError, match='--input raw is not a gs:// path'):
    dataflow.beam_args(['--input', 'raw', '--output', 'gs://b-one/o'] + CLOUD,
                       {}, NOW)
  # A dry run accepts them (it reads nothing on the workers).
  args, dry_run, job_file = dataflow.beam_args(
      ['--input', 'raw', '--output', 'out', '--dry-run'] + CLOUD, {}, NOW)
  assert dry_run and job_file == dataflow.DEFAULT_JOB_FILE
  assert '--dry_run=True' in args
  assert _flag(args, '--dataflow_job_file') == [dataflow.DEFAULT_JOB_FILE]


def test_launcher_usage_error_exits_2_with_one_sentence(capsys):
  code = dataflow.main(['--modality', 'image', '--input', 'gs://b-one/i',
                        '--output', 'gs://b-one/o', '--region',
                        'europe-west1', '--bucket', BUCKET], env={})
  out, err = capsys.readouterr()
  assert code == 2
  assert err.strip().splitlines() == [
      'error: A Dataflow submission needs a Google Cloud project: pass '
      '--project or set DATAFLOW_PROJECT or GOOGLE_CLOUD_PROJECT.']
  summary = json.loads(out.strip().splitlines()[-1])
  assert summary['status'] == 'bad_invocation' and summary['exit_code'] == 2


# --- Offline dry runs through run_dataflow.sh --------------------------------


@pytest.fixture(scope='module')
def inputs(tmp_path_factory):
  root = tmp_path_factory.mktemp('dataflow_inputs')
  imagegen.write_good_images(str(root / 'images'))
  sensorgen.frame(devices=6, rows_per_device=60, seed=2).to_csv(
      root / 'log.csv', index=False)
  docs = ['text,label'] + [f'"word{i % 7} word{i % 5} more words",'
                           f'{("pos", "neg")[i % 2]}' for i in range(40)]
  (root / 'docs.csv').write_text('\n'.join(docs) + '\n', encoding='utf-8')
  return {
      'image': ['--modality', 'image', '--input', str(root / 'images')],
      'sensor': ['--modality', 'sensor', '--input', str(root / 'log.csv'),
                 '--timestamp_column', 'time', '--entity_column', 'device',
                 '--window_length', '10', '--window_stride', '5'],
      'text': ['--modality', 'text', '--input', str(root / 'docs.csv')],
  }


# Steps every modality's job must contain: reading, tf.Transform's analysis
# of the training split, the shuffled shard writes and the publish step.
COMMON_STEPS = ('AnalyzeTrainSplit/', 'WriteTransformFn', 'DeadLetters/',
                'FinalizeDataset')


@pytest.mark.parametrize('modality', ['image', 'sensor', 'text'])
def test_dry_run_translates_and_packages_the_whole_job(inputs, tmp_path,
                                                       modality):
  temp = tmp_path / 'tmp'
  temp.mkdir()
  env = dict(os.environ, TMPDIR=str(temp))
  for var in ('DATAFLOW_PROJECT', 'GOOGLE_CLOUD_PROJECT', 'DATAFLOW_LABELS'):
    env.pop(var, None)
  output = f'gs://{BUCKET}/datasets/{modality}/{{partition}}'
  # Run from another folder: relative paths are the caller's.
  proc = subprocess.run(
      [os.path.join(ROOT, 'run_dataflow.sh'), '--dry-run', '--job_file',
       'job/description.json', '--output', output, '--partition',
       '2026-11-20', '--max_workers', '6', '--labels', 'team=ml'] +
      inputs[modality] + CLOUD, cwd=tmp_path, env=env, capture_output=True,
      text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  assert summary['status'] == 'dry_run' and not summary['published']
  assert summary['modality'] == modality
  assert 'Nothing was submitted' in proc.stderr
  # Beam packages the project with `python -m build` (installed with it),
  # whose progress lines are filtered; no alarming line reaches the user.
  assert 'No module named' not in proc.stderr
  assert 'sdist' not in proc.stderr
  job_file = tmp_path / 'job' / 'description.json'
  assert summary['job_file'] == 'job/description.json'
  description = json.loads(job_file.read_text())

  job = description['job']
  assert job['name'] == summary['job_name']
  assert job['name'].startswith(f'tfrecord-{modality}-2026-11-20-')
  assert job['type'] == 'JOB_TYPE_BATCH'
  assert job['labels'] == {'app': 'tfrecord-pipelines',
                           'modality': modality, 'partition': '2026-11-20',
                           'team': 'ml'}
  pool, = job['environment']['workerPools']
  assert pool['machineType'] == dataflow.DEFAULT_MACHINE_TYPE
  assert pool['autoscalingSettings']['maxNumWorkers'] == 6
  assert job['environment']['tempStoragePrefix'].endswith(
      f'{BUCKET}/dataflow/tmp')
  options = {d['key']: d['value'] for d in
             job['environment']['sdkPipelineOptions']['display_data']}
  assert options['output'] == output
  assert options['partition'] == '2026-11-20'
  assert options['setup_file'] == os.path.join(ROOT, 'setup.py')

  steps = description['transforms']
  for step in COMMON_STEPS:
    assert any(step in s for s in steps), (step, steps[:40])

  # The project is packaged from setup.py and staged as Dataflow's
  # workflow.tar.gz; the copy beside the description is that package.
  staged = {a['staged_name']: a for a in description['artifacts']}
  assert {p['name'] for p in pool['packages']} == set(staged)
  package = staged['workflow.tar.gz']
  # setuptools >= 69.3 names the sdist's folder as PEP 625 normalizes the
  # project name; older ones keep the name as written.
  root = package['contents'][0].split('/', 1)[0]
  assert root in ('tfrecord-pipelines-0.1.0', 'tfrecord_pipelines-0.1.0')
  assert all(n.startswith(root + '/') for n in package['contents'])
  names = {n.split('/', 1)[1] for n in package['contents']}
  assert {'setup.py', 'pipelines/preprocess.py', f'transforms/modalities/'
          f'{modality}/pipeline.py', 'transforms/output/manifest.py'} <= names
  with tarfile.open(package['local_copy']) as tar:
    setup = tar.extractfile(f'{root}/setup.py').read()
  assert b'tensorflow-transform' in setup
  # Beam's and tf.Transform's temporary folders are gone (Beam keeps its
  # requirements cache there on purpose).
  assert [p.name for p in temp.iterdir()
          if p.name != 'beam-requirements-cache'] == []


def test_dry_run_needs_the_dataflow_runner(inputs, tmp_path, capsys):
  from pipelines import preprocess  # pylint: disable=import-outside-toplevel
  code = preprocess.main(inputs['image'] + ['--output', str(tmp_path / 'o'),
                                            '--dry_run=True'])
  out, err = capsys.readouterr()
  assert code == 2
  assert '--dry_run only applies to --runner DataflowRunner' in err
  assert json.loads(out.strip().splitlines()[-1])['status'] == (
      'bad_invocation')
  assert not (tmp_path / 'o').exists()


def test_flex_template_entry_point_builds_a_detached_dataflow_job(
    inputs, tmp_path):
  """examples/flex_template/main.py, called as the template launcher calls
  it (--name=value parameters and Dataflow options), translated offline.

  Dataflow's launcher itself cannot run here; this shows the entry point
  accepts that shape of command line, adds the runner, and builds the job
  for the template's image with no setup.py to stage."""
  image = 'europe-docker.pkg.dev/example-project-123/images/tfrecord:0.1.0'
  job_file = tmp_path / 'job.json'
  src = inputs['image'][inputs['image'].index('--input') + 1]
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'examples', 'flex_template',
                                    'main.py'),
       '--modality=image', f'--input={src}',
       f'--output=gs://{BUCKET}/datasets/{{partition}}',
       '--partition=2026-11-20', '--project=example-project-123',
       '--region=europe-west1', f'--temp_location=gs://{BUCKET}/tmp',
       f'--staging_location=gs://{BUCKET}/staging',
       '--job_name=tfrecord-flex-20261121', f'--sdk_container_image={image}',
       '--dry_run=True', f'--dataflow_job_file={job_file}'],
      cwd=tmp_path, env=dict(os.environ, PYTHONPATH=ROOT),
      capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  assert summary['status'] == 'dry_run'
  assert summary['runner'] == 'DataflowRunner'
  description = json.loads(job_file.read_text())
  options = {d['key']: d['value'] for d in
             description['job']['environment']['sdkPipelineOptions'][
                 'display_data']}
  assert options['detach'] is True or options['detach'] == 'True'
  pool, = description['job']['environment']['workerPools']
  assert pool['workerHarnessContainerImage'] == image
  assert 'workflow.tar.gz' not in {a['staged_name'] for a in
                                   description['artifacts']}
  assert any('FinalizeDataset' in s for s in description['transforms'])


def test_detach_needs_the_dataflow_runner(inputs, tmp_path, capsys):
  from pipelines import preprocess  # pylint: disable=import-outside-toplevel
  code = preprocess.main(inputs['image'] + ['--output', str(tmp_path / 'o'),
                                            '--detach'])
  out, err = capsys.readouterr()
  assert code == 2
  assert '--detach only applies to --runner DataflowRunner' in err
  assert json.loads(out.strip().splitlines()[-1])['status'] == (
      'bad_invocation')
  assert not (tmp_path / 'o').exists()


def test_summary_of_a_detached_submission():
  """What a scheduler reads after --detach (the submission itself needs
  Google Cloud): submitted, not yet published, with the job id."""
  from pipelines import outcome  # pylint: disable=import-outside-toplevel
  summary = json.loads(outcome.summary_json(
      0, {'modality': 'image', 'runner': 'DataflowRunner',
          'output': f'gs://{BUCKET}/ds', 'run_id': 'r1',
          'submitted': {'submitted': True, 'job_id': '2026-11-21_06_00-1',
                        'staging': f'gs://{BUCKET}/ds/.staging-r1'}},
      None, None))
  assert summary['status'] == 'submitted' and summary['exit_code'] == 0
  assert summary['published'] is False
  assert summary['job_id'] == '2026-11-21_06_00-1'
  assert summary['records'] is None
