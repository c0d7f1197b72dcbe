"""The floors under a tiny run's fixed cost: our tiny runs against the
imports alone (which no run can go below) and the smallest Beam +
tf.Transform pipeline of our kind written plainly (what the libraries
themselves cost a run).

    python benchmarks/fixed_cost_floor.py [--repeats 5]
        [--workdir /tmp/tfrecord_bench] [--json results.json]
        [--results PATH | --no-results]

A benchmark, not a test. Each command runs as its own process (start-up and
imports included), interleaved, --repeats times, after one unmeasured run
of each (so no measured run is the first to read the libraries from disk):

  python        python -c pass: the interpreter alone
  imports       python -c 'import apache_beam, tensorflow_transform.beam'
                (Keras 2, as ours) and an immediate exit: what any run of
                ours imports before its own code does anything
  minimal-z     benchmarks/minimal_tft_pipeline.py --analyzer zscore
                --as-ours: the smallest pipeline of our kind (20 rows, one
                z-score analyzer, transform_fn and TFRecords written,
                DirectRunner), built without Beam's type checks and ended
                as our commands are
  minimal-vocab the same with a vocabulary analyzer (as text runs have)
  minimal-z-plain  minimal-z with Beam's defaults and Python's own
                shutdown, as a user's script is
  ours-image / ours-sensor / ours-text   our tiny runs of
                benchmarks/all_modalities.py (20 images, 5,000 sensor rows,
                500 documents; the same data and commands)

It prints the median seconds (and the range) of each, and for each tiny
run of ours: its floor (minimal-z for images and sensor rows,
minimal-vocab for text), ours / floor, ours - floor, the floor's seconds
after the imports, and whether ours and the floor are within the
fixed-cost target (6 s).

A run of at least 5 repeats rewrites its section of benchmarks/RESULTS.md
(date, commit, machine, command, the tables); --no-results keeps it from
doing so, --results PATH writes the section of that file whatever the
repeats.

Exit codes: 0 done; 1 a command failed or wrote the wrong number of records
(its log is named).
"""

import argparse
import glob
import json
import os
import shlex
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
import all_modalities
import harness
from harness import BenchmarkError
sys.path.insert(0, harness.REPO)
from transforms.output import tfrecord_files
# pylint: enable=g-import-not-at-top,wrong-import-position

MINIMAL = os.path.join(harness.BENCH_DIR, 'minimal_tft_pipeline.py')
MINIMAL_ROWS = 20
DEFAULT_REPEATS = 5
IMPORTS = ("import os; os.environ.setdefault('TF_USE_LEGACY_KERAS', '1'); "
           'import apache_beam, tensorflow_transform.beam; os._exit(0)')
# Our tiny runs and the minimal pipeline each is compared with.
OURS = (('image', 'minimal-z'), ('sensor', 'minimal-z'),
        ('text', 'minimal-vocab'))
LABELS = {
    'python': 'Python alone (python -c pass)',
    'imports': 'imports: Beam, TensorFlow, tf.Transform',
    'minimal-z': 'minimal pipeline, z-score',
    'minimal-vocab': 'minimal pipeline, vocabulary',
    'minimal-z-plain': 'minimal pipeline, z-score, Beam\'s defaults and '
                       'Python\'s own exit',
}


def jobs_for(workdir):
  """{name: (argv, output, expected records or None)}."""
  outdir, _ = harness.make_dirs(workdir)
  py = sys.executable
  jobs = {
      'python': ([py, '-c', 'pass'], None, None),
      'imports': ([py, '-c', IMPORTS], None, None),
  }
  for name, analyzer, flags in (('minimal-z', 'zscore', ['--as-ours']),
                                ('minimal-vocab', 'vocabulary',
                                 ['--as-ours']),
                                ('minimal-z-plain', 'zscore', [])):
    out = os.path.join(outdir, f'floor_{name}')
    jobs[name] = ([py, MINIMAL, out, '--analyzer', analyzer, '--rows',
                   str(MINIMAL_ROWS)] + flags, out, MINIMAL_ROWS)
  for modality_name, _ in OURS:
    modality = all_modalities.MODALITIES[modality_name]
    n = modality.default_tiny
    data = modality.data(workdir, n)
    harness.warm_page_cache(data)
    cmd, out = modality.commands(data, outdir, n)['ours']
    want = modality.expected(data, n)['ours']  # records, or per split
    jobs[f'ours-{modality_name}'] = (
        cmd, out, sum(want.values()) if isinstance(want, dict) else want)
  return jobs


