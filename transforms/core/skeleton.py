"""The one pipeline every modality runs through.

    ReadInputs          (modality) list, read and parse the inputs; split
                        each example by a hash of its key (or by entity or
                        time); count inputs per split
      -> WriteDeadLetters       bad inputs, with stage and reason
      -> NameLabels             sorted label names -> ids
      -> AnalyzeTrainSplit      tf.Transform full pass over the training
                                split (the modality's preprocessing_fn)
      -> WriteTransformFn       transform_fn/, transformed_metadata/
    BuildRecords        (modality) per-example work, the exported transform,
                        rebalancing (core/rebalance.Plan), the seeded
                        shuffle (core/shuffle.py) and serialization
                        (output/example_encoding.py) -> record lists per split
    WriteSplits         TFRecord files per split, shard summaries,
                        fingerprints (output/shards.py)
    FinalizeDataset     manifest, quality gate, publish, manifest last
                        (output/manifest.py)

A modality (transforms/modalities/) supplies the two composite transforms
marked above, its analysis (input schema and preprocessing_fn), its feature
spec and the names of the values its manifest section reads; everything
else is here, once.

What the modality's composites hand over (dicts of PCollections):

ReadInputs -> {'dead': dead-letter dicts,
               'inputs': (split or '', inputs),
               'labels': lists of label names,
               'analysis': the training split's tf.Transform input,
               'skipped': counts of listed files that are not inputs,
               'contents': (content-keyed modalities) the manifest's
                           contents section, one dict,
               ... anything its BuildRecords or manifest section reads}
BuildRecords(ReadInputs' dict; built with a Transform, below) ->
              {'records[<split>]': record lists, for every split,
               'before': ((split, label), examples before rebalancing),
               'after': ((split, label), records written),
               'dead': (optional) dead letters found while building,
               ... anything its manifest section reads}
"""

from typing import Any, Dict, NamedTuple

import apache_beam as beam

from transforms.core import labels as labels_lib
from transforms.core.dead_letters import DeadLetters
from transforms.output import manifest as manifest_lib
from transforms.output import shards

# The keys every ReadInputs and BuildRecords output has.
READ_KEYS = ('dead', 'inputs', 'labels', 'analysis', 'skipped')
# ReadInputs' output of a content-keyed modality: the manifest's `contents`
# section (one dict, see core/contents.py).
CONTENTS = 'contents'
RECORD_KEYS = ('before', 'after')


class Transform(NamedTuple):
  """What BuildRecords gets besides ReadInputs' outputs."""
  # tf.Transform's (transform_fn, metadata), for TransformDataset.
  fn: Any
  # One element once transform_fn/ is written in staging: a side input
  # that orders a step after it (the exported graph is read from there).
  done: Any
  # {label name: id}, one element (a singleton side input).
  label_ids: Any


class ReadInputs(beam.PTransform):
  """Base of a modality's ReadInputs stage (see the module docstring).
  `staging` is the run folder (set by the skeleton before expansion)."""

  def __init__(self, cfg, plan):
    super().__init__()
    self._cfg, self._plan = cfg, plan
    self.staging = None

  def hold_folder(self) -> str:
    """Where examples wait on disk for a decision about all of them
    (runtime/hold.py); removed when the shards are written."""
    if self.staging is None:
      raise ValueError('the run folder of ReadInputs is not set')
    return manifest_lib.join(self.staging, manifest_lib.HOLD_TEMP)


class BuildRecords(beam.PTransform):
  """Base of a modality's BuildRecords stage (see the module docstring):
  built with the run's config, the input plan, the run folder (where
  the exported transform is) and the Transform."""

  def __init__(self, cfg, plan, staging: str, transform: Transform):
    super().__init__()
    self._cfg, self._plan = cfg, plan
    self._staging, self._transform = staging, transform

  def spill_folder(self):
    """Where the shuffle keeps its records while they are grouped
    (core/shuffle.py), on runs with --local_shuffle disk; else None."""
    if not getattr(self._cfg, 'local_shuffle', False):
      return None
    return manifest_lib.join(self._staging, manifest_lib.SHUFFLE_TEMP)


