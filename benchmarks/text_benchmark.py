"""Throughput and peak memory of our text pipeline against a plain script.

    python benchmarks/text_benchmark.py [--docs 200000] [--repeats 3]
        [--workdir /tmp/tfrecord_bench] [--json results.json]
        [--only ours|baseline] [--results PATH | --no-results]

A benchmark, not a test. It makes (or reuses) a CSV of labelled documents
with benchmarks/text_data.py (text,label; 20..120 made-up words each, 5
imbalanced labels, a few texts with quotes and line breaks) and runs, each
as its own process (interpreter start-up and imports included, as a user
sees it):

  ours      python -m pipelines.preprocess --modality text ... (lowercase
            whitespace tokens, a 20,000-token vocabulary from the train
            split, 128 token ids per record, 3 splits by row id)
  baseline  benchmarks/text_baseline.py: csv module + collections.Counter +
            one tf.io.TFRecordWriter per split, single process, whole file
            in memory

in interleaved order (ours, baseline, ours, baseline, ...), and reports the
median docs/s (docs = input rows) and peak RSS of each and the ratios
ours/baseline. Measurement (peak RSS, tree RSS, CPU, other load) is
benchmarks/harness.py, as for image_benchmark.py and sensor_benchmark.py;
each run's output goes to WORKDIR/logs/text/<name>_r<k>.log (a folder of
its own: the other benchmarks use the same job names in WORKDIR/logs).

Record counts are checked per split: ours from OUT/manifest.json, the
baseline from the JSON line it prints, each against the counts its split
rule implies: ours splits by content (the default --split_key content: a
hash of each text's tokens, transforms.modalities.text.preprocessing.
content_keys), the baseline by row id (transforms.core.splits.assign_split
of '<file name>:<row>', what a plain script does); the totals agree.

Exit codes: 0 done; 1 a command failed (its log tail is printed); 3 every
command ran but the per-split record counts disagree (printed as a
warning; the numbers are still reported).

A comparison of both commands at the default docs with at least the
default repeats rewrites its section of benchmarks/RESULTS.md
(harness.write_results: date, commit, machine, command, the printed
table); --no-results keeps it from doing so, --results PATH writes the
section of that file whatever the sizes.
"""

import argparse
import csv
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
import text_data
# pylint: enable=g-import-not-at-top,wrong-import-position

UNIT = 'docs'
NAMES = ('ours', 'baseline')
VOCAB_SIZE, MAX_TOKENS = 20000, 128
SPLITS = (('train', 0.8), ('validation', 0.1), ('test', 0.1))


# ------------------------------------------------------------------- data --


def count_docs(path):
  """Data rows of a CSV (quoted line breaks do not start a row)."""
  with open(path, newline='', encoding='utf-8') as f:
    return sum(1 for _ in csv.reader(f)) - 1  # header


def ensure_csv(workdir, docs):
  """WORKDIR/text_<docs>.csv, generated unless already there."""
  path = os.path.join(workdir, f'text_{docs}.csv')
  if os.path.isfile(path):
    found = count_docs(path)
    if found == docs:
      print(f'data: reusing {path} ({docs} docs)')
      return path
    print(f'data: {path} has {found} docs, not {docs}; regenerating')
  os.makedirs(workdir, exist_ok=True)
  start = time.perf_counter()
  print(f'data: generating {docs} docs into {path} ...', flush=True)
  # generate writes a temporary file and renames it when complete.
  text_data.generate(path, docs)
  print(f'data: done in {time.perf_counter() - start:.1f} s')
  return path


def expected_split_records(csv_path, docs, by='id'):
  """{split: records} of a split rule.

  by='id': every row in the split of its id; the id of row r (0-based,
  header not counted) is '<file name>:<r>', the rule of text_baseline.py.
  by='content': every row in the split of its content key, our pipeline's
  default (lower-cased whitespace tokens, the first MAX_TOKENS of them).
  """
  sys.path.insert(0, REPO)
  from transforms.core import contents  # pylint: disable=import-outside-toplevel
  from transforms.core.splits import assign_split  # pylint: disable=import-outside-toplevel
  from transforms.modalities.text import preprocessing  # pylint: disable=import-outside-toplevel
  out = {name: 0 for name, _ in SPLITS}
  if by == 'content':
    tc = preprocessing.TextConfig(
        text_column='text', label_column='label', lowercase=True,
        strip_punctuation=False, max_tokens=MAX_TOKENS,
        vocab_size=VOCAB_SIZE, min_frequency=1, oov_buckets=1,
        ngrams=(1, 1), output='ids', keep_text=False,
        invalid_utf8='replace')
    with open(csv_path, newline='', encoding='utf-8') as f:
      rows = csv.reader(f)
      next(rows)
      texts = [row[0] for row in rows]
    for key in preprocessing.content_keys(texts, tc):
      out[contents.content_split(key, SPLITS)] += 1
    return out
  base = os.path.basename(csv_path)
  for r in range(docs):
    out[assign_split(f'{base}:{r}', list(SPLITS))] += 1
  return out


# --------------------------------------------------------------- commands --


