"""Entry point: raw inputs -> published, sharded TFRecord dataset.

    python -m pipelines.preprocess --modality image \\
        --input ./photos --output ./dataset [options] [Beam options]

Every option not listed in `pipelines/options.py` goes to Beam unchanged
(`--runner`, `--direct_running_mode`, `--direct_num_workers`, ...). Without
runner options the job runs on the DirectRunner with one worker thread per
core.

Exit codes: 0 published; 2 bad invocation (one sentence on stderr);
3 data-quality gate failed (nothing published); 1 the pipeline failed (one
sentence naming the exception and the log file with its traceback, which
--verbose also prints).
The last line on stdout is always one JSON object with the run's summary
(status, exit code, output, counts, dead letters, duration, error).
"""

import logging
import os
import secrets
import shutil
import sys
import tempfile
import time
import traceback
from typing import List, Optional

from pipelines import collector
from pipelines import quiet

# Before TensorFlow is first imported: TensorFlow's C++ start-up lines are
# noise for this tool's users (--verbose shows them). The garbage collector
# waits until the pipeline is built (pipelines/collector.py).
if __name__ == '__main__':
  collector.pause()
  quiet.start()
quiet.imported()

# pylint: disable=wrong-import-position
import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.options.pipeline_options import TestOptions

from pipelines import command_line
from pipelines import errors
from pipelines import options as options_lib
from pipelines import outcome
from pipelines import preflight
from pipelines import progress as progress_lib
from pipelines import runner_hooks
from pipelines import run_folders
from pipelines import runner_setup
from pipelines import signals
from pipelines.options import UsageError
from transforms.compat import beam as compat_beam
from transforms.output import lease as lease_lib
from transforms.output import manifest as manifest_lib
from transforms.runtime import processes
from transforms.core import skeleton
from transforms.core.errors import DataQualityError

_LOG = logging.getLogger('pipelines.preprocess')

def _dataflow_only(options: PipelineOptions, given: bool,
                   refusal: str) -> bool:
  """Whether an option that only Dataflow honours was given; `refusal`
  (a UsageError) when it was given for another runner."""
  if not given:
    return False
  runner = options.view_as(StandardOptions).runner or ''
  if runner.split('.')[-1] not in ('DataflowRunner', 'dataflow'):
    raise UsageError(refusal)
  return True


def _dry_run(options: PipelineOptions) -> bool:
  """Whether this is Beam's --dry_run of a Dataflow submission."""
  return _dataflow_only(
      options, bool(options.view_as(TestOptions).dry_run),
      '--dry_run only applies to --runner DataflowRunner (it translates the '
      'job without submitting it); other runners would run the pipeline for '
      'real.')


def _detach(options: PipelineOptions) -> bool:
  """Whether --detach was given (and may be: Dataflow only)."""
  return _dataflow_only(
      options, bool(options.view_as(options_lib.PreprocessOptions).detach),
      '--detach only applies to --runner DataflowRunner (a local job runs '
      'inside this process and cannot outlive it).')


def _stale_staging_hours(options: PipelineOptions) -> float:
  value = options.view_as(options_lib.PreprocessOptions).stale_staging_hours
  try:
    hours = float(value)
  except (TypeError, ValueError):
    hours = -1.0
  if not hours >= 0:
    raise UsageError(f'--stale_staging_hours must be a number of hours, 0 or '
                     f'more, not "{value}".')
  return hours


