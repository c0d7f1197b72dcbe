"""The text modality: labelled documents -> token ids or term weights."""

from typing import Optional

from transforms.core.errors import UsageError
from transforms.modalities.base import Modality


class TextModality(Modality):
  """CSV/TSV/JSONL tables of documents, or folders of .txt files."""

  name = 'text'
  config_section_always = True
  content_keyed = True
  groups_near_duplicates = True
  data_noun = 'text'
  near_duplicate_flags = frozenset({'--near_duplicate_similarity'})
  default_dataset_name = 'text'
  input_help = ('a CSV, TSV or JSONL file (or a pattern of them), or a '
                'folder of class folders of .txt files.')
  from_input_refusal = ('--splits from_input is for images; documents are '
                        'split by a hash of their text (or of their id, '
                        'with --split_key id).')
  checks_module = 'transforms.modalities.text.checks'
  # Its analyzers count (token and label vocabularies, tf-idf's document
  # frequencies): exact in any order, so two analysis graphs run at once.
  analysis_threads = 2
  # The vocabulary comes from the training split: its OOV share is ~0.
  drift_exempt = frozenset({'oov_share'})
  # What its manifest_section reads (True: one value; False: a list).
  manifest_values = {'vocabulary_size': True, 'input_kind': True,
                     'text_stats': False}

  def add_arguments(self, add) -> None:
    from transforms.modalities.text import options  # pylint: disable=import-outside-toplevel
    options.add_arguments(add)

  def settings(self, options):
    from transforms.modalities.text import options as text_options  # pylint: disable=import-outside-toplevel
    return text_options.settings(options)

  def near_duplicate_rules(self, mode, options):
    from transforms.modalities.text import options as text_options  # pylint: disable=import-outside-toplevel
    return text_options.near_duplicate_rules(mode, options)

  def near_duplicate_rules_of(self, given):
    from transforms.modalities.text import options as text_options  # pylint: disable=import-outside-toplevel
    return text_options.near_duplicate_rules_of(given)

  def normalization(self, value: Optional[str]) -> str:
    if value not in (None, 'none'):
      raise UsageError('--normalization does not apply to text (documents '
                       'become token ids).')
    return 'none'

  def train_statistics_need(self, settings, normalization):
    return 'the text vocabulary'

  def check_input(self, cfg):
    from transforms.modalities.text import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.check_input(cfg)

  def worker_modules(self, cfg, plan):
    from transforms.modalities.text import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.worker_modules(cfg, plan)

  def progress(self, cfg, plan):
    from transforms.modalities.text import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.progress_measure(cfg, plan)

  def read_inputs(self, cfg, plan):
    from transforms.modalities.text import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.ReadDocuments(cfg, plan)

  def analysis(self, cfg, plan):
    from transforms.modalities.text import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.analysis(cfg)

  def build_records(self, cfg, plan, staging, transform):
    from transforms.modalities.text import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.BuildTextRecords(cfg, plan, staging, transform)

  def feature_spec(self, cfg, plan) -> dict:
    from transforms.modalities.text import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.feature_spec(cfg)

  def manifest_section(self, cfg, values, splits):
    from transforms.modalities.text import manifest_section  # pylint: disable=import-outside-toplevel
    return manifest_section.manifest_section(cfg, values, splits)

  def tfds_input_features(self, manifest):
    if 'token_ids' in manifest['feature_spec']:
      return 'token_ids'
    # bag-of-words / tf-idf: the term ids and their weights.
    return {'term_ids': 'term_ids', 'term_weights': 'term_weights'}

  def statistics_analyzed(self, manifest: dict) -> int:
    # The vocabulary, not a normalization, is what text analyzes.
    return 0


MODALITY = TextModality()
