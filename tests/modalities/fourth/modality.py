"""A fourth modality, kept in the tests: labelled numbers.

It proves that a modality is one folder and one registry line: the tests
register it with `monkeypatch.setitem(modalities._REGISTRY, 'numbers',
'modalities.fourth.modality')` and run it end to end. A CSV file of rows
`id,value,label`; each row is one example, split by a hash of its id; the
record holds the value z-scored by tf.Transform over the training split.
"""

import dataclasses

from transforms.core.errors import UsageError
from transforms.modalities.base import Modality


@dataclasses.dataclass(frozen=True)
class NumbersConfig:
  """The checked settings of a numbers run."""
  id_column: str
  value_column: str
  label_column: str

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


class NumbersModality(Modality):
  """CSV rows of an id, a number and a label."""

  name = 'numbers'
  default_dataset_name = 'numbers'
  input_help = 'a CSV file (or a pattern of them) of id, value and label.'
  normalizations = ('zscore',)
  from_input_refusal = ('--splits from_input is for images; numbers are '
                        'split by a hash of their id.')
  content_refusal = 'numbers are split by a hash of their id.'
  checks_module = 'modalities.fourth.checks'
  manifest_values = {'train_stats': True}

  def add_arguments(self, add) -> None:
    add('--id_column', default='id',
        help='Numbers: the column of the example ids. Default: id.')
    add('--value_column', default='value',
        help='Numbers: the column of the values. Default: value.')

  def settings(self, options) -> NumbersConfig:
    names = [str(getattr(options, flag)).strip() for flag in (
        'id_column', 'value_column', 'label_column')]
    if len(set(names)) < 3:
      raise UsageError('--id_column, --value_column and --label_column must '
                       f'name three different columns (got {names}).')
    return NumbersConfig(*names)

  def check_input(self, cfg):
    from modalities.fourth import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.check_input(cfg)

  def read_inputs(self, cfg, plan):
    from modalities.fourth import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.ReadNumbers(cfg, plan)

  def analysis(self, cfg, plan):
    from modalities.fourth import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.analysis()

  def build_records(self, cfg, plan, staging, transform):
    from modalities.fourth import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.BuildNumberRecords(cfg, plan, staging, transform)

  def feature_spec(self, cfg, plan) -> dict:
    from modalities.fourth import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.feature_spec(cfg)

  def manifest_section(self, cfg, values, splits):
    from modalities.fourth import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.manifest_section(cfg, values)

  def tfds_input_features(self, manifest):
    return 'value'

  def statistics_analyzed(self, manifest: dict) -> int:
    return manifest['normalization']['rows_analyzed']


MODALITY = NumbersModality()
