"""Entry point: read a published dataset back with Beam and check it.

    python -m pipelines.validate --output ./dataset [Beam options]

Every shard is read in parallel; every record is parsed against the
manifest's feature spec and its values checked; record counts, checksums,
class counts and the fingerprint are recomputed and compared with the
manifest; the exported transform is fed probes built from the manifest
(images: black and white; sensor: values from the training statistics;
text: an unknown word and the first vocabulary words); leakage (what it
means is the modality's: content in two splits for images and texts, a
recording or time range in two splits for sensor data), duplicates, label
conflicts, per-feature statistics and their drift from the training split
and shard health are checked over the whole dataset, and for sensor data
each entity's windows or rows in order (their spans, places and times,
gathered from every shard and split). The report is written
to `<output>/validation_report.json`, as a self-contained page to
`<output>/validation_report.html`, and summarized on stdout.

Exit codes: 0 the dataset is sound; 3 it is not, or the folder is not a
published dataset (the summary says why); 2 bad invocation; 1 the
validation pipeline itself failed.
"""

import json
import os
import posixpath
import sys
import traceback
import uuid
from typing import List, Optional

from pipelines import collector
from pipelines import quiet

# Before TensorFlow is first imported (see pipelines/quiet.py); the garbage
# collector waits until the pipeline runs (pipelines/collector.py).
if __name__ == '__main__':
  collector.pause()
  quiet.start()
quiet.imported()

# pylint: disable=wrong-import-position
import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import command_line
from pipelines import errors
from pipelines import options as options_lib
from pipelines import preflight
from pipelines import outcome
from pipelines import runner_setup
from pipelines import reader
from transforms.compat import beam as compat_beam
from transforms.core.errors import UsageError
from transforms.output import manifest as manifest_lib
from transforms.sources import files
from transforms.validation import dataset_checks
from transforms.validation import pipeline as validation_pipeline

REPORT = command_line.REPORT
EXIT_SOUND = outcome.EXIT_OK
# Same code as preprocess's data-quality failure, so a scheduler can treat
# "the data is not sound" alike wherever it is found.
EXIT_UNSOUND = outcome.EXIT_DATA_QUALITY
EXIT_FAILED = outcome.EXIT_PIPELINE_FAILED
EXIT_USAGE = outcome.EXIT_USAGE


def _unlisted_files(output: str, manifest: dict) -> List[str]:
  """Shard-like files in the dataset's folder that the manifest does not
  name (relative to the output, as the manifest names files)."""
  # Shards and the index files ('<shard>.idx') the manifest names.
  listed = {name for split in manifest['splits'].values()
            for s in split['shards'] for name in (s['file'], s.get('index'))
            if name}
  data_dir = manifest.get('data_dir') or '.'
  folder = output if data_dir == '.' else manifest_lib.join(output, data_dir)
  found = FileSystems.match([manifest_lib.join(folder, '*.tfrecord*')]
                           )[0].metadata_list
  names = [os.path.basename(m.path) for m in found]
  if data_dir != '.':
    names = [f'{data_dir}/{n}' for n in names]
  return sorted(n for n in names if n not in listed)


