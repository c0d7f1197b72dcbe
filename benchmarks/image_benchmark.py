"""Throughput and peak memory of our image pipeline against plain baselines.

    python benchmarks/image_benchmark.py [--images 10000] [--repeats 3]
        [--workdir /tmp/tfrecord_bench] [--json results.json]
    python benchmarks/image_benchmark.py --memory-scaling [--repeats 1]
    python benchmarks/image_benchmark.py --runner-modes [--images 10000]
    (each also takes --results PATH | --no-results)

A benchmark, not a test. It makes (or reuses) a corpus of photo-like JPEGs
with `pipelines.sample_data.generate` and runs, each as its own process
(interpreter start-up and imports included, as a user sees it):

  ours  python -m pipelines.preprocess --input CORPUS --output OUT --overwrite
  (a)   benchmarks/baseline_loop.py: single-process loop over
        transforms.modalities.image.processing.process_image, one
        TFRecordWriter file
  (b)   benchmarks/baseline_tf.py: single-process eager TensorFlow ops
        (decode_image, resize_with_pad, encode_jpeg), one TFRecordWriter file

in interleaved order (ours, a, b, ours, a, b, ...), and reports the median
images/s and peak RSS of each and the ratios ours/(a), ours/(b),
ours/max(a, b).

Peak RSS is per child: with /usr/bin/time it is GNU time's "Maximum resident
set size" of that one command (the largest single process of its tree);
without it, a fresh wrapper process runs the command and reports its own
RUSAGE_CHILDREN maximum. A process-tree sampler (psutil, every 0.2 s) also
records the peak of the summed RSS of the whole process tree, which differs
only when a child starts worker processes.

Each run also records its CPU use (cores busy on average) and the share of
the machine's CPUs that other processes used meanwhile ("other load"), so a
noisy measurement shows as such. Every child's output goes to
WORKDIR/logs/<name>_r<k>.log.

Exit codes: 0 done; 1 a command failed (its log tail is printed); 3 every
command ran but one wrote a different number of records than there are
images (printed as a warning; the numbers are still reported).

--runner-modes instead runs only ours, once per DirectRunner mode
(in_memory with 1 worker, multi_threading with 2, multi_processing with 2),
interleaved on one corpus, and reports each mode's throughput against
in_memory's.

A comparison at the default size (or --memory-scaling at its default sizes)
with at least the default repeats rewrites its section of
benchmarks/RESULTS.md (harness.write_results: date, commit, machine,
command, the printed table); --no-results keeps it from doing so, --results
PATH writes the section of that file whatever the sizes. --runner-modes has
no section.

--memory-scaling instead runs only ours on two corpora (default 2,000 and
20,000 images) and reports the peak RSS of each and their ratio (target:
<= 1.25, i.e. memory does not grow with the dataset).
"""

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time

# Shared measurement code (benchmarks/harness.py), also when run from
# elsewhere than this folder.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
import harness
from harness import BENCH_DIR
from harness import BenchmarkError
from harness import REPO
from harness import warm_page_cache
# pylint: enable=g-import-not-at-top,wrong-import-position

MEMORY_SCALING_TARGET = 1.25
UNIT = 'images'


# ----------------------------------------------------------------- corpus --


def _count_images(root):
  sys.path.insert(0, REPO)
  from transforms.modalities.image.processing import is_image_path  # pylint: disable=import-outside-toplevel
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


# ---------------------------------------------------------------- records --


def records_written(name, out, log_path):
  """How many records a finished command wrote (from its own report)."""
  if name == 'ours':
    try:
      with open(os.path.join(out, 'manifest.json')) as f:
        return json.load(f)['totals']['records']
    except (OSError, ValueError, KeyError) as e:
      raise BenchmarkError(f'{name} exited 0 but its manifest is unreadable '
                           f'({type(e).__name__}: {e}); see {log_path}') from None
  report = harness.last_json_line(log_path)
  # baseline_pool.py says "written", the other baselines "records".
  key = 'records' if report and 'records' in report else 'written'
  if report is None or key not in report:
    raise BenchmarkError(f'{name} printed no result line with a record '
                         f'count; see {log_path}')
  return report[key]


def pool_command(corpus, out):
  """benchmarks/baseline_pool.py: multiprocessing.Pool, one process per core."""
  return [sys.executable, os.path.join(BENCH_DIR, 'baseline_pool.py'),
          corpus, out]


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