def run(argv: Optional[List[str]] = None,
        progress: Optional[dict] = None) -> dict:
  """Builds and runs the preprocessing pipeline, then returns the manifest.

  Args:
    argv: Command-line arguments (without the program name).
    progress: Filled as the run goes ('modality', 'output', 'run_id',
      'staging'), for the summary of a run that fails.

  Returns:
    The published manifest; for a Dataflow --dry_run, a summary of the
    translated job instead (see dataflow.describe_dry_run); for a job
    submitted with --detach (or written as a template), {'submitted': True,
    'job_id', 'staging'}.

  Raises:
    UsageError: A bad invocation.
    DataQualityError: The data failed the quality gate.
    Exception: Anything the pipeline raised.
  """
  argv = list(sys.argv[1:] if argv is None else argv)
  compat_beam.cache_dofn_introspection()
  options, cfg = _configure(argv)
  progress = progress if progress is not None else {}
  progress.update(modality=cfg.modality, output=cfg.output,
                  partition=cfg.partition,
                  runner=options.view_as(StandardOptions).runner or
                  'DirectRunner')
  dry_run = _dry_run(options)
  detach = _detach(options)
  stale_hours = _stale_staging_hours(options)
  shown = progress_lib.mode(
      options.view_as(options_lib.PreprocessOptions).progress)
  if not dry_run:
    run_folders.check_output(cfg)
  modality = cfg.plugin
  runner_setup.apply_local_defaults(options, argv,
                       modality.default_workers(os.cpu_count() or 1, cfg))
  run_id = time.strftime('%Y%m%dT%H%M%S', time.gmtime()) + '-' + (
      secrets.token_hex(3))
  run_info = {'run_id': run_id, 'started': time.time()}
  # Check the input before creating anything in the output.
  plan = modality.check_input(cfg)
  if dry_run:
    progress.update(run_id=run_id)
    return _translate_only(options, cfg, run_info, plan)
  progress.update(run_id=run_id)
  lease = _take_output(options, cfg, run_id)
  run_info['lease'] = lease
  _start_workers_early(options, cfg, plan)
  submitted = None
  try:
    submitted = _publish_run(options, cfg, run_info, plan, stale_hours,
                             'off' if detach else shown, progress)
  finally:
    # What the head start decoded and the run did not take is not the next
    # run's (its inputs may have changed meanwhile).
    processes.stop_head()
    if submitted is None:
      lease.release()
    # A submitted job publishes by itself; its lease is not renewed from
    # here and lasts --lease_seconds (the job checks it before publishing).
  if submitted is not None:
    return submitted
  manifest = manifest_lib.read_manifest(cfg.output)
  if manifest is None or manifest.get('run_id') != run_id:
    raise RuntimeError('the pipeline finished but did not publish a manifest')
  return manifest


def _start_workers_early(options, cfg, plan) -> None:
  """Starts the local worker processes the run's DoFns will use (the
  modality's worker_modules), when the pipeline runs in this process:
  they start while this process imports TensorFlow and builds the
  pipeline on one core, not when the first DoFn is set up, and begin the
  DoFns' work there when the modality can (its head_start). main() stops
  them however the run ends."""
  if (cfg.local_processes <= 0 or not options_lib.direct_runner(options) or
      options.view_as(DirectOptions).direct_running_mode ==
      'multi_processing'):
    return
  modules = cfg.plugin.worker_modules(cfg, plan)
  if modules and processes.start_early(cfg.local_processes, modules):
    cfg.plugin.head_start(cfg, plan)


def _take_output(options, cfg, run_id: str):
  """The output's lease, taken for this run (waiting for another run up
  to --wait_for_output seconds), and renewed from now on.

  Raises:
    UsageError: Another live run holds the output (lease.OutputBusy), or
      the output got a dataset meanwhile (check_output).
  """
  seconds, wait = _lease_settings(options)
  lease = lease_lib.Lease(cfg.output, run_id, seconds)
  try:
    lease.acquire(wait=wait)
  except UsageError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise UsageError(f'cannot write to the output {cfg.output} (taking its '
                     f'lease {lease.path}: {type(e).__name__}: {e}).'
                     ) from None
  try:
    # Again, now that no other run can publish: one may have, meanwhile.
    run_folders.check_output(cfg)
  except BaseException:
    lease.release()
    raise
  lease.keep_alive()
  return lease


def _lease_settings(options):
  """(lease seconds, seconds to wait for another run) from the flags."""
  o = options.view_as(options_lib.PreprocessOptions)
  values = []
  for flag, value, low in (('lease_seconds', o.lease_seconds, 10.0),
                           ('wait_for_output', o.wait_for_output, 0.0)):
    try:
      number = float(value)
    except (TypeError, ValueError):
      number = -1.0
    if not number >= low:
      raise UsageError(f'--{flag} must be a number of seconds, {low:g} or '
                       f'more, not "{value}".')
    values.append(number)
  return tuple(values)


