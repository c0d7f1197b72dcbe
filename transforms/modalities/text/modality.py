"""The text modality plug-in (see transforms/modalities/base.py)."""

from transforms.modalities.base import Modality


class TextModality(Modality):
  """Labelled text inputs -> text examples."""

  name = 'text'
  default_dataset_name = 'text'
  checks_module = 'transforms.modalities.text.checks'


MODALITY = TextModality()
