"""The image modality plug-in (see transforms/modalities/base.py)."""

from transforms.modalities.base import Modality


class ImageModality(Modality):
  """Labelled image inputs -> image examples."""

  name = 'image'
  default_dataset_name = 'images'
  checks_module = 'transforms.modalities.image.checks'


MODALITY = ImageModality()