def _publish_run(options, cfg, run_info: dict, plan, stale_hours: float,
                 shown: str, progress: dict) -> Optional[dict]:
  """Runs the pipeline into a new run folder (see run()), showing its
  progress as `shown` says (pipelines/progress.mode; 'off' for --detach);
  returns what _run_pipeline returns."""
  detach = _detach(options)
  removed = run_folders.remove_stale_staging(cfg.output, stale_hours,
                                             time.time())
  if removed:
    _LOG.info('removed %d run folder(s) older than %g hours left by '
              'failed or killed runs: %s', len(removed), stale_hours,
              ', '.join(removed))
  staging = run_folders.make_staging(cfg, run_info['run_id'])
  run_info['tft_temp'] = manifest_lib.join(staging, manifest_lib.TFT_TEMP)
  progress.update(staging=staging)
  try:
    # Open before building: the DoFns' progress counters report to it.
    with progress_lib.report(shown, _progress_measure(cfg, plan)
                             ) as reporter:
      try:
        pipeline = _build(options, cfg, run_info, staging, plan)
      except Exception:
        run_folders.remove_tree(staging)
        raise
      _LOG.info('pipeline built %.1f s after start; running it',
                time.time() - outcome.PROCESS_START)
      return _run_pipeline(pipeline, detach, staging, progress, reporter)
  except BaseException as e:
    if signals.received() is None:
      raise
    # Beam may have re-raised the signal's Cancelled as another exception.
    _cancel(run_info['lease'], staging, progress, options)
    if progress.get('published_before_cancel'):
      return None
    raise signals.Cancelled(
        f'received {signals.name(signals.received())}') from e


def _progress_measure(cfg, plan):
  """The modality's progress measure, or None (no progress line) when it
  has none or cannot tell its total."""
  try:
    return cfg.plugin.progress(cfg, plan)
  except Exception:  # pylint: disable=broad-except
    _LOG.warning('no progress line for this run', exc_info=True)
    return None


def _cancel(lease, staging: str, progress: dict,
            options: Optional[PipelineOptions] = None) -> None:
  """Stops a run that received SIGTERM or SIGINT: no worker publishes from
  now on; the run folder is removed, unless the run had already published
  (then the publish is finished and the run counts as published)."""
  manifest_lib.stop_publishing()
  lease.cancel()
  result = progress.get('result')
  # The local runner's result has no cancel; its work stops with this
  # process. A job on a remote runner (Dataflow, a portable job service)
  # is cancelled there.
  remote = result is not None and not type(result).__module__.endswith(
      'fn_api_runner.fn_runner')
  if remote:
    try:
      result.cancel()
    except Exception as e:  # pylint: disable=broad-except
      _LOG.warning('could not cancel the job (%s: %s)', type(e).__name__, e)
    if options is not None:
      runner_hooks.cancel_on_cluster(options, result)
  if _published_before_failing(progress):
    progress['published_before_cancel'] = True
    return
  if remote:
    # A worker in the middle of a bundle when the job was cancelled may
    # still create a file in the run folder (and the folders it needs) a
    # moment after the launcher removed it.
    run_folders.remove_until_gone(staging)
  else:
    run_folders.remove_tree(staging)


def _configure(argv: List[str]):
  """(PipelineOptions, checked PreprocessConfig) from the command line.

  Beam's option values and the runner are checked first (Beam itself reads
  them lazily and answers a bad one with its whole usage); local --input
  and --output become absolute; remote ones must answer within seconds, and
  a table input must hold a data row.
  """
  if command_line.help_requested(argv):
    raise command_line.HelpRequested()
  unknown = command_line.read(command_line.preprocess_parser(), argv)
  options = options_lib.BeamOptions(argv)
  if unknown:
    raise UsageError(command_line.unknown_sentence(unknown))
  _check_runner(options)
  _absolute_paths(options)
  cfg = options_lib.resolve_config(options)
  preflight.check_tensorflow_writes(cfg.output)
  if not options.view_as(TestOptions).dry_run:
    # A Dataflow dry run reads and writes nothing remote.
    preflight.check_reachable([cfg.input, cfg.output], options)
    preflight.check_not_empty(cfg)
  tfds_skipped = options_lib.tfds_skip_reason(options, cfg)
  if tfds_skipped:
    _LOG.info('no TFDS metadata (dataset_info.json, features.json) will be '
              'written: %s.', tfds_skipped)
  return options, cfg


