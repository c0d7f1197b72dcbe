"""An engine's processes, found and sampled during each run of
engines_benchmark.py: the TaskManager and executor JVMs and the SDK
workers (their peak RSS), and every process of the cluster (their CPU),
from the clusters' pid files and the process table.
"""

import contextlib
import glob
import os
import sys
import threading

import psutil

# The modules beside this one, also when imported from elsewhere than
# this folder.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
import engine_clusters
# pylint: enable=g-import-not-at-top,wrong-import-position

# What a long-lived engine process is labelled in the tables.
WORKER_JVM = {'flink': 'TaskManager', 'spark': 'executor'}
SDK = 'sdk workers'  # the label of the SDK worker processes


def process_table():
  """{pid: (ppid, rss KiB, CPU seconds, start time)} of every process.

  CPU seconds are user and system time; the start time (seconds since the
  epoch) tells a process from a later one that reuses its pid.
  """
  out = {}
  for process in psutil.process_iter(
      ['ppid', 'memory_info', 'cpu_times', 'create_time']):
    info = process.info
    if None in info.values():
      continue  # not ours to read
    cpu = info['cpu_times']
    out[process.pid] = (info['ppid'], info['memory_info'].rss // 1024,
                        cpu.user + cpu.system, info['create_time'])
  return out


def descendants(table, roots):
  """The pids under roots (not the roots themselves), from
  process_table()."""
  children = {}
  for pid, row in table.items():
    children.setdefault(row[0], []).append(pid)
  out, stack = [], [c for r in roots for c in children.get(r, ())]
  while stack:
    pid = stack.pop()
    out.append(pid)
    stack.extend(children.get(pid, ()))
  return out


def cmdline(pid):
  """The command line of pid, its arguments joined by spaces ('' if gone)."""
  try:
    return ' '.join(psutil.Process(pid).cmdline())
  except psutil.Error:
    return ''


def pid_file_pids(path, marker):
  """The live pids listed in a pid file whose command line has marker."""
  try:
    with open(path) as f:
      pids = [int(x) for x in f.read().split() if x.isdigit()]
  except OSError:
    return []
  return [p for p in pids if marker in cmdline(p)]


def flink_processes(table):
  """{label: [pids]} of the Flink cluster's processes in one process table.

  'TaskManager N' from the supervised pid files (flink-tfrp-tmN-...) or
  the lines of the daemon script's file, 'sdk workers' are the worker
  pool's children, 'cluster' every process of the cluster (for its CPU).
  """
  pid_dir = os.path.join(engine_clusters.FLINK_RUN, 'pid')
  tms = []
  for path in sorted(glob.glob(os.path.join(pid_dir, '*taskexecutor*.pid'))):
    tms += pid_file_pids(path, 'TaskManagerRunner')
  pool = pid_file_pids(os.path.join(pid_dir, 'worker-pool.pid'),
                       'pipelines.worker_pool')
  others = (pid_file_pids(os.path.join(pid_dir, 'job-server.pid'),
                          'FlinkJobServerDriver') +
            pid_file_pids(os.path.join(
                pid_dir, 'flink-tfrp-standalonesession.pid'),
                          'StandaloneSessionClusterEntrypoint'))
  out = {f'{WORKER_JVM["flink"]} {i + 1}': [p] for i, p in enumerate(tms)}
  out[SDK] = descendants(table, pool)
  roots = tms + pool + others
  out['cluster'] = roots + descendants(table, roots)
  return out


def spark_processes(table):
  """{label: [pids]} of the Spark cluster's processes in one process table.

  'executor N': the CoarseGrainedExecutorBackend JVMs under worker N (one
  per application: a new one each run), 'sdk workers' the worker pool's
  children, 'cluster' every process of the cluster (for its CPU).
  """
  out, roots = {}, []
  for i in (1, 2):
    workers = pid_file_pids(
        os.path.join(engine_clusters.SPARK_RUN, f'worker-{i}.pid'),
        'org.apache.spark.deploy.worker.Worker')
    roots += workers
    out[f'{WORKER_JVM["spark"]} {i}'] = [
        p for p in descendants(table, workers)
        if 'CoarseGrainedExecutorBackend' in cmdline(p)]
  pool = pid_file_pids(
      os.path.join(engine_clusters.SPARK_RUN, 'worker-pool.pid'),
      'pipelines.worker_pool')
  out[SDK] = descendants(table, pool)
  roots += pool
  for name, marker in (('master', 'deploy.master.Master'),
                       ('job-server', 'SparkJobServerDriver')):
    roots += pid_file_pids(
        os.path.join(engine_clusters.SPARK_RUN, f'{name}.pid'), marker)
  out['cluster'] = roots + descendants(table, roots)
  return out


PROCESSES = {'flink': flink_processes, 'spark': spark_processes}


class EngineSampler(threading.Thread):
  """Samples an engine's processes until stopped (harness._TreeSampler's
  idea for a set of pids found anew every sample, so a TaskManager that is
  restarted or an executor that starts mid-run is followed).

  Keeps, per label, the peak RSS of its largest single process and its RSS
  at the first sample, and the CPU seconds every cluster process used while
  sampled (a process that started meanwhile counts from 0).
  """

  def __init__(self, engine, interval=0.2):
    super().__init__(daemon=True)
    self.find, self.interval = PROCESSES[engine], interval
    self.peak_kib, self.first_kib, self.pids = {}, {}, {}
    self._cpu_first, self._cpu_last = {}, {}
    self._halt = threading.Event()
    # (pid, start time) of the processes that ran before the sampler.
    self._before = {(p, row[3]) for p, row in process_table().items()}

  def sample(self):
    table = process_table()
    for label, pids in self.find(table).items():
      if label == 'cluster':
        for p in pids:
          _, _, cpu, started = table.get(p, (0, 0, 0, 0))
          # pid and start time: a reused pid is another process.
          key = (p, started)
          if key not in self._cpu_first:
            self._cpu_first[key] = cpu if key in self._before else 0
          self._cpu_last[key] = cpu
        continue
      rss = max((table[p][1] for p in pids if p in table), default=0)
      self.first_kib.setdefault(label, rss)
      self.peak_kib[label] = max(self.peak_kib.get(label, 0), rss)
      self.pids.setdefault(label, set()).update(pids)

  def run(self):
    while True:
      try:
        self.sample()
      except OSError:
        pass
      if self._halt.wait(self.interval):
        return

  def stop(self):
    self._halt.set()
    self.join()
    with contextlib.suppress(OSError):
      self.sample()  # the last state, after the run's own end

  def result(self):
    cpu = sum(self._cpu_last[k] - self._cpu_first[k]
              for k in self._cpu_last)
    return {'peak_rss_kib': dict(self.peak_kib),
            'rss_at_start_kib': dict(self.first_kib),
            'processes': {k: len(v) for k, v in self.pids.items()},
            'cpu_seconds': cpu}
