"""What a runner's launcher adds to a run, found by the runner's name.

    from pipelines import runner_hooks
    runner_hooks.cancel_on_cluster(options, result)   # after result.cancel()
    runner_hooks.describe_dry_run(options, result)    # a --dry_run's summary

The generic entry point (pipelines/preprocess.py) runs on any runner; a
runner whose cancellation or dry run needs more than Beam does has a
launcher module (pipelines/flink.py, pipelines/dataflow.py) that defines
the hook, and one line here. Launchers are imported on first use, so the
entry point does not import them (they import it).
"""

import importlib
from typing import Optional

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions

# --runner (lower case, without a dotted path) -> its launcher module.
_REGISTRY = {
    'flinkrunner': 'pipelines.flink',
    'flink': 'pipelines.flink',
    'dataflowrunner': 'pipelines.dataflow',
    'dataflow': 'pipelines.dataflow',
}


def runner_name(options: PipelineOptions) -> str:
  """The runner's name as given, without a dotted path (FlinkRunner for
  `FlinkRunner` or `apache_beam...FlinkRunner`; `flink` as given)."""
  runner = options.view_as(StandardOptions).runner or ''
  return runner.split('.')[-1] if isinstance(runner, str) else type(
      runner).__name__


def _hook(options: PipelineOptions, name: str) -> Optional[object]:
  module = _REGISTRY.get(runner_name(options).lower())
  if module is None:
    return None
  return getattr(importlib.import_module(module), name, None)


def cancel_on_cluster(options: PipelineOptions, result) -> None:
  """After Beam's result.cancel(): what the runner's launcher does to end
  the job for good (Flink: Beam's job server leaves a batch job running;
  see pipelines/flink.py), if anything."""
  hook = _hook(options, 'cancel_on_cluster')
  if hook is not None:
    hook(result, options)


def describe_dry_run(options: PipelineOptions, result) -> dict:
  """The summary of a --dry_run (the translated job, written where the
  launcher says; Dataflow only).

  Raises:
    ValueError: The runner has no dry run.
  """
  hook = _hook(options, 'describe_dry_run')
  if hook is None:
    raise ValueError(f'--dry_run does not apply to {runner_name(options)}')
  return hook(result, options)
