"""Entry point: read a published dataset back with Beam and check it.

    python -m pipelines.validate --output ./dataset [Beam options]

Every shard is read in parallel; every record is parsed against the
manifest's feature spec and its values checked; record counts, checksums,
class counts and the fingerprint are recomputed and compared with the
manifest; the exported transform is fed probes built from the manifest
(images: black and white; sensor: values from the training statistics;
text: an unknown word and the first vocabulary words). The report is
written to `<output>/validation_report.json` and summarized on stdout.

Exit codes: 0 the dataset is sound; 3 it is not, or the folder is not a
published dataset (the summary says why); 2 bad invocation; 1 the
validation pipeline itself failed.
"""

import argparse
import json
import os
import sys
import traceback
from typing import List, Optional

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# pylint: disable=wrong-import-position
import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import preprocess
from pipelines import reader
from transforms import manifest as manifest_lib
from transforms import validation

REPORT = 'validation_report.json'
EXIT_SOUND = 0
# Same code as preprocess's data-quality failure, so a scheduler can treat
# "the data is not sound" alike wherever it is found.
EXIT_UNSOUND = 3
EXIT_FAILED = 1
EXIT_USAGE = 2


def _unlisted_files(output: str, manifest: dict) -> List[str]:
  # Shards and the index files ('<shard>.idx') the manifest names.
  listed = {name for split in manifest['splits'].values()
            for s in split['shards'] for name in (s['file'], s.get('index'))
            if name}
  found = FileSystems.match([manifest_lib.join(output, '*.tfrecord*')]
                           )[0].metadata_list
  return sorted(os.path.basename(m.path) for m in found
                if os.path.basename(m.path) not in listed)


def _write_report(results, output, manifest, extra, report_path):
  report = validation.build_report(
      manifest, results, extra_files=extra,
      transform_check=reader.check_transform(output, manifest))
  with FileSystems.create(report_path,
                          compression_type='uncompressed') as f:
    f.write(json.dumps(report, indent=2, ensure_ascii=False).encode('utf-8'))
  return report['verdict']


def run(argv: Optional[List[str]] = None) -> dict:
  """Validates a dataset; returns the report.

  Raises:
    reader.DatasetError: The folder is not a published dataset.
    preprocess.UsageError: A bad invocation.
  """
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--output', required=True,
                      help='The dataset folder to validate.')
  parser.add_argument('--report', default=None,
                      help='Where to write the JSON report (default: '
                      f'<output>/{REPORT}).')
  args, beam_args = parser.parse_known_args(argv)
  unknown = preprocess.unknown_flags(beam_args)
  if unknown:
    raise preprocess.UsageError(f'unknown option {", ".join(unknown)} '
                                '(see --help).')
  output = args.output.rstrip('/')
  if not FileSystems.exists(output):
    raise preprocess.UsageError(f'the dataset folder {output} does not '
                                'exist.')
  manifest = reader.load_manifest(output)
  try:
    shards = [dict(s, split=name) for name, split in
              manifest['splits'].items() for s in split['shards']]
  except (KeyError, TypeError, AttributeError) as e:
    raise reader.DatasetError(f'the manifest of {output} is incomplete: '
                              f'missing {e}') from None
  extra = _unlisted_files(output, manifest)
  report_path = args.report or manifest_lib.join(output, REPORT)
  options = PipelineOptions(beam_args)
  preprocess.apply_local_defaults(options, beam_args)
  with beam.Pipeline(options=options) as p:
    _ = (p
         | 'ListShards' >> beam.Create(shards)
         | 'SpreadShards' >> beam.Reshuffle()
         | 'CheckShard' >> beam.Map(validation.check_shard, output=output,
                                    manifest=manifest)
         # -> one result per shard
         | 'AllShards' >> beam.combiners.ToList()
         | 'WriteReport' >> beam.Map(_write_report, output, manifest, extra,
                                     report_path))
  with FileSystems.open(report_path, compression_type='uncompressed') as f:
    return json.loads(f.read().decode('utf-8'))


def summary(report: dict) -> str:
  lines = [f'validation: {report["verdict"].upper()} '
           f'({report.get("dataset")}, run {report.get("run_id")})']
  for name, s in report['splits'].items():
    lines.append(f'  {name}: {s["records"]} records in {s["shards"]} shards, '
                 f'classes {s["class_counts"]}')
  failed = [c for c in report['checks'] if c['status'] != 'pass']
  for c in failed:
    lines.append(f'  FAILED {c["check"]}: {c["detail"]}')
  for e in report.get('record_errors', [])[:10]:
    lines.append(f'    {e}')
  if not failed:
    lines.append(f'  all {len(report["checks"])} checks passed')
  return '\n'.join(lines)


def main(argv: Optional[List[str]] = None) -> int:
  preprocess.configure_logging()
  try:
    report = run(argv)
  except preprocess.UsageError as e:
    print(f'error: {e}', file=sys.stderr)
    return EXIT_USAGE
  except reader.DatasetError as e:
    print(f'validation: FAIL: {e}.', file=sys.stderr)
    return EXIT_UNSOUND
  except Exception as e:  # pylint: disable=broad-except
    traceback.print_exc()
    print(f'error: the validation pipeline failed: {type(e).__name__}: '
          f'{str(e).splitlines()[0] if str(e) else ""}', file=sys.stderr)
    return EXIT_FAILED
  print(summary(report))
  return EXIT_SOUND if report['verdict'] == 'pass' else EXIT_UNSOUND


def cli() -> None:
  """Console-script entry point."""
  preprocess.exit_now(main())


if __name__ == '__main__':
  cli()
