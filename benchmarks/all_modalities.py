"""Every modality against its plain script: fixed cost, steady state, memory.

    python benchmarks/all_modalities.py [--modalities image,sensor,text]
        [--repeats 3] [--workdir /tmp/tfrecord_bench]
        [--image-sizes 10000,20000] [--sensor-sizes 1000000,4000000]
        [--text-sizes 200000,800000]
        [--image-tiny 20] [--sensor-tiny 5000] [--text-tiny 500]
        [--no-warmup] [--json results.json] [--markdown section.md]
        [--results PATH | --no-results]

A benchmark, not a test. For each modality it makes (or reuses) the data of
that modality's own benchmark at three sizes (a tiny one and two benchmark
sizes) and runs, each as its own process (interpreter start-up and imports
included, as a user sees it), our pipeline and a plain script:

  image   ours: image_benchmark.commands()['ours'] (python -m
          pipelines.preprocess with its defaults); baseline:
          benchmarks/baseline_pool.py CORPUS OUT.tfrecord (a
          multiprocessing.Pool with one process per core)
  sensor  ours and baseline of sensor_benchmark.py (sensor_baseline.py)
  text    ours and baseline of text_benchmark.py (text_baseline.py)

Per modality, ours and the baseline first run once at the tiny size,
unmeasured (so no measured run pays for compiling the project's modules or
reading the libraries from disk for the first time; --no-warmup skips it),
then all six jobs run interleaved, --repeats times: ours and the baseline
at the tiny size, at size 1, at size 2, then again. Measurement
(wall seconds, peak RSS of the largest process, sampled RSS of the process
tree, CPU) is benchmarks/harness.py; every figure is a median over the
repeats (the tree RSS a maximum). From the medians it reports:

- fixed cost: the whole-process seconds at the tiny size (the targets:
  at most 6 s for ours);
- the whole-process seconds at both sizes;
- steady state: (size2 - size1) / (t(size2) - t(size1)), inputs per
  second, for ours and for the baseline (the rate once the fixed cost is
  paid; none when size 2 took no longer than size 1); target for images:
  at least 1,250 images/s for ours;
- ratio: baseline seconds / our seconds at both sizes (above 1: ours is
  faster); the target (at least 1.0) is read at size 1 for images (10,000)
  and at size 2 for sensor rows (4,000,000) and text (800,000);
- peak RSS of ours and the baseline at both sizes and size2/size1, of the
  largest single process and of the whole process tree; target for every
  modality: at most 1.25x for ours (largest process);
- CPU cores busy on average, and the other load (noise) during the runs;
- each target with PASS or MISS (information only: not an exit code).

Progress (data generation, each command with its repeat) goes to stderr;
the tables go to stdout, and --json / --markdown write them to files too.
Logs of the runs go to WORKDIR/logs/all/<modality>/<job>_r<k>.log, outputs
to WORKDIR/out (the same names as the per-modality benchmarks).

Record counts are checked as each modality's benchmark checks them.

A run of every modality at the default sizes, with the warm-up and at
least 3 repeats, rewrites its section of benchmarks/RESULTS.md (date,
commit, machine, command, tables; harness.write_results); --no-results
keeps it from doing so, --results PATH writes the section of that file
whatever the sizes. A run with wrong record counts writes none.

Exit codes: 0 done; 1 a command failed (its log tail is printed; nothing
more runs); 3 every command ran but some wrote wrong record counts (printed
as a warning; the numbers are still reported).
"""

import argparse
import contextlib
import datetime
import json
import os
import shlex
import sys

# The other benchmarks and the shared measurement code, also when run from
# elsewhere than this folder.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
import harness
from harness import BenchmarkError
import image_benchmark
import sensor_benchmark
import text_benchmark
# pylint: enable=g-import-not-at-top,wrong-import-position

