"""Throughput and peak memory of our sensor pipeline against a plain script.

    python benchmarks/sensor_benchmark.py [--rows 1000000] [--repeats 3]
        [--workdir /tmp/tfrecord_bench] [--json results.json]
        [--only ours|baseline] [--results PATH | --no-results]
    python benchmarks/sensor_benchmark.py --memory-scaling [--repeats 1]

A benchmark, not a test. It makes (or reuses) a sensor log CSV with
benchmarks/sensor_data.py (100 devices, 8 channels, 4 imbalanced labels in
bouts) and runs, each as its own process (interpreter start-up and imports
included, as a user sees it):

  ours      python -m pipelines.preprocess --modality sensor ... (windows of
            50 rows every 25 rows per device, z-score, 3 splits by device)
  baseline  benchmarks/sensor_baseline.py: pandas + NumPy + one
            tf.io.TFRecordWriter per split, single process, whole file in
            memory

in interleaved order (ours, baseline, ours, baseline, ...), and reports the
median rows/s (rows = input rows) and peak RSS of each and the ratios
ours/baseline. Measurement (peak RSS, tree RSS, CPU, other load, logs in
WORKDIR/logs/<name>_r<k>.log) is benchmarks/harness.py, as for
image_benchmark.py.

Record counts are checked per split: ours from OUT/manifest.json, the
baseline from the JSON line it prints, both against the windows the
generator's layout implies (every device's rows // stride arithmetic, split
by device name) and against each other.

Exit codes: 0 done; 1 a command failed (its log tail is printed); 3 every
command ran but the per-split record counts disagree (printed as a
warning; the numbers are still reported).

A comparison of both commands at the default rows (or --memory-scaling at
its default sizes) with at least the default repeats rewrites its section
of benchmarks/RESULTS.md (harness.write_results: date, commit, machine,
command, the printed table); --no-results keeps it from doing so,
--results PATH writes the section of that file whatever the sizes.

--memory-scaling instead runs only ours on two files (default 1,000,000 and
4,000,000 rows) and reports the peak RSS of each and their ratio (target:
flat, i.e. memory does not grow with the input).
"""

import argparse
import json
import os
import shlex
import sys
import time

# Shared measurement code (benchmarks/harness.py) and the generator, also
# when run from elsewhere than this folder.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
import harness
from harness import BENCH_DIR
from harness import BenchmarkError
from harness import REPO
import sensor_data
# pylint: enable=g-import-not-at-top,wrong-import-position

UNIT = 'rows'
NAMES = ('ours', 'baseline')
WINDOW, STRIDE = 50, 25
SPLITS = (('train', 0.8), ('validation', 0.1), ('test', 0.1))
DEVICES = 100  # of the generated data
MEMORY_SCALING_TARGET = 1.25


# ------------------------------------------------------------------- data --


def _count_lines(path):
  n = 0
  with open(path, 'rb') as f:
    while True:
      block = f.read(1 << 24)
      if not block:
        return n
      n += block.count(b'\n')


def ensure_csv(workdir, rows):
  """WORKDIR/sensor_<rows>.csv, generated unless already there."""
  path = os.path.join(workdir, f'sensor_{rows}.csv')
  if os.path.isfile(path):
    found = _count_lines(path) - 1  # header
    if found == rows:
      print(f'data: reusing {path} ({rows} rows)')
      return path
    print(f'data: {path} has {found} rows, not {rows}; regenerating')
  os.makedirs(workdir, exist_ok=True)
  start = time.perf_counter()
  print(f'data: generating {rows} rows into {path} ...', flush=True)
  # generate writes a temporary file and renames it when complete.
  sensor_data.generate(path, rows, devices=DEVICES)
  print(f'data: done in {time.perf_counter() - start:.1f} s')
  return path


def expected_split_records(rows, window=WINDOW, stride=STRIDE):
  """{split: windows} that ensure_csv's data of `rows` rows should give.

  Every device's complete windows (from row 0, every `stride` rows), in the
  split of the device's name; the same rule as sensor_baseline.py.
  """
  sys.path.insert(0, REPO)
  from transforms.core.splits import assign_split  # pylint: disable=import-outside-toplevel
  out = {name: 0 for name, _ in SPLITS}
  for name, n in zip(sensor_data.device_names(DEVICES),
                     sensor_data.device_rows(rows, DEVICES)):
    if n >= window:
      out[assign_split(name, list(SPLITS))] += (int(n) - window) // stride + 1
  return out


# --------------------------------------------------------------- commands --