def inspect_run(name, out, log_path):
  """A harness.measure inspect: the records a finished run wrote."""
  return {'records': records_written(harness.base_name(name), out, log_path)}


def check_count(jobs):
  """A harness.measure check: warns when a run wrote a short output."""

  def check(name, res, out, repeat):
    n, got = jobs[name][2], res['records']
    if got != n:
      # Not fatal for the timing, but loud: the output is wrong.
      print(f'    WARNING: {name} wrote {got} records, expected {n}; '
            f'output {out}, log {res["log"]}', flush=True)
      if harness.base_name(name) == 'ours':
        keep = f'{out}.short_r{repeat}'
        shutil.rmtree(keep, ignore_errors=True)
        shutil.copytree(out, keep)
        print(f'    (kept a copy of that output in {keep})', flush=True)

  return check


def measure(jobs, repeats, logdir):
  """Runs `jobs` ({name: (argv, out, n)}) interleaved `repeats` times."""
  return harness.measure(jobs, repeats, logdir, UNIT, inspect_run,
                         check_count(jobs))


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


# ------------------------------------------------------------ runner modes --

# DirectRunner modes compared by --runner-modes: (name, mode, workers).
RUNNER_MODES = (('in_memory', 'in_memory', 1),
                ('multi_threading', 'multi_threading', 2),
                ('multi_processing', 'multi_processing', 2))


def runner_modes(args):
  """Ours in each DirectRunner mode on one corpus, interleaved."""
  corpus = ensure_corpus(args.workdir, args.images)
  print(f'page cache: read {warm_page_cache(corpus) / 2**20:.0f} MiB of '
        'corpus once before measuring')
  outdir, logdir = harness.make_dirs(args.workdir)
  base, out = commands(corpus, outdir, args.images)['ours']
  jobs = {f'ours@{name}': (base[:-2] + [f'{out}_{name}', '--overwrite',
                                        '--direct_running_mode', mode,
                                        '--direct_num_workers',
                                        str(workers)],
                           f'{out}_{name}', args.images)
          for name, mode, workers in RUNNER_MODES}
  harness.print_commands(jobs)
  runs = measure(jobs, args.repeats, logdir)
  s = harness.summarize(runs, UNIT)
  problems = record_problems(runs, {n: j[2] for n, j in jobs.items()})
  print()
  print(f'DirectRunner modes, {args.images} images, {args.repeats} '
        f'repeat(s), {os.cpu_count()} CPUs')
  harness.print_table([(f'ours, {name}, {workers} worker(s)',
                        f'ours@{name}') for name, _, workers in RUNNER_MODES],
                      s, UNIT)
  first = s[f'ours@{RUNNER_MODES[0][0]}']['images_per_second_median']
  ratios = {}
  for name, _, _ in RUNNER_MODES[1:]:
    ratios[f'{name}/{RUNNER_MODES[0][0]}'] = (
        s[f'ours@{name}']['images_per_second_median'] / first)
    print(f'throughput {name}/{RUNNER_MODES[0][0]} '
          f'{ratios[f"{name}/{RUNNER_MODES[0][0]}"]:6.2f}x')
  harness.print_columns_note(UNIT)
  harness.print_problems(problems)
  return {'mode': 'runner_modes', 'images': args.images,
          'repeats': args.repeats, 'machine': harness.machine_info(),
          'commands': {n: shlex.join(c) for n, (c, _, _) in jobs.items()},
          'results': s, 'throughput_ratios': ratios,
          'record_problems': problems}


# ------------------------------------------------------------------- main --


def compare(args):
  corpus = ensure_corpus(args.workdir, args.images)
  print(f'page cache: read {warm_page_cache(corpus) / 2**20:.0f} MiB of '
        'corpus once before measuring')
  outdir, logdir = harness.make_dirs(args.workdir)
  jobs = {name: (cmd, out, args.images)
          for name, (cmd, out) in commands(corpus, outdir,
                                           args.images).items()}
  harness.print_commands(jobs)
  runs = measure(jobs, args.repeats, logdir)
  s = harness.summarize(runs, UNIT)
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
  with harness.printed() as table:
    print()
    print(f'{args.images} images, {args.repeats} repeat(s), '
          f'{os.cpu_count()} CPUs')
    harness.print_table([('ours (pipelines.preprocess)', 'ours'),
                         ('(a) loop + process_image', 'a_loop'),
                         ('(b) eager TF ops', 'b_tf')], s, UNIT)
    for k, v in ratios.items():
      print(f'throughput {k:14s} {v:6.2f}x')
    for k, v in rss_ratios.items():
      print(f'peak RSS   {k:14s} {v:6.2f}x')
    harness.print_columns_note(UNIT)
    harness.print_problems(problems)
  return {'mode': 'compare', 'images': args.images,
          'repeats': args.repeats, 'corpus': corpus,
          'machine': harness.machine_info(),
          'commands': {n: shlex.join(c) for n, (c, _, _) in jobs.items()},
          'results': s, 'throughput_ratios': ratios,
          'peak_rss_ratios': rss_ratios, 'record_problems': problems,
          'table': table.getvalue()}


