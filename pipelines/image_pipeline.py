"""Assembles the image preprocessing pipeline from the transforms.

    ListImageInputs -> DecodeImages --(bad)--> dead letter
      -> Partition by split
      -> per split: count classes -> [float32: TransformDataset]
                    -> Rebalance -> Serialize -> Shuffle -> WriteSplit
      train split: tf.Transform AnalyzeDataset -> WriteTransformFn
      -> FinalizeDataset (quality gate, publish, manifest last)
"""

import json

import apache_beam as beam
import numpy as np

from transforms import manifest as manifest_lib
from transforms import normalize
from transforms import rebalance as rebalance_lib
from transforms import schema
from transforms import sinks
from transforms import sources
from transforms.decode import DecodeImages


class _SortedLabels(beam.CombineFn):
  """Distinct label names, sorted (a label's id is its index)."""

  def create_accumulator(self):
    return set()

  def add_input(self, acc, label):
    acc.add(label)
    return acc

  def merge_accumulators(self, accs):
    return set().union(*accs)

  def extract_output(self, acc):
    return sorted(acc)


class Rebalance(beam.PTransform):
  """Resamples (or weights) one split's examples by class.

  Output: (shuffle key, example) with the key unique per written copy.
  """

  def __init__(self, mode: str, seed: int, with_weight_feature: bool):
    super().__init__()
    self._mode, self._seed = mode, seed
    self._with_weight = with_weight_feature

  def expand(self, examples_and_counts):
    examples, counts = examples_and_counts
    mode, seed, with_weight = self._mode, self._seed, self._with_weight

    def resample(example, counts):
      counts = dict(counts)
      n = rebalance_lib.copies(mode, example[schema.ID],
                               example[schema.LABEL_TEXT], counts, seed)
      if with_weight:
        weight = (rebalance_lib.class_weight(example[schema.LABEL_TEXT], counts)
                  if mode == 'weight' else 1.0)
        example = dict(example, **{schema.WEIGHT: weight})
      for k in range(n):
        yield f'{example[schema.ID]}#{k}', example

    return examples | 'Resample' >> beam.FlatMap(
        resample, counts=beam.pvalue.AsList(counts))


def _from_transformed(row, split):
  """A tf.Transform output row back into the pipeline's example dict."""
  return {
      schema.ID: row[schema.ID].decode('utf-8'),
      schema.LABEL_TEXT: row[schema.LABEL_TEXT].decode('utf-8'),
      'split': split,
      schema.IMAGE: np.asarray(row[schema.IMAGE], np.float32),
      schema.ORIGINAL_HEIGHT: int(row[schema.ORIGINAL_HEIGHT]),
      schema.ORIGINAL_WIDTH: int(row[schema.ORIGINAL_WIDTH]),
  }


