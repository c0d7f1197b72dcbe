"""The modality plug-ins, by name: the only place that lists them.

    from transforms import modalities
    modality = modalities.get('image')       # for --modality image
    modality = modalities.of_manifest(m)     # for a published dataset

A modality is a folder here (image/, text/, sensor/) whose `modality.py`
defines a `MODALITY` object (see base.py for what it supplies). Adding one
means adding its folder and one line to `_REGISTRY`. Plug-ins are imported
on first use, so a text run never imports the image code.
"""

import importlib
from typing import Tuple

from transforms.modalities.base import Modality

# --modality value -> module that defines MODALITY.
_REGISTRY = {
    'image': 'transforms.modalities.image.modality',
    'text': 'transforms.modalities.text.modality',
    'sensor': 'transforms.modalities.sensor.modality',
}


# --modality when none is given, and the modality of manifests written
# before the 'modality' key existed.
DEFAULT = 'image'


def names() -> Tuple[str, ...]:
  """The registered modalities, in registration order."""
  return tuple(_REGISTRY)


def get(name: str) -> Modality:
  """The plug-in registered as `name`.

  Raises:
    KeyError: No modality of that name.
  """
  return importlib.import_module(_REGISTRY[name]).MODALITY


def of_manifest(manifest: dict) -> Modality:
  """The plug-in that wrote a published dataset (manifests written before
  the 'modality' key existed are image datasets)."""
  return get(manifest.get('modality', DEFAULT))
