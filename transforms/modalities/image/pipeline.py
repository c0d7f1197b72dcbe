"""Assembles the image preprocessing pipeline from the transforms.

    ListImageInputs --(bad lines)--> dead letter
      -> PlanCopies (rebalancing decided per input, from listed class counts)
      -> SeededShuffle of the input references (small elements only)
      -> DecodeImages --(bad)--> dead letter
      -> Partition by split
      -> per split: [float32: TransformDataset] -> Serialize -> WriteSplit
      train split: tf.Transform AnalyzeDataset -> WriteTransformFn
      -> FinalizeDataset (quality gate, publish, manifest last)

Only input references are ever grouped (to shuffle them); decoded images
flow from the decoder to the shard writer without being collected anywhere,
so memory does not grow with the dataset. Two options trade that away:
float32 storage (TransformDataset waits for the analysis, so the runner
keeps the examples until then) and a fixed --num_shards (Beam's writer
groups the records by shard). Because the references are
shuffled before decoding, every shard receives examples in a seeded random
order, whatever the runner does with bundles.
"""

from typing import Optional

import apache_beam as beam
import numpy as np

from transforms.output import manifest as manifest_lib
from transforms.modalities.image import preprocessing as normalize
from transforms.core import rebalance as rebalance_lib
from transforms.core import features as schema
from transforms.output import shards as sinks
from transforms.modalities.image import inputs as sources
from transforms.modalities.image.decode import DecodeImages


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


class PlanCopies(beam.PTransform):
  """Decides, per input, how many copies rebalancing writes.

  Input: InputRef. Output: (shuffle key, (InputRef, copy index, write,
  weight)). Every input is decoded at least once (copy 0), so bad inputs are
  dead-lettered and counted even when undersampling drops them; copy 0 of a
  dropped input has write=False. Class counts are those of the listed
  inputs of each split.
  """

  def __init__(self, cfg, with_weight_feature: bool):
    super().__init__()
    self._mode, self._seed = cfg.rebalance, cfg.seed
    self._splits = set(cfg.rebalance_splits)
    self._with_weight = with_weight_feature

  def expand(self, refs_and_counts):
    refs, counts = refs_and_counts
    mode, seed, splits = self._mode, self._seed, self._splits
    with_weight = self._with_weight
    if mode == 'none':
      # Nothing to decide: skip the wait for the class counts.
      return refs | 'OneCopyEach' >> beam.Map(
          lambda ref: (f'{ref.example_id}#0', (ref, 0, True, None)))

    def plan(ref, counts):
      split_mode = mode if ref.split in splits else 'none'
      per_class = {label: n for (split, label), n in counts
                   if split == ref.split}
      n = rebalance_lib.copies(split_mode, ref.example_id, ref.label,
                               per_class, seed)
      weight = None
      if with_weight:
        weight = (rebalance_lib.class_weight(ref.label, per_class)
                  if split_mode == 'weight' else 1.0)
      for k in range(max(n, 1)):
        yield f'{ref.example_id}#{k}', (ref, k, k < n, weight)

    return refs | 'PlanCopy' >> beam.FlatMap(
        plan, counts=beam.pvalue.AsList(counts))


def _from_transformed(row, split):
  """A tf.Transform output row back into the pipeline's example dict."""
  return {
      schema.ID: row[schema.ID].decode('utf-8'),
      schema.LABEL_TEXT: row[schema.LABEL_TEXT].decode('utf-8'),
      'split': split,
      schema.IMAGE: np.asarray(row[schema.IMAGE], np.float32),
      schema.ORIGINAL_HEIGHT: int(row[schema.ORIGINAL_HEIGHT]),
      schema.ORIGINAL_WIDTH: int(row[schema.ORIGINAL_WIDTH]),
      **({schema.WEIGHT: float(row[schema.WEIGHT])}
         if schema.WEIGHT in row else {}),
  }


def manifest_section(cfg, values: dict, splits: dict):
  """The image section and normalization of the manifest."""
  del splits  # nothing per split
  image = cfg.settings
  channel_stats = values['channel_stats']
  return {
      'height': image.height, 'width': image.width,
      'channels': image.channels, 'storage': image.storage,
      'resize_mode': image.resize_mode, 'color': image.color,
  }, {
      'method': cfg.normalization,
      # Where the exported transform is applied: by the reader at
      # training time, or already in the stored records.
      'applied': 'stored' if image.storage == 'float32' else 'at_read',
      'statistics_split': 'train',
      'mean': channel_stats.get('mean'),
      'std': channel_stats.get('std'),
      'images_analyzed': channel_stats.get('count', 0),
  }