FIXED_COST_TARGET = 6.0  # seconds of ours at the tiny size
RATIO_TARGET = 1.0  # baseline seconds / our seconds
MEMORY_TARGET = 1.25  # peak RSS at size 2 / at size 1
IMAGE_STEADY_TARGET = 1250.0  # images/s of ours


# ------------------------------------------------------------- modalities --


class _SplitModality:
  """A modality whose commands write splits (sensor rows, text).

  Subclasses name the benchmark module they reuse; its ensure_csv,
  commands, inspect_run and expected_split_records do the work.
  """

  name = title = unit = baseline_label = None
  module = None
  default_sizes = default_tiny = None
  ratio_at = 1  # index of the size the ratio target is read at
  steady_target = None  # ours per second, or None
  memory_target = MEMORY_TARGET  # peak RSS size2/size1, or None

  def data(self, workdir, n):
    return self.module.ensure_csv(workdir, n)

  def commands(self, data, outdir, n):
    """{'ours': (argv, out), 'baseline': (argv, out)}."""
    return self.module.commands(data, outdir, n)

  def inspect_run(self, name, out, log_path):
    return self.module.inspect_run(name, out, log_path)

  def expected(self, data, n):
    """{'ours': expected records, 'baseline': expected records}."""
    raise NotImplementedError

  def check(self, jobs, expected):
    del jobs  # unused
    return harness.split_count_check(expected)

  def problems(self, runs, expected, jobs):
    return harness.split_count_problems(
        runs, expected, {name: job[2] for name, job in jobs.items()},
        self.unit)


class _Sensor(_SplitModality):
  name, title, unit = 'sensor', 'Sensor rows', 'rows'
  baseline_label = 'pandas + NumPy script (sensor_baseline.py)'
  module = sensor_benchmark
  default_sizes, default_tiny = (1_000_000, 4_000_000), 5_000

  def expected(self, data, n):
    del data  # the counts follow from the generator's layout
    records = sensor_benchmark.expected_split_records(n)
    return {'ours': records, 'baseline': records}


class _Text(_SplitModality):
  name, title, unit = 'text', 'Text', 'docs'
  baseline_label = 'csv + Counter script (text_baseline.py)'
  module = text_benchmark
  default_sizes, default_tiny = (200_000, 800_000), 500

  def expected(self, data, n):
    # Ours splits by content, the baseline by row id (text_benchmark.py).
    return {'ours': text_benchmark.expected_split_records(data, n, 'content'),
            'baseline': text_benchmark.expected_split_records(data, n, 'id')}


class _Image(_SplitModality):
  """Images: one record per image, counted (no per-split expectation)."""

  name, title, unit = 'image', 'Images', 'images'
  baseline_label = 'multiprocessing.Pool script (baseline_pool.py)'
  module = image_benchmark
  default_sizes, default_tiny = (10_000, 20_000), 20
  ratio_at = 0
  steady_target = IMAGE_STEADY_TARGET

  def data(self, workdir, n):
    return image_benchmark.ensure_corpus(workdir, n)

  def commands(self, data, outdir, n):
    ours = image_benchmark.commands(data, outdir, n)['ours']
    out = os.path.join(outdir, f'pool_{n}.tfrecord')
    return {'ours': ours,
            'baseline': (image_benchmark.pool_command(data, out), out)}

  def expected(self, data, n):
    del data  # unused
    return {'ours': n, 'baseline': n}

  def check(self, jobs, expected):
    del expected  # check_count reads n from the jobs
    return image_benchmark.check_count(jobs)

  def problems(self, runs, expected, jobs):
    del jobs  # unused
    return image_benchmark.record_problems(runs, expected)


MODALITIES = {m.name: m for m in (_Image(), _Sensor(), _Text())}


# ---------------------------------------------------------------- running --


def _job(who, n):
  return f'{who}@{n}'


