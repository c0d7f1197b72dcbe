"""A scheduler's SIGTERM to run_spark.sh on a real Spark cluster
(scripts/spark_cluster.sh's, see test_spark.py): the launcher cancels the
job through Beam's Spark job server, its Spark application ends, the run
ends "cancelled" with exit code 143, and the dataset published before at
the same output is left as it was, byte for byte: the cancelled run's
folder is gone, with nothing a worker of the cancelled job wrote into it
after the launcher first removed it (seen here: a hold file made by a
bundle still running in an SDK worker after the application had ended).
"""

import signal
import subprocess
import sys
import time

from engines_lib import SPARK_MASTER_UI
from engines_lib import env
from engines_lib import get_json
from engines_lib import preprocess_argv
from engines_lib import run
from engines_lib import snapshot
from engines_lib import summary
from engines_lib import wait_until
from repo import ROOT
from test_spark import app_ids
from test_spark import spark_argv

# Seconds the job's application runs before the SIGTERM (the sample's
# runs take 50-90 s in all).
RUNNING_FOR = 15


def _active(before):
  """The applications that appeared since `before` and still run."""
  master = get_json(f'{SPARK_MASTER_UI}/json/')
  return [a for a in master['activeapps'] if a['id'] not in before]


def test_sigterm_cancels_the_spark_application_and_keeps_the_published_dataset(  # pylint: disable=line-too-long
    spark_cluster, sample_inputs, tmp_path):
  del spark_cluster
  out = tmp_path / 'dataset'
  first = run([sys.executable, '-m', 'pipelines.preprocess'] +
              preprocess_argv('image', sample_inputs, out))
  assert first.returncode == 0, first.stderr[-3000:]
  with open(out / 'manifest.json', 'rb') as f:
    manifest = f.read()
  files = snapshot(out)

  before = app_ids()
  stdout, stderr = tmp_path / 'stdout.txt', tmp_path / 'stderr.txt'
  with open(stdout, 'w', encoding='utf-8') as o, \
      open(stderr, 'w', encoding='utf-8') as e:
    # run_spark.sh execs Python, so this pid gets the signal.
    launch = subprocess.Popen(
        spark_argv('image', sample_inputs, out) + ['--overwrite'], cwd=ROOT,
        env=env(), stdout=o, stderr=e, stdin=subprocess.DEVNULL)
  try:
    # The job's application has run on the cluster for RUNNING_FOR
    # seconds: its executors are at work.
    apps = wait_until(lambda: launch.poll() is None and _active(before),
                      600, interval=0.5,
                      what="the run's Spark application to start")
    time.sleep(RUNNING_FOR)
    assert launch.poll() is None and _active(before), (
        stderr.read_text(encoding='utf-8')[-4000:])
    launch.send_signal(signal.SIGTERM)
    signalled_at = time.monotonic()
    code = launch.wait(timeout=300)
    exited_after = time.monotonic() - signalled_at
    left_at_exit = snapshot(out)
  finally:
    if launch.poll() is None:
      launch.kill()
      launch.wait()
  err = stderr.read_text(encoding='utf-8')
  assert code == 143, err[-6000:]
  result = summary(subprocess.CompletedProcess(
      [], code, stdout.read_text(encoding='utf-8'), err))
  assert result['status'] == 'cancelled', result
  assert result['exit_code'] == 143
  assert result['published'] is False

  # The application ended on the cluster too, not only its launcher, and
  # at once: left alone, the job would have run on for most of a minute.
  [app] = apps
  wait_until(lambda: not _active(before), 30,
             what='the Spark application to end within 30 s')
  ended_after = time.monotonic() - signalled_at
  master = get_json(f'{SPARK_MASTER_UI}/json/')
  [done] = [a for a in master['completedapps'] if a['id'] == app['id']]
  print(f'\nrun_spark.sh exited {exited_after:.1f} s after SIGTERM; '
        f'application {app["id"]} ended ({done["state"]}) '
        f'{ended_after:.1f} s after it, {done["duration"] / 1000:.1f} s '
        'after it started')

  # Nothing published: the earlier dataset is there, byte for byte, and
  # the cancelled run left no folder behind, neither when its launcher
  # exited nor once its application had ended.
  assert left_at_exit == files
  with open(out / 'manifest.json', 'rb') as f:
    assert f.read() == manifest
  assert snapshot(out) == files
