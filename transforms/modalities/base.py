"""The modality plug-in: only what truly differs between kinds of data.

Every modality runs through the same skeleton (input check, read and parse
with dead letters, split, per-example work, tf.Transform, rebalance,
shuffle, serialize, write per split, manifest, quality gate, publish) and is
read back by the same validation pipeline and reader. A modality is one
object, found by name in the registry (transforms/modalities/__init__.py),
that supplies the rest:

the run (pipelines/preprocess.py, pipelines/options.py, transforms/core/)
    its flags and their checks, its split rules, the input check on the
    launching machine, the stages that turn its inputs into examples and
    records, its manifest section and its quality-gate rules;
the dataset (pipelines/validate.py, pipelines/reader.py,
transforms/validation/)
    everything that reads a published dataset gets only the manifest, so
    these methods take the manifest: record checks and statistics, the
    probes of the exported transform, dataset-level checks, what leakage
    means for its data, the report's samples and sections, and how the
    reader applies the transform.

The dataset-side code of a modality lives in its `checks.py` and its run
code in the other modules of its folder; `modality.py` ties them to this
interface. Methods a modality does not need keep the defaults here.
"""

import importlib
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

from transforms.core import flags


class Modality:
  """Base class of the modality plug-ins (one instance per modality)."""

  # Its --modality value and the key of its manifest section.
  name: str = ''
  # Whether every run's config JSON holds its section, null when another
  # modality runs (the first three modalities, as they always have: config
  # hashes of earlier datasets stay comparable); others add only their own.
  config_section_always: bool = False
  # --name when none is given (shards are <name>-<split>.tfrecord-...).
  default_dataset_name: str = ''
  # Completes "--input is required: " when --input is missing.
  input_help: str = ''
  # --normalization values it accepts; the first is the default.
  normalizations: Tuple[str, ...] = ('none',)
  # Threads running tf.Transform's analysis graph (core/analysis.py): 2 only
  # when every analyzer's input is exact in any order of summing (counts);
  # float statistics come out different in the last bits with 2.
  analysis_threads: int = 1

  # ------------------------------------------------------------ the run --

  def add_arguments(self, add) -> None:
    """Declares the flags only this modality reads (`add` is argparse's
    add_argument). Flags several modalities read live in
    pipelines/options.py."""

  def settings(self, options) -> Any:
    """Its checked settings: a frozen dataclass with `to_json()`.

    Args:
      options: The parsed PreprocessOptions.

    Raises:
      UsageError: A flag it cannot use; one sentence.
    """
    raise NotImplementedError

  def normalization(self, value: Optional[str]) -> str:
    """The checked --normalization (None: not given)."""
    return flags.choice('normalization', value or self.normalizations[0],
                        self.normalizations)

  # Why --splits from_input does not apply ('' when it does).
  from_input_refusal: str = ''

  def split_names(self, settings, ratio_names: Sequence[str]) -> List[str]:
    """The splits a run writes when --splits gives ratios."""
    del settings
    return list(ratio_names)

  def ratios_decide_splits(self, settings) -> bool:
    """Whether --splits ratios decide the splits (not, say, time
    cut-offs)."""
    del settings
    return True

  def train_statistics_need(self, settings, normalization: str
                            ) -> Optional[str]:
    """What needs a train split to compute its statistics on (such as
    '--normalization zscore'), or None."""
    del settings
    if normalization in ('zscore', 'minmax'):
      return f'--normalization {normalization}'
    return None

  def default_compression(self, settings) -> str:
    """--compression auto: 'gzip' where the records compress well, else
    'none'."""
    del settings
    return 'none'

  def default_workers(self, cpus: int, cfg) -> int:
    """DirectRunner workers when --workers is not given."""
    del cpus, cfg
    return 1

  def worker_modules(self, cfg, plan) -> Sequence[str]:
    """The modules of the local worker processes (runtime/processes.py) the
    run's DoFns will use with cfg.local_processes processes, when the
    launching process can tell from the plan that they will (then it
    starts them early, see processes.start_early); else ()."""
    del cfg, plan
    return ()

  def head_start(self, cfg, plan) -> None:
    """Called once start_early has started the worker_modules processes:
    starts there the first calls of the run's pooled DoFn
    (processes.start_head), when they can be known before the pipeline
    runs; else does nothing."""
    del cfg, plan

  def check_input(self, cfg) -> Any:
    """Checks the input on the launching machine, before anything is
    written, and returns what the pipeline needs to know of it (the plan).

    Raises:
      UsageError: The input cannot be used at all; one sentence.
    """
    raise NotImplementedError

  # Whether its examples have a content key (core/contents.py): then the
  # splits are keyed by content by default, and label conflicts and
  # duplicates are found. Otherwise content_refusal says why not.
  content_keyed: bool = False
  content_refusal: str = ''

  # Whether its near-duplicate examples are found and grouped into one
  # split (core/near_duplicates.py; needs content_keyed), how messages name
  # its data ("images", "text"), and the near-duplicate flags only it
  # reads (pipelines/options.py declares them; other modalities refuse
  # them).
  groups_near_duplicates: bool = False
  data_noun: str = ''
  near_duplicate_flags: FrozenSet[str] = frozenset()

  def near_duplicate_rules(self, mode: str, options):
    """The run's near_duplicates.NearDuplicateRules: `mode` is the checked
    --near_duplicates, `options` the parsed PreprocessOptions (its own
    near_duplicate_flags are read from them).

    Raises:
      UsageError: A distance out of range; one sentence.
    """
    raise NotImplementedError

  def near_duplicate_rules_of(self, given: dict):
    """The NearDuplicateRules a published dataset was written with, from
    the 'near_duplicates' entry of its config ({} for one written before
    that entry: the defaults)."""
    raise NotImplementedError

  def input_is_table(self, path: str) -> Optional[bool]:
    """Whether `path` names one table file listing the inputs (True), no
    table at all (False), or None when the input is a table, a pattern or
    a folder of tables, or a folder of other files (any modality whose
    inputs are table rows)."""
    del path
    return None

  # Features that say which example a record is, not what it holds (left
  # out of the content hash that finds leaks and duplicates), besides the
  # id, label and weight every record has.
  identity_features: FrozenSet[str] = frozenset()
  # Feature statistics that differ between train and the other splits by
  # construction (not compared for drift).
  drift_exempt: FrozenSet[str] = frozenset()
  # What makes two records one example, as the report's duplicate and
  # label-conflict checks say it ("no two records of a split have ...").
  same_example: str = 'the same content'

  # Its values that FinalizeDataset hands to manifest_section, by name
  # (outputs of its ReadInputs or BuildRecords): True for one value, False
  # for a list.
  manifest_values: Dict[str, bool] = {}

  def progress(self, cfg, plan):
    """What the progress line measures while the run goes: a
    runtime/progress.Measure (done of total from its progress counters), or
    None for no progress line. Called on the launching machine after
    check_input."""
    del cfg, plan
    return None

  def read_inputs(self, cfg, plan):
    """The skeleton's ReadInputs stage: a PTransform from the pipeline's
    start to the dict core/skeleton.py describes."""
    raise NotImplementedError

  def analysis(self, cfg, plan) -> Tuple[Any, Any]:
    """(the tf.Transform input schema of the analysis input, as a
    DatasetMetadata or TensorAdapterConfig; its preprocessing_fn)."""
    raise NotImplementedError

  def build_records(self, cfg, plan, staging: str, transform):
    """The skeleton's BuildRecords stage: a PTransform from ReadInputs'
    dict to the record lists of each split and the class counts (see
    core/skeleton.py); `transform` is a core.skeleton.Transform."""
    raise NotImplementedError

  def feature_spec(self, cfg, plan) -> dict:
    """The stored features: {key: {'dtype', 'shape'}}."""
    raise NotImplementedError

  def manifest_section(self, cfg, values: dict, splits: dict
                       ) -> Tuple[dict, dict]:
    """(its manifest section, the manifest's normalization entry); may add
    per-split entries to `splits`.

    Args:
      cfg: The PreprocessConfig.
      values: The side inputs FinalizeDataset collected.
      splits: The manifest's split entries, being built.
    """
    raise NotImplementedError

  def split_failures(self, name: str, split: dict) -> List[str]:
    """Its quality-gate rules for one split's manifest entry: reasons not
    to publish (default: the inputs are the examples plus the dead
    letters)."""
    if split['inputs'] != split['examples'] + split['dead_lettered']:
      return [f'the {name} split has {split["inputs"]} inputs but '
              f'{split["examples"]} examples and {split["dead_lettered"]} '
              'dead letters']
    return []

  def dataset_failures(self, manifest: dict) -> List[str]:
    """Its quality-gate rules for the whole dataset."""
    del manifest
    return []

  def tfds_feature(self, key: str, entry: dict, manifest: dict):
    """The TFDS feature of one of its stored features (such as
    `tfds.features.Image`), or None for the generic mapping."""
    del key, entry, manifest
    return None

  def tfds_input_features(self, manifest: dict):
    """What TFDS's `as_supervised=True` pairs with the label: a feature
    name or a {name: name} dict; None when there is no such input."""
    raise NotImplementedError

  def statistics_analyzed(self, manifest: dict) -> int:
    """How many examples the normalization statistics were computed on."""
    raise NotImplementedError

  # -------------------------------------------------------- the dataset --
  #
  # Each is a function of the same name in the module `checks_module`
  # (the modality's checks.py), imported only when a dataset is read, so
  # that a preprocessing run does not load the validation code.

  checks_module: str = ''

  def _checks(self):
    return importlib.import_module(self.checks_module)

  def check_values(self, values: Dict[str, list], manifest: dict, out: dict,
                   stats) -> None:
    """Checks a parsed record's own features (label, id and the feature
    spec are checked already) and adds its statistics to `stats`.

    Args:
      values: Feature name -> the record's values.
      manifest: The dataset's manifest.
      out: The record's summary (see validation/shard_checks.check_record);
        a modality sets what its later checks read (such as 'image',
        'values', 'exact', the pixel sums, or the 'observation',
        'recording' and 'time_range' its leakage_checks use).
      stats: The shard's FeatureStats, or None.

    Raises:
      ValueError: The record is wrong; the message says how.
    """
    self._checks().check_values(values, manifest, out, stats)

  def leakage_checks(self, manifest: dict, by_split: Dict[str, List[dict]],
                     content: dict, recordings: Optional[dict]
                     ) -> List[dict]:
    """The report's leakage checks: what an example in two splits means
    for its data. The default (images, texts) fails on a content in two
    splits; a modality whose equal contents can be distinct observations
    says what a leak is instead (sensor: a recording or time range in two
    splits).

    Args:
      manifest: The dataset's manifest.
      by_split: Split -> its shards' check_shard results (with their
        'time_range').
      content: dataset_checks.content_findings of all records.
      recordings: dataset_checks.recording_findings of the records'
        'recording' (see check_values), or None when not computed.

    Returns:
      The check entries, each {'check', 'status', 'detail'}.
    """
    del manifest, by_split, recordings
    from transforms.validation import entries  # pylint: disable=import-outside-toplevel
    checks = entries.content_leakage(content)
    # Near-duplicates in two splits, when validation compared them.
    if content.get('near_duplicates') is not None:
      checks += entries.near_duplicate_leakage(content['near_duplicates'])
    return checks

  def compares_near_duplicates(self, manifest: dict) -> bool:
    """Whether validation finds the dataset's near-duplicates again from
    its stored records (the checks module's record checks then give each
    record's 'near' entry): only when the records keep what the run
    compared (pictures, not normalized floats; texts, not only token
    ids)."""
    compares = getattr(self._checks(), 'compares_near_duplicates', None)
    return bool(compares and compares(manifest))

  def signed_near_duplicates(self, near: list, manifest: dict) -> list:
    """A shard's near-duplicate entries (shard_checks.check_shard) as
    core/near_duplicates compares them: as the checks module's
    sign_near_duplicates signs them (text: each document's text replaced by
    its signature, a shard's documents at once), or as the record checks
    gave them (image: signed already)."""
    sign = getattr(self._checks(), 'sign_near_duplicates', None)
    return sign(near, manifest) if sign else near

  def near_duplicate_report(self, near: dict, output: str,
                            manifest: dict) -> dict:
    """What the report says of the near-duplicates validation found
    (dataset_checks.near_duplicate_findings): as found, or as the checks
    module's near_duplicate_report completes them (image: thumbnails of
    the listed groups' members for the HTML report)."""
    report = getattr(self._checks(), 'near_duplicate_report', None)
    return report(near, output, manifest) if report else near

  def gathers_series(self, manifest: dict) -> bool:
    """Whether validation gathers each recording's records to check them
    in order (the checks module has series_findings: sensor)."""
    del manifest
    return hasattr(self._checks(), 'series_findings')

  def series_findings(self, recording: str, points, manifest: dict) -> dict:
    """One recording's findings from its records' out['series'] points."""
    return self._checks().series_findings(recording, points, manifest)

  def merge_series_findings(self, parts) -> dict:
    """All recordings' findings merged (a CombineGlobally function)."""
    return self._checks().merge_series_findings(parts)

  def series_checks(self, manifest: dict, series: Optional[dict]
                    ) -> List[dict]:
    """The report's checks of each recording's records in order (sensor:
    an entity's windows or rows, by their times and places), from what
    the validation pipeline gathered of them; none when it gathered
    nothing (modalities whose records are no series).

    Args:
      manifest: The dataset's manifest.
      series: The checks module's merge_series_findings of the records'
        out['series'] (see check_values), or None when not gathered.

    Returns:
      The check entries, each {'check', 'status', 'detail'}.
    """
    if series is None:
      return []
    return self._checks().series_checks(manifest, series)

  def report_summary(self, manifest: dict) -> Dict[str, Any]:
    """What the JSON report repeats of the manifest for its readers
    ({key: value}, such as the sensor's time shape); optional in a checks
    module, and nothing without it."""
    summary = getattr(self._checks(), 'report_summary', None)
    return summary(manifest) if summary else {}

  def report_sample(self, info: dict, manifest: dict) -> dict:
    """A record kept as a sample for the report (`info` is its summary)."""
    return self._checks().report_sample(info, manifest)

  def html_sections(self, report: dict, manifest: Optional[dict]) -> str:
    """Its sections of the HTML report (samples, histograms), as HTML."""
    return self._checks().html_sections(report, manifest)

  def check_transform(self, output: str, manifest: dict) -> dict:
    """Feeds the exported transform probes built from the manifest.

    Returns:
      {'ok': bool, 'detail': str}.
    """
    return self._checks().check_transform(output, manifest)

  def dataset_checks(self, manifest: dict, by_split: dict) -> List[dict]:
    """Its checks of the whole dataset, each {'check', 'status',
    'detail'}, from the manifest and the shard results of each split."""
    return self._checks().dataset_checks(manifest, by_split)

  def supervised_feature(self, manifest: dict):
    """What `load_dataset(..., as_supervised=True)` pairs with the label:
    a feature name, or a function of the parsed features."""
    return self._checks().supervised_feature(manifest)

  def read_transform(self, output: str, manifest: dict):
    """A function for `tf.data.Dataset.map` that applies the exported
    transform when reading, or None when the records are stored
    transformed."""
    return self._checks().read_transform(output, manifest)