def warm_up(jobs, tiny, logdir):
  """Runs ours and the baseline once at the tiny size, unmeasured.

  So the first measured run does not pay for what only a first run pays
  (compiling the project's modules to .pyc, reading the libraries from
  disk). A failure stops the benchmark as a measured run's would.

  Returns:
    {job name: wall seconds of its warm-up run}.
  """
  env = harness.child_env()
  seconds = {}
  for who in ('ours', 'baseline'):
    name = _job(who, tiny)
    cmd = jobs[name][0]
    print(f'[warm-up, not measured] {name}: {shlex.join(cmd)}', flush=True)
    res = harness.run_measured(name, cmd,
                               os.path.join(logdir, f'{name}_warmup.log'),
                               env)
    seconds[name] = res['seconds']
    print(f'    {res["seconds"]:.1f} s', flush=True)
  return seconds


def run_modality(modality, sizes, tiny, repeats, workdir, warmup=True):
  """Measures one modality; returns its raw and summarized figures.

  Prints progress to stdout (main() sends it to stderr).

  Args:
    modality: One of MODALITIES.
    sizes: (size1, size2), size1 < size2.
    tiny: The size of the fixed-cost runs.
    repeats: Runs of each job.
    workdir: Data, outputs and logs.
    warmup: First run ours and the baseline once at the tiny size,
      unmeasured (warm_up()).

  Returns:
    A JSON-able dict (see figures()).
  """
  unit = modality.unit
  all_sizes = (tiny,) + tuple(sizes)
  print(f'\n== {modality.name}: {", ".join(f"{n:,}" for n in all_sizes)} '
        f'{unit}, {repeats} repeat(s)', flush=True)
  outdir, logdir = harness.make_dirs(workdir)
  logdir = os.path.join(logdir, 'all', modality.name)
  os.makedirs(logdir, exist_ok=True)
  jobs, expected, data = {}, {}, {}
  for n in all_sizes:
    if n in data:
      continue  # the tiny size may equal size 1
    data[n] = modality.data(workdir, n)
    print(f'page cache: read {harness.warm_page_cache(data[n]) / 2**20:.0f} '
          f'MiB of {data[n]}', flush=True)
    want = modality.expected(data[n], n)
    for who, (cmd, out) in modality.commands(data[n], outdir, n).items():
      jobs[_job(who, n)] = (cmd, out, n)
      expected[_job(who, n)] = want[who]
  harness.print_commands(jobs)
  warmup_seconds = warm_up(jobs, tiny, logdir) if warmup else None
  runs = harness.measure(jobs, repeats, logdir, unit, modality.inspect_run,
                         modality.check(jobs, expected))
  summary = harness.summarize(runs, unit)
  problems = modality.problems(runs, expected, jobs)
  result = {'modality': modality.name, 'unit': unit, 'tiny': tiny,
            'sizes': list(sizes), 'repeats': repeats,
            'baseline': modality.baseline_label,
            'data': {str(n): path for n, path in data.items()},
            'commands': {name: shlex.join(cmd)
                         for name, (cmd, _, _) in jobs.items()},
            'expected_records': expected,
            'warmup_seconds': warmup_seconds, 'results': summary,
            'record_problems': problems}
  result.update(figures(modality, summary, sizes, tiny))
  return result


# ---------------------------------------------------------------- figures --


def _ratio(a, b):
  return a / b if a is not None and b else None


