"""Our pipeline on the DirectRunner, on Flink and on Spark: time and memory.

    python benchmarks/engines_benchmark.py [--modalities image,sensor,text]
        [--runners direct,flink,spark] [--repeats 3]
        [--workdir /tmp/tfrecord_bench]
        [--image-sizes 10000,20000] [--sensor-sizes 1000000,4000000]
        [--text-sizes 200000,800000]
        [--image-tiny 20] [--sensor-tiny 5000] [--text-tiny 500]
        [--spark-via preprocess|run_spark] [--no-warmup] [--run-timeout 1800]
        [--json results.json] [--results PATH | --no-results]

A benchmark, not a test. For each modality it makes (or reuses) the data
of all_modalities.py (the per-modality benchmarks' generators, the same
sizes) and runs our command of that benchmark, each run a whole process
with start-up (harness.run_measured), interleaved, --repeats times:

  direct  the command as all_modalities.py runs it (DirectRunner)
  flink   ./run_flink.sh ARGS --job_endpoint localhost:8099 --environment
          EXTERNAL --environment_config localhost:8096 --parallelism 2
  spark   ./run_spark.sh ARGS --job_endpoint localhost:8199 --environment
          EXTERNAL --environment_config localhost:8196 (or Beam's
          PortableRunner through python -m pipelines.preprocess with
          --spark-via preprocess)

on the clusters of scripts/flink_cluster.sh and scripts/spark_cluster.sh.
A cluster that is not running is started first (its start is timed and
reported apart, never inside a run) and stopped at the end; one that was
running is left as it was.

During every run a sampler reads /proc every 0.2 s for the peak RSS of
each Flink TaskManager JVM and each Spark executor JVM, and of the SDK
worker processes (the children of each cluster's worker pool; the largest
one is reported), and the CPU the clusters' processes used. After a Flink
run the job's REST view (/jobs/<jid>: duration, the 5 longest vertices)
is kept, after a Spark run the job server log's stages; with --json they
say where the time went.

Reported per modality and runner (medians over the repeats): the fixed
cost (a run at the tiny size), seconds at both sizes, the steady state
(size2 - size1) / (t2 - t1) and its ratio to the DirectRunner's (target:
Flink at least 0.8x), the peak RSS of the launching process (for the
DirectRunner: the run, as in all_modalities.py) and of each TaskManager or
executor and the SDK workers at both sizes, with size2/size1 (target: at
most 1.1x for the engines' processes). PASS/MISS is information, not an
exit code. Record counts are checked as all_modalities.py checks them.

A run of every modality and runner at the default sizes, with the warm-up
and at least 3 repeats, rewrites the `engines` section of
benchmarks/RESULTS.md; --results PATH writes that section of PATH
whatever the sizes, --no-results nothing.

Exit codes: 0 done; 1 a command or a cluster start failed; 3 every command
ran but some wrote wrong record counts (nothing is published then).
"""

import argparse
import contextlib
import glob
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

# The other benchmarks and the shared measurement code, also when run from
# elsewhere than this folder.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
import all_modalities
import harness
from harness import BenchmarkError, REPO
import image_benchmark
sys.path.insert(0, REPO)
from pipelines import launch
# pylint: enable=g-import-not-at-top,wrong-import-position

RUNNERS = ('direct', 'flink', 'spark')
ENGINES = ('flink', 'spark')
FLINK_STEADY_TARGET = 0.8  # Flink's steady state / the DirectRunner's
MEMORY_TARGET = 1.1  # an engine process's peak RSS at size 2 / at size 1
TOP_STEPS = 5  # Flink vertices / Spark stages kept per run

FLINK_REST = 'http://localhost:8081'
FLINK_RUN = os.environ.get('TFRP_FLINK_RUN', '/tmp/tfrecord-pipelines-flink')
SPARK_RUN = os.environ.get('TFRP_RUN_SPARK', '/tmp/tfrecord-pipelines-spark')
FLINK_ARGS = ['--job_endpoint', 'localhost:8099', '--environment',
              'EXTERNAL', '--environment_config', 'localhost:8096',
              '--parallelism', '2']
SPARK_ENDPOINT, SPARK_POOL = 'localhost:8199', 'localhost:8196'
SCRIPTS = {'flink': os.path.join(REPO, 'scripts', 'flink_cluster.sh'),
           'spark': os.path.join(REPO, 'scripts', 'spark_cluster.sh')}
# What a long-lived engine process is labelled in the tables.
WORKER_JVM = {'flink': 'TaskManager', 'spark': 'executor'}
SDK = 'sdk workers'  # the label of the SDK worker processes


# --------------------------------------------------------------- commands --