def records_of(name, out, log_path):
  """Records the command wrote (None for the commands that write none),
  counted here, outside the measured process."""
  if name.startswith('ours-'):
    return harness.split_records('ours', out, log_path, 'runs')['records']
  if name.startswith('minimal'):
    if harness.last_json_line(log_path) is None:
      raise BenchmarkError(f'{name} printed no result line; see {log_path}')
    count = 0
    for path in glob.glob(os.path.join(out, 'train-*')):
      with open(path, 'rb') as f:
        count += tfrecord_files.count_records(f)
    return count
  return None


def run(jobs, repeats, logdir):
  """Measures the jobs (harness.measure, after one unmeasured run of
  each); returns {name: [seconds of each repeat]}."""
  env = harness.child_env()
  for name, (cmd, _, _) in jobs.items():
    print(f'[warm-up, not measured] {name}: {shlex.join(cmd)}', flush=True)
    harness.run_measured(name, cmd,
                         os.path.join(logdir, f'{name}_warmup.log'), env)

  def inspect(name, out, log_path):
    records = records_of(name, out, log_path)
    if records != jobs[name][2]:
      raise BenchmarkError(f'{name} wrote {records} records, expected '
                           f'{jobs[name][2]}; see {log_path}')
    return {'records': records}

  # One "run" per command: measure() reports runs/s, not used here.
  runs = harness.measure({name: (cmd, out, 1) for name, (cmd, out, _) in
                          jobs.items()}, repeats, logdir, 'runs', inspect)
  return {name: [r['seconds'] for r in rs] for name, rs in runs.items()}


def report(seconds):
  """The tables, as markdown lines."""
  med = {name: statistics.median(s) for name, s in seconds.items()}
  lines = ['| command | median s (range) |', '|---|---|']
  for name, s in seconds.items():
    label = LABELS.get(name) or f'ours, {name[len("ours-"):]} (tiny run)'
    lines.append(f'| {label} | {med[name]:.2f} ({min(s):.2f}-{max(s):.2f}) |')
  lines += ['', '| tiny run of ours | its floor | ours / floor | ours - floor '
            '(s) | floor - imports (s) | ours <= 6 s | floor <= 6 s |',
            '|---|---|---|---|---|---|---|']
  target = all_modalities.FIXED_COST_TARGET
  for modality_name, floor in OURS:
    ours = med[f'ours-{modality_name}']
    lines.append(
        f'| {modality_name} | {LABELS[floor]} | {ours / med[floor]:.2f}x | '
        f'{ours - med[floor]:+.2f} | {med[floor] - med["imports"]:.2f} | '
        f'{"yes" if ours <= target else "no"} | '
        f'{"yes" if med[floor] <= target else "no"} |')
  return lines


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--repeats', type=int, default=DEFAULT_REPEATS)
  parser.add_argument('--workdir', default='/tmp/tfrecord_bench')
  parser.add_argument('--json', help='also write the seconds here')
  harness.add_results_flags(parser)
  args = parser.parse_args(argv)
  if args.repeats < 1:
    parser.error('--repeats must be at least 1')
  info = harness.run_info(sys.argv[1:] if argv is None else argv, __file__)
  _, logdir = harness.make_dirs(args.workdir)
  logdir = os.path.join(logdir, 'floor')
  os.makedirs(logdir, exist_ok=True)
  try:
    jobs = jobs_for(args.workdir)
    seconds = run(jobs, args.repeats, logdir)
  except BenchmarkError as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  machine = harness.machine_info()
  print()
  print(f'{machine["cpus"]} CPUs ({machine["cpu_model"]}), Python '
        f'{machine["python_version"]}, Beam {machine["apache_beam"]}, '
        f'TensorFlow {machine["tensorflow"]}, tf.Transform '
        f'{machine["tensorflow_transform"]}; {args.repeats} repeats, '
        'whole processes, seconds')
  lines = report(seconds)
  print('\n'.join(lines))
  harness.write_results(
      args, args.repeats >= DEFAULT_REPEATS, 'fixed_cost_floor',
      'The floor under a tiny run (fixed_cost_floor.py)', info,
      f'Medians of {args.repeats} repeats (range in parentheses), whole '
      'processes, after one unmeasured run of each; seconds.\n\n' +
      '\n'.join(lines))
  if args.json:
    with open(args.json, 'w') as f:
      json.dump({'machine': machine, 'repeats': args.repeats,
                 'commands': {n: shlex.join(c) for n, (c, _, _) in
                              jobs.items()},
                 'seconds': seconds}, f, indent=1)
  return 0


if __name__ == '__main__':
  sys.exit(main())