def _check_runner(options: PipelineOptions) -> None:
  """Refuses unknown and unverified runners; names a verified one plainly
  (DirectRunner for `direct`, ...)."""
  standard = options.view_as(StandardOptions)
  runner = runner_setup.check_runner(
      standard.runner,
      options.view_as(options_lib.PreprocessOptions).allow_unverified_runner)
  if runner is not None:
    standard.runner = runner


def _absolute_paths(options: PipelineOptions) -> None:
  """Makes local --input and --output absolute, so that workers started in
  another folder (a portable runner's SDK workers) use the same files."""
  o = options.view_as(options_lib.PreprocessOptions)
  o.input = options_lib.absolute_local_path(o.input)
  o.output = options_lib.absolute_local_path(o.output)


def _build(options, cfg, run_info: dict, staging: str, plan):
  """A pipeline holding the whole run (core/skeleton.py). The garbage
  collector, if the command line paused it, starts again here."""
  pipeline = beam.Pipeline(runner=runner_setup.local_runner(options),
                           options=options)
  _ = pipeline | 'PreprocessDataset' >> skeleton.PreprocessDataset(
      cfg, run_info, staging, plan)
  collector.resume()
  return pipeline


def _translate_only(options, cfg, run_info: dict, plan) -> dict:
  """A Dataflow --dry_run: builds and translates the job, writes nothing
  to the output; tf.Transform's temporary files (written while the graph
  is traced) stay on this machine."""
  staging = manifest_lib.join(cfg.output,
                             manifest_lib.run_folder(run_info['run_id']))
  run_info['tft_temp'] = tempfile.mkdtemp(prefix='tfrecord-dry-run-')
  try:
    pipeline = _build(options, cfg, run_info, staging, plan)
    return runner_hooks.describe_dry_run(options, pipeline.run())
  finally:
    shutil.rmtree(run_info['tft_temp'], ignore_errors=True)


def _run_pipeline(pipeline, detach: bool, staging: str,
                  progress: dict, reporter=None) -> Optional[dict]:
  """Runs the pipeline to the end; returns {'submitted': True, ...} for a
  job that was submitted and not waited for, else None. `reporter` (see
  pipelines/progress.py) is given the PipelineResult once `run()` returns:
  the local runner returns it only at the end, other runners at once.

  Raises:
    DataQualityError: The quality gate refused the data (its FAILED.json
      stays in staging, with the dead letters).
  """
  try:
    result = pipeline.run()
    progress['result'] = result
    if reporter is not None:
      reporter.attach(result)
    if detach or not getattr(result, 'has_job', True):
      # Submitted and not waited for, or (--template_location) the job was
      # written as a template instead of submitted: the job publishes
      # itself when it runs.
      return {'submitted': True, 'job_id': result.job_id() if
              result.has_job else None, 'staging': staging}
    result.wait_until_finish()
  except Exception as e:
    if signals.received() is not None:
      raise  # the run's cancellation (_publish_run) cleans up
    failure = manifest_lib.join(staging, manifest_lib.FAILURE)
    from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
    if FileSystems.exists(failure):
      failed = run_folders.read_json(failure)
      progress['failed_manifest'] = failed
      raise DataQualityError(
          f'{"; ".join(failed.get("failures", []))}; nothing was published '
          f'(dead letters and counts are in {staging}).') from e
    if _published_before_failing(progress):
      return None
    # Nothing in a crashed run's folder is worth keeping.
    run_folders.remove_tree(staging)
    raise
  return None


def _published_before_failing(progress: dict) -> bool:
  """Whether a run that failed had already published (its step failed
  after writing the manifest, while removing the previous dataset); if
  so, finishes that removal (output/manifest.py: publishing again is
  safe)."""
  try:
    manifest = manifest_lib.read_manifest(progress['output'])
  except Exception:  # pylint: disable=broad-except
    return False
  if not manifest or manifest.get('run_id') != progress.get('run_id'):
    return False
  _LOG.warning('the run failed after publishing its manifest; finishing '
               'the removal of the previous dataset')
  manifest_lib.finish_publish(progress['output'], manifest)
  return True