def flink_command(preprocess_args):
  """run_flink.sh on the local cluster, 2 slots (one per TaskManager)."""
  return [os.path.join(REPO, 'run_flink.sh')] + preprocess_args + FLINK_ARGS


def spark_command(preprocess_args, via='run_spark'):
  """The Spark submission: one place to switch to run_spark.sh.

  via='preprocess' is Beam's PortableRunner through pipelines.preprocess,
  which the Spark job server takes as it is; via='run_spark' is the
  project's wrapper, which sets the same cache of SDK workers itself.
  """
  if via == 'run_spark':
    return ([os.path.join(REPO, 'run_spark.sh')] + preprocess_args +
            ['--job_endpoint', SPARK_ENDPOINT, '--environment', 'EXTERNAL',
             '--environment_config', SPARK_POOL])
  # The cache keeps one SDK worker per executor for the whole job instead
  # of a new Python process per task (scripts/spark_cluster.sh says why).
  return ([sys.executable, '-m', 'pipelines.preprocess'] + preprocess_args +
          ['--runner', 'PortableRunner', '--job_endpoint', SPARK_ENDPOINT,
           '--environment_type', 'EXTERNAL', '--environment_config',
           SPARK_POOL,
           '--environment_cache_millis=' +
           launch.SPARK_ENVIRONMENT_CACHE_MILLIS])


def runner_command(runner, ours, out, job_name, spark_via='run_spark'):
  """Our command (argv of all_modalities) for one runner, writing to out.

  Args:
    runner: One of RUNNERS.
    ours: The DirectRunner argv, [python, '-m', 'pipelines.preprocess',
      ...args] with '--output', PATH among the args.
    out: The output folder of this runner's run.
    job_name: The engine's job name (how the run's job is found in Flink's
      REST view and the Spark job server's log); unused for direct.
    spark_via: See spark_command.
  """
  if ours[1:3] != ['-m', 'pipelines.preprocess']:
    raise ValueError(f'not a pipelines.preprocess command: {ours}')
  args = list(ours[3:])
  args[args.index('--output') + 1] = out
  if runner == 'direct':
    return [ours[0], '-m', 'pipelines.preprocess'] + args
  args += ['--job_name', job_name]
  if runner == 'flink':
    return flink_command(args)
  if runner == 'spark':
    return spark_command(args, spark_via)
  raise ValueError(f'unknown runner {runner!r}')


# ---------------------------------------------------------------- /proc --


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
  pid_dir = os.path.join(FLINK_RUN, 'pid')
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
    workers = pid_file_pids(os.path.join(SPARK_RUN, f'worker-{i}.pid'),
                            'org.apache.spark.deploy.worker.Worker')
    roots += workers
    out[f'{WORKER_JVM["spark"]} {i}'] = [
        p for p in descendants(table, workers)
        if 'CoarseGrainedExecutorBackend' in cmdline(p)]
  pool = pid_file_pids(os.path.join(SPARK_RUN, 'worker-pool.pid'),
                       'pipelines.worker_pool')
  out[SDK] = descendants(table, pool)
  roots += pool
  for name, marker in (('master', 'deploy.master.Master'),
                       ('job-server', 'SparkJobServerDriver')):
    roots += pid_file_pids(os.path.join(SPARK_RUN, f'{name}.pid'), marker)
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


# ------------------------------------------------------ where time goes --


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
    jobs = _get_json(f'{FLINK_REST}/jobs/overview')['jobs']
    mine = [j for j in jobs if j.get('name') == job_name]
    if not mine:
      return {'error': f'no Flink job named {job_name}'}
    jid = max(mine, key=lambda j: j.get('start-time', 0))['jid']
    return flink_job_summary(_get_json(f'{FLINK_REST}/jobs/{jid}'))
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
    return os.path.getsize(os.path.join(SPARK_RUN, 'job-server.log'))
  except OSError:
    return 0


def spark_job(job_name, offset):
  """spark_job_summary of the job server log written since offset."""
  try:
    with open(os.path.join(SPARK_RUN, 'job-server.log'), 'rb') as f:
      f.seek(offset)
      text = f.read().decode('utf-8', 'replace')
  except OSError as e:
    return {'error': f'{type(e).__name__}: {e}'}
  return spark_job_summary(text.splitlines(), job_name)


# -------------------------------------------------------------- clusters --


def cluster_running(engine):
  """Whether `<engine>_cluster.sh status` says it is fully running."""
  return subprocess.run([SCRIPTS[engine], 'status'], cwd=REPO,
                        capture_output=True, check=False).returncode == 0


