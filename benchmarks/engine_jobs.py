"""Where an engine's job spent its time, for engines_benchmark.py:
Flink's REST view of the job (its longest vertices), or the Spark job
server log's account of it (its longest stages).
"""

import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

# The modules beside this one, also when imported from elsewhere than
# this folder.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
import engine_clusters
# pylint: enable=g-import-not-at-top,wrong-import-position

TOP_STEPS = 5  # Flink vertices / Spark stages kept per run


def _get_json(url, timeout=10):
  with urllib.request.urlopen(url, timeout=timeout) as resp:
    return json.load(resp)


def top_steps(steps, n=TOP_STEPS):
  """The n longest of [(name, seconds)], longest first, names shortened."""
  ranked = sorted(steps, key=lambda s: -s[1])[:n]
  return [{'name': name if len(name) <= 120 else name[:117] + '...',
           'seconds': round(seconds, 3)} for name, seconds in ranked]


def flink_job_summary(job):
  """What /jobs/<jid> says about where a job's time went."""
  vertices = job.get('vertices', [])
  return {'jid': job.get('jid'), 'name': job.get('name'),
          'state': job.get('state'),
          'seconds': job.get('duration', 0) / 1000,
          'vertices': len(vertices),
          'top': top_steps([(v.get('name', '?'), v.get('duration', 0) / 1000)
                            for v in vertices])}


def flink_job(job_name):
  """The REST summary of the Flink job named job_name, or {'error': ...}."""
  try:
    jobs = _get_json(
        f'{engine_clusters.FLINK_REST}/jobs/overview')['jobs']
    mine = [j for j in jobs if j.get('name') == job_name]
    if not mine:
      return {'error': f'no Flink job named {job_name}'}
    jid = max(mine, key=lambda j: j.get('start-time', 0))['jid']
    return flink_job_summary(
        _get_json(f'{engine_clusters.FLINK_REST}/jobs/{jid}'))
  except (OSError, ValueError, KeyError, urllib.error.URLError) as e:
    return {'error': f'{type(e).__name__}: {e}'}


_SPARK_TIME = re.compile(r'^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d) ')
_SPARK_STAGE = re.compile(r'DAGScheduler: (\w+Stage \d+ \(.*\)) finished in '
                          r'([0-9.]+) s')
_SPARK_JOB = re.compile(r'DAGScheduler: Job \d+ finished: .* took ([0-9.]+) s')


def spark_job_summary(lines, job_name):
  """Where a Spark job's time went, from the job server log's lines.

  From 'Invoking job <job_name>_...' to 'Job <job_name>_... finished.':
  the seconds between them (1 s resolution), the Spark jobs' summed time
  and the longest stages. Another job running at the same time on the
  cluster would mix its stages in.
  """
  start = end = None
  stages, spark_jobs, inside = [], [], False
  for line in lines:
    if f'Invoking job {job_name}_' in line:
      inside, stages, spark_jobs = True, [], []
      start = _SPARK_TIME.match(line)
    if not inside:
      continue
    m = _SPARK_STAGE.search(line)
    if m:
      stages.append((m.group(1), float(m.group(2))))
    m = _SPARK_JOB.search(line)
    if m:
      spark_jobs.append(float(m.group(1)))
    if re.search(rf'Job {re.escape(job_name)}_\S* finished\.', line):
      end = _SPARK_TIME.match(line)
      break
  if start is None:
    return {'error': f'no "Invoking job {job_name}_" in the job server log'}
  fmt = '%y/%m/%d %H:%M:%S'
  seconds = None if end is None else (
      time.mktime(time.strptime(end.group(1), fmt)) -
      time.mktime(time.strptime(start.group(1), fmt)))
  return {'name': job_name, 'seconds': seconds,
          'spark_jobs': len(spark_jobs),
          'spark_jobs_seconds': round(sum(spark_jobs), 3),
          'stages': len(stages), 'top': top_steps(stages)}


def spark_log_offset():
  try:
    return os.path.getsize(
        os.path.join(engine_clusters.SPARK_RUN, 'job-server.log'))
  except OSError:
    return 0


def spark_job(job_name, offset):
  """spark_job_summary of the job server log written since offset."""
  try:
    with open(os.path.join(engine_clusters.SPARK_RUN, 'job-server.log'),
              'rb') as f:
      f.seek(offset)
      text = f.read().decode('utf-8', 'replace')
  except OSError as e:
    return {'error': f'{type(e).__name__}: {e}'}
  return spark_job_summary(text.splitlines(), job_name)
