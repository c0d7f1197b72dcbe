"""Beam counters of a run: one namespace per modality, `tfrecord.<name>`.

Counters show a job's progress where runners show them (Dataflow's job
page, Flink's dashboard, `PipelineResult.metrics()`). The exact numbers the
contracts rest on are the ones the manifest keeps: a runner may count a
retried bundle twice, the manifest never does.

    skipped         listed files that are not inputs (images)
    decoded         images decoded, resized and encoded
    parsed          documents or rows read well (statistics pass)
    dead_lettered   dead letters written, every stage
    serialized      records handed to the shard writer

The progress line's counters (runtime/progress.py) are in a namespace of their
own, `tfrecord.<name>.progress`: listed, identified, processed and settled
(images); bytes_read and documents or rows (text, sensor).
"""

from apache_beam.metrics import Metrics

NAMESPACE = 'tfrecord.{}'


def counter(modality: str, name: str):
  """The counter `name` of a modality's namespace."""
  return Metrics.counter(NAMESPACE.format(modality), name)