def ensure_cluster(engine):
  """Starts the engine's cluster unless it runs; returns what happened.

  Returns:
    {'started': bool, 'start_seconds': seconds or None}.

  Raises:
    BenchmarkError: The start script failed.
  """
  if cluster_running(engine):
    print(f'{engine}: cluster already running; it is used as it is and '
          'left running', flush=True)
    return {'started': False, 'start_seconds': None}
  print(f'{engine}: cluster not running; starting it ({SCRIPTS[engine]} '
        'start), timed apart from the runs', flush=True)
  t0 = time.perf_counter()
  proc = subprocess.run([SCRIPTS[engine], 'start'], cwd=REPO,
                        capture_output=True, text=True, check=False)
  seconds = time.perf_counter() - t0
  if proc.returncode != 0:
    raise BenchmarkError(f'{engine}: {SCRIPTS[engine]} start failed after '
                         f'{seconds:.0f} s:\n{proc.stderr[-3000:]}')
  print(f'{engine}: started in {seconds:.1f} s', flush=True)
  return {'started': True, 'start_seconds': seconds}


def stop_cluster(engine):
  print(f'{engine}: stopping the cluster this benchmark started', flush=True)
  proc = subprocess.run([SCRIPTS[engine], 'stop'], cwd=REPO,
                        capture_output=True, text=True, check=False)
  if proc.returncode != 0:
    print(f'{engine}: stop failed:\n{proc.stderr[-2000:]}', flush=True)


# ---------------------------------------------------------------- running --


def job_key(runner, n):
  """'flink@20000': the name of a runner's job at size n in the results."""
  return f'{runner}@{n}'


def _end_own_children():
  """TERM to every process this benchmark started (its descendants): the
  measured command of a run that overran, whose exit code then fails it."""
  for pid in descendants(proc_table(), [os.getpid()]):
    with contextlib.suppress(OSError):
      os.kill(pid, signal.SIGTERM)


def run_one(name, cmd, log_path, env, runner, job_name, timeout=None):
  """harness.run_measured of one run, with the engine's processes sampled
  and the engine's account of the job; returns the run's result dict.

  A run still going after `timeout` seconds is ended (and fails): a client
  whose job server was restarted under it waits for ever.
  """
  engine = runner if runner in ENGINES else None
  sampler = EngineSampler(engine) if engine else None
  offset = spark_log_offset() if engine == 'spark' else None
  watchdog = threading.Timer(timeout, _end_own_children) if timeout else None
  if sampler:
    sampler.start()
  if watchdog:
    watchdog.start()
  try:
    res = harness.run_measured(name, cmd, log_path, env)
  finally:
    if watchdog:
      watchdog.cancel()
    if sampler:
      sampler.stop()
  if engine:
    res['engine'] = sampler.result()
    res['engine_job'] = (flink_job(job_name) if engine == 'flink'
                         else spark_job(job_name, offset))
    # The cluster's CPU is this run's work, not other load.
    res['other_load_share_raw'] = res['other_load_share']
    if res['other_load_share'] is not None:
      res['other_load_share'] = max(
          0.0, res['other_load_share'] - res['engine']['cpu_seconds'] /
          (res['seconds'] * (os.cpu_count() or 1)))
  return res


def record_problem(expected, res):
  """A sentence when a run wrote other record counts than expected."""
  if isinstance(expected, dict):
    if harness.same_splits(res['splits'], expected):
      return None
    return (f'wrote {harness.format_splits(res["splits"])}, expected '
            f'{harness.format_splits(expected)}')
  if res['records'] != expected:
    return f'wrote {res["records"]} records, expected {expected}'
  return None


def inspect(modality, out, log_path):
  """Records a finished run of ours wrote (from its manifest)."""
  if modality.name == 'image':
    return {'records': image_benchmark.records_written('ours', out,
                                                       log_path)}
  return modality.inspect_run('ours', out, log_path)


def _print_run(res, unit):
  key = f'{unit}_per_second'
  line = (f'    {res["seconds"]:.1f} s, {res[key]:.1f} {unit}/s, launcher '
          f'peak RSS {res["peak_rss_kib"] / 1024:.0f} MiB (tree '
          f'{res["tree_rss_kib_sampled"] / 1024:.0f} MiB)')
  eng = res.get('engine')
  if eng:
    peaks = ', '.join(f'{k} {v / 1024:.0f}' for k, v in
                      sorted(eng['peak_rss_kib'].items()))
    job = res['engine_job']
    took = ('?' if job.get('seconds') is None else
            f'{job["seconds"]:.1f} s')
    line += (f'; {peaks} MiB; engine CPU {eng["cpu_seconds"]:.1f} s; job '
             f'{took}' + (f' ({job["error"]})' if 'error' in job else ''))
  other = res['other_load_share']
  line += f'; other load {"?" if other is None else f"{other:.0%}"}'
  print(line, flush=True)


