"""Every modality on a real Spark cluster, through run_spark.sh.

The cluster is scripts/spark_cluster.sh's: a standalone master and two
workers as separate JVMs (one core each), Beam's Spark job server as the
driver of each job, and the project's SDK worker pool (EXTERNAL
environment). Each run must publish the DirectRunner's dataset
(fingerprints, manifest counts, dead letters) and pass validation.

That the work was spread over both workers is read from the workers
themselves once the job is over: each worker's /json/ lists the executors
it ran for an application among its finished executors, and serves their
logs at /log/. An executor that was granted but given no task still shows
up in the first, so the test asks the second: each worker's executor of the
job's application must have logged "Executor: Finished task" at least once.
Both answers outlive the application (a worker keeps its finished
executors and their work folders), unlike the driver's UI on port 4040,
which ends with the job.
"""

import os
import sys
import time
import urllib.parse
import urllib.request

import pytest

from engines_lib import SPARK_JOB_ENDPOINT
from engines_lib import SPARK_MASTER_UI
from engines_lib import SPARK_WORKER_POOL
from engines_lib import assert_same_dataset
from engines_lib import dataset_facts
from engines_lib import get_json
from engines_lib import preprocess_argv
from engines_lib import run
from engines_lib import summary
from repo import ROOT

RUN_SPARK = os.path.join(ROOT, 'run_spark.sh')
FINISHED_TASK = 'Executor: Finished task'


def spark_argv(modality, inputs, output):
  return ([RUN_SPARK] + preprocess_argv(modality, inputs, output) +
          ['--job_endpoint', SPARK_JOB_ENDPOINT, '--environment', 'EXTERNAL',
           '--environment_config', SPARK_WORKER_POOL])


def app_ids():
  """The ids of every application the master knows, running or done."""
  master = get_json(f'{SPARK_MASTER_UI}/json/')
  return {a['id'] for a in master['activeapps'] + master['completedapps']}


def new_finished_apps(before, wait=60):
  """The applications that appeared since `before`, once none of them is
  still running (the job server stops a job's SparkContext just after
  reporting the job done)."""
  deadline = time.time() + wait
  while True:
    master = get_json(f'{SPARK_MASTER_UI}/json/')
    running = [a for a in master['activeapps'] if a['id'] not in before]
    done = [a for a in master['completedapps'] if a['id'] not in before]
    if not running or time.time() > deadline:
      return running + done
    time.sleep(1)


def executor_log(worker_ui, app_id, executor_id):
  """An executor's stderr, as its worker serves it."""
  query = urllib.parse.urlencode({
      'appId': app_id, 'executorId': executor_id, 'logType': 'stderr',
      'byteLength': 1 << 30})
  with urllib.request.urlopen(f'{worker_ui}/log/?{query}',
                              timeout=30) as response:
    return response.read().decode(errors='replace')


def tasks_finished_per_worker(app_id, timeout=60):
  """{worker id: tasks its executors of the application finished}, for
  every worker the master lists. A worker lists an executor as finished
  only once its process has exited, a few seconds after the application
  ended: waits (up to `timeout` seconds) until every worker lists one."""
  deadline = time.time() + timeout
  while True:
    executors = {}
    for worker in get_json(f'{SPARK_MASTER_UI}/json/')['workers']:
      ui = worker['webuiaddress']
      executors[worker['id']] = (ui, [
          e['id'] for e in get_json(f'{ui}/json/')['finishedexecutors']
          if e['appid'] == app_id])
    if all(ids for _, ids in executors.values()) or time.time() > deadline:
      break
    time.sleep(1)
  return {worker: sum(executor_log(ui, app_id, e).count(FINISHED_TASK)
                      for e in ids)
          for worker, (ui, ids) in executors.items()}


@pytest.mark.parametrize('modality', ['image', 'text', 'sensor'])
def test_each_modality_on_spark_publishes_the_direct_runners_dataset(
    modality, spark_cluster, sample_inputs, direct_runs, tmp_path):
  workers = get_json(f'{SPARK_MASTER_UI}/json/')['workers']
  assert [w['state'] for w in workers] == ['ALIVE', 'ALIVE']
  before = app_ids()
  out = tmp_path / 'dataset'
  proc = run(spark_argv(modality, sample_inputs, out))
  assert proc.returncode == 0, proc.stderr[-4000:]
  result = summary(proc)
  assert result['status'] == 'published'
  assert result['runner'] == 'SparkRunner'
  assert_same_dataset(dataset_facts(out), direct_runs(modality))

  # The job was one Spark application, which ran to the end with tasks
  # finished on both workers.
  apps = new_finished_apps(before)
  assert [a['state'] for a in apps] == ['FINISHED'], apps
  finished = tasks_finished_per_worker(apps[0]['id'])
  assert len(finished) == 2 and all(n > 0 for n in finished.values()), (
      finished)

  check = run([sys.executable, '-m', 'pipelines.validate', '--output',
               str(out)], timeout=600)
  assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