def figures(modality, summary, sizes, tiny):
  """The reported figures and targets from harness.summarize output.

  Returns:
    {'figures': {...}, 'targets': [{'target', 'value', 'met'}, ...]}.
  """
  s1, s2 = sizes
  whos = ('ours', 'baseline')

  def get(who, n, key):
    return summary[_job(who, n)][key]

  seconds = {who: {str(n): get(who, n, 'seconds_median') for n in sizes}
             for who in whos}
  steady = {}
  for who in whos:
    dt = seconds[who][str(s2)] - seconds[who][str(s1)]
    # No rate when size 2 ran no longer than size 1 (noise at tiny sizes).
    steady[who] = (s2 - s1) / dt if dt > 0 else None
  ratio = {str(n): seconds['baseline'][str(n)] / seconds['ours'][str(n)]
           for n in sizes}
  peak = {who: {str(n): get(who, n, 'peak_rss_mib_median') for n in sizes}
          for who in whos}
  tree = {who: {str(n): get(who, n, 'tree_rss_mib_sampled_max')
                for n in sizes} for who in whos}
  out = {
      'fixed_seconds': {who: get(who, tiny, 'seconds_median')
                        for who in whos},
      'seconds': seconds,
      'steady_state_per_second': steady,
      'ratio_baseline_over_ours': ratio,
      'ratio_target_size': sizes[modality.ratio_at],
      'peak_rss_mib': peak,
      'tree_rss_mib': tree,
      'peak_rss_ratio': {who: _ratio(peak[who][str(s2)], peak[who][str(s1)])
                         for who in whos},
      'tree_rss_ratio': {who: _ratio(tree[who][str(s2)], tree[who][str(s1)])
                         for who in whos},
      'cpu_cores': {who: {str(n): get(who, n, 'cpu_utilization_median')
                          for n in (tiny,) + tuple(sizes)} for who in whos},
      'other_load_share_max': {
          who: max((get(who, n, 'other_load_share_max') or 0.0)
                   for n in (tiny,) + tuple(sizes)) for who in whos},
  }
  targets = [{'target': f'fixed cost of ours <= {FIXED_COST_TARGET:g} s',
              'key': 'fixed', 'value': out['fixed_seconds']['ours'],
              'met': out['fixed_seconds']['ours'] <= FIXED_COST_TARGET}]
  at = sizes[modality.ratio_at]
  targets.append({'target': f'baseline/ours at {at:,} {modality.unit} >= '
                            f'{RATIO_TARGET:g}',
                  'key': 'ratio', 'value': ratio[str(at)],
                  'met': ratio[str(at)] >= RATIO_TARGET})
  if modality.steady_target is not None:
    value = steady['ours']
    targets.append({'target': f'steady state of ours >= '
                              f'{modality.steady_target:,.0f} '
                              f'{modality.unit}/s',
                    'key': 'steady', 'value': value,
                    'met': value is not None and
                           value >= modality.steady_target})
  if modality.memory_target is not None:
    value = out['peak_rss_ratio']['ours']
    targets.append({'target': f'peak RSS of ours {s2:,}/{s1:,} <= '
                              f'{modality.memory_target:g}x',
                    'key': 'memory', 'value': value,
                    'met': value is not None and
                           value <= modality.memory_target})
  return {'figures': out, 'targets': targets}


# -------------------------------------------------------------- rendering --


def figure_text(value, fmt, suffix='', missing='-'):
  """A figure as a table shows it: `missing` when there is none."""
  return missing if value is None else f'{value:{fmt}}{suffix}'


def verdict(met):
  """A target's cell: PASS or MISS."""
  return 'PASS' if met else 'MISS'


# Short names for the tables below (engine_report.py uses the same).
_f, _verdict = figure_text, verdict


def records_cell(result, who):
  """The record-count cell of one side (or runner) of a result: how many
  of its runs wrote the wrong records."""
  wrong = sum(p.startswith(f'{who}@') for p in result['record_problems'])
  return f'{wrong} run(s) WRONG' if wrong else 'as expected'


def target_value(t, unit):
  """A target's measured value, formatted with its unit."""
  return {'fixed': lambda v: _f(v, '.1f', ' s'),
          'ratio': lambda v: _f(v, '.2f', 'x'),
          'steady': lambda v: _f(v, ',.0f', f' {unit}/s', missing='n/a'),
          'memory': lambda v: _f(v, '.2f', 'x')}[t['key']](t['value'])


