"""Every failure of the real command line ends with one sentence on stderr
(`error: ...`), no traceback, and the JSON summary as the last stdout line
with an `error` that names the problem; a crash's traceback goes to a log
file (and with --verbose to stderr). Runners that are unknown, unverified
or known to lose data are refused; relative local paths become absolute;
a remote path that does not answer fails within seconds."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

import imagegen
import repo
from pipelines import errors
from pipelines import options as options_lib
from pipelines import runner_setup
from pipelines import outcome
from pipelines import preprocess

ROOT = repo.ROOT
EXIT_USAGE = outcome.EXIT_USAGE


def _env(tmp_path, **extra):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2',
             TMPDIR=str(tmp_path))
  env.update(extra)
  return env


def _cli(tmp_path, args, module='pipelines.preprocess', code=None,
         timeout=300):
  """Runs `python -m module args` in tmp_path."""
  command = [sys.executable]
  command += ['-c', code] if code else ['-m', module]
  return subprocess.run(command + [str(a) for a in args], cwd=tmp_path,
                        env=_env(tmp_path), capture_output=True, text=True,
                        timeout=timeout)


def _failed(proc, exit_code, status, *words, json_line=True):
  """Checks the shape of a failure; returns (the error line, the summary)."""
  assert proc.returncode == exit_code, proc.stderr[-3000:]
  lines = proc.stderr.rstrip().splitlines()
  said = [line for line in lines if line.startswith('error:')]
  assert len(said) == 1, proc.stderr[-3000:]
  assert lines[-1] == said[0]  # the sentence ends stderr
  assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
  assert 'usage:' not in proc.stderr  # no argparse usage dump
  for word in words:
    assert word in said[0], said[0]
  if not json_line:
    return said[0], None
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  assert summary['status'] == status
  assert summary['exit_code'] == exit_code
  assert summary['published'] is False
  for word in words:
    assert word in summary['error'], summary['error']
  return said[0], summary


@pytest.fixture(scope='module')
def images_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp('imgs')
  imagegen.write_good_images(str(root))
  return root


# --- Beam's options ---------------------------------------------------------


@pytest.mark.parametrize('extra,words', [
    (['--direct_running_mode', 'fast'],
     ['--direct_running_mode must be one of in_memory, multi_threading, '
      "multi_processing (got 'fast')"]),
    (['--direct_num_workers', 'abc'],
     ["--direct_num_workers must be a whole number (got 'abc')"]),
    (['--direct_num_workers'], ['--direct_num_workers needs a value']),
])
def test_a_bad_beam_option_value_is_one_sentence(images_dir, tmp_path, extra,
                                                 words):
  proc = _cli(tmp_path, ['--input', images_dir, '--output', 'out'] + extra)
  _failed(proc, EXIT_USAGE, 'bad_invocation', *words)
  assert len(proc.stderr.splitlines()) < 15  # not Beam's 160-line usage
  assert not (tmp_path / 'out').exists()


# --- runners ----------------------------------------------------------------


@pytest.mark.parametrize('extra,words', [
    (['--runner', 'DirectRuner'],
     ['Unknown runner "DirectRuner"', 'did you mean DirectRunner?',
      'DirectRunner, PortableRunner, FlinkRunner, SparkRunner, '
      'DataflowRunner']),
    (['--runner', 'PrismRunner'],
     ['PrismRunner has not been verified', '--allow_unverified_runner',
      'DirectRunner, PortableRunner, FlinkRunner, SparkRunner, '
      'DataflowRunner']),
    (['--runner', 'DaskRunner'],
     ['--runner DaskRunner is refused', 'finish_bundle']),
    (['--runner', 'DaskRunner', '--allow_unverified_runner'],
     ['--runner DaskRunner is refused']),
    (['--runner', 'apache_beam.runners.dask.dask_runner.DaskRunner'],
     ['DaskRunner is refused']),
])
def test_runners_that_are_unknown_unverified_or_lose_data_are_refused(
    images_dir, tmp_path, extra, words):
  proc = _cli(tmp_path, ['--input', images_dir, '--output', 'out'] + extra)
  _failed(proc, EXIT_USAGE, 'bad_invocation', *words)
  assert not (tmp_path / 'out').exists()


def test_allow_unverified_runner_lets_an_unverified_runner_pass(tmp_path):
  """The runner check passes; what stops this run is its missing input."""
  proc = _cli(tmp_path, ['--input', 'nope', '--output', 'out', '--runner',
                         'PrismRunner', '--allow_unverified_runner'])
  error, _ = _failed(proc, EXIT_USAGE, 'bad_invocation', 'does not exist')
  assert re.fullmatch(r'error: The input path \S*nope does not exist\.', error)


@pytest.mark.parametrize('given,expected', [
    (None, None),
    ('direct', 'DirectRunner'), ('Direct', 'DirectRunner'),
    ('DirectRunner', 'DirectRunner'),
    ('apache_beam.runners.direct.direct_runner.DirectRunner', 'DirectRunner'),
    ('portable', 'PortableRunner'), ('PortableRunner', 'PortableRunner'),
    ('apache_beam.runners.portability.portable_runner.PortableRunner',
     'PortableRunner'),
    ('flink', 'FlinkRunner'),
    ('apache_beam.runners.portability.flink_runner.FlinkRunner',
     'FlinkRunner'),
    ('spark', 'SparkRunner'), ('SparkRunner', 'SparkRunner'),
    ('apache_beam.runners.portability.spark_runner.SparkRunner',
     'SparkRunner'),
    ('dataflow', 'DataflowRunner'),
    ('apache_beam.runners.dataflow.dataflow_runner.DataflowRunner',
     'DataflowRunner'),
])
def test_verified_runners_under_any_name_beam_accepts(given, expected):
  assert runner_setup.check_runner(given, False) == expected


def test_unverified_runners_and_unknown_names():
  with pytest.raises(options_lib.UsageError, match='has not been verified'):
    runner_setup.check_runner('PrismRunner', False)
  assert runner_setup.check_runner('PrismRunner', True) == 'PrismRunner'
  for name in ('DirectRuner', 'no.such.module.Runner', 'os.path'):
    with pytest.raises(options_lib.UsageError, match='unknown runner'):
      runner_setup.check_runner(name, True)


# --- paths ------------------------------------------------------------------


def test_relative_local_paths_become_absolute(tmp_path):
  (tmp_path / 'docs.csv').write_text(
      'text,label\n' + ''.join(f'document number {i},{"ab"[i % 2]}\n'
                               for i in range(60)))
  (tmp_path / 'work').mkdir()
  proc = subprocess.run(
      [sys.executable, '-m', 'pipelines.preprocess', '--modality', 'text',
       '--input', '../docs.csv', '--output', '../out'],
      cwd=tmp_path / 'work', env=_env(tmp_path), capture_output=True,
      text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  assert summary['output'] == str(tmp_path / 'out')
  manifest = json.loads((tmp_path / 'out' / 'manifest.json').read_text())
  assert manifest['config']['input'] == str(tmp_path / 'docs.csv')
  assert manifest['config']['output'] == str(tmp_path / 'out')


def test_relative_and_absolute_paths_give_one_config_hash(tmp_path,
                                                          monkeypatch):
  (tmp_path / 'docs.csv').write_text('text,label\nhello there,a\n')
  monkeypatch.chdir(tmp_path)
  _, relative = preprocess._configure(  # pylint: disable=protected-access
      ['--modality', 'text', '--input', 'docs.csv', '--output', 'o'])
  _, absolute = preprocess._configure(  # pylint: disable=protected-access
      ['--modality', 'text', '--input', str(tmp_path / 'docs.csv'),
       '--output', str(tmp_path / 'o'), '--verbose',
       '--allow_unverified_runner'])
  assert relative.input == absolute.input == str(tmp_path / 'docs.csv')
  assert relative.to_json() == absolute.to_json()
  assert relative.config_hash() == absolute.config_hash()
  assert 'verbose' not in absolute.to_json()


@pytest.mark.parametrize('path,expected', [
    ('gs://b/raw/*.csv', 'gs://b/raw/*.csv'),
    ('s3://b/x', 's3://b/x'),
    ('/abs/x', '/abs/x'),
    (None, None),
])
def test_paths_with_a_scheme_are_left_alone(path, expected):
  assert options_lib.absolute_local_path(path) == expected


# --- a crash inside the pipeline ---------------------------------------------

_CRASH = """
import sys
from transforms.modalities.text import parse
def broken(*args, **kwargs):
  raise ValueError('the reader broke\\nsecond line of the message')