def _read_nothing(progress: dict) -> bool:
  """Whether a refused run had no input at all (nothing to refuse: an
  empty input is a bad invocation)."""
  failed = progress.get('failed_manifest') or {}
  return (failed.get('totals') or {}).get('inputs') == 0


def _empty_input(progress: dict) -> UsageError:
  """The bad invocation for a run that found no input record; removes the
  run folder, which holds nothing worth inspecting."""
  failed = progress.get('failed_manifest') or {}
  where = (failed.get('config') or {}).get('input')
  if progress.get('staging'):
    run_folders.remove_tree(progress['staging'])
  return UsageError(f'the input{" " + where if where else ""} holds no '
                    'records: it is empty, or has a header but no data rows.')


def main(argv: Optional[List[str]] = None) -> int:
  """Command-line entry point; returns the exit code.

  Whatever the outcome (except --help), the last line on stdout is one JSON
  object summarizing the run (see outcome.summary_json); the human-readable
  summary or error goes to stderr, a failure's as one sentence that ends
  it. A failed pipeline's traceback goes to a log file the sentence names
  (and with --verbose to stderr too).
  """
  argv = list(sys.argv[1:] if argv is None else argv)
  outcome.configure_logging()
  handlers = signals.install()
  try:
    return _main(argv)
  finally:
    # The run's local worker processes (runtime/processes.py) end with it.
    processes.stop_all()
    signals.restore(handlers)


def _main(argv: Optional[List[str]]) -> int:
  progress: dict = {}
  manifest, error = None, None
  verbose = command_line.flag_given(argv, '--verbose')
  with errors.Capture(verbose) as capture:
    try:
      manifest = run(argv, progress)
      code = outcome.EXIT_OK
    except signals.Cancelled as e:
      signum = e.signum or signals.received()
      error = (f'cancelled by {signals.name(signum)}; nothing was '
               'published and the run\'s folder was removed')
      print(f'error: {error}.', file=sys.stderr)
      code = signals.exit_code(signum)
    except command_line.HelpRequested:
      command_line.print_help()
      return outcome.EXIT_OK
    except UsageError as e:
      error = outcome.usage_sentence(e)
      code = outcome.EXIT_USAGE
    except DataQualityError as e:
      if _read_nothing(progress):
        error = outcome.usage_sentence(_empty_input(progress))
        code = outcome.EXIT_USAGE
      else:
        error = f'data quality: {e}'
        code = outcome.EXIT_DATA_QUALITY
    except Exception as e:  # pylint: disable=broad-except
      error = errors.describe(e)
      log = capture.write_log(
          errors.log_path('preprocess', progress.get('run_id')),
          'python -m pipelines.preprocess', argv, e)
      progress['log'] = log
      if verbose:
        traceback.print_exc()
      where = (f'; the traceback is in {log}' if log else
               '; pass --verbose to see the traceback')
      print(f'error: the pipeline failed: {error.rstrip(".")}{where}.',
            file=sys.stderr)
      code = outcome.EXIT_PIPELINE_FAILED
    if code in (outcome.EXIT_USAGE, outcome.EXIT_DATA_QUALITY):
      print(f'error: {error}', file=sys.stderr)
  if manifest is not None and manifest.get('submitted'):
    if manifest['job_id']:
      print(f'submitted the Dataflow job {manifest["job_id"]} without '
            f'waiting for it; it publishes {progress.get("output")} when it '
            'finishes.', file=sys.stderr)
    else:
      print('the Dataflow job was written as a template, not submitted; '
            f'when it runs, it publishes {progress.get("output")}.',
            file=sys.stderr)
    progress['submitted'] = manifest
    manifest = None
  elif manifest is not None and manifest.get('dry_run'):
    print(f'dry run: the Dataflow job {manifest["job_name"]} was built and '
          f'translated ({manifest["transforms"]} transforms; staged: '
          f'{", ".join(manifest["staged"])}); its description is in '
          f'{manifest["job_file"]}. Nothing was submitted.', file=sys.stderr)
    progress['dry_run'] = manifest
    manifest = None
  elif manifest is not None:
    print(outcome.summary_line(manifest), file=sys.stderr)
  print(outcome.summary_json(code, progress, manifest, error))
  return code


def cli() -> None:
  """Console-script entry point."""
  outcome.exit_now(main())


if __name__ == '__main__':
  cli()