def measure(modality, jobs, expected, repeats, logdir, spark_via, tag,
            timeout=None):
  """Runs jobs ({name: (runner, n, ours argv, out)}) interleaved.

  Returns:
    ({name: [result of each run]}, [record problems]).
  """
  env = harness.child_env()
  unit = modality.unit
  runs = {name: [] for name in jobs}
  problems = []
  for r in range(repeats):
    for name, (runner, n, ours, out) in jobs.items():
      job_name = f'tfrp-engbench-{tag}-{modality.name}-{runner}-{n}-r{r + 1}'
      cmd = runner_command(runner, ours, out, job_name, spark_via)
      log_path = os.path.join(logdir, f'{name}_r{r + 1}.log')
      print(f'[repeat {r + 1}/{repeats}] {name}: {shlex.join(cmd)}',
            flush=True)
      res = run_one(name, cmd, log_path, env, runner, job_name, timeout)
      res.update(inspect(modality, out, log_path))
      res[f'{unit}_per_second'] = n / res['seconds']
      res['log'] = log_path
      runs[name].append(res)
      _print_run(res, unit)
      wrong = record_problem(expected[name], res)
      if wrong:
        problems.append(f'{name} repeat {r + 1}: {wrong} ({log_path})')
        print(f'    WARNING: {name} {wrong}; output {out}', flush=True)
  return runs, problems


def warm_up(modality, jobs, tiny, runners, logdir, spark_via, tag,
            timeout=None):
  """One unmeasured run per runner at the tiny size (as all_modalities:
  no measured run pays for first compiles and cold reads, nor an engine
  for loading its classes for the first job)."""
  env = harness.child_env()
  seconds = {}
  for runner in runners:
    name = job_key(runner, tiny)
    _, n, ours, out = jobs[name]
    job_name = f'tfrp-engbench-{tag}-{modality.name}-{runner}-{n}-warmup'
    cmd = runner_command(runner, ours, out, job_name, spark_via)
    print(f'[warm-up, not measured] {name}: {shlex.join(cmd)}', flush=True)
    res = run_one(name, cmd, os.path.join(logdir, f'{name}_warmup.log'),
                  env, runner, job_name, timeout)
    seconds[name] = res['seconds']
    print(f'    {res["seconds"]:.1f} s', flush=True)
  return seconds


def run_modality(modality, sizes, tiny, runners, repeats, workdir,
                 spark_via='run_spark', warmup=True, tag='x', timeout=None):
  """Measures one modality on every runner; returns its figures."""
  unit = modality.unit
  all_sizes = (tiny,) + tuple(sizes)
  print(f'\n== {modality.name}: {", ".join(f"{n:,}" for n in all_sizes)} '
        f'{unit}, runners {", ".join(runners)}, {repeats} repeat(s)',
        flush=True)
  outdir, logdir = harness.make_dirs(workdir)
  logdir = os.path.join(logdir, 'engines', modality.name)
  os.makedirs(logdir, exist_ok=True)
  jobs, expected, data = {}, {}, {}
  for n in all_sizes:
    if n in data:
      continue
    data[n] = modality.data(workdir, n)
    print(f'page cache: read {harness.warm_page_cache(data[n]) / 2**20:.0f} '
          f'MiB of {data[n]}', flush=True)
    ours, out = modality.commands(data[n], outdir, n)['ours']
    want = modality.expected(data[n], n)['ours']
    for runner in runners:
      # Each runner its own output: a failed run leaves nothing that the
      # next runner's check could count as its own.
      jobs[job_key(runner, n)] = (runner, n, ours, f'{out}_{runner}')
      expected[job_key(runner, n)] = want
  warmup_seconds = (warm_up(modality, jobs, tiny, runners, logdir,
                            spark_via, tag, timeout) if warmup else None)
  runs, problems = measure(modality, jobs, expected, repeats, logdir,
                           spark_via, tag, timeout)
  summary = summarize(runs, unit)
  result = {'modality': modality.name, 'unit': unit, 'tiny': tiny,
            'sizes': list(sizes), 'repeats': repeats, 'runners': runners,
            'data': {str(n): p for n, p in data.items()},
            'commands': {name: shlex.join(runner_command(
                runner, ours, out, 'JOB_NAME', spark_via))
                         for name, (runner, _, ours, out) in jobs.items()},
            'expected_records': expected, 'warmup_seconds': warmup_seconds,
            'results': summary, 'record_problems': problems}
  result.update(figures(summary, runners, sizes, tiny, unit))
  return result


