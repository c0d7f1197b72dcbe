"""Our pipeline on the DirectRunner, on Flink and on Spark: time and memory.

    python benchmarks/engines_benchmark.py [--modalities image,sensor,text]
        [--runners direct,flink,spark] [--repeats 3]
        [--workdir /tmp/tfrecord_bench]
        [--image-sizes 10000,20000] [--sensor-sizes 1000000,4000000]
        [--text-sizes 200000,800000]
        [--image-tiny 20] [--sensor-tiny 5000] [--text-tiny 500]
        [--spark-via preprocess|run_spark] [--no-warmup] [--run-timeout 1800]
        [--json results.json] [--results PATH | --no-results]

A benchmark, not a test. For each modality it makes (or reuses) the data
of all_modalities.py (the per-modality benchmarks' generators, the same
sizes) and runs our command of that benchmark, each run a whole process
with start-up (harness.run_measured), interleaved, --repeats times:

  direct  the command as all_modalities.py runs it (DirectRunner)
  flink   ./run_flink.sh ARGS --job_endpoint localhost:8099 --environment
          EXTERNAL --environment_config localhost:8096 --parallelism 2
  spark   ./run_spark.sh ARGS --job_endpoint localhost:8199 --environment
          EXTERNAL --environment_config localhost:8196 (or Beam's
          PortableRunner through python -m pipelines.preprocess with
          --spark-via preprocess)

on the clusters of scripts/flink_cluster.sh and scripts/spark_cluster.sh.
A cluster that is not running is started first (its start is timed and
reported apart, never inside a run) and stopped at the end; one that was
running is left as it was.

During every run a sampler reads the process table (psutil) every 0.2 s
for the peak RSS of each Flink TaskManager JVM and each Spark executor
JVM, and of the SDK worker processes (the children of each cluster's
worker pool; the largest one is reported), and the CPU the clusters'
processes used. After a Flink
run the job's REST view (/jobs/<jid>: duration, the 5 longest vertices)
is kept, after a Spark run the job server log's stages; with --json they
say where the time went.

Reported per modality and runner (medians over the repeats): the fixed
cost (a run at the tiny size), seconds at both sizes, the steady state
(size2 - size1) / (t2 - t1) and its ratio to the DirectRunner's (target:
Flink at least 0.8x), the peak RSS of the launching process (for the
DirectRunner: the run, as in all_modalities.py) and of each TaskManager or
executor and the SDK workers at both sizes, with size2/size1 (target: at
most 1.1x for the engines' processes). PASS/MISS is information, not an
exit code. Record counts are checked as all_modalities.py checks them.

A run of every modality and runner at the default sizes, with the warm-up
and at least 3 repeats, rewrites the `engines` section of
benchmarks/RESULTS.md; --results PATH writes that section of PATH
whatever the sizes, --no-results nothing.

Exit codes: 0 done; 1 a command or a cluster start failed; 3 every command
ran but some wrote wrong record counts (nothing is published then).
"""

import argparse
import contextlib
import json
import os
import sys
import time

# The other benchmarks and the shared measurement code, also when run from
# elsewhere than this folder.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
import all_modalities
import engine_clusters
import engine_figures
import engine_report
import engine_runs
import harness
from harness import BenchmarkError
# pylint: enable=g-import-not-at-top,wrong-import-position


def published(args, names, runners):
  """Whether a run is at the settings RESULTS.md publishes: every modality
  and runner, the default sizes, the warm-up, at least 3 repeats."""
  return (list(names) == list(all_modalities.MODALITIES) and
          list(runners) == list(engine_clusters.RUNNERS) and args.warmup and
          args.repeats >= 3 and
          all(getattr(args, f'{m.name}_sizes') == m.default_sizes and
              getattr(args, f'{m.name}_tiny') == m.default_tiny
              for m in all_modalities.MODALITIES.values()))


# ------------------------------------------------------------------- main --

# all_modalities.py's argument types, so both read sizes alike.
_positive = all_modalities._positive  # pylint: disable=protected-access
_sizes = all_modalities._sizes  # pylint: disable=protected-access


def _names(parser, text, allowed, flag):
  names = [n.strip() for n in text.split(',') if n.strip()]
  unknown = [n for n in names if n not in allowed]
  if unknown or not names:
    parser.error(f'{flag} takes {", ".join(allowed)}; got '
                 f'{", ".join(unknown) or "nothing"}')
  return [n for n in allowed if n in names]  # fixed order, no repeats


