"""Throughput and peak memory of our image pipeline against plain baselines.

    python benchmarks/image_benchmark.py [--images 10000] [--repeats 3]
        [--workdir /tmp/tfrecord_bench] [--json results.json]
    python benchmarks/image_benchmark.py --memory-scaling [--repeats 1]

A benchmark, not a test. It makes (or reuses) a corpus of photo-like JPEGs
with `pipelines.sample_data.generate` and runs, each as its own process
(interpreter start-up and imports included, as a user sees it):

  ours  python -m pipelines.preprocess --input CORPUS --output OUT --overwrite
  (a)   benchmarks/baseline_loop.py: single-process loop over
        transforms.images.process_image, one TFRecordWriter file
  (b)   benchmarks/baseline_tf.py: single-process eager TensorFlow ops
        (decode_image, resize_with_pad, encode_jpeg), one TFRecordWriter file

in interleaved order (ours, a, b, ours, a, b, ...), and reports the median
images/s and peak RSS of each and the ratios ours/(a), ours/(b),
ours/max(a, b).

Peak RSS is per child: with /usr/bin/time it is GNU time's "Maximum resident
set size" of that one command (the largest single process of its tree);
without it, a fresh wrapper process runs the command and reports its own
RUSAGE_CHILDREN maximum. A /proc sampler (every 0.2 s) also records the peak
of the summed RSS of the whole process tree, which differs only when a child
starts worker processes.

Each run also records its CPU use (cores busy on average) and the share of
the machine's CPUs that other processes used meanwhile ("other load"), so a
noisy measurement shows as such. Every child's output goes to
WORKDIR/logs/<name>_r<k>.log.

Exit codes: 0 done; 1 a command failed (its log tail is printed); 3 every
command ran but one wrote a different number of records than there are
images (printed as a warning; the numbers are still reported).

--memory-scaling instead runs only ours on two corpora (default 2,000 and
20,000 images) and reports the peak RSS of each and their ratio (target:
<= 1.25, i.e. memory does not grow with the dataset).
"""

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_DIR = os.path.join(REPO, 'benchmarks')
GNU_TIME = '/usr/bin/time'
MEMORY_SCALING_TARGET = 1.25

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


# ----------------------------------------------------------------- corpus --


def _count_images(root):
  sys.path.insert(0, REPO)
  from transforms.images import is_image_path  # pylint: disable=import-outside-toplevel
  n = 0
  for label in os.listdir(root):
    folder = os.path.join(root, label)
    if os.path.isdir(folder):
      n += sum(1 for f in os.listdir(folder) if is_image_path(f))
  return n


def ensure_corpus(workdir, count):
  """The corpus folder of `count` images, generated unless already there."""
  path = os.path.join(workdir, f'corpus_{count}')
  if os.path.isdir(path):
    found = _count_images(path)
    if found == count:
      print(f'corpus: reusing {path} ({count} images)')
      return path
    print(f'corpus: {path} has {found} images, not {count}; regenerating')
    shutil.rmtree(path)
  sys.path.insert(0, REPO)
  from pipelines import sample_data  # pylint: disable=import-outside-toplevel
  os.makedirs(workdir, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=f'.corpus_{count}-', dir=workdir)
  start = time.perf_counter()
  print(f'corpus: generating {count} images into {path} ...', flush=True)
  written = sample_data.generate(tmp, count)
  os.rename(tmp, path)  # only a complete corpus gets the final name
  print(f'corpus: {written} in {time.perf_counter() - start:.0f} s')
  return path


def warm_page_cache(root):
  """Reads every file once so no command pays for the first disk read."""
  total = 0
  for dirpath, _, names in os.walk(root):
    for name in names:
      with open(os.path.join(dirpath, name), 'rb') as f:
        total += len(f.read())
  return total


# ------------------------------------------------------------ measurement --


