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
  f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
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
    start = time.perf_counter()
    proc = subprocess.Popen(full, cwd=REPO, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    sampler = _TreeSampler(proc.pid)
    sampler.start()
    rc = proc.wait()
    wall = time.perf_counter() - start
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
    peak = None
    for line in rss_text.splitlines():
      if 'Maximum resident set size' in line:
        peak = int(line.rsplit(':', 1)[1])
    if peak is None:
      raise BenchmarkError(f'no peak RSS in /usr/bin/time output:\n{rss_text}')
  else:
    peak = int(rss_text.strip())
  return {'seconds': wall, 'peak_rss_kib': peak,
          'tree_rss_kib_sampled': sampler.peak_kib, 'rss_method': method}


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
    with open(os.path.join(out, 'manifest.json')) as f:
      return json.load(f)['totals']['records']
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


def measure(jobs, repeats, n_images, logdir):
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
      if got != n:
        raise BenchmarkError(f'{name} wrote {got} records, expected {n}; '
                             f'see {log_path}')
      res['images_per_second'] = n / res['seconds']
      res['records'] = got
      res['log'] = log_path
      runs[name].append(res)
      print(f'    {res["seconds"]:.1f} s, {res["images_per_second"]:.1f} '
            f'images/s, peak RSS {res["peak_rss_kib"] / 1024:.0f} MiB '
            f'(tree, sampled: {res["tree_rss_kib_sampled"] / 1024:.0f} MiB)',
            flush=True)
  return runs


def summarize(runs):
  out = {}
  for name, rs in runs.items():
    out[name] = {
        'images_per_second_median': statistics.median(
            r['images_per_second'] for r in rs),
        'seconds_median': statistics.median(r['seconds'] for r in rs),
        'peak_rss_mib_median': statistics.median(
            r['peak_rss_kib'] for r in rs) / 1024,
        'peak_rss_mib_max': max(r['peak_rss_kib'] for r in rs) / 1024,
        'tree_rss_mib_sampled_max': max(
            r['tree_rss_kib_sampled'] for r in rs) / 1024,
        'runs': rs,
    }
  return out


def machine_info():
  return {'cpus': os.cpu_count(), 'python': sys.executable,
          'python_version': platform.python_version(),
          'platform': platform.platform(),
          'rss_method': 'gnu-time' if os.access(GNU_TIME, os.X_OK) else
                        'rusage-wrapper'}


# ------------------------------------------------------------------- main --


def compare(args):
  corpus = ensure_corpus(args.workdir, args.images)
  print(f'page cache: read {warm_page_cache(corpus) / 2**20:.0f} MiB of '
        'corpus once before measuring')
  outdir = os.path.join(args.workdir, 'out')
  logdir = os.path.join(args.workdir, 'logs')
  os.makedirs(outdir, exist_ok=True)
  os.makedirs(logdir, exist_ok=True)
  jobs = {name: (cmd, out, args.images)
          for name, (cmd, out) in commands(corpus, outdir,
                                           args.images).items()}
  print('commands (cwd=%s, PYTHONPATH=%s):' % (REPO, REPO))
  for name, (cmd, _, _) in jobs.items():
    print(f'  {name:7s} {shlex.join(cmd)}')
  runs = measure(jobs, args.repeats, args.images, logdir)
  s = summarize(runs)
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

  labels = {'ours': 'ours (pipelines.preprocess)',
            'a_loop': '(a) loop + process_image',
            'b_tf': '(b) eager TF ops'}
  print()
  print(f'{args.images} images, {args.repeats} repeat(s), '
        f'{os.cpu_count()} CPUs; medians over repeats')
  header = (f'{"":30s} {"images/s":>9s} {"wall s":>8s} {"peak RSS MiB":>13s}'
            f' {"tree RSS MiB":>13s}')
  print(header)
  print('-' * len(header))
  for name, label in labels.items():
    r = s[name]
    print(f'{label:30s} {r["images_per_second_median"]:9.1f} '
          f'{r["seconds_median"]:8.1f} {r["peak_rss_mib_median"]:13.0f} '
          f'{r["tree_rss_mib_sampled_max"]:13.0f}')
  print('-' * len(header))
  for k, v in ratios.items():
    print(f'throughput {k:14s} {v:6.2f}x')
  for k, v in rss_ratios.items():
    print(f'peak RSS   {k:14s} {v:6.2f}x')
  result = {'mode': 'compare', 'images': args.images,
            'repeats': args.repeats, 'corpus': corpus,
            'machine': machine_info(),
            'commands': {n: shlex.join(c) for n, (c, _, _) in jobs.items()},
            'results': s, 'throughput_ratios': ratios,
            'peak_rss_ratios': rss_ratios}
  return result


def memory_scaling(args):
  sizes = [int(x) for x in args.scaling_sizes.split(',')]
  if len(sizes) != 2:
    raise SystemExit('--scaling-sizes needs two sizes, e.g. 2000,20000')
  small, large = sorted(sizes)
  outdir = os.path.join(args.workdir, 'out')
  logdir = os.path.join(args.workdir, 'logs')
  os.makedirs(outdir, exist_ok=True)
  os.makedirs(logdir, exist_ok=True)
  jobs = {}
  for n in (small, large):
    corpus = ensure_corpus(args.workdir, n)
    print(f'page cache: read {warm_page_cache(corpus) / 2**20:.0f} MiB of '
          f'{corpus}')
    cmd, out = commands(corpus, outdir, n)['ours']
    jobs[f'ours@{n}'] = (cmd, out, n)
  print('commands (cwd=%s, PYTHONPATH=%s):' % (REPO, REPO))
  for name, (cmd, _, _) in jobs.items():
    print(f'  {name:11s} {shlex.join(cmd)}')
  runs = measure(jobs, args.repeats, None, logdir)
  s = summarize(runs)
  rss_small = s[f'ours@{small}']['peak_rss_mib_median']
  rss_large = s[f'ours@{large}']['peak_rss_mib_median']
  ratio = rss_large / rss_small
  print()
  print(f'memory scaling of ours, {args.repeats} repeat(s), medians')
  header = (f'{"images":>8s} {"images/s":>9s} {"wall s":>8s} '
            f'{"peak RSS MiB":>13s} {"tree RSS MiB":>13s}')
  print(header)
  print('-' * len(header))
  for n in (small, large):
    r = s[f'ours@{n}']
    print(f'{n:8d} {r["images_per_second_median"]:9.1f} '
          f'{r["seconds_median"]:8.1f} {r["peak_rss_mib_median"]:13.0f} '
          f'{r["tree_rss_mib_sampled_max"]:13.0f}')
  print('-' * len(header))
  verdict = 'OK' if ratio <= MEMORY_SCALING_TARGET else 'OVER TARGET'
  print(f'peak RSS {large}/{small}: {ratio:.2f}x (target <= '
        f'{MEMORY_SCALING_TARGET}) {verdict}')
  return {'mode': 'memory_scaling', 'sizes': [small, large],
          'repeats': args.repeats, 'machine': machine_info(),
          'commands': {n: shlex.join(c) for n, (c, _, _) in jobs.items()},
          'results': s, 'peak_rss_ratio': ratio,
          'target': MEMORY_SCALING_TARGET, 'within_target':
          ratio <= MEMORY_SCALING_TARGET}


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
  return 0


if __name__ == '__main__':
  sys.exit(main())