# ---------------------------------------------------------------- figures --


def _median(values):
  values = [v for v in values if v is not None]
  return statistics.median(values) if values else None


def _ratio(a, b):
  return a / b if a is not None and b else None


def summarize(runs, unit):
  """harness.summarize, plus medians of the engine figures of each job."""
  out = harness.summarize(runs, unit)
  for name, rs in runs.items():
    engines = [r['engine'] for r in rs if 'engine' in r]
    if not engines:
      continue
    labels = sorted({k for e in engines for k in e['peak_rss_kib']})
    out[name]['engine_peak_rss_mib_median'] = {
        k: _median([e['peak_rss_kib'].get(k) for e in engines]) / 1024
        for k in labels}
    out[name]['engine_cpu_seconds_median'] = _median(
        [e['cpu_seconds'] for e in engines])
    out[name]['engine_job_seconds_median'] = _median(
        [r['engine_job'].get('seconds') for r in rs])
    # Cores busy, the launcher's and the cluster's CPU together.
    out[name]['cores_busy_median'] = _median(
        [(r['cpu_seconds'] + r['engine']['cpu_seconds']) / r['seconds']
         for r in rs])
  return out


def steady_rate(s1, s2, t1, t2):
  """(s2 - s1) / (t2 - t1), None when size 2 took no longer (noise)."""
  if t1 is None or t2 is None or t2 <= t1:
    return None
  return (s2 - s1) / (t2 - t1)


def figures(summary, runners, sizes, tiny, unit):
  """The reported figures and targets from summarize() output.

  Returns:
    {'figures': {...}, 'targets': [{'target', 'key', 'value', 'met'}]}.
  """
  s1, s2 = sizes

  def get(runner, n, key):
    return summary[job_key(runner, n)].get(key)

  seconds = {r: {str(n): get(r, n, 'seconds_median') for n in sizes}
             for r in runners}
  steady = {r: steady_rate(s1, s2, seconds[r][str(s1)], seconds[r][str(s2)])
            for r in runners}
  direct = steady.get('direct')
  f = {
      'fixed_seconds': {r: get(r, tiny, 'seconds_median') for r in runners},
      'seconds': seconds,
      'steady_state_per_second': steady,
      'steady_state_over_direct': {r: _ratio(steady[r], direct)
                                   for r in runners},
      'launcher_peak_rss_mib': {r: {str(n): get(r, n, 'peak_rss_mib_median')
                                    for n in sizes} for r in runners},
      'launcher_tree_rss_mib': {
          r: {str(n): get(r, n, 'tree_rss_mib_sampled_max') for n in sizes}
          for r in runners},
      'engine_peak_rss_mib': {},
      'engine_peak_rss_ratio': {},
      'engine_job_seconds': {},
      'cores_busy': {},
      'other_load_share_max': {
          r: max((get(r, n, 'other_load_share_max') or 0.0)
                 for n in (tiny,) + tuple(sizes)) for r in runners},
  }
  for r in runners:
    peak = f['launcher_peak_rss_mib'][r]
    f.setdefault('launcher_peak_rss_ratio', {})[r] = _ratio(
        peak[str(s2)], peak[str(s1)])
    f['cores_busy'][r] = {
        str(n): (get(r, n, 'cores_busy_median') if r in ENGINES
                 else get(r, n, 'cpu_utilization_median')) for n in sizes}
    if r not in ENGINES:
      continue
    per = {str(n): get(r, n, 'engine_peak_rss_mib_median') or {}
           for n in sizes}
    labels = sorted(set(per[str(s1)]) | set(per[str(s2)]))
    f['engine_peak_rss_mib'][r] = {
        k: {str(n): per[str(n)].get(k) for n in sizes} for k in labels}
    f['engine_peak_rss_ratio'][r] = {
        k: _ratio(per[str(s2)].get(k), per[str(s1)].get(k)) for k in labels}
    f['engine_job_seconds'][r] = {str(n): get(r, n, 'engine_job_seconds_median')
                                  for n in sizes}
  targets = []
  if 'flink' in runners and 'direct' in runners:
    value = f['steady_state_over_direct']['flink']
    targets.append({'target': f'Flink steady state >= '
                              f'{FLINK_STEADY_TARGET:g}x the DirectRunner\'s',
                    'key': 'steady', 'runner': 'flink', 'value': value,
                    'met': value is not None and value >= FLINK_STEADY_TARGET})
  for r in runners:
    for label, value in f['engine_peak_rss_ratio'].get(r, {}).items():
      targets.append({'target': f'{r} {label} peak RSS {s2:,}/{s1:,} <= '
                                f'{MEMORY_TARGET:g}x',
                      'key': 'memory', 'runner': r, 'label': label,
                      'value': value,
                      'met': value is not None and value <= MEMORY_TARGET})
  return {'figures': f, 'targets': targets}