def _tree_rss_kib(root_pid):
  """Summed RSS (KiB) of root_pid and all its descendants, from /proc."""
  children = {}
  rss = {}
  for entry in os.listdir('/proc'):
    if not entry.isdigit():
      continue
    try:
      with open(f'/proc/{entry}/stat', 'rb') as f:
        stat = f.read()
      # Fields after the command name (which may hold spaces/parens).
      fields = stat[stat.rindex(b')') + 2:].split()
      ppid, pages = int(fields[1]), int(fields[21])
    except (OSError, ValueError, IndexError):
      continue
    pid = int(entry)
    children.setdefault(ppid, []).append(pid)
    rss[pid] = pages
  total, stack = 0, [root_pid]
  while stack:
    pid = stack.pop()
    total += rss.get(pid, 0)
    stack.extend(children.get(pid, ()))
  return total * (os.sysconf('SC_PAGE_SIZE') // 1024)


def _busy_cpu_seconds():
  """CPU seconds all processes of the machine have used (from /proc/stat)."""
  try:
    with open('/proc/stat') as f:
      fields = [int(x) for x in f.readline().split()[1:]]
  except (OSError, ValueError):
    return None
  idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
  return (sum(fields[:8]) - idle) / os.sysconf('SC_CLK_TCK')


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


def _last_json_line(log_path):
  with open(log_path) as f:
    for line in reversed(f.read().splitlines()):
      line = line.strip()
      if line.startswith('{') and line.endswith('}'):
        return json.loads(line)
  return None


def records_written(name, out, log_path):
  """How many records a finished command wrote (from its own report)."""
  if name == 'ours':
    try:
      with open(os.path.join(out, 'manifest.json')) as f:
        return json.load(f)['totals']['records']
    except (OSError, ValueError, KeyError) as e:
      raise BenchmarkError(f'{name} exited 0 but its manifest is unreadable '
                           f'({type(e).__name__}: {e}); see {log_path}') from None
  report = _last_json_line(log_path)
  if report is None:
    raise BenchmarkError(f'{name} printed no result line; see {log_path}')
  return report['records']


def commands(corpus, outdir, n):
  """{name: (argv, output path)} of the three measured commands."""
  py = sys.executable
  ours_out = os.path.join(outdir, f'ours_{n}')
  loop_out = os.path.join(outdir, f'loop_{n}.tfrecord')
  tf_out = os.path.join(outdir, f'tf_{n}.tfrecord')
  return {
      'ours': ([py, '-m', 'pipelines.preprocess', '--input', corpus,
                '--output', ours_out, '--overwrite'], ours_out),
      'a_loop': ([py, os.path.join(BENCH_DIR, 'baseline_loop.py'),
                  '--input', corpus, '--output', loop_out], loop_out),
      'b_tf': ([py, os.path.join(BENCH_DIR, 'baseline_tf.py'),
                '--input', corpus, '--output', tf_out], tf_out),
  }


def child_env():
  env = dict(os.environ)
  env['PYTHONPATH'] = REPO + (os.pathsep + env['PYTHONPATH']
                              if env.get('PYTHONPATH') else '')
  return env


def measure(jobs, repeats, logdir):
  """Runs `jobs` ({name: (argv, out, n)}) interleaved `repeats` times."""
  env = child_env()
  runs = {name: [] for name in jobs}
  for r in range(repeats):
    for name, (cmd, out, n) in jobs.items():
      log_path = os.path.join(logdir, f'{name}_r{r + 1}.log')
      print(f'[repeat {r + 1}/{repeats}] {name}: {shlex.join(cmd)}',
            flush=True)
      res = run_measured(name, cmd, log_path, env)
      got = records_written(name.split('@')[0], out, log_path)
      res['images_per_second'] = n / res['seconds']
      res['records'] = got
      res['log'] = log_path
      runs[name].append(res)
      other = res['other_load_share']
      print(f'    {res["seconds"]:.1f} s, {res["images_per_second"]:.1f} '
            f'images/s, peak RSS {res["peak_rss_kib"] / 1024:.0f} MiB '
            f'(tree, sampled: {res["tree_rss_kib_sampled"] / 1024:.0f} MiB), '
            f'CPU {res["cpu_utilization"]:.2f} cores, other load '
            f'{"?" if other is None else f"{other:.0%}"}', flush=True)
      if got != n:
        # Not fatal for the timing, but loud: the output is wrong.
        print(f'    WARNING: {name} wrote {got} records, expected {n}; '
              f'output {out}, log {log_path}', flush=True)
        if name.split('@')[0] == 'ours':
          keep = f'{out}.short_r{r + 1}'
          shutil.rmtree(keep, ignore_errors=True)
          shutil.copytree(out, keep)
          print(f'    (kept a copy of that output in {keep})', flush=True)
  return runs


def record_problems(runs, expected):
  """One line per run that wrote a different number of records."""
  out = []
  for name, rs in runs.items():
    n = expected[name]
    for i, r in enumerate(rs):
      if r['records'] != n:
        out.append(f'{name} repeat {i + 1}: wrote {r["records"]} records, '
                   f'expected {n} ({r["log"]})')
  return out


def summarize(runs):
  out = {}
  for name, rs in runs.items():
    others = [r['other_load_share'] for r in rs
              if r['other_load_share'] is not None]
    out[name] = {
        'images_per_second_median': statistics.median(
            r['images_per_second'] for r in rs),
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


def print_table(rows, s):
  """rows: [(label, name)]; s: summarize() output."""
  header = (f'{"":30s} {"images/s":>9s} {"wall s":>7s} {"peak RSS MiB":>13s}'
            f' {"tree RSS MiB":>13s} {"CPU cores":>9s} {"other load":>10s}')
  print(header)
  print('-' * len(header))
  for label, name in rows:
    r = s[name]
    other = r['other_load_share_max']
    print(f'{label:30s} {r["images_per_second_median"]:9.1f} '
          f'{r["seconds_median"]:7.1f} {r["peak_rss_mib_median"]:13.0f} '
          f'{r["tree_rss_mib_sampled_max"]:13.0f} '
          f'{r["cpu_utilization_median"]:9.2f} '
          f'{"?" if other is None else f"{other:.0%}":>10s}')
  print('-' * len(header))


def _print_columns_note():
  print('images/s, wall s, peak RSS, CPU cores: medians over repeats; '
        'tree RSS: max of the /proc samples; other load: max share of all '
        'CPUs used by other processes during a run (noise).')


def _print_problems(problems):
  if problems:
    print()
    print('WARNING: wrong number of records written (timings above still '
          'count the whole run):')
    for p in problems:
      print(f'  {p}')


def machine_info():
  return {'cpus': os.cpu_count(), 'python': sys.executable,
          'python_version': platform.python_version(),
          'platform': platform.platform(),
          'rss_method': 'gnu-time' if os.access(GNU_TIME, os.X_OK) else
                        'rusage-wrapper'}


# ------------------------------------------------------------------- main --


def _dirs(workdir):
  outdir = os.path.join(workdir, 'out')
  logdir = os.path.join(workdir, 'logs')
  os.makedirs(outdir, exist_ok=True)
  os.makedirs(logdir, exist_ok=True)
  return outdir, logdir


def _print_commands(jobs):
  print(f'commands (cwd={REPO}, PYTHONPATH={REPO}):')
  for name, (cmd, _, _) in jobs.items():
    print(f'  {name:11s} {shlex.join(cmd)}')


def compare(args):
  corpus = ensure_corpus(args.workdir, args.images)
  print(f'page cache: read {warm_page_cache(corpus) / 2**20:.0f} MiB of '
        'corpus once before measuring')
  outdir, logdir = _dirs(args.workdir)
  jobs = {name: (cmd, out, args.images)
          for name, (cmd, out) in commands(corpus, outdir,
                                           args.images).items()}
  _print_commands(jobs)
  runs = measure(jobs, args.repeats, logdir)
  s = summarize(runs)
  problems = record_problems(runs, {n: j[2] for n, j in jobs.items()})
  ours = s['ours']['images_per_second_median']
  a = s['a_loop']['images_per_second_median']
  b = s['b_tf']['images_per_second_median']
  ratios = {'ours/a': ours / a, 'ours/b': ours / b,
            'ours/max(a,b)': ours / max(a, b)}
  rss_ratios = {
      'ours/a': s['ours']['peak_rss_mib_median'] /
                s['a_loop']['peak_rss_mib_median'],
      'ours/b': s['ours']['peak_rss_mib_median'] /
                s['b_tf']['peak_rss_mib_median']}
  print()
  print(f'{args.images} images, {args.repeats} repeat(s), '
        f'{os.cpu_count()} CPUs')
  print_table([('ours (pipelines.preprocess)', 'ours'),
               ('(a) loop + process_image', 'a_loop'),
               ('(b) eager TF ops', 'b_tf')], s)
  for k, v in ratios.items():
    print(f'throughput {k:14s} {v:6.2f}x')
  for k, v in rss_ratios.items():
    print(f'peak RSS   {k:14s} {v:6.2f}x')
  _print_columns_note()
  _print_problems(problems)
  return {'mode': 'compare', 'images': args.images,
          'repeats': args.repeats, 'corpus': corpus,
          'machine': machine_info(),
          'commands': {n: shlex.join(c) for n, (c, _, _) in jobs.items()},
          'results': s, 'throughput_ratios': ratios,
          'peak_rss_ratios': rss_ratios, 'record_problems': problems}


def memory_scaling(args):
  sizes = [int(x) for x in args.scaling_sizes.split(',')]
  if len(sizes) != 2:
    raise SystemExit('--scaling-sizes needs two sizes, e.g. 2000,20000')
  small, large = sorted(sizes)
  outdir, logdir = _dirs(args.workdir)
  jobs = {}
  for n in (small, large):
    corpus = ensure_corpus(args.workdir, n)
    print(f'page cache: read {warm_page_cache(corpus) / 2**20:.0f} MiB of '
          f'{corpus}')
    cmd, out = commands(corpus, outdir, n)['ours']
    jobs[f'ours@{n}'] = (cmd, out, n)
  _print_commands(jobs)
  runs = measure(jobs, args.repeats, logdir)
  s = summarize(runs)
  problems = record_problems(runs, {n: j[2] for n, j in jobs.items()})
  rss_small = s[f'ours@{small}']['peak_rss_mib_median']
  rss_large = s[f'ours@{large}']['peak_rss_mib_median']
  ratio = rss_large / rss_small
  print()
  print(f'memory scaling of ours, {args.repeats} repeat(s), '
        f'{os.cpu_count()} CPUs')
  print_table([(f'ours, {n} images', f'ours@{n}') for n in (small, large)],
              s)
  verdict = 'OK' if ratio <= MEMORY_SCALING_TARGET else 'OVER TARGET'
  print(f'peak RSS {large}/{small}: {ratio:.2f}x (target <= '
        f'{MEMORY_SCALING_TARGET}) {verdict}')
  _print_columns_note()
  _print_problems(problems)
  return {'mode': 'memory_scaling', 'sizes': [small, large],
          'repeats': args.repeats, 'machine': machine_info(),
          'commands': {n: shlex.join(c) for n, (c, _, _) in jobs.items()},
          'results': s, 'peak_rss_ratio': ratio,
          'target': MEMORY_SCALING_TARGET, 'within_target':
          ratio <= MEMORY_SCALING_TARGET, 'record_problems': problems}


def main(argv=None):
  parser = argparse.ArgumentParser(
      description=__doc__.split('\n')[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--images', type=int, default=10000,
                      help='Corpus size for the comparison (default 10000).')
  parser.add_argument('--repeats', type=int, default=3,
                      help='Runs of each command; medians are reported '
                      '(default 3).')
  parser.add_argument('--workdir', default='/tmp/tfrecord_bench',
                      help='Corpora (corpus_N), outputs and logs '
                      '(default /tmp/tfrecord_bench).')
  parser.add_argument('--json', default=None,
                      help='Also write the results as JSON to this path.')
  parser.add_argument('--memory-scaling', action='store_true',
                      help='Only run ours at two corpus sizes and compare '
                      'peak RSS.')
  parser.add_argument('--scaling-sizes', default='2000,20000',
                      help='The two sizes for --memory-scaling '
                      '(default 2000,20000).')
  args = parser.parse_args(argv)
  if args.images < 1 or args.repeats < 1:
    parser.error('--images and --repeats must be at least 1')
  args.workdir = os.path.abspath(args.workdir)
  try:
    result = memory_scaling(args) if args.memory_scaling else compare(args)
  except BenchmarkError as e:
    print(f'\nBENCHMARK FAILED: {e}', file=sys.stderr)
    return 1
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(result, f, indent=2)
    print(f'wrote {args.json}')
  # Every command ran, but some output was short: say so in the exit code.
  return 3 if result['record_problems'] else 0


if __name__ == '__main__':
  sys.exit(main())