def table_rows(result):
  """[(figure, ours, baseline, target, met)] of one modality, as text."""
  f, unit = result['figures'], result['unit']
  tiny, (s1, s2) = result['tiny'], result['sizes']
  targets = {t['key']: t for t in result['targets']}

  def target(key):
    t = targets.get(key)
    return ('', '') if t is None else (t['target'], _verdict(t['met']))

  def both(fn):
    return fn('ours'), fn('baseline')

  rows = [(f'fixed cost: seconds, {tiny:,} {unit}',
           *both(lambda w: _f(f['fixed_seconds'][w], '.1f')),
           *target('fixed'))]
  for n in (s1, s2):
    rows.append((f'seconds, {n:,} {unit}',
                 *both(lambda w, n=n: _f(f['seconds'][w][str(n)], '.1f')),
                 '', ''))
  rows.append((f'steady state, {unit}/s ({s1:,} -> {s2:,})',
               *both(lambda w: _f(f['steady_state_per_second'][w], ',.0f',
                                  missing='n/a')),
               *target('steady')))
  for n in (s1, s2):
    key = 'ratio' if n == f['ratio_target_size'] else None
    rows.append((f'baseline seconds / our seconds, {n:,} {unit}',
                 _f(f['ratio_baseline_over_ours'][str(n)], '.2f', 'x'), '',
                 *target(key)))
  def mib(who, n):
    peak, tree = f['peak_rss_mib'][who][str(n)], f['tree_rss_mib'][who][str(n)]
    return f'{_f(peak, ",.0f")} ({_f(tree, ",.0f")})'

  def growth(who):
    peak, tree = f['peak_rss_ratio'][who], f['tree_rss_ratio'][who]
    return f'{_f(peak, ".2f", "x")} ({_f(tree, ".2f", "x")})'

  for n in (s1, s2):
    rows.append((f'peak RSS MiB, {n:,} {unit}: largest process (tree)',
                 *both(lambda w, n=n: mib(w, n)), '', ''))
  rows.append((f'peak RSS {s2:,} / {s1:,}: largest process (tree)',
               *both(growth), *target('memory')))
  rows.append((f'CPU cores busy, {tiny:,} / {s1:,} / {s2:,} {unit}',
               *both(lambda w: ' / '.join(
                   _f(f['cpu_cores'][w][str(n)], '.2f')
                   for n in (tiny, s1, s2))), '', ''))
  rows.append(('other load (max share of CPUs, noise)',
               *both(lambda w: _f(f['other_load_share_max'][w], '.0%')),
               '', ''))
  rows.append(('record counts',
               *both(lambda who: records_cell(result, who)), '', ''))
  return rows


HEADER = ('figure', 'ours', 'baseline', 'target', 'met')


def print_table(result):
  """The modality's table as aligned text, then its record problems."""
  rows = [HEADER] + table_rows(result)
  widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
  print()
  print(f'{result["modality"]}: ours (pipelines.preprocess) against the '
        f'{result["baseline"]}, {result["repeats"]} repeat(s)')
  for i, row in enumerate(rows):
    print('  '.join(c.ljust(w) if j == 0 or j >= 3 else c.rjust(w)
                    for j, (c, w) in enumerate(zip(row, widths))).rstrip())
    if i == 0:
      print('-' * (sum(widths) + 2 * (len(widths) - 1)))
  harness.print_problems(result['record_problems'])