# -------------------------------------------------------------- rendering --


def _f(value, fmt, suffix='', missing='-'):
  return missing if value is None else f'{value:{fmt}}{suffix}'


def _verdict(met):
  return 'PASS' if met else 'MISS'


def table_rows(result):
  """[(figure, one cell per runner..., target, met)] as text."""
  f, unit, runners = result['figures'], result['unit'], result['runners']
  tiny, (s1, s2) = result['tiny'], result['sizes']
  targets = result['targets']

  def each(fn):
    return tuple(fn(r) for r in runners)

  rows = [(f'fixed cost: seconds, {tiny:,} {unit}',
           *each(lambda r: _f(f['fixed_seconds'][r], '.1f')), '', '')]
  for n in (s1, s2):
    rows.append((f'seconds, {n:,} {unit}',
                 *each(lambda r, n=n: _f(f['seconds'][r][str(n)], '.1f')),
                 '', ''))
  rows.append((f'steady state, {unit}/s ({s1:,} -> {s2:,})',
               *each(lambda r: _f(f['steady_state_per_second'][r], ',.0f',
                                  missing='n/a')), '', ''))
  steady = [t for t in targets if t['key'] == 'steady']
  rows.append(('steady state / the DirectRunner\'s',
               *each(lambda r: _f(f['steady_state_over_direct'][r], '.2f',
                                  'x', missing='n/a')),
               steady[0]['target'] if steady else '',
               _verdict(steady[0]['met']) if steady else ''))
  rows.append((f'job seconds on the engine, {s1:,} / {s2:,}',
               *each(lambda r: ' / '.join(
                   _f(f['engine_job_seconds'][r][str(n)], '.1f')
                   for n in (s1, s2)) if r in ENGINES else ''), '', ''))

  def mib(peaks, ratio):
    return (f'{_f(peaks[str(s1)], ",.0f")} / {_f(peaks[str(s2)], ",.0f")} '
            f'({_f(ratio, ".2f", "x")})')

  rows.append((f'peak RSS MiB of the launching process, {s1:,} / {s2:,} '
               f'(size2/size1)',
               *each(lambda r: mib(f['launcher_peak_rss_mib'][r],
                                   f['launcher_peak_rss_ratio'][r])), '', ''))
  # TaskManager N and executor N share a row (the N-th engine JVM), as
  # do the SDK workers of both.
  keys = sorted({_row_key(k) for r in ENGINES if r in runners
                 for k in f['engine_peak_rss_mib'][r]},
                key=lambda k: (k == SDK, k))
  for key in keys:

    def label_of(r, key=key):
      if r not in ENGINES:
        return None
      return next((k for k in f['engine_peak_rss_mib'][r]
                   if _row_key(k) == key), None)

    def cell(r):
      label = label_of(r)
      if label is None:
        return ''
      return mib(f['engine_peak_rss_mib'][r][label],
                 f['engine_peak_rss_ratio'][r][label])

    mem = {t['runner']: t for t in targets if t['key'] == 'memory' and
           t['label'] == label_of(t['runner'])}
    shown = ('SDK workers (largest)' if key == SDK else
             f'{WORKER_JVM["flink"]} / {WORKER_JVM["spark"]} {key}')
    rows.append((f'peak RSS MiB, {shown}, {s1:,} / {s2:,}', *each(cell),
                 f'<= {MEMORY_TARGET:g}x' if mem else '',
                 ', '.join(f'{r} {_verdict(mem[r]["met"])}'
                           for r in runners if r in mem)))
  rows.append((f'CPU cores busy (launcher + cluster), {s1:,} / {s2:,}',
               *each(lambda r: ' / '.join(_f(f['cores_busy'][r][str(n)],
                                             '.2f') for n in (s1, s2))),
               '', ''))
  rows.append(('other load (max share of CPUs, noise)',
               *each(lambda r: _f(f['other_load_share_max'][r], '.0%')),
               '', ''))

  def records(r):
    wrong = sum(p.startswith(f'{r}@') for p in result['record_problems'])
    return f'{wrong} run(s) WRONG' if wrong else 'as expected'

  rows.append(('record counts', *each(records), '', ''))
  return rows


def _row_key(label):
  """'TaskManager 2' and 'executor 2' -> '2'; the SDK workers -> SDK."""
  return SDK if label == SDK else label.split()[-1]


def header(result):
  return ('figure',) + tuple(result['runners']) + ('target', 'met')


