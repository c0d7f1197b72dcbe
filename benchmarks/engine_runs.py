"""The measured runs of engines_benchmark.py: one modality's command on
every runner, interleaved and repeated, each run a whole process with
the engine's processes sampled and the engine's account of its job.
"""

import contextlib
import os
import shlex
import sys
import threading

import psutil

# The modules beside this one, also when imported from elsewhere than
# this folder.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
import engine_clusters
import engine_figures
import engine_jobs
import engine_processes
import harness
import image_benchmark
# pylint: enable=g-import-not-at-top,wrong-import-position


def _end_own_children():
  """TERM to every process this benchmark started (its descendants): the
  measured command of a run that overran, whose exit code then fails it."""
  for child in psutil.Process().children(recursive=True):
    with contextlib.suppress(psutil.Error):
      child.terminate()


def run_one(name, cmd, log_path, env, runner, job_name, timeout=None):
  """harness.run_measured of one run, with the engine's processes sampled
  and the engine's account of the job; returns the run's result dict.

  A run still going after `timeout` seconds is ended (and fails): a client
  whose job server was restarted under it waits for ever.
  """
  engine = runner if runner in engine_clusters.ENGINES else None
  sampler = engine_processes.EngineSampler(engine) if engine else None
  offset = engine_jobs.spark_log_offset() if engine == 'spark' else None
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
    res['engine_job'] = (engine_jobs.flink_job(job_name) if engine == 'flink'
                         else engine_jobs.spark_job(job_name, offset))
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
      cmd = engine_clusters.runner_command(runner, ours, out, job_name,
                                           spark_via)
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
    name = engine_figures.job_key(runner, tiny)
    _, n, ours, out = jobs[name]
    job_name = f'tfrp-engbench-{tag}-{modality.name}-{runner}-{n}-warmup'
    cmd = engine_clusters.runner_command(runner, ours, out, job_name,
                                         spark_via)
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
      jobs[engine_figures.job_key(runner, n)] = (runner, n, ours,
                                                 f'{out}_{runner}')
      expected[engine_figures.job_key(runner, n)] = want
  warmup_seconds = (warm_up(modality, jobs, tiny, runners, logdir,
                            spark_via, tag, timeout) if warmup else None)
  runs, problems = measure(modality, jobs, expected, repeats, logdir,
                           spark_via, tag, timeout)
  summary = engine_figures.summarize(runs, unit)
  result = {'modality': modality.name, 'unit': unit, 'tiny': tiny,
            'sizes': list(sizes), 'repeats': repeats, 'runners': runners,
            'data': {str(n): p for n, p in data.items()},
            'commands': {name: shlex.join(engine_clusters.runner_command(
                runner, ours, out, 'JOB_NAME', spark_via))
                         for name, (runner, _, ours, out) in jobs.items()},
            'expected_records': expected, 'warmup_seconds': warmup_seconds,
            'results': summary, 'record_problems': problems}
  result.update(engine_figures.figures(summary, runners, sizes, tiny, unit))
  return result