def markdown_tables(results, repeats, warmup):
  """How the figures are computed, then one markdown table per modality."""
  other = max((max(r['figures']['other_load_share_max'].values())
               for r in results), default=0.0)
  lines = [
      ('Every figure is from one run' if repeats == 1 else
       f'Every figure is the median of {repeats} repeats') +
      ' of each command, interleaved (ours, baseline, ours, baseline, '
      '...), each a whole process with start-up and imports'
      + (', after one unmeasured run of each at the tiny size. '
         if warmup else ' (no warm-up run). ') +
      'The fixed cost is the whole run at the tiny size. Steady state = '
      '(size2 - size1) / (t(size2) - t(size1)), n/a when size 2 took no '
      'longer than size 1. The ratio is baseline seconds / our seconds '
      '(above 1: ours is faster). Peak RSS is of the largest single process '
      '(in parentheses: the whole process tree, sampled every 0.2 s). '
      'PASS/MISS is information, not an exit code.',
  ]
  if other > 0.1:
    lines += ['', f'Other processes used up to {other:.0%} of the CPUs '
              'during these runs: the figures are noisy.']
  for r in results:
    lines += ['', f'### {MODALITIES[r["modality"]].title}: ours against the '
              f'{r["baseline"]}', '',
              '| ' + ' | '.join(HEADER) + ' |',
              '|' + '---|' * len(HEADER)]
    lines += ['| ' + ' | '.join(row) + ' |' for row in table_rows(r)]
    if r['record_problems']:
      lines += ['', 'Wrong record counts:', '']
      lines += [f'- {p}' for p in r['record_problems']]
  return '\n'.join(lines) + '\n'


def markdown(results, machine, command, repeats, warmup, when):
  """A README-ready section: heading, date, machine, command, tables."""
  mem = machine.get('memory_gib')
  lines = [
      '## Measured: every modality against a plain script',
      '',
      f'Measured {when:%Y-%m-%d %H:%M} UTC on {machine.get("cpu_model")}, '
      f'{machine["cpus"]} cores, '
      f'{"?" if mem is None else f"{mem:.1f}"} GiB memory; Python '
      f'{machine["python_version"]}, Apache Beam {machine.get("apache_beam")}'
      f', TensorFlow {machine.get("tensorflow")}, tf.Transform '
      f'{machine.get("tensorflow_transform")}; peak RSS by '
      f'{machine["rss_method"]}.',
      '',
      '```',
      command,
      '```',
      '',
  ]
  return '\n'.join(lines) + '\n' + markdown_tables(results, repeats, warmup)


def published(args, names):
  """Whether a run is at the settings RESULTS.md publishes: every
  modality, the default sizes, the warm-up, at least 3 repeats."""
  return (list(names) == list(MODALITIES) and args.warmup and
          args.repeats >= 3 and
          all(getattr(args, f'{m.name}_sizes') == m.default_sizes and
              getattr(args, f'{m.name}_tiny') == m.default_tiny
              for m in MODALITIES.values()))


# ------------------------------------------------------------------- main --


def _sizes(text):
  """'10000,20000' -> (10000, 20000): two distinct positive sizes, sorted."""
  try:
    sizes = sorted(int(x) for x in text.split(','))
  except ValueError:
    raise argparse.ArgumentTypeError(f'not two sizes: {text!r}') from None
  if len(sizes) != 2 or sizes[0] < 1 or sizes[0] == sizes[1]:
    raise argparse.ArgumentTypeError(
        f'need two different positive sizes, e.g. 10000,20000; got {text!r}')
  return tuple(sizes)


def _positive(text):
  try:
    n = int(text)
  except ValueError:
    n = 0
  if n < 1:
    raise argparse.ArgumentTypeError(f'not a positive size: {text!r}')
  return n


