"""The validation pipeline: a published dataset read back and checked.

    report = p | ValidateDataset(output, manifest, shards, ...)

Every shard is read in parallel (CheckShard: each record parsed against
the feature spec and checked by the modality that wrote it,
validation/shard_checks.py); what must be compared across shards is
gathered by key: equal contents (leakage, duplicates, label conflicts),
recordings in several splits, near-duplicates found again from the stored
records (when the modality compares them), and each recording's records in
order (when it gathers series). The report (validation/report.py) is
written as JSON and as a page beside it. pipelines/validate.py is the
command around it.
"""

import json

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms import modalities
from transforms.core import near_duplicate_pipeline
from transforms.validation import dataset_checks
from transforms.validation import html_report
from transforms.validation import report as report_lib
from transforms.validation import shard_checks


class ValidateDataset(beam.PTransform):
  """The validation pipeline, from the pipeline's root to the written
  report.

  Args:
    output: The dataset folder.
    manifest: Its manifest.
    shards: The manifest's shard entries, each with its 'split'.
    extra: Shard-like files in the folder that the manifest does not name.
    report_path: Where the JSON report goes (the page beside it:
      html_path).
    thresholds: dataset_checks.Thresholds.
    scratch: A folder this run may write to, for what the near-duplicate
      check gathers (removed by the caller).
  """

  def __init__(self, output, manifest, shards, extra, report_path,
               thresholds, scratch):
    super().__init__()
    self._output, self._manifest, self._shards = output, manifest, shards
    self._extra, self._report_path = extra, report_path
    self._thresholds, self._scratch = thresholds, scratch

  def expand(self, root):
    checked = (root
               | 'ListShards' >> beam.Create(self._shards)
               | 'SpreadShards' >> beam.Reshuffle()
               | 'CheckShard' >> beam.ParDo(
                   _CheckShardFn(self._output, self._manifest)).with_outputs(
                       _CheckShardFn.CONTENT, _CheckShardFn.RECORDING,
                       _CheckShardFn.NEAR, _CheckShardFn.SERIES,
                       main='results'))
    # Records of equal content meet in one group, wherever they are.
    content = (checked[_CheckShardFn.CONTENT]
               | 'GroupByContent' >> beam.GroupByKey()
               | 'RepeatedContent' >> beam.FlatMap(_repeated)
               | 'AllRepeated' >> beam.combiners.ToList()
               | 'Findings' >> beam.Map(dataset_checks.content_findings))
    manifest = self._manifest
    plugin = modalities.of_manifest(manifest)
    if plugin.compares_near_duplicates(manifest):
      # Near-duplicate pictures or documents, found as the pipeline finds
      # them, from the stored pictures or texts (core/near_duplicates.py).
      rules = dataset_checks.near_duplicate_rules(manifest)
      gather = near_duplicate_pipeline.GatherNearDuplicates(rules,
                                                            self._scratch)
      near = (checked[_CheckShardFn.NEAR]
              | 'NearDuplicates' >> gather
              | 'NearFindings' >> beam.Map(
                  dataset_checks.near_duplicate_findings, rules)
              | 'NearReport' >> beam.Map(plugin.near_duplicate_report,
                                         self._output, self._manifest))
      content = content | 'WithNearDuplicates' >> beam.Map(
          lambda c, n: {**c, 'near_duplicates': n},
          beam.pvalue.AsSingleton(near))
    # The splits of each recording (a sensor entity), from every shard.
    recordings = (checked[_CheckShardFn.RECORDING]
                  | 'GroupByRecording' >> beam.GroupByKey()
                  # -> (recording, {split: records}) in several splits
                  | 'InSeveralSplits' >> beam.FlatMap(_in_several_splits)
                  | 'AllInSeveralSplits' >> beam.combiners.ToList()
                  | 'RecordingFindings' >> beam.Map(
                      dataset_checks.recording_findings))
    series = None
    if plugin.gathers_series(manifest):
      # Each recording's records (a sensor entity's), from every shard and
      # split, as small tuples (no values), checked in order; the findings
      # of all recordings merged into counts and a few examples.
      series = beam.pvalue.AsSingleton(
          checked[_CheckShardFn.SERIES]
          | 'GroupByRecordingInOrder' >> beam.GroupByKey()
          # -> one recording's findings
          | 'RecordingSeries' >> beam.Map(
              lambda kv, m: plugin.series_findings(*kv, m), manifest)
          | 'SeriesFindings' >> beam.CombineGlobally(
              plugin.merge_series_findings))
    _ = (checked.results
         # -> one result per shard
         | 'AllShards' >> beam.combiners.ToList()
         | 'WriteReport' >> beam.Map(_write_report, self._output, manifest,
                                     self._extra, self._report_path,
                                     beam.pvalue.AsSingleton(content),
                                     beam.pvalue.AsSingleton(recordings),
                                     series, self._thresholds))


class _CheckShardFn(beam.DoFn):
  """check_shard, with more outputs for the checks of the whole dataset:
  each record's (content hash, (split, id, exact, label, observation)) for
  the leakage, duplicate and label-conflict checks, each recording's
  (recording, (split, its records in the shard)), the near-duplicate
  entries, and each record's (recording, (split, place, start, end)) in a
  time series (sensor: (entity, (split, the window's global start or None
  for a row, start time, end time)))."""

  CONTENT = 'content'
  RECORDING = 'recording'
  NEAR = 'near'
  SERIES = 'series'

  def __init__(self, output: str, manifest: dict):
    super().__init__()
    self._output, self._manifest = output, manifest

  def process(self, shard):
    result = shard_checks.check_shard(shard, self._output, self._manifest)
    for content, member in result.pop('content'):
      yield beam.pvalue.TaggedOutput(self.CONTENT, (content, member))
    near = result.pop('near')
    if near:
      yield beam.pvalue.TaggedOutput(self.NEAR, near)
    for recording, records in sorted(result.pop('recordings').items()):
      yield beam.pvalue.TaggedOutput(
          self.RECORDING, (recording, (result['split'], records)))
    for recording, point in result.pop('series'):
      yield beam.pvalue.TaggedOutput(self.SERIES, (recording, point))
    yield result


def _repeated(kv):
  """(content, members) when the content occurs more than once."""
  content, members = kv
  members = list(members)
  if len(members) > 1:
    yield content, members


def _in_several_splits(kv):
  """(recording, {split: records}) when its records are in several
  splits."""
  recording, parts = kv
  splits = {}
  for split, records in parts:
    splits[split] = splits.get(split, 0) + records
  if len(splits) > 1:
    yield recording, splits


def _write_report(results, output, manifest, extra, report_path, content,
                  recordings, series, thresholds):
  """Builds the report from everything gathered and writes it (JSON, and
  the page beside it); its verdict."""
  report = report_lib.build_report(
      manifest, results, extra_files=extra,
      transform_check=modalities.of_manifest(manifest).check_transform(
          output, manifest),
      content=content, recordings=recordings, thresholds=thresholds,
      dead_letters=report_lib.dead_letter_findings(output, manifest),
      series=series)
  with FileSystems.create(report_path,
                          compression_type='uncompressed') as f:
    f.write(json.dumps(report, indent=2, ensure_ascii=False).encode('utf-8'))
  with FileSystems.create(html_path(report_path),
                          compression_type='uncompressed') as f:
    f.write(html_report.render(report, manifest).encode('utf-8'))
  return report['verdict']


def html_path(report_path: str) -> str:
  """The HTML report beside the JSON one: x.json -> x.html."""
  stem = report_path[:-len('.json')] if report_path.endswith('.json') else (
      report_path)
  return stem + '.html'


