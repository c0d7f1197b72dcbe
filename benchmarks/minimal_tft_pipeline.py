"""The smallest pipeline of our kind a user would write with Beam and
tf.Transform: the floor under a tiny run's fixed cost.

    python benchmarks/minimal_tft_pipeline.py OUT [--analyzer zscore|vocabulary]
        [--rows 20] [--as-ours]

A baseline for benchmarks/fixed_cost_floor.py, not a test. It does what
every run of ours needs at the least, as the libraries' documentation
shows it, on the DirectRunner with Beam's defaults: `--rows` rows from
memory (`beam.Create`), one full-pass analyzer (`zscore`: per-column
`tft.scale_to_z_score` of a 3-float feature, as the image and sensor runs
normalize channels; `vocabulary`: `tft.compute_and_apply_vocabulary` of
each row's tokens, as the text runs index words),
`tft_beam.AnalyzeAndTransformDataset`, the exported transform written
(`OUT/transform_fn`, `OUT/transformed_metadata`) and the transformed rows
written as tf.train.Examples by `WriteToTFRecord` (`OUT/train-*`). None of
what our runs add (listing and reading files, splits, dead letters,
shuffle, statistics, manifest, validation, TFDS metadata).

Prints a JSON line last: {"analyzer": ..., "output": OUT}; the benchmark
counts the records. Two of the things our commands do that any pipeline
could, with one line each, are behind --as-ours: Beam's construction-time type checks off (0.3-0.5 s of
building a pipeline of ours, see README) and no shutdown of Python's own
after the last line (over a second with these libraries loaded; our
commands end with os._exit).
"""

import argparse
import json
import os
import sys
import tempfile

# tf.Transform works with Keras 2 only (what pipelines/__init__.py sets
# for our runs too, before TensorFlow is imported).
os.environ.setdefault('TF_USE_LEGACY_KERAS', '1')

# pylint: disable=g-import-not-at-top,wrong-import-position
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.tf_metadata import dataset_metadata
from tensorflow_transform.tf_metadata import schema_utils
# pylint: enable=g-import-not-at-top,wrong-import-position

ANALYZERS = ('zscore', 'vocabulary')
WORDS = ('alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta')


def rows_and_spec(analyzer, n):
  """The input rows and their tf.Transform feature spec."""
  if analyzer == 'zscore':
    spec = {'x': tf.io.FixedLenFeature([3], tf.float32)}
    rows = [{'x': [float(i), 2.0 * i, (i % 5) / 4.0]} for i in range(n)]
  else:
    spec = {'text': tf.io.FixedLenFeature([], tf.string)}
    rows = [{'text': ' '.join(WORDS[(i + k) % len(WORDS)]
                              for k in range(1 + i % 4))} for i in range(n)]
  spec['label'] = tf.io.FixedLenFeature([], tf.string)
  for i, row in enumerate(rows):
    row['label'] = 'ab'[i % 2]
  return rows, spec


def preprocessing_fn_for(analyzer):
  def preprocessing_fn(inputs):
    out = {'label': inputs['label']}
    if analyzer == 'zscore':
      out['x'] = tft.scale_to_z_score(inputs['x'], elementwise=True)
    else:
      tokens = tf.strings.split(inputs['text'])
      out['ids'] = tft.compute_and_apply_vocabulary(tokens).to_sparse()
    return out
  return preprocessing_fn


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('output')
  parser.add_argument('--analyzer', choices=ANALYZERS, default='zscore')
  parser.add_argument('--rows', type=int, default=20)
  parser.add_argument(
      '--as-ours', action='store_true',
      help="build the pipeline without Beam's type checks "
      '(--no_pipeline_type_check) and end the process right after the JSON '
      "line (os._exit), without Python's shutdown of the libraries' threads "
      'and modules, as our commands on the DirectRunner do')
  args = parser.parse_args(argv)
  rows, spec = rows_and_spec(args.analyzer, args.rows)
  metadata = dataset_metadata.DatasetMetadata(
      schema_utils.schema_from_feature_spec(spec))
  os.makedirs(args.output, exist_ok=True)
  with tempfile.TemporaryDirectory() as temp:
    options = PipelineOptions(['--no_pipeline_type_check']
                              if args.as_ours else [])
    with beam.Pipeline(options=options) as p, tft_beam.Context(
        temp_dir=temp):
      data = p | beam.Create(rows)
      (transformed, transformed_metadata), transform_fn = (
          (data, metadata) | tft_beam.AnalyzeAndTransformDataset(
              preprocessing_fn_for(args.analyzer)))
      _ = transform_fn | tft_beam.WriteTransformFn(args.output)
      coder = tft.coders.ExampleProtoCoder(transformed_metadata.schema)
      _ = (transformed
           | beam.Map(coder.encode)
           | beam.io.WriteToTFRecord(os.path.join(args.output, 'train')))
  print(json.dumps({'analyzer': args.analyzer, 'output': args.output}),
        flush=True)
  if args.as_ours:
    sys.stderr.flush()
    os._exit(0)  # pylint: disable=protected-access


if __name__ == '__main__':
  main()