def print_table(result):
  """The modality's table as aligned text, then its record problems."""
  head = header(result)
  rows = [head] + table_rows(result)
  widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
  print()
  print(f'{result["modality"]}: ours on {", ".join(result["runners"])}, '
        f'{result["repeats"]} repeat(s)')
  n = len(head)
  for i, row in enumerate(rows):
    print('  '.join(c.ljust(w) if j == 0 or j >= n - 2 else c.rjust(w)
                    for j, (c, w) in enumerate(zip(row, widths))).rstrip())
    if i == 0:
      print('-' * (sum(widths) + 2 * (len(widths) - 1)))
  harness.print_problems(result['record_problems'])


def print_targets(results):
  """Every modality's targets, met or missed, with their values."""
  print()
  print('targets (information, not an exit code):')
  for r in results:
    for t in r['targets']:
      print(f'  {r["modality"]:7s} {_verdict(t["met"])}  {t["target"]}: '
            f'{_f(t["value"], ".2f", "x", missing="n/a")}')


def describe_clusters(clusters):
  """One line per engine: how its cluster's start was handled."""
  out = []
  for engine, c in clusters.items():
    if c['started']:
      out.append(f'{engine}: not running before; this benchmark started it '
                 f'in {c["start_seconds"]:.1f} s (not part of any run) and '
                 f'{"stopped" if c.get("stopped") else "stops"} it at the '
                 'end')
    else:
      out.append(f'{engine}: already running; used as it was, not started '
                 'or stopped by this benchmark (start time not measured)')
  return out