def memory_scaling(args):
  sizes = [int(x) for x in args.scaling_sizes.split(',')]
  if len(sizes) != 2:
    raise SystemExit('--scaling-sizes needs two sizes, e.g. 2000,20000')
  small, large = sorted(sizes)
  outdir, logdir = harness.make_dirs(args.workdir)
  jobs = {}
  for n in (small, large):
    corpus = ensure_corpus(args.workdir, n)
    print(f'page cache: read {warm_page_cache(corpus) / 2**20:.0f} MiB of '
          f'{corpus}')
    cmd, out = commands(corpus, outdir, n)['ours']
    jobs[f'ours@{n}'] = (cmd, out, n)
  harness.print_commands(jobs)
  runs = measure(jobs, args.repeats, logdir)
  s = harness.summarize(runs, UNIT)
  problems = record_problems(runs, {n: j[2] for n, j in jobs.items()})
  rss_small = s[f'ours@{small}']['peak_rss_mib_median']
  rss_large = s[f'ours@{large}']['peak_rss_mib_median']
  ratio = rss_large / rss_small
  with harness.printed() as table:
    print()
    print(f'memory scaling of ours, {args.repeats} repeat(s), '
          f'{os.cpu_count()} CPUs')
    harness.print_table(
        [(f'ours, {n} images', f'ours@{n}') for n in (small, large)], s, UNIT)
    verdict = 'OK' if ratio <= MEMORY_SCALING_TARGET else 'OVER TARGET'
    print(f'peak RSS {large}/{small}: {ratio:.2f}x (target <= '
          f'{MEMORY_SCALING_TARGET}) {verdict}')
    harness.print_columns_note(UNIT)
    harness.print_problems(problems)
  return {'mode': 'memory_scaling', 'sizes': [small, large],
          'repeats': args.repeats, 'machine': harness.machine_info(),
          'commands': {n: shlex.join(c) for n, (c, _, _) in jobs.items()},
          'results': s, 'peak_rss_ratio': ratio,
          'target': MEMORY_SCALING_TARGET, 'within_target':
          ratio <= MEMORY_SCALING_TARGET, 'record_problems': problems,
          'table': table.getvalue()}


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
  parser.add_argument('--runner-modes', action='store_true',
                      help='Only run ours, once per DirectRunner mode '
                      '(in_memory/1, multi_threading/2, multi_processing/2), '
                      'and compare throughput.')
  harness.add_results_flags(parser)
  args = parser.parse_args(argv)
  if args.images < 1 or args.repeats < 1:
    parser.error('--images and --repeats must be at least 1')
  args.workdir = os.path.abspath(args.workdir)
  info = harness.run_info(sys.argv[1:] if argv is None else argv, __file__)
  try:
    if args.memory_scaling:
      result = memory_scaling(args)
    elif args.runner_modes:
      result = runner_modes(args)
    else:
      result = compare(args)
  except BenchmarkError as e:
    print(f'\nBENCHMARK FAILED: {e}', file=sys.stderr)
    return 1
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(result, f, indent=2)
    print(f'wrote {args.json}')
  # Every command ran, but some output was short: say so in the exit code
  # (and publish nothing).
  if result['record_problems']:
    return 3
  if args.memory_scaling:
    harness.write_results(
        args, harness.at_defaults(parser, args, ['scaling_sizes']),
        'image_memory_scaling',
        'Image memory as the corpus grows (image_benchmark.py '
        '--memory-scaling)', info, harness.code_block(result['table']))
  elif not args.runner_modes:  # --runner-modes has no section
    harness.write_results(
        args, harness.at_defaults(parser, args, ['images']),
        'image_benchmark',
        'Images against two single-process loops (image_benchmark.py)',
        info, harness.code_block(result['table']))
  return 0


if __name__ == '__main__':
  sys.exit(main())
