"""What a scheduler relies on: the JSON summary line, exit codes,
partition templating, and a killed run that publishes nothing."""

import calendar
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import sensorgen
from pipelines import options
from pipelines import outcome
from pipelines import preprocess
from pipelines import reader
from pipelines import run_folders
from pipelines import validate
import repo

ROOT = repo.ROOT
TEXT = ['--modality', 'text', '--direct_running_mode', 'in_memory',
        '--direct_num_workers', '1']


def _docs(path, n=120, bad=0):
  lines = ['text,label']
  lines += [f'word{i % 7} word{i % 11} common,{("a", "b")[i % 2]}'
            for i in range(n)]
  lines += [',a'] * bad  # empty texts: dead letters
  path.write_text('\n'.join(lines) + '\n')


def _last_json(stdout):
  line = stdout.strip().splitlines()[-1]
  return json.loads(line)


def test_summary_line_of_a_published_run(tmp_path, capsys):
  src = tmp_path / 'docs.csv'
  _docs(src, bad=2)
  out = tmp_path / 'out'
  code = preprocess.main(['--input', str(src), '--output', str(out)] + TEXT)
  assert code == outcome.EXIT_OK
  summary = _last_json(capsys.readouterr().out)
  manifest = reader.load_manifest(str(out))
  assert summary['status'] == 'published' and summary['published']
  assert summary['exit_code'] == 0 and summary['error'] is None
  assert summary['output'] == str(out)
  assert summary['run_id'] == manifest['run_id']
  assert summary['records'] == manifest['totals']['records'] == 120
  assert summary['inputs'] == 122 and summary['dead_lettered'] == 2
  assert summary['splits'] == {n: s['records']
                               for n, s in manifest['splits'].items()}
  assert summary['fingerprint'] == manifest['fingerprint']
  assert summary['seconds'] > 0


def test_summary_line_of_a_refused_run(tmp_path, capsys):
  src = tmp_path / 'docs.csv'
  _docs(src, bad=30)
  out = tmp_path / 'out'
  code = preprocess.main(['--input', str(src), '--output', str(out)] + TEXT)
  assert code == outcome.EXIT_DATA_QUALITY
  captured = capsys.readouterr()
  summary = _last_json(captured.out)
  assert summary['status'] == 'data_quality_failed'
  assert summary['exit_code'] == 3 and not summary['published']
  # The counts it was refused for.
  assert summary['inputs'] == 150 and summary['dead_lettered'] == 30
  assert summary['fingerprint'] is None
  assert 'dead-lettered' in summary['error']
  assert not (out / 'manifest.json').exists()


def test_summary_line_of_a_bad_invocation(tmp_path, capsys):
  code = preprocess.main(['--input', str(tmp_path / 'missing.csv'),
                          '--output', str(tmp_path / 'out')] + TEXT)
  assert code == outcome.EXIT_USAGE
  captured = capsys.readouterr()
  summary = _last_json(captured.out)
  assert summary == {**summary, 'status': 'bad_invocation', 'exit_code': 2,
                     'published': False, 'records': None, 'run_id': None}
  assert 'does not exist' in summary['error']
  assert captured.err.strip().count('\n') == 0


def test_partition_is_templated_into_input_and_output(tmp_path, capsys):
  (tmp_path / 'raw' / '2026-11-20').mkdir(parents=True)
  _docs(tmp_path / 'raw' / '2026-11-20' / 'docs.csv')
  template_in = str(tmp_path / 'raw' / '{partition}' / 'docs.csv')
  template_out = str(tmp_path / 'datasets' / '{partition}')
  code = preprocess.main(['--input', template_in, '--output', template_out,
                          '--partition', '2026-11-20'] + TEXT)
  assert code == outcome.EXIT_OK
  summary = _last_json(capsys.readouterr().out)
  out = tmp_path / 'datasets' / '2026-11-20'
  assert summary['output'] == str(out)
  assert summary['partition'] == '2026-11-20'
  manifest = reader.load_manifest(str(out))
  assert manifest['config']['partition'] == '2026-11-20'
  assert manifest['config']['input'].endswith('/raw/2026-11-20/docs.csv')


@pytest.mark.parametrize('args,match', [
    (('in/{partition}', 'out', None), '--partition is not given'),
    (('in', 'out', '2026-11-20'), 'neither --input nor --output'),
    (('in/{partition}', 'out/{partition}', '2026/11'),
     'plain path segment'),
    (('in/{partition}', 'out/{partition}', '*'), 'plain path segment'),
])
def test_partition_errors(args, match):
  with pytest.raises(options.UsageError, match=match):
    options.fill_partition(*args)


def test_fill_partition():
  assert options.fill_partition('gs://b/raw/{partition}/*.csv',
                                'gs://b/ds/{partition}', '2026-11-20') == (
                                    'gs://b/raw/2026-11-20/*.csv',
                                    'gs://b/ds/2026-11-20')
  assert options.fill_partition('in', 'out', None) == ('in', 'out')


def _preprocess_command(src, out, *extra):
  return [sys.executable, '-m', 'pipelines.preprocess', '--modality',
          'sensor', '--input', str(src), '--output', str(out),
          '--timestamp_column', 'time', '--entity_column', 'device',
          '--window_length', '20', '--window_stride', '10',
          '--max_bad_fraction', '0.1'] + list(extra)