def run(argv: Optional[List[str]] = None) -> dict:
  """Validates a dataset; returns the report.

  Raises:
    reader.DatasetError: The folder is not a published dataset.
    UsageError: A bad invocation.
  """
  args, beam_args = command_line.validate_parser(
      __doc__.split('\n')[0]).parse_known_args(argv)
  compat_beam.cache_dofn_introspection()
  thresholds = _thresholds(args)
  unknown = command_line.read(command_line.beam_parser(), beam_args)
  if unknown:
    raise UsageError(command_line.unknown_sentence(unknown))
  runner = runner_setup.check_runner(_runner(beam_args),
                                    args.allow_unverified_runner)
  if runner is not None:
    beam_args = beam_args + ['--runner', runner]
  # Absolute, so that workers started in another folder read the same files.
  output = options_lib.absolute_local_path(args.output).rstrip('/')
  preflight.check_reachable([output], PipelineOptions(beam_args))
  if not files.exists(output):
    raise UsageError(f'the dataset folder {output} does not '
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
  options = options_lib.BeamOptions(beam_args)
  runner_setup.apply_local_defaults(options, beam_args)
  collector.resume()
  # What the near-duplicate check groups waits beside the report (a place
  # this run may write to), not in memory (core/near_duplicates.py);
  # removed when the report is written.
  scratch = manifest_lib.join(posixpath.dirname(report_path) or '.',
                              f'.validation-{uuid.uuid4().hex[:12]}')
  try:
    _validate(options, output, manifest, shards, extra, report_path,
              thresholds, scratch)
  finally:
    manifest_lib.remove_tree(scratch)
  with FileSystems.open(report_path, compression_type='uncompressed') as f:
    return json.loads(f.read().decode('utf-8'))


def _validate(options, output, manifest, shards, extra, report_path,
              thresholds, scratch):
  """Runs the validation pipeline, which writes the report."""
  with beam.Pipeline(runner=runner_setup.local_runner(options),
                     options=options) as p:
    _ = p | 'ValidateDataset' >> validation_pipeline.ValidateDataset(
        output, manifest, shards, extra, report_path, thresholds, scratch)


def _runner(beam_args: List[str]) -> Optional[str]:
  """--runner among Beam's options (the last one given), or None."""
  from apache_beam.options.pipeline_options import StandardOptions  # pylint: disable=import-outside-toplevel
  return PipelineOptions(beam_args).view_as(StandardOptions).runner


def _number(args, name: str, optional: bool) -> Optional[float]:
  value = getattr(args, name)
  if optional and str(value).lower() == 'none':
    return None
  try:
    number = float(value)
  except ValueError:
    number = -1.0
  if not number >= 0:
    raise UsageError(
        f'--{name} must be a number, 0 or more'
        f'{" (or none)" if optional else ""}, not "{value}".')
  return number


def _thresholds(args) -> dataset_checks.Thresholds:
  return dataset_checks.Thresholds(
      feature_drift_warn=_number(args, 'feature_drift_warn', False),
      feature_drift_fail=_number(args, 'feature_drift_fail', True),
      class_drift_warn=_number(args, 'class_drift_warn', False),
      class_drift_fail=_number(args, 'class_drift_fail', True),
      record_warn_bytes=int(_number(args, 'record_warn_mib', False) * 2**20),
      strict=bool(args.strict))


def summary(report: dict) -> str:
  lines = [f'validation: {report["verdict"].upper()} '
           f'({report.get("dataset")}, run {report.get("run_id")})']
  for name, s in report['splits'].items():
    lines.append(f'  {name}: {s["records"]} records in {s["shards"]} shards, '
                 f'classes {s["class_counts"]}')
  failed = [c for c in report['checks'] if c['status'] == 'fail']
  warned = [c for c in report['checks'] if c['status'] == 'warn']
  noted = [c for c in report['checks'] if c['status'] == 'info']
  for c in failed:
    lines.append(f'  FAILED {c["check"]}: {c["detail"]}')
  for e in report.get('record_errors', [])[:10]:
    lines.append(f'    {e}')
  for c in warned:
    lines.append(f'  WARNING {c["check"]}: {c["detail"]}')
  for c in noted:
    lines.append(f'  INFO {c["check"]}: {c["detail"]}')
  if not failed:
    lines.append(f'  {len(report["checks"]) - len(warned)} of '
                 f'{len(report["checks"])} checks passed, {len(warned)} '
                 'warned' + (f', {len(noted)} with information'
                             if noted else ''))
  return '\n'.join(lines)


def main(argv: Optional[List[str]] = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  outcome.configure_logging()
  verbose = '--verbose' in argv
  with errors.Capture(verbose) as capture:
    try:
      report = run(argv)
    except UsageError as e:
      print(f'error: {e}', file=sys.stderr)
      return EXIT_USAGE
    except reader.DatasetError as e:
      print(f'validation: FAIL: {e}.', file=sys.stderr)
      return EXIT_UNSOUND
    except Exception as e:  # pylint: disable=broad-except
      log = capture.write_log(errors.log_path('validate'),
                              'python -m pipelines.validate', argv, e)
      if verbose:
        traceback.print_exc()
      where = (f'; the traceback is in {log}' if log else
               '; pass --verbose to see the traceback')
      print(f'error: the validation pipeline failed: '
            f'{errors.describe(e).rstrip(".")}{where}.', file=sys.stderr)
      return EXIT_FAILED
  print(summary(report))
  return EXIT_SOUND if report['verdict'] == 'pass' else EXIT_UNSOUND


def cli() -> None:
  """Console-script entry point."""
  outcome.exit_now(main())


if __name__ == '__main__':
  cli()
