"""What the rules of time (one observation per time, gaps, the time shape
in the manifest) cost the sensor benchmark's run: this checkout against a
commit before them, whole processes, paired.

    python benchmarks/sensor_time_cost.py [--base 3de0b5e]
        [--rows 1000000,4000000] [--repeats 3] [--workdir /tmp/tfrecord_bench]
        [--results PATH | --no-results]

The sensor benchmark's command (benchmarks/sensor_benchmark.py: 100
devices interleaved in one CSV in time order, windows of 50 rows every 25,
z-score, three splits by device) runs from this checkout ('new') and from
the files of `--base` (git archive of that commit into the work folder,
'base'), in turns (base, new, base, new, ...), at each size. Reported per
size: the median wall time and peak memory (RSS of the process tree) of
each, the ratio of the medians and the median of the paired ratios, and
the windows each wrote (they must be equal: the benchmark's data has no
gap or repeated row). The target is at most 1.05x in time, and new's peak
memory flat with size (its larger/smaller ratio against base's).

A run at the default sizes, base and repeats rewrites its section of
benchmarks/RESULTS.md (--results PATH writes it whatever the settings;
--no-results nothing).
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=wrong-import-position
import harness
import sensor_benchmark
# pylint: enable=wrong-import-position

TIME_TARGET = 1.05
DEFAULT_REPEATS = 3
DEFAULT_ROWS = '1000000,4000000'
# The last commit before the rules of time.
DEFAULT_BASE = '3de0b5e'
SECTION = 'sensor_time_cost'
TITLE = 'Sensor rules of time: cost (sensor_time_cost.py)'
# Runs `pipelines.preprocess` from the folder given first, whatever the
# working folder (which is this checkout).
_FROM = ('import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); '
         'runpy.run_module("pipelines.preprocess", run_name="__main__", '
         'alter_sys=True)')


def _base_tree(workdir, rev):
  """The files of commit `rev`, unpacked once under `workdir`."""
  sha = subprocess.check_output(['git', 'rev-parse', '--short', rev],
                                cwd=harness.REPO, text=True).strip()
  folder = os.path.join(workdir, f'base-{sha}')
  if not os.path.isdir(os.path.join(folder, 'pipelines')):
    os.makedirs(folder, exist_ok=True)
    archive = subprocess.Popen(['git', 'archive', sha], cwd=harness.REPO,
                               stdout=subprocess.PIPE)
    subprocess.check_call(['tar', '-x', '-C', folder], stdin=archive.stdout)
    if archive.wait():
      raise harness.BenchmarkError(f'git archive {sha} failed')
  return sha, folder


def _inspect(name, out, log_path):
  del name, log_path
  with open(os.path.join(out, 'manifest.json'), encoding='utf-8') as f:
    manifest = json.load(f)
  return {'records': manifest['totals']['records']}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--base', default=DEFAULT_BASE)
  parser.add_argument('--rows', default=DEFAULT_ROWS)
  parser.add_argument('--repeats', type=int, default=DEFAULT_REPEATS)
  parser.add_argument('--workdir', default='/tmp/tfrecord_bench')
  harness.add_results_flags(parser)
  args = parser.parse_args(argv)
  info = harness.run_info(sys.argv[1:] if argv is None else argv, __file__)
  sizes = [int(s) for s in args.rows.split(',')]
  at_defaults = (args.rows == DEFAULT_ROWS and args.base == DEFAULT_BASE and
                 args.repeats >= DEFAULT_REPEATS)
  outdir, logdir = harness.make_dirs(args.workdir)
  sha, base = _base_tree(args.workdir, args.base)
  jobs = {}
  for n in sizes:
    csv = sensor_benchmark.ensure_csv(args.workdir, n)
    print(f'page cache: read {harness.warm_page_cache(csv) / 2**20:.0f} '
          f'MiB of {csv}')
    for kind in ('base', 'new'):
      out = os.path.join(outdir, f'sensor_time_{kind}_{n}')
      cmd = sensor_benchmark.ours_command(csv, out)
      if kind == 'base':  # the same arguments, base's code
        cmd = [cmd[0], '-c', _FROM, base] + cmd[3:]
      jobs[f'{kind}@{n}'] = (cmd, out, n)
  harness.print_commands(jobs)
  runs = harness.measure(jobs, args.repeats, logdir, 'rows', _inspect)
  s = harness.summarize(runs, 'rows')
  lines = ['| rows | base: wall s | new: wall s | new / base (medians) | '
           'new / base (median of pairs) | base: peak RSS MiB | new: peak '
           'RSS MiB | windows (base, new) |',
           '|---|---|---|---|---|---|---|---|']
  verdicts, problems = [], []
  for n in sizes:
    old, new = s[f'base@{n}'], s[f'new@{n}']
    paired = harness.paired_ratio(runs, f'base@{n}', f'new@{n}')
    verdicts.append(paired <= TIME_TARGET)
    records = (runs[f'base@{n}'][-1]['records'],
               runs[f'new@{n}'][-1]['records'])
    if records[0] != records[1]:
      problems.append(f'{n:,} rows: base wrote {records[0]:,} windows, new '
                      f'{records[1]:,}')
    lines.append(
        f'| {n:,} | {old["seconds_median"]:.1f} | '
        f'{new["seconds_median"]:.1f} | '
        f'{new["seconds_median"] / old["seconds_median"]:.3f}x | '
        f'{paired:.3f}x | {old["peak_rss_mib_median"]:.0f} | '
        f'{new["peak_rss_mib_median"]:.0f} | {records[0]:,}, '
        f'{records[1]:,} |')
  memory = harness.memory_growth(s, sizes, ('base', 'new'), 'rows')
  body = (
      f'Median of {args.repeats} paired repeats, whole processes, the sensor '
      f'benchmark\'s command and data; this checkout against {sha} (before '
      f'the rules of time). Target: at most {TIME_TARGET:.2f}x '
      f'({"met" if all(verdicts) else "MISSED"} at '
      f'{", ".join(f"{n:,}" for n in sizes)} rows).\n\n' +
      '\n'.join(lines) + memory + '\n')
  print()
  print(body)
  if problems:
    harness.print_problems(problems, 'base and new wrote different windows')
  harness.write_results(args, at_defaults, SECTION, TITLE, info, body)
  return 3 if problems else 0


if __name__ == '__main__':
  sys.exit(main())
