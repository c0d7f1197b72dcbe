"""The sensor modality: timestamped rows -> rows or windows of channels."""

from typing import List

from transforms.modalities.base import Modality


class SensorModality(Modality):
  """CSV/TSV/JSONL/Parquet rows: timestamp, entity, channels, label."""

  name = 'sensor'
  config_section_always = True
  default_dataset_name = 'sensor'
  input_help = ('a CSV, TSV, JSONL or Parquet file, or a folder or '
                'pattern of them.')
  normalizations = ('zscore', 'minmax', 'none')
  from_input_refusal = ('--splits from_input is for images; sensor rows are '
                        'split by --split_by hash, entity or time.')
  checks_module = 'transforms.modalities.sensor.checks'
  content_keyed = False
  content_refusal = ('sensor rows and windows are split by --split_by, and '
                     'equal rows of different times are distinct '
                     'observations, not copies.')
  identity_features = frozenset({'entity', 'time', 'start_time',
                                 'end_time'})
  # Equal values at two times (or of two entities) are two observations.
  same_example = 'the same values, entity and time'
  # What its manifest_section reads (True: one value; False: a list).
  manifest_values = {
      'train_stats': True, 'columns': True, 'counts': False,
      'entity_stats': False, 'formed': False, 'rows_windowed': False,
      'time_counts': False, 'shapes': False}

  def add_arguments(self, add) -> None:
    from transforms.modalities.sensor import options  # pylint: disable=import-outside-toplevel
    options.add_arguments(add)

  def settings(self, options):
    from transforms.modalities.sensor import options as sensor_options  # pylint: disable=import-outside-toplevel
    return sensor_options.settings(options)

  def split_names(self, settings, ratio_names) -> List[str]:
    if settings.split_by == 'time':
      return list(settings.time_split_names)
    return list(ratio_names)

  def ratios_decide_splits(self, settings) -> bool:
    return settings.split_by != 'time'

  def train_statistics_need(self, settings, normalization):
    if normalization in ('zscore', 'minmax'):
      return f'--normalization {normalization}'
    if settings.missing == 'impute':
      return '--missing impute'
    if settings.bucketize > 0:
      return '--bucketize'
    return None

  def check_input(self, cfg):
    from transforms.modalities.sensor import inputs  # pylint: disable=import-outside-toplevel
    return inputs.check_input(cfg)

  def worker_modules(self, cfg, plan):
    from transforms.modalities.sensor import inputs  # pylint: disable=import-outside-toplevel
    return inputs.worker_modules(cfg, plan)

  def progress(self, cfg, plan):
    from transforms.modalities.sensor import inputs  # pylint: disable=import-outside-toplevel
    return inputs.progress_measure(cfg, plan)

  def read_inputs(self, cfg, plan):
    from transforms.modalities.sensor import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.ReadRows(cfg, plan)

  def analysis(self, cfg, plan):
    from transforms.modalities.sensor import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.analysis(cfg, plan)

  def build_records(self, cfg, plan, staging, transform):
    from transforms.modalities.sensor import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.BuildSensorRecords(cfg, plan, staging, transform)

  def feature_spec(self, cfg, plan) -> dict:
    from transforms.modalities.sensor import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.feature_spec(cfg, plan)

  def manifest_section(self, cfg, values, splits):
    from transforms.modalities.sensor import manifest_section  # pylint: disable=import-outside-toplevel
    return manifest_section.manifest_section(cfg, values, splits)

  def split_failures(self, name: str, split: dict) -> List[str]:
    problems = []
    used = split['rows_used'] + split['rows_dropped'] + split.get(
        'duplicates_dropped', 0)
    if split['inputs'] != used + split['dead_lettered']:
      problems.append(
          f'the {name} split has {split["inputs"]} inputs but {used} rows '
          f'used, dropped or repeated and {split["dead_lettered"]} dead '
          'letters')
    formed = split.get('rows_windowed', split['examples'])
    if formed != split['rows_used']:
      problems.append(
          f'the {name} split has {split["rows_used"]} usable rows but '
          f'{formed} reached the example builder')
    return problems

  def dataset_failures(self, manifest: dict) -> List[str]:
    sensor = manifest['sensor']
    problems = _empty_channels(manifest)
    if not sensor['window_length']:
      return problems
    w = sensor['windows']
    if w['expected'] != w['formed']:
      problems.append(
          f'{w["expected"]} windows follow from the segments of each entity '
          f'but {w["formed"]} were formed')
    if not w['expected']:
      problems.append(_no_windows(sensor))
    return problems

  def leakage_checks(self, manifest, by_split, content, recordings):
    """A recording (entity) or time range in two splits fails, as
    --split_by decides; equal values in two splits are information."""
    return self._checks().leakage_checks(manifest, by_split, content,
                                         recordings)

  def tfds_input_features(self, manifest):
    return 'values'

  def statistics_analyzed(self, manifest: dict) -> int:
    return manifest['normalization'].get('rows_analyzed', 0)


def _no_windows(sensor: dict) -> str:
  """Why no window could be made, in one sentence."""
  length = sensor['window_length']
  longest = sensor.get('longest_segment', sensor['longest_entity_rows'])
  if longest >= length:
    return (f'every window of {length} rows spans more time than '
            f'{length} samples and one gap (--max_gap) allow, so none was '
            'kept; see sensor.time in the manifest')
  if longest < sensor['longest_entity_rows']:
    return (f'no entity has {length} rows (--window_length) without a gap '
            f'longer than --max_gap ({sensor.get("max_gap", "auto")}): the '
            f'longest gap-free stretch has {longest} rows, the longest '
            f'entity {sensor["longest_entity_rows"]}')
  return (f'no entity has the {length} rows --window_length asks for '
          f'(the longest has {sensor["longest_entity_rows"]})')


def _empty_channels(manifest: dict) -> List[str]:
  """A channel with no value in the training split has nothing to impute
  or normalize with: published, it would be NaN (or a made-up 0) in every
  record."""
  stats = (manifest.get('normalization') or {}).get('per_channel') or {}
  if not manifest['normalization'].get('rows_analyzed'):
    return []  # no training rows: refused for that already
  empty = [name for name, s in stats.items() if not s.get('count')]
  if not empty:
    return []
  return [f'the channel{"s" if len(empty) > 1 else ""} {", ".join(empty)} '
          f'{"have" if len(empty) > 1 else "has"} no value in the training '
          f'split (every row is empty or NaN), so there is nothing to '
          f'{"impute or " if manifest["sensor"]["missing"] == "impute" else ""}'
          'normalize with; leave it out of --channels or fix the input']


MODALITY = SensorModality()