def build(pipeline, cfg, run: dict, staging: str,
          manifest_format: Optional[sources.ManifestFormat]) -> None:
  """Adds the whole image job to `pipeline`.

  Args:
    pipeline: A beam.Pipeline.
    cfg: The checked PreprocessConfig.
    run: {'run_id', 'started', 'tft_temp'} (tf.Transform's temporary folder).
    staging: The run's staging folder (inside cfg.output).
    manifest_format: What sources.check_input found for a manifest-file
      input; None for folders.
  """
  import tensorflow_transform.beam as tft_beam  # pylint: disable=import-outside-toplevel
  from tensorflow_transform.tf_metadata import dataset_metadata  # pylint: disable=import-outside-toplevel

  image = cfg.settings
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
  label_ids = labels | 'LabelIds' >> beam.Map(
      lambda names: {n: i for i, n in enumerate(names)})
  inputs_per_split = (refs
                      | 'SplitOfInput' >> beam.Map(lambda r: (r.split, 1))
                      | 'CountInputsPerSplit' >> beam.CombinePerKey(sum))
  listed_classes = (refs
                    | 'SplitAndLabel' >> beam.Map(
                        lambda r: ((r.split, r.label), 1))
                    | 'CountListedClasses' >> beam.CombinePerKey(sum))
  # -> ((split, label), listed inputs)
  tasks = ((refs, listed_classes)
           | 'PlanCopies' >> PlanCopies(cfg, with_weight)
           | 'ShuffleInputs' >> sinks.SeededShuffle(cfg.seed))
  # -> (InputRef, copy index, write, weight), in seeded random order
  decoded = tasks | 'DecodeImages' >> DecodeImages(image)
  # -> decoded.examples: example dicts; decoded.dead: dead letters

  dead = ((listed[sources.DEAD], decoded[sources.DEAD])
          | 'AllDeadLetters' >> beam.Flatten())
  dead_per_split, dead_files = dead | 'DeadLetters' >> (
      manifest_lib.DeadLetters(staging))
  # Listing dead letters without a split count as inputs too.
  unassigned_inputs = (dead_per_split
                       | 'UnassignedOnly' >> beam.Filter(lambda kv: kv[0] == ''))
  inputs_all = ((inputs_per_split, unassigned_inputs)
                | 'InputsWithUnassigned' >> beam.Flatten())
  skipped = (listed[sources.SKIPPED]
             | 'CountSkipped' >> beam.combiners.Count.Globally())

  by_split = decoded.examples | 'PartitionBySplit' >> beam.Partition(
      lambda ex, n: split_names.index(ex['split']), len(split_names))

  # The tf.Transform graph and its input schema.
  stored_format = 'uint8' if image.storage == 'float32' else image.storage
  preprocessing_fn = normalize.make_preprocessing_fn(
      stored_format, image.height, image.width, image.channels,
      cfg.normalization)
  raw_metadata = dataset_metadata.DatasetMetadata.from_feature_spec(
      normalize.raw_feature_spec(image.channels, with_weight))
  # Each input's first copy: the examples before rebalancing.
  firsts = [by_split[i] | f'FirstCopies[{split}]' >> beam.Filter(
      lambda ex: ex['copy'] == 0) for i, split in enumerate(split_names)]
  with tft_beam.Context(temp_dir=run['tft_temp'],
                        force_tf_compat_v1=False):
    # tf.Transform analyzes the training split only, each input once.
    if 'train' in split_names:
      train_examples = firsts[split_names.index('train')]
    else:
      train_examples = pipeline | 'NoTrainSplit' >> beam.Create([])
    # The analyzers read only the per-image statistics, so the image bytes
    # are left out of the analysis input.
    tft_rows = train_examples | 'ToAnalysisInput' >> beam.Map(
        normalize.tft_input, with_image=False)
    transform_fn = ((tft_rows, raw_metadata)
                    | 'AnalyzeTrainSplit' >> tft_beam.AnalyzeDataset(
                        preprocessing_fn))
    transform_done = transform_fn | 'WriteTransformFn' >> (
        tft_beam.WriteTransformFn(staging))
    channel_stats = train_examples | 'ChannelStats' >> beam.CombineGlobally(
        normalize.ChannelStatsFn())

    before_all, after_all, shards_all, fps_all = [], [], [], []
    for index, split in enumerate(split_names):
      part = by_split[index]
      before_all.append(
          firsts[index]
          | f'LabelBefore[{split}]' >> beam.Map(
              lambda ex, s=split: (s, ex[schema.LABEL_TEXT]))
          | f'CountBefore[{split}]' >> beam.combiners.Count.PerElement())
      # -> ((split, label), examples)
      written = part | f'Written[{split}]' >> beam.Filter(lambda ex: ex['write'])
      if image.storage == 'float32':
        rows = written | f'ToTransformInput[{split}]' >> beam.Map(
            normalize.tft_input)
        transformed = ((rows, raw_metadata), transform_fn) | (
            f'TransformDataset[{split}]' >> tft_beam.TransformDataset())
        written = transformed[0] | f'FromTransformOutput[{split}]' >> (
            beam.Map(_from_transformed, split=split))
      after_all.append(
          written
          | f'LabelAfter[{split}]' >> beam.Map(
              lambda ex, s=split: (s, ex[schema.LABEL_TEXT]))
          | f'CountAfter[{split}]' >> beam.combiners.Count.PerElement())
      records = written | f'Serialize[{split}]' >> beam.Map(
          sinks.to_example_bytes, beam.pvalue.AsSingleton(label_ids))
      # -> tf.train.Example bytes
      fps_all.append(
          records
          | f'Fingerprint[{split}]' >> beam.CombineGlobally(
              sinks.FingerprintFn())
          | f'TagFingerprint[{split}]' >> beam.Map(lambda fp, s=split: (s, fp)))
      shards = records | f'WriteSplit[{split}]' >> sinks.WriteSplit(
          staging, cfg.name, split, cfg.num_shards, cfg.compression == 'gzip',
          cfg.index_files)
      shards_all.append(shards | f'TagShards[{split}]' >> beam.Map(
          lambda s, sp=split: (sp, s)))

    def flat(pcolls, label):
      return tuple(pcolls) | label >> beam.Flatten()

    _ = pipeline | 'FinalizeDataset' >> manifest_lib.FinalizeDataset(
        cfg, run, staging, spec, singletons=('labels', 'channel_stats'),
        labels=labels, inputs=inputs_all, dead=dead_per_split,
        before=flat(before_all, 'AllCountsBefore'),
        after=flat(after_all, 'AllCountsAfter'),
        shards=flat(shards_all, 'AllShards'),
        fingerprints=flat(fps_all, 'AllFingerprints'),
        channel_stats=channel_stats, skipped=skipped, dead_files=dead_files,
        transform_done=transform_done)