def test_a_killed_run_publishes_nothing_and_a_rerun_succeeds(tmp_path):
  src = tmp_path / 'log.csv'
  # 200,000 rows: on a quiet machine 100,000 were done 2 s after the
  # pipeline started running, before the kill.
  sensorgen.frame(devices=40, rows_per_device=5000, seed=9).to_csv(
      src, index=False)
  out = tmp_path / 'out'
  env = dict(os.environ, PYTHONPATH=ROOT)
  log = open(tmp_path / 'killed.log', 'w+', encoding='utf-8')
  proc = subprocess.Popen(_preprocess_command(src, out), cwd=ROOT, env=env,
                          stdout=log, stderr=subprocess.STDOUT)
  # Kill it while the pipeline runs: after it has built the pipeline and
  # made its staging folder, before it can publish.
  deadline = time.time() + 120
  try:
    while time.time() < deadline and proc.poll() is None:
      log.seek(0)
      if 'running it' in log.read():
        break
      time.sleep(0.2)
    assert proc.poll() is None, 'the run ended before it could be killed'
    # Half a second into the run, once its staging folder is there.
    time.sleep(0.5)
    while time.time() < deadline and not (out.is_dir() and any(
        f.startswith('run-') for f in os.listdir(out))):
      time.sleep(0.05)
    assert proc.poll() is None, 'the run ended before it could be killed'
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
  finally:
    if proc.poll() is None:
      proc.kill()
    log.close()
  assert proc.returncode == -signal.SIGKILL
  leftovers = os.listdir(out)
  assert 'manifest.json' not in leftovers
  assert not [f for f in leftovers if '.tfrecord' in f], leftovers
  assert any(f.startswith('run-') for f in leftovers), leftovers
  # The killed run's lease is still there; its process is gone, so the
  # rerun takes it over at once.
  assert '.lease.json' in leftovers
  with pytest.raises(reader.DatasetError):
    reader.load_manifest(str(out))
  assert validate.main(['--output', str(out)]) == validate.EXIT_UNSOUND
  # The rerun (no --overwrite needed: nothing was published) succeeds, and
  # the output holds only its own run folder: the killed run's is removed
  # with the publish.
  rerun = subprocess.run(_preprocess_command(src, out), cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600,
                         check=False)
  assert rerun.returncode == 0, rerun.stderr[-2000:]
  summary = _last_json(rerun.stdout)
  assert summary['status'] == 'published'
  assert summary['records'] == 40 * 499  # windows per device of 5,000 rows
  assert [f for f in os.listdir(out) if f.startswith('run-')] == [
      f'run-{summary["run_id"]}']
  assert '.lease.json' not in os.listdir(out)
  report = validate.run(['--output', str(out)])
  assert report['verdict'] == 'pass', [c for c in report['checks']
                                       if c['status'] != 'pass']


def _staging(out, name, files=('part-0.tfrecord', 'tft_tmp/x/saved.pb')):
  for f in files:
    path = out / name / f
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b'left over')


def test_stale_staging_folders_are_removed_by_age(tmp_path):
  out = tmp_path / 'out'
  now = calendar.timegm(time.strptime('20261121T120000', '%Y%m%dT%H%M%S'))
  _staging(out, '.staging-20261117T110000-a1b2c3')  # 97 hours old
  _staging(out, '.staging-20261118T130000-d4e5f6')  # 71 hours old
  _staging(out, '.staging-notarunid')
  _staging(out, 'run-20261117T100000-0a1b2c')  # 98 hours old
  _staging(out, 'run-20261117T090000-3d4e5f')  # older, but published
  (out / 'manifest.json').write_text(
      '{"data_dir": "run-20261117T090000-3d4e5f"}')
  removed = run_folders.remove_stale_staging(str(out), 72, now)
  # Folders of runs from before run folders existed, and run folders.
  assert removed == ['.staging-20261117T110000-a1b2c3',
                     'run-20261117T100000-0a1b2c']
  assert sorted(p.name for p in out.iterdir()) == [
      '.staging-20261118T130000-d4e5f6', '.staging-notarunid',
      'manifest.json', 'run-20261117T090000-3d4e5f']
  assert run_folders.remove_stale_staging(str(out), 0, now) == [
      '.staging-20261118T130000-d4e5f6']
  assert run_folders.remove_stale_staging(str(tmp_path / 'none'), 0, now) == []


def test_a_run_clears_old_staging_and_keeps_recent(tmp_path, capsys,
                                                   caplog):
  src = tmp_path / 'docs.csv'
  _docs(src)
  out = tmp_path / 'out'
  old = 'run-20200101T000000-abcdef'
  recent = 'run-' + time.strftime('%Y%m%dT%H%M%S', time.gmtime(
      time.time() - 3600)) + '-abcdef'
  refused = 'run-' + time.strftime('%Y%m%dT%H%M%S', time.gmtime(
      time.time() - 1800)) + '-fedcba'
  _staging(out, old)
  _staging(out, recent)
  _staging(out, refused, files=('FAILED.json', 'dead_letter.jsonl'))
  code = preprocess.main(['--input', str(src), '--output', str(out)] + TEXT)
  assert code == outcome.EXIT_OK, capsys.readouterr().err
  names = {p.name for p in out.iterdir()}
  assert (f'removed 1 run folder(s) older than 72 hours left by failed '
          f'or killed runs: {old}') in caplog.text
  # Publishing then removed the recent folder of a run that crashed (no
  # other run can be going: this one held the lease); a refused run's
  # folder stays for inspection until it is old.
  assert old not in names and recent not in names
  assert refused in names and 'manifest.json' in names
  code = preprocess.main(['--input', str(src), '--output', str(out),
                          '--overwrite', '--stale_staging_hours', 'soon'] +
                         TEXT)
  assert code == outcome.EXIT_USAGE
  assert ('--stale_staging_hours must be a number of hours, 0 or more, not '
          '"soon"') in capsys.readouterr().err