def markdown_tables(results, clusters, repeats, warmup):
  """How the figures are computed, the clusters, one table per modality."""
  other = max((max(r['figures']['other_load_share_max'].values())
               for r in results), default=0.0)
  lines = [
      ('Every figure is from one run' if repeats == 1 else
       f'Every figure is the median of {repeats} repeats') +
      ' of each command, interleaved over the runners and sizes, each a '
      'whole process with start-up' +
      (', after one unmeasured run of each runner at the tiny size. '
       if warmup else ' (no warm-up run). ') +
      'Flink: run_flink.sh on 2 TaskManagers (1 slot each, parallelism 2); '
      'Spark: the PortableRunner on 2 workers (1 core each); both with the '
      'SDK workers of an EXTERNAL worker pool. Steady state = (size2 - '
      'size1) / (t(size2) - t(size1)). Job seconds: Flink\'s REST duration '
      'of the job, or the Spark job server log\'s (invoke to finished). '
      'Peak RSS of the launching process is that of the largest process of '
      'the command (for the DirectRunner: the run); of a TaskManager or '
      'executor, its JVM; of the SDK workers, the largest of them (all '
      'sampled from /proc every 0.2 s); in parentheses size2/size1. '
      'TaskManagers live across runs (their RSS carries over), executors '
      'start with each run. Other load excludes the clusters\' own CPU. '
      'PASS/MISS is information, not an exit code.',
      '', 'Clusters:', '']
  lines += [f'- {line}' for line in describe_clusters(clusters)]
  if other > 0.1:
    lines += ['', f'Other processes used up to {other:.0%} of the CPUs '
              'during these runs: the figures are noisy.']
  for r in results:
    head = header(r)
    lines += ['', f'### {all_modalities.MODALITIES[r["modality"]].title}', '',
              '| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    lines += ['| ' + ' | '.join(row) + ' |' for row in table_rows(r)]
    if r['record_problems']:
      lines += ['', 'Wrong record counts:', '']
      lines += [f'- {p}' for p in r['record_problems']]
  return '\n'.join(lines) + '\n'


def published(args, names, runners):
  """Whether a run is at the settings RESULTS.md publishes: every modality
  and runner, the default sizes, the warm-up, at least 3 repeats."""
  return (list(names) == list(all_modalities.MODALITIES) and
          list(runners) == list(RUNNERS) and args.warmup and
          args.repeats >= 3 and
          all(getattr(args, f'{m.name}_sizes') == m.default_sizes and
              getattr(args, f'{m.name}_tiny') == m.default_tiny
              for m in all_modalities.MODALITIES.values()))


# ------------------------------------------------------------------- main --

# all_modalities.py's argument types, so both read sizes alike.
_positive = all_modalities._positive  # pylint: disable=protected-access
_sizes = all_modalities._sizes  # pylint: disable=protected-access


def _names(parser, text, allowed, flag):
  names = [n.strip() for n in text.split(',') if n.strip()]
  unknown = [n for n in names if n not in allowed]
  if unknown or not names:
    parser.error(f'{flag} takes {", ".join(allowed)}; got '
                 f'{", ".join(unknown) or "nothing"}')
  return [n for n in allowed if n in names]  # fixed order, no repeats


def parse_args(argv):
  parser = argparse.ArgumentParser(
      description=__doc__.split('\n')[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  mods = all_modalities.MODALITIES
  parser.add_argument('--modalities', default=','.join(mods),
                      help=f'Comma-separated (default {",".join(mods)}).')
  parser.add_argument('--runners', default=','.join(RUNNERS),
                      help=f'Comma-separated (default {",".join(RUNNERS)}); '
                      'the steady-state target needs direct and flink.')
  parser.add_argument('--repeats', type=_positive, default=3,
                      help='Runs of each command; medians are reported '
                      '(default 3).')
  parser.add_argument('--workdir', default='/tmp/tfrecord_bench',
                      help='Data, outputs and logs (default '
                      '/tmp/tfrecord_bench, shared with the other '
                      'benchmarks; logs in WORKDIR/logs/engines).')
  for m in mods.values():
    parser.add_argument(f'--{m.name}-sizes', type=_sizes,
                        default=m.default_sizes,
                        help=f'The two sizes in {m.unit} (default '
                        f'{",".join(str(n) for n in m.default_sizes)}).')
    parser.add_argument(f'--{m.name}-tiny', type=_positive,
                        default=m.default_tiny,
                        help=f'The fixed-cost size in {m.unit} (default '
                        f'{m.default_tiny}).')
  parser.add_argument('--spark-via', choices=('preprocess', 'run_spark'),
                      default='run_spark',
                      help='Submit to Spark with ./run_spark.sh (default), '
                      'or with Beam\'s PortableRunner through '
                      'pipelines.preprocess.')
  parser.add_argument('--no-warmup', dest='warmup', action='store_false',
                      help='No unmeasured run per runner at the tiny size.')
  parser.add_argument('--run-timeout', type=_positive, default=1800,
                      help='Seconds after which a run is ended and counts '
                      'as failed (default 1800).')
  parser.add_argument('--json', default=None,
                      help='Also write every run\'s figures (engine '
                      'processes, Flink vertices, Spark stages) here.')
  harness.add_results_flags(parser)
  args = parser.parse_args(argv)
  args.modality_names = _names(parser, args.modalities, list(mods),
                               '--modalities')
  args.runner_names = _names(parser, args.runners, list(RUNNERS), '--runners')
  args.workdir = os.path.abspath(args.workdir)
  return args


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  args = parse_args(argv)
  info = harness.run_info(argv, __file__)
  names, runners = args.modality_names, args.runner_names
  # Names this invocation's jobs apart from earlier ones on the clusters.
  tag = time.strftime('%H%M%S')
  clusters, results, failed = {}, [], None
  try:
    with contextlib.redirect_stdout(sys.stderr):
      for engine in ENGINES:
        if engine in runners:
          clusters[engine] = ensure_cluster(engine)
    for name in names:
      m = all_modalities.MODALITIES[name]
      # Progress to stderr; the tables to stdout.
      with contextlib.redirect_stdout(sys.stderr):
        result = run_modality(m, getattr(args, f'{name}_sizes'),
                              getattr(args, f'{name}_tiny'), runners,
                              args.repeats, args.workdir, args.spark_via,
                              args.warmup, tag, args.run_timeout)
      results.append(result)
      print_table(result)
      sys.stdout.flush()
  except BenchmarkError as e:
    failed = e
  finally:
    for engine, c in clusters.items():
      if c['started']:
        with contextlib.redirect_stdout(sys.stderr):
          stop_cluster(engine)
        c['stopped'] = True
  print()
  for line in describe_clusters(clusters):
    print(f'cluster {line}')
  if failed:
    print(f'\nBENCHMARK FAILED: {failed}', file=sys.stderr)
    return 1
  print_targets(results)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump({'info': info, 'repeats': args.repeats,
                 'warmup': args.warmup, 'clusters': clusters,
                 'targets': {'flink_steady_over_direct': FLINK_STEADY_TARGET,
                             'engine_memory_ratio': MEMORY_TARGET},
                 'modalities': results}, f, indent=2)
    print(f'wrote {args.json}')
  if any(r['record_problems'] for r in results):
    return 3
  harness.write_results(
      args, published(args, names, runners), 'engines',
      'Our pipeline on the DirectRunner, Flink and Spark '
      '(engines_benchmark.py)', info,
      f'Peak RSS of the launching process by '
      f'{info["machine"]["rss_method"]}. ' +
      markdown_tables(results, clusters, args.repeats, args.warmup))
  return 0


if __name__ == '__main__':
  sys.exit(main())