def ours_command(csv, out):
  """The command line of our pipeline (one place to change it)."""
  return [sys.executable, '-m', 'pipelines.preprocess',
          '--modality', 'sensor', '--input', csv, '--output', out,
          '--overwrite', '--timestamp_column', 'time',
          '--entity_column', 'device', '--label_column', 'label',
          '--window_length', str(WINDOW), '--window_stride', str(STRIDE),
          '--normalization', 'zscore']


def baseline_command(csv, out):
  return [sys.executable, os.path.join(BENCH_DIR, 'sensor_baseline.py'),
          '--input', csv, '--output', out,
          '--window', str(WINDOW), '--stride', str(STRIDE)]


def commands(csv, outdir, rows):
  """{name: (argv, output path)} of the measured commands."""
  ours_out = os.path.join(outdir, f'sensor_ours_{rows}')
  base_out = os.path.join(outdir, f'sensor_baseline_{rows}')
  return {'ours': (ours_command(csv, ours_out), ours_out),
          'baseline': (baseline_command(csv, base_out), base_out)}


def inspect_run(name, out, log_path):
  """A harness.measure inspect: the per-split records a finished run wrote."""
  return harness.split_records(harness.base_name(name), out, log_path, UNIT)


# ------------------------------------------------------------------- main --


def compare(args):
  csv = ensure_csv(args.workdir, args.rows)
  print(f'page cache: read {harness.warm_page_cache(csv) / 2**20:.0f} MiB '
        'of data once before measuring')
  outdir, logdir = harness.make_dirs(args.workdir)
  jobs = {name: (cmd, out, args.rows)
          for name, (cmd, out) in commands(csv, outdir, args.rows).items()
          if name in args.only}
  expected = expected_split_records(args.rows)
  per_job = {n: expected for n in jobs}
  harness.print_commands(jobs)
  runs = harness.measure(jobs, args.repeats, logdir, UNIT, inspect_run,
                         harness.split_count_check(per_job))
  s = harness.summarize(runs, UNIT)
  problems = harness.split_count_problems(
      runs, per_job, {n: args.rows for n in jobs}, UNIT)
  with harness.printed() as table:
    print()
    print(f'{args.rows} rows, {args.repeats} repeat(s), {os.cpu_count()} CPUs')
    labels = {'ours': 'ours (pipelines.preprocess)',
              'baseline': 'baseline (pandas + NumPy)'}
    harness.print_table([(labels[n], n) for n in jobs], s, UNIT)
    ratios = rss_ratios = None
    if len(jobs) == 2:
      ratios = {'ours/baseline': s['ours']['rows_per_second_median'] /
                                 s['baseline']['rows_per_second_median']}
      rss_ratios = {'ours/baseline': s['ours']['peak_rss_mib_median'] /
                                     s['baseline']['peak_rss_mib_median']}
      for k, v in ratios.items():
        print(f'throughput {k:14s} {v:6.2f}x')
      for k, v in rss_ratios.items():
        print(f'peak RSS   {k:14s} {v:6.2f}x')
    else:
      print(f'(only {", ".join(jobs)} ran: no ratios)')
    for name in jobs:
      last = runs[name][-1]['splits']
      verdict = ('as expected' if harness.same_splits(last, expected)
                 else 'DIFFERENT')
      print(f'records {name:9s} {harness.format_splits(last)} ({verdict})')
    harness.print_columns_note(UNIT)
    harness.print_problems(problems, 'per-split record counts disagree')
  return {'mode': 'compare', 'rows': args.rows, 'repeats': args.repeats,
          'data': csv, 'window': WINDOW, 'stride': STRIDE,
          'machine': harness.machine_info(),
          'commands': {n: shlex.join(c) for n, (c, _, _) in jobs.items()},
          'expected_split_records': expected,
          'results': s, 'throughput_ratios': ratios,
          'peak_rss_ratios': rss_ratios, 'record_problems': problems,
          'table': table.getvalue()}