def records_key(split: str) -> str:
  """BuildRecords' output key of a split's record lists."""
  return f'records[{split}]'


class PreprocessDataset(beam.PTransform):
  """Raw inputs of one modality -> a published dataset (see above).

  Args:
    cfg: The checked PreprocessConfig (cfg.plugin is the modality).
    run: {'run_id', 'started', 'tft_temp'} (tf.Transform's temporary
      folder).
    staging: The run's folder inside the output (run-<run id>), where
      everything is written.
    plan: What the modality's input check found.
  """

  def __init__(self, cfg, run: dict, staging: str, plan):
    super().__init__()
    self._cfg, self._run, self._staging, self._plan = cfg, run, staging, plan

  def expand(self, pbegin):
    import tensorflow_transform.beam as tft_beam  # pylint: disable=import-outside-toplevel
    cfg, staging, plan = self._cfg, self._staging, self._plan
    modality = cfg.plugin
    with tft_beam.Context(temp_dir=self._run['tft_temp'],
                          force_tf_compat_v1=False):
      reader = modality.read_inputs(cfg, plan)
      reader.staging = staging
      read = pbegin | 'ReadInputs' >> reader
      _require(read, READ_KEYS, modality.name, 'ReadInputs')
      labels, label_ids = read['labels'] | 'NameLabels' >> (
          labels_lib.LabelNames())
      metadata, preprocessing_fn = modality.analysis(cfg, plan)
      from transforms.core import analysis  # pylint: disable=import-outside-toplevel
      with analysis.graph_ahead(modality.analysis_threads):
        transform_fn = ((read['analysis'], metadata)
                        | 'AnalyzeTrainSplit' >> tft_beam.AnalyzeDataset(
                            preprocessing_fn))
      transform_done = transform_fn | 'WriteTransformFn' >> (
          tft_beam.WriteTransformFn(staging))
      transform = Transform(transform_fn, transform_done, label_ids)
      with analysis.tagged_graphs():
        built = read | 'BuildRecords' >> modality.build_records(
            cfg, plan, staging, transform)
      _require(built, RECORD_KEYS + tuple(map(records_key, cfg.split_names)),
               modality.name, 'BuildRecords')
    dead = read['dead']
    if 'dead' in built:  # inputs found bad only while the examples are built
      dead = (dead, built['dead']) | 'AllDeadLetters' >> beam.Flatten()
    dead_per_split, dead_files = dead | 'WriteDeadLetters' >> (
        DeadLetters(staging, modality.name))
    shard_list, fingerprints = (
        tuple(built[records_key(s)] for s in cfg.split_names)
        | 'WriteSplits' >> shards.WriteSplits(cfg, staging))
    extra = _manifest_values(modality, read, built)
    if CONTENTS in read:
      extra[CONTENTS] = read[CONTENTS]
    return pbegin | 'FinalizeDataset' >> manifest_lib.FinalizeDataset(
        cfg, self._run, staging, modality.feature_spec(cfg, plan),
        singletons=('labels', CONTENTS) + tuple(
            k for k, single in modality.manifest_values.items() if single),
        labels=labels, inputs=read['inputs'], dead=dead_per_split,
        before=built['before'], after=built['after'], shards=shard_list,
        fingerprints=fingerprints, skipped=read['skipped'],
        dead_files=dead_files, transform_done=transform_done, **extra)


def _require(outputs: dict, keys, modality: str, stage: str) -> None:
  """A plug-in's stage must hand over every key the skeleton reads."""
  missing = [k for k in keys if k not in outputs]
  if missing:
    raise TypeError(f'the {modality} modality\'s {stage} stage has no '
                    f'{", ".join(missing)} output')


def _manifest_values(modality, read: dict, built: dict) -> Dict:
  """The modality's manifest values, from either composite's outputs."""
  out = {}
  for name in modality.manifest_values:
    out[name] = built[name] if name in built else read[name]
  return out
