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

# The modules beside this one, also when imported from elsewhere than
# this folder.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
import engine_clusters
# pylint: enable=g-import-not-at-top,wrong-import-position

# What a long-lived engine process is labelled in the tables.
WORKER_JVM = {'flink': 'TaskManager', 'spark': 'executor'}
SDK = 'sdk workers'  # the label of the SDK worker processes


def proc_table():
  """{pid: (ppid, rss KiB, CPU ticks, start ticks)} of every process."""
  page_kib = os.sysconf('SC_PAGE_SIZE') // 1024
  out = {}
  for entry in os.listdir('/proc'):
    if not entry.isdigit():
      continue
    try:
      with open(f'/proc/{entry}/stat', 'rb') as f:
        stat = f.read()
      # Fields after the command name (which may hold spaces/parens).
      fields = stat[stat.rindex(b')') + 2:].split()
      out[int(entry)] = (int(fields[1]), int(fields[21]) * page_kib,
                         int(fields[11]) + int(fields[12]), int(fields[19]))
    except (OSError, ValueError, IndexError):
      continue
  return out


def descendants(table, roots):
  """The pids under roots (not the roots themselves), from proc_table()."""
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
  try:
    with open(f'/proc/{pid}/cmdline', 'rb') as f:
      return f.read().replace(b'\0', b' ').decode('utf-8', 'replace')
  except OSError:
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
  """{label: [pids]} of the Flink cluster's processes in one /proc table.

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
  """{label: [pids]} of the Spark cluster's processes in one /proc table.

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


def _boot_ticks():
  """Clock ticks since boot now (the unit of a process's start time)."""
  with open('/proc/uptime') as f:
    return float(f.read().split()[0]) * os.sysconf('SC_CLK_TCK')


class EngineSampler(threading.Thread):
  """Samples an engine's processes until stopped (harness._TreeSampler's
  idea for a set of pids found anew every sample, so a TaskManager that is
  restarted or an executor that starts mid-run is followed).

  Keeps, per label, the peak RSS of its largest single process and its RSS
  at the first sample, and the CPU ticks every cluster process used while
  sampled (a process that started meanwhile counts from 0).
  """

  def __init__(self, engine, interval=0.2):
    super().__init__(daemon=True)
    self.find, self.interval = PROCESSES[engine], interval
    self.peak_kib, self.first_kib, self.pids = {}, {}, {}
    self._cpu_first, self._cpu_last = {}, {}
    self._halt = threading.Event()
    self._start_ticks = _boot_ticks()

  def sample(self):
    table = proc_table()
    for label, pids in self.find(table).items():
      if label == 'cluster':
        for p in pids:
          _, _, ticks, started = table.get(p, (0, 0, 0, 0))
          # pid and start time: a reused pid is another process.
          key = (p, started)
          if key not in self._cpu_first:
            self._cpu_first[key] = (0 if started >= self._start_ticks
                                    else ticks)
          self._cpu_last[key] = ticks
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
    ticks = sum(self._cpu_last[k] - self._cpu_first[k]
                for k in self._cpu_last)
    return {'peak_rss_kib': dict(self.peak_kib),
            'rss_at_start_kib': dict(self.first_kib),
            'processes': {k: len(v) for k, v in self.pids.items()},
            'cpu_seconds': ticks / os.sysconf('SC_CLK_TCK')}