def memory_scaling(args):
  sizes = [int(x) for x in args.scaling_sizes.split(',')]
  if len(sizes) != 2 or min(sizes) < 1:
    raise SystemExit('--scaling-sizes needs two sizes, e.g. 1000000,4000000')
  small, large = sorted(sizes)
  outdir, logdir = harness.make_dirs(args.workdir)
  jobs, expected = {}, {}
  for n in (small, large):
    csv = ensure_csv(args.workdir, n)
    print(f'page cache: read {harness.warm_page_cache(csv) / 2**20:.0f} MiB '
          f'of {csv}')
    cmd, out = commands(csv, outdir, n)['ours']
    jobs[f'ours@{n}'] = (cmd, out, n)
    expected[f'ours@{n}'] = expected_split_records(n)
  harness.print_commands(jobs)
  runs = harness.measure(jobs, args.repeats, logdir, UNIT, inspect_run,
                         harness.split_count_check(expected))
  s = harness.summarize(runs, UNIT)
  problems = harness.split_count_problems(
      runs, expected, {name: j[2] for name, j in jobs.items()}, UNIT)
  rss_small = s[f'ours@{small}']['peak_rss_mib_median']
  rss_large = s[f'ours@{large}']['peak_rss_mib_median']
  ratio = rss_large / rss_small
  with harness.printed() as table:
    print()
    print(f'memory scaling of ours, {args.repeats} repeat(s), '
          f'{os.cpu_count()} CPUs')
    harness.print_table(
        [(f'ours, {n} rows', f'ours@{n}') for n in (small, large)], s, UNIT)
    verdict = 'OK' if ratio <= MEMORY_SCALING_TARGET else 'OVER TARGET'
    print(f'peak RSS {large}/{small}: {ratio:.2f}x (target: flat, <= '
          f'{MEMORY_SCALING_TARGET}) {verdict}')
    harness.print_columns_note(UNIT)
    harness.print_problems(problems, 'per-split record counts disagree')
  return {'mode': 'memory_scaling', 'sizes': [small, large],
          'repeats': args.repeats, 'machine': harness.machine_info(),
          'commands': {n: shlex.join(c) for n, (c, _, _) in jobs.items()},
          'expected_split_records': expected,
          'results': s, 'peak_rss_ratio': ratio,
          'target': MEMORY_SCALING_TARGET, 'within_target':
          ratio <= MEMORY_SCALING_TARGET, 'record_problems': problems,
          'table': table.getvalue()}


def main(argv=None):
  parser = argparse.ArgumentParser(
      description=__doc__.split('\n')[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--rows', type=int, default=1_000_000,
                      help='Input rows for the comparison (default 1000000).')
  parser.add_argument('--repeats', type=int, default=3,
                      help='Runs of each command; medians are reported '
                      '(default 3).')
  parser.add_argument('--workdir', default='/tmp/tfrecord_bench',
                      help='Data (sensor_N.csv), outputs and logs '
                      '(default /tmp/tfrecord_bench).')
  parser.add_argument('--json', default=None,
                      help='Also write the results as JSON to this path.')
  parser.add_argument('--only', default=','.join(NAMES),
                      help='Comma-separated commands to run: ours, baseline '
                      '(default both; --memory-scaling runs only ours).')
  parser.add_argument('--memory-scaling', action='store_true',
                      help='Only run ours at two input sizes and compare '
                      'peak RSS.')
  parser.add_argument('--scaling-sizes', default='1000000,4000000',
                      help='The two sizes for --memory-scaling '
                      '(default 1000000,4000000).')
  harness.add_results_flags(parser)
  args = parser.parse_args(argv)
  if args.rows < 1 or args.repeats < 1:
    parser.error('--rows and --repeats must be at least 1')
  args.only = [n.strip() for n in args.only.split(',') if n.strip()]
  unknown = [n for n in args.only if n not in NAMES]
  if unknown or not args.only:
    parser.error(f'--only takes {" and/or ".join(NAMES)}, got '
                 f'{", ".join(unknown) or "nothing"}')
  args.workdir = os.path.abspath(args.workdir)
  info = harness.run_info(sys.argv[1:] if argv is None else argv, __file__)
  try:
    result = memory_scaling(args) if args.memory_scaling else compare(args)
  except BenchmarkError as e:
    print(f'\nBENCHMARK FAILED: {e}', file=sys.stderr)
    return 1
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(result, f, indent=2)
    print(f'wrote {args.json}')
  # Every command ran, but some counts were off: say so in the exit code
  # (and publish nothing).
  if result['record_problems']:
    return 3
  if args.memory_scaling:
    harness.write_results(
        args, harness.at_defaults(parser, args, ['scaling_sizes']),
        'sensor_memory_scaling',
        'Sensor memory as the data grows (sensor_benchmark.py '
        '--memory-scaling)', info, harness.code_block(result['table']))
  else:
    harness.write_results(
        args, harness.at_defaults(parser, args, ['rows']) and
        set(args.only) == set(NAMES), 'sensor_benchmark',
        'Sensor rows against the pandas + NumPy script '
        '(sensor_benchmark.py)', info, harness.code_block(result['table']))
  return 0


if __name__ == '__main__':
  sys.exit(main())