def ours_command(csv_path, out):
  """The command line of our pipeline (one place to change it)."""
  return [sys.executable, '-m', 'pipelines.preprocess',
          '--modality', 'text', '--input', csv_path, '--output', out,
          '--overwrite', '--text_column', 'text', '--label_column', 'label',
          '--vocab_size', str(VOCAB_SIZE), '--max_tokens', str(MAX_TOKENS)]


def baseline_command(csv_path, out):
  return [sys.executable, os.path.join(BENCH_DIR, 'text_baseline.py'),
          '--input', csv_path, '--output', out,
          '--vocab_size', str(VOCAB_SIZE), '--max_tokens', str(MAX_TOKENS)]


def commands(csv_path, outdir, docs):
  """{name: (argv, output path)} of the measured commands."""
  ours_out = os.path.join(outdir, f'text_ours_{docs}')
  base_out = os.path.join(outdir, f'text_baseline_{docs}')
  return {'ours': (ours_command(csv_path, ours_out), ours_out),
          'baseline': (baseline_command(csv_path, base_out), base_out)}


def inspect_run(name, out, log_path):
  """A harness.measure inspect: the per-split records a finished run wrote."""
  return harness.split_records(harness.base_name(name), out, log_path, UNIT)


# ------------------------------------------------------------------- main --


def compare(args):
  csv_path = ensure_csv(args.workdir, args.docs)
  print(f'page cache: read '
        f'{harness.warm_page_cache(csv_path) / 2**20:.0f} MiB of data once '
        'before measuring')
  outdir, logdir = harness.make_dirs(args.workdir)
  logdir = os.path.join(logdir, 'text')
  os.makedirs(logdir, exist_ok=True)
  jobs = {name: (cmd, out, args.docs)
          for name, (cmd, out) in commands(csv_path, outdir,
                                           args.docs).items()
          if name in args.only}
  expected = {'ours': expected_split_records(csv_path, args.docs, 'content'),
              'baseline': expected_split_records(csv_path, args.docs, 'id')}
  per_job = {n: expected[n] for n in jobs}
  harness.print_commands(jobs)
  runs = harness.measure(jobs, args.repeats, logdir, UNIT, inspect_run,
                         harness.split_count_check(per_job))
  s = harness.summarize(runs, UNIT)
  problems = harness.split_count_problems(
      runs, per_job, {n: args.docs for n in jobs}, UNIT)
  with harness.printed() as table:
    print()
    print(f'{args.docs} docs, {args.repeats} repeat(s), {os.cpu_count()} CPUs')
    labels = {'ours': 'ours (pipelines.preprocess)',
              'baseline': 'baseline (csv + Counter)'}
    harness.print_table([(labels[n], n) for n in jobs], s, UNIT)
    ratios = rss_ratios = None
    if len(jobs) == 2:
      ratios = {'ours/baseline': s['ours']['docs_per_second_median'] /
                                 s['baseline']['docs_per_second_median']}
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
      verdict = ('as expected' if harness.same_splits(last, per_job[name])
                 else 'DIFFERENT')
      print(f'records {name:9s} {harness.format_splits(last)} ({verdict})')
    harness.print_columns_note(UNIT)
    harness.print_problems(problems, 'per-split record counts disagree')
  return {'mode': 'compare', 'docs': args.docs, 'repeats': args.repeats,
          'data': csv_path, 'vocab_size': VOCAB_SIZE,
          'max_tokens': MAX_TOKENS, 'machine': harness.machine_info(),
          'commands': {n: shlex.join(c) for n, (c, _, _) in jobs.items()},
          'expected_split_records': per_job,
          'results': s, 'throughput_ratios': ratios,
          'peak_rss_ratios': rss_ratios, 'record_problems': problems,
          'table': table.getvalue()}


def main(argv=None):
  parser = argparse.ArgumentParser(
      description=__doc__.split('\n')[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--docs', type=int, default=200_000,
                      help='Input documents (default 200000).')
  parser.add_argument('--repeats', type=int, default=3,
                      help='Runs of each command; medians are reported '
                      '(default 3).')
  parser.add_argument('--workdir', default='/tmp/tfrecord_bench',
                      help='Data (text_N.csv), outputs and logs '
                      '(default /tmp/tfrecord_bench).')
  parser.add_argument('--json', default=None,
                      help='Also write the results as JSON to this path.')
  parser.add_argument('--only', default=','.join(NAMES),
                      help='Comma-separated commands to run: ours, baseline '
                      '(default both).')
  harness.add_results_flags(parser)
  args = parser.parse_args(argv)
  if args.docs < 1 or args.repeats < 1:
    parser.error('--docs and --repeats must be at least 1')
  args.only = [n.strip() for n in args.only.split(',') if n.strip()]
  unknown = [n for n in args.only if n not in NAMES]
  if unknown or not args.only:
    parser.error(f'--only takes {" and/or ".join(NAMES)}, got '
                 f'{", ".join(unknown) or "nothing"}')
  args.workdir = os.path.abspath(args.workdir)
  info = harness.run_info(sys.argv[1:] if argv is None else argv, __file__)
  try:
    result = compare(args)
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
  harness.write_results(
      args, harness.at_defaults(parser, args, ['docs']) and
      set(args.only) == set(NAMES), 'text_benchmark',
      'Text against the csv + Counter script (text_benchmark.py)', info,
      harness.code_block(result['table']))
  return 0


if __name__ == '__main__':
  sys.exit(main())