parse.iter_table_batches = broken
from pipelines import preprocess
sys.exit(preprocess.main(sys.argv[1:]))
"""


@pytest.fixture(scope='module')
def docs(tmp_path_factory):
  path = tmp_path_factory.mktemp('docs') / 'docs.csv'
  path.write_text('text,label\n' + ''.join(
      f'document {i},{"ab"[i % 2]}\n' for i in range(20)))
  return path


def test_a_crash_names_the_exception_and_its_log_file(docs, tmp_path):
  # Two threads: Beam re-raises the worker's error with a message that is
  # its traceback, and its SDK worker prints it on stderr.
  proc = _cli(tmp_path, ['--modality', 'text', '--input', docs, '--output',
                         'out', '--direct_running_mode', 'multi_threading',
                         '--direct_num_workers', '2'], code=_CRASH)
  said, summary = _failed(proc, outcome.EXIT_PIPELINE_FAILED,
                          'pipeline_failed', 'ValueError: the reader broke')
  # (The first pass to read the documents is the contents pass, which
  # finds the near-duplicate groups.)
  assert re.fullmatch(
      r"ValueError: the reader broke \[while running '[^']*"
      r"ReadContents[^']*'\]", summary['error']), summary['error']
  log = summary['log']
  assert os.path.dirname(log) == str(tmp_path)  # the temp dir (TMPDIR)
  assert re.fullmatch(r'tfrecord-preprocess-\d{8}T\d{6}-[0-9a-f]{6}\.log',
                      os.path.basename(log))
  assert summary['run_id'] in log
  assert said == (f'error: the pipeline failed: {summary["error"]}; the '
                  f'traceback is in {log}.')
  text = open(log, encoding='utf-8').read()
  assert 'Traceback (most recent call last):' in text
  assert 'in broken' in text  # the frame that raised
  assert 'second line of the message' in text


def test_verbose_puts_the_traceback_on_stderr(docs, tmp_path):
  proc = _cli(tmp_path, ['--modality', 'text', '--input', docs, '--output',
                         'out', '--verbose'], code=_CRASH)
  assert proc.returncode == outcome.EXIT_PIPELINE_FAILED
  assert 'Traceback (most recent call last):' in proc.stderr
  assert 'in broken' in proc.stderr  # the frame that raised
  lines = proc.stderr.rstrip().splitlines()
  assert lines[-1].startswith('error: the pipeline failed: ValueError: the '
                              'reader broke')
  assert sum(line.startswith('error:') for line in lines) == 1
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  assert summary['error'].startswith('ValueError: the reader broke')
  assert os.path.exists(summary['log'])


def test_a_data_quality_failure_is_one_sentence_too(tmp_path):
  (tmp_path / 'docs.csv').write_text('text,label\n' + ''.join(
      f'document {i},{"a" if i < 10 else ""}\n' for i in range(20)))
  proc = _cli(tmp_path, ['--modality', 'text', '--input', 'docs.csv',
                         '--output', 'out'])
  _failed(proc, outcome.EXIT_DATA_QUALITY, 'data_quality_failed',
          'data quality: 10 of 20 inputs (50.0%) were dead-lettered')


def test_help_names_the_new_flags(capsys):
  assert preprocess.main(['--help']) == outcome.EXIT_OK
  out = capsys.readouterr().out
  assert '--verbose' in out and '--allow_unverified_runner' in out


def test_describe_finds_the_exception_inside_beams_traceback():
  wrapped = RuntimeError(
      'Traceback (most recent call last):\n'
      '  File "x.py", line 1, in f\n'
      '    raise ValueError(\'a\')\n'
      'ValueError: a [while running \'Step\']\n\n'
      'During handling of the above exception, another exception occurred:\n'
      '\nTraceback (most recent call last):\n'
      '  File "y.py", line 2, in g\n'
      'transforms.core.errors.UsageError: the input is bad\n'
      'and more [while running \'Read/Parse\']\n')
  assert errors.describe(wrapped) == (
      "UsageError: the input is bad [while running 'Read/Parse']")
  assert errors.describe(KeyError('k')) == "KeyError: 'k'"
  assert errors.describe(ValueError('one\ntwo')) == 'ValueError: one'
  assert errors.describe(ValueError()) == 'ValueError'


# --- empty inputs -----------------------------------------------------------


@pytest.mark.parametrize('modality,name,content,extra', [
    ('text', 'docs.csv', 'text,label\n', []),
    ('text', 'docs.tsv', 'text\tlabel\n\n', []),
    ('image', 'manifest.csv', 'path,label\n', []),
    ('sensor', 'rows.csv', 'timestamp,a,b,label\n', []),
    ('sensor', 'rows.csv', 'timestamp,a,b,label\n', ['--channels', 'a,b']),
])
def test_a_header_without_rows_is_an_empty_input(tmp_path, modality, name,
                                                 content, extra):
  (tmp_path / name).write_text(content)
  proc = _cli(tmp_path, ['--modality', modality, '--input', name,
                         '--output', 'out'] + extra)
  _failed(proc, EXIT_USAGE, 'bad_invocation',
          f'{tmp_path / name} is empty: it has a header but no data rows')
  assert not (tmp_path / 'out').exists()  # nothing created


def test_an_empty_image_folder_is_an_empty_input(tmp_path):
  (tmp_path / 'photos').mkdir()
  proc = _cli(tmp_path, ['--input', 'photos', '--output', 'out'])
  _failed(proc, EXIT_USAGE, 'bad_invocation',
          f'input folder {tmp_path / "photos"} is empty')


def test_many_header_only_files_are_an_empty_input_too(tmp_path):
  """Past the few files checked up front, the pipeline's own count finds
  that nothing was read: still a bad invocation, not a quality failure."""
  (tmp_path / 'parts').mkdir()
  for i in range(25):
    (tmp_path / 'parts' / f'p{i:02d}.csv').write_text('text,label\n')
  proc = _cli(tmp_path, ['--modality', 'text', '--input', 'parts/*.csv',
                         '--output', 'out'])
  _, summary = _failed(proc, EXIT_USAGE, 'bad_invocation',
                       'holds no records')
  assert summary['inputs'] == 0
  assert not list((tmp_path / 'out').glob('.staging-*'))


# --- remote paths -----------------------------------------------------------


def test_an_unreachable_bucket_fails_fast(images_dir, tmp_path):
  started = time.monotonic()
  proc = _cli(tmp_path, ['--input', images_dir, '--output',
                         'gs://no-such-bucket-xyz/out'])
  assert time.monotonic() - started < 30
  _failed(proc, EXIT_USAGE, 'bad_invocation',
          'annot reach gs://no-such-bucket-xyz/out (no answer within 12 s')


_WITHOUT_GCS = """
import sys
sys.modules['google.cloud.storage'] = None  # as if it were not installed
from pipelines import preprocess
sys.exit(preprocess.main(sys.argv[1:]))
"""


def test_gs_paths_without_the_gcs_client(images_dir, tmp_path):
  proc = _cli(tmp_path, ['--input', images_dir, '--output',
                         'gs://no-such-bucket-xyz/out'], code=_WITHOUT_GCS)
  _failed(proc, EXIT_USAGE, 'bad_invocation',
          'annot reach gs://no-such-bucket-xyz/out: Beam has no file system '
          'for gs:// paths', 'apache-beam[gcp]')


def test_an_output_tensorflow_cannot_write_is_refused_at_once(images_dir,
                                                              tmp_path):
  """TensorFlow 2.21 has no s3:// file system; tf.Transform would write its
  temporary files there and fail at the end of the run."""
  started = time.monotonic()
  proc = _cli(tmp_path, ['--input', images_dir, '--output',
                         's3://some-bucket/out'])
  assert time.monotonic() - started < 60
  _failed(proc, EXIT_USAGE, 'bad_invocation', 'cannot write s3:// paths',
          'write to gs:// or to a folder every worker reaches')


def test_an_emulator_that_tensorflow_would_not_reach_is_refused(images_dir,
                                                                tmp_path):
  """With STORAGE_EMULATOR_HOST and no https proxy, Beam would write to the
  emulator and tf.Transform to Google's servers."""
  env = _env(tmp_path, STORAGE_EMULATOR_HOST='http://127.0.0.1:9')
  for name in ('https_proxy', 'HTTPS_PROXY'):
    env.pop(name, None)
  proc = subprocess.run(
      [sys.executable, '-m', 'pipelines.preprocess', '--input', images_dir,
       '--output', 'gs://some-bucket/out'], cwd=tmp_path, env=env,
      capture_output=True, text=True, timeout=300)
  _failed(proc, EXIT_USAGE, 'bad_invocation',
          'STORAGE_EMULATOR_HOST names a GCS emulator (http://127.0.0.1:9)',
          'route it to the emulator with https_proxy and CURL_CA_BUNDLE')


# --- the validation command ---------------------------------------------------


@pytest.mark.parametrize('extra,words', [
    (['--direct_running_mode', 'fast'],
     ['--direct_running_mode must be one of in_memory']),
    (['--runner', 'DaskRunner'], ['--runner DaskRunner is refused']),
    (['--runner', 'Directt'], ['unknown runner "Directt"']),
])
def test_validate_refuses_the_same_way(tmp_path, extra, words):
  proc = _cli(tmp_path, ['--output', tmp_path] + extra,
              module='pipelines.validate')
  _failed(proc, EXIT_USAGE, None, *words, json_line=False)


def test_validate_without_output_is_one_sentence(tmp_path):
  proc = _cli(tmp_path, [], module='pipelines.validate')
  _failed(proc, EXIT_USAGE, None, 'required: --output', json_line=False)
