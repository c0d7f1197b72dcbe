"""Measurement code shared by the benchmarks in this folder.

Runs each measured command as its own child process (cwd and PYTHONPATH =
repository root, output to a log file) and records:

- wall seconds;
- peak RSS of that one command: GNU `/usr/bin/time -v` "Maximum resident
  set size" when present, else a fresh wrapper process that reports its own
  RUSAGE_CHILDREN maximum (both: the largest single process of the tree);
- the peak of the summed RSS of the whole process tree, sampled (psutil)
  every 0.2 s (differs only when a command starts worker processes);
- CPU seconds and utilization (cores busy on average), and the share of the
  machine's CPUs that other processes used meanwhile ("other load"), a
  noise indicator.

`measure` runs several commands interleaved (a, b, a, b, ...), `summarize`
takes medians over the repeats and `print_table` prints them. Throughput is
per "unit" (images, rows, ...): the keys are `<unit>_per_second` per run and
`<unit>_per_second_median` per command.
"""

import contextlib
import importlib.metadata
import io
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import psutil

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_DIR = os.path.join(REPO, 'benchmarks')
GNU_TIME = '/usr/bin/time'

# Runs argv[1:] and writes its own RUSAGE_CHILDREN peak RSS (KiB on Linux) to
# the file in the environment; a fresh process per measured child, so the
# maximum is that child's and not the maximum over earlier children.
_WRAPPER = r'''
import os, resource, subprocess, sys
rc = subprocess.call(sys.argv[1:])
with open(os.environ['BENCH_RSS_FILE'], 'w') as f:
  ru = resource.getrusage(resource.RUSAGE_CHILDREN)
  f.write('%d %f' % (ru.ru_maxrss, ru.ru_utime + ru.ru_stime))
sys.exit(rc)
'''


class BenchmarkError(RuntimeError):
  """A child failed or produced the wrong output."""


def base_name(name):
  """'ours@20000' -> 'ours': the command a measured job name stands for."""
  return name.split('@')[0]


def warm_page_cache(root):
  """Reads every file under root (or root itself) once; returns the bytes.

  So no measured command pays for the first read from disk.
  """
  paths = [root] if os.path.isfile(root) else (
      os.path.join(dirpath, name)
      for dirpath, _, names in os.walk(root) for name in names)
  total = 0
  for path in paths:
    with open(path, 'rb') as f:
      while True:
        block = f.read(1 << 24)
        if not block:
          break
        total += len(block)
  return total


# ------------------------------------------------------------ measurement --


def _tree_rss_kib(root_pid):
  """Summed RSS (KiB) of root_pid and all its descendants."""
  try:
    root = psutil.Process(root_pid)
    tree = [root] + root.children(recursive=True)
  except psutil.Error:
    return 0
  total = 0
  for process in tree:
    try:
      total += process.memory_info().rss
    except psutil.Error:
      continue  # exited meanwhile
  return total // 1024


def _busy_cpu_seconds():
  """CPU seconds all processes of the machine have used (all but idle and
  I/O wait)."""
  times = psutil.cpu_times()
  return (times.user + times.nice + times.system + getattr(times, 'irq', 0)
          + getattr(times, 'softirq', 0) + getattr(times, 'steal', 0))


class _TreeSampler(threading.Thread):
  """Samples the process tree's summed RSS until stopped; keeps the peak."""

  def __init__(self, pid, interval=0.2):
    super().__init__(daemon=True)
    self.pid, self.interval = pid, interval
    self.peak_kib = 0
    self._halt = threading.Event()

  def run(self):
    while not self._halt.wait(self.interval):
      try:
        self.peak_kib = max(self.peak_kib, _tree_rss_kib(self.pid))
      except OSError:
        pass

  def stop(self):
    self._halt.set()
    self.join()


