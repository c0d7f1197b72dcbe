"""The sensor modality plug-in (see transforms/modalities/base.py)."""

from transforms.modalities.base import Modality


class SensorModality(Modality):
  """Labelled sensor inputs -> sensor examples."""

  name = 'sensor'
  default_dataset_name = 'sensor'
  checks_module = 'transforms.modalities.sensor.checks'


MODALITY = SensorModality()
