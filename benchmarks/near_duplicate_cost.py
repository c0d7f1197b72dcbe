"""What near-duplicate grouping costs a default image or text run: whole
processes, paired.

    python benchmarks/near_duplicate_cost.py [--modality image|text]
        [--sizes N,M] [--repeats 3] [--workdir /tmp/tfrecord_bench]
        [--results PATH | --no-results]

At each size, `python -m pipelines.preprocess --modality M --input CORPUS
--output OUT --overwrite` (the default: --near_duplicates group) and the
same command with `--near_duplicates off` run in turns (off, group, off,
group, ...). Images: the image benchmark's corpus
(benchmarks/image_benchmark.py generates it once, 402x303-ish JPEGs in
three classes), 10,000 and 20,000 by default. Text: the text benchmark's
CSV (benchmarks/text_benchmark.py generates it once), 200,000 and 800,000
documents by default. Reported per size: the median wall time and peak
memory (RSS of the process tree) of each, the ratio of the medians, the
median of the paired ratios, and the groups the run found. The target is
at most 1.10x in time, and peak memory flat with size (the group run's
larger/smaller ratio against the off run's).

A run at the default sizes and repeats rewrites its section of
benchmarks/RESULTS.md (--results PATH writes it whatever the settings;
--no-results nothing).
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=wrong-import-position
import harness
import image_benchmark
import text_benchmark
# pylint: enable=wrong-import-position

TIME_TARGET = 1.10
DEFAULT_REPEATS = 3
# modality -> (default sizes, unit, results section, its heading).
MODALITIES = {
    'image': ('10000,20000', 'images', 'near_duplicate_cost',
              'Near-duplicate grouping: cost on images '
              '(near_duplicate_cost.py)'),
    'text': ('200000,800000', 'documents', 'near_duplicate_cost_text',
             'Near-duplicate grouping: cost on text '
             '(near_duplicate_cost.py --modality text)'),
}


def _inspect(name, out, log_path):
  del name, log_path
  with open(os.path.join(out, 'manifest.json'), encoding='utf-8') as f:
    manifest = json.load(f)
  near = manifest['contents']['near_duplicates']
  return {'records': manifest['totals']['records'],
          'groups': near.get('groups'), 'members': near.get('members')}


def _verdict(sizes, verdicts) -> str:
  """'met at 200,000 and 800,000', 'MISSED at 800,000; met at 200,000'."""
  def listed(ns):
    return ' and '.join(f'{n:,}' for n in ns)
  met = [n for n, ok in zip(sizes, verdicts) if ok]
  missed = [n for n, ok in zip(sizes, verdicts) if not ok]
  if not missed:
    return f'met at {listed(met)}'
  return f'MISSED at {listed(missed)}' + (f'; met at {listed(met)}'
                                          if met else '')


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--modality', default='image', choices=MODALITIES)
  parser.add_argument('--sizes', default=None)
  parser.add_argument('--repeats', type=int, default=DEFAULT_REPEATS)
  parser.add_argument('--workdir', default='/tmp/tfrecord_bench')
  harness.add_results_flags(parser)
  args = parser.parse_args(argv)
  info = harness.run_info(sys.argv[1:] if argv is None else argv, __file__)
  default_sizes, unit, section, title = MODALITIES[args.modality]
  at_defaults = args.sizes in (None, default_sizes)
  sizes = [int(s) for s in (args.sizes or default_sizes).split(',')]
  outdir, logdir = harness.make_dirs(args.workdir)
  jobs = {}
  py = sys.executable
  for n in sizes:
    if args.modality == 'text':
      corpus = text_benchmark.ensure_csv(args.workdir, n)
    else:
      corpus = image_benchmark.ensure_corpus(args.workdir, n)
    print(f'page cache: read {harness.warm_page_cache(corpus) / 2**20:.0f} '
          f'MiB of {corpus}')
    for mode in ('off', 'group'):
      out = os.path.join(outdir, f'near_{args.modality}_{mode}_{n}')
      cmd = [py, '-m', 'pipelines.preprocess', '--modality', args.modality,
             '--input', corpus, '--output', out, '--overwrite']
      if mode == 'off':
        cmd += ['--near_duplicates', 'off']
      jobs[f'{mode}@{n}'] = (cmd, out, n)
  harness.print_commands(jobs)
  runs = harness.measure(jobs, args.repeats, logdir, unit, _inspect)
  s = harness.summarize(runs, unit)
  lines = [f'| {unit} | off: wall s | group: wall s | group / off '
           '(medians) | group / off (median of pairs) | off: peak RSS MiB | '
           'group: peak RSS MiB | groups found (members) |',
           '|---|---|---|---|---|---|---|---|']
  verdicts = []
  for n in sizes:
    off, group = s[f'off@{n}'], s[f'group@{n}']
    ratio = group['seconds_median'] / off['seconds_median']
    paired = harness.paired_ratio(runs, f'off@{n}', f'group@{n}')
    last = runs[f'group@{n}'][-1]
    verdicts.append(paired <= TIME_TARGET)
    lines.append(
        f'| {n:,} | {off["seconds_median"]:.1f} | '
        f'{group["seconds_median"]:.1f} | {ratio:.3f}x | {paired:.3f}x | '
        f'{off["peak_rss_mib_median"]:.0f} | '
        f'{group["peak_rss_mib_median"]:.0f} | {last["groups"]} '
        f'({last["members"]}) |')
  memory = harness.memory_growth(s, sizes, ('off', 'group'), unit)
  body = (
      f'Median of {args.repeats} paired repeats, whole processes on the '
      f'{args.modality} benchmark\'s corpus; the default run '
      f'(`--near_duplicates group`) against `--near_duplicates off`. Target: '
      f'at most '
      f'{TIME_TARGET:.2f}x ({_verdict(sizes, verdicts)}).\n\n' +
      '\n'.join(lines) +
      memory + '\n')
  print()
  print(body)
  harness.write_results(
      args, at_defaults and args.repeats >= DEFAULT_REPEATS, section, title,
      info, body)
  return 0


if __name__ == '__main__':
  sys.exit(main())