def run_measured(name, cmd, log_path, env):
  """Runs one command as a child; returns wall seconds and peak RSS (KiB).

  Raises:
    BenchmarkError: The command exited with a non-zero code.
  """
  with tempfile.NamedTemporaryFile('r', suffix='.rss', delete=False) as tmp:
    rss_file = tmp.name
  env = dict(env, BENCH_RSS_FILE=rss_file)
  if os.access(GNU_TIME, os.X_OK):
    full = [GNU_TIME, '-v', '-o', rss_file] + cmd
    method = 'gnu-time'
  else:
    full = [sys.executable, '-c', _WRAPPER] + cmd
    method = 'rusage-wrapper'
  with open(log_path, 'w') as log:
    log.write('$ ' + shlex.join(cmd) + '\n')
    log.flush()
    busy_before = _busy_cpu_seconds()
    start = time.perf_counter()
    proc = subprocess.Popen(full, cwd=REPO, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    sampler = _TreeSampler(proc.pid)
    sampler.start()
    rc = proc.wait()
    wall = time.perf_counter() - start
    busy_after = _busy_cpu_seconds()
    sampler.stop()
  with open(rss_file) as f:
    rss_text = f.read()
  os.unlink(rss_file)
  if rc != 0:
    with open(log_path) as f:
      tail = f.read()[-4000:]
    raise BenchmarkError(f'{name} failed with exit code {rc}; command:\n  '
                         f'{shlex.join(cmd)}\nlog {log_path} ends with:\n'
                         f'{tail}')
  if method == 'gnu-time':
    peak, cpu = None, 0.0
    for line in rss_text.splitlines():
      key, _, value = line.strip().rpartition(':')
      if key == 'Maximum resident set size (kbytes)':
        peak = int(value)
      elif key in ('User time (seconds)', 'System time (seconds)'):
        cpu += float(value)
    if peak is None:
      raise BenchmarkError(f'no peak RSS in /usr/bin/time output:\n{rss_text}')
  else:
    peak_text, cpu_text = rss_text.split()
    peak, cpu = int(peak_text), float(cpu_text)
  # CPU the rest of the machine used meanwhile, as a share of all CPUs: a
  # noise indicator (0 on an idle machine).
  other = None
  if busy_before is not None and busy_after is not None:
    other = max(0.0, (busy_after - busy_before - cpu) /
                (wall * (os.cpu_count() or 1)))
  return {'seconds': wall, 'peak_rss_kib': peak,
          'tree_rss_kib_sampled': sampler.peak_kib, 'cpu_seconds': cpu,
          'cpu_utilization': cpu / wall, 'other_load_share': other,
          'rss_method': method}


def last_json_line(log_path):
  """The last line of a log that is a JSON object, parsed; else None."""
  with open(log_path) as f:
    for line in reversed(f.read().splitlines()):
      line = line.strip()
      if line.startswith('{') and line.endswith('}'):
        return json.loads(line)
  return None


def child_env():
  env = dict(os.environ)
  env['PYTHONPATH'] = REPO + (os.pathsep + env['PYTHONPATH']
                              if env.get('PYTHONPATH') else '')
  return env


def measure(jobs, repeats, logdir, unit, inspect, check=None):
  """Runs `jobs` ({name: (argv, out, n)}) interleaved `repeats` times.

  Args:
    jobs: {name: (argv, output path, units of work)}; throughput is n/s.
    repeats: Runs of each job.
    logdir: Where each run's output goes, as <name>_r<k>.log.
    unit: What n counts ('images', 'rows'): names the throughput key.
    inspect: inspect(name, out, log_path) -> dict of fields to add to the
      run's result (e.g. records written); called before the run's line is
      printed, may raise BenchmarkError.
    check: Optional check(name, res, out, repeat) called after the run's
      line is printed, to print warnings about its output.

  Returns:
    {name: [result dict of each run]}.
  """
  env = child_env()
  key = f'{unit}_per_second'
  runs = {name: [] for name in jobs}
  for r in range(repeats):
    for name, (cmd, out, n) in jobs.items():
      log_path = os.path.join(logdir, f'{name}_r{r + 1}.log')
      print(f'[repeat {r + 1}/{repeats}] {name}: {shlex.join(cmd)}',
            flush=True)
      res = run_measured(name, cmd, log_path, env)
      extra = inspect(name, out, log_path)
      res[key] = n / res['seconds']
      res.update(extra)
      res['log'] = log_path
      runs[name].append(res)
      other = res['other_load_share']
      print(f'    {res["seconds"]:.1f} s, {res[key]:.1f} '
            f'{unit}/s, peak RSS {res["peak_rss_kib"] / 1024:.0f} MiB '
            f'(tree, sampled: {res["tree_rss_kib_sampled"] / 1024:.0f} MiB), '
            f'CPU {res["cpu_utilization"]:.2f} cores, other load '
            f'{"?" if other is None else f"{other:.0%}"}', flush=True)
      if check is not None:
        check(name, res, out, r + 1)
  return runs


def summarize(runs, unit):
  """Medians (and maxima) over the repeats of each job of `measure`."""
  key = f'{unit}_per_second'
  out = {}
  for name, rs in runs.items():
    others = [r['other_load_share'] for r in rs
              if r['other_load_share'] is not None]
    out[name] = {
        f'{key}_median': statistics.median(r[key] for r in rs),
        'seconds_median': statistics.median(r['seconds'] for r in rs),
        'peak_rss_mib_median': statistics.median(
            r['peak_rss_kib'] for r in rs) / 1024,
        'peak_rss_mib_max': max(r['peak_rss_kib'] for r in rs) / 1024,
        'tree_rss_mib_sampled_max': max(
            r['tree_rss_kib_sampled'] for r in rs) / 1024,
        'cpu_utilization_median': statistics.median(
            r['cpu_utilization'] for r in rs),
        'other_load_share_max': max(others) if others else None,
        'runs': rs,
    }
  return out


def paired_ratio(runs, base, other):
  """The median over the repeats of `measure` of job `other`'s wall time
  over job `base`'s in the same repeat (paired runs, noise shared)."""
  return statistics.median(b['seconds'] / a['seconds']
                           for a, b in zip(runs[base], runs[other]))


def memory_growth(s, sizes, kinds, unit):
  """With two sizes, the sentence of how each kind's peak memory grows
  from the smaller to the larger ('\n\nPeak memory L / S unit: kind
  1.02x, ...'; jobs named '<kind>@<size>' in `s`, summarize's output);
  else ''."""
  if len(sizes) != 2:
    return ''
  small, large = sorted(sizes)
  growth = [f'{kind} ' + format(s[f'{kind}@{large}']['peak_rss_mib_median'] /
                                s[f'{kind}@{small}']['peak_rss_mib_median'],
                                '.2f') + 'x' for kind in kinds]
  return (f'\n\nPeak memory {large:,} / {small:,} {unit}: '
          f'{", ".join(growth)}.')


def print_table(rows, s, unit):
  """rows: [(label, name)]; s: summarize() output."""
  key = f'{unit}_per_second_median'
  rate = f'{unit}/s'
  header = (f'{"":30s} {rate:>9s} {"wall s":>7s} {"peak RSS MiB":>13s}'
            f' {"tree RSS MiB":>13s} {"CPU cores":>9s} {"other load":>10s}')
  print(header)
  print('-' * len(header))
  for label, name in rows:
    r = s[name]
    other = r['other_load_share_max']
    print(f'{label:30s} {r[key]:9.1f} '
          f'{r["seconds_median"]:7.1f} {r["peak_rss_mib_median"]:13.0f} '
          f'{r["tree_rss_mib_sampled_max"]:13.0f} '
          f'{r["cpu_utilization_median"]:9.2f} '
          f'{"?" if other is None else f"{other:.0%}":>10s}')
  print('-' * len(header))


def print_columns_note(unit):
  print(f'{unit}/s, wall s, peak RSS, CPU cores: medians over repeats; '
        'tree RSS: max of the /proc samples; other load: max share of all '
        'CPUs used by other processes during a run (noise).')


def print_problems(problems, what='wrong number of records written'):
  """Prints a WARNING block with one line per problem (nothing if none)."""
  if problems:
    print()
    print(f'WARNING: {what} (timings above still count the whole run):')
    for p in problems:
      print(f'  {p}')


def _cpu_model():
  """The first 'model name' of /proc/cpuinfo (else platform.processor())."""
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        key, _, value = line.partition(':')
        if key.strip() == 'model name':
          return value.strip()
  except OSError:
    pass
  return platform.processor() or None


def _memory_gib():
  """Total memory of the machine in GiB."""
  return psutil.virtual_memory().total / 2**30


def _version(*dists):
  """The installed version of the first of `dists` found, else None.

  From the package metadata: nothing is imported.
  """
  for dist in dists:
    try:
      return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
      continue
  return None


def machine_info():
  return {'cpus': os.cpu_count(), 'cpu_model': _cpu_model(),
          'memory_gib': _memory_gib(), 'python': sys.executable,
          'python_version': platform.python_version(),
          'apache_beam': _version('apache-beam'),
          'tensorflow': _version('tensorflow', 'tensorflow-cpu'),
          'tensorflow_transform': _version('tensorflow-transform'),
          'platform': platform.platform(),
          'rss_method': 'gnu-time' if os.access(GNU_TIME, os.X_OK) else
                        'rusage-wrapper'}


def make_dirs(workdir):
  """(WORKDIR/out, WORKDIR/logs), created if missing."""
  outdir = os.path.join(workdir, 'out')
  logdir = os.path.join(workdir, 'logs')
  os.makedirs(outdir, exist_ok=True)
  os.makedirs(logdir, exist_ok=True)
  return outdir, logdir


def print_commands(jobs):
  print(f'commands (cwd={REPO}, PYTHONPATH={REPO}):')
  for name, (cmd, _, _) in jobs.items():
    print(f'  {name:11s} {shlex.join(cmd)}')


# ------------------------------------------- per-split record count checks --
# For benchmarks whose commands write splits: ours (counts from its
# manifest) and a baseline (counts from the JSON line it prints last).


def split_records(name, out, log_path, unit):
  """{'records', 'splits': {split: N}} a finished command reports, and for
  a baseline '<unit>_read', the inputs it says it read (its JSON `unit`)."""
  if name == 'ours':
    try:
      with open(os.path.join(out, 'manifest.json')) as f:
        manifest = json.load(f)
      splits = {s: int(v['records']) for s, v in manifest['splits'].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
      raise BenchmarkError(
          f'{name} exited 0 but its manifest is unreadable '
          f'({type(e).__name__}: {e}); see {log_path}') from None
    return {'records': sum(splits.values()), 'splits': splits}
  report = last_json_line(log_path)
  if report is None or 'splits' not in report:
    raise BenchmarkError(f'{name} printed no result line; see {log_path}')
  return {'records': report['records'], 'splits': report['splits'],
          f'{unit}_read': report.get(unit)}


def same_splits(a, b):
  """Equal per-split counts; a split missing on one side counts as 0."""
  return all(a.get(k, 0) == b.get(k, 0) for k in set(a) | set(b))


def format_splits(splits):
  return ', '.join(f'{k} {v}' for k, v in splits.items())


def split_count_check(expected):
  """A measure() check that warns right away about wrong split counts.

  Args:
    expected: {job name: {split: records}}.
  """

  def check(name, res, out, repeat):
    del repeat  # unused
    if not same_splits(res['splits'], expected[name]):
      print(f'    WARNING: {name} wrote {format_splits(res["splits"])}; '
            f'expected {format_splits(expected[name])}; output {out}, log '
            f'{res["log"]}', flush=True)

  return check


def split_count_problems(runs, expected, inputs, unit):
  """One line per run whose split counts (or inputs read) are off, and per
  run of ours that disagrees with the baseline.

  Args:
    runs: measure() output.
    expected: {job name: {split: records}}.
    inputs: {job name: inputs in the data}.
    unit: What the inputs are ('rows', 'docs').
  """
  out = []
  for name, rs in runs.items():
    for i, r in enumerate(rs):
      if not same_splits(r['splits'], expected[name]):
        out.append(f'{name} repeat {i + 1}: wrote '
                   f'{format_splits(r["splits"])}, expected '
                   f'{format_splits(expected[name])} ({r["log"]})')
      read = r.get(f'{unit}_read')
      if read not in (None, inputs[name]):
        out.append(f'{name} repeat {i + 1}: read {read} {unit}, the file has '
                   f'{inputs[name]} ({r["log"]})')
  # Ours against the baseline, run by run, where both follow one split
  # rule (also covered by the above unless the expectation itself is off;
  # text splits ours by content and the baseline by row).
  if ('ours' in runs and 'baseline' in runs and
      same_splits(expected['ours'], expected['baseline'])):
    base = runs['baseline'][0]['splits']
    for i, r in enumerate(runs['ours']):
      if not same_splits(r['splits'], base):
        out.append(f'ours repeat {i + 1} and the baseline disagree: '
                   f'{format_splits(r["splits"])} vs {format_splits(base)}')
  return out


# ----------------------------------------------------------- RESULTS.md --
# Each benchmark owns one section of benchmarks/RESULTS.md, between
# `<!-- BEGIN name -->` and `<!-- END name -->` lines, and rewrites it
# after a run at its published settings; the rest of the file is kept
# byte for byte.

RESULTS_PATH = os.path.join(BENCH_DIR, 'RESULTS.md')


def add_results_flags(parser):
  """--results PATH / --no-results, for run_info() and write_results()."""
  group = parser.add_mutually_exclusive_group()
  group.add_argument('--results', metavar='PATH', default=None,
                     help='Rewrite this benchmark\'s section of this file '
                     'after the run, whatever the sizes. Without it, the '
                     'section of benchmarks/RESULTS.md is rewritten only '
                     'by a run at the default sizes and at least the '
                     'default repeats.')
  group.add_argument('--no-results', action='store_true',
                     help='Write no results file.')


def at_defaults(parser, args, sizes, repeats='repeats'):
  """Whether args hold the parser's defaults for each of `sizes` (dests)
  and at least its default for `repeats`: a run RESULTS.md publishes."""
  return (all(getattr(args, k) == parser.get_default(k) for k in sizes) and
          getattr(args, repeats) >= parser.get_default(repeats))


def git_commit(repo=REPO, ignore=(RESULTS_PATH,)):
  """'abc1234', with ' + uncommitted changes' when tracked files differ
  from HEAD (as `git describe --dirty`: untracked files do not count, nor
  the files in `ignore`, so an earlier benchmark's section does not make
  the next run look dirty); None outside a git checkout."""
  def git(*args):
    return subprocess.run(['git', '-C', repo] + list(args),
                          capture_output=True, text=True, check=True,
                          timeout=30).stdout

  try:
    commit = git('rev-parse', '--short', 'HEAD').strip()
    excludes = [':(exclude)' + os.path.relpath(p, repo) for p in ignore]
    dirty = git('status', '--porcelain', '--untracked-files=no', '--', '.',
                *excludes).strip()
  except (OSError, subprocess.SubprocessError):
    return None
  return commit + (' + uncommitted changes' if dirty else '')


def command_line(argv, script=None):
  """The command as run from the repository root: this interpreter and
  script (relative to the root when inside it), then argv."""
  def rel(path):
    path = os.path.abspath(path)
    inside = os.path.commonpath([path, REPO]) == REPO
    return os.path.relpath(path, REPO) if inside else path

  return shlex.join([rel(sys.executable), rel(script or sys.argv[0])] +
                    list(argv))


def run_info(argv, script=None):
  """What a results section records, taken when the run starts."""
  now = time.time()
  return {'date_utc': time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(now)),
          'commit': git_commit(), 'command': command_line(argv, script),
          'machine': machine_info()}


def describe_machine(m):
  """One line: CPUs, CPU model, memory, Python and library versions."""
  mem = m.get('memory_gib')
  libs = ', '.join(f'{name} {m[key]}' for name, key in (
      ('Apache Beam', 'apache_beam'), ('TensorFlow', 'tensorflow'),
      ('tf.Transform', 'tensorflow_transform')) if m.get(key))
  return (f'{m.get("cpus")} cores ({m.get("cpu_model") or "CPU unknown"}), '
          f'{"?" if mem is None else f"{mem:.1f}"} GiB memory, Python '
          f'{m.get("python_version")}' + (f'; {libs}' if libs else ''))


def results_section(name, title, info, body):
  """The text of a section, markers included, ending with a newline."""
  lines = [f'<!-- BEGIN {name} -->', f'## {title}', '',
           f'- Measured: {info["date_utc"]}',
           f'- Commit: {info["commit"] or "unknown (not a git checkout)"}',
           f'- Machine: {describe_machine(info["machine"])}',
           f'- Command (from the repository root): `{info["command"]}`',
           '', body.strip('\n'), f'<!-- END {name} -->']
  return '\n'.join(lines) + '\n'


def replace_section(text, name, section):
  """`text` with the section `name` replaced by `section` (which holds its
  own markers), or with `section` appended when text has none.

  Raises:
    ValueError: The markers of `name` are not one BEGIN line followed by
      one END line.
  """
  begin, end = f'<!-- BEGIN {name} -->', f'<!-- END {name} -->'
  lines = text.splitlines(keepends=True)
  starts = [i for i, line in enumerate(lines) if line.strip() == begin]
  ends = [i for i, line in enumerate(lines) if line.strip() == end]
  if not starts and not ends:
    if not text:
      return section
    return text.rstrip('\n') + '\n\n' + section
  if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
    raise ValueError(f'the markers of section {name!r} are not one '
                     f'{begin!r} line followed by one {end!r} line')
  return ''.join(lines[:starts[0]]) + section + ''.join(lines[ends[0] + 1:])


def write_section(path, name, section):
  """Replaces (or adds) the section `name` of the file at path."""
  try:
    with open(path) as f:
      text = f.read()
  except FileNotFoundError:
    text = ''
  text = replace_section(text, name, section)
  tmp = f'{path}.tmp{os.getpid()}'
  with open(tmp, 'w') as f:
    f.write(text)
  os.replace(tmp, path)


def write_results(args, published, name, title, info, body):
  """Writes the run's section where args (add_results_flags) say.

  Args:
    args: Parsed arguments with .results and .no_results.
    published: Whether the run is at the published settings (default
      sizes, at least the default repeats): only then does it rewrite
      benchmarks/RESULTS.md without --results.
    name, title: The section's marker name and heading.
    info: run_info() of the run.
    body: The section's figures (markdown).

  Returns:
    The path written, or None.
  """
  path = None if args.no_results else args.results or (
      RESULTS_PATH if published else None)
  if path is None:
    if not args.no_results:
      print(f'not written to {os.path.relpath(RESULTS_PATH)}: not the '
            'default sizes and repeats (--results PATH writes anyway)')
    return None
  write_section(path, name, results_section(name, title, info, body))
  print(f'wrote section {name} of {path}')
  return path


class _Tee:
  """A stdout that also keeps what is written to it."""

  def __init__(self, out):
    self.out, self.kept = out, io.StringIO()

  def write(self, text):
    self.kept.write(text)
    return self.out.write(text)

  def flush(self):
    self.out.flush()


@contextlib.contextmanager
def printed():
  """Prints as usual inside the block and keeps a copy: `with printed()
  as kept: ...`, then kept.getvalue()."""
  tee = _Tee(sys.stdout)
  with contextlib.redirect_stdout(tee):
    yield tee.kept


def code_block(text):
  """Printed text as a markdown code block."""
  return '```\n' + text.strip('\n') + '\n```\n'


def same_label_pairs(labels):
  """(a, b): the indices of every pair a < b of items with one label, in
  label order, then a, then b."""
  by_label = {}
  for i, label in enumerate(labels):
    by_label.setdefault(label, []).append(i)
  a, b = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
  for idx in by_label.values():
    idx = np.asarray(idx, np.int64)
    i, j = np.triu_indices(len(idx), 1)
    a.append(idx[i])
    b.append(idx[j])
  return np.concatenate(a), np.concatenate(b)
