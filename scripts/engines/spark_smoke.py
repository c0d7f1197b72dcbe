"""Smoke test for the Spark cluster of scripts/spark_cluster.sh.

    .venv/bin/python scripts/engines/spark_smoke.py [--output DIR] \\
        [--job_endpoint localhost:8199] [--environment_config localhost:8196]

Runs a small batch pipeline with a GroupByKey and a side input through
Beam's PortableRunner and Spark job server, with the SDK workers in the
cluster's worker pool (EXTERNAL environment), then checks the result it
wrote. Exits 0 when the sums are right, 1 otherwise.
"""

import argparse
import glob
import json
import os
import sys
import tempfile

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

KEYS = 10
N = 10000


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--output', default=None,
                      help='folder for the result (default: a temp folder '
                      'that every worker on this machine can reach)')
  parser.add_argument('--job_endpoint', default='localhost:8199')
  parser.add_argument('--environment_config', default='localhost:8196')
  args, beam_args = parser.parse_known_args(argv)
  out_dir = args.output or tempfile.mkdtemp(prefix='spark-smoke-')
  options = PipelineOptions([
      '--runner', 'PortableRunner',
      '--job_endpoint', args.job_endpoint,
      '--environment_type', 'EXTERNAL',
      '--environment_config', args.environment_config,
      '--job_name', 'spark-smoke',
      # Executors keep their SDK worker for the whole application: they
      # share one worker pool, where releasing a worker can stop another
      # executor's (see the top of scripts/spark_cluster.sh).
      '--environment_cache_millis', '86400000',
  ] + beam_args)

  with beam.Pipeline(options=options) as p:
    # A side input: each key's weight, handed to every worker as a dict.
    weights = p | 'Weights' >> beam.Create([(k, k + 1) for k in range(KEYS)])
    (p
     | 'Numbers' >> beam.Create(range(N))
     | 'Key' >> beam.Map(lambda n: (n % KEYS, n))
     | 'Group' >> beam.GroupByKey()
     | 'Sum' >> beam.Map(
         lambda kv, w: {'key': kv[0], 'count': len(list(kv[1])),
                        'weighted': sum(kv[1]) * w[kv[0]]},
         w=beam.pvalue.AsDict(weights))
     | 'Json' >> beam.Map(json.dumps)
     | 'Write' >> beam.io.WriteToText(os.path.join(out_dir, 'sums'),
                                      file_name_suffix='.jsonl'))

  rows = []
  for name in glob.glob(os.path.join(out_dir, 'sums*.jsonl')):
    with open(name, encoding='utf-8') as f:
      rows += [json.loads(line) for line in f if line.strip()]
  want = {k: sum(range(k, N, KEYS)) * (k + 1) for k in range(KEYS)}
  got = {r['key']: r['weighted'] for r in rows}
  ok = got == want and all(r['count'] == N // KEYS for r in rows)
  print(json.dumps({'ok': ok, 'output': out_dir, 'rows': len(rows)}))
  return 0 if ok else 1


if __name__ == '__main__':
  sys.exit(main())