def parse_args(argv):
  parser = argparse.ArgumentParser(
      description=__doc__.split('\n')[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  mods = all_modalities.MODALITIES
  parser.add_argument('--modalities', default=','.join(mods),
                      help=f'Comma-separated (default {",".join(mods)}).')
  parser.add_argument('--runners', default=','.join(engine_clusters.RUNNERS),
                      help='Comma-separated (default '
                      f'{",".join(engine_clusters.RUNNERS)}); '
                      'the steady-state target needs direct and flink.')
  parser.add_argument('--repeats', type=_positive, default=3,
                      help='Runs of each command; medians are reported '
                      '(default 3).')
  parser.add_argument('--workdir', default='/tmp/tfrecord_bench',
                      help='Data, outputs and logs (default '
                      '/tmp/tfrecord_bench, shared with the other '
                      'benchmarks; logs in WORKDIR/logs/engines).')
  for m in mods.values():
    parser.add_argument(f'--{m.name}-sizes', type=_sizes,
                        default=m.default_sizes,
                        help=f'The two sizes in {m.unit} (default '
                        f'{",".join(str(n) for n in m.default_sizes)}).')
    parser.add_argument(f'--{m.name}-tiny', type=_positive,
                        default=m.default_tiny,
                        help=f'The fixed-cost size in {m.unit} (default '
                        f'{m.default_tiny}).')
  parser.add_argument('--spark-via', choices=('preprocess', 'run_spark'),
                      default='run_spark',
                      help='Submit to Spark with ./run_spark.sh (default), '
                      'or with Beam\'s PortableRunner through '
                      'pipelines.preprocess.')
  parser.add_argument('--no-warmup', dest='warmup', action='store_false',
                      help='No unmeasured run per runner at the tiny size.')
  parser.add_argument('--run-timeout', type=_positive, default=1800,
                      help='Seconds after which a run is ended and counts '
                      'as failed (default 1800).')
  parser.add_argument('--json', default=None,
                      help='Also write every run\'s figures (engine '
                      'processes, Flink vertices, Spark stages) here.')
  harness.add_results_flags(parser)
  args = parser.parse_args(argv)
  args.modality_names = _names(parser, args.modalities, list(mods),
                               '--modalities')
  args.runner_names = _names(parser, args.runners,
                             list(engine_clusters.RUNNERS), '--runners')
  args.workdir = os.path.abspath(args.workdir)
  return args


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  args = parse_args(argv)
  info = harness.run_info(argv, __file__)
  names, runners = args.modality_names, args.runner_names
  # Names this invocation's jobs apart from earlier ones on the clusters.
  tag = time.strftime('%H%M%S')
  clusters, results, failed = {}, [], None
  try:
    with contextlib.redirect_stdout(sys.stderr):
      for engine in engine_clusters.ENGINES:
        if engine in runners:
          clusters[engine] = engine_clusters.ensure_cluster(engine)
    for name in names:
      m = all_modalities.MODALITIES[name]
      # Progress to stderr; the tables to stdout.
      with contextlib.redirect_stdout(sys.stderr):
        result = engine_runs.run_modality(
            m, getattr(args, f'{name}_sizes'), getattr(args, f'{name}_tiny'),
            runners, args.repeats, args.workdir, args.spark_via, args.warmup,
            tag, args.run_timeout)
      results.append(result)
      engine_report.print_table(result)
      sys.stdout.flush()
  except BenchmarkError as e:
    failed = e
  finally:
    for engine, c in clusters.items():
      if c['started']:
        with contextlib.redirect_stdout(sys.stderr):
          engine_clusters.stop_cluster(engine)
        c['stopped'] = True
  print()
  for line in engine_report.describe_clusters(clusters):
    print(f'cluster {line}')
  if failed:
    print(f'\nBENCHMARK FAILED: {failed}', file=sys.stderr)
    return 1
  engine_report.print_targets(results)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump({'info': info, 'repeats': args.repeats,
                 'warmup': args.warmup, 'clusters': clusters,
                 'targets': {
                     'flink_steady_over_direct':
                         engine_figures.FLINK_STEADY_TARGET,
                     'engine_memory_ratio': engine_figures.MEMORY_TARGET},
                 'modalities': results}, f, indent=2)
    print(f'wrote {args.json}')
  if any(r['record_problems'] for r in results):
    return 3
  harness.write_results(
      args, published(args, names, runners), 'engines',
      'Our pipeline on the DirectRunner, Flink and Spark '
      '(engines_benchmark.py)', info,
      f'Peak RSS of the launching process by '
      f'{info["machine"]["rss_method"]}. ' +
      engine_report.markdown_tables(results, clusters, args.repeats,
                                    args.warmup))
  return 0


if __name__ == '__main__':
  sys.exit(main())