def build(pipeline, cfg, run: dict, staging: str) -> None:
  """Adds the whole image job to `pipeline`.

  Args:
    pipeline: A beam.Pipeline.
    cfg: The checked PreprocessConfig.
    run: {'run_id', 'started'}.
    staging: The run's staging folder (inside cfg.output).
  """
  import tensorflow_transform.beam as tft_beam  # pylint: disable=import-outside-toplevel
  from tensorflow_transform.tf_metadata import dataset_metadata  # pylint: disable=import-outside-toplevel

  image = cfg.image
  manifest_format = sources.check_input(cfg.input, cfg.splits_from_input)
  split_names = cfg.split_names
  with_weight = cfg.rebalance == 'weight'
  spec = schema.feature_spec(image.storage, image.height, image.width,
                             image.channels, with_weight)

  listed = pipeline | 'ListInputs' >> sources.ListImageInputs(
      cfg.input, cfg.splits_from_input, cfg.split_ratios, manifest_format)
  refs = listed.refs
  # -> InputRef per image
  labels = (refs
            | 'LabelOf' >> beam.Map(lambda r: r.label)
            | 'SortedLabels' >> beam.CombineGlobally(_SortedLabels()))
  inputs_per_split = (refs
                      | 'SplitOfInput' >> beam.Map(lambda r: (r.split, 1))
                      | 'CountInputsPerSplit' >> beam.CombinePerKey(sum))
  decoded = refs | 'DecodeImages' >> DecodeImages(image)
  # -> decoded.examples: example dicts; decoded.dead: dead letters

  dead = ((listed[sources.DEAD], decoded[sources.DEAD])
          | 'AllDeadLetters' >> beam.Flatten())
  dead_per_split = (dead
                    | 'SplitOfDead' >> beam.Map(lambda d: (d['split'] or '', 1))
                    | 'CountDeadPerSplit' >> beam.CombinePerKey(sum))
  # Listing dead letters without a split count as inputs too.
  unassigned_inputs = (dead_per_split
                       | 'UnassignedOnly' >> beam.Filter(lambda kv: kv[0] == ''))
  inputs_all = ((inputs_per_split, unassigned_inputs)
                | 'InputsWithUnassigned' >> beam.Flatten())
  dead_files = (dead
                | 'DeadLetterToJson' >> beam.Map(
                    lambda d: json.dumps(d, ensure_ascii=False))
                | 'WriteDeadLetters' >> beam.io.WriteToText(
                    manifest_lib.join(staging, manifest_lib.DEAD_LETTER_PREFIX),
                    file_name_suffix='.jsonl', num_shards=1))
  skipped = (listed[sources.SKIPPED]
             | 'CountSkipped' >> beam.combiners.Count.Globally())

  examples = decoded.examples
  by_split = examples | 'PartitionBySplit' >> beam.Partition(
      lambda ex, n: split_names.index(ex['split']), len(split_names))

  # tf.Transform: analyze the training split only.
  train_examples = by_split[split_names.index('train')] if (
      'train' in split_names) else None
  stored_format = 'uint8' if image.storage == 'float32' else image.storage
  preprocessing_fn = normalize.make_preprocessing_fn(
      stored_format, image.height, image.width, image.channels,
      cfg.normalization)
  raw_metadata = dataset_metadata.DatasetMetadata.from_feature_spec(
      normalize.raw_feature_spec(image.channels))
  with tft_beam.Context(temp_dir=manifest_lib.join(staging, 'tft_tmp'),
                        force_tf_compat_v1=False):
    analysis_input = (train_examples if train_examples is not None else
                      pipeline | 'NoTrainSplit' >> beam.Create([]))
    tft_rows = analysis_input | 'ToTransformInput' >> beam.Map(
        normalize.tft_input)
    transform_fn = ((tft_rows, raw_metadata)
                    | 'AnalyzeTrainSplit' >> tft_beam.AnalyzeDataset(
                        preprocessing_fn))
    transform_done = transform_fn | 'WriteTransformFn' >> (
        tft_beam.WriteTransformFn(staging))
    channel_stats = analysis_input | 'ChannelStats' >> beam.CombineGlobally(
        normalize.ChannelStatsFn())

    label_ids = labels | 'LabelIds' >> beam.Map(
        lambda names: {n: i for i, n in enumerate(names)})
    before_all, after_all, shards_all, fps_all = [], [], [], []
    for index, split in enumerate(split_names):
      part = by_split[index]
      counts = (part
                | f'LabelOf[{split}]' >> beam.Map(
                    lambda ex: ex[schema.LABEL_TEXT])
                | f'CountClasses[{split}]' >> beam.combiners.Count.PerElement())
      # -> (label, count)
      before_all.append(counts | f'TagBefore[{split}]' >> beam.Map(
          lambda kv, s=split: ((s, kv[0]), kv[1])))
      if image.storage == 'float32':
        rows = part | f'ToTransformInput[{split}]' >> beam.Map(
            normalize.tft_input)
        transformed = ((rows, raw_metadata), transform_fn) | (
            f'TransformDataset[{split}]' >> tft_beam.TransformDataset())
        part = transformed[0] | f'FromTransformOutput[{split}]' >> beam.Map(
            _from_transformed, split=split)
      mode = cfg.rebalance if split in cfg.rebalance_splits else 'none'
      keyed = (part, counts) | f'Rebalance[{split}]' >> Rebalance(
          mode, cfg.seed, with_weight)
      # -> (shuffle key, example)
      after_all.append(
          keyed
          | f'LabelAfter[{split}]' >> beam.Map(
              lambda kv, s=split: (s, kv[1][schema.LABEL_TEXT]))
          | f'CountAfter[{split}]' >> beam.combiners.Count.PerElement())
      records = keyed | f'Serialize[{split}]' >> beam.Map(
          lambda kv, ids: (kv[0], sinks.to_example_bytes(kv[1], ids)),
          ids=beam.pvalue.AsSingleton(label_ids))
      # -> (shuffle key, tf.train.Example bytes)
      fps_all.append(
          records
          | f'RecordsOnly[{split}]' >> beam.Values()
          | f'Fingerprint[{split}]' >> beam.CombineGlobally(
              sinks.FingerprintFn())
          | f'TagFingerprint[{split}]' >> beam.Map(lambda fp, s=split: (s, fp)))
      shards = (records
                | f'Shuffle[{split}]' >> sinks.ShuffleExamples(cfg.seed)
                | f'WriteSplit[{split}]' >> sinks.WriteSplit(
                    staging, cfg.name, split, cfg.num_shards,
                    cfg.compression == 'gzip'))
      shards_all.append(shards | f'TagShards[{split}]' >> beam.Map(
          lambda s, sp=split: (sp, s)))

    def flat(pcolls, label):
      return tuple(pcolls) | label >> beam.Flatten()

    _ = pipeline | 'FinalizeDataset' >> manifest_lib.FinalizeDataset(
        cfg, run, staging, spec,
        labels=labels, inputs=inputs_all, dead=dead_per_split,
        before=flat(before_all, 'AllCountsBefore'),
        after=flat(after_all, 'AllCountsAfter'),
        shards=flat(shards_all, 'AllShards'),
        fingerprints=flat(fps_all, 'AllFingerprints'),
        channel_stats=channel_stats, skipped=skipped, dead_files=dead_files,
        transform_done=transform_done)
