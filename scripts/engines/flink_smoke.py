"""Smoke test for the cluster of scripts/flink_cluster.sh.

    scripts/flink_cluster.sh start
    .venv/bin/python scripts/engines/flink_smoke.py

Runs a small Beam pipeline (a GroupByKey and a side input) through Beam's
Flink job server with the worker pool as SDK environment, on Flink's batch
(DataSet) path, checks its result, then asks Flink's REST API whether the job
FINISHED and whether its subtasks ran on at least two TaskManagers. Prints
the REST facts it relied on; exits 0 when all hold, 1 otherwise.
"""

import argparse
import json
import sys
import time
import urllib.request

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to


def rest(base, path):
  with urllib.request.urlopen(base + path, timeout=10) as response:
    return json.load(response)


def run_pipeline(args):
  options = PipelineOptions([
      '--runner', 'PortableRunner',
      '--job_endpoint', args.job_endpoint,
      '--environment_type', 'EXTERNAL',
      '--environment_config', args.worker_pool,
      '--parallelism', str(args.parallelism),
      '--job_name', args.job_name,
  ])
  with beam.Pipeline(options=options) as p:
    weights = p | 'Weights' >> beam.Create([('a', 10), ('b', 100)])
    totals = (
        p
        | 'Numbers' >> beam.Create(list(range(1000)))
        | 'Key' >> beam.Map(lambda n: ('a' if n % 2 else 'b', n))
        | 'Reshuffle' >> beam.Reshuffle()
        | 'Group' >> beam.GroupByKey()
        | 'Weigh' >> beam.Map(
            lambda kv, w: (kv[0], sum(kv[1]) * w[kv[0]]),
            w=beam.pvalue.AsDict(weights)))
    odd, even = sum(range(1, 1000, 2)), sum(range(0, 1000, 2))
    assert_that(totals, equal_to([('a', odd * 10), ('b', even * 100)]))


def check_rest(args, started):
  """Facts from Flink's REST API about the job just run."""
  jobs = [j for j in rest(args.rest, '/jobs/overview')['jobs']
          if j['name'].startswith(args.job_name) and
          j['start-time'] >= started * 1000 - 5000]
  if not jobs:
    print('no job named %s in /jobs/overview' % args.job_name)
    return False
  job = max(jobs, key=lambda j: j['start-time'])
  print('/jobs/overview: ' + json.dumps(
      {k: job[k] for k in ('jid', 'name', 'state', 'duration')}))
  hosts = set()
  detail = rest(args.rest, '/jobs/%s' % job['jid'])
  for vertex in detail['vertices']:
    tms = rest(args.rest, '/jobs/%s/vertices/%s/taskmanagers' %
               (job['jid'], vertex['id']))['taskmanagers']
    ran = [{'taskmanager-id': tm['taskmanager-id'],
            'status': tm['status'],
            'records-in': tm['metrics']['read-records'],
            'records-out': tm['metrics']['write-records']}
           for tm in tms]
    hosts.update(tm['taskmanager-id'] for tm in tms)
    print('vertex %s (parallelism %d): %s' % (
        vertex['name'][:60], vertex['parallelism'], json.dumps(ran)))
  print('taskmanagers that ran subtasks: %s' % sorted(hosts))
  return job['state'] == 'FINISHED' and len(hosts) >= 2


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--job_endpoint', default='localhost:8099')
  parser.add_argument('--worker_pool', default='localhost:8096')
  parser.add_argument('--rest', default='http://localhost:8081')
  parser.add_argument('--parallelism', type=int, default=2)
  parser.add_argument('--job_name', default='tfrp-flink-smoke')
  args = parser.parse_args()
  started = time.time()
  run_pipeline(args)
  print('pipeline finished in %.1f s; result checked' % (time.time() - started))
  ok = check_rest(args, started)
  print('OK' if ok else 'FAILED: job not FINISHED or ran on fewer than 2 '
        'TaskManagers')
  return 0 if ok else 1


if __name__ == '__main__':
  sys.exit(main())