def parse_args(argv):
  """The command line; args.modality_names holds the modalities to run, in
  MODALITIES' order."""
  parser = argparse.ArgumentParser(
      description=__doc__.split('\n')[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--modalities', default=','.join(MODALITIES),
                      help='Comma-separated modalities to run (default '
                      f'{",".join(MODALITIES)}).')
  parser.add_argument('--repeats', type=_positive, default=3,
                      help='Runs of each command; medians are reported '
                      '(default 3).')
  parser.add_argument('--workdir', default='/tmp/tfrecord_bench',
                      help='Data, outputs and logs (default '
                      '/tmp/tfrecord_bench; the data is shared with the '
                      'per-modality benchmarks).')
  for m in MODALITIES.values():
    parser.add_argument(f'--{m.name}-sizes', type=_sizes,
                        default=m.default_sizes,
                        help=f'The two benchmark sizes in {m.unit} (default '
                        f'{",".join(str(n) for n in m.default_sizes)}).')
    parser.add_argument(f'--{m.name}-tiny', type=_positive,
                        default=m.default_tiny,
                        help=f'The fixed-cost size in {m.unit} (default '
                        f'{m.default_tiny}).')
  parser.add_argument('--no-warmup', dest='warmup', action='store_false',
                      help='Do not run ours and the baseline once, '
                      'unmeasured, at the tiny size before measuring a '
                      'modality.')
  parser.add_argument('--json', default=None,
                      help='Also write all raw and summarized figures as '
                      'JSON to this path.')
  parser.add_argument('--markdown', default=None,
                      help='Also write a README-ready markdown section to '
                      'this path.')
  harness.add_results_flags(parser)
  args = parser.parse_args(argv)
  names = [n.strip() for n in args.modalities.split(',') if n.strip()]
  unknown = [n for n in names if n not in MODALITIES]
  if unknown or not names:
    parser.error(f'--modalities takes {", ".join(MODALITIES)}; got '
                 f'{", ".join(unknown) or "nothing"}')
  # Fixed order, no repeats.
  args.modality_names = [n for n in MODALITIES if n in names]
  args.workdir = os.path.abspath(args.workdir)
  return args


def print_targets(results, value_text=None):
  """Every modality's targets, met or missed, with their values
  (value_text(target, result), by default target_value's)."""
  value_text = value_text or (lambda t, r: target_value(t, r['unit']))
  print()
  print('targets (information, not an exit code):')
  for r in results:
    for t in r['targets']:
      print(f'  {r["modality"]:7s} {_verdict(t["met"])}  {t["target"]}: '
            f'{value_text(t, r)}')


def write_json(path, results, args, machine, command, when):
  """Every run's figures, the summaries and the targets, as JSON."""
  with open(path, 'w') as f:
    json.dump({'date_utc': when.isoformat(timespec='seconds'),
               'command': command, 'machine': machine,
               'repeats': args.repeats, 'warmup': args.warmup,
               'targets': {'fixed_cost_seconds': FIXED_COST_TARGET,
                           'ratio': RATIO_TARGET,
                           'memory_ratio': MEMORY_TARGET,
                           'image_steady_state': IMAGE_STEADY_TARGET},
               'modalities': results}, f, indent=2)


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  args = parse_args(argv)
  names = args.modality_names
  command = shlex.join([sys.executable] + [sys.argv[0]] + list(argv))
  when = datetime.datetime.now(datetime.timezone.utc)
  machine = harness.machine_info()
  info = harness.run_info(argv, __file__)
  results = []
  try:
    for name in names:
      m = MODALITIES[name]
      # Progress (data, commands, repeats) to stderr; the tables to stdout.
      with contextlib.redirect_stdout(sys.stderr):
        result = run_modality(m, getattr(args, f'{name}_sizes'),
                              getattr(args, f'{name}_tiny'), args.repeats,
                              args.workdir, warmup=args.warmup)
      results.append(result)
      print_table(result)
      sys.stdout.flush()
  except BenchmarkError as e:
    print(f'\nBENCHMARK FAILED: {e}', file=sys.stderr)
    return 1
  print_targets(results)
  if args.json:
    write_json(args.json, results, args, machine, command, when)
    print(f'wrote {args.json}')
  if args.markdown:
    with open(args.markdown, 'w') as f:
      f.write(markdown(results, machine, command, args.repeats,
                       args.warmup, when))
    print(f'wrote {args.markdown}')
  # Every command ran, but some counts were off: say so in the exit code
  # (and publish nothing).
  if any(r['record_problems'] for r in results):
    return 3
  harness.write_results(
      args, published(args, names), 'all_modalities',
      'Every modality against its plain script (all_modalities.py)', info,
      f'Peak RSS by {machine["rss_method"]}. ' +
      markdown_tables(results, args.repeats, args.warmup))
  return 0

if __name__ == '__main__':
  sys.exit(main())
